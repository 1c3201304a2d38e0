//! Sizes as products, the form in which sizes are compared and divided symbolically.
//!
//! A [`Product`] is `coefficient · Π atom^power`. An atom is a symbol or any size that is not
//! a product of others: a sum with no common factor, a floor division that does not divide
//! out, a `min`. Sums give up their common factor (`2*s + 2` is `2·(s + 1)`) and floor
//! divisions that divide exactly disappear (`(64*s) // 4` is `16·s`), so that sizes the
//! exporter writes in different forms have one product. Two sizes are the same when their
//! products are equal, and one divides another when every atom of the divisor is in it as
//! often and the coefficients divide: this is how a view maps dims by their factors.

use std::collections::BTreeMap;

use super::SymExpr;

/// The most times one atom may repeat in a product (`s^64`); beyond it the size is an atom.
const MAX_POWER: u32 = 64;

/// `coefficient · Π atom^power` (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Product {
    coefficient: i64,
    atoms: BTreeMap<SymExpr, u32>,
}

impl Product {
    /// A constant.
    pub fn constant(c: i64) -> Product {
        Product { coefficient: c, atoms: BTreeMap::new() }
    }

    fn atom(e: SymExpr) -> Product {
        Product { coefficient: 1, atoms: BTreeMap::from([(e, 1)]) }
    }

    /// The product form of `e`; `None` where a coefficient overflows.
    pub fn of(e: &SymExpr) -> Option<Product> {
        match e.simplify() {
            SymExpr::Int(v) => Some(Product::constant(v)),
            SymExpr::Mul(xs) => xs.iter().try_fold(Product::constant(1), |acc, x| acc.times(&Product::of(x)?)),
            SymExpr::Pow(base, exp) => match exp.as_const().and_then(|n| u32::try_from(n).ok()) {
                Some(n) if n <= MAX_POWER => {
                    let base = Product::of(&base)?;
                    (0..n).try_fold(Product::constant(1), |acc, _| acc.times(&base))
                }
                _ => Some(Product::atom(SymExpr::Pow(base, exp))),
            },
            SymExpr::FloorDiv(a, b) => {
                let quotient = Product::of(&a)?.over(&Product::of(&b)?);
                Some(quotient.unwrap_or_else(|| Product::atom(SymExpr::FloorDiv(a, b))))
            }
            SymExpr::Add(terms) => Some(Product::sum(terms)),
            other => Some(Product::atom(other)),
        }
    }

    /// A sum with its common constant factor taken out: `2*s + 2` is `2·(s + 1)`.
    fn sum(terms: Vec<SymExpr>) -> Product {
        // Each term as its constant factor and the rest (the canonical form puts it first).
        let split: Vec<(i64, SymExpr)> = terms
            .iter()
            .map(|t| match t {
                SymExpr::Int(c) => (*c, SymExpr::Int(1)),
                SymExpr::Mul(f) => match f.split_first() {
                    Some((SymExpr::Int(c), rest)) => (*c, SymExpr::Mul(rest.to_vec())),
                    _ => (1, t.clone()),
                },
                other => (1, other.clone()),
            })
            .collect();
        let common = split.iter().fold(0, |g, (c, _)| gcd(g, *c));
        if common <= 1 {
            return Product::atom(SymExpr::Add(terms));
        }
        let rest = split.into_iter().map(|(c, rest)| SymExpr::Mul(vec![SymExpr::Int(c / common), rest]));
        Product { coefficient: common, atoms: BTreeMap::from([(SymExpr::Add(rest.collect()).simplify(), 1)]) }
    }

    /// `self · other`; `None` on overflow.
    pub fn times(&self, other: &Product) -> Option<Product> {
        let coefficient = self.coefficient.checked_mul(other.coefficient)?;
        if coefficient == 0 {
            return Some(Product::constant(0));
        }
        let mut atoms = self.atoms.clone();
        for (a, p) in &other.atoms {
            let power = atoms.entry(a.clone()).or_insert(0);
            *power = power.checked_add(*p)?;
        }
        Some(Product { coefficient, atoms })
    }

    /// `self / divisor` when it divides exactly as products (every atom of `divisor` in `self`
    /// as often, the coefficient a multiple); `None` otherwise.
    pub fn over(&self, divisor: &Product) -> Option<Product> {
        if divisor.coefficient == 0 || self.coefficient % divisor.coefficient != 0 {
            return None;
        }
        let mut atoms = self.atoms.clone();
        for (a, p) in &divisor.atoms {
            let left = atoms.get(a).copied().unwrap_or(0).checked_sub(*p)?;
            if left == 0 {
                atoms.remove(a);
            } else {
                atoms.insert(a.clone(), left);
            }
        }
        Some(Product { coefficient: self.coefficient / divisor.coefficient, atoms })
    }

    /// The value when there are no atoms.
    pub fn as_const(&self) -> Option<i64> {
        self.atoms.is_empty().then_some(self.coefficient)
    }

    /// Back to an expression, in [`SymExpr::simplify`]'s canonical form.
    pub fn to_expr(&self) -> SymExpr {
        let mut factors = vec![SymExpr::Int(self.coefficient)];
        for (a, &p) in &self.atoms {
            factors.push(match p {
                1 => a.clone(),
                p => SymExpr::Pow(Box::new(a.clone()), Box::new(SymExpr::Int(i64::from(p)))),
            });
        }
        SymExpr::Mul(factors).simplify()
    }
}

impl SymExpr {
    /// True when `self` and `other` are the same size as products (see [`Product`]): `2*(s + 1)`
    /// and `2*s + 2`, `(64*s) // 4` and `16*s`; false where either overflows.
    pub fn same_size(&self, other: &SymExpr) -> bool {
        matches!((Product::of(self), Product::of(other)), (Some(a), Some(b)) if a == b)
    }
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a.unsigned_abs(), b.unsigned_abs());
    while b != 0 {
        (a, b) = (b, a % b);
    }
    i64::try_from(a).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> SymExpr {
        crate::ir::cursor::Cursor { rest: text }.sum(0).expect("parses")
    }

    fn product(text: &str) -> Product {
        Product::of(&parse(text)).expect("no overflow")
    }

    /// The forms the exporter writes for one size have one product.
    #[test]
    fn equal_sizes_written_differently_are_the_same() {
        assert!(parse("2*s0 + 2").same_size(&parse("2*(s0 + 1)")));
        assert!(parse("(64*s0) // 4").same_size(&parse("16*s0")));
        assert!(parse("s0*s1*4").same_size(&parse("4*s1*s0")));
        assert!(parse("s0^2").same_size(&parse("s0*s0")));
        assert!(!parse("s0 + 1").same_size(&parse("s0")));
        assert!(!parse("s0 // 2").same_size(&parse("s0")));
        assert!(!parse("s0").same_size(&parse("s1")));
    }

    /// Division is exact or nothing: a symbol never divides a constant, whatever its value.
    #[test]
    fn division_is_exact_as_products() {
        let q = product("64*s0*s1").over(&product("16*s1")).unwrap();
        assert_eq!(q.to_expr().to_string(), "4*s0");
        assert_eq!(product("16").over(&product("s0")), None);
        assert_eq!(product("6*s0").over(&product("4")), None);
        assert_eq!(product("2*s0 + 2").over(&product("s0 + 1")).and_then(|p| p.as_const()), Some(2));
        assert_eq!(product("s0 + 16").over(&product("16")), None);
        assert_eq!(product("s0").over(&product("0")), None);
    }

    #[test]
    fn overflow_is_none_not_a_panic() {
        let big = Product::constant(i64::MAX);
        assert_eq!(big.times(&big), None);
        assert_eq!(Product::of(&parse("s0^100")).unwrap().as_const(), None);
        assert_eq!(gcd(i64::MIN, 0), 1);
    }
}

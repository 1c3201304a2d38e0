//! Symbolic integer expressions over named symbols, as used by dynamic dimensions.
//!
//! The export writes sizes as sympy expressions (`Mul(Integer(64), Symbol('s70'))`); the
//! frontend parses them into [`SymExpr`]. The IR keeps them in a light canonical form
//! ([`SymExpr::simplify`]) so that equal sizes compare equal and print the same.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// An integer expression over symbols.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SymExpr {
    /// An integer literal.
    Int(i64),
    /// A symbol such as `s70`; its bounds live in the graph's symbol table.
    Sym(String),
    /// Sum of the terms.
    Add(Vec<SymExpr>),
    /// Product of the factors.
    Mul(Vec<SymExpr>),
    /// `base ^ exponent` (natural exponent).
    Pow(Box<SymExpr>, Box<SymExpr>),
    /// Floor division `a // b`.
    FloorDiv(Box<SymExpr>, Box<SymExpr>),
    /// Ceiling division.
    CeilDiv(Box<SymExpr>, Box<SymExpr>),
    /// Python modulo `a % b` (sign of the divisor).
    Mod(Box<SymExpr>, Box<SymExpr>),
    /// Largest of the arguments.
    Max(Vec<SymExpr>),
    /// Smallest of the arguments.
    Min(Vec<SymExpr>),
}

impl SymExpr {
    /// A symbol reference.
    pub fn sym(name: &str) -> SymExpr {
        SymExpr::Sym(name.to_string())
    }

    /// The value if the expression has no symbols.
    pub fn as_const(&self) -> Option<i64> {
        self.eval(&BTreeMap::new())
    }

    /// Evaluates with the given symbol values; `None` if a symbol is unbound or the
    /// arithmetic overflows or divides by zero.
    pub fn eval(&self, env: &BTreeMap<String, i64>) -> Option<i64> {
        let both = |a: &SymExpr, b: &SymExpr| Some((a.eval(env)?, b.eval(env)?));
        match self {
            SymExpr::Int(v) => Some(*v),
            SymExpr::Sym(s) => env.get(s).copied(),
            SymExpr::Add(xs) => xs.iter().try_fold(0i64, |acc, x| acc.checked_add(x.eval(env)?)),
            SymExpr::Mul(xs) => xs.iter().try_fold(1i64, |acc, x| acc.checked_mul(x.eval(env)?)),
            SymExpr::Pow(a, b) => {
                let (a, b) = both(a, b)?;
                a.checked_pow(u32::try_from(b).ok()?)
            }
            SymExpr::FloorDiv(a, b) => {
                let (a, b) = both(a, b)?;
                floor_div(a, b)
            }
            SymExpr::CeilDiv(a, b) => {
                let (a, b) = both(a, b)?;
                floor_div(a.checked_neg()?, b)?.checked_neg()
            }
            SymExpr::Mod(a, b) => {
                let (a, b) = both(a, b)?;
                python_mod(a, b)
            }
            SymExpr::Max(xs) => xs.iter().map(|x| x.eval(env)).collect::<Option<Vec<_>>>()?.into_iter().max(),
            SymExpr::Min(xs) => xs.iter().map(|x| x.eval(env)).collect::<Option<Vec<_>>>()?.into_iter().min(),
        }
    }

    /// `self` with the symbols of `values` replaced by their values and the rest kept, simplified.
    pub fn substitute(&self, values: &BTreeMap<String, i64>) -> SymExpr {
        match self {
            SymExpr::Sym(s) => values.get(s).map_or_else(|| self.clone(), |&v| SymExpr::Int(v)),
            _ => self.with_operands(|x| x.substitute(values)).simplify(),
        }
    }

    /// The same operation over its operands mapped by `f`.
    fn with_operands(&self, f: impl Fn(&SymExpr) -> SymExpr) -> SymExpr {
        let map = |xs: &[SymExpr]| xs.iter().map(&f).collect();
        let boxed = |x: &SymExpr| Box::new(f(x));
        match self {
            SymExpr::Int(_) | SymExpr::Sym(_) => self.clone(),
            SymExpr::Add(xs) => SymExpr::Add(map(xs)),
            SymExpr::Mul(xs) => SymExpr::Mul(map(xs)),
            SymExpr::Max(xs) => SymExpr::Max(map(xs)),
            SymExpr::Min(xs) => SymExpr::Min(map(xs)),
            SymExpr::Pow(a, b) => SymExpr::Pow(boxed(a), boxed(b)),
            SymExpr::FloorDiv(a, b) => SymExpr::FloorDiv(boxed(a), boxed(b)),
            SymExpr::CeilDiv(a, b) => SymExpr::CeilDiv(boxed(a), boxed(b)),
            SymExpr::Mod(a, b) => SymExpr::Mod(boxed(a), boxed(b)),
        }
    }

    /// `self` as `a*s + b` over one symbol `s` with `a ≥ 1` (a derived dim: `8*s52`,
    /// `2*s + 1`): `(s, a, b)`, read off its canonical form. `None` for anything else.
    pub fn linear(&self) -> Option<(&str, i64, i64)> {
        fn term(e: &SymExpr) -> Option<(&str, i64)> {
            match e {
                SymExpr::Sym(s) => Some((s.as_str(), 1)),
                SymExpr::Mul(f) => match f.as_slice() {
                    [SymExpr::Int(a), SymExpr::Sym(s)] if *a >= 1 => Some((s.as_str(), *a)),
                    _ => None,
                },
                _ => None,
            }
        }
        match self {
            SymExpr::Add(t) => match t.as_slice() {
                [one, SymExpr::Int(b)] => term(one).map(|(s, a)| (s, a, *b)),
                _ => None,
            },
            other => term(other).map(|(s, a)| (s, a, 0)),
        }
    }

    /// The value of the symbol of a [`linear`](SymExpr::linear) expression at which it equals
    /// `value`: `None` when no whole value of the symbol gives it.
    pub fn solve_linear(&self, value: i64) -> Option<i64> {
        let (_, a, b) = self.linear()?;
        let shifted = value.checked_sub(b)?;
        (shifted % a == 0).then(|| shifted / a)
    }

    /// Names of the symbols used, sorted and without repeats.
    pub fn symbols(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.collect_symbols(&mut out);
        out.sort();
        out.dedup();
        out
    }

    fn collect_symbols(&self, out: &mut Vec<String>) {
        match self {
            SymExpr::Int(_) => {}
            SymExpr::Sym(s) => out.push(s.clone()),
            SymExpr::Add(xs) | SymExpr::Mul(xs) | SymExpr::Max(xs) | SymExpr::Min(xs) => {
                xs.iter().for_each(|x| x.collect_symbols(out))
            }
            SymExpr::Pow(a, b) | SymExpr::FloorDiv(a, b) | SymExpr::CeilDiv(a, b) | SymExpr::Mod(a, b) => {
                a.collect_symbols(out);
                b.collect_symbols(out);
            }
        }
    }

    /// The least and greatest values `self` takes when every symbol lies in `ranges` (its
    /// inclusive `[min, max]`); `None` where a symbol is unbounded or the arithmetic overflows.
    pub fn range(&self, ranges: &BTreeMap<String, (i64, i64)>) -> Option<(i64, i64)> {
        let all = |xs: &[SymExpr]| xs.iter().map(|x| x.range(ranges)).collect::<Option<Vec<_>>>();
        match self {
            SymExpr::Int(v) => Some((*v, *v)),
            SymExpr::Sym(s) => ranges.get(s).copied(),
            SymExpr::Add(xs) => all(xs)?
                .into_iter()
                .try_fold((0i64, 0i64), |(lo, hi), (a, b)| Some((lo.checked_add(a)?, hi.checked_add(b)?))),
            SymExpr::Mul(xs) => all(xs)?.into_iter().try_fold((1i64, 1i64), |(lo, hi), (a, b)| {
                let corners = [lo.checked_mul(a)?, lo.checked_mul(b)?, hi.checked_mul(a)?, hi.checked_mul(b)?];
                Some((*corners.iter().min()?, *corners.iter().max()?))
            }),
            SymExpr::Min(xs) => {
                let r = all(xs)?;
                Some((r.iter().map(|x| x.0).min()?, r.iter().map(|x| x.1).min()?))
            }
            SymExpr::Max(xs) => {
                let r = all(xs)?;
                Some((r.iter().map(|x| x.0).max()?, r.iter().map(|x| x.1).max()?))
            }
            SymExpr::FloorDiv(a, b) => {
                let c = b.as_const().filter(|&c| c > 0)?;
                let (lo, hi) = a.range(ranges)?;
                Some((floor_div(lo, c)?, floor_div(hi, c)?))
            }
            _ => None,
        }
    }

    /// `self` with every `min`/`max` argument that the ranges show can never be the result left
    /// out: `min(256, s)` with `s ≤ 64` is `s`. The export writes such sizes (a clamp in the
    /// model) and checks them against the ranges it records.
    pub fn within(&self, ranges: &BTreeMap<String, (i64, i64)>) -> SymExpr {
        let pruned = |xs: Vec<SymExpr>, is_min: bool| {
            // An argument goes when another is always at least as small (min) or large (max).
            let mut kept: Vec<SymExpr> = vec![];
            for (i, x) in xs.iter().enumerate() {
                let beaten = xs.iter().enumerate().any(|(j, y)| {
                    let (Some(rx), Some(ry)) = (x.range(ranges), y.range(ranges)) else { return false };
                    let wins = if is_min { ry.1 <= rx.0 } else { ry.0 >= rx.1 };
                    // Of two that tie for certain, the first stays.
                    j != i && wins && !(ry == rx && rx.0 == rx.1 && j > i)
                });
                if !beaten {
                    kept.push(x.clone());
                }
            }
            match kept.len() {
                1 => kept.remove(0),
                _ if is_min => SymExpr::Min(kept),
                _ => SymExpr::Max(kept),
            }
        };
        let e = match self.with_operands(|x| x.within(ranges)) {
            SymExpr::Min(xs) => pruned(xs, true),
            SymExpr::Max(xs) => pruned(xs, false),
            other => other,
        };
        e.simplify()
    }

    /// A light canonical form: nested sums and products flattened, constants folded, a
    /// constant factor distributed over a sum, like terms of a sum collected (`2*s - s` is
    /// `s`), operands sorted. Equal sizes written differently by the exporter compare equal.
    pub fn simplify(&self) -> SymExpr {
        if let Some(v) = self.as_const() {
            return SymExpr::Int(v);
        }
        match self {
            SymExpr::Add(xs) => Self::fold_assoc(xs, true),
            SymExpr::Mul(xs) => Self::fold_assoc(xs, false),
            SymExpr::Max(xs) => SymExpr::Max(Self::sorted(xs)),
            SymExpr::Min(xs) => SymExpr::Min(Self::sorted(xs)),
            SymExpr::Pow(a, b) => SymExpr::Pow(Box::new(a.simplify()), Box::new(b.simplify())),
            SymExpr::FloorDiv(a, b) => SymExpr::FloorDiv(Box::new(a.simplify()), Box::new(b.simplify())),
            SymExpr::CeilDiv(a, b) => SymExpr::CeilDiv(Box::new(a.simplify()), Box::new(b.simplify())),
            SymExpr::Mod(a, b) => SymExpr::Mod(Box::new(a.simplify()), Box::new(b.simplify())),
            SymExpr::Int(_) | SymExpr::Sym(_) => self.clone(),
        }
    }

    fn sorted(xs: &[SymExpr]) -> Vec<SymExpr> {
        let mut v: Vec<SymExpr> = xs.iter().map(SymExpr::simplify).collect();
        v.sort();
        v
    }

    /// Flattens an associative-commutative operation, folding its constant operands.
    fn fold_assoc(xs: &[SymExpr], is_add: bool) -> SymExpr {
        let identity = i64::from(!is_add);
        let mut constant = identity;
        let mut rest = Vec::new();
        let mut stack: Vec<SymExpr> = xs.iter().map(SymExpr::simplify).collect();
        while let Some(x) = stack.pop() {
            match x {
                // A constant that would overflow stays a term of its own: no saturation.
                SymExpr::Int(v) => match if is_add { constant.checked_add(v) } else { constant.checked_mul(v) } {
                    Some(c) => constant = c,
                    None => rest.push(SymExpr::Int(v)),
                },
                SymExpr::Add(inner) if is_add => stack.extend(inner),
                SymExpr::Mul(inner) if !is_add => stack.extend(inner),
                other => rest.push(other),
            }
        }
        if !is_add && constant == 0 {
            return SymExpr::Int(0);
        }
        if !is_add && constant != 1 {
            if let [SymExpr::Add(terms)] = rest.as_slice() {
                let scaled = terms.iter().map(|t| SymExpr::Mul(vec![SymExpr::Int(constant), t.clone()])).collect();
                return SymExpr::Add(scaled).simplify();
            }
        }
        if is_add {
            rest = Self::collect_like_terms(rest);
        }
        rest.sort();
        // Constants go last in sums (`s70 + 1`) and first in products (`64*s70`).
        match constant {
            c if c == identity => {}
            c if is_add => rest.push(SymExpr::Int(c)),
            c => rest.insert(0, SymExpr::Int(c)),
        }
        match rest.len() {
            0 => SymExpr::Int(identity),
            1 => rest.remove(0),
            _ if is_add => SymExpr::Add(rest),
            _ => SymExpr::Mul(rest),
        }
    }

    /// The terms of a sum (simplified, constants already taken out) with equal terms up to a
    /// constant factor merged: `[2*s, s, -3*s]` is `[]`. Left as they are when a coefficient
    /// would overflow.
    fn collect_like_terms(terms: Vec<SymExpr>) -> Vec<SymExpr> {
        let split = |t: SymExpr| -> (i64, SymExpr) {
            match t {
                SymExpr::Mul(f) => match f.split_first() {
                    Some((SymExpr::Int(c), [one])) => (*c, one.clone()),
                    Some((SymExpr::Int(c), more)) => (*c, SymExpr::Mul(more.to_vec())),
                    _ => (1, SymExpr::Mul(f)),
                },
                other => (1, other),
            }
        };
        let mut coefficients: Vec<(SymExpr, i64)> = vec![];
        for (c, base) in terms.iter().cloned().map(split) {
            match coefficients.iter_mut().find(|(b, _)| *b == base) {
                Some((_, k)) => match k.checked_add(c) {
                    Some(sum) => *k = sum,
                    None => return terms,
                },
                None => coefficients.push((base, c)),
            }
        }
        coefficients
            .into_iter()
            .filter(|(_, c)| *c != 0)
            .map(|(base, c)| match (c, base) {
                (1, base) => base,
                (c, SymExpr::Mul(mut f)) => {
                    f.insert(0, SymExpr::Int(c));
                    SymExpr::Mul(f)
                }
                (c, base) => SymExpr::Mul(vec![SymExpr::Int(c), base]),
            })
            .collect()
    }

    fn precedence(&self) -> u8 {
        match self {
            SymExpr::Add(_) => 1,
            SymExpr::Mul(_) | SymExpr::FloorDiv(..) | SymExpr::Mod(..) => 2,
            SymExpr::Pow(..) => 3,
            _ => 4,
        }
    }

    fn fmt_operand(&self, f: &mut fmt::Formatter<'_>, parent: u8) -> fmt::Result {
        if self.precedence() <= parent {
            write!(f, "({self})")
        } else {
            write!(f, "{self}")
        }
    }

    fn fmt_joined(f: &mut fmt::Formatter<'_>, xs: &[SymExpr], sep: &str, prec: u8) -> fmt::Result {
        for (i, x) in xs.iter().enumerate() {
            if i > 0 {
                f.write_str(sep)?;
            }
            x.fmt_operand(f, prec)?;
        }
        Ok(())
    }

    fn fmt_call(f: &mut fmt::Formatter<'_>, name: &str, xs: &[&SymExpr]) -> fmt::Result {
        write!(f, "{name}(")?;
        for (i, x) in xs.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{x}")?;
        }
        f.write_str(")")
    }
}

/// Python's `a // b` (rounds toward negative infinity); `None` on division by zero or overflow.
pub fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    let inexact = a.checked_rem(b)? != 0;
    Some(if inexact && ((a < 0) != (b < 0)) { q - 1 } else { q })
}

/// Python's `a % b` (takes the sign of the divisor); `None` on division by zero or overflow.
pub fn python_mod(a: i64, b: i64) -> Option<i64> {
    let r = a.checked_rem(b)?;
    Some(if r != 0 && ((r < 0) != (b < 0)) { r + b } else { r })
}

/// Infix form: `s70`, `64*s70`, `s70 + 1`, `s70^2`, `s70 // 2`, `max(s70, 4)`.
impl fmt::Display for SymExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SymExpr::Int(v) => write!(f, "{v}"),
            SymExpr::Sym(s) => f.write_str(s),
            SymExpr::Add(xs) => {
                for (i, x) in xs.iter().enumerate() {
                    match x {
                        SymExpr::Int(v) if i > 0 && *v < 0 => write!(f, " - {}", v.unsigned_abs())?,
                        _ if i > 0 => {
                            f.write_str(" + ")?;
                            x.fmt_operand(f, 1)?;
                        }
                        _ => x.fmt_operand(f, 1)?,
                    }
                }
                Ok(())
            }
            SymExpr::Mul(xs) => Self::fmt_joined(f, xs, "*", 2),
            SymExpr::Pow(a, b) => {
                a.fmt_operand(f, 3)?;
                f.write_str("^")?;
                b.fmt_operand(f, 3)
            }
            SymExpr::FloorDiv(a, b) => {
                a.fmt_operand(f, 1)?;
                f.write_str(" // ")?;
                b.fmt_operand(f, 2)
            }
            SymExpr::Mod(a, b) => {
                a.fmt_operand(f, 1)?;
                f.write_str(" % ")?;
                b.fmt_operand(f, 2)
            }
            SymExpr::CeilDiv(a, b) => Self::fmt_call(f, "ceildiv", &[a, b]),
            SymExpr::Max(xs) => Self::fmt_call(f, "max", &xs.iter().collect::<Vec<_>>()),
            SymExpr::Min(xs) => Self::fmt_call(f, "min", &xs.iter().collect::<Vec<_>>()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s() -> SymExpr {
        SymExpr::sym("s70")
    }

    #[test]
    fn simplify_folds_and_orders() {
        let e = SymExpr::Mul(vec![SymExpr::Int(4), SymExpr::Mul(vec![s(), SymExpr::Int(16)])]);
        assert_eq!(e.simplify().to_string(), "64*s70");
        let e = SymExpr::Add(vec![s(), SymExpr::Int(1), SymExpr::Int(-1)]);
        assert_eq!(e.simplify(), s());
        // MPT's `min(2048, s)` within s <= 2048, as the exporter writes its key length.
        let neg = |e: SymExpr| SymExpr::Mul(vec![SymExpr::Int(-1), e]);
        let e = SymExpr::Add(vec![neg(SymExpr::Add(vec![neg(s()), SymExpr::Int(2048)])), SymExpr::Int(2048)]);
        assert_eq!(e.simplify(), s());
        let t = SymExpr::sym("s3");
        let e =
            SymExpr::Add(vec![SymExpr::Mul(vec![SymExpr::Int(2), s(), t.clone()]), neg(SymExpr::Mul(vec![t, s()]))]);
        assert_eq!(e.simplify().to_string(), "s3*s70");
        let e = SymExpr::Mul(vec![SymExpr::Int(3), SymExpr::Add(vec![s(), SymExpr::Int(1)])]);
        assert_eq!(e.simplify().to_string(), "3*s70 + 3");
    }

    #[test]
    fn eval_follows_python_division() {
        let env = BTreeMap::from([("s70".to_string(), -7)]);
        let fd = SymExpr::FloorDiv(Box::new(s()), Box::new(SymExpr::Int(2)));
        assert_eq!(fd.eval(&env), Some(-4));
        let md = SymExpr::Mod(Box::new(s()), Box::new(SymExpr::Int(3)));
        assert_eq!(md.eval(&env), Some(2));
        let cd = SymExpr::CeilDiv(Box::new(s()), Box::new(SymExpr::Int(2)));
        assert_eq!(cd.eval(&env), Some(-3));
        assert_eq!(SymExpr::Pow(Box::new(s()), Box::new(SymExpr::Int(2))).eval(&env), Some(49));
        assert_eq!(s().eval(&BTreeMap::new()), None);
    }

    #[test]
    fn eval_refuses_overflow_instead_of_panicking() {
        let int = |v| Box::new(SymExpr::Int(v));
        assert_eq!(SymExpr::FloorDiv(int(i64::MIN), int(-1)).as_const(), None);
        assert_eq!(SymExpr::CeilDiv(int(i64::MIN), int(3)).as_const(), None);
        assert_eq!(SymExpr::Mod(int(i64::MIN), int(-1)).as_const(), None);
        assert_eq!(SymExpr::FloorDiv(int(7), int(0)).as_const(), None);
        assert_eq!(SymExpr::FloorDiv(int(-7), int(2)).as_const(), Some(-4));
        assert_eq!(SymExpr::Mod(int(7), int(-3)).as_const(), Some(-2));
        let big = SymExpr::Add(vec![s(), SymExpr::Int(i64::MAX), SymExpr::Int(1)]);
        let env = |v| BTreeMap::from([("s70".to_string(), v)]);
        assert_eq!(big.simplify().eval(&env(0)), None);
        assert_eq!(big.simplify().eval(&env(-5)), Some(i64::MAX - 4));
    }

    #[test]
    fn display_uses_precedence() {
        let e = SymExpr::Mul(vec![SymExpr::Int(4), SymExpr::Add(vec![s(), SymExpr::Int(1)])]);
        assert_eq!(e.to_string(), "4*(s70 + 1)");
        let p = SymExpr::Pow(Box::new(s()), Box::new(SymExpr::Int(2)));
        assert_eq!(SymExpr::Mul(vec![SymExpr::Int(4), p]).to_string(), "4*s70^2");
    }

    /// A derived dim is read as `a*s + b` and solved for `s`; other forms are not.
    #[test]
    fn linear_dims_solve_for_their_symbol() {
        let e = SymExpr::Mul(vec![SymExpr::Int(8), s()]).simplify();
        assert_eq!(e.linear(), Some(("s70", 8, 0)));
        assert_eq!((e.solve_linear(24), e.solve_linear(20)), (Some(3), None));
        let e = SymExpr::Add(vec![SymExpr::Mul(vec![SymExpr::Int(2), s()]), SymExpr::Int(1)]).simplify();
        assert_eq!((e.linear(), e.solve_linear(9)), (Some(("s70", 2, 1)), Some(4)));
        assert_eq!(s().linear(), Some(("s70", 1, 0)));
        let two = SymExpr::Mul(vec![s(), SymExpr::sym("s3")]).simplify();
        let div = SymExpr::FloorDiv(Box::new(s()), Box::new(SymExpr::Int(2)));
        let neg = SymExpr::Mul(vec![SymExpr::Int(-1), s()]).simplify();
        assert_eq!((two.linear(), div.linear(), neg.linear()), (None, None, None));
    }

    /// `min(256, s)` with `s ≤ 64` is `s`; `max(1, s)` with `s ≥ 1` is `s`; what the ranges
    /// do not decide stays (`min(32, s)` with `s ≤ 64`, or an unbounded symbol).
    #[test]
    fn within_drops_what_the_ranges_rule_out() {
        let ranges = BTreeMap::from([("s70".to_string(), (2, 64))]);
        let min = |c| SymExpr::Min(vec![SymExpr::Int(c), s()]);
        assert_eq!(min(256).within(&ranges), s());
        assert_eq!(min(32).within(&ranges), min(32).simplify());
        assert_eq!(SymExpr::Max(vec![SymExpr::Int(1), s()]).within(&ranges), s());
        let nested = SymExpr::Mul(vec![SymExpr::Int(2), min(256)]);
        assert_eq!(nested.within(&ranges).to_string(), "2*s70");
        assert_eq!(min(256).within(&BTreeMap::new()), min(256).simplify());
        let sum = SymExpr::Add(vec![s(), SymExpr::Int(1)]);
        assert_eq!(sum.range(&ranges), Some((3, 65)));
        assert_eq!(SymExpr::Min(vec![SymExpr::Int(3), SymExpr::Int(3)]).within(&ranges), SymExpr::Int(3));
    }
}

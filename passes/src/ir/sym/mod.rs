//! Symbolic integer expressions over named symbols, as used by dynamic dimensions.
//!
//! The export writes sizes as sympy expressions (`Mul(Integer(64), Symbol('s70'))`); the
//! frontend parses them into [`SymExpr`]. The IR keeps them in a light canonical form
//! ([`SymExpr::simplify`]) so that equal sizes compare equal and print the same.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// The most points of its symbols' ranges at which an expression is evaluated to find that it
/// is a constant ([`SymExpr::within`]).
const MAX_POINTS_TRIED: i64 = 4096;

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
    fn with_operands(&self, mut f: impl FnMut(&SymExpr) -> SymExpr) -> SymExpr {
        match self {
            SymExpr::Int(_) | SymExpr::Sym(_) => self.clone(),
            SymExpr::Add(xs) => SymExpr::Add(xs.iter().map(&mut f).collect()),
            SymExpr::Mul(xs) => SymExpr::Mul(xs.iter().map(&mut f).collect()),
            SymExpr::Max(xs) => SymExpr::Max(xs.iter().map(&mut f).collect()),
            SymExpr::Min(xs) => SymExpr::Min(xs.iter().map(&mut f).collect()),
            SymExpr::Pow(a, b) => SymExpr::Pow(Box::new(f(a)), Box::new(f(b))),
            SymExpr::FloorDiv(a, b) => SymExpr::FloorDiv(Box::new(f(a)), Box::new(f(b))),
            SymExpr::CeilDiv(a, b) => SymExpr::CeilDiv(Box::new(f(a)), Box::new(f(b))),
            SymExpr::Mod(a, b) => SymExpr::Mod(Box::new(f(a)), Box::new(f(b))),
        }
    }

    /// `self` with each of its parts (itself included) that takes the value of one of `seen` at
    /// every point of the ranges written as that one, and the others added to `seen`: torch
    /// writes one size in forms that no rewriting makes equal (Swin's merged patches,
    /// `(a + a % 2 + 1) // 2` beside `(a + a % 2) // 2`), and a `cat` of the two, or a sum that
    /// rounds one up to whole windows, must see one size.
    pub fn unified(&self, seen: &mut Vec<SymExpr>, ranges: &BTreeMap<String, (i64, i64)>) -> SymExpr {
        if matches!(self, SymExpr::Int(_) | SymExpr::Sym(_)) {
            return self.clone();
        }
        let e = self.with_operands(|x| x.unified(seen, ranges)).simplify();
        if e.symbols().is_empty() || seen.contains(&e) {
            return e;
        }
        if let Some(first) = seen.iter().find(|s| s.equal_over(&e, ranges)) {
            return first.clone();
        }
        seen.push(e.clone());
        e
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
            SymExpr::Mod(_, b) => b.as_const().filter(|&c| c > 0).map(|c| (0, c - 1)),
            _ => None,
        }
    }

    /// `self` with every `min`/`max` argument that the ranges show can never be the result left
    /// out: `min(256, s)` with `s ≤ 64` is `s`; a size with a division that is one number at
    /// every point of the ranges (up to [`MAX_POINTS_TRIED`]) is that number. The export writes such sizes (a clamp in the
    /// model) and checks them against the ranges it records. A division by a size that is the
    /// same at every point of the ranges is that constant.
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
            // A division by a size is constant where the dividend is a multiple of the
            // divisor's own quotient: `X // (X // 4)` is `4` for `X = s + (4 - s % 4) % 4`.
            e @ (SymExpr::FloorDiv(_, _) | SymExpr::Mod(_, _)) if e.divides_by_a_size() => {
                match e.factor_cancelled(ranges) {
                    Some(quotient) => quotient,
                    None => e.constant_over(ranges).map_or(e, SymExpr::Int),
                }
            }
            other => other,
        };
        let e = e.simplify();
        // A size with a `%` or `//` may be one number over the ranges though no rewriting shows
        // it: Pegasus-X's `s - s % 512 + 1` is 1 for every `s` below 512.
        match e.has_division() {
            true => e.constant_over(ranges).map_or(e, SymExpr::Int),
            false => e,
        }
    }

    /// True where a `%`, `//` or ceiling division over symbols is part of `self`.
    fn has_division(&self) -> bool {
        match self {
            SymExpr::Int(_) | SymExpr::Sym(_) => false,
            SymExpr::FloorDiv(_, _) | SymExpr::CeilDiv(_, _) | SymExpr::Mod(_, _) => !self.symbols().is_empty(),
            SymExpr::Add(xs) | SymExpr::Mul(xs) | SymExpr::Max(xs) | SymExpr::Min(xs) => {
                xs.iter().any(SymExpr::has_division)
            }
            SymExpr::Pow(a, b) => a.has_division() || b.has_division(),
        }
    }

    /// True for `a // b` or `a % b` whose divisor has symbols.
    fn divides_by_a_size(&self) -> bool {
        matches!(self, SymExpr::FloorDiv(_, b) | SymExpr::Mod(_, b) if !b.symbols().is_empty())
    }

    /// `a // b` where `a` is a product with a factor equal to `b` at every point of the ranges
    /// and `b` is never 0: the other factors (`(h*w) // h` is `w`, torch's view of merged
    /// patches back to their rows).
    fn factor_cancelled(&self, ranges: &BTreeMap<String, (i64, i64)>) -> Option<SymExpr> {
        let SymExpr::FloorDiv(a, b) = self else { return None };
        let positive = |r: Option<(i64, i64)>| r.is_some_and(|(lo, _)| lo >= 1);
        if !positive(b.range(ranges)) && !positive(b.exact_range(ranges)) {
            return None;
        }
        let factors = match &**a {
            SymExpr::Mul(factors) => factors.clone(),
            other => vec![other.clone()],
        };
        let k = factors.iter().position(|f| f == &**b || f.equal_over(b, ranges))?;
        let rest = factors.iter().enumerate().filter(|&(i, _)| i != k).map(|(_, f)| f.clone()).collect();
        Some(SymExpr::Mul(rest).simplify())
    }

    /// The one value `self` takes at every point of its symbols' ranges ([`Self::exact_range`]).
    /// Stops at the first point where the value differs, so a size that varies costs a few
    /// evaluations.
    fn constant_over(&self, ranges: &BTreeMap<String, (i64, i64)>) -> Option<i64> {
        let symbols = self.symbols();
        let mut all = points(&symbols, ranges)?;
        let first = self.eval(&all.next()?)?;
        all.try_for_each(|at| (self.eval(&at)? == first).then_some(())).map(|()| first)
    }

    /// True when `self`, by its form, never decreases as any symbol grows within `ranges`:
    /// sums, products of factors never negative, `min`, `max`, and divisions by a positive
    /// constant of such. False where that is not shown (a difference `10 - s`, a `%`).
    pub fn non_decreasing(&self, ranges: &BTreeMap<String, (i64, i64)>) -> bool {
        let all = |xs: &[SymExpr]| xs.iter().all(|x| x.non_decreasing(ranges));
        match self {
            SymExpr::Int(_) | SymExpr::Sym(_) => true,
            SymExpr::Add(xs) | SymExpr::Max(xs) | SymExpr::Min(xs) => all(xs),
            SymExpr::Mul(xs) => all(xs) && xs.iter().all(|x| x.range(ranges).is_some_and(|(lo, _)| lo >= 0)),
            SymExpr::FloorDiv(a, b) | SymExpr::CeilDiv(a, b) => {
                b.as_const().is_some_and(|c| c > 0) && a.non_decreasing(ranges)
            }
            SymExpr::Pow(_, _) | SymExpr::Mod(_, _) => false,
        }
    }

    /// The greatest value `self` takes when every symbol lies in `ranges`: its value at their
    /// tops where [`Self::non_decreasing`] shows it, else found by [`Self::exact_range`].
    /// `None` where neither tells.
    pub fn greatest(&self, ranges: &BTreeMap<String, (i64, i64)>) -> Option<i64> {
        if self.non_decreasing(ranges) {
            let tops =
                self.symbols().into_iter().map(|s| ranges.get(&s).map(|&(_, hi)| (s, hi))).collect::<Option<_>>()?;
            return self.eval(&tops);
        }
        self.exact_range(ranges).map(|(_, hi)| hi)
    }

    /// The least and greatest values `self` takes when every symbol lies in `ranges`, found by
    /// evaluating it at every point of them: exact where [`Self::range`]'s interval arithmetic
    /// is not (`m - m // 2` is never negative). `None` where a symbol is unbounded, the
    /// arithmetic fails at a point, or the ranges hold more than [`MAX_POINTS_TRIED`] points.
    pub fn exact_range(&self, ranges: &BTreeMap<String, (i64, i64)>) -> Option<(i64, i64)> {
        let (mut least, mut greatest) = (i64::MAX, i64::MIN);
        for at in points(&self.symbols(), ranges)? {
            let v = self.eval(&at)?;
            (least, greatest) = (least.min(v), greatest.max(v));
        }
        Some((least, greatest))
    }

    /// True when `self` and `other`, over the same symbols, take the same value at every point
    /// of their ranges (at most [`MAX_POINTS_TRIED`]): `(a + a % 2 + 1) // 2` is
    /// `(a + a % 2) // 2`, though no rewriting shows it.
    pub fn equal_over(&self, other: &SymExpr, ranges: &BTreeMap<String, (i64, i64)>) -> bool {
        let symbols = self.symbols();
        if symbols.is_empty() || symbols != other.symbols() {
            return false;
        }
        let Some(mut all) = points(&symbols, ranges) else { return false };
        all.all(|at| matches!((self.eval(&at), other.eval(&at)), (Some(a), Some(b)) if a == b))
    }

    /// A light canonical form: nested sums and products flattened, constants folded, a
    /// constant factor distributed over a sum, like terms of a sum collected (`2*s - s` is
    /// `s`), operands sorted. Equal sizes written differently by the exporter compare equal.
    pub fn simplify(&self) -> SymExpr {
        if let Some(v) = self.as_const() {
            return SymExpr::Int(v);
        }
        match self {
            SymExpr::Add(xs) => Self::rounded_up(Self::fold_assoc(xs, true)),
            SymExpr::Mul(xs) => Self::fold_assoc(xs, false),
            SymExpr::Max(xs) => SymExpr::Max(Self::sorted(xs)),
            SymExpr::Min(xs) => SymExpr::Min(Self::sorted(xs)),
            SymExpr::Pow(a, b) => SymExpr::Pow(Box::new(a.simplify()), Box::new(b.simplify())),
            SymExpr::FloorDiv(a, b) => {
                let (a, b) = (a.simplify(), b.simplify());
                match b.as_const().filter(|&c| c > 0).and_then(|c| a.divided_exactly(c)) {
                    Some(quotient) => quotient,
                    None => SymExpr::FloorDiv(Box::new(a), Box::new(b)),
                }
            }
            SymExpr::CeilDiv(a, b) => SymExpr::CeilDiv(Box::new(a.simplify()), Box::new(b.simplify())),
            SymExpr::Mod(a, b) => {
                let (a, b) = (a.simplify(), b.simplify());
                match b.as_const().filter(|&c| c > 0) {
                    Some(c) => Self::modulo(a, c),
                    None => SymExpr::Mod(Box::new(a), Box::new(b)),
                }
            }
            SymExpr::Int(_) | SymExpr::Sym(_) => self.clone(),
        }
    }

    /// `self / c` when `self` is a multiple of `c` whatever its symbols (`8*s + 4` over 4 is
    /// `2*s + 1`); `None` otherwise. `self` is simplified.
    fn divided_exactly(&self, c: i64) -> Option<SymExpr> {
        match self {
            SymExpr::Int(v) => (v % c == 0).then(|| SymExpr::Int(v / c)),
            SymExpr::Mul(factors) => match factors.split_first() {
                Some((SymExpr::Int(k), rest)) if k % c == 0 => Some(
                    SymExpr::Mul(std::iter::once(SymExpr::Int(k / c)).chain(rest.iter().cloned()).collect()).simplify(),
                ),
                _ => None,
            },
            SymExpr::Add(terms) => {
                Some(SymExpr::Add(terms.iter().map(|t| t.divided_exactly(c)).collect::<Option<_>>()?).simplify())
            }
            _ => None,
        }
    }

    /// `a % c` for a constant `c > 0`, without the terms of `a` that are multiples of `c`, and
    /// with `x` for each `x % c` inside (`(4 - s % 4) % 4` is `(-s) % 4`). `a` is simplified.
    fn modulo(a: SymExpr, c: i64) -> SymExpr {
        let terms = match a {
            SymExpr::Add(terms) => terms,
            other => vec![other],
        };
        let reduced: Vec<SymExpr> =
            terms.into_iter().filter(|t| t.divided_exactly(c).is_none()).map(|t| t.without_mod(c)).collect();
        match SymExpr::Add(reduced).simplify() {
            SymExpr::Int(v) => python_mod(v, c).map_or(SymExpr::Int(v), SymExpr::Int),
            rest => SymExpr::Mod(Box::new(rest), Box::new(SymExpr::Int(c))),
        }
    }

    /// A term of a sum taken modulo `c`, with a factor `x % c` replaced by `x` (equal modulo `c`).
    fn without_mod(&self, c: i64) -> SymExpr {
        let inner = |f: &SymExpr| match f {
            SymExpr::Mod(x, m) if m.as_const() == Some(c) => (**x).clone(),
            other => other.clone(),
        };
        match self {
            SymExpr::Mul(factors) => SymExpr::Mul(factors.iter().map(inner).collect()).simplify(),
            other => inner(other),
        }
    }

    /// A sum `e + (-e) % c`, the way torch writes a size rounded up to a multiple of `c` (a pad
    /// to whole windows), as `c * ((e + c - 1) // c)`, whose factor `c` views can split off;
    /// any other sum as it is. `sum` is simplified.
    fn rounded_up(sum: SymExpr) -> SymExpr {
        let SymExpr::Add(terms) = &sum else { return sum };
        for (i, t) in terms.iter().enumerate() {
            let SymExpr::Mod(m, c) = t else { continue };
            let Some(c) = c.as_const().filter(|&c| c > 0) else { continue };
            let e = SymExpr::Mul(vec![SymExpr::Int(-1), (**m).clone()]).simplify();
            let mut others: Vec<SymExpr> =
                terms.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, t)| t.clone()).collect();
            let e_terms = match &e {
                SymExpr::Add(ts) => ts.clone(),
                other => vec![other.clone()],
            };
            // Every term of `e` with a symbol must be a term of the rest of the sum; its constant
            // is taken from the rest's.
            let (constants, e_terms): (Vec<SymExpr>, Vec<SymExpr>) =
                e_terms.into_iter().partition(|t| t.as_const().is_some());
            others.extend(constants.iter().map(|k| SymExpr::Mul(vec![SymExpr::Int(-1), k.clone()])));
            let all_found = !e_terms.is_empty()
                && e_terms.iter().all(|et| match others.iter().position(|o| o == et) {
                    Some(k) => {
                        others.remove(k);
                        true
                    }
                    None => false,
                });
            if !all_found {
                continue;
            }
            let up = SymExpr::FloorDiv(Box::new(SymExpr::Add(vec![e, SymExpr::Int(c - 1)])), Box::new(SymExpr::Int(c)));
            others.push(SymExpr::Mul(vec![SymExpr::Int(c), up]));
            return SymExpr::Add(others).simplify();
        }
        sum
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

/// Every point of the ranges of `symbols` (each symbol's value), or `None` where one is
/// unbounded or there are more than [`MAX_POINTS_TRIED`].
fn points<'a>(
    symbols: &'a [String],
    ranges: &BTreeMap<String, (i64, i64)>,
) -> Option<impl Iterator<Item = BTreeMap<String, i64>> + 'a> {
    let bounds = symbols.iter().map(|s| ranges.get(s).copied()).collect::<Option<Vec<_>>>()?;
    let count = bounds.iter().try_fold(1i64, |n, &(lo, hi)| n.checked_mul(hi.checked_sub(lo)?.checked_add(1)?))?;
    if !(1..=MAX_POINTS_TRIED).contains(&count) {
        return None;
    }
    Some((0..count).map(move |mut k| {
        let mut at = BTreeMap::new();
        for (s, &(lo, hi)) in symbols.iter().zip(&bounds) {
            let span = hi - lo + 1;
            at.insert(s.clone(), lo + k % span);
            k /= span;
        }
        at
    }))
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
mod tests;

//! Unit tests of symbolic sizes: canonical forms, ranges, and what the ranges show.

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
    let e = SymExpr::Add(vec![SymExpr::Mul(vec![SymExpr::Int(2), s(), t.clone()]), neg(SymExpr::Mul(vec![t, s()]))]);
    assert_eq!(e.simplify().to_string(), "s3*s70");
    let e = SymExpr::Mul(vec![SymExpr::Int(3), SymExpr::Add(vec![s(), SymExpr::Int(1)])]);
    assert_eq!(e.simplify().to_string(), "3*s70 + 3");
}

/// `s + (4 - s % 4) % 4`, torch's height padded to whole windows of 4.
fn padded_to_windows() -> SymExpr {
    let modulo = |a: SymExpr| SymExpr::Mod(Box::new(a), Box::new(SymExpr::Int(4)));
    let pad = modulo(SymExpr::Add(vec![SymExpr::Mul(vec![SymExpr::Int(-1), modulo(s())]), SymExpr::Int(4)]));
    SymExpr::Add(vec![s(), pad])
}

#[test]
fn a_size_rounded_up_to_a_multiple_is_that_multiple() {
    let up = padded_to_windows().simplify();
    assert_eq!(up.to_string(), "4*((s70 + 3) // 4)");
    let windows = SymExpr::FloorDiv(Box::new(padded_to_windows()), Box::new(SymExpr::Int(4)));
    assert_eq!(windows.simplify().to_string(), "(s70 + 3) // 4");
    let SymExpr::Add(terms) = padded_to_windows() else { panic!("a sum") };
    assert_eq!(terms[1].simplify().to_string(), "-1*s70 % 4");
    for v in -9..40 {
        let env = BTreeMap::from([("s70".to_string(), v)]);
        assert_eq!(up.eval(&env), padded_to_windows().eval(&env), "s70 = {v}");
    }
    // With a constant in the rounded size: `s + 1 + (-s - 1) % 8`.
    let e = SymExpr::Add(vec![s(), SymExpr::Int(1)]);
    let minus = SymExpr::Mul(vec![SymExpr::Int(-1), e.clone()]);
    let up = SymExpr::Add(vec![e, SymExpr::Mod(Box::new(minus), Box::new(SymExpr::Int(8)))]).simplify();
    assert_eq!(up.to_string(), "8*((s70 + 8) // 8)");
    // A sum whose modulo term is of another size is left alone.
    let other = SymExpr::Add(vec![SymExpr::sym("s3"), padded_to_windows().simplify()]).simplify();
    assert!(other.to_string().contains("s3"), "{other}");
}

#[test]
fn the_greatest_value_is_at_the_tops_only_where_the_size_grows() {
    let ranges = BTreeMap::from([("s70".to_string(), (3, 4))]);
    // Rounded up to whole windows: grows with s70, by its form once simplified.
    let up = padded_to_windows().simplify();
    assert!(up.non_decreasing(&ranges));
    assert_eq!(up.greatest(&ranges), Some(4));
    // Unsimplified its `%` hides that; every point of the ranges is tried instead.
    assert!(!padded_to_windows().non_decreasing(&ranges));
    assert_eq!(padded_to_windows().greatest(&ranges), Some(4));
    // `10 - s70` shrinks: its greatest value is at the bottom of the range.
    let rest = SymExpr::Add(vec![SymExpr::Int(10), SymExpr::Mul(vec![SymExpr::Int(-1), s()])]).simplify();
    assert!(!rest.non_decreasing(&ranges));
    assert_eq!(rest.greatest(&ranges), Some(7));
    // Too many points to try and no form that shows it: unknown.
    let wide = BTreeMap::from([("s70".to_string(), (1, 1 << 20))]);
    assert_eq!(rest.greatest(&wide), None);
    assert_eq!(up.greatest(&wide), Some(1 << 20));
}

#[test]
fn a_size_with_a_remainder_constant_over_the_ranges_is_that_constant() {
    // Pegasus-X's global-token block: `s - s % 512 + 1`, which is 1 for every s below 512.
    let rem = SymExpr::Mod(Box::new(s()), Box::new(SymExpr::Int(512)));
    let e = SymExpr::Add(vec![s(), SymExpr::Mul(vec![SymExpr::Int(-1), rem]), SymExpr::Int(1)]);
    assert_eq!(e.within(&BTreeMap::from([("s70".to_string(), (2, 64))])), SymExpr::Int(1));
    // Past 512 it takes two values, and stays a size.
    assert_ne!(e.within(&BTreeMap::from([("s70".to_string(), (2, 1024))])), SymExpr::Int(1));
    // A size without a division is left as it is, however narrow its range.
    assert_eq!(s().within(&BTreeMap::from([("s70".to_string(), (5, 5))])), s());
}

#[test]
fn a_division_by_a_size_constant_over_the_ranges_is_that_constant() {
    let x = padded_to_windows();
    let quotient =
        SymExpr::FloorDiv(Box::new(x.clone()), Box::new(SymExpr::FloorDiv(Box::new(x), Box::new(SymExpr::Int(4)))));
    let ranges = BTreeMap::from([("s70".to_string(), (1, 64))]);
    assert_eq!(quotient.within(&ranges), SymExpr::Int(4));
    // Not where a point of the range would divide by zero, nor where it is unbounded.
    let with_zero = BTreeMap::from([("s70".to_string(), (0, 64))]);
    assert_ne!(quotient.within(&with_zero), SymExpr::Int(4));
    assert_ne!(quotient.within(&BTreeMap::new()), SymExpr::Int(4));
    // `m - m // 2` for `m = max(16 - s, 0)` is never negative, though intervals say it may be.
    let m = SymExpr::Max(vec![
        SymExpr::Int(0),
        SymExpr::Add(vec![SymExpr::Int(16), SymExpr::Mul(vec![SymExpr::Int(-1), s()])]),
    ]);
    let half = SymExpr::FloorDiv(Box::new(m.clone()), Box::new(SymExpr::Int(2)));
    let rest = SymExpr::Add(vec![m, SymExpr::Mul(vec![SymExpr::Int(-1), half])]);
    assert!(rest.range(&ranges).is_some_and(|(lo, _)| lo < 0));
    assert_eq!(rest.exact_range(&ranges), Some((0, 8)));
}

#[test]
fn sizes_equal_over_the_ranges_are_written_one_way() {
    let ranges = BTreeMap::from([("s70".to_string(), (4, 64)), ("s3".to_string(), (1, 64))]);
    let (two, quarter) = (SymExpr::Int(2), SymExpr::FloorDiv(Box::new(s()), Box::new(SymExpr::Int(4))));
    let modulo = SymExpr::Mod(Box::new(quarter.clone()), Box::new(two.clone()));
    let even = SymExpr::Add(vec![quarter.clone(), modulo]);
    let half = |e: SymExpr| SymExpr::FloorDiv(Box::new(e), Box::new(two.clone())).simplify();
    let (a, b) = (half(SymExpr::Add(vec![even.clone(), SymExpr::Int(1)])), half(even));
    assert_ne!(a, b);
    let mut seen = vec![];
    let a = a.unified(&mut seen, &ranges);
    assert_eq!(b.unified(&mut seen, &ranges), a);
    // Inside a larger size too, and a product over one of them divided by the other.
    let t = SymExpr::sym("s3");
    let sum = SymExpr::Add(vec![t.clone(), b.clone()]).unified(&mut seen, &ranges);
    assert_eq!(sum, SymExpr::Add(vec![t.clone(), a.clone()]).simplify());
    let merged = SymExpr::FloorDiv(Box::new(SymExpr::Mul(vec![t.clone(), a])), Box::new(b.clone()));
    assert_eq!(merged.within(&ranges), t);
    // Not a size that differs at one point of the ranges.
    let other = half(SymExpr::Add(vec![quarter, SymExpr::Int(2)]));
    assert_ne!(other.unified(&mut seen, &ranges), b.unified(&mut seen, &ranges));
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

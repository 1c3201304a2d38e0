//! Parser for the sympy `srepr` strings that the export writes for symbolic sizes.
//!
//! Grammar: `Expr := Int | 'str' | Ident | Ident '(' [Arg (',' Arg)*] ')'`,
//! `Arg := Expr | Ident '=' Expr`. Keyword arguments (`positive=True`) are assumptions that
//! do not change the value and are skipped. Nesting is bounded ([`MAX_DEPTH`]) so that no
//! archive can exhaust the stack here or in the recursive walks over [`SymExpr`] later.

use torchtpu_passes::ir::SymExpr;

/// The deepest nesting of calls accepted. Exported sizes nest a few levels (`Mul(Integer(64),
/// Add(Symbol(…), Integer(-1)))`); anything near this is damage, not a model.
pub(super) const MAX_DEPTH: usize = 64;

/// Why an expression could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct SreprError(pub String);

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Int(i64),
    Str(String),
    Ident(String),
    Punct(char),
}

/// Parses one srepr expression, e.g. `Mul(Integer(64), Symbol('s70', positive=True, integer=True))`.
pub(super) fn parse(text: &str) -> Result<SymExpr, SreprError> {
    let tokens = tokenize(text)?;
    let mut p = Parser { tokens: &tokens, pos: 0, depth: 0 };
    let expr = p.expr()?;
    if p.pos != tokens.len() {
        return Err(SreprError(format!("unexpected {:?} after the expression", tokens[p.pos])));
    }
    to_sym(&expr)
}

/// Parses a comparison of two integer expressions as the export writes a runtime assertion's
/// condition (`GreaterThan(Symbol('u0', integer=True), Integer(0))`): `(lhs - rhs, what it must
/// be)`.
pub(super) fn parse_relation(text: &str) -> Result<(SymExpr, Sign), SreprError> {
    let tokens = tokenize(text)?;
    let mut p = Parser { tokens: &tokens, pos: 0, depth: 0 };
    let expr = p.expr()?;
    if p.pos != tokens.len() {
        return Err(SreprError(format!("unexpected {:?} after the relation", tokens[p.pos])));
    }
    let Ast::Call(head, args) = &expr else { return Err(SreprError("not a relation".into())) };
    let sign = match head.as_str() {
        "GreaterThan" => Sign::NonNegative,
        "StrictGreaterThan" => Sign::Positive,
        "LessThan" => Sign::NonPositive,
        "StrictLessThan" => Sign::Negative,
        "Equality" | "Eq" => Sign::Zero,
        other => return Err(SreprError(format!("unsupported relation `{other}`"))),
    };
    let [a, b] = args.as_slice() else { return Err(SreprError(format!("`{head}` takes 2 arguments"))) };
    let difference = SymExpr::Add(vec![to_sym(a)?, SymExpr::Mul(vec![SymExpr::Int(-1), to_sym(b)?])]);
    Ok((difference, sign))
}

/// The two sides of an equality (`Eq(Add(…), Integer(32))`); `Err` for anything else.
pub(super) fn parse_equality(text: &str) -> Result<(SymExpr, SymExpr), SreprError> {
    let tokens = tokenize(text)?;
    let mut p = Parser { tokens: &tokens, pos: 0, depth: 0 };
    let expr = p.expr()?;
    match &expr {
        Ast::Call(head, args) if (head == "Eq" || head == "Equality") && args.len() == 2 && p.pos == tokens.len() => {
            Ok((to_sym(&args[0])?, to_sym(&args[1])?))
        }
        _ => Err(SreprError("not an equality".into())),
    }
}

/// What a relation says of the difference of its two sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sign {
    Positive,
    NonNegative,
    Negative,
    NonPositive,
    Zero,
}

impl Sign {
    /// True when every value in `[lo, hi]` has this sign.
    pub(super) fn holds_on(self, (lo, hi): (i64, i64)) -> bool {
        match self {
            Sign::Positive => lo > 0,
            Sign::NonNegative => lo >= 0,
            Sign::Negative => hi < 0,
            Sign::NonPositive => hi <= 0,
            Sign::Zero => lo == 0 && hi == 0,
        }
    }
}

fn tokenize(text: &str) -> Result<Vec<Token>, SreprError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let start = i;
        if c.is_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() || (c == '-' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            i += 1;
            while i < chars.len() && chars[i].is_ascii_digit() {
                i += 1;
            }
            let s: String = chars[start..i].iter().collect();
            let v = s.parse().map_err(|_| SreprError(format!("integer `{s}` does not fit in 64 bits")))?;
            out.push(Token::Int(v));
        } else if c == '\'' {
            let end = chars[i + 1..]
                .iter()
                .position(|&c| c == '\'')
                .ok_or_else(|| SreprError("unterminated string".into()))?;
            out.push(Token::Str(chars[i + 1..i + 1 + end].iter().collect()));
            i += end + 2;
        } else if c.is_alphabetic() || c == '_' {
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if "(),=".contains(c) {
            out.push(Token::Punct(c));
            i += 1;
        } else {
            return Err(SreprError(format!("unexpected character `{c}` at offset {i}")));
        }
    }
    Ok(out)
}

/// A parsed call tree before interpretation.
#[derive(Debug)]
enum Ast {
    Int(i64),
    Str(String),
    Name(String),
    Call(String, Vec<Ast>),
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    /// Calls open around the current position.
    depth: usize,
}

impl Parser<'_> {
    fn next(&mut self) -> Result<Token, SreprError> {
        let t = self.tokens.get(self.pos).cloned().ok_or_else(|| SreprError("unexpected end of expression".into()))?;
        self.pos += 1;
        Ok(t)
    }

    fn peek_is(&self, offset: usize, c: char) -> bool {
        self.tokens.get(self.pos + offset) == Some(&Token::Punct(c))
    }

    fn expr(&mut self) -> Result<Ast, SreprError> {
        match self.next()? {
            Token::Int(v) => Ok(Ast::Int(v)),
            Token::Str(s) => Ok(Ast::Str(s)),
            Token::Ident(name) if self.peek_is(0, '(') => {
                self.pos += 1;
                if self.depth == MAX_DEPTH {
                    return Err(SreprError(format!("calls nested more than {MAX_DEPTH} deep")));
                }
                self.depth += 1;
                let args = self.args()?;
                self.depth -= 1;
                Ok(Ast::Call(name, args))
            }
            Token::Ident(name) => Ok(Ast::Name(name)),
            Token::Punct(c) => Err(SreprError(format!("unexpected `{c}`"))),
        }
    }

    /// Positional arguments up to the closing parenthesis; keyword arguments are dropped.
    fn args(&mut self) -> Result<Vec<Ast>, SreprError> {
        let mut args = Vec::new();
        loop {
            if self.peek_is(0, ')') {
                self.pos += 1;
                return Ok(args);
            }
            let keyword = matches!(self.tokens.get(self.pos), Some(Token::Ident(_))) && self.peek_is(1, '=');
            if keyword {
                self.pos += 2;
                self.expr()?;
            } else {
                args.push(self.expr()?);
            }
            match self.next()? {
                Token::Punct(',') => {}
                Token::Punct(')') => return Ok(args),
                t => return Err(SreprError(format!("expected `,` or `)`, found {t:?}"))),
            }
        }
    }
}

fn to_sym(ast: &Ast) -> Result<SymExpr, SreprError> {
    let (head, args) = match ast {
        Ast::Call(head, args) => (head, args),
        Ast::Int(v) => return Ok(SymExpr::Int(*v)),
        Ast::Name(n) => return Err(SreprError(format!("unexpected name `{n}` where an integer expression belongs"))),
        Ast::Str(s) => return Err(SreprError(format!("unexpected string '{s}' where an integer expression belongs"))),
    };
    let all = || args.iter().map(to_sym).collect::<Result<Vec<_>, _>>();
    let two = |f: fn(Box<SymExpr>, Box<SymExpr>) -> SymExpr| -> Result<SymExpr, SreprError> {
        match args.as_slice() {
            [a, b] => Ok(f(Box::new(to_sym(a)?), Box::new(to_sym(b)?))),
            _ => Err(SreprError(format!("`{head}` takes 2 arguments, found {}", args.len()))),
        }
    };
    match head.as_str() {
        "Integer" => match args.as_slice() {
            [Ast::Int(v)] => Ok(SymExpr::Int(*v)),
            _ => Err(SreprError("`Integer` takes one integer literal".into())),
        },
        "Symbol" => match args.first() {
            Some(Ast::Str(name)) => Ok(SymExpr::Sym(name.clone())),
            _ => Err(SreprError("`Symbol` takes a quoted name".into())),
        },
        "Add" => Ok(SymExpr::Add(all()?)),
        "Mul" => Ok(SymExpr::Mul(all()?)),
        "Max" => Ok(SymExpr::Max(all()?)),
        "Min" => Ok(SymExpr::Min(all()?)),
        "Pow" | "PowByNatural" => two(SymExpr::Pow),
        "FloorDiv" => two(SymExpr::FloorDiv),
        "CeilDiv" => two(SymExpr::CeilDiv),
        "Mod" | "PythonMod" => two(SymExpr::Mod),
        "Piecewise" => piecewise(args),
        other => Err(SreprError(format!("unsupported sympy function `{other}`"))),
    }
}

/// `Piecewise((v1, c1), (v2, c2), …, (vn, True))` as integer arithmetic:
/// `v1·[c1] + (1 − [c1])·(v2·[c2] + …)`, each condition an indicator (see [`indicator`]).
/// Exported sizes of integers only, where torch writes a `sym_ite` (VITS: `1 if u == 1 else 0`).
fn piecewise(pairs: &[Ast]) -> Result<SymExpr, SreprError> {
    let bad = || SreprError("`Piecewise` takes (value, condition) pairs, the last one's condition `true`".into());
    let (last, rest) = pairs.split_last().ok_or_else(bad)?;
    fn pair(a: &Ast) -> Option<(&Ast, &Ast)> {
        match a {
            Ast::Call(head, parts) if head == "ExprCondPair" && parts.len() == 2 => Some((&parts[0], &parts[1])),
            _ => None,
        }
    }
    let (value, always) = pair(last).ok_or_else(bad)?;
    if indicator(always)? != SymExpr::Int(1) {
        return Err(bad());
    }
    let mut e = to_sym(value)?;
    for a in rest.iter().rev() {
        let (value, condition) = pair(a).ok_or_else(bad)?;
        let (v, c) = (to_sym(value)?, indicator(condition)?);
        let otherwise = SymExpr::Add(vec![SymExpr::Int(1), SymExpr::Mul(vec![SymExpr::Int(-1), c.clone()])]);
        e = SymExpr::Add(vec![SymExpr::Mul(vec![v, c]), SymExpr::Mul(vec![otherwise, e])]);
    }
    Ok(e)
}

/// A condition on integers as 1 where it holds and 0 elsewhere: `[a = b]` is
/// `max(0, 1 − (a − b)²)`, `[a < b]` is `max(0, min(1, b − a))`, and so on; `true` is 1.
fn indicator(condition: &Ast) -> Result<SymExpr, SreprError> {
    let sub = |a: SymExpr, b: SymExpr| SymExpr::Add(vec![a, SymExpr::Mul(vec![SymExpr::Int(-1), b])]);
    let not = |e: SymExpr| sub(SymExpr::Int(1), e);
    // 1 where `d` ≥ 1, 0 where `d` ≤ 0.
    let positive = |d: SymExpr| SymExpr::Max(vec![SymExpr::Int(0), SymExpr::Min(vec![SymExpr::Int(1), d])]);
    let (head, args) = match condition {
        Ast::Name(n) if n == "true" => return Ok(SymExpr::Int(1)),
        Ast::Name(n) if n == "false" => return Ok(SymExpr::Int(0)),
        Ast::Call(head, args) if head == "BooleanTrue" && args.is_empty() => return Ok(SymExpr::Int(1)),
        Ast::Call(head, args) if head == "BooleanFalse" && args.is_empty() => return Ok(SymExpr::Int(0)),
        Ast::Call(head, args) => (head.as_str(), args),
        _ => return Err(SreprError("a `Piecewise` condition must be a relation of integers".into())),
    };
    let [a, b] = args.as_slice() else {
        return Err(SreprError(format!("`{head}` in a `Piecewise` condition takes 2 arguments")));
    };
    let (a, b) = (to_sym(a)?, to_sym(b)?);
    let equal = || {
        let square = SymExpr::Pow(Box::new(sub(a.clone(), b.clone())), Box::new(SymExpr::Int(2)));
        SymExpr::Max(vec![SymExpr::Int(0), sub(SymExpr::Int(1), square)])
    };
    Ok(match head {
        "Equality" | "Eq" => equal(),
        "Unequality" | "Ne" => not(equal()),
        "StrictLessThan" | "Lt" => positive(sub(b, a)),
        "LessThan" | "Le" => positive(sub(SymExpr::Add(vec![b, SymExpr::Int(1)]), a)),
        "StrictGreaterThan" | "Gt" => positive(sub(a, b)),
        "GreaterThan" | "Ge" => positive(sub(SymExpr::Add(vec![a, SymExpr::Int(1)]), b)),
        other => return Err(SreprError(format!("unsupported condition `{other}` in a `Piecewise`"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    const S70: &str = "Symbol('s70', positive=True, integer=True)";

    #[test]
    fn parses_real_export_expressions() {
        assert_eq!(parse(S70).unwrap(), SymExpr::sym("s70"));
        let e = parse(&format!("Mul(Integer(4), Pow({S70}, Integer(2)))")).unwrap();
        assert_eq!(e.to_string(), "4*s70^2");
        let e = parse(&format!("Add({S70}, Integer(-1))")).unwrap();
        assert_eq!(e.to_string(), "s70 - 1");
        let e = parse(&format!("FloorDiv({S70}, Integer(2))")).unwrap();
        assert_eq!(e.to_string(), "s70 // 2");
    }

    #[test]
    fn parses_relations_and_equalities() {
        let u = |n: &str| format!("Symbol('{n}', integer=True)");
        let (d, sign) = parse_relation(&format!("GreaterThan({}, Integer(0))", u("u0"))).unwrap();
        assert_eq!((d.simplify().to_string(), sign), ("u0".to_string(), Sign::NonNegative));
        assert!(sign.holds_on((0, 12)) && !sign.holds_on((-1, 12)));
        let (d, sign) = parse_relation(&format!("LessThan({}, Integer(12))", u("u0"))).unwrap();
        assert_eq!((d.simplify().to_string(), sign), ("u0 - 12".to_string(), Sign::NonPositive));
        let (l, r) = parse_equality(&format!("Eq(Add({}, {}), Integer(32))", u("u0"), u("u1"))).unwrap();
        assert_eq!((l.to_string(), r.to_string()), ("u0 + u1".to_string(), "32".to_string()));
        assert!(parse_equality(&format!("LessThan({}, Integer(12))", u("u0"))).is_err());
        assert!(parse_relation("Mystery(Integer(1), Integer(2))").is_err());
    }

    /// VITS's `sym_ite`: `1 if u == 1 else 0`, and conditions of each kind, at every value
    /// of `u` around their edges.
    #[test]
    fn piecewise_sizes_are_arithmetic_on_indicators() {
        let u = "Symbol('u32', integer=True)";
        let vits =
            format!("Piecewise(ExprCondPair(Integer(1), Equality({u}, Integer(1))), ExprCondPair(Integer(0), true))");
        let e = parse(&vits).unwrap();
        let at = |e: &SymExpr, v: i64| e.eval(&BTreeMap::from([("u32".to_string(), v)]));
        assert_eq!((0..5).map(|v| at(&e, v)).collect::<Vec<_>>(), [Some(0), Some(1), Some(0), Some(0), Some(0)]);
        for (relation, holds) in [
            ("StrictLessThan", &[true, true, false, false][..]),
            ("LessThan", &[true, true, true, false]),
            ("StrictGreaterThan", &[false, false, false, true]),
            ("GreaterThan", &[false, false, true, true]),
            ("Unequality", &[true, true, false, true]),
        ] {
            let text =
                format!("Piecewise(ExprCondPair(Integer(7), {relation}({u}, Integer(2))), ExprCondPair({u}, true))");
            let e = parse(&text).unwrap();
            for (v, &h) in holds.iter().enumerate() {
                let v = v as i64;
                assert_eq!(at(&e, v), Some(if h { 7 } else { v }), "{relation} at {v}");
            }
        }
        assert!(parse("Piecewise(ExprCondPair(Integer(1), Integer(2)))").is_err());
        let no_default = format!("Piecewise(ExprCondPair(Integer(1), Equality({u}, Integer(1))))");
        assert!(parse(&no_default).unwrap_err().0.contains("the last one's condition `true`"));
    }

    #[test]
    fn reports_malformed_expressions() {
        assert!(parse("Mul(Integer(2), ").unwrap_err().0.contains("unexpected end"));
        assert!(parse("Rational(1, 2)").unwrap_err().0.contains("unsupported sympy function `Rational`"));
        assert!(parse("Integer(1) Integer(2)").unwrap_err().0.contains("after the expression"));
        assert!(parse("Symbol('s70").unwrap_err().0.contains("unterminated"));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}Integer(1){}", "Add(Integer(1), ".repeat(30_000), ")".repeat(30_000));
        assert_eq!(parse(&deep).unwrap_err().0, format!("calls nested more than {MAX_DEPTH} deep"));
        let ok = format!("{}Integer(1){}", "Add(Integer(1), ".repeat(MAX_DEPTH - 1), ")".repeat(MAX_DEPTH - 1));
        assert_eq!(parse(&ok).unwrap().as_const(), Some(i64::try_from(MAX_DEPTH).unwrap()));
    }
}

//! The export's guards: the conditions on the inputs' sizes under which `torch.export` traced
//! the program. The archive records them in `guards_code` (Python expressions such as
//! `L['x'].size()[1] != 16`, beside `range_constraints`); the program is only the traced one
//! where they hold, so every call's real inputs are checked against them and a size they
//! exclude is refused, as `torch.export.load(…).module()` refuses it.
//!
//! The grammar is small and total: integers and floats, `True`/`False`, sizes of inputs
//! (`L['x'].size()[1]`, `L['pair'][0].stride()[0]`, `.storage_offset()`, `.numel()`, `.dim()`),
//! the export's symbols (`s52`, in the relations of `range_constraints`), `+ - * / // % **`,
//! comparisons (chained as in Python), `and`/`or`/`not`, and the functions torch writes
//! (`math.trunc`, `torch.sym_float`, `torch.sym_max`, `Eq`, `Ne`, `Mod`, …). Anything else is
//! an error that names it: a guard is never ignored. Nesting is bounded, arithmetic checked.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use torchtpu_passes::ir::{floor_div, python_mod};

/// How deep a guard may nest (parentheses, calls, operators).
const MAX_DEPTH: usize = 64;
/// The longest guard read, in bytes.
const MAX_LEN: usize = 1 << 20;

/// One of the export's guards: its text as the export wrote it and what it says. A manifest
/// stores the text and reads it back through the same grammar.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Guard {
    text: String,
    expr: Expr,
}

impl TryFrom<String> for Guard {
    type Error = String;
    fn try_from(text: String) -> Result<Guard, String> {
        Guard::parse(&text)
    }
}

impl From<Guard> for String {
    fn from(g: Guard) -> String {
        g.text
    }
}

impl fmt::Display for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A value of an input a guard reads: `L['pair'][0].size()[1]` is `size` 1 of the input the
/// export names `pair_0`.
#[derive(Clone, Debug, PartialEq)]
struct Reference {
    /// The input's name in the graph: the path's keys joined by `_`, as torch names the
    /// placeholders of nested inputs.
    input: String,
    property: Property,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Property {
    Size(usize),
    /// The stride of a contiguous tensor of the input's shape: every input is passed
    /// contiguous.
    Stride(usize),
    StorageOffset,
    Numel,
    Rank,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Arith {
    Add,
    Sub,
    Mul,
    TrueDiv,
    FloorDiv,
    Mod,
    Pow,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Func {
    Trunc,
    Floor,
    Ceil,
    ToFloat,
    Max,
    Min,
    Abs,
    Eq,
    Ne,
    Mod,
    FloorDiv,
    Not,
}

impl Func {
    /// The function a guard calls by `name`, and how many arguments it takes (`None`: one or
    /// more).
    fn named(name: &str) -> Option<(Func, Option<usize>)> {
        Some(match name {
            "math.trunc" | "int" | "torch.sym_int" | "TruncToInt" => (Func::Trunc, Some(1)),
            "math.floor" | "FloorToInt" | "floor" => (Func::Floor, Some(1)),
            "math.ceil" | "CeilToInt" | "ceiling" => (Func::Ceil, Some(1)),
            "torch.sym_float" | "float" | "ToFloat" => (Func::ToFloat, Some(1)),
            "Max" | "max" | "torch.sym_max" => (Func::Max, None),
            "Min" | "min" | "torch.sym_min" => (Func::Min, None),
            "abs" | "Abs" => (Func::Abs, Some(1)),
            "Eq" => (Func::Eq, Some(2)),
            "Ne" => (Func::Ne, Some(2)),
            "Mod" | "PythonMod" => (Func::Mod, Some(2)),
            "FloorDiv" => (Func::FloorDiv, Some(2)),
            "torch.sym_not" | "Not" => (Func::Not, Some(1)),
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Expr {
    Int(i64),
    Float(f64),
    Bool(bool),
    Symbol(String),
    Of(Reference),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    Arith(Arith, Box<Expr>, Box<Expr>),
    /// `a < b <= c`: each comparison with the operand before it.
    Compare(Box<Expr>, Vec<(Cmp, Expr)>),
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Call(Func, Vec<Expr>),
}

/// A Python number or bool, as a guard computes it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Value {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Value {
    fn as_float(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::Float(v) => v,
            Value::Bool(b) => f64::from(u8::from(b)),
        }
    }

    /// The integer of an int or bool; `None` for a float.
    fn as_int(self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(v),
            Value::Bool(b) => Some(i64::from(b)),
            Value::Float(_) => None,
        }
    }

    fn truth(self) -> bool {
        match self {
            Value::Int(v) => v != 0,
            Value::Float(v) => v != 0.0,
            Value::Bool(b) => b,
        }
    }
}

/// What a guard is checked against: the shapes of the real inputs, by name in the program's
/// order, and the values of the symbols they give.
pub(crate) struct Env<'a> {
    pub shapes: Vec<(&'a str, &'a [i64])>,
    pub symbols: &'a BTreeMap<String, i64>,
}

/// Where among `inputs` (the user inputs, in order) is the one a guard names `name`: by name, or
/// by position as a strict export writes it (`L['flat_args'][1]`, read as `flat_args_1`).
pub(crate) fn input_index(name: &str, inputs: &[&str]) -> Option<usize> {
    let position = || name.strip_prefix("flat_args_")?.parse().ok().filter(|&i: &usize| i < inputs.len());
    inputs.iter().position(|n| *n == name).or_else(position)
}

impl Guard {
    /// Reads one guard.
    pub(crate) fn parse(text: &str) -> Result<Guard, String> {
        if text.len() > MAX_LEN {
            return Err(format!("it is {} bytes long, more than the {MAX_LEN} this compiler reads", text.len()));
        }
        let tokens = tokenize(text)?;
        let mut p = Parser { tokens, at: 0, depth: 0 };
        let expr = p.expr()?;
        if let Some(t) = p.peek() {
            return Err(format!("unexpected `{t}` after a complete condition"));
        }
        Ok(Guard { text: text.to_string(), expr })
    }

    /// The guard `min <= relation <= max` of a relation between symbols that
    /// `range_constraints` bounds (`8*s52` in `[16, 64]`); `None` when neither side is bounded.
    pub(crate) fn of_range(relation: &str, min: Option<i64>, max: Option<i64>) -> Option<Result<Guard, String>> {
        let text = match (min, max) {
            (Some(lo), Some(hi)) => format!("{lo} <= {relation} <= {hi}"),
            (Some(lo), None) => format!("{lo} <= {relation}"),
            (None, Some(hi)) => format!("{relation} <= {hi}"),
            (None, None) => return None,
        };
        Some(Guard::parse(&text))
    }

    /// The guard's text, as the export wrote it.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The inputs the guard reads (by their names in the graph) and the dims it reads of
    /// each (for checking it against the signature): `(input, highest dim read)`.
    pub(crate) fn inputs(&self) -> Vec<(String, Option<usize>)> {
        let mut out: Vec<(String, Option<usize>)> = vec![];
        self.expr.visit(&mut |e| {
            if let Expr::Of(r) = e {
                let dim = match r.property {
                    Property::Size(d) | Property::Stride(d) => Some(d),
                    _ => None,
                };
                match out.iter_mut().find(|(n, _)| *n == r.input) {
                    Some((_, highest)) => *highest = (*highest).max(dim),
                    None => out.push((r.input.clone(), dim)),
                }
            }
        });
        out
    }

    /// The symbols the guard reads.
    pub(crate) fn symbols(&self) -> Vec<String> {
        let mut out = vec![];
        self.expr.visit(&mut |e| {
            if let Expr::Symbol(s) = e {
                if !out.contains(s) {
                    out.push(s.clone());
                }
            }
        });
        out
    }

    /// Whether the guard holds for `env`; `Err` says why it cannot be told (an input it
    /// reads is missing, a division by zero, an overflow).
    pub(crate) fn holds(&self, env: &Env<'_>) -> Result<bool, String> {
        Ok(self.expr.eval(env)?.truth())
    }
}

impl Expr {
    fn visit(&self, f: &mut dyn FnMut(&Expr)) {
        f(self);
        match self {
            Expr::Neg(x) | Expr::Not(x) => x.visit(f),
            Expr::Arith(_, a, b) => {
                a.visit(f);
                b.visit(f);
            }
            Expr::Compare(first, rest) => {
                first.visit(f);
                rest.iter().for_each(|(_, e)| e.visit(f));
            }
            Expr::And(xs) | Expr::Or(xs) | Expr::Call(_, xs) => xs.iter().for_each(|x| x.visit(f)),
            Expr::Int(_) | Expr::Float(_) | Expr::Bool(_) | Expr::Symbol(_) | Expr::Of(_) => {}
        }
    }

    fn eval(&self, env: &Env<'_>) -> Result<Value, String> {
        Ok(match self {
            Expr::Int(v) => Value::Int(*v),
            Expr::Float(v) => Value::Float(*v),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::Symbol(s) => Value::Int(*env.symbols.get(s).ok_or_else(|| format!("symbol `{s}` has no value"))?),
            Expr::Of(r) => Value::Int(r.eval(env)?),
            Expr::Neg(x) => match x.eval(env)? {
                Value::Float(v) => Value::Float(-v),
                v => Value::Int(v.as_int().and_then(i64::checked_neg).ok_or_else(overflow)?),
            },
            Expr::Not(x) => Value::Bool(!x.eval(env)?.truth()),
            Expr::Arith(op, a, b) => arith(*op, a.eval(env)?, b.eval(env)?)?,
            Expr::Compare(first, rest) => {
                let mut left = first.eval(env)?;
                for (cmp, e) in rest {
                    let right = e.eval(env)?;
                    if !compare(*cmp, left, right) {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Value::Bool(true)
            }
            Expr::And(xs) => {
                for x in xs {
                    if !x.eval(env)?.truth() {
                        return Ok(Value::Bool(false));
                    }
                }
                Value::Bool(true)
            }
            Expr::Or(xs) => {
                for x in xs {
                    if x.eval(env)?.truth() {
                        return Ok(Value::Bool(true));
                    }
                }
                Value::Bool(false)
            }
            Expr::Call(f, args) => {
                let args = args.iter().map(|a| a.eval(env)).collect::<Result<Vec<_>, _>>()?;
                call(*f, &args)?
            }
        })
    }
}

impl Reference {
    fn eval(&self, env: &Env<'_>) -> Result<i64, String> {
        let names: Vec<&str> = env.shapes.iter().map(|(n, _)| *n).collect();
        let at = input_index(&self.input, &names).ok_or_else(|| format!("no input is named `{}`", self.input))?;
        let shape = env.shapes[at].1;
        let dim = |d: usize| {
            shape
                .get(d)
                .copied()
                .ok_or_else(|| format!("input `{}` has {} dims, not {}", self.input, shape.len(), d + 1))
        };
        match self.property {
            Property::Size(d) => dim(d),
            Property::Stride(d) => {
                dim(d)?;
                shape[d + 1..].iter().try_fold(1i64, |acc, &s| acc.checked_mul(s)).ok_or_else(overflow)
            }
            Property::StorageOffset => Ok(0),
            Property::Numel => shape.iter().try_fold(1i64, |acc, &s| acc.checked_mul(s)).ok_or_else(overflow),
            Property::Rank => i64::try_from(shape.len()).map_err(|_| overflow()),
        }
    }
}

fn overflow() -> String {
    "the arithmetic overflows".into()
}

/// Python's arithmetic on ints, floats and bools.
fn arith(op: Arith, a: Value, b: Value) -> Result<Value, String> {
    let by_zero = || "it divides by zero".to_string();
    match (op, a.as_int(), b.as_int()) {
        (Arith::TrueDiv, ..) if b.as_float() == 0.0 => Err(by_zero()),
        (Arith::TrueDiv, ..) => Ok(Value::Float(a.as_float() / b.as_float())),
        (Arith::Pow, Some(x), Some(y)) if y < 0 => Ok(Value::Float((x as f64).powf(y as f64))),
        (_, Some(x), Some(y)) => {
            let v = match op {
                Arith::Add => x.checked_add(y),
                Arith::Sub => x.checked_sub(y),
                Arith::Mul => x.checked_mul(y),
                Arith::Pow => u32::try_from(y).ok().and_then(|e| x.checked_pow(e)),
                _ if y == 0 => return Err(by_zero()),
                Arith::FloorDiv => floor_div(x, y),
                _ => python_mod(x, y),
            };
            v.map(Value::Int).ok_or_else(overflow)
        }
        _ => {
            let (x, y) = (a.as_float(), b.as_float());
            Ok(Value::Float(match op {
                Arith::Add => x + y,
                Arith::Sub => x - y,
                Arith::Mul => x * y,
                Arith::Pow => x.powf(y),
                _ if y == 0.0 => return Err(by_zero()),
                Arith::FloorDiv => (x / y).floor(),
                _ => x - y * (x / y).floor(),
            }))
        }
    }
}

fn compare(cmp: Cmp, a: Value, b: Value) -> bool {
    let ord = match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) => x.partial_cmp(&y),
        _ => a.as_float().partial_cmp(&b.as_float()),
    };
    let Some(ord) = ord else { return cmp == Cmp::Ne };
    match cmp {
        Cmp::Eq => ord.is_eq(),
        Cmp::Ne => ord.is_ne(),
        Cmp::Lt => ord.is_lt(),
        Cmp::Le => ord.is_le(),
        Cmp::Gt => ord.is_gt(),
        Cmp::Ge => ord.is_ge(),
    }
}

fn call(f: Func, args: &[Value]) -> Result<Value, String> {
    let float_to_int = |v: f64| {
        if v.is_finite() && v.abs() < 9.0e18 {
            Ok(Value::Int(v as i64))
        } else {
            Err(overflow())
        }
    };
    let one = args[0];
    Ok(match f {
        Func::Trunc => match one {
            Value::Float(v) => float_to_int(v.trunc())?,
            v => Value::Int(v.as_int().unwrap_or_default()),
        },
        Func::Floor => match one {
            Value::Float(v) => float_to_int(v.floor())?,
            v => Value::Int(v.as_int().unwrap_or_default()),
        },
        Func::Ceil => match one {
            Value::Float(v) => float_to_int(v.ceil())?,
            v => Value::Int(v.as_int().unwrap_or_default()),
        },
        Func::ToFloat => Value::Float(one.as_float()),
        Func::Abs => match one {
            Value::Float(v) => Value::Float(v.abs()),
            v => Value::Int(v.as_int().unwrap_or_default().checked_abs().ok_or_else(overflow)?),
        },
        Func::Max | Func::Min => {
            let mut best = one;
            for &v in &args[1..] {
                let better = if f == Func::Max { compare(Cmp::Gt, v, best) } else { compare(Cmp::Lt, v, best) };
                if better {
                    best = v;
                }
            }
            best
        }
        Func::Eq => Value::Bool(compare(Cmp::Eq, one, args[1])),
        Func::Ne => Value::Bool(compare(Cmp::Ne, one, args[1])),
        Func::Mod => arith(Arith::Mod, one, args[1])?,
        Func::FloorDiv => arith(Arith::FloorDiv, one, args[1])?,
        Func::Not => Value::Bool(!one.truth()),
    })
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Token::Int(v) => write!(f, "{v}"),
            Token::Float(v) => write!(f, "{v}"),
            Token::Str(s) => write!(f, "'{s}'"),
            Token::Name(n) => f.write_str(n),
            Token::Op(o) => f.write_str(o),
        }
    }
}

/// Operators, longest first so that `//` is read before `/`.
const OPERATORS: [&str; 19] =
    ["**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "<", ">", "(", ")", "[", "]", ",", "."];

fn tokenize(text: &str) -> Result<Vec<Token>, String> {
    let mut out = vec![];
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.' || bytes[i] == b'_') {
                // An exponent's sign belongs to the number: `1e-05`.
                if (bytes[i] == b'e' || bytes[i] == b'E') && matches!(bytes.get(i + 1), Some(b'+' | b'-')) {
                    i += 1;
                }
                i += 1;
            }
            let word = text[start..i].replace('_', "");
            out.push(match word.parse::<i64>() {
                Ok(v) => Token::Int(v),
                Err(_) => Token::Float(
                    word.parse::<f64>()
                        .ok()
                        .filter(|v| v.is_finite())
                        .ok_or_else(|| format!("`{word}` is not a number"))?,
                ),
            });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token::Name(text[start..i].to_string()));
        } else if c == b'\'' || c == b'"' {
            let end = text[i + 1..].find(c as char).ok_or("a string is not closed")? + i + 1;
            let s = &text[i + 1..end];
            if s.contains('\\') {
                return Err(format!("the string '{s}' has an escape, which no input name has"));
            }
            out.push(Token::Str(s.to_string()));
            i = end + 1;
        } else {
            let op = OPERATORS.iter().find(|op| text[i..].starts_with(**op)).ok_or_else(|| {
                format!("`{}` is not part of the grammar of guards", &text[i..].chars().next().unwrap_or(' '))
            })?;
            out.push(Token::Op(op));
            i += op.len();
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
    depth: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.at)
    }

    fn next(&mut self) -> Result<Token, String> {
        let t = self.tokens.get(self.at).cloned().ok_or("it ends too early")?;
        self.at += 1;
        Ok(t)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Token::Op(o)) if *o == op) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn eat_name(&mut self, name: &str) -> bool {
        if matches!(self.peek(), Some(Token::Name(n)) if n == name) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect_op(&mut self, op: &str) -> Result<(), String> {
        match self.next()? {
            Token::Op(o) if o == op => Ok(()),
            t => Err(format!("expected `{op}`, found `{t}`")),
        }
    }

    /// Runs `f` one level deeper, refusing past [`MAX_DEPTH`].
    fn nested<T>(&mut self, f: impl FnOnce(&mut Parser) -> Result<T, String>) -> Result<T, String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("it nests deeper than {MAX_DEPTH} levels"));
        }
        let out = f(self);
        self.depth -= 1;
        out
    }

    fn expr(&mut self) -> Result<Expr, String> {
        self.nested(|p| {
            let mut terms = vec![p.and()?];
            while p.eat_name("or") {
                terms.push(p.and()?);
            }
            Ok(if terms.len() == 1 { terms.remove(0) } else { Expr::Or(terms) })
        })
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut terms = vec![self.not()?];
        while self.eat_name("and") {
            terms.push(self.not()?);
        }
        Ok(if terms.len() == 1 { terms.remove(0) } else { Expr::And(terms) })
    }

    fn not(&mut self) -> Result<Expr, String> {
        if self.eat_name("not") {
            return self.nested(|p| Ok(Expr::Not(Box::new(p.not()?))));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let first = self.sum()?;
        let mut rest = vec![];
        loop {
            let cmp = match self.peek() {
                Some(Token::Op("==")) => Cmp::Eq,
                Some(Token::Op("!=")) => Cmp::Ne,
                Some(Token::Op("<")) => Cmp::Lt,
                Some(Token::Op("<=")) => Cmp::Le,
                Some(Token::Op(">")) => Cmp::Gt,
                Some(Token::Op(">=")) => Cmp::Ge,
                _ => break,
            };
            self.at += 1;
            rest.push((cmp, self.sum()?));
        }
        Ok(if rest.is_empty() { first } else { Expr::Compare(Box::new(first), rest) })
    }

    fn sum(&mut self) -> Result<Expr, String> {
        let mut left = self.product()?;
        loop {
            let op = if self.eat_op("+") {
                Arith::Add
            } else if self.eat_op("-") {
                Arith::Sub
            } else {
                return Ok(left);
            };
            left = Expr::Arith(op, Box::new(left), Box::new(self.product()?));
        }
    }

    fn product(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Token::Op("*")) => Arith::Mul,
                Some(Token::Op("/")) => Arith::TrueDiv,
                Some(Token::Op("//")) => Arith::FloorDiv,
                Some(Token::Op("%")) => Arith::Mod,
                _ => return Ok(left),
            };
            self.at += 1;
            left = Expr::Arith(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat_op("-") {
            return self.nested(|p| Ok(Expr::Neg(Box::new(p.unary()?))));
        }
        if self.eat_op("+") {
            return self.nested(|p| p.unary());
        }
        let base = self.atom()?;
        if self.eat_op("**") {
            // Right-associative, and binds tighter than a unary minus on its left.
            let exponent = self.nested(|p| p.unary())?;
            return Ok(Expr::Arith(Arith::Pow, Box::new(base), Box::new(exponent)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr, String> {
        match self.next()? {
            Token::Int(v) => Ok(Expr::Int(v)),
            Token::Float(v) => Ok(Expr::Float(v)),
            Token::Op("(") => {
                let e = self.expr()?;
                self.expect_op(")")?;
                Ok(e)
            }
            Token::Name(n) if n == "True" || n == "False" => Ok(Expr::Bool(n == "True")),
            Token::Name(n) if n == "L" && self.peek() == Some(&Token::Op("[")) => self.reference(),
            Token::Name(n) => self.name(n),
            t => Err(format!("unexpected `{t}`")),
        }
    }

    /// A symbol (`s52`, `u0`) or a call of a function torch writes (`math.trunc(…)`).
    fn name(&mut self, first: String) -> Result<Expr, String> {
        let mut name = first;
        while self.eat_op(".") {
            match self.next()? {
                Token::Name(part) => name = format!("{name}.{part}"),
                t => return Err(format!("unexpected `{t}` after `{name}.`")),
            }
        }
        if !self.eat_op("(") {
            let symbol =
                name.strip_prefix(['s', 'u']).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            return if symbol {
                Ok(Expr::Symbol(name))
            } else {
                Err(format!("`{name}` is neither a size nor a symbol"))
            };
        }
        let (func, arity) = Func::named(&name).ok_or_else(|| format!("`{name}` is not a function guards may call"))?;
        let args = self.nested(|p| {
            let mut args = vec![];
            if !p.eat_op(")") {
                loop {
                    args.push(p.expr()?);
                    if p.eat_op(")") {
                        break;
                    }
                    p.expect_op(",")?;
                }
            }
            Ok(args)
        })?;
        let fits = match arity {
            Some(n) => args.len() == n,
            None => !args.is_empty(),
        };
        if !fits {
            return Err(format!(
                "`{name}` takes {} argument(s), given {}",
                arity.map_or("1 or more".into(), |n| n.to_string()),
                args.len()
            ));
        }
        Ok(Expr::Call(func, args))
    }

    /// `L['x'][0].size()[1]` and the other properties of an input, after the `L`.
    fn reference(&mut self) -> Result<Expr, String> {
        let mut keys: Vec<String> = vec![];
        while self.eat_op("[") {
            keys.push(match self.next()? {
                Token::Str(s) => s,
                Token::Int(v) if v >= 0 => v.to_string(),
                t => return Err(format!("unexpected `{t}` as a key of `L`")),
            });
            self.expect_op("]")?;
        }
        let input = keys.join("_");
        self.expect_op(".")?;
        let method = match self.next()? {
            Token::Name(m) => m,
            t => return Err(format!("unexpected `{t}` after `L[…].`")),
        };
        let indexed = |p: &mut Parser| -> Result<usize, String> {
            p.expect_op("[")?;
            let d = match p.next()? {
                Token::Int(v) => usize::try_from(v).map_err(|_| format!("dim {v} is negative"))?,
                t => return Err(format!("unexpected `{t}` as a dim")),
            };
            p.expect_op("]")?;
            Ok(d)
        };
        let call = |p: &mut Parser| -> Result<(), String> {
            p.expect_op("(")?;
            p.expect_op(")")
        };
        let property = match method.as_str() {
            "shape" => Property::Size(indexed(self)?),
            "size" => {
                call(self)?;
                Property::Size(indexed(self)?)
            }
            "stride" => {
                call(self)?;
                Property::Stride(indexed(self)?)
            }
            "storage_offset" => {
                call(self)?;
                Property::StorageOffset
            }
            "numel" => {
                call(self)?;
                Property::Numel
            }
            "dim" => {
                call(self)?;
                Property::Rank
            }
            m => return Err(format!("`.{m}` of an input is not a size guards may read")),
        };
        Ok(Expr::Of(Reference { input, property }))
    }
}

#[cfg(test)]
mod tests;

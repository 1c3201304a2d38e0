//! The printed form's tokens: the parser's cursor over one line (tokens, values, types,
//! symbolic dims, scalars and quoted strings), and the few spellings that printing and reading
//! share (quoted strings, enum variants by their serde names). Below the op definitions, the
//! printer and the parser, which all read or write tokens.

use std::fmt::Write as _;

use serde::de::value::{Error as SerdeError, StrDeserializer};
use serde::de::IntoDeserializer;
use serde::{Deserialize, Serialize};

use crate::ir::op::WeightRecipe;
use crate::ir::sym::SymExpr;
use crate::ir::types::{DType, Dim, Scalar, TensorType};

/// The deepest nesting of parentheses in a symbolic expression, or of derived-weight recipes.
pub(crate) const MAX_DEPTH: usize = 64;

/// `s` in double quotes, with `\\`, `"` and control characters escaped.
pub(crate) fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A variant of a unit-only enum by its serde (snake_case) name.
pub(crate) fn by_name<'a, T: Deserialize<'a>>(name: &'a str) -> Option<T> {
    let d: StrDeserializer<'a, SerdeError> = name.into_deserializer();
    T::deserialize(d).ok()
}

/// The serde (snake_case) name of a unit variant: `LogicalNot` is `logical_not`.
pub(crate) fn serde_name<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".to_string(),
    }
}

/// The unread rest of one line.
pub(crate) struct Cursor<'a> {
    pub(crate) rest: &'a str,
}

impl<'a> Cursor<'a> {
    pub(crate) fn peek(&self, s: &str) -> bool {
        self.rest.starts_with(s)
    }

    pub(crate) fn eat(&mut self, s: &str) -> bool {
        match self.rest.strip_prefix(s) {
            Some(r) => {
                self.rest = r;
                true
            }
            None => false,
        }
    }

    pub(crate) fn expect(&mut self, s: &str) -> Result<(), String> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.expected(&format!("`{s}`")))
        }
    }

    /// Reads `s`, then hands back the cursor for what follows.
    pub(crate) fn after(&mut self, s: &str) -> Result<&mut Self, String> {
        self.expect(s)?;
        Ok(self)
    }

    pub(crate) fn expected(&self, what: &str) -> String {
        if self.rest.is_empty() {
            return format!("expected {what}, found the end of the line");
        }
        let shown: String = self.rest.chars().take(24).collect();
        format!("expected {what}, found `{shown}`")
    }

    pub(crate) fn end(&self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(self.expected("the end of the line"))
        }
    }

    pub(crate) fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let n = self.rest.find(|c: char| !f(c)).unwrap_or(self.rest.len());
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        head
    }

    pub(crate) fn ident(&mut self) -> Result<&'a str, String> {
        if !self.rest.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
            return Err(self.expected("a name"));
        }
        Ok(self.take_while(|c| c.is_ascii_alphanumeric() || c == '_'))
    }

    /// A number or keyword: `12`, `-1e-5`, `true`, `none`, `-inf`.
    pub(crate) fn word(&mut self) -> &'a str {
        self.take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '+' | '-'))
    }

    /// Reads `what` if it is the next whole word.
    pub(crate) fn keyword(&mut self, what: &str) -> bool {
        let save = self.rest;
        if self.word() == what {
            return true;
        }
        self.rest = save;
        false
    }

    pub(crate) fn parsed<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, String> {
        let save = self.rest;
        let word = self.word();
        word.parse().map_err(|_| {
            self.rest = save;
            self.expected(what)
        })
    }

    pub(crate) fn uint(&mut self) -> Result<usize, String> {
        if !self.rest.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(self.expected("an unsigned integer"));
        }
        self.parsed("an unsigned integer")
    }

    pub(crate) fn int(&mut self) -> Result<i64, String> {
        self.parsed("an integer")
    }

    pub(crate) fn boolean(&mut self) -> Result<bool, String> {
        self.parsed("`true` or `false`")
    }

    pub(crate) fn scalar(&mut self) -> Result<Scalar, String> {
        let save = self.rest;
        let word = self.word();
        let nan = |c: &mut Self| -> Option<f64> {
            let bits = u64::from_str_radix(c.after("(0x").ok()?.take_while(|ch| ch.is_ascii_hexdigit()), 16).ok();
            c.expect(")").ok()?;
            bits.map(f64::from_bits).filter(|x| x.is_nan())
        };
        let value = match word {
            "true" => Some(Scalar::Bool(true)),
            "false" => Some(Scalar::Bool(false)),
            "inf" => Some(Scalar::Float(f64::INFINITY)),
            "-inf" => Some(Scalar::Float(f64::NEG_INFINITY)),
            "nan" if self.peek("(") => nan(self).map(Scalar::Float),
            "nan" => Some(Scalar::Float(f64::NAN)),
            "-nan" => Some(Scalar::Float(-f64::NAN)),
            w if w.contains(['.', 'e', 'E']) => w.parse().ok().map(Scalar::Float),
            w => w.parse().ok().map(Scalar::Int),
        };
        value.ok_or_else(|| {
            self.rest = save;
            self.expected("a number or `true`/`false`")
        })
    }

    pub(crate) fn float(&mut self) -> Result<f64, String> {
        let save = self.rest;
        match self.scalar()? {
            Scalar::Float(x) => Ok(x),
            _ => {
                self.rest = save;
                Err(self.expected("a float"))
            }
        }
    }

    pub(crate) fn dtype(&mut self) -> Result<DType, String> {
        let save = self.rest;
        let word = self.take_while(|c| c.is_ascii_alphanumeric());
        DType::parse(word).ok_or_else(|| {
            self.rest = save;
            self.expected("a dtype")
        })
    }

    /// One of the words of a two-valued attribute: `yes` gives true, `no` false.
    pub(crate) fn choice(&mut self, yes: &str, no: &str) -> Result<bool, String> {
        if self.keyword(yes) {
            Ok(true)
        } else if self.keyword(no) {
            Ok(false)
        } else {
            Err(self.expected(&format!("`{yes}` or `{no}`")))
        }
    }

    /// A variant of a unit-only enum by its serde name.
    pub(crate) fn variant<T: for<'de> Deserialize<'de>>(&mut self) -> Result<T, String> {
        let save = self.rest;
        let word = self.word();
        by_name(word).ok_or_else(|| {
            self.rest = save;
            self.expected("a mode")
        })
    }

    /// A double-quoted string with the printer's escapes.
    pub(crate) fn string(&mut self) -> Result<String, String> {
        self.expect("\"")?;
        let mut out = String::new();
        let rest: &'a str = self.rest;
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    self.rest = chars.as_str();
                    return Ok(out);
                }
                '\\' => out.push(match chars.next() {
                    Some('n') => '\n',
                    Some('r') => '\r',
                    Some('t') => '\t',
                    Some(e @ ('"' | '\\')) => e,
                    Some('u') => unicode_escape(&mut chars).ok_or("bad `\\u{…}` escape in a string")?,
                    _ => return Err("unknown escape in a string".into()),
                }),
                c => out.push(c),
            }
        }
        Err("unterminated string".into())
    }

    /// A node or graph name: a quoted string, or the rest of the line as it is.
    pub(crate) fn label(&mut self) -> Result<String, String> {
        if self.peek("\"") {
            return self.string();
        }
        Ok(std::mem::take(&mut self.rest).to_string())
    }

    pub(crate) fn opt<T>(&mut self, value: impl FnOnce(&mut Self) -> Result<T, String>) -> Result<Option<T>, String> {
        if self.keyword("none") {
            Ok(None)
        } else {
            value(self).map(Some)
        }
    }

    pub(crate) fn opt_bound(&mut self) -> Result<Option<i64>, String> {
        if self.eat("?") {
            Ok(None)
        } else {
            self.int().map(Some)
        }
    }

    pub(crate) fn sep_by<T>(
        &mut self,
        sep: &str,
        mut item: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut out = vec![item(self)?];
        while self.eat(sep) {
            out.push(item(self)?);
        }
        Ok(out)
    }

    /// `[a, b, …]`.
    pub(crate) fn list<T>(&mut self, item: impl FnMut(&mut Self) -> Result<T, String>) -> Result<Vec<T>, String> {
        self.expect("[")?;
        if self.eat("]") {
            return Ok(vec![]);
        }
        let out = self.sep_by(", ", item)?;
        self.expect("]")?;
        Ok(out)
    }

    pub(crate) fn ints(&mut self) -> Result<Vec<i64>, String> {
        self.list(Cursor::int)
    }

    /// `indices=[idx, :]`: which positions have an index tensor.
    pub(crate) fn present(&mut self) -> Result<Vec<bool>, String> {
        self.list(|c| {
            if c.keyword("idx") {
                Ok(true)
            } else if c.eat(":") {
                Ok(false)
            } else {
                Err(c.expected("`idx` or `:`"))
            }
        })
    }

    /// A slice's end: `end` is "to the end" (`i64::MAX`).
    pub(crate) fn slice_end(&mut self) -> Result<Dim, String> {
        if self.keyword("end") {
            Ok(Dim::Static(i64::MAX))
        } else {
            self.dim()
        }
    }

    pub(crate) fn tensor_type(&mut self) -> Result<TensorType, String> {
        let dtype = self.dtype()?;
        self.expect("[")?;
        let dims = if self.peek("]") { vec![] } else { self.sep_by(",", Cursor::dim)? };
        self.expect("]")?;
        Ok(TensorType { dtype, dims })
    }

    /// A dimension: static when its expression is a literal.
    pub(crate) fn dim(&mut self) -> Result<Dim, String> {
        Ok(match self.sum(0)? {
            SymExpr::Int(v) => Dim::Static(v),
            e => Dim::Sym(e),
        })
    }

    pub(crate) fn sum(&mut self, depth: usize) -> Result<SymExpr, String> {
        let mut terms = vec![self.term(depth)?];
        loop {
            if self.eat(" + ") {
                terms.push(self.term(depth)?);
            } else if self.eat(" - ") {
                let digits = self.take_while(|c| c.is_ascii_digit());
                let v = format!("-{digits}").parse().map_err(|_| self.expected("an integer after ` - `"))?;
                terms.push(SymExpr::Int(v));
            } else {
                break;
            }
        }
        Ok(<[SymExpr; 1]>::try_from(terms).map_or_else(SymExpr::Add, |[t]| t))
    }

    pub(crate) fn term(&mut self, depth: usize) -> Result<SymExpr, String> {
        let mut lhs = self.product(depth)?;
        loop {
            let make = if self.eat(" // ") {
                SymExpr::FloorDiv
            } else if self.eat(" % ") {
                SymExpr::Mod
            } else {
                return Ok(lhs);
            };
            lhs = make(Box::new(lhs), Box::new(self.power(depth)?));
        }
    }

    pub(crate) fn product(&mut self, depth: usize) -> Result<SymExpr, String> {
        let factors = self.sep_by("*", |c| c.power(depth))?;
        Ok(<[SymExpr; 1]>::try_from(factors).map_or_else(SymExpr::Mul, |[f]| f))
    }

    pub(crate) fn power(&mut self, depth: usize) -> Result<SymExpr, String> {
        let base = self.atom(depth)?;
        if self.eat("^") {
            return Ok(SymExpr::Pow(Box::new(base), Box::new(self.atom(depth)?)));
        }
        Ok(base)
    }

    pub(crate) fn atom(&mut self, depth: usize) -> Result<SymExpr, String> {
        if depth >= MAX_DEPTH {
            return Err(format!("the expression nests deeper than {MAX_DEPTH} levels"));
        }
        if self.eat("(") {
            let e = self.sum(depth + 1)?;
            self.expect(")")?;
            return Ok(e);
        }
        if self.peek("-") || self.rest.starts_with(|c: char| c.is_ascii_digit()) {
            let save = self.rest;
            let text = format!("{}{}", if self.eat("-") { "-" } else { "" }, self.take_while(|c| c.is_ascii_digit()));
            return text.parse().map(SymExpr::Int).map_err(|_| {
                self.rest = save;
                self.expected("an integer")
            });
        }
        let name = self.ident()?;
        if !self.eat("(") {
            return Ok(SymExpr::sym(name));
        }
        let args = if self.peek(")") { vec![] } else { self.sep_by(", ", |c| c.sum(depth + 1))? };
        self.expect(")")?;
        match name {
            "max" => Ok(SymExpr::Max(args)),
            "min" => Ok(SymExpr::Min(args)),
            "ceildiv" => match <[SymExpr; 2]>::try_from(args) {
                Ok([a, b]) => Ok(SymExpr::CeilDiv(Box::new(a), Box::new(b))),
                Err(args) => Err(format!("ceildiv takes 2 arguments, found {}", args.len())),
            },
            other => Err(format!("unknown function `{other}` in a size expression")),
        }
    }

    /// A derived weight's recipe (see the printer's module doc).
    pub(crate) fn recipe(&mut self, depth: usize) -> Result<WeightRecipe, String> {
        if depth >= MAX_DEPTH {
            return Err(format!("the recipe nests deeper than {MAX_DEPTH} levels"));
        }
        let name = self.ident()?;
        self.expect("(")?;
        let recipe = match name {
            "cast" => WeightRecipe::Cast { weight: self.string()? },
            "concat_rows" => WeightRecipe::ConcatRows {
                weights: if self.peek(")") { vec![] } else { self.sep_by(", ", Cursor::string)? },
            },
            "bn_folded_weight" => WeightRecipe::BnFoldedWeight {
                weight: self.string()?,
                gamma: self.after(", gamma=")?.opt(Cursor::string)?,
                var: self.after(", var=")?.string()?,
                eps: self.after(", eps=")?.float()?,
            },
            "bn_folded_bias" => WeightRecipe::BnFoldedBias {
                bias: self.after("bias=")?.opt(Cursor::string)?,
                gamma: self.after(", gamma=")?.opt(Cursor::string)?,
                beta: self.after(", beta=")?.opt(Cursor::string)?,
                mean: self.after(", mean=")?.string()?,
                var: self.after(", var=")?.string()?,
                eps: self.after(", eps=")?.float()?,
            },
            "pad" => WeightRecipe::Pad {
                source: Box::new(self.recipe(depth + 1)?),
                dims: self.after(", dims=")?.ints()?,
                padded: self.after(", padded=")?.ints()?,
                blocks: if self.eat(", blocks=") { self.ints()? } else { vec![] },
            },
            "narrow" => WeightRecipe::Narrow {
                source: Box::new(self.recipe(depth + 1)?),
                dims: self.after(", dims=")?.ints()?,
                dim: self.after(", dim=")?.int()?,
                start: self.after(", start=")?.int()?,
                len: self.after(", len=")?.int()?,
            },
            "permute" => WeightRecipe::Permute {
                source: Box::new(self.recipe(depth + 1)?),
                dims: self.after(", dims=")?.ints()?,
                perm: self.after(", perm=")?.ints()?,
            },
            other => return Err(format!("unknown weight recipe `{other}`")),
        };
        self.expect(")")?;
        Ok(recipe)
    }
}

/// The `{XXXX}` of a `\u{XXXX}` escape.
pub(crate) fn unicode_escape(chars: &mut std::str::Chars<'_>) -> Option<char> {
    if chars.next()? != '{' {
        return None;
    }
    let mut hex = String::new();
    for c in chars.by_ref() {
        if c == '}' {
            return char::from_u32(u32::from_str_radix(&hex, 16).ok()?);
        }
        hex.push(c);
    }
    None
}

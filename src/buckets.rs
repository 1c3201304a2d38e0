//! Size buckets of a program with bounded dynamic dims: which values of each symbol get an
//! executable (`--buckets SYM=N,N,…|pow2|auto:K`), their cross product, and what each bucket
//! serves. A real size runs in the smallest bucket that holds it (see `run`).

use std::collections::BTreeMap;

use crate::import::Program;
use crate::Error;

/// At most this many buckets (the cross product over symbols) per artifact.
pub(crate) const MAX_BUCKETS: usize = 64;

/// How to choose one symbol's bucket sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sizes {
    /// Exactly these sizes.
    List(Vec<i64>),
    /// Powers of two covering the range, its maximum included.
    Pow2,
    /// `K` sizes minimizing the expected padding for real sizes uniform in the range.
    Auto(usize),
}

/// One `--buckets` argument: a symbol (as named in the archive, or `input:dim`; empty for
/// every dynamic dim) and its sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub key: String,
    pub sizes: Sizes,
}

impl Choice {
    /// How the argument was written, for messages.
    fn shown(&self) -> String {
        let sizes = match &self.sizes {
            Sizes::List(l) => l.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
            Sizes::Pow2 => "pow2".into(),
            Sizes::Auto(k) => format!("auto:{k}"),
        };
        if self.key.is_empty() {
            sizes
        } else {
            format!("{}={sizes}", self.key)
        }
    }
}

/// Parses `SYM=N,N,…`, `SYM=pow2` or `SYM=auto:K`, or a bare `pow2` or `auto:K` for every
/// dynamic dim.
pub(crate) fn parse_choice(s: &str) -> Result<Choice, String> {
    let expected = "expected SYM=N,N,…, SYM=pow2, SYM=auto:K, or a bare pow2 or auto:K for every dynamic dim";
    let (key, spec) = match s.split_once('=') {
        Some(pair) => pair,
        None if s == "pow2" || s.starts_with("auto:") => ("", s),
        None => return Err(format!("`{s}`: {expected}")),
    };
    let sizes = if spec == "pow2" {
        Sizes::Pow2
    } else if let Some(k) = spec.strip_prefix("auto:") {
        let k: usize = k.parse().map_err(|_| format!("`{s}`: auto:K needs a count K ≥ 1"))?;
        if k == 0 {
            return Err(format!("`{s}`: auto:K needs a count K ≥ 1"));
        }
        Sizes::Auto(k)
    } else {
        let list: Result<Vec<i64>, _> = spec.split(',').map(|n| n.trim().parse::<i64>()).collect();
        let mut list = list.map_err(|_| format!("`{s}`: sizes must be integers, pow2 or auto:K"))?;
        list.sort_unstable();
        list.dedup();
        Sizes::List(list)
    };
    Ok(Choice { key: key.to_string(), sizes })
}

/// One bucket per dynamic dim at the size of the export's example inputs (for programs run
/// only at that size, such as the op cases).
#[cfg(test)]
pub(crate) fn at_example_sizes(program: &Program) -> Vec<Choice> {
    program
        .bindings
        .iter()
        .filter_map(|(s, b)| Some(Choice { key: s.clone(), sizes: Sizes::List(vec![b.example?]) }))
        .collect()
}

/// One bucket: the value of each symbol, the real sizes it serves and its expected padding.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Planned {
    pub name: String,
    pub values: BTreeMap<String, i64>,
    /// Per symbol, the real sizes `[lo, hi]` this bucket serves.
    pub serves: BTreeMap<String, (i64, i64)>,
    /// Expected fraction of padded elements over the sizes it serves, taken uniform.
    pub padding_waste: f64,
}

/// Each bucket size of one symbol with the real sizes `[lo, hi]` it serves.
type Served = Vec<(i64, (i64, i64))>;

/// One symbol's range.
struct Range {
    name: String,
    min: i64,
    max: i64,
}

/// The buckets for `program`: one unnamed `main` bucket at the example sizes for a static
/// program; the cross product of each symbol's sizes otherwise (default `pow2`).
pub(crate) fn plan(program: &Program, choices: &[Choice]) -> Result<Vec<Planned>, Error> {
    let ranges = ranges(program)?;
    if ranges.is_empty() {
        if let Some(c) = choices.first() {
            return Err(Error::Unsupported(format!("--buckets {}: the program has no dynamic dims", c.shown())));
        }
        return Ok(vec![Planned {
            name: "main".into(),
            values: BTreeMap::new(),
            serves: BTreeMap::new(),
            padding_waste: 0.0,
        }]);
    }
    let mut per_symbol: Vec<(String, Served)> = Vec::new();
    for r in &ranges {
        // A bare choice applies to every dim; one naming this dim overrides it.
        let mut chosen = Sizes::Pow2;
        for c in choices.iter().filter(|c| c.key.is_empty()) {
            chosen = c.sizes.clone();
        }
        for c in choices.iter().filter(|c| !c.key.is_empty()) {
            if resolve(program, &c.key, &ranges)? == r.name {
                chosen = c.sizes.clone();
            }
        }
        let sizes = sizes_for(r, &chosen)?;
        per_symbol.push((r.name.clone(), served(r.min, &sizes)));
    }
    let count: usize = per_symbol.iter().map(|(_, v)| v.len()).product();
    if count > MAX_BUCKETS {
        let shape: Vec<String> = per_symbol.iter().map(|(s, v)| format!("{} for {s}", v.len())).collect();
        return Err(Error::Unsupported(format!(
            "{count} buckets ({}) exceed the limit of {MAX_BUCKETS}; give fewer sizes with --buckets SYM=N,N,… or SYM=auto:K",
            shape.join(" × ")
        )));
    }
    let mut out =
        vec![Planned { name: String::new(), values: BTreeMap::new(), serves: BTreeMap::new(), padding_waste: 0.0 }];
    for (sym, sizes) in &per_symbol {
        out = out
            .into_iter()
            .flat_map(|p| {
                sizes.iter().map(move |&(v, range)| {
                    let mut q = p.clone();
                    q.values.insert(sym.clone(), v);
                    q.serves.insert(sym.clone(), range);
                    q
                })
            })
            .collect();
    }
    for p in &mut out {
        let kept: f64 = p.serves.iter().map(|(s, &(lo, hi))| (lo + hi) as f64 / 2.0 / p.values[s] as f64).product();
        p.padding_waste = 1.0 - kept;
        p.name = p.values.iter().map(|(s, v)| format!("{s}-{v}")).collect::<Vec<_>>().join(".");
    }
    Ok(out)
}

/// Every dynamic dim of the inputs with its range; a symbol with no upper bound cannot be
/// bucketed. (A size the data decides is computed at its bound in every bucket.)
fn ranges(program: &Program) -> Result<Vec<Range>, Error> {
    program
        .graph
        .symbols()
        .iter()
        .filter(|(name, _)| program.bindings.contains_key(*name))
        .map(|(name, b)| {
            let max = b.max.ok_or_else(|| {
                Error::Unsupported(format!(
                    "symbol `{name}` has no upper bound; export it with torch.export.Dim(…, max=N)"
                ))
            })?;
            Ok(Range { name: name.clone(), min: b.min.unwrap_or(1).max(1), max })
        })
        .collect()
}

/// The symbol a `--buckets` key names: the archive's name, or `input:dim`.
fn resolve(program: &Program, key: &str, ranges: &[Range]) -> Result<String, Error> {
    if ranges.iter().any(|r| r.name == key) {
        return Ok(key.to_string());
    }
    if let Some((input, dim)) = key.rsplit_once(':') {
        let found = program.bindings.iter().find(|(_, b)| b.input_name == input && dim.parse() == Ok(b.dim));
        if let Some((sym, _)) = found {
            return Ok(sym.clone());
        }
    }
    let known: Vec<String> =
        program.bindings.iter().map(|(s, b)| format!("{s} (= {}:{})", b.input_name, b.dim)).collect();
    Err(Error::Unsupported(format!("--buckets {key}: no such dynamic dim; the program has {}", known.join(", "))))
}

fn sizes_for(r: &Range, sizes: &Sizes) -> Result<Vec<i64>, Error> {
    let v = match sizes {
        Sizes::List(list) => {
            if let Some(bad) = list.iter().find(|&&n| n < r.min || n > r.max) {
                return Err(Error::Unsupported(format!(
                    "--buckets {}: size {bad} is outside the range [{}, {}]",
                    r.name, r.min, r.max
                )));
            }
            list.clone()
        }
        Sizes::Pow2 => {
            let mut v = Vec::new();
            let mut p = 1i64;
            while p < r.max {
                if p >= r.min {
                    v.push(p);
                }
                p *= 2;
            }
            v.push(r.max);
            v
        }
        Sizes::Auto(k) => auto(r.min, r.max, *k)?,
    };
    Ok(v)
}

/// The sizes each bucket serves: bucket `v[i]` takes the real sizes above `v[i-1]`.
fn served(min: i64, sizes: &[i64]) -> Served {
    let mut lo = min;
    sizes
        .iter()
        .map(|&v| {
            let r = (v, (lo, v));
            lo = v + 1;
            r
        })
        .collect()
}

/// `k` bucket sizes in `[min, max]` (max included) minimizing the total padding `Σ (b - s)`
/// over every real size `s`, by dynamic programming over the range.
fn auto(min: i64, max: i64, k: usize) -> Result<Vec<i64>, Error> {
    const MAX_RANGE: i64 = 8192;
    if max - min + 1 > MAX_RANGE {
        return Err(Error::Unsupported(format!(
            "auto:K chooses among at most {MAX_RANGE} sizes; the range [{min}, {max}] is wider: list the sizes"
        )));
    }
    let n = (max - min + 1) as usize;
    let k = k.min(n);
    // pad(a, b): padding when sizes min+a ..= min+b all run at min+b.
    let pad = |a: usize, b: usize| -> u64 {
        let len = (b - a + 1) as u64;
        len * (len - 1) / 2
    };
    // best[j][i]: least padding for sizes 0..=i with j buckets, the last at i.
    let mut best = vec![vec![u64::MAX; n]; k + 1];
    let mut from = vec![vec![usize::MAX; n]; k + 1];
    for (i, b) in best[1].iter_mut().enumerate() {
        *b = pad(0, i);
    }
    for j in 2..=k {
        for i in 0..n {
            for prev in 0..i {
                if best[j - 1][prev] == u64::MAX {
                    continue;
                }
                let c = best[j - 1][prev] + pad(prev + 1, i);
                if c < best[j][i] {
                    best[j][i] = c;
                    from[j][i] = prev;
                }
            }
        }
    }
    let mut out = Vec::with_capacity(k);
    let (mut j, mut i) = (k, n - 1);
    loop {
        out.push(min + i as i64);
        if j == 1 {
            break;
        }
        i = from[j][i];
        j -= 1;
    }
    out.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!(parse_choice("seq=pow2"), Ok(Choice { key: "seq".into(), sizes: Sizes::Pow2 }));
        assert_eq!(
            parse_choice("input_ids:1=64,8,8"),
            Ok(Choice { key: "input_ids:1".into(), sizes: Sizes::List(vec![8, 64]) })
        );
        assert_eq!(parse_choice("s=auto:3"), Ok(Choice { key: "s".into(), sizes: Sizes::Auto(3) }));
        assert!(parse_choice("s=auto:0").is_err() && parse_choice("s").is_err() && parse_choice("s=x").is_err());
        assert_eq!(parse_choice("pow2"), Ok(Choice { key: String::new(), sizes: Sizes::Pow2 }));
        assert_eq!(parse_choice("auto:4"), Ok(Choice { key: String::new(), sizes: Sizes::Auto(4) }));
        assert!(parse_choice("auto:0").is_err() && parse_choice("16,64").is_err());
    }

    #[test]
    fn pow2_covers_the_range() {
        let r = |min, max| Range { name: "s".into(), min, max };
        assert_eq!(sizes_for(&r(2, 512), &Sizes::Pow2).unwrap(), [2, 4, 8, 16, 32, 64, 128, 256, 512]);
        assert_eq!(sizes_for(&r(3, 100), &Sizes::Pow2).unwrap(), [4, 8, 16, 32, 64, 100]);
        assert_eq!(served(2, &[2, 4, 8]), [(2, (2, 2)), (4, (3, 4)), (8, (5, 8))]);
    }

    /// Uniform sizes: equal-width buckets are optimal, and the maximum is always one.
    #[test]
    fn auto_minimizes_padding() {
        assert_eq!(auto(1, 8, 2).unwrap(), [4, 8]);
        assert_eq!(auto(1, 9, 3).unwrap(), [3, 6, 9]);
        assert_eq!(auto(2, 512, 1).unwrap(), [512]);
        let four = auto(2, 512, 4).unwrap();
        assert_eq!((four.len(), four[3]), (4, 512));
    }
}

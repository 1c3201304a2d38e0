//! Size buckets of a program with bounded dynamic dims: which values of each symbol get an
//! executable (`--buckets SYM=N,N,…|pow2|auto:K`), their cross product, and what each bucket
//! serves. A real size runs in the smallest bucket that holds it (see `run`).
//!
//! A dim the export left unbounded (`Dim.AUTO`: `int_oo`) takes its bound from `--max SYM=N` or
//! from the largest size `--buckets` lists for it ([`bound_symbols`]). By default each dim gets
//! powers of two; where their cross product would pass [`MAX_BUCKETS`], the dims chosen by
//! default get fewer sizes each, taken from their powers of two where dropping one costs the
//! least expected padding, and the plan says what it chose ([`Plan::note`]).

use std::collections::BTreeMap;

use torchtpu_passes::ir::Bounds;

use crate::import::Program;
use crate::Error;

/// At most this many buckets (the cross product over symbols) per artifact: the default plan
/// keeps under it by choosing fewer sizes, explicit choices that pass it are refused.
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
    /// No sizes, a bound (`--max SYM=N`): the largest size served, for a dim the export left
    /// unbounded or to narrow one it bounds.
    UpTo(i64),
}

/// One `--buckets` argument: a symbol (as named in the archive, or `input:dim`; empty for
/// every dynamic dim) and its sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub key: String,
    pub sizes: Sizes,
}

impl Choice {
    /// The flag as it was written, for messages: `--buckets s0=8,16` or `--max s0=64`.
    fn shown_as_flag(&self) -> String {
        let sizes = match &self.sizes {
            Sizes::List(l) => l.iter().map(i64::to_string).collect::<Vec<_>>().join(","),
            Sizes::Pow2 => "pow2".into(),
            Sizes::Auto(k) => format!("auto:{k}"),
            Sizes::UpTo(n) => return format!("--max {}={n}", self.key),
        };
        if self.key.is_empty() {
            format!("--buckets {sizes}")
        } else {
            format!("--buckets {}={sizes}", self.key)
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

/// Parses `--max SYM=N`: the largest size of a dynamic dim.
pub(crate) fn parse_max(s: &str) -> Result<Choice, String> {
    let (key, n) = s.split_once('=').ok_or_else(|| format!("`{s}`: expected SYM=N (a dim and its largest size)"))?;
    match n.trim().parse::<i64>() {
        Ok(n) if n >= 1 => Ok(Choice { key: key.to_string(), sizes: Sizes::UpTo(n) }),
        _ => Err(format!("`{s}`: the largest size must be an integer ≥ 1")),
    }
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

/// The buckets of a program and how they were chosen.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Plan {
    pub buckets: Vec<Planned>,
    /// What the default chose where its powers of two would pass [`MAX_BUCKETS`].
    pub note: Option<String>,
}

/// The buckets for `program`: one unnamed `main` bucket at the example sizes for a static
/// program; the cross product of each symbol's sizes otherwise (default `pow2`, fewer per dim
/// where that would pass [`MAX_BUCKETS`]).
pub(crate) fn plan(program: &Program, choices: &[Choice]) -> Result<Plan, Error> {
    let ranges = ranges(program, choices)?;
    if ranges.is_empty() {
        if let Some(c) = choices.first() {
            return Err(Error::Unsupported(format!("{}: the program has no dynamic dims", c.shown_as_flag())));
        }
        let main =
            Planned { name: "main".into(), values: BTreeMap::new(), serves: BTreeMap::new(), padding_waste: 0.0 };
        return Ok(Plan { buckets: vec![main], note: None });
    }
    let mut per_symbol: Vec<(String, Vec<i64>)> = Vec::new();
    let mut by_default: Vec<usize> = Vec::new();
    for r in &ranges {
        // A bare choice applies to every dim; one naming this dim overrides it.
        let mut chosen = None;
        for c in choices.iter().filter(|c| c.key.is_empty() && !matches!(c.sizes, Sizes::UpTo(_))) {
            chosen = Some(c.sizes.clone());
        }
        for c in choices.iter().filter(|c| !c.key.is_empty() && !matches!(c.sizes, Sizes::UpTo(_))) {
            if resolve_in(program, &c.key)? == r.name {
                chosen = Some(c.sizes.clone());
            }
        }
        if chosen.is_none() {
            by_default.push(per_symbol.len());
        }
        per_symbol.push((r.name.clone(), sizes_for(r, &chosen.unwrap_or(Sizes::Pow2))?));
    }
    let count: usize = per_symbol.iter().map(|(_, v)| v.len()).product();
    let note = if count > MAX_BUCKETS { within_budget(&ranges, &mut per_symbol, &by_default)? } else { None };
    let mut out =
        vec![Planned { name: String::new(), values: BTreeMap::new(), serves: BTreeMap::new(), padding_waste: 0.0 }];
    for ((sym, sizes), r) in per_symbol.iter().zip(&ranges) {
        let sizes = served(r.min, sizes);
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
    Ok(Plan { buckets: out, note })
}

/// Fewer sizes for the dims chosen by default (`by_default`, indices into `per_symbol`) until
/// the cross product is at most [`MAX_BUCKETS`]: each step drops one size from the dim whose
/// expected padding grows the least (real sizes taken uniform over its range), the sizes kept
/// spread evenly over its powers of two, its maximum always among them. What it chose, or an
/// error when the dims chosen by hand alone pass the limit.
fn within_budget(
    ranges: &[Range],
    per_symbol: &mut [(String, Vec<i64>)],
    by_default: &[usize],
) -> Result<Option<String>, Error> {
    let counts: Vec<usize> = per_symbol.iter().map(|(_, v)| v.len()).collect();
    let names: Vec<String> = per_symbol.iter().map(|(s, _)| s.clone()).collect();
    let shape = |counts: &[usize]| {
        let dims: Vec<String> = counts.iter().zip(&names).map(|(n, s)| format!("{n} for {s}")).collect();
        dims.join(" × ")
    };
    let fixed: usize = (0..counts.len()).filter(|i| !by_default.contains(i)).map(|i| counts[i]).product();
    if fixed > MAX_BUCKETS || by_default.is_empty() {
        let count: usize = counts.iter().product();
        return Err(Error::Unsupported(format!(
            "{count} buckets ({}) exceed the limit of {MAX_BUCKETS}; give fewer sizes with --buckets SYM=N,N,… or SYM=auto:K",
            shape(&counts)
        )));
    }
    let budget = MAX_BUCKETS / fixed;
    let ladders: Vec<Vec<i64>> = by_default.iter().map(|&i| per_symbol[i].1.clone()).collect();
    let mut keep: Vec<usize> = ladders.iter().map(Vec::len).collect();
    while keep.iter().product::<usize>() > budget {
        // The dim whose next drop keeps the largest share of real elements (ties: the first).
        let cost = |d: usize, k: usize| 1.0 - waste(&ranges[by_default[d]], &spread(&ladders[d], k));
        let best = (0..keep.len())
            .filter(|&d| keep[d] > 1)
            .max_by(|&a, &b| {
                let ratio = |d: usize| cost(d, keep[d] - 1) / cost(d, keep[d]);
                ratio(a).total_cmp(&ratio(b)).then(b.cmp(&a))
            })
            .ok_or_else(|| Error::Internal("no dim left to take a size from".into()))?;
        keep[best] -= 1;
    }
    for (d, &i) in by_default.iter().enumerate() {
        per_symbol[i].1 = spread(&ladders[d], keep[d]);
    }
    let chosen: Vec<usize> = per_symbol.iter().map(|(_, v)| v.len()).collect();
    let sizes: Vec<String> = by_default
        .iter()
        .map(|&i| {
            let (s, v) = &per_symbol[i];
            format!("{s}: {}", v.iter().map(i64::to_string).collect::<Vec<_>>().join(", "))
        })
        .collect();
    Ok(Some(format!(
        "powers of two for every dynamic dim would make {} buckets ({}), more than the {MAX_BUCKETS} a compile makes \
         by default; chose {} ({}) — sizes are padded up to the next bucket; `--buckets SYM=N,N,…` chooses others",
        counts.iter().product::<usize>(),
        shape(&counts),
        chosen.iter().product::<usize>(),
        sizes.join("; ")
    )))
}

/// `k` of `ladder`'s sizes spread evenly over it, its last (the maximum) always kept.
fn spread(ladder: &[i64], k: usize) -> Vec<i64> {
    let n = ladder.len();
    let k = k.clamp(1, n);
    (1..=k).map(|j| ladder[(j * n).div_ceil(k) - 1]).collect()
}

/// The expected share of padded elements along one dim with bucket sizes `sizes`, real sizes
/// uniform over its range.
fn waste(r: &Range, sizes: &[i64]) -> f64 {
    let total = (r.max - r.min + 1) as f64;
    served(r.min, sizes)
        .iter()
        .map(|&(b, (lo, hi))| {
            let count = (hi - lo + 1) as f64;
            count - (lo + hi) as f64 * count / 2.0 / b as f64
        })
        .sum::<f64>()
        / total
}

/// Every dynamic dim of the inputs with its range. A symbol the export left unbounded takes
/// its bound from `--max` or from the largest size listed for it; a `--max` narrows a bound the
/// export gives, never widens it. (A size the data decides is computed at its bound in every
/// bucket.)
fn ranges(program: &Program, choices: &[Choice]) -> Result<Vec<Range>, Error> {
    let bound = |c: &Choice| match c.sizes {
        Sizes::UpTo(n) => Some(n),
        _ => None,
    };
    let named: Vec<(&Choice, String)> = choices
        .iter()
        .filter(|c| !c.key.is_empty())
        .map(|c| Ok((c, resolve_in(program, &c.key)?)))
        .collect::<Result<_, Error>>()?;
    program
        .graph
        .symbols()
        .iter()
        .filter(|(name, _)| program.bindings.contains_key(*name))
        .map(|(name, b)| {
            let mine = || named.iter().filter(|(_, s)| s == name).map(|(c, _)| *c);
            let min = b.min.unwrap_or(1).max(1);
            let max = match (b.max, mine().find_map(bound)) {
                (Some(declared), Some(n)) if n > declared => {
                    return Err(Error::Unsupported(format!(
                        "--max {name}={n}: the export bounds `{name}` at {declared}; larger sizes were not traced"
                    )))
                }
                (_, Some(n)) => n,
                (Some(declared), None) => declared,
                (None, None) => {
                    let listed = mine().find_map(|c| match &c.sizes {
                        Sizes::List(l) => l.last().copied(),
                        _ => None,
                    });
                    listed.ok_or_else(|| unbounded(program, name))?
                }
            };
            if max < min {
                return Err(Error::Unsupported(format!("`{name}`: its largest size {max} is below its least, {min}")));
            }
            Ok(Range { name: name.clone(), min, max })
        })
        .collect()
}

/// Why an unbounded symbol cannot be compiled, naming both ways to bound it.
fn unbounded(program: &Program, name: &str) -> Error {
    let at = program.bindings.get(name).map_or_else(String::new, |b| format!(" (`{}` dim {})", b.input_name, b.dim));
    Error::Unsupported(format!(
        "dynamic dim `{name}`{at} has no upper bound (the export left it unbounded: `Dim.AUTO`, or a `Dim` without \
         max): bound it with `--max {name}=N`, or list its sizes with `--buckets {name}=N,N,…` (the largest is the \
         bound); larger inputs are then refused"
    ))
}

/// The program's symbols with the bounds of the sizes its buckets serve: each input's dim from
/// at least 1 (a size 0 is not served) up to its maximum as the choices set it (`--max`, or the
/// largest size listed for an unbounded one). The sizes the data decides keep theirs.
pub(crate) fn bounds(program: &Program, choices: &[Choice]) -> Result<BTreeMap<String, Bounds>, Error> {
    let mut out = program.graph.symbols().clone();
    for r in ranges(program, choices)? {
        if let Some(b) = out.get_mut(&r.name) {
            *b = Bounds { min: Some(r.min), max: Some(r.max) };
        }
    }
    Ok(out)
}

/// `program` with its symbols bounded as the choices say ([`bounds`]), so that the artifact
/// records the sizes it serves and refuses larger ones.
pub(crate) fn bound_symbols(program: &mut Program, choices: &[Choice]) -> Result<(), Error> {
    for (name, b) in bounds(program, choices)? {
        program.graph.add_symbol(name, b);
    }
    Ok(())
}

/// The symbol a `--buckets` or `--max` key names: the archive's name, or `input:dim`.
fn resolve_in(program: &Program, key: &str) -> Result<String, Error> {
    if program.bindings.contains_key(key) {
        return Ok(key.to_string());
    }
    if let Some((input, dim)) = key.rsplit_once(':') {
        let found = program.bindings.iter().find(|(_, b)| b.input_name == input && dim.parse() == Ok(b.dim));
        if let Some((sym, _)) = found {
            return Ok(sym.clone());
        }
    }
    Err(no_such_dim(program, key))
}

fn no_such_dim(program: &Program, key: &str) -> Error {
    let known: Vec<String> =
        program.bindings.iter().map(|(s, b)| format!("{s} (= {}:{})", b.input_name, b.dim)).collect();
    let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
    Error::Unsupported(format!("--buckets {key}: no such dynamic dim; the program has {known}"))
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
        Sizes::UpTo(_) => return Err(Error::Internal(format!("--max {} is not a choice of sizes", r.name))),
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

    /// Three dims of 7, 7 and 4 powers of two (196 buckets): the default keeps at most 64, each
    /// dim's maximum among its sizes, spread over its powers of two; dims chosen by hand keep
    /// theirs, and when they alone pass the limit the plan is refused.
    #[test]
    fn the_default_keeps_under_the_budget() {
        assert_eq!(spread(&[2, 4, 8, 16, 32, 64, 128, 256, 512], 3), [8, 64, 512]);
        assert_eq!(spread(&[1, 2, 4], 1), [4]);
        let r = |name: &str, min, max| Range { name: name.into(), min, max };
        let ranges = [r("s", 1, 64), r("t", 1, 64), r("b", 1, 8)];
        let pow2 = || -> Vec<(String, Vec<i64>)> {
            ranges.iter().map(|x| (x.name.clone(), sizes_for(x, &Sizes::Pow2).expect("sizes"))).collect()
        };
        let mut per = pow2();
        let note = within_budget(&ranges, &mut per, &[0, 1, 2]).expect("fits").expect("a note");
        assert!(note.contains("196 buckets (7 for s × 7 for t × 4 for b)"), "{note}");
        assert!(per.iter().map(|(_, v)| v.len()).product::<usize>() <= MAX_BUCKETS, "{per:?}");
        assert!(per.iter().zip(&ranges).all(|((_, v), r)| v.last() == Some(&r.max)), "{per:?}");
        // The batch, listed by hand, keeps its 4 sizes: the others share 16 buckets.
        let mut per = pow2();
        within_budget(&ranges, &mut per, &[0, 1]).expect("fits");
        assert_eq!(per[2].1, [1, 2, 4, 8]);
        assert!(per[0].1.len() * per[1].1.len() <= 16, "{per:?}");
        let err = within_budget(&ranges, &mut pow2(), &[]).expect_err("all by hand");
        assert!(err.to_string().contains("196 buckets"), "{err}");
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

//! `plan`: on which TPU slice a program fits, split how, and what a call would cost.
//!
//! Every candidate — a slice (`tpu:v5e:2x2`) and a mesh that splits the program over its chips
//! (`tp=4`, `fsdp=2,tp=2`, …) — is compiled deviceless through libtpu, through the compile cache,
//! without writing an artifact. From each compile: libtpu's peak device memory per chip against
//! the chip's HBM (libtpu's figure too), the argument bytes per chip (the weights' share), XLA's
//! cost model (FLOPs and bytes accessed of one chip's program) and the collectives' bytes. From
//! those and a table of chip figures (`schemas/tpu-chips.json`, or `--prices FILE`), a roofline
//! **estimate** of one call's time — the larger of FLOPs ÷ the chip's bf16 peak and bytes ÷ its
//! HBM bandwidth, plus the collectives' bytes ÷ its ICI bandwidth — and of its price. Nothing
//! here is measured: XLA's cost model counts a loop's body once, ignores overlap and assumes
//! peak rates.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use torchtpu_passes::ir::{Dim, InputKind, Mesh, MeshAxis, Op};

use crate::artifact::{Executable, MeshChoice, MeshTried, TargetEntry};
use crate::compile::{compile_for_figures, CompileRequest};
use crate::import::Program;
use crate::target::Target;
use crate::Error;

/// The chip table compiled into the binary.
const BUNDLED_CHIPS: &str = include_str!("../schemas/tpu-chips.json");

/// The format name of a chip table.
const CHIPS_FORMAT: &str = "torchtpu-chips/1";

/// One generation's figures.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub(crate) struct Chip {
    /// Dense bf16 peak, TFLOP/s.
    pub bf16_tflops: f64,
    /// HBM bandwidth, GB/s.
    pub hbm_gb_per_s: f64,
    /// Inter-chip interconnect bandwidth per chip, GB/s.
    pub ici_gb_per_s: f64,
    /// On-demand price per chip-hour, USD.
    pub usd_per_chip_hour: f64,
}

/// The figures `plan` estimates with, by generation.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub(crate) struct ChipTable {
    pub format: String,
    #[serde(default)]
    pub about: String,
    pub prices_as_of: String,
    pub chips: BTreeMap<String, Chip>,
}

impl ChipTable {
    /// The table in `schemas/tpu-chips.json`.
    pub(crate) fn bundled() -> Result<ChipTable, String> {
        ChipTable::parse(BUNDLED_CHIPS, "the bundled chip table")
    }

    /// A table from a file (`--prices FILE`), checked.
    pub(crate) fn read(path: &Path) -> Result<ChipTable, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
        ChipTable::parse(&text, &format!("`{}`", path.display()))
    }

    fn parse(text: &str, name: &str) -> Result<ChipTable, String> {
        let table: ChipTable = serde_json::from_str(text).map_err(|e| format!("{name} is no chip table: {e}"))?;
        if table.format != CHIPS_FORMAT {
            return Err(format!("{name}: format `{}`, expected `{CHIPS_FORMAT}`", table.format));
        }
        for (generation, c) in &table.chips {
            let figures = [c.bf16_tflops, c.hbm_gb_per_s, c.ici_gb_per_s, c.usd_per_chip_hour];
            if figures.iter().any(|x| !x.is_finite() || *x <= 0.0) {
                return Err(format!("{name}: `{generation}` needs positive, finite figures"));
            }
        }
        Ok(table)
    }
}

/// The slices tried when `--slices` is not given, per generation from the smallest: 1, 4, 8,
/// 16 and 32 chips (v5p and tpu7x from 4, their smallest slices).
pub(crate) fn default_slices() -> Vec<Vec<Target>> {
    let tpu =
        |generation: &str, topology: &str| Target::Tpu { generation: generation.into(), topology: topology.into() };
    let flat = ["1x1", "2x2", "2x4", "4x4", "4x8"];
    let cube = ["2x2x1", "2x2x2", "2x2x4", "2x4x4"];
    let mut out = Vec::new();
    for generation in ["v5e", "v6e"] {
        out.push(flat.iter().map(|t| tpu(generation, t)).collect());
    }
    for generation in ["v5p", "tpu7x"] {
        out.push(cube.iter().map(|t| tpu(generation, t)).collect());
    }
    out
}

/// The meshes tried on `chips` chips: none for one; else all of them along `tp`, along `fsdp`,
/// along `dp`, and every `fsdp=a,tp=b` and `dp=a,tp=b` with `a·b = chips`; for a program with experts
/// (`experts`), also all of them along `ep` and every `ep=a,tp=b`.
pub(crate) fn meshes(chips: u64, experts: bool) -> Vec<Option<Mesh>> {
    if chips <= 1 {
        return vec![None];
    }
    let axis = |name: &str, size: u64| MeshAxis { name: name.into(), size: size as i64 };
    let mut out: Vec<Vec<MeshAxis>> = ["tp", "fsdp", "dp"].iter().map(|a| vec![axis(a, chips)]).collect();
    let splits: Vec<u64> = (2..chips).filter(|a| chips.is_multiple_of(*a) && chips / a >= 2).collect();
    for &a in &splits {
        out.push(vec![axis("fsdp", a), axis("tp", chips / a)]);
    }
    out.extend(splits.iter().map(|&a| vec![axis("dp", a), axis("tp", chips / a)]));
    if experts {
        out.push(vec![axis("ep", chips)]);
        out.extend(splits.iter().map(|&a| vec![axis("ep", a), axis("tp", chips / a)]));
    }
    out.into_iter().filter_map(|axes| Mesh::new(axes).ok()).map(Some).collect()
}

/// Whether the program has mixture-of-experts weights that `ep` splits.
fn has_experts(program: &Program) -> bool {
    !torchtpu_passes::shard::experts::expert_weights(&program.graph).is_empty()
}

/// The mesh as `--mesh` writes it.
fn mesh_text(mesh: &Option<Mesh>) -> Option<String> {
    mesh.as_ref().map(Mesh::flag_text)
}

/// A program's peak per chip above this share of HBM does not fit comfortably: `plan` goes on
/// to larger slices of that generation.
const COMFORTABLE: f64 = 0.8;

/// What `plan` does.
pub(crate) struct PlanRequest {
    /// The slices to try, each compiled; `None`: [`default_slices`], each generation up to the
    /// first slice where some mesh fits comfortably.
    pub slices: Option<Vec<Target>>,
    pub chips: ChipTable,
    /// Everything else a compile takes (buckets, passes, cache); its targets and mesh are set
    /// per candidate.
    pub base: CompileRequest,
}

/// What `plan` found.
#[derive(Debug, Serialize)]
pub(crate) struct PlanReport {
    /// Where the chip figures come from, and the date of the prices.
    pub chips_about: String,
    pub prices_as_of: String,
    /// Token ids per call (batch × sequence of the program's first integer input of two dims,
    /// at the largest bucket), for the price per million tokens; `None` when it has none.
    pub tokens_per_call: Option<u64>,
    pub candidates: Vec<Candidate>,
}

/// One slice and mesh.
#[derive(Debug, Serialize)]
pub(crate) struct Candidate {
    pub slice: String,
    pub chips: u64,
    /// `--mesh`'s words; `None`: one program per chip, not split.
    pub mesh: Option<String>,
    /// The figures, or why there are none (the split or the compile was refused).
    #[serde(flatten)]
    pub outcome: Outcome,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Compiled(Figures),
    /// libtpu refused the compile for lack of HBM: its figures, in its words.
    OutOfHbm(String),
    Refused(String),
    /// A broken invariant of `plan` itself, reported as the bug it is.
    Bug(String),
}

/// libtpu's figures when `message` is its refusal for lack of HBM (`CompileTimeHbmOom`): how
/// much the program needs and the chip has, or by how much it exceeds it.
fn out_of_hbm(message: &str) -> Option<String> {
    let at = message.find("CompileTimeHbmOom")?;
    let rest = &message[at..];
    // From `from` to the end of its sentence: a full stop before white space or the end.
    let sentence = |from: &str| {
        let start = rest.find(from)?;
        let tail = &rest[start..];
        let bytes = tail.as_bytes();
        let end = (0..bytes.len())
            .find(|&i| bytes[i] == b'.' && bytes.get(i + 1).is_none_or(|b| b.is_ascii_whitespace()))
            .unwrap_or(tail.len());
        Some(tail[..end].to_string())
    };
    let words: Vec<String> =
        ["Used ", "Exceeded hbm capacity by ", "the total memory required"].into_iter().filter_map(sentence).collect();
    Some(if words.is_empty() { "out of HBM".to_string() } else { words.join("; ") })
}

/// libtpu's and XLA's figures for the bucket that needs the most memory, and the estimate.
#[derive(Debug, Serialize)]
pub(crate) struct Figures {
    pub bucket: String,
    pub peak_bytes: u64,
    pub hbm_bytes: u64,
    pub fits: bool,
    /// Argument bytes per chip: the weights' share and the inputs.
    pub argument_bytes: u64,
    pub flops: f64,
    pub bytes_accessed: f64,
    pub collective_bytes: u64,
    pub estimate: Option<Estimate>,
}

/// The roofline estimate of one call (seconds) and its price.
#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Estimate {
    pub compute_s: f64,
    pub memory_s: f64,
    pub collective_s: f64,
    /// `max(compute_s, memory_s) + collective_s`.
    pub call_s: f64,
    pub usd_per_hour: f64,
    pub usd_per_million_tokens: Option<f64>,
}

/// The estimate for `chips` chips of `chip` running a program whose one chip does `flops` and
/// reads `bytes`, with `collective` bytes of collectives, `tokens` token ids per call.
pub(crate) fn estimate(
    chip: &Chip,
    chips: u64,
    (flops, bytes, collective): (f64, f64, u64),
    tokens: Option<u64>,
) -> Estimate {
    let compute_s = flops / (chip.bf16_tflops * 1e12);
    let memory_s = bytes / (chip.hbm_gb_per_s * 1e9);
    let collective_s = collective as f64 / (chip.ici_gb_per_s * 1e9);
    let call_s = compute_s.max(memory_s) + collective_s;
    let usd_per_hour = chips as f64 * chip.usd_per_chip_hour;
    let usd_per_million_tokens = tokens.filter(|&t| t > 0).map(|t| usd_per_hour / 3600.0 * call_s / t as f64 * 1e6);
    Estimate { compute_s, memory_s, collective_s, call_s, usd_per_hour, usd_per_million_tokens }
}

/// Runs the plan: every candidate compiled, one at a time (each compile uses every core).
pub(crate) fn plan(program: &Program, req: &PlanRequest, progress: &mut dyn FnMut(&str)) -> Result<PlanReport, Error> {
    let tokens = tokens_per_call(program, &req.base)?;
    let experts = has_experts(program);
    let mut candidates = Vec::new();
    let groups = match &req.slices {
        Some(slices) => slices.iter().map(|s| vec![s.clone()]).collect(),
        None => default_slices(),
    };
    for group in groups {
        for slice in &group {
            let before = candidates.len();
            for mesh in meshes(slice.devices(), experts) {
                progress(&format!("{slice} {}", mesh_text(&mesh).unwrap_or_else(|| "(one chip)".into())));
                candidates.push(candidate(program, req, slice, mesh, tokens));
            }
            let comfortable =
                candidates[before..].iter().any(|c| matches!(&c.outcome, Outcome::Compiled(f) if f.comfortable()));
            if req.slices.is_none() && comfortable {
                break;
            }
        }
    }
    let (chips_about, prices_as_of) = (req.chips.about.clone(), req.chips.prices_as_of.clone());
    Ok(PlanReport { chips_about, prices_as_of, tokens_per_call: tokens, candidates })
}

/// One candidate compiled, or refused with the compiler's words.
fn candidate(
    program: &Program,
    req: &PlanRequest,
    slice: &Target,
    mesh: Option<Mesh>,
    tokens: Option<u64>,
) -> Candidate {
    let mut one = req.base.clone();
    one.targets = vec![slice.clone()];
    one.pass_options.mesh = mesh.clone();
    let outcome = match compile_for_figures(program, &one) {
        Ok(targets) => figures(&req.chips, &targets, tokens),
        Err(e) => {
            let message = e.to_string();
            out_of_hbm(&message).map_or(Outcome::Refused(message), Outcome::OutOfHbm)
        }
    };
    Candidate { slice: slice.to_string(), chips: slice.devices(), mesh: mesh_text(&mesh), outcome }
}

/// The figures of the bucket with the largest peak.
fn figures(chips: &ChipTable, targets: &[TargetEntry], tokens: Option<u64>) -> Outcome {
    // Each candidate compiles one TPU target, which has one bucket or more.
    let Some(t) = targets.first() else { return Outcome::Bug("no target compiled".into()) };
    let Some(tpu) = &t.tpu else { return Outcome::Refused("not a TPU target".into()) };
    let Some(e) = largest(t) else {
        return Outcome::Bug("a target with no executable".into());
    };
    let (Some(memory), Some(hbm)) = (&e.memory, tpu.hbm_bytes_per_chip) else {
        return Outcome::Refused("libtpu reported no memory figures".into());
    };
    let (flops, bytes) = e.cost.as_ref().map_or((f64::NAN, f64::NAN), |c| (c.flops, c.bytes_accessed));
    let collective_bytes = collective_bytes(e);
    let estimate = chips
        .chips
        .get(&tpu.generation)
        .filter(|_| flops.is_finite() && bytes.is_finite())
        .map(|chip| estimate(chip, tpu.chips, (flops, bytes, collective_bytes), tokens));
    Outcome::Compiled(Figures {
        bucket: e.bucket.clone(),
        peak_bytes: peak_bytes(e),
        hbm_bytes: hbm,
        fits: peak_bytes(e) <= hbm,
        argument_bytes: memory.argument_bytes.max(0) as u64,
        flops,
        bytes_accessed: bytes,
        collective_bytes,
        estimate,
    })
}

/// A target's executable with the largest peak (its largest bucket), which the figures are of.
fn largest(t: &TargetEntry) -> Option<&Executable> {
    t.executables.iter().max_by_key(|e| peak_bytes(e))
}

fn peak_bytes(e: &Executable) -> u64 {
    e.memory.as_ref().map_or(0, |m| m.peak_bytes.max(0) as u64)
}

fn collective_bytes(e: &Executable) -> u64 {
    e.collectives.values().map(|c| c.bytes).sum()
}

/// Batch × sequence of the first integer user input of two dims (token ids), at the largest
/// bucket's sizes.
fn tokens_per_call(program: &Program, base: &CompileRequest) -> Result<Option<u64>, Error> {
    let planned = crate::buckets::plan(program, &base.buckets)?.buckets;
    let sizes = planned.last().map(|p| p.values.clone()).unwrap_or_default();
    let g = &program.graph;
    let user = g.graph_inputs().iter().filter(|&&id| matches!(g.node(id).op, Op::Input(InputKind::User { .. })));
    let mut types = user.map(|&id| &g.node(id).outputs[0]);
    let ids = types.find(|t| t.dtype.is_integer() && t.rank() == 2);
    Ok(ids.and_then(|t| {
        t.dims.iter().try_fold(1u64, |n, d| {
            let v = match d {
                Dim::Static(v) => *v,
                Dim::Sym(e) => e.eval(&sizes)?,
            };
            n.checked_mul(u64::try_from(v).ok()?)
        })
    }))
}

impl Figures {
    /// Fits with room to spare: a peak of at most [`COMFORTABLE`] of the chip's HBM.
    fn comfortable(&self) -> bool {
        self.peak_bytes as f64 <= COMFORTABLE * self.hbm_bytes as f64
    }
}

/// The candidate whose call costs least (price per hour × estimated time) among those that fit
/// comfortably, else among those that fit at all.
pub(crate) fn cheapest(report: &PlanReport) -> Option<&Candidate> {
    let cost = |c: &Candidate, roomy: bool| match &c.outcome {
        Outcome::Compiled(f @ Figures { fits: true, estimate: Some(e), .. }) if !roomy || f.comfortable() => {
            Some(e.usd_per_hour * e.call_s)
        }
        _ => None,
    };
    let best = |roomy: bool| {
        let costed = report.candidates.iter().filter_map(|c| Some((c, cost(c, roomy)?)));
        costed.min_by(|a, b| a.1.total_cmp(&b.1)).map(|(c, _)| c)
    };
    best(true).or_else(|| best(false))
}

/// The report as a table for people.
pub(crate) fn render_text(report: &PlanReport) -> String {
    use std::fmt::Write as _;
    let bytes = |b: u64| crate::display::human_bytes(b);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<15} {:<12} {:>10} {:>10} {:>5} {:>10} {:>10} {:>10} {:>8} {:>9}",
        "slice", "mesh", "peak/chip", "HBM/chip", "fits", "args/chip", "collect.", "est. ms", "$/hour", "$/Mtok"
    );
    for c in &report.candidates {
        let mesh = c.mesh.as_deref().unwrap_or("-");
        match &c.outcome {
            Outcome::Refused(why) => {
                let why: String = why.chars().take(120).collect();
                let _ = writeln!(s, "{:<15} {mesh:<12} refused: {why}", c.slice);
            }
            Outcome::OutOfHbm(figures) => {
                let _ = writeln!(s, "{:<15} {mesh:<12} does NOT fit, libtpu: {figures}", c.slice);
            }
            Outcome::Bug(why) => {
                let _ = writeln!(s, "{:<15} {mesh:<12} a bug in torchtpu-compile (please report it): {why}", c.slice);
            }
            Outcome::Compiled(f) => {
                let (ms, hour, mtok) = f.estimate.as_ref().map_or(("?".into(), "?".into(), "-".into()), |e| {
                    let mtok = e.usd_per_million_tokens.map_or("-".into(), |p| format!("{p:.4}"));
                    (format!("{:.3}", e.call_s * 1e3), format!("{:.2}", e.usd_per_hour), mtok)
                });
                let _ = writeln!(
                    s,
                    "{:<15} {mesh:<12} {:>10} {:>10} {:>5} {:>10} {:>10} {ms:>10} {hour:>8} {mtok:>9}",
                    c.slice,
                    bytes(f.peak_bytes),
                    bytes(f.hbm_bytes),
                    match (f.fits, f.comfortable()) {
                        (true, true) => "yes",
                        (true, false) => "tight",
                        (false, _) => "NO",
                    },
                    bytes(f.argument_bytes),
                    bytes(f.collective_bytes),
                );
            }
        }
    }
    match cheapest(report) {
        Some(c) => {
            let mesh = c.mesh.as_deref().unwrap_or("(one chip)");
            let _ = writeln!(s, "cheapest call that fits (with 20% of HBM to spare if any does): {} {mesh}", c.slice);
        }
        None => {
            let _ = writeln!(s, "no candidate fits");
        }
    }
    let tokens = report.tokens_per_call.map_or("no token ids in".into(), |t| format!("{t} tokens per call"));
    let _ = writeln!(
        s,
        "estimates, not measurements: est. ms = max(FLOPs / bf16 peak, bytes / HBM bandwidth) + collective bytes / \
         ICI bandwidth, from XLA's cost model of one chip's program (a loop's body counted once); $/Mtok at {tokens}; \
         prices of {}",
        report.prices_as_of
    );
    s
}

impl MeshTried {
    fn fits(&self) -> bool {
        self.refused.is_none() && self.hbm_share.is_none_or(|s| s <= 1.0)
    }
}

/// `--mesh auto`: every mesh [`meshes`] gives for the targets' device count compiled (without
/// an artifact); among those that fit every TPU target's HBM, the one with the shortest
/// estimated call (the longest over the targets), then the fewest collective bytes, then the
/// lowest peak. Without a TPU target there is no estimate: the fewest collective bytes win.
/// Refused when no mesh fits, with the closest one's figures.
pub(crate) fn choose_mesh(program: &Program, base: &CompileRequest) -> Result<(Mesh, MeshChoice), Error> {
    let devices: Vec<u64> = base.targets.iter().map(Target::devices).collect();
    let n = devices[0];
    if n < 2 || devices.iter().any(|&d| d != n) {
        let list = base.targets.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
        return Err(Error::Unsupported(format!(
            "`--mesh auto` needs targets of one device count above 1 (`cpu:4`, `tpu:v5e:2x2`); given {list}"
        )));
    }
    let chips = ChipTable::bundled().map_err(Error::Unsupported)?;
    let mut tried = Vec::new();
    let mut meshes_tried = Vec::new();
    for mesh in meshes(n, has_experts(program)).into_iter().flatten() {
        let mut req = base.clone();
        req.pass_options.mesh = Some(mesh.clone());
        req.progress = false;
        let text = mesh.flag_text();
        tried.push(match compile_for_figures(program, &req) {
            Ok(targets) => mesh_figures(&chips, text, &targets),
            Err(e) => {
                let message = e.to_string();
                let refused = out_of_hbm(&message).map_or(message, |f| format!("does not fit, libtpu: {f}"));
                MeshTried {
                    mesh: text,
                    peak_bytes: None,
                    hbm_share: None,
                    estimated_call_s: None,
                    collective_bytes: 0,
                    refused: Some(refused),
                }
            }
        });
        meshes_tried.push(mesh);
    }
    let key = |t: &MeshTried| (t.estimated_call_s.unwrap_or(0.0), t.collective_bytes, t.peak_bytes.unwrap_or(0));
    let best = (0..tried.len())
        .filter(|&i| tried[i].fits())
        .min_by(|&a, &b| key(&tried[a]).partial_cmp(&key(&tried[b])).unwrap_or(std::cmp::Ordering::Equal));
    let Some(i) = best else { return Err(Error::Unsupported(no_fit(n, &tried))) };
    let fitting = tried.iter().filter(|t| t.fits()).count();
    let winner = &tried[i];
    let why = match winner.estimated_call_s {
        Some(s) => format!(
            "the shortest estimated call ({:.3} ms, from XLA's cost model) of the {fitting} of {} meshes that fit",
            s * 1e3,
            tried.len()
        ),
        None => format!(
            "no TPU target to estimate with: the fewest collective bytes ({}) of the {fitting} of {} meshes that split it",
            crate::display::human_bytes(winner.collective_bytes),
            tried.len()
        ),
    };
    let choice = MeshChoice { chosen: winner.mesh.clone(), why, tried };
    Ok((meshes_tried.swap_remove(i), choice))
}

/// A mesh's figures over every target: the largest peak and its share of HBM, the longest
/// estimated call, the collective bytes of every target's largest program.
fn mesh_figures(chips: &ChipTable, mesh: String, targets: &[TargetEntry]) -> MeshTried {
    let (mut peak, mut share, mut call, mut collective) = (0u64, None::<f64>, None::<f64>, 0u64);
    for t in targets {
        // A CPU target has no figures: its peak and collectives are read the same way.
        peak = peak.max(largest(t).map_or(0, peak_bytes));
        collective += largest(t).map_or(0, collective_bytes);
        if let Outcome::Compiled(f) = figures(chips, std::slice::from_ref(t), None) {
            share = Some(share.unwrap_or(0.0).max(f.peak_bytes as f64 / f.hbm_bytes.max(1) as f64));
            if let Some(est) = f.estimate {
                call = Some(call.unwrap_or(0.0).max(est.call_s));
            }
        }
    }
    MeshTried {
        mesh,
        peak_bytes: Some(peak),
        hbm_share: share,
        estimated_call_s: call,
        collective_bytes: collective,
        refused: None,
    }
}

/// Why no mesh was chosen: the one closest to fitting, with its figures, or every refusal.
fn no_fit(n: u64, tried: &[MeshTried]) -> String {
    let closest = tried
        .iter()
        .filter(|t| t.refused.is_none())
        .min_by(|a, b| a.hbm_share.unwrap_or(f64::MAX).total_cmp(&b.hbm_share.unwrap_or(f64::MAX)));
    match closest {
        Some(t) => format!(
            "no mesh of {n} devices fits: the closest, `{}`, needs {} per chip, {:.0}% of a chip's HBM",
            t.mesh,
            crate::display::human_bytes(t.peak_bytes.unwrap_or(0)),
            t.hbm_share.unwrap_or(0.0) * 100.0
        ),
        None => {
            let why: Vec<String> =
                tried.iter().map(|t| format!("`{}`: {}", t.mesh, t.refused.as_deref().unwrap_or(""))).collect();
            format!("no mesh of {n} devices splits this program: {}", why.join("; "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::out_of_hbm;

    /// libtpu's two ways of refusing a program too large for a chip, as it words them.
    #[test]
    fn out_of_hbm_keeps_libtpus_figures() {
        let temporaries = "XLA compilation for `tpu:v5e:4x4` failed: `PJRT_Compile` failed (resource exhausted): \
            E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for HLO temporaries \
            (18.49G) exceeds available HBM (15.75G). HLO module: main.";
        assert_eq!(
            out_of_hbm(temporaries).as_deref(),
            Some("the total memory required for HLO temporaries (18.49G) exceeds available HBM (15.75G)")
        );
        let exceeded = "E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. Ran out of memory in memory \
            space hbm. Used 15.75G of 15.75G hbm. Exceeded hbm capacity by 1.28M.\n\nTotal hbm usage >= 15.99G:";
        assert_eq!(out_of_hbm(exceeded).as_deref(), Some("Used 15.75G of 15.75G hbm; Exceeded hbm capacity by 1.28M"));
        assert_eq!(out_of_hbm("pass `shard`: 2 heads do not divide"), None);
    }
}

//! What each subcommand does, once its arguments are parsed: `inspect`, `check`, `compile`,
//! `run` and `cache`, each writing its report in text or JSON.

use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::{CommandFactory, Parser};

use super::{
    CacheAction, CacheArgs, Cli, Command, CompileArgs, Emit, Format, GenerateArgs, MeshArg, RunArgs, WeightsArg,
};
use crate::artifact::Artifact;
use crate::cache::{self, Outcome};
use crate::compile::{compile as compile_artifact, progress, CompileRequest};
use crate::container::MappedZip;
use crate::run::{run as run_artifact, RunRequest};
use crate::{driver, import, inspect, Error};

fn read_program(model: &Path) -> anyhow::Result<import::Program> {
    import(model).map_err(Error::from).with_context(|| format!("cannot read `{}`", model.display()))
}

pub(super) fn inspect(model: &Path, format: Format, out: &mut dyn Write) -> anyhow::Result<()> {
    if MappedZip::open(model).is_ok_and(|z| Artifact::is_artifact(&z)) {
        let art =
            Artifact::open(model).map_err(Error::from).with_context(|| format!("cannot read `{}`", model.display()))?;
        match format {
            Format::Text => write!(out, "{}", inspect::render_artifact(&art))?,
            Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&inspect::artifact_report(&art))?)?,
        }
        return Ok(());
    }
    let program = read_program(model)?;
    let report = inspect::report(&program, &model.display().to_string());
    match format {
        Format::Text => write!(out, "{}", inspect::render_text(&report))?,
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
    }
    Ok(())
}

pub(super) fn check(
    model: &Path,
    format: Format,
    choices: &[crate::buckets::Choice],
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    let program = read_program(model)?;
    let report = crate::check::check_with(&program, &model.display().to_string(), choices);
    match format {
        Format::Text => write!(out, "{}", crate::check::render_text(&report))?,
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
    }
    Ok(if report.ok { 0 } else { 1 })
}

pub(super) fn compile(args: &CompileArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    crate::pjrt::show_plugin_output(args.verbose);
    args.check_devices(&args.targets_or_default())?;
    let shares = !(args.only_buckets.is_empty() && args.only_targets.is_empty());
    if shares && !args.cache_only {
        let msg =
            "`--only-bucket` and `--only-target` go with `--cache-only`: an artifact holds every bucket and target";
        return Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg).into());
    }
    let targets = args.targets_or_default();
    if let Some(t) = args.only_targets.iter().find(|t| !targets.contains(t)) {
        let all: Vec<String> = targets.iter().map(crate::Target::to_string).collect();
        let msg = format!("`--only-target {t}` is not among the targets ({})", all.join(", "));
        return Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg).into());
    }

    // An archive an earlier compile read whole, unchanged since, is not checked byte by byte
    // again; an artifact's compile checks the payloads while XLA compiles.
    let integrity = if cache::Cache::open(&args.cache.config()).remembers_file(&args.model) {
        import::Integrity::KnownIntact
    } else if args.emit == Emit::Exe && !args.cache_only {
        import::Integrity::PayloadsLater
    } else {
        import::Integrity::Check
    };
    // Checking reads every byte of the archive: a phase that grows with the weights.
    let checked = matches!(integrity, import::Integrity::Check);
    let started = std::time::Instant::now();
    let read_bytes = checked.then(|| std::fs::metadata(&args.model).map_or(0, |m| m.len()));
    let what = format!("reading {}", args.model.display());
    let bar = progress::bytes_bar(!args.quiet, read_bytes.unwrap_or(0), what);
    let mut program = import::import_checked(&args.model, integrity, &|n| bar.inc(n))
        .map_err(Error::from)
        .with_context(|| format!("cannot read `{}`", args.model.display()))?;
    bar.finish_and_clear();
    let read = progress::Phase::since("read", started, read_bytes);
    let context = || format!("cannot compile `{}`", args.model.display());
    crate::buckets::bound_symbols(&mut program, &args.sizes.choices()).with_context(context)?;
    if args.cache_only {
        if args.emit != Emit::Exe {
            let msg = "`--cache-only` compiles executables: it goes with `--emit exe`";
            return Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, msg).into());
        }
        let mut req = compile_request(args)?;
        if matches!(args.mesh, Some(MeshArg::Auto)) {
            choose_mesh(&program, &mut req, args.verbose, err).with_context(context)?;
        }
        let only = crate::compile::Only { buckets: &args.only_buckets, targets: &args.only_targets };
        let summary = crate::compile::compile_to_cache(&program, &req, only).with_context(context)?;
        print_summary(&summary, args.format, args.quiet, args.verbose, out, err)?;
        return Ok(());
    }
    // clap requires `--output` unless `--cache-only`, handled above.
    let output =
        args.output.as_deref().ok_or_else(|| Error::Internal("compile without --output passed clap".into()))?;
    if args.emit == Emit::Exe {
        let mut req = compile_request(args)?;
        if matches!(args.mesh, Some(MeshArg::Auto)) {
            choose_mesh(&program, &mut req, args.verbose, err).with_context(context)?;
        }
        let mut summary = compile_artifact(&program, &args.model, output, &req).with_context(context)?;
        summary.phases.insert(0, read);
        print_summary(&summary, args.format, args.quiet, args.verbose, out, err)?;
        return Ok(());
    }
    if matches!(args.mesh, Some(MeshArg::Auto)) {
        return Err(Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "`--mesh auto` chooses by compiling each mesh: it needs `--emit exe` (then `inspect` names the mesh)",
            )
            .into());
    }
    let needs_exe = match (args.weights == WeightsArg::External, args.tokenizer.is_some()) {
        (true, _) => Some("`--weights external` needs `--emit exe`: other forms hold no weights"),
        (_, true) => Some("`--tokenizer` needs `--emit exe`: only an artifact stores the model's files"),
        _ => None,
    };
    if let Some(why) = needs_exe {
        return Err(Cli::command().error(clap::error::ErrorKind::ArgumentConflict, why).into());
    }
    let bindings = driver::example_bindings(&program)
        .map_err(|e| Error::from(driver::LowerError::from(e)))
        .with_context(context)?;
    let opts = driver::LowerOptions {
        emit: args.emit_options(&args.targets_or_default())?,
        passes: args.passes.selected(),
        pass_options: args.pass_options(),
        keep_stages: false,
    };
    let lowered = driver::lower(&program, bindings, &opts).map_err(Error::from).with_context(context)?;
    let bytes: Vec<u8> = match args.emit {
        Emit::Stablehlo => lowered.module.text.into_bytes(),
        Emit::Mlirbc => lowered.module.bytecode,
        Emit::Ir | Emit::Exe => torchtpu_passes::ir::print(&lowered.graph).into_bytes(),
    };
    std::fs::write(output, &bytes).with_context(|| format!("cannot write `{}`", output.display()))?;
    if args.format == Format::Json {
        writeln!(out, "{}", serde_json::json!({"output": output.display().to_string(), "bytes": bytes.len()}))?;
    }
    Ok(())
}

/// The compile `args` ask for (with `--mesh auto`, no mesh yet).
fn compile_request(args: &CompileArgs) -> anyhow::Result<CompileRequest> {
    let targets = args.targets_or_default();
    let emit = args.emit_options(&targets)?;
    Ok(CompileRequest {
        precision: emit.precision,
        grouped_mm: emit.grouped_mm,
        attention: (emit.attention, emit.attention_block),
        plugin: args.plugin.clone(),
        dump_dir: args.dump_dir.clone(),
        progress: !args.quiet,
        cache: args.cache.config(),
        passes: args.passes.selected(),
        pass_options: args.pass_options(),
        targets,
        buckets: args.sizes.choices(),
        jobs: args.jobs.unwrap_or_else(crate::compile::default_jobs),
        external_weights: args.weights == WeightsArg::External,
        mesh_choice: None,
        serving_files: match &args.tokenizer {
            Some(dir) => crate::artifact::read_serving_folder(dir)?,
            None => Vec::new(),
        },
    })
}

/// What a compile or recompile did: warnings, then per executable how it was had and the
/// artifact written (`-v`: each pass's notes and the phases), or all of it as JSON.
pub(super) fn print_summary(
    summary: &crate::compile::CompileSummary,
    format: Format,
    quiet: bool,
    verbose: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    for w in &summary.warnings {
        writeln!(err, "warning: {w}")?;
    }
    if !quiet && format == Format::Text {
        for n in &summary.notes {
            writeln!(err, "note: {n}")?;
        }
    }
    match format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?,
        Format::Text if !quiet => {
            if verbose {
                for p in &summary.passes {
                    let notes = if p.notes.is_empty() { "no change".to_string() } else { p.notes.join(", ") };
                    writeln!(err, "pass {}: {} → {} nodes ({notes})", p.pass, p.nodes_before, p.nodes_after)?;
                }
            }
            for t in &summary.targets {
                let how = match t.cache {
                    Outcome::Hit | Outcome::RemoteHit => {
                        format!("{} in {} ms (compiled in {} ms before)", t.cache.describe(), t.ms, t.compile_ms)
                    }
                    Outcome::Compiled | Outcome::Uncached => format!("{} in {} ms", t.cache.describe(), t.ms),
                };
                writeln!(err, "{} [{}]: {how}, {} bytes", t.target, t.bucket, t.executable_bytes)?;
            }
            if summary.output.is_empty() {
                writeln!(err, "compiled into the cache; `compile` without `--cache-only` assembles the artifact")?;
            } else {
                writeln!(err, "wrote {} ({} bytes)", summary.output, summary.artifact_bytes)?;
            }
            if let Some(w) = &summary.weights_file {
                let how = if w.reused { "reused, unchanged" } else { "written" };
                writeln!(err, "weights {} ({} bytes, {how})", w.path, w.bytes)?;
            }
            if verbose {
                write!(err, "{}", progress::table(&summary.phases))?;
            }
        }
        Format::Text => {}
    }
    Ok(())
}

/// `--mesh auto`: the mesh chosen into `req`, said on `err` (every mesh tried with `verbose`).
fn choose_mesh(
    program: &import::Program,
    req: &mut CompileRequest,
    verbose: bool,
    err: &mut dyn Write,
) -> anyhow::Result<()> {
    let (mesh, choice) = crate::plan::choose_mesh(program, req)?;
    if verbose {
        for t in &choice.tried {
            let figures = match &t.refused {
                Some(why) => format!("refused: {why}"),
                None => format!(
                    "peak {}{}, collectives {}{}",
                    crate::display::human_bytes(t.peak_bytes.unwrap_or(0)),
                    t.hbm_share.map_or(String::new(), |s| format!(" ({:.0}% of HBM)", s * 100.0)),
                    crate::display::human_bytes(t.collective_bytes),
                    t.estimated_call_s.map_or(String::new(), |s| format!(", estimated call {:.3} ms", s * 1e3)),
                ),
            };
            writeln!(err, "mesh {}: {figures}", t.mesh)?;
        }
    }
    if req.progress || verbose {
        writeln!(err, "mesh auto: {} ({})", choice.chosen, choice.why)?;
    }
    req.pass_options.mesh = Some(mesh);
    req.mesh_choice = Some(choice);
    Ok(())
}

pub(super) fn run(args: &RunArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let req = RunRequest {
        artifact: args.artifact.clone(),
        inputs: args.inputs.clone(),
        out_dir: args.out_dir.clone(),
        device: args.device,
        plugin: args.plugin.clone(),
        reference: args.reference.clone(),
        seed: args.seed,
        verify_weights: args.verify_weights,
        cache_dir: if args.no_cache { None } else { args.cache_dir.clone().or_else(cache::default_dir) },
        tolerance: crate::run::Tolerance { atol: args.atol, rtol: args.rtol },
        state_in: args.state_in.clone(),
        checkpoint: args.checkpoint.clone(),
        state_out: args.state_out.clone(),
        repeat: args.repeat.into(),
    };
    let report = run_artifact(&req).with_context(|| format!("cannot run `{}`", args.artifact.display()))?;
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
        Format::Text => {
            for o in &report.outputs {
                let cmp = o.comparison.as_ref().map_or_else(String::new, comparison_text);
                writeln!(out, "{}: {}{:?}{cmp}", o.path, o.dtype, o.dims)?;
            }
        }
    }
    Ok(if report.ok { 0 } else { 1 })
}

pub(super) fn generate(args: &GenerateArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let mut prompts: Vec<crate::npy::Array> = Vec::with_capacity(args.prompt.len());
    for path in &args.prompt {
        prompts.push(crate::npy::Array::read(path).map_err(|e| Error::Run(e.into()))?);
    }
    if let Some(encoder) = &args.encoder {
        let [prompt] = &prompts[..] else {
            anyhow::bail!(Error::Unsupported("with `--encoder`, give one prompt".into()));
        };
        let done = seq2seq(args, encoder, prompt).with_context(|| {
            format!("cannot generate with `{}` and `{}`", encoder.display(), args.artifact.display())
        })?;
        return write_generated(args, &done, out);
    }
    let batch = crate::artifact::Artifact::open_but_weights(&args.artifact)
        .map_err(Error::from)
        .and_then(|a| crate::run::batch_of(&a.manifest))
        .with_context(|| format!("cannot generate with `{}`", args.artifact.display()))?;
    // One array of the batch's rows, none padded and no `--eos`: the rows decode together.
    let padded = prompts.iter().any(|p| (0..p.numel().max(0) as usize).any(|i| p.get_f64(i).is_some_and(|v| v < 0.0)));
    let one_batch = match &prompts[..] {
        [p] => {
            !padded
                && args.eos.is_none()
                && (matches!(p.shape[..], [b, _] if b == batch) || p.shape.len() == 1 && batch == 1)
        }
        _ => false,
    };
    let req = crate::run::GenerateRequest {
        artifact: args.artifact.clone(),
        device: args.device,
        plugin: args.plugin.clone(),
        decoding: crate::run::Decoding {
            prompt: prompts[0].clone(),
            max_new_tokens: args.max_new_tokens,
            temperature: args.temperature,
            seed: args.seed,
            keep_logits: args.logits_out.is_some(),
        },
        donate: !args.no_donate,
        checkpoint: args.checkpoint.clone(),
    };
    let verification = crate::run::Verification { always_hash: false, cache: None };
    if !one_batch {
        return generate_requests(args, &req, &prompts, &verification, out);
    }
    let done = crate::run::generate(&req, &verification)
        .with_context(|| format!("cannot generate with `{}`", args.artifact.display()))?;
    write_generated(args, &done, out)
}

/// An encoder–decoder generation: the encoder's session and the decoder step's.
fn seq2seq(args: &GenerateArgs, encoder: &Path, prompt: &crate::npy::Array) -> Result<crate::run::Generated, Error> {
    let verification = crate::run::Verification { always_hash: false, cache: None };
    let open = |path: &Path| crate::run::Session::open(path, args.device, args.plugin.as_deref(), &verification);
    let (mut enc, mut dec) = (open(encoder)?, open(&args.artifact)?);
    dec.set_donation(!args.no_donate);
    let req = crate::run::Seq2Seq {
        prompt: prompt.clone(),
        start_token: args.start_token,
        max_new_tokens: args.max_new_tokens,
        eos: args.eos,
        temperature: args.temperature,
        seed: args.seed,
        keep_logits: args.logits_out.is_some(),
    };
    crate::run::generate_seq2seq(&mut enc, &mut dec, &req)
}

/// Writes `--out` and `--logits-out` and prints what one batch's generation did.
fn write_generated(args: &GenerateArgs, done: &crate::run::Generated, out: &mut dyn Write) -> anyhow::Result<u8> {
    for (path, array) in [(&args.out, Some(&done.tokens)), (&args.logits_out, done.logits.as_ref())] {
        if let (Some(path), Some(array)) = (path, array) {
            array.write(path).map_err(|e| Error::Run(e.into()))?;
        }
    }
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&done)?)?,
        Format::Text => {
            let ids: Vec<String> = (0..done.tokens.numel().max(0) as usize)
                .filter_map(|i| done.tokens.get_f64(i))
                .map(|v| format!("{v}"))
                .collect();
            writeln!(out, "tokens: {}", ids.join(" "))?;
            writeln!(
                out,
                "{} prompt tokens in {:.1} ms ({} call{}), {} new tokens, {:.1} tokens/s decoding",
                done.prompt_tokens,
                done.prefill_ms,
                done.prompt_calls,
                if done.prompt_calls == 1 { "" } else { "s" },
                done.new_tokens,
                done.tokens_per_second
            )?;
        }
    }
    Ok(0)
}

/// `generate` with each row of `prompts` a request of its own (a row ends at its first
/// negative id), served through the batch's slots.
fn generate_requests(
    args: &GenerateArgs,
    req: &crate::run::GenerateRequest,
    prompts: &[crate::npy::Array],
    verification: &crate::run::Verification,
    out: &mut dyn Write,
) -> anyhow::Result<u8> {
    if args.logits_out.is_some() {
        anyhow::bail!(Error::Unsupported(
            "`--logits-out` is for one batch of prompts of one length; requests of their own give tokens only".into()
        ));
    }
    let mut requests = Vec::new();
    for (path, p) in args.prompt.iter().zip(prompts) {
        let rows = request_rows(p).map_err(|reason| {
            Error::Run(crate::run::RunError::Decode(format!("the prompt `{}`: {reason}", path.display())))
        })?;
        requests.extend(rows.into_iter().map(|prompt| crate::run::Request {
            prompt,
            max_new_tokens: args.max_new_tokens,
            stop: args.eos.into_iter().collect(),
            sampling: crate::run::Sampling::at(args.temperature.unwrap_or(0.0)),
            logprobs: None,
            seed: args.seed,
        }));
    }
    let served = crate::run::generate_requests(req, requests, verification)
        .with_context(|| format!("cannot generate with `{}`", args.artifact.display()))?;
    if let Some(path) = &args.out {
        let width = served.requests.iter().map(|r| r.tokens.len()).max().unwrap_or(0);
        let mut data = Vec::with_capacity(served.requests.len() * width * 8);
        for r in &served.requests {
            let row = r.tokens.iter().copied().chain(std::iter::repeat(-1)).take(width);
            data.extend(row.flat_map(i64::to_le_bytes));
        }
        let shape = vec![served.requests.len() as i64, width as i64];
        let tokens = crate::npy::Array { dtype: torchtpu_passes::ir::DType::I64, shape, data };
        tokens.write(path).map_err(|e| Error::Run(e.into()))?;
    }
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&served)?)?,
        Format::Text => {
            for (i, r) in served.requests.iter().enumerate() {
                let ids: Vec<String> = r.tokens.iter().map(i64::to_string).collect();
                writeln!(out, "request {i}: {}", ids.join(" "))?;
            }
            let f = &served.figures;
            writeln!(
                out,
                "{} requests in {} slot{} ({}): {} new tokens in {} calls, {:.0}% of the slots busy, {:.1} tokens/s",
                served.requests.len(),
                served.slots,
                if served.slots == 1 { "" } else { "s" },
                if served.continuous { "joining at any call" } else { "in waves" },
                f.new_tokens,
                f.calls,
                served.occupancy * 100.0,
                served.tokens_per_second
            )?;
        }
    }
    Ok(0)
}

/// The requests of a prompt array, `[T]` or `[R, T]`: each row up to its first negative id.
fn request_rows(p: &crate::npy::Array) -> Result<Vec<Vec<i64>>, String> {
    if !p.dtype.is_integer() {
        return Err(format!("token ids must be integers, not {}", p.dtype));
    }
    let t = match p.shape[..] {
        [t] | [_, t] if t > 0 => t as usize,
        _ => return Err(format!("shape {:?}: give token ids as [T] or [R, T]", p.shape)),
    };
    let ids: Vec<i64> = (0..p.numel().max(0) as usize).filter_map(|i| p.get_f64(i)).map(|v| v as i64).collect();
    let rows: Vec<Vec<i64>> = ids.chunks(t).map(|row| row.iter().copied().take_while(|&v| v >= 0).collect()).collect();
    match rows.iter().position(Vec::is_empty) {
        Some(r) => Err(format!("row {r} has no token (it starts with a negative id)")),
        None => Ok(rows),
    }
}

/// `  matches the reference (…)` or `  DIFFERS from the reference (…)`, with the figures.
fn comparison_text(c: &crate::run::Comparison) -> String {
    let verdict = if c.ok { "matches" } else { "DIFFERS from" };
    let note = c.note.as_ref().map_or_else(String::new, |n| format!(", {n}"));
    let share = if c.elements == 0 { 0.0 } else { 100.0 * c.outside as f64 / c.elements as f64 };
    let bound = if c.rtol != 0.0 {
        format!("outside {:.3e} + {:.3e}·|ref|", c.atol, c.rtol)
    } else if c.atol != 0.0 {
        format!("off by more than {:.3e}", c.atol)
    } else {
        "unequal".to_string()
    };
    format!(
        "  {verdict} the reference (max abs diff {:.3e}, rel {:.3e}; {} of {} elements ({share:.2}%) {bound}{note})",
        c.max_abs_diff, c.max_rel_diff, c.outside, c.elements
    )
}

pub(super) fn cache(args: &CacheArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<u8> {
    let dir = args.cache_dir.clone().or_else(cache::default_dir).context("no cache folder: set --cache-dir or HOME")?;
    let json = args.format == Format::Json;
    let report = match args.action {
        CacheAction::Explain => return explain(args, out),
        CacheAction::Stats => cache::maintain::stats(&dir),
        CacheAction::Ls => cache::maintain::ls(&dir),
        CacheAction::Verify => cache::maintain::verify(&dir),
        CacheAction::Gc => cache::maintain::gc(&dir, args.max_size.unwrap_or(cache::DEFAULT_MAX_BYTES)),
        CacheAction::Clear => cache::maintain::clear(&dir)?,
    };
    for w in &report.warnings {
        writeln!(err, "warning: {w}")?;
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report.json)?)?;
    } else {
        write!(out, "{}", report.text)?;
    }
    Ok(if report.ok { 0 } else { 1 })
}

/// `cache explain MODEL.pt2 [COMPILE OPTIONS]`: for each executable the compile would need,
/// a hit, or the nearest entries and what differs. Exit 1 when any would miss.
fn explain(args: &CacheArgs, out: &mut dyn Write) -> anyhow::Result<u8> {
    let given = |flag: &str| args.compile.iter().any(|a| a == flag || a.starts_with(&format!("{flag}=")));
    let mut argv: Vec<String> = vec!["torchtpu-compile".into(), "compile".into()];
    argv.extend(args.compile.iter().cloned());
    if !given("-o") && !given("--output") {
        argv.extend(["-o".into(), "unused.tpuexe".into()]); // nothing is written
    }
    if let (Some(dir), false) = (&args.cache_dir, given("--cache-dir")) {
        argv.extend(["--cache-dir".into(), dir.display().to_string()]);
    }
    let Command::Compile(c) = Cli::try_parse_from(argv)?.command else {
        return Err(Error::Internal("`cache explain` parsed a command other than `compile`".into()).into());
    };
    if matches!(c.mesh, Some(MeshArg::Auto)) {
        return Err(Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, "`cache explain` needs a given mesh, not `--mesh auto`")
            .into());
    }
    c.check_devices(&c.targets_or_default())?;
    let program = import::import(&c.model)
        .map_err(Error::from)
        .with_context(|| format!("cannot read `{}`", c.model.display()))?;
    let mut req = compile_request(&c)?;
    req.progress = false;
    let explained = crate::compile::explain_cache(&program, &req)
        .with_context(|| format!("cannot explain the cache for `{}`", c.model.display()))?;
    if args.format == Format::Json {
        writeln!(out, "{}", serde_json::to_string_pretty(&explained)?)?;
    } else {
        for e in &explained {
            if e.hit {
                writeln!(out, "{} [{}]: hit ({})", e.target, e.bucket, &e.key[..16])?;
                continue;
            }
            let nearest = if e.nearest.is_empty() { "; the cache is empty" } else { "; nearest entries:" };
            writeln!(out, "{} [{}]: miss ({}){nearest}", e.target, e.bucket, &e.key[..16])?;
            for n in &e.nearest {
                writeln!(out, "  {} ({}): {}", &n.key[..16], n.target, n.differs.join("; "))?;
            }
        }
    }
    Ok(u8::from(explained.iter().any(|e| !e.hit)))
}

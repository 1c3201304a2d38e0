//! `plan`: its arguments, and the table or JSON it prints.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory};

use super::{parse_target, CacheFlags, Cli, Format};
use crate::compile::CompileRequest;
use crate::target::Target;
use crate::Error;

#[derive(Args)]
pub(super) struct PlanArgs {
    /// The archive written by `torch.export.save`.
    model: PathBuf,
    /// The slices to try, e.g. `tpu:v5e:2x4,tpu:v6e:2x2`, each with every mesh that splits it
    /// (`tp`, `fsdp` and `dp` over all its chips, `fsdp=a,tp=b`, `dp=a,tp=b`, and with experts `ep`
    /// over all its chips and `ep=a,tp=b`). Default: v5e and v6e at 1,
    /// 4, 8, 16 and 32 chips, v5p and tpu7x at 4, 8, 16 and 32, each generation up to the first
    /// slice where some mesh needs at most 80% of a chip's HBM.
    #[arg(long, value_name = "T,...", value_delimiter = ',', value_parser = parse_target)]
    slices: Vec<Target>,
    /// A chip table in the format of `schemas/tpu-chips.json` (per generation: bf16 peak, HBM and
    /// ICI bandwidth, price per chip-hour) instead of the bundled one.
    #[arg(long, value_name = "FILE")]
    prices: Option<PathBuf>,
    /// Size buckets and bounds of the dynamic dims, as for `compile`; the figures are the
    /// bucket's that needs the most memory.
    #[command(flatten)]
    sizes: super::SizeFlags,
    #[command(flatten)]
    cache: CacheFlags,
    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub(super) fn plan(args: &PlanArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    let chips = match &args.prices {
        Some(path) => crate::plan::ChipTable::read(path),
        None => crate::plan::ChipTable::bundled(),
    }
    .map_err(|e| Cli::command().error(clap::error::ErrorKind::ValueValidation, e))?;
    let mut program = crate::import::import(&args.model)
        .map_err(Error::from)
        .with_context(|| format!("cannot read `{}`", args.model.display()))?;
    let mut base = CompileRequest::new(vec![], crate::emit::Precision::Default);
    base.buckets = args.sizes.choices();
    crate::buckets::bound_symbols(&mut program, &base.buckets)
        .with_context(|| format!("cannot plan `{}`", args.model.display()))?;
    base.cache = args.cache.config();
    let slices = (!args.slices.is_empty()).then(|| args.slices.clone());
    let req = crate::plan::PlanRequest { slices, chips, base };
    let quiet = args.quiet;
    let mut progress = |what: &str| {
        if !quiet {
            let _ = writeln!(err, "compiling {what}");
        }
    };
    let report = crate::plan::plan(&program, &req, &mut progress)
        .with_context(|| format!("cannot plan `{}`", args.model.display()))?;
    match args.format {
        Format::Text => write!(out, "{}", crate::plan::render_text(&report))?,
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
    }
    Ok(())
}

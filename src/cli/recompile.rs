//! `recompile`: its arguments, and the summary it prints.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::{commands, parse_target, CacheFlags, Format};
use crate::compile::{recompile, RecompileRequest};
use crate::target::Target;

#[derive(Args)]
pub(super) struct RecompileArgs {
    /// The artifact whose programs are compiled again.
    artifact: PathBuf,
    /// Where to write the new artifact (it may be the same file: replaced atomically).
    #[arg(short, long)]
    output: PathBuf,
    /// The targets to compile for, as for `compile` (repeat for several). Default: the
    /// artifact's own targets, compiled again with the plugins this machine has (a new libtpu).
    #[arg(long = "target", value_name = "T", value_parser = parse_target)]
    targets: Vec<Target>,
    /// The PJRT plugin for CPU targets; default `$TORCHTPU_PJRT_PLUGIN`, then the `cargo xtask
    /// setup` folder (TPU targets: `$TORCHTPU_LIBTPU`, then the set-up folder).
    #[arg(long)]
    plugin: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheFlags,
    /// How many executables to compile at once. Default: the number of cores.
    #[arg(long, short = 'j', value_name = "N")]
    jobs: Option<usize>,
    /// Say only warnings and errors.
    #[arg(short, long)]
    quiet: bool,
    /// Also print the phases' times.
    #[arg(short, long)]
    verbose: bool,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
}

pub(super) fn recompile_artifact(args: &RecompileArgs, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    crate::pjrt::show_plugin_output(args.verbose);
    let req = RecompileRequest {
        targets: args.targets.clone(),
        plugin: args.plugin.clone(),
        cache: args.cache.config(),
        jobs: args.jobs.unwrap_or_else(crate::compile::default_jobs),
        progress: !args.quiet,
    };
    let summary = recompile(&args.artifact, &args.output, &req)
        .with_context(|| format!("cannot recompile `{}`", args.artifact.display()))?;
    commands::print_summary(&summary, args.format, args.quiet, args.verbose, out, err)
}

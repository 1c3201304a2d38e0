//! The command line (the library's boundary with users): parsing, output and exit codes.
//!
//! `main.rs` only forwards the process arguments here; tests call [`main_with`] directly with
//! captured output streams, so every message and exit code is tested without spawning processes.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};

use crate::{import, inspect, Error};

/// Ahead-of-time compiler from PyTorch `torch.export` archives (.pt2) to TPU executables.
///
/// Exit codes: 0 success, 1 the model cannot be read or compiled (the message names the
/// archive entry, node and op), 2 usage error, 3 environment problem (e.g. a missing plugin).
#[derive(Parser)]
#[command(name = "torchtpu-compile", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Describe an exported program: user inputs and outputs (with symbolic dims and their
    /// bounds), weights, op histogram, schema and torch version.
    ///
    /// Example: torchtpu-compile inspect model.pt2 --format json
    Inspect {
        /// The archive written by `torch.export.save` (recognized by content, not by extension).
        model: PathBuf,
        /// `text` for people, `json` for scripts (stable layout, see README).
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Json,
}

/// Runs the command line with `args` (including the program name); returns the exit code.
pub fn main_with(
    args: impl IntoIterator<Item = OsString>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version are "errors" that exit 0 and print to stdout.
            let text = e.render().ansi().to_string();
            let stream: &mut dyn Write = if e.use_stderr() { err } else { out };
            let _ = write!(stream, "{text}");
            return u8::try_from(e.exit_code()).unwrap_or(2);
        }
    };
    match run(cli, out) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            e.downcast_ref::<Error>().map_or(1, Error::exit_code)
        }
    }
}

fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<()> {
    match cli.command {
        Command::Inspect { model, format } => inspect_cmd(&model, format, out),
    }
}

fn inspect_cmd(model: &Path, format: Format, out: &mut dyn Write) -> anyhow::Result<()> {
    let program = import(model)
        .map_err(Error::from)
        .with_context(|| format!("cannot read `{}`", model.display()))?;
    let report = inspect::report(&program, &model.display().to_string());
    match format {
        Format::Text => write!(out, "{}", inspect::render_text(&report))?,
        Format::Json => writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?,
    }
    Ok(())
}

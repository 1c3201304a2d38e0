//! The pass flags of the commands that compile: `--passes LIST|none` and one `--no-<pass>` per
//! registered pass, made from the pass registry (`torchtpu_passes::PASSES`) so that a new pass
//! gets its flag and its help line without touching the command line.

use clap::Args;
use torchtpu_passes::PASSES;

/// Which graph passes run: `--passes LIST|none` and one `--no-<pass>` per registered pass,
/// flags and help made from the pass registry (`torchtpu_passes::PASSES`).
#[derive(Clone, Debug, Default)]
pub(super) struct PassFlags {
    /// `--passes`, when given.
    passes: Option<Vec<String>>,
    /// The passes named by `--no-<pass>` flags.
    skipped: Vec<String>,
}

impl PassFlags {
    /// The passes to run: `--passes` (default all) without the skipped ones.
    pub(super) fn selected(&self) -> Vec<String> {
        let all = || PASSES.iter().map(|p| p.name.to_string()).collect();
        let mut v: Vec<String> = self.passes.clone().unwrap_or_else(all);
        v.retain(|p| !self.skipped.contains(p));
        v
    }
}

/// The argument id of a pass's skip flag: `no_fold_batch_norm`.
fn skip_id(pass: &str) -> String {
    format!("no_{pass}")
}

/// The `--passes` help: every pass with what it does.
fn passes_help() -> String {
    let list: Vec<String> = PASSES.iter().map(|p| format!("  {}: {}", p.name, p.summary)).collect();
    format!(
        "Graph passes to run, comma-separated (they always run in pipeline order), or `none`. Default: all.\n\
         The passes, in pipeline order:\n{}",
        list.join("\n")
    )
}

impl clap::FromArgMatches for PassFlags {
    fn from_arg_matches(m: &clap::ArgMatches) -> Result<Self, clap::Error> {
        let passes = m.get_one::<PassList>("passes").map(|l| l.0.clone());
        let skipped = PASSES.iter().filter(|p| m.get_flag(&skip_id(p.name))).map(|p| p.name.to_string()).collect();
        Ok(PassFlags { passes, skipped })
    }

    fn update_from_arg_matches(&mut self, m: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = PassFlags::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for PassFlags {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        let passes = clap::Arg::new("passes")
            .long("passes")
            .value_name("LIST")
            .value_parser(parse_passes)
            .help("Graph passes to run, comma-separated, or `none` (default: all; see --help)")
            .long_help(passes_help());
        PASSES.iter().fold(cmd.arg(passes), |cmd, p| {
            let also = p.when_skipped.map_or_else(String::new, |w| format!(" ({w})"));
            cmd.arg(
                clap::Arg::new(skip_id(p.name))
                    .long(format!("no-{}", p.name.replace('_', "-")))
                    .action(clap::ArgAction::SetTrue)
                    .help(format!("Skip the `{}` pass{also}", p.name)),
            )
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        PassFlags::augment_args(cmd)
    }
}

/// The value of `--passes` (one argument holding a list).
#[derive(Clone, Debug)]
struct PassList(Vec<String>);

/// `canonicalize,cse` or `none`; every name must be a pass.
fn parse_passes(s: &str) -> Result<PassList, String> {
    if s == "none" {
        return Ok(PassList(vec![]));
    }
    let names: Vec<String> = s.split(',').map(|p| p.trim().to_string()).filter(|p| !p.is_empty()).collect();
    if let Some(unknown) = names.iter().find(|n| torchtpu_passes::pass_info(n).is_none()) {
        let valid: Vec<&str> = PASSES.iter().map(|p| p.name).collect();
        return Err(format!("unknown pass `{unknown}` (passes: {}, or `none`)", valid.join(", ")));
    }
    Ok(PassList(names))
}

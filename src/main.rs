//! The `torchtpu-compile` binary: forwards the process arguments to the library's command line.

use std::process::ExitCode;

fn main() -> ExitCode {
    // XLA plugins log INFO lines to stderr through absl; keep the tool's output readable unless
    // the user asked for those logs. Set before any thread or plugin exists.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1");
    }
    // libtpu must not query the cloud metadata server, nor take its per-host lock file.
    torchtpu_compile::internal::prepare_libtpu_environment();
    // XLA:CPU's memory-minimizing schedule (bf16 models convert their weights one at a time).
    torchtpu_compile::internal::prepare_xla_environment();
    // A crash inside a plugin names the target and bucket it was compiling.
    torchtpu_compile::internal::install_crash_handler();
    let code = torchtpu_compile::cli::main_with(std::env::args_os(), &mut std::io::stdout(), &mut std::io::stderr());
    ExitCode::from(code)
}

//! The `torchtpu-compile` binary: forwards the process arguments to the library's command line.

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = torchtpu_compile::cli::main_with(
        std::env::args_os(),
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    );
    ExitCode::from(code)
}

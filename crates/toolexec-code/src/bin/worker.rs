//! `toolexec-code-worker`: the sandboxed side of hardened code mode, as a
//! standalone binary (the `toolexec` command has the same as its hidden
//! `__script-worker` subcommand). Reads the script request on stdin, speaks
//! the gateway protocol on descriptor 3, exits 0 once the outcome is sent.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Accept (and ignore) the `__script-worker` argument sandbox runtimes pass.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(toolexec_code::worker::run_script_worker()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

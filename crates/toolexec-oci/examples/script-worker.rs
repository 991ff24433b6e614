//! The script worker the tests bind into containers for `Unit::Script`
//! (the same as `toolexec __script-worker` / `toolexec-code-worker`):
//! reads `{"language","source","limits"}` on stdin, runs the script,
//! calls tools and sends the outcome through the gateway.
//!
//! `cargo build -p toolexec-oci --example script-worker`

use std::process::ExitCode;

fn main() -> ExitCode {
    // The `__script-worker` argument the runtime passes is accepted as is.
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

//! The script worker the tests bind into containers for `Unit::Script`
//! (the same as `toolexec __script-worker` / `toolexec-code-worker`):
//! reads `{"language","source","limits"}` on stdin, runs the script,
//! calls tools and sends the outcome through the channel.
//!
//! `cargo build -p toolexec-oci --example script-worker`

use std::process::ExitCode;

fn main() -> ExitCode {
    // The `__script-worker` argument the runtime passes is accepted as is.
    toolexec_code::worker::worker_main()
}

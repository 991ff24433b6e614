//! The script worker runtimes bind into sandboxes for script units, for
//! the conformance suite (the same as `toolexec __script-worker`).

use std::process::ExitCode;

fn main() -> ExitCode {
    toolexec_code::worker::worker_main()
}

//! `toolexec-code-worker`: the sandboxed side of hardened code mode, as a
//! standalone binary (the `toolexec` command has the same as its hidden
//! `__script-worker` subcommand). Reads the script request on stdin, speaks
//! the gateway protocol on descriptor 3, exits 0 once the outcome is sent.

use std::process::ExitCode;

fn main() -> ExitCode {
    // Accept (and ignore) the `__script-worker` argument sandbox runtimes pass.
    toolexec_code::worker::worker_main()
}

//! `toolexec-code-worker`: the sandboxed side of hardened code mode, as a
//! standalone binary (the `toolexec` command has the same as its hidden
//! `__script-worker` subcommand). Reads the script request on stdin, speaks
//! the tool channel on descriptor 3, exits 0 once the outcome is sent.
//! Like `toolexec`, it is also the sandbox init (`__sandbox-init ...`), so
//! one binary serves a bubblewrap sandbox whole.

use std::process::ExitCode;

use toolexec_bwrap::init;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(init::SUBCOMMAND) {
        return init::main(&args);
    }
    // Accept (and ignore) the `__script-worker` argument sandbox runtimes pass.
    toolexec_code::worker::worker_main()
}

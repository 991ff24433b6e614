//! The init toolexec's bubblewrap sandbox runs inside, as a standalone
//! binary for library users (the `toolexec` binary ships the same init as
//! `toolexec __sandbox-init`). See [`toolexec_bwrap::init`].

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    toolexec_bwrap::init::main(&args)
}

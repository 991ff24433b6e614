//! The bubblewrap sandbox init, for the conformance suite (the same as
//! `toolexec __sandbox-init`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    toolexec_bwrap::init::main(&args)
}

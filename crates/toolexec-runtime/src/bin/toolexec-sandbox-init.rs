//! The init toolexec's bubblewrap sandbox runs inside: applies Landlock,
//! then execs the unit.
//!
//! - `toolexec-sandbox-init exec -- PROGRAM ARGS...`: restrict and exec.
//! - `toolexec-sandbox-init wait FD`: a pre-warmed pool entry; reads the
//!   unit's JSON spec (`{argv, env, cwd, rlimits}`) from descriptor `FD`
//!   until EOF, applies it, restricts and execs.
//!
//! Exit codes: 126 when the sandbox cannot be set up (Landlock, spec),
//! 127 when the unit cannot be executed.

use std::process::ExitCode;

use toolexec_runtime::bwrap::init;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("exec") if args.get(1).map(String::as_str) == Some("--") => {
            init::apply_landlock().map(|_| init::exec(&args[2..]))
        }
        Some("wait") => match args.get(1).and_then(|fd| fd.parse::<i32>().ok()) {
            Some(fd) if fd > 3 => init::read_spec(fd)
                .and_then(|spec| init::apply_spec(&spec).map(|_| spec))
                .and_then(|spec| init::apply_landlock().map(|_| init::exec(&spec.argv))),
            _ => {
                eprintln!("toolexec-sandbox-init: wait needs a descriptor number above 3");
                return ExitCode::from(126);
            }
        },
        _ => {
            eprintln!("usage: toolexec-sandbox-init exec -- PROGRAM [ARGS...] | wait FD");
            return ExitCode::from(126);
        }
    };
    match result {
        // `exec` only returns with its error.
        Ok(exec_error) => {
            eprintln!("toolexec-sandbox-init: {exec_error}");
            ExitCode::from(127)
        }
        Err(e) => {
            eprintln!("toolexec-sandbox-init: {e}");
            ExitCode::from(126)
        }
    }
}

//! Bad requests: typed errors with stable codes and the field, before
//! anything runs.

use std::collections::BTreeMap;

use toolexec_runtime::{
    CommandUnit, MAX_COMMAND_STDIN_BYTES, NetworkPolicy, RunStatus, Unit, WasmCode, WasmUnit,
};

use crate::Case;
use crate::check;

fn command(f: impl FnOnce(&mut CommandUnit)) -> Unit {
    let mut unit = CommandUnit {
        argv: vec!["true".into()],
        ..CommandUnit::default()
    };
    f(&mut unit);
    Unit::Command(unit)
}

pub(super) fn cases() -> Vec<Case> {
    vec![
        Case::new(
            "bad_request_empty_argv",
            |_, _, _| Unit::command(Vec::<String>::new()),
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.argv")),
        ),
        Case::new(
            "bad_request_nul_in_argv",
            |_, _, _| Unit::command(["echo", "a\0b"]),
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.argv")),
        ),
        Case::new(
            "bad_request_env_name",
            |_, _, _| command(|u| u.env = BTreeMap::from([("A=B".to_owned(), "x".to_owned())])),
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.env")),
        ),
        Case::new(
            "bad_request_reserved_env",
            |_, _, _| {
                command(|u| {
                    u.env = BTreeMap::from([("TOOLEXEC_CHANNEL_FD".to_owned(), "9".to_owned())])
                })
            },
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.env")),
        ),
        Case::new(
            "bad_request_relative_cwd",
            |_, _, _| command(|u| u.cwd = Some("relative".into())),
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.cwd")),
        ),
        Case::new(
            "bad_request_oversized_stdin",
            |_, _, _| command(|u| u.stdin = Some("x".repeat(MAX_COMMAND_STDIN_BYTES + 1))),
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.stdin")),
        ),
        Case::new(
            "bad_request_wasm_unit",
            |_, _, _| {
                Unit::Wasm(WasmUnit {
                    code: WasmCode::Wat("(module)".into()),
                    entry: None,
                    input: None,
                    args: Vec::new(),
                })
            },
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.kind")),
        ),
        Case::new(
            "bad_request_script_unit",
            |_, _, _| Unit::javascript("1"),
            |_, _, o| check::error(&o.outcome, "invalid_request", Some("unit.kind")),
        )
        .applies(|s| {
            if s.script_units {
                Err("the runtime runs script units (script_unit covers them)".into())
            } else {
                Ok(())
            }
        }),
        Case::new(
            "network_allowlist_is_refused",
            |_, _, _| Unit::command(["true"]),
            |_, _, o| {
                // Runtimes differ on the code (bubblewrap:
                // backend_unavailable, another runtime may filter; the
                // container runtimes: invalid_request); the field and a
                // typed error are common ground.
                let RunStatus::Error { error } = &o.outcome.status else {
                    return Err(format!(
                        "an allowlist ran unfiltered {}",
                        check::brief(&o.outcome)
                    ));
                };
                let code = error.code.as_str();
                check::error(&o.outcome, code, Some("limits.network"))?;
                check::ensure(
                    matches!(code, "invalid_request" | "backend_unavailable"),
                    &o.outcome,
                    "expected invalid_request or backend_unavailable",
                )
            },
        )
        .limits(|_, l| {
            l.network = NetworkPolicy::Allow {
                hosts: vec!["example.com".into()],
            }
        }),
    ]
}

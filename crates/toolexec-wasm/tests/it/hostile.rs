//! Hostile units: each ends with the right status, never a panic, and the
//! runtime keeps serving normal units afterwards.

use std::time::{Duration, Instant};

use crate::support::{binary, limits, module, module_with, run, run_on, runtime, wat};
use serde_json::json;
use toolexec::{CancellationToken, ErrorCode};
use toolexec_runtime::{
    LimitKind, NetworkPolicy, RunOutcome, RunStatus, RuntimeLimits, Unit, WasmCode, WasmUnit,
};

const LOOP: &str = r#"(func (export "run") (loop $l (br $l)))"#;

fn limit(outcome: &RunOutcome) -> Option<LimitKind> {
    outcome.status.limit()
}

fn error_code(outcome: &RunOutcome) -> Option<(ErrorCode, String)> {
    match &outcome.status {
        RunStatus::Error { error } => Some((
            error.code,
            error
                .details
                .as_ref()
                .and_then(|d| d["field"].as_str())
                .unwrap_or("")
                .to_owned(),
        )),
        _ => None,
    }
}

#[tokio::test]
async fn infinite_loop_hits_the_wall_time_limit() {
    let started = Instant::now();
    let outcome = run(
        wat(&module(LOOP)),
        RuntimeLimits {
            wall_time: Duration::from_millis(300),
            cpu_time: None,
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::WallTime), "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn infinite_loop_runs_out_of_fuel() {
    let outcome = run(
        wat(&module(LOOP)),
        RuntimeLimits {
            cpu_time: Some(Duration::from_millis(50)),
            wall_time: Duration::from_secs(20),
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::CpuTime), "{outcome:?}");
}

#[tokio::test]
async fn memory_grow_bomb_hits_the_memory_limit() {
    let body = r#"(func (export "run")
        (loop $l (br_if $l (i32.ne (memory.grow (i32.const 16)) (i32.const -1)))))"#;
    let outcome = run(
        wat(&module(body)),
        RuntimeLimits {
            memory_bytes: Some(4 << 20),
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::Memory), "{outcome:?}");
}

#[tokio::test]
async fn huge_initial_memory_is_refused_at_instantiation() {
    let text = r#"(module (memory (export "memory") 1000) (func (export "run")))"#;
    let outcome = run(
        wat(text),
        RuntimeLimits {
            memory_bytes: Some(4 << 20),
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::Memory), "{outcome:?}");
}

#[tokio::test]
async fn deep_recursion_traps_with_stack_overflow() {
    let body = r#"(func $f (export "run") (call $f))"#;
    let outcome = run(wat(&module(body)), limits()).await;
    let RunStatus::Failed { message } = &outcome.status else {
        panic!("{outcome:?}")
    };
    assert!(message.contains("call stack exhausted"), "{message}");
}

#[tokio::test]
async fn ordinary_traps_are_failures_with_the_message() {
    let body = r#"(func (export "run") (drop (i32.div_s (i32.const 1) (i32.const 0))))"#;
    let outcome = run(wat(&module(body)), limits()).await;
    let RunStatus::Failed { message } = &outcome.status else {
        panic!("{outcome:?}")
    };
    assert!(message.contains("divide by zero"), "{message}");
}

const SPAM: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 1024))
    (i32.store (i32.const 4) (i32.const 4096))
    (loop $l (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))) (br $l))))"#;

#[tokio::test]
async fn giant_stdout_hits_the_output_limit() {
    let outcome = run(
        wat(SPAM),
        RuntimeLimits {
            max_output_bytes: 10_000,
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::Output), "{outcome:?}");
    assert_eq!(outcome.stdout.len(), 10_000);
}

#[tokio::test]
async fn log_spam_hits_the_output_limit() {
    let body =
        r#"(func (export "run") (loop $l (call $log (i32.const 0) (i32.const 1000)) (br $l)))"#;
    let outcome = run(
        wat(&module(body)),
        RuntimeLimits {
            max_output_bytes: 5_000,
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::Output), "{outcome:?}");
    assert!(outcome.stderr.len() <= 5_000);
}

#[tokio::test]
async fn files_are_unreachable_without_preopens() {
    // fd_prestat_get(3) and path_open(3, ..., "/etc/passwd") both fail with
    // EBADF (8): there is no preopened directory.
    let text = module_with(
        r#"(import "wasi_snapshot_preview1" "fd_prestat_get" (func $prestat (param i32 i32) (result i32)))
           (import "wasi_snapshot_preview1" "path_open" (func $open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))"#,
        r#"(data (i32.const 64) "/etc/passwd")
           (func (export "run")
             (call $out_i32 (i32.add
               (i32.mul (call $prestat (i32.const 3) (i32.const 200)) (i32.const 100))
               (call $open (i32.const 3) (i32.const 0) (i32.const 64) (i32.const 11) (i32.const 0)
                           (i64.const 0) (i64.const 0) (i32.const 0) (i32.const 300)))))"#,
    );
    let outcome = run(wat(&text), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value, Some(json!(808)));
}

#[tokio::test]
async fn sockets_are_unavailable() {
    // sock_accept on fd 3 fails with EBADF (8): no socket is granted.
    let text = module_with(
        r#"(import "wasi_snapshot_preview1" "sock_accept" (func $accept (param i32 i32 i32) (result i32)))"#,
        r#"(func (export "run") (call $out_i32 (call $accept (i32.const 3) (i32.const 0) (i32.const 200))))"#,
    );
    let outcome = run(wat(&text), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value, Some(json!(8)));
    // Importing a socket API WASI preview 1 does not have fails to link.
    let text = r#"(module (import "wasi_snapshot_preview1" "sock_open" (func (param i32 i32 i32) (result i32))) (func (export "run")))"#;
    let outcome = run(wat(text), limits()).await;
    assert_eq!(
        error_code(&outcome),
        Some((ErrorCode::InvalidRequest, "unit.code".into())),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_network_allowlist_is_refused_not_silently_dropped() {
    // WASI without sockets cannot grant network access to any host, so an
    // allowlist is refused up front instead of running with no network.
    let allow = RuntimeLimits {
        network: NetworkPolicy::Allow {
            hosts: vec!["example.com:443".into()],
        },
        ..limits()
    };
    let outcome = run(wat(&module(r#"(func (export "run"))"#)), allow).await;
    assert_eq!(
        error_code(&outcome),
        Some((ErrorCode::InvalidRequest, "limits.network".into())),
        "{outcome:?}"
    );
    let RunStatus::Error { error } = &outcome.status else {
        unreachable!()
    };
    assert!(error.message.contains("example.com:443"), "{error:?}");
    assert!(outcome.value.is_none() && outcome.tool_calls.is_empty());
    // The same unit with the network off runs.
    let outcome = run(wat(&module(r#"(func (export "run"))"#)), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
}

#[tokio::test]
async fn out_of_bounds_pointers_and_huge_lengths_are_abi_errors() {
    let cases = [
        // id pointer past the end of memory
        r#"(drop (call $call (i32.const 65530) (i32.const 100) (i32.const 0) (i32.const 2)))"#,
        // pointer + length wrapping around u32
        r#"(drop (call $call (i32.const -16) (i32.const 32) (i32.const 0) (i32.const 2)))"#,
        // huge args length
        r#"(drop (call $call (i32.const 0) (i32.const 8) (i32.const 0) (i32.const 2147483647)))"#,
        // negative length (u32 max)
        r#"(drop (call $call (i32.const 0) (i32.const 8) (i32.const 0) (i32.const -1)))"#,
        r#"(drop (call $result_read (i32.const 65535) (i32.const 2)))"#,
        r#"(drop (call $input_read (i32.const -1) (i32.const 100)))"#,
        r#"(call $output (i32.const 0) (i32.const 65537))"#,
        r#"(call $log (i32.const 100000) (i32.const 1))"#,
    ];
    for case in cases {
        let body = format!(r#"(func (export "run") {case})"#);
        let outcome = run(wat(&module(&body)), limits()).await;
        let (code, field) = error_code(&outcome).unwrap_or_else(|| panic!("{case}: {outcome:?}"));
        assert_eq!(
            (code, field.as_str()),
            (ErrorCode::InvalidRequest, "abi"),
            "{case}"
        );
        let RunStatus::Error { error } = &outcome.status else {
            unreachable!()
        };
        assert!(error.message.contains("toolexec."), "{}", error.message);
    }
}

#[tokio::test]
async fn abi_needs_an_exported_memory_and_json_output() {
    let text = r#"(module
      (import "toolexec" "output" (func $output (param i32 i32)))
      (memory 1)
      (func (export "run") (call $output (i32.const 0) (i32.const 1))))"#;
    let outcome = run(wat(text), limits()).await;
    assert_eq!(
        error_code(&outcome),
        Some((ErrorCode::InvalidRequest, "abi".into())),
        "{outcome:?}"
    );

    let body = r#"(data (i32.const 0) "{not json") (func (export "run") (call $output (i32.const 0) (i32.const 9)))"#;
    let outcome = run(wat(&module(body)), limits()).await;
    assert_eq!(
        error_code(&outcome),
        Some((ErrorCode::InvalidRequest, "abi".into())),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn malformed_tool_calls_get_error_bodies() {
    // Invalid JSON args and a non-UTF-8 id: the module gets an error body.
    let body = r#"(data (i32.const 0) "math:add") (data (i32.const 16) "{oops") (data (i32.const 32) "\ff\fe")
      (func (export "run")
        (local $a i32) (local $b i32)
        (local.set $a (call $call (i32.const 0) (i32.const 8) (i32.const 16) (i32.const 5)))
        (local.set $b (call $call (i32.const 32) (i32.const 2) (i32.const 16) (i32.const 5)))
        (drop (call $result_read (i32.const 8192) (i32.sub (i32.const 0) (local.get $b))))
        (call $output (i32.const 8192) (i32.sub (i32.const 0) (local.get $b))))"#;
    let outcome = run(wat(&module(body)), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value.as_ref().unwrap()["code"], "invalid_tool_id");
    assert!(outcome.tool_calls.is_empty(), "never reached the host");
}

/// Calls `math:add` in a loop, `$n` times, then outputs the count.
fn add_loop(n: u32) -> String {
    module(&format!(
        r#"(data (i32.const 0) "math:add") (data (i32.const 16) "{{\"a\":1,\"b\":1}}")
        (func (export "run")
          (local $i i32)
          (loop $l
            (drop (call $call (i32.const 0) (i32.const 8) (i32.const 16) (i32.const 13)))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br_if $l (i32.lt_u (local.get $i) (i32.const {n}))))
          (call $out_i32 (local.get $i)))"#
    ))
}

#[tokio::test]
async fn tool_budget_exhaustion_ends_the_run() {
    let outcome = run(
        wat(&add_loop(5)),
        RuntimeLimits {
            max_tool_calls: 2,
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::ToolCalls), "{outcome:?}");
    assert_eq!(outcome.tool_calls.len(), 3);
    assert!(outcome.tool_calls[..2].iter().all(|c| c.ok));
    assert_eq!(
        outcome.tool_calls[2].error.as_ref().unwrap().code,
        ErrorCode::LimitExceeded
    );
    // Within budget, the same module finishes.
    let outcome = run(
        wat(&add_loop(2)),
        RuntimeLimits {
            max_tool_calls: 2,
            ..limits()
        },
    )
    .await;
    assert_eq!(outcome.value, Some(json!(2)), "{outcome:?}");
}

#[tokio::test]
async fn allowlist_violations_are_refused_and_logged() {
    let outcome = run(
        wat(&module(include_str!("../fixtures/add_body.wat"))),
        RuntimeLimits {
            allowed_tools: vec!["text:*".into()],
            ..limits()
        },
    )
    .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value.as_ref().unwrap()["code"], "not_allowed");
    assert_eq!(outcome.tool_calls.len(), 1);
    assert!(!outcome.tool_calls[0].ok);
}

#[tokio::test]
async fn malformed_and_invalid_code_is_invalid_request() {
    let cases: Vec<(Unit, &str)> = vec![
        (binary(b"not wasm at all".to_vec()), "unit.code"),
        (binary(Vec::new()), "unit.code"),
        (
            binary(b"\0asm\x01\0\0\0\x01\xff\xff\xff\xff".to_vec()),
            "unit.code",
        ),
        (binary(b"\0asm\x0d\0\x01\0\x07".to_vec()), "unit.code"),
        (
            wat("(module (func (export \"run\") (i32.add)))"),
            "unit.code",
        ),
        (wat("(module"), "unit.code"),
        (
            wat(r#"(module (import "env" "system" (func)))"#),
            "unit.code",
        ),
        (wat("(module)"), "unit.entry"),
        (
            wat(r#"(module (func (export "run") (param i32)))"#),
            "unit.entry",
        ),
        (
            wat(r#"(module (func (export "run") (result i64) (i64.const 1)))"#),
            "unit.entry",
        ),
        (wat("(component)"), "unit.entry"),
    ];
    for (unit, field) in cases {
        let outcome = run(unit.clone(), limits()).await;
        assert_eq!(
            error_code(&outcome),
            Some((ErrorCode::InvalidRequest, field.to_owned())),
            "{unit:?}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn oversized_code_and_input_are_refused() {
    let big = WasmUnit {
        code: WasmCode::Binary(vec![0; runtime().config().max_code_bytes + 1]),
        entry: None,
        input: None,
        args: vec![],
    };
    let outcome = run(Unit::Wasm(big), limits()).await;
    assert_eq!(
        error_code(&outcome),
        Some((ErrorCode::InvalidRequest, "unit.code".into()))
    );
    let input = WasmUnit {
        code: WasmCode::Wat("(module)".into()),
        entry: None,
        input: Some(json!("x".repeat(runtime().config().max_message_bytes))),
        args: vec![],
    };
    let outcome = run(Unit::Wasm(input), limits()).await;
    assert_eq!(
        error_code(&outcome),
        Some((ErrorCode::InvalidRequest, "unit.input".into()))
    );
}

#[tokio::test]
async fn cancellation_stops_a_running_unit() {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let outcome = run_on(
        runtime(),
        wat(&module(LOOP)),
        RuntimeLimits {
            cpu_time: None,
            ..limits()
        },
        cancel,
    )
    .await;
    assert_eq!(outcome.status, RunStatus::Cancelled, "{outcome:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "current_thread")]
async fn a_spinning_unit_does_not_starve_its_executor() {
    // On a single-threaded runtime, the epoch callback yields, so a timer
    // task still runs while the unit spins.
    let ticked = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = ticked.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
    });
    let outcome = run(
        wat(&module(LOOP)),
        RuntimeLimits {
            wall_time: Duration::from_millis(400),
            cpu_time: None,
            ..limits()
        },
    )
    .await;
    assert_eq!(limit(&outcome), Some(LimitKind::WallTime));
    assert!(ticked.load(std::sync::atomic::Ordering::SeqCst));
}

#[tokio::test]
async fn runtime_survives_a_gauntlet_of_hostile_units() {
    let short = RuntimeLimits {
        wall_time: Duration::from_millis(200),
        cpu_time: Some(Duration::from_millis(100)),
        memory_bytes: Some(2 << 20),
        max_output_bytes: 1000,
        max_tool_calls: 1,
        ..limits()
    };
    let hostile = [
        module(LOOP),
        module(r#"(func $f (export "run") (call $f))"#),
        module(
            r#"(func (export "run") (loop $l (br_if $l (i32.ne (memory.grow (i32.const 1)) (i32.const -1)))))"#,
        ),
        SPAM.to_owned(),
        add_loop(10),
        module(
            r#"(func (export "run") (drop (call $call (i32.const -1) (i32.const -1) (i32.const 0) (i32.const 0))))"#,
        ),
        "(module".to_owned(),
    ];
    for text in &hostile {
        let outcome = run(wat(text), short.clone()).await;
        assert!(!outcome.is_ok(), "{text}: {outcome:?}");
    }
    let outcome = run(wat(&add_loop(1)), limits()).await;
    assert_eq!(outcome.value, Some(json!(1)), "{outcome:?}");
}

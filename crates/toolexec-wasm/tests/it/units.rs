//! Functional tests: input and output, tool calls, WASI stdout, components,
//! the module cache and the runtime contract.

use crate::support::{self, limits, module, run, runtime, wat};
use serde_json::json;
use toolexec::{CancellationToken, ErrorCode};
use toolexec_runtime::{
    LimitKind, Profile, ProfileMap, RunRequest, RunStatus, Runtime, Runtimes, Unit, UnitKind,
    WasmCode, WasmUnit,
};
use toolexec_wasm::{WasmConfig, WasmRuntime};

/// Reverses the bytes of its JSON input: `"olleh"` becomes `"hello"`.
const REVERSE: &str = r#"
  (func (export "run")
    (local $n i32) (local $i i32)
    (local.set $n (call $input_read (i32.const 0) (call $input_len)))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (i32.store8 (i32.add (i32.const 8192) (local.get $i))
        (i32.load8_u (i32.sub (i32.sub (local.get $n) (i32.const 1)) (local.get $i))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (call $output (i32.const 8192) (local.get $n)))
"#;

#[tokio::test]
async fn module_computes_its_output_from_input() {
    let Unit::Wasm(mut unit) = wat(&module(REVERSE)) else {
        unreachable!()
    };
    unit.input = Some(json!("olleh"));
    let outcome = run(Unit::Wasm(unit), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.value, Some(json!("hello")));
    assert_eq!(outcome.runtime, "wasm");
    assert_eq!(outcome.exit_code, Some(0));
}

/// Calls `math:add` with `{"a":2,"b":3}` and outputs the result (or the
/// error body).
const ADD: &str = include_str!("../fixtures/add_body.wat");

#[tokio::test]
async fn module_calls_a_catalog_tool_through_the_host_import() {
    let outcome = run(wat(&module(ADD)), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        outcome.value.as_ref().and_then(|v| v["result"].as_f64()),
        Some(5.0)
    );
    assert_eq!(outcome.tool_calls.len(), 1);
    let call = &outcome.tool_calls[0];
    assert_eq!(call.tool_id, "math:add");
    assert_eq!(
        call.args,
        toolexec_runtime::ValueSummary::of(&json!({"a": 2, "b": 3}))
    );
    assert!(call.ok);
}

#[tokio::test]
async fn tool_errors_come_back_as_error_bodies() {
    // Arguments that break math:add's schema: the module gets the error body.
    let body = ADD
        .replace(r#"{\"a\":2,\"b\":3}"#, r#"{\"a\":\"x\",\"b\":3}"#)
        .replace("(i32.const 13)", "(i32.const 15)");
    let outcome = run(wat(&module(&body)), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let value = outcome.value.expect("error body");
    assert_eq!(value["code"], "validation_input", "{value}");
    assert!(!outcome.tool_calls[0].ok);
}

const HELLO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello from wasm\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 16))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))
    (drop (call $fd_write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

#[tokio::test]
async fn wasi_fd_write_is_captured() {
    let outcome = run(wat(HELLO), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(outcome.stdout, "hello from wasm\n");
    assert_eq!(outcome.stderr, "hello from wasm\n");
    assert_eq!(outcome.value, None);
}

/// What the unit writes reaches the run's live output sink too, exactly
/// what the outcome holds (the capture every runtime shares).
#[tokio::test]
async fn wasi_output_is_streamed_live() {
    let limits = limits();
    let cancel = toolexec::CancellationToken::new();
    let (sink, mut live) = toolexec_runtime::OutputSink::channel();
    let ctx = toolexec_runtime::RunContext {
        host: toolexec_runtime::ToolHost::new(support::exec(), &limits, cancel.clone()),
        cancel,
        output: Some(sink),
    };
    let request =
        toolexec_runtime::RunRequest::new(wat(HELLO), toolexec_runtime::Profile::Hardened)
            .with_limits(limits);
    let outcome = toolexec_runtime::Runtime::run(support::runtime(), request, ctx).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    while let Ok(chunk) = live.try_recv() {
        match chunk.stream {
            toolexec_runtime::OutputStream::Stdout => stdout.extend(chunk.bytes),
            toolexec_runtime::OutputStream::Stderr => stderr.extend(chunk.bytes),
        }
    }
    assert_eq!(String::from_utf8(stdout).unwrap(), outcome.stdout);
    assert_eq!(String::from_utf8(stderr).unwrap(), outcome.stderr);
}

#[tokio::test]
async fn wasi_args_are_the_units_args_and_env_is_empty() {
    // args_sizes_get -> (argc, bytes); environ_sizes_get -> (count, bytes).
    let text = support::module_with(
        r#"(import "wasi_snapshot_preview1" "args_sizes_get" (func $args (param i32 i32) (result i32)))
           (import "wasi_snapshot_preview1" "environ_sizes_get" (func $env (param i32 i32) (result i32)))"#,
        r#"(func (export "run")
            (drop (call $args (i32.const 100) (i32.const 104)))
            (drop (call $env (i32.const 108) (i32.const 112)))
            (call $out_i32 (i32.add (i32.mul (i32.load (i32.const 100)) (i32.const 100))
                                    (i32.load (i32.const 108)))))"#,
    );
    let Unit::Wasm(mut unit) = wat(&text) else {
        unreachable!()
    };
    unit.args = vec!["one".into(), "two".into()];
    let outcome = run(Unit::Wasm(unit), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    // argv = ["unit", "one", "two"], no environment variables.
    assert_eq!(outcome.value, Some(json!(300)));
}

#[tokio::test]
async fn entry_can_be_chosen_and_i32_results_are_exit_codes() {
    let text = module(
        r#"(func (export "ok") (result i32) (i32.const 0))
           (func (export "bad") (result i32) (i32.const 3))"#,
    );
    for (entry, ok, code) in [("ok", true, 0), ("bad", false, 3)] {
        let Unit::Wasm(mut unit) = wat(&text) else {
            unreachable!()
        };
        unit.entry = Some(entry.into());
        let outcome = run(Unit::Wasm(unit), limits()).await;
        assert_eq!(outcome.is_ok(), ok, "{outcome:?}");
        assert_eq!(outcome.exit_code, Some(code));
    }
}

#[tokio::test]
async fn proc_exit_sets_the_exit_code() {
    let text = r#"(module
      (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
      (memory (export "memory") 1)
      (func (export "_start") (call $exit (i32.const 7))))"#;
    let outcome = run(wat(text), limits()).await;
    assert!(
        matches!(outcome.status, RunStatus::Failed { .. }),
        "{outcome:?}"
    );
    assert_eq!(outcome.exit_code, Some(7));
}

/// A component importing `toolexec:tools/host`: calls `math:add` with
/// 20 + 22 and outputs the result.
const COMPONENT: &str = r#"(component
  (import "toolexec:tools/host" (instance $host
    (export "output" (func (param "value" string)))
    (export "call" (func (param "id" string) (param "args" string) (result (result string (error string)))))))
  (core module $Mem
    (memory (export "memory") 1)
    (global $heap (mut i32) (i32.const 8192))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $r i32)
      (local.set $r (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
        (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))
      (global.set $heap (i32.add (local.get $r) (local.get 3)))
      (local.get $r)))
  (core instance $mem (instantiate $Mem))
  (alias core export $mem "memory" (core memory $memory))
  (alias core export $mem "realloc" (core func $realloc))
  (core func $output (canon lower (func $host "output") (memory $memory)))
  (core func $call (canon lower (func $host "call") (memory $memory) (realloc $realloc)))
  (core module $Main
    (import "host" "memory" (memory 1))
    (import "host" "output" (func $output (param i32 i32)))
    (import "host" "call" (func $call (param i32 i32 i32 i32 i32)))
    (data (i32.const 0) "math:add")
    (data (i32.const 16) "{\"a\":20,\"b\":22}")
    (func (export "run")
      (call $call (i32.const 0) (i32.const 8) (i32.const 16) (i32.const 15) (i32.const 100))
      (if (i32.load8_u (i32.const 100)) (then unreachable))
      (call $output (i32.load (i32.const 104)) (i32.load (i32.const 108)))))
  (core instance $main (instantiate $Main (with "host" (instance
    (export "memory" (memory $memory))
    (export "output" (func $output))
    (export "call" (func $call))))))
  (func (export "run") (canon lift (core func $main "run"))))"#;

#[tokio::test]
async fn component_calls_a_tool_and_sets_output() {
    let outcome = run(wat(COMPONENT), limits()).await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        outcome.value.as_ref().and_then(|v| v["result"].as_f64()),
        Some(42.0)
    );
    assert_eq!(outcome.tool_calls.len(), 1);
}

#[tokio::test]
async fn compiled_code_is_cached_by_content() {
    let rt = WasmRuntime::new(WasmConfig {
        pool_instances: 2,
        cache_entries: 2,
        ..WasmConfig::default()
    });
    let cancel = CancellationToken::new;
    let a = module(r#"(func (export "run") (call $out_i32 (i32.const 1)))"#);
    let b = module(r#"(func (export "run") (call $out_i32 (i32.const 2)))"#);
    let c = module(r#"(func (export "run") (call $out_i32 (i32.const 3)))"#);
    for _ in 0..3 {
        let outcome = support::run_on(&rt, wat(&a), limits(), cancel()).await;
        assert_eq!(outcome.value, Some(json!(1)), "{outcome:?}");
    }
    assert_eq!(rt.cached(), 1);
    for text in [&b, &c, &a] {
        assert!(
            support::run_on(&rt, wat(text), limits(), cancel())
                .await
                .is_ok()
        );
    }
    assert_eq!(rt.cached(), 2, "bounded by cache_entries");
    rt.precompile(&WasmCode::Wat(b.clone())).await.unwrap();
    let err = rt
        .precompile(&WasmCode::Wat("(module".into()))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);
}

#[tokio::test]
async fn runs_through_the_registry_under_hardened() {
    let mut runtimes = Runtimes::new(ProfileMap {
        hardened: vec!["wasm".into()],
        ..ProfileMap::default()
    });
    runtimes.register(WasmRuntime::new(WasmConfig {
        pool_instances: 2,
        ..WasmConfig::default()
    }));
    let exec = support::exec();
    let request = RunRequest::new(wat(&module(ADD)), Profile::Hardened);
    let outcome = runtimes
        .run(request, Some(&exec), CancellationToken::new())
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    assert_eq!(
        outcome.value.as_ref().and_then(|v| v["result"].as_f64()),
        Some(5.0)
    );
    let info = &runtimes.list()[0];
    assert_eq!(info.name, "wasm");
    assert!(info.available);
    assert_eq!(info.max_profile, Profile::Hardened);
    assert_eq!(info.unit_kinds, vec![UnitKind::Wasm]);
}

#[tokio::test]
async fn every_limit_has_an_enforcement_entry() {
    let outcome = run(wat(&module(ADD)), limits()).await;
    for limit in [
        LimitKind::WallTime,
        LimitKind::CpuTime,
        LimitKind::Memory,
        LimitKind::Output,
        LimitKind::ToolCalls,
        LimitKind::Processes,
        LimitKind::Network,
        LimitKind::Disk,
    ] {
        let e = outcome
            .enforced_by(limit)
            .unwrap_or_else(|| panic!("{limit} missing"));
        assert!(e.is_enforced(), "{e:?}");
    }
    assert!(
        outcome
            .enforced_by(LimitKind::CpuTime)
            .unwrap()
            .mechanism
            .contains("fuel")
    );
    assert!(
        outcome
            .enforced_by(LimitKind::WallTime)
            .unwrap()
            .mechanism
            .contains("epoch")
    );
}

#[tokio::test]
async fn other_unit_kinds_and_bad_configs_are_typed_errors() {
    let rt = runtime();
    assert_eq!(rt.name(), WasmRuntime::NAME);
    let outcome = support::run_on(
        rt,
        Unit::command(["true"]),
        limits(),
        CancellationToken::new(),
    )
    .await;
    let RunStatus::Error { error } = &outcome.status else {
        panic!("{outcome:?}")
    };
    assert_eq!(error.code, ErrorCode::InvalidRequest);
    assert_eq!(error.details.as_ref().unwrap()["field"], "unit.kind");

    let broken = WasmRuntime::new(WasmConfig {
        pool_instances: 0,
        ..WasmConfig::default()
    });
    assert!(matches!(
        broken.availability(),
        toolexec::Availability::Unavailable { .. }
    ));
    let unit = Unit::Wasm(WasmUnit {
        code: WasmCode::Wat("(module)".into()),
        entry: None,
        input: None,
        args: vec![],
    });
    let outcome = support::run_on(&broken, unit, limits(), CancellationToken::new()).await;
    let RunStatus::Error { error } = &outcome.status else {
        panic!("{outcome:?}")
    };
    assert_eq!(error.code, ErrorCode::BackendUnavailable);
}

//! Shared helpers: one runtime per test binary, units from WAT, a real
//! built-in catalog behind the tool host.

#![allow(dead_code)]

use std::sync::OnceLock;

use toolexec::{CancellationToken, Exec};
use toolexec_runtime::{
    Profile, RunContext, RunOutcome, RunRequest, Runtime, RuntimeLimits, ToolHost, Unit, WasmCode,
    WasmUnit,
};
use toolexec_wasm::{WasmConfig, WasmRuntime};

/// The runtime shared by the tests of one binary.
pub(crate) fn runtime() -> &'static WasmRuntime {
    static RUNTIME: OnceLock<WasmRuntime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        WasmRuntime::new(WasmConfig {
            pool_instances: 8,
            max_memory_bytes: 64 << 20,
            ..WasmConfig::default()
        })
    })
}

/// The built-in catalog (math, text, json, ...).
pub(crate) fn exec() -> Exec {
    Exec::new(toolexec_testkit::catalog())
}

/// A unit from WAT text.
pub(crate) fn wat(text: &str) -> Unit {
    Unit::Wasm(WasmUnit {
        code: WasmCode::Wat(text.into()),
        entry: None,
        input: None,
        args: Vec::new(),
    })
}

/// A unit from a binary.
pub(crate) fn binary(bytes: Vec<u8>) -> Unit {
    Unit::Wasm(WasmUnit {
        code: WasmCode::Binary(bytes),
        entry: None,
        input: None,
        args: Vec::new(),
    })
}

/// Limits for tests: 10 s wall, 5 s CPU.
pub(crate) fn limits() -> RuntimeLimits {
    RuntimeLimits {
        wall_time: std::time::Duration::from_secs(10),
        cpu_time: Some(std::time::Duration::from_secs(5)),
        ..RuntimeLimits::default()
    }
}

/// Runs `unit` on the shared runtime with tools from the built-in catalog.
pub(crate) async fn run(unit: Unit, limits: RuntimeLimits) -> RunOutcome {
    run_on(runtime(), unit, limits, CancellationToken::new()).await
}

/// Runs `unit` on `runtime`, cancelled by `cancel`.
pub(crate) async fn run_on(
    runtime: &WasmRuntime,
    unit: Unit,
    limits: RuntimeLimits,
    cancel: CancellationToken,
) -> RunOutcome {
    let host = ToolHost::new(exec(), &limits, cancel.clone());
    let request = RunRequest::new(unit, Profile::Hardened).with_limits(limits);
    runtime
        .run(
            request,
            RunContext {
                host,
                cancel,
                output: None,
            },
        )
        .await
}

/// WAT for the `toolexec` imports, a memory and `$out_i32`, which sets the
/// unit's output to an i32 (as JSON). Paste inside `(module ...)`.
pub(crate) const PRELUDE: &str = r#"
  (import "toolexec" "input_len" (func $input_len (result i32)))
  (import "toolexec" "input_read" (func $input_read (param i32 i32) (result i32)))
  (import "toolexec" "call" (func $call (param i32 i32 i32 i32) (result i32)))
  (import "toolexec" "result_read" (func $result_read (param i32 i32) (result i32)))
  (import "toolexec" "output" (func $output (param i32 i32)))
  (import "toolexec" "log" (func $log (param i32 i32)))
  (memory (export "memory") 1)
  (func $out_i32 (param $v i32)
    (local $p i32) (local $neg i32) (local $u i32)
    (local.set $p (i32.const 4200))
    (local.set $neg (i32.lt_s (local.get $v) (i32.const 0)))
    (local.set $u (if (result i32) (local.get $neg)
      (then (i32.sub (i32.const 0) (local.get $v))) (else (local.get $v))))
    (loop $d
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $u) (i32.const 10))))
      (local.set $u (i32.div_u (local.get $u) (i32.const 10)))
      (br_if $d (local.get $u)))
    (if (local.get $neg) (then
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.const 45))))
    (call $output (local.get $p) (i32.sub (i32.const 4200) (local.get $p))))
"#;

/// A module: the prelude plus `body`.
pub(crate) fn module(body: &str) -> String {
    format!("(module {PRELUDE} {body})")
}

/// A module: extra `imports`, the prelude, then `body`.
pub(crate) fn module_with(imports: &str, body: &str) -> String {
    format!("(module {imports} {PRELUDE} {body})")
}

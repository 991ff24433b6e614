//! Running an instance and turning how it ended into a [`RunStatus`].

use toolexec_runtime::{LimitKind, RunStatus, RuntimeLimits};
use wasmtime::{InstancePre, Store, Trap, Val, ValType};
use wasmtime_wasi::{I32Exit, WasiCtxBuilder};

use crate::output::{Output, OutputOverflow, Stream};
use crate::runtime::{CoreData, invalid, one_line};
use crate::state::Fault;

/// How the entry call ended, before classification.
pub(crate) enum Ended {
    /// The entry returned (with its `i32` result, if it has one).
    Returned(Option<i32>),
    /// The entry is missing or has the wrong type.
    BadEntry(String),
    /// Instantiation or the call failed.
    Error(wasmtime::Error),
}

/// WASI with no preopens, no network, no environment, closed stdin,
/// `argv = ["unit", args...]` and capped stdout/stderr.
pub(crate) fn wasi_builder(stdio: &Output, args: &[String]) -> WasiCtxBuilder {
    let mut b = WasiCtxBuilder::new();
    b.stdout(stdio.pipe(Stream::Stdout))
        .stderr(stdio.pipe(Stream::Stderr))
        .arg("unit")
        .args(args)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false);
    b
}

/// Instantiates a core module and calls its entry: `entry`, else `_start`
/// when exported, else `run`. The entry takes nothing and returns nothing
/// or an `i32` (non-zero: failure).
pub(crate) async fn run_module(
    store: &mut Store<CoreData>,
    pre: &InstancePre<CoreData>,
    entry: Option<&str>,
) -> Ended {
    let instance = match pre.instantiate_async(&mut *store).await {
        Ok(instance) => instance,
        Err(e) => return Ended::Error(e),
    };
    let name = match entry {
        Some(name) => name,
        None if instance.get_func(&mut *store, "_start").is_some() => "_start",
        None => "run",
    };
    let Some(func) = instance.get_func(&mut *store, name) else {
        return Ended::BadEntry(format!("the module exports no function {name:?}"));
    };
    let ty = func.ty(&*store);
    let results: Vec<ValType> = ty.results().collect();
    let returns_i32 = match results.as_slice() {
        [] => false,
        [ValType::I32] => true,
        _ => return Ended::BadEntry(format!("{name:?} must return nothing or an i32")),
    };
    if ty.params().len() != 0 {
        return Ended::BadEntry(format!("{name:?} must take no parameters"));
    }
    let mut out = if returns_i32 {
        vec![Val::I32(0)]
    } else {
        Vec::new()
    };
    match func.call_async(&mut *store, &[], &mut out).await {
        Ok(()) => Ended::Returned(out.first().and_then(Val::i32)),
        Err(e) => Ended::Error(e),
    }
}

/// The status (and exit code) of a run that ended this way. A fault the
/// host recorded wins over how the trap looks.
pub(crate) fn status(
    ended: Ended,
    fault: Option<Fault>,
    overflowed: bool,
    limits: &RuntimeLimits,
) -> (RunStatus, Option<i32>) {
    let exceeded = |limit, message: String| RunStatus::LimitExceeded { limit, message };
    let error = match ended {
        Ended::Returned(None) | Ended::Returned(Some(0)) => return (RunStatus::Ok, Some(0)),
        Ended::Returned(Some(code)) => {
            let message = format!("the entry returned {code}");
            return (RunStatus::Failed { message }, Some(code));
        }
        Ended::BadEntry(message) => {
            let error = invalid("unit.entry", &message);
            return (RunStatus::Error { error }, None);
        }
        Ended::Error(e) => e,
    };
    if let Some(fault) = fault {
        let status = match &fault {
            Fault::Memory { .. } | Fault::Table { .. } => {
                exceeded(LimitKind::Memory, fault.to_string())
            }
            Fault::ToolBudget { .. } => exceeded(LimitKind::ToolCalls, fault.to_string()),
            Fault::Deadline { .. } => exceeded(LimitKind::WallTime, fault.to_string()),
            Fault::Cancelled => RunStatus::Cancelled,
            Fault::Abi(message) => RunStatus::Error {
                error: invalid("abi", message),
            },
        };
        return (status, None);
    }
    if overflowed
        || error
            .chain()
            .any(|c| c.downcast_ref::<OutputOverflow>().is_some())
    {
        let message = format!(
            "output limit of {} bytes (stdout plus stderr) exceeded",
            limits.max_output_bytes
        );
        return (exceeded(LimitKind::Output, message), None);
    }
    if let Some(exit) = error.downcast_ref::<I32Exit>() {
        return match exit.0 {
            0 => (RunStatus::Ok, Some(0)),
            code => {
                let message = format!("the unit exited with code {code}");
                (RunStatus::Failed { message }, Some(code))
            }
        };
    }
    if let Some(trap) = error.downcast_ref::<Trap>() {
        let status = match trap {
            Trap::OutOfFuel => exceeded(
                LimitKind::CpuTime,
                format!(
                    "cpu-time limit of {} ms exceeded (wasmtime fuel exhausted)",
                    limits.cpu_time.unwrap_or_default().as_millis()
                ),
            ),
            Trap::Interrupt => exceeded(
                LimitKind::WallTime,
                format!(
                    "wall-time limit of {} ms exceeded",
                    limits.wall_time.as_millis()
                ),
            ),
            other => RunStatus::Failed {
                message: format!("wasm trap: {other}"),
            },
        };
        return (status, None);
    }
    if let Some(e) = error.downcast_ref::<wasmtime::PoolConcurrencyLimitError>() {
        let error =
            toolexec::Error::backend_unavailable("wasm instance pool", e.to_string()).to_body();
        return (RunStatus::Error { error }, None);
    }
    let message = one_line(&error);
    (RunStatus::Failed { message }, None)
}

//! One execution from start to end: a fresh QuickJS runtime on the current
//! (worker) thread, the globals installed, the script compiled and called,
//! and the event loop that drives its promise jobs and tool completions
//! until it settles or a limit stops it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Instant;

use rquickjs::function::Opt;
use rquickjs::promise::PromiseState;
use rquickjs::{Context, Ctx, Exception, Function, Object, Runtime, Value, qjs};
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;

use super::abort::AbortFlag;
use super::compile::compile;
use super::convert::{finish_value, host_failure, thrown};
use super::host::{host_call, host_describe, host_print, host_search, settle};
use super::memory::{LimitedAllocator, MemoryMeter};
use super::state::{JsState, MAX_STACK, Msg, Shared, SharedProgress, ms};
use crate::allow::AllowList;
use crate::{CodeLimit, CodeLimits, CodeOutcome, CodeStatus};
use toolexec::ToolAccess;

/// Source of the prelude that installs `tools` and `console`.
const PRELUDE: &str = include_str!("prelude.js");

/// Everything a worker needs to run one execution. `Send`: built on the
/// caller's task, consumed on the worker thread.
pub(crate) struct JobSpec {
    pub(crate) code: String,
    pub(crate) limits: CodeLimits,
    pub(crate) tools: Arc<dyn ToolAccess>,
    pub(crate) handle: tokio::runtime::Handle,
    pub(crate) started: Instant,
    pub(crate) deadline: Instant,
    pub(crate) abort: Arc<AbortFlag>,
    pub(crate) tx: Sender<Msg>,
    pub(crate) rx: Receiver<Msg>,
    pub(crate) progress: SharedProgress,
}

/// Creates a runtime whose allocations are counted (the limit is armed
/// later, see [`MemoryMeter::new`]).
pub(super) fn new_runtime(
    stack: usize,
    abort: &Arc<AbortFlag>,
    deadline: Instant,
) -> Option<(Runtime, Rc<MemoryMeter>)> {
    let meter = MemoryMeter::new();
    let rt = Runtime::new_with_alloc(LimitedAllocator::new(meter.clone(), abort.clone())).ok()?;
    rt.set_max_stack_size(stack.clamp(64 << 10, MAX_STACK));
    let flag = abort.clone();
    // Called by QuickJS every ~10,000 bytecode operations (and in regexp
    // and other long native loops); `true` raises an uncatchable error
    // that unwinds through `catch` and `finally` alike.
    rt.set_interrupt_handler(Some(Box::new(move || {
        flag.is_raised() || Instant::now() >= deadline
    })));
    Some((rt, meter))
}

fn raw_rt(ctx: &Ctx<'_>) -> *mut qjs::JSRuntime {
    // SAFETY: the context pointer is valid while `ctx` lives.
    unsafe { qjs::JS_GetRuntime(ctx.as_raw().as_ptr()) }
}

/// Runs one execution to its outcome. Never panics on script behaviour.
pub(crate) fn run(spec: JobSpec) -> CodeOutcome {
    let JobSpec {
        code,
        limits,
        tools,
        handle,
        started,
        deadline,
        abort,
        tx,
        rx,
        progress,
    } = spec;
    let shared = Rc::new(Shared {
        tools,
        handle,
        allow: AllowList::new(&limits.allowed_tools),
        limits,
        deadline,
        abort,
        cancel: CancellationToken::new(),
        tx,
        progress,
        in_flight: Cell::new(0),
    });
    // Tool futures are first polled on this thread: enter the caller's
    // runtime for the whole execution.
    let entered = shared.handle.enter();
    let (status, value) = run_in_runtime(&code, &shared, &rx);
    drop(entered);
    // Stop whatever is still running on the Tokio side.
    shared.cancel.cancel();
    let progress = std::mem::take(&mut *shared.progress.lock());
    let (tool_calls, stdout, stderr) = progress.into_parts();
    CodeOutcome {
        status,
        value,
        stdout,
        stderr,
        tool_calls,
        duration_ms: ms(started.elapsed()),
    }
}

fn run_in_runtime(
    code: &str,
    shared: &Rc<Shared>,
    rx: &Receiver<Msg>,
) -> (CodeStatus, Option<Json>) {
    let limits = &shared.limits;
    let internal = |what: &str| CodeStatus::Exception {
        message: format!("internal error: cannot create the JavaScript {what}"),
        stack: None,
    };
    let Some((rt, meter)) = new_runtime(limits.max_stack_bytes, &shared.abort, shared.deadline)
    else {
        return (internal("runtime"), None);
    };
    let Ok(context) = Context::full(&rt) else {
        return (internal("context"), None);
    };
    let result = context.with(|ctx| {
        // SAFETY: the runtime is alive and locked by `with`. `Atomics.wait`
        // must never block a worker (QuickJS's default, made explicit), and
        // the stack limit is measured from here.
        unsafe {
            qjs::JS_SetCanBlock(raw_rt(&ctx), false);
            qjs::JS_UpdateStackTop(raw_rt(&ctx));
        }
        let js = Rc::new(RefCell::new(JsState::default()));
        let r = execute(&ctx, code, shared, &js, rx, &meter);
        // The script is over: from here on the engine only frees, and must
        // not see a refused allocation (see `MemoryMeter::new`).
        meter.disarm();
        // Drop every JS value the host holds before the context goes away.
        let mut state = std::mem::take(&mut *js.borrow_mut());
        state.pending.clear();
        state.errors.clear();
        r
    });
    // Context first, then the runtime (rquickjs releases the objects it
    // keeps per runtime, then QuickJS frees everything, pending jobs too).
    drop(context);
    drop(rt);
    if meter.used() != 0 {
        tracing::warn!(
            bytes = meter.used(),
            "code-mode runtime did not return all its memory"
        );
    }
    let (status, value) = result;
    // A limit that tripped while the outcome was being built still wins.
    match (shared.stop_status(), status) {
        (_, s @ CodeStatus::LimitExceeded { .. }) => (s, None),
        (Some(stop), _) => (stop, None),
        (None, status) => (status, value),
    }
}

/// Installs the globals, compiles and runs the script, drives it to the end.
fn execute<'js>(
    ctx: &Ctx<'js>,
    code: &str,
    shared: &Rc<Shared>,
    js: &Rc<RefCell<JsState<'js>>>,
    rx: &Receiver<Msg>,
    meter: &MemoryMeter,
) -> (CodeStatus, Option<Json>) {
    if let Err(e) = install(ctx, shared, js) {
        return (host_failure(ctx, shared, "installing globals", e), None);
    }
    let limit = shared.limits.memory_bytes;
    if meter.used() >= limit {
        return (
            CodeStatus::LimitExceeded {
                limit: CodeLimit::Memory,
                message: format!(
                    "a memory limit of {limit} bytes is below what the JavaScript engine needs \
                     to start ({} bytes)",
                    meter.used()
                ),
            },
            None,
        );
    }
    meter.arm(limit);
    let compiled = match compile(ctx, code) {
        Ok(v) => v,
        Err(status) => return (shared.stop_status().unwrap_or(status), None),
    };
    // Evaluating the compiled script yields the async function; calling it
    // runs the body up to its first `await`.
    // SAFETY: valid context; `JS_EvalFunction` consumes the duplicated
    // reference, and its result is owned by the returned `Value`.
    let main = unsafe {
        let f = qjs::JS_DupValue(ctx.as_raw().as_ptr(), compiled.as_raw());
        let v = qjs::JS_EvalFunction(ctx.as_raw().as_ptr(), f);
        if qjs::JS_IsException(v) {
            Err(rquickjs::Error::Exception)
        } else {
            Ok(Value::from_raw(ctx.clone(), v))
        }
    };
    drop(compiled);
    let promise = match main.and_then(|m| match m.into_function() {
        Some(f) => f.call::<_, Value>(()),
        None => Err(Exception::throw_type(
            ctx,
            "the script closed its wrapper function; send the body of a function",
        )),
    }) {
        Ok(v) => v,
        Err(e) => return (thrown(ctx, shared, js, e), None),
    };
    let Some(promise) = promise.into_promise() else {
        return (
            CodeStatus::Exception {
                message: "internal error: the script's function did not return a promise".into(),
                stack: None,
            },
            None,
        );
    };
    let mut jobs: u32 = 0;
    loop {
        // Run every queued job (promise reactions, async continuations).
        // The abort flag is raised at the deadline by the caller's timer;
        // the clock is read here only every 64 jobs, as a backstop.
        loop {
            jobs = jobs.wrapping_add(1);
            if (shared.abort.is_raised() || jobs.is_multiple_of(64))
                && let Some(stop) = shared.stop_status()
            {
                return (stop, None);
            }
            if !ctx.execute_pending_job() {
                break;
            }
            // Once the script's promise settles, background work it left
            // behind (an endless microtask loop, say) does not hold it up.
            if promise.state() != PromiseState::Pending {
                break;
            }
        }
        if let Some(stop) = shared.stop_status() {
            return (stop, None);
        }
        match promise.state() {
            PromiseState::Resolved => {
                let v: rquickjs::Result<Value> = promise.result().expect("settled");
                return match v {
                    Ok(v) => finish_value(ctx, shared, v),
                    Err(e) => (thrown(ctx, shared, js, e), None),
                };
            }
            PromiseState::Rejected => {
                let e = promise.result::<Value>().expect("settled").unwrap_err();
                return (thrown(ctx, shared, js, e), None);
            }
            PromiseState::Pending => {}
        }
        if shared.in_flight.get() == 0 {
            // Nothing can settle the script's promise any more, unless a
            // collection queues FinalizationRegistry callbacks.
            ctx.run_gc();
            // SAFETY: the runtime is locked by `with`.
            if unsafe { qjs::JS_IsJobPending(raw_rt(ctx)) } {
                continue;
            }
            return (
                CodeStatus::LimitExceeded {
                    limit: CodeLimit::Timeout,
                    message: "the script awaits a promise that can never settle \
                              (no tool calls are in flight and no jobs are queued)"
                        .to_owned(),
                },
                None,
            );
        }
        let wait = shared.deadline.saturating_duration_since(Instant::now());
        let mut msg = match rx.recv_timeout(wait) {
            Ok(m) => Some(m),
            Err(RecvTimeoutError::Timeout) => continue, // the loop reports it
            Err(RecvTimeoutError::Disconnected) => None,
        };
        while let Some(m) = msg {
            if let Msg::Done {
                index,
                result,
                finished,
            } = m
            {
                shared.in_flight.set(shared.in_flight.get() - 1);
                let fns = js.borrow_mut().pending.remove(&index);
                if let Some((resolve, reject)) = fns
                    && let Err(e) =
                        settle(ctx, shared, js, index, result, finished, &resolve, &reject)
                {
                    if shared.should_stop() {
                        break;
                    }
                    return (host_failure(ctx, shared, "settling a tool call", e), None);
                }
            }
            msg = rx.try_recv().ok();
        }
    }
}

/// Defines the host functions and runs the prelude.
pub(super) fn install<'js>(
    ctx: &Ctx<'js>,
    shared: &Rc<Shared>,
    js: &Rc<RefCell<JsState<'js>>>,
) -> rquickjs::Result<()> {
    let prelude: Function = ctx.eval(PRELUDE)?;
    let call = {
        let shared = shared.clone();
        let js = js.clone();
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, id: Opt<Value<'js>>, args: Opt<Value<'js>>| {
                let id = id.0.unwrap_or_else(|| Value::new_undefined(ctx.clone()));
                host_call(&ctx, &shared, &js, id, args.0)
            },
        )?
    };
    let search = {
        let shared = shared.clone();
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, query: Opt<Value<'js>>, limit: Opt<Value<'js>>| {
                host_search(&ctx, &shared, query.0, limit.0)
            },
        )?
    };
    let describe = {
        let shared = shared.clone();
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, id: Opt<Value<'js>>, detail: Opt<Value<'js>>| {
                host_describe(&ctx, &shared, id.0, detail.0)
            },
        )?
    };
    let print = {
        let shared = shared.clone();
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, stream: i32, args: Object<'js>| {
                host_print(&ctx, &shared, stream != 0, &args)
            },
        )?
    };
    prelude.call::<_, ()>((call, search, describe, print))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quickjs::abort::Abort;

    /// The caller's timer may raise the abort flag before the worker has
    /// built its engine (a short timeout on a loaded machine). Building and
    /// tearing down must still succeed: QuickJS does not survive every
    /// refused allocation while it creates a runtime or a context. The flag
    /// starves the script only once the meter is armed.
    #[test]
    fn an_engine_is_built_and_torn_down_whole_when_already_stopping() {
        for reason in [Abort::Timeout, Abort::Cancelled, Abort::Memory] {
            let abort = Arc::new(AbortFlag::default());
            abort.raise(reason);
            let (rt, meter) = new_runtime(1 << 20, &abort, Instant::now())
                .expect("a runtime, although the execution is stopping");
            let context = Context::full(&rt).expect("a full context");
            context.with(|ctx| {
                let globals = ctx.globals();
                for name in ["Object", "Promise", "JSON", "Map", "WeakRef", "Uint8Array"] {
                    assert!(globals.contains_key(name).unwrap(), "{name} is missing");
                }
                meter.arm(64 << 20);
                // Large enough to bypass QuickJS's small-block arenas.
                // SAFETY: valid context; a failed allocation returns null.
                let p = unsafe { qjs::js_malloc(ctx.as_raw().as_ptr(), 1 << 20) };
                assert!(p.is_null(), "an armed meter starves a stopping execution");
                let _ = ctx.catch();
                meter.disarm();
            });
            drop(context);
            drop(rt);
            assert_eq!(meter.used(), 0);
        }
    }
}

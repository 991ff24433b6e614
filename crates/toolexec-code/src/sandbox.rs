//! One execution: a fresh QuickJS runtime on the current (worker) thread,
//! the host functions behind `tools` and `console`, and the event loop that
//! drives the script's promise jobs and tool completions until the script
//! settles or a limit stops it.
//!
//! Tool calls run through `Exec::run_tool_with`. Each call's future is polled
//! once inline (inside the caller's Tokio runtime context): a tool that
//! completes synchronously, as most local tools do, settles its promise
//! without any thread hop. A tool that is still pending is spawned onto the
//! Tokio runtime and reports back over a channel this thread waits on.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::CString;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::{Duration, Instant};

use rquickjs::function::Opt;
use rquickjs::object::Property;
use rquickjs::promise::PromiseState;
use rquickjs::{
    Coerced, Context, Ctx, Exception, FromJs as _, Function, IntoJs as _, Object, Runtime, Value,
    qjs,
};
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;
use toolexec::{DetailLevel, Error, ErrorBody, ErrorCode, Exec};

use crate::access::{BoxFuture, ToolAccess};

use crate::allow::AllowList;
use crate::memory::{LimitedAllocator, MemoryMeter};
use crate::{CodeLimit, CodeLimits, CodeOutcome, CodeStatus, ToolCallRecord};
use toolexec_runtime::ToolCallLog;

/// Source of the prelude that installs `tools` and `console`.
const PRELUDE: &str = include_str!("prelude.js");
/// The user's code becomes the body of this function. No newline, so line
/// numbers are the user's; columns on line 1 shift by its length.
const PREFIX: &str = "(async function () {";
const SUFFIX: &str = "\n})";
const FILENAME: &str = "script.js";
/// Largest interpreter stack a request may ask for; worker threads have
/// [`crate::engine::WORKER_STACK`] bytes, leaving room for host frames.
pub(crate) const MAX_STACK: usize = 8 << 20;
const STACK_OVERFLOW: &str = "Maximum call stack size exceeded";

/// Why an execution is being stopped, set once (first reason wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Abort {
    None = 0,
    /// The caller dropped the execution future.
    Cancelled = 1,
    Memory = 2,
    ToolCalls = 3,
    Output = 4,
    /// The deadline passed (raised by the caller's timer or the worker).
    Timeout = 5,
}

/// Shared between the worker, the allocator, the interrupt handler and the
/// caller's drop guard.
#[derive(Debug, Default)]
pub(crate) struct AbortFlag(AtomicU8);

impl AbortFlag {
    pub(crate) fn raise(&self, reason: Abort) {
        let _ = self
            .0
            .compare_exchange(0, reason as u8, Ordering::AcqRel, Ordering::Acquire);
    }

    pub(crate) fn get(&self) -> Abort {
        match self.0.load(Ordering::Acquire) {
            1 => Abort::Cancelled,
            2 => Abort::Memory,
            3 => Abort::ToolCalls,
            4 => Abort::Output,
            5 => Abort::Timeout,
            _ => Abort::None,
        }
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed) != 0
    }
}

/// Messages to the worker while it waits.
pub(crate) enum Msg {
    /// A spawned tool call finished.
    Done {
        index: usize,
        result: Result<Json, ErrorBody>,
        finished: Instant,
    },
    /// Something changed (the abort flag); re-check.
    Wake,
}

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

/// When a logged call started, and whether it has finished.
#[derive(Clone, Copy)]
struct Slot {
    started: Instant,
    done: bool,
}

/// What an execution has produced so far: the tool-call log and captured
/// output. Shared with the caller, which reports it if it has to abandon a
/// worker stuck past its deadline.
#[derive(Default)]
pub(crate) struct Progress {
    /// Bounded records (no arguments or results), within the log's budget.
    log: ToolCallLog,
    /// One per record of `log`.
    slots: Vec<Slot>,
    stdout: String,
    stderr: String,
    bytes: usize,
    full: bool,
}

impl Progress {
    /// The tool-call log (calls still running recorded as cancelled) and
    /// the output, leaving `self` as it is.
    pub(crate) fn snapshot(&self) -> (Vec<ToolCallRecord>, String, String) {
        let copy = Progress {
            log: self.log.clone(),
            slots: self.slots.clone(),
            stdout: self.stdout.clone(),
            stderr: self.stderr.clone(),
            bytes: self.bytes,
            full: self.full,
        };
        copy.into_parts()
    }

    /// Like [`Self::snapshot`], consuming.
    pub(crate) fn into_parts(mut self) -> (Vec<ToolCallRecord>, String, String) {
        let now = Instant::now();
        for (index, slot) in self.slots.iter().enumerate() {
            if !slot.done {
                self.log.update(index, |r| {
                    let error = Error::Cancelled {
                        tool: r.tool_id.clone(),
                    }
                    .to_body();
                    r.finish(&Err(error), now.saturating_duration_since(slot.started));
                });
            }
        }
        (self.log.into_records(), self.stdout, self.stderr)
    }
}

pub(crate) type SharedProgress = Arc<parking_lot::Mutex<Progress>>;

/// Host-side state of one execution that holds no JavaScript values.
struct Shared {
    tools: Arc<dyn ToolAccess>,
    handle: tokio::runtime::Handle,
    limits: CodeLimits,
    allow: AllowList,
    deadline: Instant,
    abort: Arc<AbortFlag>,
    cancel: CancellationToken,
    tx: Sender<Msg>,
    progress: SharedProgress,
    in_flight: Cell<usize>,
}

impl Shared {
    /// The status to stop with, if the execution must stop now.
    fn stop_status(&self) -> Option<CodeStatus> {
        let l = &self.limits;
        let (limit, message) = match self.abort.get() {
            Abort::Memory => (
                CodeLimit::Memory,
                format!(
                    "the script exceeded its memory limit of {} bytes",
                    l.memory_bytes
                ),
            ),
            Abort::ToolCalls => (
                CodeLimit::ToolCalls,
                format!(
                    "the script tried to make more than {} tool calls",
                    l.max_tool_calls
                ),
            ),
            Abort::Output => (
                CodeLimit::Output,
                format!(
                    "console output and result exceeded {} bytes",
                    l.max_output_bytes
                ),
            ),
            Abort::Cancelled => (
                CodeLimit::Timeout,
                "the execution was cancelled by its caller".to_owned(),
            ),
            Abort::Timeout => (CodeLimit::Timeout, timeout_message(l)),
            Abort::None if Instant::now() >= self.deadline => {
                self.abort.raise(Abort::Timeout);
                (CodeLimit::Timeout, timeout_message(l))
            }
            Abort::None => return None,
        };
        Some(CodeStatus::LimitExceeded { limit, message })
    }

    fn should_stop(&self) -> bool {
        self.abort.is_raised() || Instant::now() >= self.deadline
    }

    /// Appends one console line, enforcing the output limit. Returns false
    /// when the limit was hit (the line is cut, capture stops).
    fn print(&self, stderr: bool, line: &str) -> bool {
        let mut out = self.progress.lock();
        if out.full {
            return false;
        }
        let room = self.limits.max_output_bytes.saturating_sub(out.bytes);
        let fits = line.len() < room; // the line plus its newline
        let take = if fits {
            line.len()
        } else {
            floor_char_boundary(line, room)
        };
        let buf = if stderr {
            &mut out.stderr
        } else {
            &mut out.stdout
        };
        buf.push_str(&line[..take]);
        if fits {
            buf.push('\n');
        }
        out.bytes += take + usize::from(fits);
        if !fits {
            out.full = true;
            self.abort.raise(Abort::Output);
        }
        fits
    }

    fn record_done(&self, index: usize, result: &Result<Json, ErrorBody>, finished: Instant) {
        let mut progress = self.progress.lock();
        let slot = &mut progress.slots[index];
        slot.done = true;
        let elapsed = finished.saturating_duration_since(slot.started);
        progress.log.update(index, |r| r.finish(result, elapsed));
    }
}

/// JavaScript values the host holds during an execution. Cleared before the
/// context is dropped so no reference outlives it.
#[derive(Default)]
struct JsState<'js> {
    /// Resolve and reject functions of tool calls in flight, by call index.
    pending: HashMap<usize, (Function<'js>, Function<'js>)>,
    /// The error object each failed call rejected with, to recognise an
    /// uncaught tool error by identity.
    errors: Vec<(usize, Value<'js>)>,
}

pub(crate) fn timeout_message(l: &CodeLimits) -> String {
    format!(
        "the script did not finish within {} ms",
        l.timeout.as_millis()
    )
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// Creates a runtime whose allocations are counted (the limit is armed
/// later, see [`MemoryMeter::new`]).
fn new_runtime(
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
fn install<'js>(
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

/// Compiles without running: a syntax error means nothing started.
fn compile<'js>(ctx: &Ctx<'js>, code: &str) -> Result<Value<'js>, CodeStatus> {
    if let Some(pos) = code.find('\0') {
        let (line, column) = line_col(code, pos);
        return Err(CodeStatus::SyntaxError {
            message: "the script contains a NUL character".to_owned(),
            line,
            column,
        });
    }
    let mut src = String::with_capacity(PREFIX.len() + code.len() + SUFFIX.len());
    src.push_str(PREFIX);
    src.push_str(code);
    src.push_str(SUFFIX);
    let len = src.len();
    let src = CString::new(src).expect("NUL checked above");
    let file = CString::new(FILENAME).expect("no NUL");
    // SAFETY: valid context, NUL-terminated source of `len` bytes.
    let v = unsafe {
        qjs::JS_Eval(
            ctx.as_raw().as_ptr(),
            src.as_ptr(),
            len as _,
            file.as_ptr(),
            (qjs::JS_EVAL_TYPE_GLOBAL | qjs::JS_EVAL_FLAG_COMPILE_ONLY) as i32,
        )
    };
    // SAFETY: `v` is owned by us either way.
    if unsafe { !qjs::JS_IsException(v) } {
        return Ok(unsafe { Value::from_raw(ctx.clone(), v) });
    }
    let exc = ctx.catch();
    let obj = exc.as_object();
    let message = obj
        .and_then(|o| get_string(o, "message"))
        .unwrap_or_else(|| "syntax error".to_owned());
    let stack = obj.and_then(|o| get_string(o, "stack")).unwrap_or_default();
    let (mut line, mut column) = parse_location(&stack).unwrap_or((1, 1));
    if line == 1 {
        column = column.saturating_sub(PREFIX.len() as u32).max(1);
    }
    // An error reported in the closing wrapper (an unclosed block or string)
    // belongs at the end of the user's code.
    let user_lines = code.split('\n').count() as u32;
    if line > user_lines {
        line = user_lines;
        column = code.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
    }
    Err(CodeStatus::SyntaxError {
        message,
        line,
        column,
    })
}

/// `"    at script.js:3:7\n"` → `(3, 7)`.
fn parse_location(stack: &str) -> Option<(u32, u32)> {
    let needle = format!("{FILENAME}:");
    let start = stack.find(&needle)? + needle.len();
    let rest = &stack[start..];
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    let line = parts.next()?.parse().ok()?;
    let column = parts.next()?.parse().ok()?;
    Some((line, column))
}

fn line_col(code: &str, byte: usize) -> (u32, u32) {
    let before = &code[..byte];
    let line = before.matches('\n').count() as u32 + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) as u32 + 1;
    (line, col)
}

fn get_string(obj: &Object<'_>, key: &str) -> Option<String> {
    obj.get::<_, Option<Coerced<String>>>(key)
        .ok()
        .flatten()
        .map(|c| c.0)
}

/// An unexpected failure of the host side (not the script's fault), unless
/// a limit explains it.
fn host_failure(ctx: &Ctx<'_>, shared: &Shared, what: &str, e: rquickjs::Error) -> CodeStatus {
    if let Some(stop) = shared.stop_status() {
        return stop;
    }
    let detail = if matches!(e, rquickjs::Error::Exception) {
        render_thrown(ctx, &ctx.catch()).0
    } else {
        e.to_string()
    };
    CodeStatus::Exception {
        message: format!("internal error while {what}: {detail}"),
        stack: None,
    }
}

/// Classifies what the script threw (or rejected with).
fn thrown<'js>(
    ctx: &Ctx<'js>,
    shared: &Shared,
    js: &Rc<RefCell<JsState<'js>>>,
    e: rquickjs::Error,
) -> CodeStatus {
    if let Some(stop) = shared.stop_status() {
        return stop;
    }
    if !matches!(e, rquickjs::Error::Exception) {
        return CodeStatus::Exception {
            message: e.to_string(),
            stack: None,
        };
    }
    let value = ctx.catch();
    let hit = js
        .borrow()
        .errors
        .iter()
        .find(|(_, err)| *err == value)
        .map(|(i, _)| *i);
    if let Some(index) = hit {
        let progress = shared.progress.lock();
        let rec = &progress.log.records()[index];
        if let Some(error) = &rec.error {
            return CodeStatus::ToolError {
                call_index: index,
                tool_id: rec.tool_id.clone(),
                error: error.clone(),
            };
        }
    }
    if let Some(obj) = value.as_object()
        && value.is_error()
        && get_string(obj, "name").as_deref() == Some("RangeError")
        && get_string(obj, "message").as_deref() == Some(STACK_OVERFLOW)
    {
        return CodeStatus::LimitExceeded {
            limit: CodeLimit::Stack,
            message: format!(
                "the script overflowed its stack of {} bytes (deep recursion?)",
                shared.limits.max_stack_bytes.clamp(64 << 10, MAX_STACK)
            ),
        };
    }
    let (message, stack) = render_thrown(ctx, &value);
    CodeStatus::Exception { message, stack }
}

/// `Error`s render as `"Name: message"` plus their stack; anything else as
/// `"Uncaught <value>"`.
fn render_thrown<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> (String, Option<String>) {
    if value.is_error()
        && let Some(obj) = value.as_object()
    {
        let name = get_string(obj, "name").unwrap_or_else(|| "Error".to_owned());
        let message = get_string(obj, "message").unwrap_or_default();
        let stack = get_string(obj, "stack").filter(|s| !s.trim().is_empty());
        let text = if message.is_empty() {
            name
        } else {
            format!("{name}: {message}")
        };
        return (text, stack);
    }
    (format!("Uncaught {}", render_value(ctx, value)), None)
}

/// Formats a value for console output and error messages: strings as they
/// are, other primitives as JavaScript prints them, objects as JSON.
fn render_value<'js>(ctx: &Ctx<'js>, v: &Value<'js>) -> String {
    if let Some(s) = v.as_string() {
        return s.to_string().unwrap_or_default();
    }
    if v.is_undefined() {
        return "undefined".to_owned();
    }
    if v.is_symbol() {
        let desc = v
            .as_symbol()
            .and_then(|s| s.description().ok())
            .and_then(|d| d.as_string().and_then(|s| s.to_string().ok()))
            .unwrap_or_default();
        return format!("Symbol({desc})");
    }
    if v.is_function() {
        let name = v
            .as_object()
            .and_then(|o| get_string(o, "name"))
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "anonymous".to_owned());
        return format!("[Function: {name}]");
    }
    if v.is_error() {
        return render_thrown(ctx, v).0;
    }
    if v.as_object().is_none() {
        // null, booleans, numbers, BigInts: ToString has no side effects.
        return Coerced::<String>::from_js(ctx, v.clone())
            .map(|c| c.0)
            .unwrap_or_default();
    }
    match ctx.json_stringify(v.clone()) {
        Ok(Some(s)) => s.to_string().unwrap_or_default(),
        Ok(None) => "undefined".to_owned(),
        Err(_) => {
            let why = ctx.catch();
            let why = why
                .as_object()
                .and_then(|o| get_string(o, "message"))
                .unwrap_or_default();
            format!("[object: not JSON-serializable: {why}]")
        }
    }
}

/// Converts the script's return value to JSON within the output limit.
fn finish_value<'js>(ctx: &Ctx<'js>, shared: &Shared, v: Value<'js>) -> (CodeStatus, Option<Json>) {
    if v.is_undefined() {
        return (CodeStatus::Ok, Some(Json::Null));
    }
    let not_json = |what: &str| CodeStatus::Exception {
        message: format!(
            "TypeError: the script returned {what}, which is not JSON-serializable; return plain data"
        ),
        stack: None,
    };
    if v.is_function() {
        return (not_json("a function"), None);
    }
    if v.is_symbol() {
        return (not_json("a symbol"), None);
    }
    let text = match ctx.json_stringify(v) {
        Ok(Some(s)) => match s.to_string() {
            Ok(s) => s,
            Err(e) => return (host_failure(ctx, shared, "reading the result", e), None),
        },
        Ok(None) => return (CodeStatus::Ok, Some(Json::Null)),
        Err(e) => {
            if let Some(stop) = shared.stop_status() {
                return (stop, None);
            }
            let (message, stack) = match e {
                rquickjs::Error::Exception => render_thrown(ctx, &ctx.catch()),
                other => (other.to_string(), None),
            };
            return (
                CodeStatus::Exception {
                    message: format!("the result is not JSON-serializable: {message}"),
                    stack,
                },
                None,
            );
        }
    };
    let used = shared.progress.lock().bytes;
    if used + text.len() > shared.limits.max_output_bytes {
        shared.abort.raise(Abort::Output);
        return (
            CodeStatus::LimitExceeded {
                limit: CodeLimit::Output,
                message: format!(
                    "the result ({} bytes of JSON) plus {used} bytes of console output exceeds {} bytes",
                    text.len(),
                    shared.limits.max_output_bytes
                ),
            },
            None,
        );
    }
    match serde_json::from_str::<Json>(&text) {
        Ok(j) => (CodeStatus::Ok, Some(j)),
        Err(e) => (
            CodeStatus::Exception {
                message: format!("the result cannot be represented as JSON by the host: {e}"),
                stack: None,
            },
            None,
        ),
    }
}

fn body(code: ErrorCode, message: String, details: Option<Json>) -> ErrorBody {
    ErrorBody {
        code,
        message,
        details,
    }
}

/// The `Error` a failed tool call rejects with.
fn tool_error_object<'js>(
    ctx: &Ctx<'js>,
    error: &ErrorBody,
    tool_id: &str,
    index: Option<usize>,
) -> rquickjs::Result<Value<'js>> {
    let obj = Exception::from_message(ctx.clone(), &error.message)?.into_object();
    let prop = |v: Value<'js>| Property::from(v).writable().configurable().enumerable();
    obj.prop(
        "name",
        Property::from("ToolError").writable().configurable(),
    )?;
    obj.prop("code", prop(error.code.as_str().into_js(ctx)?))?;
    obj.prop("toolId", prop(tool_id.into_js(ctx)?))?;
    if let Some(i) = index {
        obj.prop("callIndex", prop(Value::new_number(ctx.clone(), i as f64)))?;
    }
    let details = match &error.details {
        Some(d) => ctx.json_parse(serde_json::to_string(d).unwrap_or_else(|_| "null".into()))?,
        None => Value::new_null(ctx.clone()),
    };
    obj.prop("details", prop(details))?;
    Ok(obj.into_value())
}

/// `tools.run(id, args)`: validates, records and starts one tool call;
/// returns its promise.
fn host_call<'js>(
    ctx: &Ctx<'js>,
    shared: &Rc<Shared>,
    js: &Rc<RefCell<JsState<'js>>>,
    id: Value<'js>,
    args: Option<Value<'js>>,
) -> rquickjs::Result<Value<'js>> {
    if shared.abort.is_raised() {
        return Err(Exception::throw_internal(ctx, "the execution is stopping"));
    }
    let index = shared.progress.lock().slots.len();
    if index >= shared.limits.max_tool_calls {
        shared.abort.raise(Abort::ToolCalls);
        return Err(Exception::throw_range(
            ctx,
            &format!(
                "limit_exceeded: the tool-call budget of {} calls is spent",
                shared.limits.max_tool_calls
            ),
        ));
    }
    let started = Instant::now();
    let tool_id = match id.as_string() {
        Some(s) => s.to_string()?,
        None => format!("<{}>", js_typeof(&id)),
    };
    // Arguments to JSON, through the engine's own JSON.stringify (not the
    // global, which the script may have replaced).
    let args_json: Result<Json, ErrorBody> = match args {
        None => Ok(Json::Object(Default::default())),
        Some(v) if v.is_undefined() || v.is_null() => Ok(Json::Object(Default::default())),
        Some(v) => match ctx.json_stringify(v) {
            Ok(Some(s)) => serde_json::from_str(&s.to_string()?).map_err(|e| {
                body(
                    ErrorCode::ValidationInput,
                    format!("validation_input: arguments of {tool_id} are not valid JSON: {e}"),
                    None,
                )
            }),
            Ok(None) => Err(body(
                ErrorCode::ValidationInput,
                format!(
                    "validation_input: arguments of {tool_id} must be a JSON object, not a function or symbol"
                ),
                None,
            )),
            Err(e) => {
                if shared.should_stop() {
                    return Err(e); // keep the (uncatchable) interrupt going
                }
                let why = match e {
                    rquickjs::Error::Exception => render_thrown(ctx, &ctx.catch()).0,
                    other => other.to_string(),
                };
                Err(body(
                    ErrorCode::ValidationInput,
                    format!(
                        "validation_input: arguments of {tool_id} cannot be converted to JSON: {why}"
                    ),
                    None,
                ))
            }
        },
    };
    let early_error = match (&args_json, id.is_string()) {
        (_, false) => Some(
            Error::InvalidToolId {
                id: tool_id.clone(),
                reason: "the tool id must be a string like \"namespace:name\"".into(),
            }
            .to_body(),
        ),
        (Err(b), _) => Some(b.clone()),
        (Ok(_), true) if !shared.allow.permits(&tool_id) => Some(not_allowed(&tool_id)),
        _ => None,
    };
    let args = args_json.unwrap_or(Json::Null);
    {
        let record = ToolCallRecord::started(&tool_id, &args);
        let mut progress = shared.progress.lock();
        progress.log.push(record);
        progress.slots.push(Slot {
            started,
            done: false,
        });
    }
    let (promise, resolve, reject) = ctx.promise()?;
    if let Some(error) = early_error {
        settle(
            ctx,
            shared,
            js,
            index,
            Err(error),
            Instant::now(),
            &resolve,
            &reject,
        )?;
        return Ok(promise.into_value());
    }
    let mut fut = shared.tools.call(&tool_id, args, shared.cancel.clone());
    // First poll inline (the worker is inside the caller's runtime context,
    // where the pipeline arms its deadline timer if the tool is asynchronous).
    let first = fut
        .as_mut()
        .poll(&mut TaskContext::from_waker(Waker::noop()));
    match first {
        Poll::Ready(result) => {
            settle(
                ctx,
                shared,
                js,
                index,
                result,
                Instant::now(),
                &resolve,
                &reject,
            )?;
        }
        Poll::Pending => {
            js.borrow_mut().pending.insert(index, (resolve, reject));
            shared.in_flight.set(shared.in_flight.get() + 1);
            let tx = shared.tx.clone();
            shared.handle.spawn(async move {
                let result = fut.await;
                let _ = tx.send(Msg::Done {
                    index,
                    result,
                    finished: Instant::now(),
                });
            });
        }
    }
    Ok(promise.into_value())
}

/// Records a finished call and settles its promise.
#[allow(clippy::too_many_arguments)]
fn settle<'js>(
    ctx: &Ctx<'js>,
    shared: &Shared,
    js: &Rc<RefCell<JsState<'js>>>,
    index: usize,
    outcome: Result<Json, ErrorBody>,
    finished: Instant,
    resolve: &Function<'js>,
    reject: &Function<'js>,
) -> rquickjs::Result<()> {
    match outcome {
        Ok(value) => {
            let text = serde_json::to_string(&value).unwrap_or_else(|_| "null".into());
            shared.record_done(index, &Ok(value), finished);
            let v = ctx.json_parse(text)?;
            resolve.call::<_, ()>((v,))
        }
        Err(error) => {
            let tool_id = shared.progress.lock().log.records()[index].tool_id.clone();
            let obj = tool_error_object(ctx, &error, &tool_id, Some(index))?;
            shared.record_done(index, &Err(error), finished);
            js.borrow_mut().errors.push((index, obj.clone()));
            reject.call::<_, ()>((obj,))
        }
    }
}

/// JavaScript's `typeof` of a value.
fn js_typeof(v: &Value<'_>) -> &'static str {
    use rquickjs::Type;
    match v.type_of() {
        Type::Uninitialized | Type::Undefined => "undefined",
        Type::Bool => "boolean",
        Type::Int | Type::Float => "number",
        Type::String => "string",
        Type::Symbol => "symbol",
        Type::BigInt => "bigint",
        Type::Function | Type::Constructor => "function",
        _ => "object",
    }
}

/// The value of a search or describe future: at once when it is ready (the
/// in-process case), else by waiting on this worker thread until the
/// deadline (the gateway case; the host answers or the run ends).
fn resolve<T>(shared: &Shared, mut fut: BoxFuture<T>) -> Option<T> {
    if let Poll::Ready(v) = fut
        .as_mut()
        .poll(&mut TaskContext::from_waker(Waker::noop()))
    {
        return Some(v);
    }
    // The worker thread has entered the runtime's handle but is not one of
    // its threads, so it may block on it.
    let deadline = tokio::time::Instant::from_std(shared.deadline);
    shared
        .handle
        .block_on(async { tokio::time::timeout_at(deadline, fut).await.ok() })
}

fn json_value<'js>(ctx: &Ctx<'js>, v: &impl serde::Serialize) -> rquickjs::Result<Value<'js>> {
    ctx.json_parse(serde_json::to_string(v).unwrap_or_else(|_| "null".into()))
}

/// `tools.search(query, limit = 10)`: allowed tools only.
fn host_search<'js>(
    ctx: &Ctx<'js>,
    shared: &Shared,
    query: Option<Value<'js>>,
    limit: Option<Value<'js>>,
) -> rquickjs::Result<Value<'js>> {
    let query = match query {
        Some(q) if q.is_string() => q.as_string().expect("string").to_string()?,
        _ => {
            return Err(Exception::throw_type(
                ctx,
                "tools.search(query, limit): query must be a string",
            ));
        }
    };
    let limit = limit
        .and_then(|l| l.as_number())
        .filter(|n| n.is_finite())
        .map_or(10, |n| n.clamp(1.0, 100.0) as usize);
    let wanted = if shared.allow.is_open() {
        limit
    } else {
        limit * 4
    };
    let hits = match resolve(shared, shared.tools.search(&query, wanted)) {
        Some(Json::Array(hits)) => hits,
        Some(_) => Vec::new(),
        None => return Err(Exception::throw_internal(ctx, "the execution is stopping")),
    };
    let matches: Vec<Json> = hits
        .into_iter()
        .filter(|m| m["id"].as_str().is_some_and(|id| shared.allow.permits(id)))
        .take(limit)
        .collect();
    json_value(ctx, &matches)
}

/// `tools.describe(id, detail = "schema")`.
fn host_describe<'js>(
    ctx: &Ctx<'js>,
    shared: &Shared,
    id: Option<Value<'js>>,
    detail: Option<Value<'js>>,
) -> rquickjs::Result<Value<'js>> {
    let id = match id {
        Some(v) if v.is_string() => v.as_string().expect("string").to_string()?,
        _ => {
            return Err(Exception::throw_type(
                ctx,
                "tools.describe(id, detail): id must be a string",
            ));
        }
    };
    let level = match detail {
        Some(d) if d.is_string() => {
            let s = d.as_string().expect("string").to_string()?;
            match s.parse::<DetailLevel>() {
                Ok(l) => l,
                Err(e) => {
                    let err = tool_error_object(ctx, &e.to_body(), &id, None)?;
                    return Err(ctx.throw(err));
                }
            }
        }
        _ => DetailLevel::Schema,
    };
    let result = if shared.allow.permits(&id) {
        match resolve(shared, shared.tools.describe(&id, level)) {
            Some(r) => r,
            None => return Err(Exception::throw_internal(ctx, "the execution is stopping")),
        }
    } else {
        Err(not_allowed(&id))
    };
    match result {
        Ok(d) => json_value(ctx, &d),
        Err(b) => {
            let err = tool_error_object(ctx, &b, &id, None)?;
            Err(ctx.throw(err))
        }
    }
}

/// `console.*`: formats the arguments into one line.
fn host_print<'js>(
    ctx: &Ctx<'js>,
    shared: &Shared,
    stderr: bool,
    args: &Object<'js>,
) -> rquickjs::Result<()> {
    if shared.progress.lock().full {
        return Err(Exception::throw_range(
            ctx,
            "limit_exceeded: the output limit was reached",
        ));
    }
    let n = args
        .get::<_, Option<f64>>("length")?
        .unwrap_or(0.0)
        .max(0.0) as usize;
    let max = shared.limits.max_output_bytes;
    let mut line = String::new();
    for i in 0..n {
        let v: Value = args.get(i as u32)?;
        if i > 0 {
            line.push(' ');
        }
        let part = render_value(ctx, &v);
        if shared.should_stop() {
            return Err(Exception::throw_internal(ctx, "the execution is stopping"));
        }
        line.push_str(&part);
        if line.len() > max {
            break; // will not fit anyway
        }
    }
    if shared.print(stderr, &line) {
        Ok(())
    } else {
        Err(Exception::throw_range(
            ctx,
            &format!("limit_exceeded: console output exceeded {max} bytes"),
        ))
    }
}

/// Memory one idle execution context holds: a runtime, a full context and
/// the installed `tools`/`console` globals, before any script runs. Builds
/// `n` of them at once and returns the average per context of (bytes the
/// QuickJS allocator holds, growth of the process's resident set), so shared
/// one-off costs do not count. For the benchmarks.
pub fn idle_context_bytes(exec: &Exec, n: usize) -> (usize, usize) {
    fn rss() -> usize {
        // Linux: resident pages are the second field of /proc/self/statm.
        std::fs::read_to_string("/proc/self/statm")
            .ok()
            .and_then(|s| {
                s.split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<usize>().ok())
            })
            .map_or(0, |pages| pages * 4096)
    }
    let n = n.max(1);
    let handle = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let mut keep = Vec::with_capacity(n);
    let mut total = 0;
    let rss_before = rss();
    for _ in 0..n {
        let abort = Arc::new(AbortFlag::default());
        let deadline = Instant::now() + Duration::from_secs(3600);
        let (rt, meter) = new_runtime(1 << 20, &abort, deadline).expect("runtime");
        let context = Context::full(&rt).expect("context");
        let (tx, _rx) = std::sync::mpsc::channel();
        let limits = CodeLimits::default();
        let shared = Rc::new(Shared {
            tools: Arc::new(exec.clone()),
            handle: handle.handle().clone(),
            allow: AllowList::new(&limits.allowed_tools),
            limits,
            deadline,
            abort,
            cancel: CancellationToken::new(),
            tx,
            progress: SharedProgress::default(),
            in_flight: Cell::new(0),
        });
        context.with(|ctx| {
            let js = Rc::new(RefCell::new(JsState::default()));
            install(&ctx, &shared, &js).expect("install");
        });
        total += meter.used();
        keep.push((context, rt, shared));
    }
    let rss_after = rss();
    drop(keep);
    (total / n, rss_after.saturating_sub(rss_before) / n)
}

/// The error for a tool outside this execution's `allowed_tools`.
fn not_allowed(tool_id: &str) -> ErrorBody {
    Error::NotAllowed {
        tool: tool_id.to_owned(),
        reason: "not in this execution's allowed_tools".into(),
    }
    .to_body()
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! A sandboxed jq engine (jaq) for `json:query`.
//!
//! jq filters come from models and users, so they are hostile until proven
//! otherwise. jaq has no fuel, no allocation limit and no interrupt, and a
//! stack overflow or a failed allocation aborts the whole process. The
//! sandbox closes those holes:
//!
//! - **Own thread, big stack.** Each query (parse, compile and run) runs on a
//!   dedicated thread with a [`STACK_SIZE`] stack (address space, touched
//!   only as used).
//! - **A guard on every step** ([`guard`]): jaq looks up every filter node it
//!   evaluates through our [`Sandbox`] data (`HasLut::lut`), and performs
//!   every value operation through our [`val::SVal`]. Both check a cancel
//!   flag and the stack depth, and stop the filter by unwinding. So
//!   `def f: f; f` (a tail-call loop that spins without using stack) is
//!   stopped when the call's deadline or the time budget ends, and
//!   `def f: [f]; f` (real recursion, which overflows even a 256 MiB stack in
//!   about a second) is stopped at [`STACK_LIMIT`] with a clean error.
//! - **Bounded values** ([`val`]): nesting depth (otherwise
//!   `reduce range(1e6) as $i (null; [.]) | tojson` overflows the stack in
//!   jaq's recursive printer), string length (`"x" * 1e15` would abort on
//!   allocation failure), integer width, and a memory budget for everything
//!   the filter builds (`[range(1e9)]`).
//! - **Headroom for jaq's own lists.** Tail-recursive filters that pass
//!   closures (`def f(g): f(g | g); f(.)`) grow a linked list of bindings by
//!   about 1.5 million nodes a second, which jaq frees recursively: 10
//!   million nodes overflow 256 MiB. The list cannot be observed, so the
//!   [`TIME_BUDGET`] bounds its length and the stack beyond [`STACK_LIMIT`]
//!   leaves room to free it.
//! - **No side effects**: no `env`/`$ENV`, no module loading, no `halt`
//!   (which exits the process in jaq), `debug`/`stderr` log nothing.
//! - **Bounded results**: at most [`MAX_RESULTS`] outputs of at most
//!   [`MAX_RESULT_BYTES`] in total.
//!
//! The handler waits for the worker with the time budget; when it ends or the
//! caller gives up (the pipeline's deadline drops the future), the cancel
//! flag is raised and the worker stops at its next check, usually within
//! microseconds. A thread cannot be killed, though: a worker inside one long
//! native operation that never calls back (sorting a huge array, say) is
//! abandoned and finishes on its own; [`MAX_WORKERS`] caps how many workers
//! exist at once, abandoned ones included.

mod guard;
mod natives;
mod val;

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use jaq_core::data::{DataT, HasLut};
use jaq_core::load::{self, Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Exn, Lut, Vars, compile};
use jaq_json::{Num, Rc, Val};
use serde_json::Value;
use toolexec::ToolError;

use guard::{Interrupt, charge};
use val::{ELEM, ENTRY, SVal, charge_string};

/// Stack of a worker thread: 2 GiB of address space, only touched as used.
/// Only [`STACK_LIMIT`] of it is for the filter's recursion; the rest is
/// headroom for code that recurses without checking: jaq's recursive drop of
/// its own linked lists (variable bindings, path tracking), which a filter
/// can make as long as its time budget allows (about 1.5 million nodes a
/// second), and jaq's recursion over values (bounded by [`MAX_VALUE_DEPTH`]).
pub(crate) const STACK_SIZE: usize = 2 << 30;
/// Stack used when the system refuses [`STACK_SIZE`] (strict overcommit or
/// little memory).
pub(crate) const FALLBACK_STACK_SIZE: usize = 256 << 20;
/// Stack a filter may use before it is stopped.
pub(crate) const STACK_LIMIT: usize = 192 << 20;
/// Deepest value a filter may build.
pub(crate) const MAX_VALUE_DEPTH: u32 = 10_000;
/// Longest string a filter may build.
pub(crate) const MAX_STRING_BYTES: usize = 16 << 20;
/// Widest integer a filter may build.
pub(crate) const MAX_INT_BITS: u64 = 1 << 16;
/// Total allocation (estimated, cumulative) a filter may make.
pub(crate) const MEMORY_BUDGET: usize = 256 << 20;
/// Most results one query may return.
pub(crate) const MAX_RESULTS: usize = 10_000;
/// Largest total size of the results (bytes of compact JSON, estimated).
pub(crate) const MAX_RESULT_BYTES: usize = 8 << 20;
/// Deepest result value returned.
pub(crate) const MAX_RESULT_DEPTH: u32 = 512;
/// Longest filter accepted.
pub(crate) const MAX_FILTER_LEN: usize = 16_384;
/// Time budget of one query (the caller's deadline may be shorter).
pub(crate) const TIME_BUDGET: Duration = Duration::from_secs(5);
/// Most queries running at once; further calls wait for a slot.
pub(crate) const MAX_WORKERS: usize = 4;

static WORKERS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_WORKERS);

/// jaq's data kind for the sandbox: values are [`SVal`]s, and looking up
/// the filter table runs the guard.
pub(crate) struct Sandbox;

impl DataT for Sandbox {
    type V<'a> = SVal;
    type Data<'a> = SandboxData<'a>;
}

/// Run-time data of a sandboxed filter: its lookup table.
#[derive(Clone)]
pub(crate) struct SandboxData<'a>(&'a Lut<Sandbox>);

impl<'a> HasLut<'a, Sandbox> for SandboxData<'a> {
    fn lut(&self) -> &'a Lut<Sandbox> {
        // jaq calls this on every filter node it evaluates.
        guard::check();
        self.0
    }
}

/// Raises the cancel flag when dropped: when the handler's future completes
/// or is dropped (deadline, cancellation), the worker stops.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `filter` on `input` in the sandbox and returns its outputs.
pub(crate) async fn query(filter: String, input: Value) -> Result<Vec<Value>, ToolError> {
    let permit = WORKERS
        .acquire()
        .await
        .map_err(|_| ToolError::new("the jq worker pool is closed"))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let _stop = StopOnDrop(cancel.clone());
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn_worker(Job {
        filter,
        input,
        cancel,
        permit,
        tx,
    })
    .map_err(|e| ToolError::new(format!("could not start a jq worker thread: {e}")))?;
    match tokio::time::timeout(TIME_BUDGET, rx).await {
        Ok(Ok(result)) => result.map_err(ToolError::new),
        Ok(Err(_)) => Err(ToolError::new(
            "the jq worker thread ended without a result",
        )),
        Err(_) => Err(ToolError::new(format!(
            "the jq filter ran longer than its time budget of {} s",
            TIME_BUDGET.as_secs()
        ))),
    }
}

/// Everything a worker thread needs.
struct Job {
    filter: String,
    input: Value,
    cancel: Arc<AtomicBool>,
    permit: tokio::sync::SemaphorePermit<'static>,
    tx: tokio::sync::oneshot::Sender<Result<Vec<Value>, String>>,
}

/// Starts a worker with the big stack, or the fallback one if the system
/// refuses it.
fn spawn_worker(job: Job) -> std::io::Result<()> {
    let job = Arc::new(std::sync::Mutex::new(Some(job)));
    let mut last = None;
    for size in [STACK_SIZE, FALLBACK_STACK_SIZE] {
        let slot = job.clone();
        let spawned = std::thread::Builder::new()
            .name("toolexec-jq".into())
            .stack_size(size)
            .spawn(move || {
                let job = slot.lock().ok().and_then(|mut j| j.take());
                if let Some(Job {
                    filter,
                    input,
                    cancel,
                    permit,
                    tx,
                }) = job
                {
                    let _ = tx.send(run_sync(&filter, input, cancel));
                    // Held until now, so that workers that outlive their
                    // call still count against MAX_WORKERS.
                    drop(permit);
                }
            });
        match spawned {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no stack size worked")))
}

/// Runs a filter on the current thread, which must have a stack of at least
/// [`FALLBACK_STACK_SIZE`]. Never unwinds.
pub(crate) fn run_sync(
    filter: &str,
    input: Value,
    cancel: Arc<AtomicBool>,
) -> Result<Vec<Value>, String> {
    guard::arm(cancel, STACK_LIMIT);
    let result = catch_unwind(AssertUnwindSafe(|| evaluate(filter, &input)));
    guard::disarm();
    match result {
        Ok(r) => r,
        Err(payload) => Err(match payload.downcast::<Interrupt>() {
            Ok(why) => why.message(),
            Err(payload) => format!("the jq engine failed: {}", panic_message(&*payload)),
        }),
    }
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn evaluate(code: &str, input: &Value) -> Result<Vec<Value>, String> {
    if code.len() > MAX_FILTER_LEN {
        return Err(format!(
            "the jq filter is longer than {MAX_FILTER_LEN} bytes"
        ));
    }
    let arena = Arena::default();
    let defs = jaq_core::defs()
        .chain(jaq_std::defs())
        .chain(jaq_json::defs());
    let modules = Loader::new(defs)
        .load(&arena, File { code, path: () })
        .map_err(|errs| load_errors(code, errs))?;
    let filter = Compiler::default()
        .with_funs(natives::funs())
        .compile(modules)
        .map_err(|errs| compile_errors(code, errs))?;
    let input = from_json(input);
    let ctx = Ctx::<Sandbox>::new(SandboxData(&filter.lut), Vars::new([]));
    let mut results = Vec::new();
    let mut out = OutBudget { bytes: 0 };
    for item in filter.id.run((ctx, input)) {
        let v = item.map_err(|e| exn_message(e, results.len()))?;
        if results.len() == MAX_RESULTS {
            return Err(format!(
                "the jq filter produced more than {MAX_RESULTS} results; narrow it down, \
                 e.g. with first(f), limit(n; f) or [f][:n]"
            ));
        }
        results.push(to_json(&v.v, 0, &mut out)?);
    }
    Ok(results)
}

/// Where `part` (a slice of `code`) starts, in characters.
fn offset(code: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(code.as_ptr() as usize)?;
    (start <= code.len()).then(|| code[..start].chars().count())
}

fn at(code: &str, found: &str) -> String {
    let shown = if found.is_empty() {
        "end of input".to_owned()
    } else {
        format!("{:?}", found.chars().take(20).collect::<String>())
    };
    match offset(code, found) {
        Some(o) => format!("{shown} at character {o}"),
        None => shown,
    }
}

fn load_errors(code: &str, errs: load::Errors<&str, ()>) -> String {
    let mut msgs = Vec::new();
    for (_, err) in errs {
        match err {
            load::Error::Io(es) => {
                for (path, _) in es {
                    msgs.push(format!(
                        "cannot load module {path:?}: modules are not supported"
                    ));
                }
            }
            load::Error::Lex(es) => {
                for (expect, found) in es {
                    let expected = match expect {
                        load::lex::Expect::Delim(open) => format!("a match for {open:?}"),
                        other => other.as_str().to_owned(),
                    };
                    msgs.push(format!("expected {expected}, found {}", at(code, found)));
                }
            }
            load::Error::Parse(es) => {
                for (expect, found) in es {
                    msgs.push(format!(
                        "expected {}, found {}",
                        expect.as_str(),
                        at(code, found)
                    ));
                }
            }
        }
    }
    format!("invalid jq filter: {}", msgs.join("; "))
}

fn compile_errors(code: &str, errs: compile::Errors<&str, ()>) -> String {
    let mut msgs = Vec::new();
    for (_, es) in errs {
        for (name, undefined) in es {
            let what = match undefined {
                compile::Undefined::Filter(arity) => format!("filter {name}/{arity}"),
                other => format!("{} {name}", other.as_str()),
            };
            let place = offset(code, name)
                .map(|o| format!(" at character {o}"))
                .unwrap_or_default();
            msgs.push(format!("undefined {what}{place}"));
        }
    }
    format!("invalid jq filter: {}", msgs.join("; "))
}

/// The message of a jq error (`error(...)`, type errors, ...).
fn exn_message(e: Exn<'_, SVal>, produced: usize) -> String {
    let text = match e.get_err() {
        Ok(err) => {
            let v = err.into_val();
            match &v.v {
                Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
                other => other.to_string(),
            }
        }
        Err(_) => "unexpected break or halt".into(),
    };
    let mut text: String = text.chars().take(2000).collect();
    if produced > 0 {
        text.push_str(&format!(" (after {produced} results)"));
    }
    format!("jq error: {text}")
}

/// Converts JSON to a jq value, charging it to the budget.
pub(crate) fn from_json(v: &Value) -> SVal {
    fn conv(v: &Value, depth: u32) -> (Val, u32) {
        if depth > MAX_VALUE_DEPTH {
            guard::interrupt(Interrupt::Depth);
        }
        match v {
            Value::Null => (Val::Null, 0),
            Value::Bool(b) => (Val::from(*b), 0),
            Value::Number(n) => {
                let num = if let Some(i) = n.as_i64() {
                    Num::from_integral(i)
                } else if let Some(u) = n.as_u64() {
                    Num::from_integral(u)
                } else {
                    Num::Float(n.as_f64().unwrap_or(f64::NAN))
                };
                (Val::Num(num), 0)
            }
            Value::String(s) => {
                charge_string(s.len());
                (Val::from(s.clone()), 0)
            }
            Value::Array(a) => {
                charge(a.len() * ELEM);
                let mut d = 0;
                let items = a
                    .iter()
                    .map(|x| {
                        let (x, xd) = conv(x, depth + 1);
                        d = d.max(xd);
                        x
                    })
                    .collect();
                (Val::Arr(Rc::new(items)), d + 1)
            }
            Value::Object(o) => {
                charge(o.len() * ENTRY);
                let mut d = 0;
                let map = o
                    .iter()
                    .map(|(k, x)| {
                        let (x, xd) = conv(x, depth + 1);
                        d = d.max(xd);
                        (Val::from(k.clone()), x)
                    })
                    .collect();
                (Val::obj(map), d + 1)
            }
        }
    }
    let (v, d) = conv(v, 0);
    SVal::new(v, d)
}

struct OutBudget {
    bytes: usize,
}

impl OutBudget {
    fn spend(&mut self, n: usize) -> Result<(), String> {
        self.bytes += n;
        if self.bytes > MAX_RESULT_BYTES {
            return Err(format!(
                "the results of the jq filter are larger than {} MiB",
                MAX_RESULT_BYTES >> 20
            ));
        }
        Ok(())
    }
}

fn float(f: f64) -> Value {
    // As jq: NaN prints as null, infinities as the largest finite numbers.
    if f.is_nan() {
        Value::Null
    } else {
        Value::from(f.clamp(f64::MIN, f64::MAX))
    }
}

fn number(n: &Num) -> Value {
    match n {
        Num::Int(i) => Value::from(i64::try_from(*i).unwrap_or(0)),
        Num::BigInt(b) => {
            let s = b.to_string();
            s.parse::<i64>()
                .map(Value::from)
                .or_else(|_| s.parse::<u64>().map(Value::from))
                .unwrap_or_else(|_| float(s.parse().unwrap_or(f64::NAN)))
        }
        Num::Float(f) => float(*f),
        Num::Dec(s) => match s.parse::<i64>() {
            Ok(i) => Value::from(i),
            Err(_) => float(s.parse().unwrap_or(f64::NAN)),
        },
    }
}

/// Converts a result to JSON, within the result limits.
fn to_json(v: &Val, depth: u32, out: &mut OutBudget) -> Result<Value, String> {
    if depth > MAX_RESULT_DEPTH {
        return Err(format!(
            "a result of the jq filter is nested deeper than {MAX_RESULT_DEPTH} levels"
        ));
    }
    Ok(match v {
        Val::Null => {
            out.spend(4)?;
            Value::Null
        }
        Val::Bool(b) => {
            out.spend(5)?;
            Value::Bool(*b)
        }
        Val::Num(n) => {
            out.spend(8)?;
            number(n)
        }
        Val::TStr(s) | Val::BStr(s) => {
            out.spend(s.len() + 2)?;
            Value::String(String::from_utf8_lossy(s).into_owned())
        }
        Val::Arr(a) => {
            out.spend(2 + a.len())?;
            Value::Array(
                a.iter()
                    .map(|x| to_json(x, depth + 1, out))
                    .collect::<Result<_, _>>()?,
            )
        }
        Val::Obj(o) => {
            out.spend(2 + o.len() * 4)?;
            let mut map = serde_json::Map::with_capacity(o.len());
            for (k, x) in o.iter() {
                let key = match k {
                    Val::TStr(s) | Val::BStr(s) => String::from_utf8_lossy(s).into_owned(),
                    other => other.to_string(),
                };
                out.spend(key.len())?;
                map.insert(key, to_json(x, depth + 1, out)?);
            }
            Value::Object(map)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(filter: &str, input: Value) -> Result<Vec<Value>, String> {
        let filter = filter.to_owned();
        let cancel = Arc::new(AtomicBool::new(false));
        let c = cancel.clone();
        let h = std::thread::Builder::new()
            .stack_size(STACK_SIZE)
            .spawn(move || run_sync(&filter, input, c))
            .unwrap();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            cancel.store(true, Ordering::Relaxed);
        });
        let r = h.join().unwrap();
        drop(stopper);
        r
    }

    #[test]
    fn basics() {
        let data = serde_json::json!({"a": [1, 2, {"b": "x"}]});
        assert_eq!(
            run(".a[2].b", data.clone()).unwrap(),
            [serde_json::json!("x")]
        );
        assert_eq!(run(".a[] | numbers", data.clone()).unwrap(), [1, 2]);
        assert_eq!(
            run(
                "[.a[] | select(type == \"number\") * 2] | add",
                data.clone()
            )
            .unwrap(),
            [6]
        );
        assert_eq!(
            run("map_values(length)", data.clone()).unwrap(),
            [serde_json::json!({"a": 3})]
        );
        assert_eq!(run(".a[0] |= . + 10 | .a[0]", data.clone()).unwrap(), [11]);
        assert_eq!(
            run("[paths]", serde_json::json!({"x": [1]})).unwrap(),
            [serde_json::json!([["x"], ["x", 0]])]
        );
        assert_eq!(
            run("\"a,b\" | split(\",\")", Value::Null).unwrap(),
            [serde_json::json!(["a", "b"])]
        );
        assert_eq!(
            run("[1,[2]] | tojson | fromjson", Value::Null).unwrap(),
            [serde_json::json!([1, [2]])]
        );
        assert_eq!(
            run("\"abcb\" | indices(\"b\")", Value::Null).unwrap(),
            [serde_json::json!([1, 3])]
        );
        assert_eq!(
            run("{a: 1} | has(\"a\"), contains({a: 1})", Value::Null).unwrap(),
            [true, true]
        );
        assert_eq!(
            run("[3,1,2] | sort | bsearch(2)", Value::Null).unwrap(),
            [1]
        );
        assert_eq!(run("env", Value::Null).unwrap(), [serde_json::json!({})]);
        assert_eq!(run("1 | debug", Value::Null).unwrap(), [1]);
        assert_eq!(run("try error(\"x\") catch .", Value::Null).unwrap(), ["x"]);
        assert!(run("$ENV", Value::Null).unwrap_err().contains("undefined"));
        assert!(run("halt", Value::Null).unwrap_err().contains("halt"));
        assert!(
            run(".a b", Value::Null)
                .unwrap_err()
                .contains("invalid jq filter"),
            "{:?}",
            run(".a b", Value::Null)
        );
        assert!(
            run("nosuch(1)", Value::Null)
                .unwrap_err()
                .contains("nosuch/1")
        );
        assert!(
            run("error(\"boom\")", Value::Null)
                .unwrap_err()
                .contains("boom")
        );
    }

    #[test]
    fn hostile() {
        // The cases that do not need the deadline; the rest are in tests/.
        for (f, want) in [
            ("def f: [f]; f", "recursed"),
            ("def f: f + 1; f", "recursed"),
            ("repeat(1)", "results"),
            ("\"x\" * 1000000000000000", "string"),
            ("reduce range(1000000) as $i (null; [.]) | tojson", "deeper"),
            ("\"[\" * 100000 | fromjson", "parse"),
            ("reduce range(40) as $i (3; . * .)", "integer"),
            ("[range(1e9)]", "memory|cancelled"),
        ] {
            let e = run(f, serde_json::json!(0)).expect_err(f);
            assert!(want.split('|').any(|w| e.contains(w)), "{f}: {e}");
        }
        // A deeply nested filter parses (on the big stack); its result is
        // too deep to return.
        let deep = "[".repeat(5000) + &"]".repeat(5000);
        let e = run(&deep, Value::Null).unwrap_err();
        assert!(e.contains("deeper than 512"), "{e}");
        let e = run(&"(".repeat(10_000), Value::Null).unwrap_err();
        assert!(e.contains("invalid jq filter"), "{e}");
    }
}

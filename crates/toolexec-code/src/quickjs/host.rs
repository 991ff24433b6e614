//! The host functions behind `tools.run`, `tools.search`,
//! `tools.describe` and `console.*`.
//!
//! Each tool call's future is polled once inline (inside the caller's Tokio
//! runtime context): a tool that completes synchronously, as most local
//! tools do, settles its promise without any thread hop. A tool that is
//! still pending is spawned onto the Tokio runtime and reports back over a
//! channel the worker thread waits on.

use std::cell::RefCell;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll, Waker};
use std::time::Instant;

use rquickjs::object::Property;
use rquickjs::{Ctx, Exception, Function, IntoJs, Object, Value};
use serde_json::Value as Json;
use toolexec::{BoxFuture, DetailLevel, Error, ErrorBody, ErrorCode};

use super::abort::Abort;
use super::convert::{js_typeof, json_value, render_thrown, render_value};
use super::state::{JsState, Msg, Shared, Slot};
use crate::ToolCallRecord;

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
pub(super) fn host_call<'js>(
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
                "limit_exceeded: tool_calls budget of {} calls is spent",
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
                result.map_err(|e| e.to_body()),
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
                let result = fut.await.map_err(|e| e.to_body());
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
pub(super) fn settle<'js>(
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

/// The value of a search or describe future: at once when it is ready (the
/// in-process case), else by waiting on this worker thread until the
/// deadline (the tool-channel case; the host answers or the run ends).
fn resolve<T>(shared: &Shared, mut fut: BoxFuture<'static, T>) -> Option<T> {
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

/// `tools.search(query, limit = 10)`: allowed tools only.
pub(super) fn host_search<'js>(
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
    // A failed search (the host's lookup budget spent, a broken channel)
    // finds nothing.
    let hits = match resolve(shared, shared.tools.search(&query, wanted)) {
        Some(Ok(Json::Array(hits))) => hits,
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
pub(super) fn host_describe<'js>(
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
            Some(r) => r.map_err(|e| e.to_body()),
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
pub(super) fn host_print<'js>(
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

/// The error for a tool outside this execution's `allowed_tools`.
fn not_allowed(tool_id: &str) -> ErrorBody {
    Error::NotAllowed {
        tool: tool_id.to_owned(),
        reason: "not in this execution's allowed_tools".into(),
    }
    .to_body()
}

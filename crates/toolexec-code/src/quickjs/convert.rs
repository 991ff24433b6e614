//! Values across the boundary: what the script threw, returned or printed,
//! rendered for the host.

use std::cell::RefCell;
use std::rc::Rc;

use rquickjs::{Coerced, Ctx, FromJs, Object, Value};
use serde_json::Value as Json;

use super::abort::Abort;
use super::state::{JsState, MAX_STACK, Shared};
use crate::{CodeLimit, CodeStatus};

const STACK_OVERFLOW: &str = "Maximum call stack size exceeded";

pub(super) fn get_string(obj: &Object<'_>, key: &str) -> Option<String> {
    obj.get::<_, Option<Coerced<String>>>(key)
        .ok()
        .flatten()
        .map(|c| c.0)
}

/// An unexpected failure of the host side (not the script's fault), unless
/// a limit explains it.
pub(super) fn host_failure(
    ctx: &Ctx<'_>,
    shared: &Shared,
    what: &str,
    e: rquickjs::Error,
) -> CodeStatus {
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
pub(super) fn thrown<'js>(
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
pub(super) fn render_thrown<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> (String, Option<String>) {
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
pub(super) fn render_value<'js>(ctx: &Ctx<'js>, v: &Value<'js>) -> String {
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
pub(super) fn finish_value<'js>(
    ctx: &Ctx<'js>,
    shared: &Shared,
    v: Value<'js>,
) -> (CodeStatus, Option<Json>) {
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

/// JavaScript's `typeof` of a value.
pub(super) fn js_typeof(v: &Value<'_>) -> &'static str {
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

pub(super) fn json_value<'js>(
    ctx: &Ctx<'js>,
    v: &impl serde::Serialize,
) -> rquickjs::Result<Value<'js>> {
    ctx.json_parse(serde_json::to_string(v).unwrap_or_else(|_| "null".into()))
}

//! The `toolexec` host import of core modules: JSON in, JSON out, every
//! pointer and length checked against the module's exported memory.
//!
//! See `docs/wasm-abi.md` for the guest's view.

use serde_json::Value;
use toolexec::{ErrorBody, ErrorCode};
use wasmtime::{Caller, Extern, Linker};

use crate::state::{Fault, HostState};

/// The import module name.
pub const MODULE: &str = "toolexec";

/// Longest tool id accepted, in bytes.
const MAX_TOOL_ID: usize = 1024;

type Ctx<'a, W> = Caller<'a, HostState<W>>;

/// Adds the `toolexec` functions to `linker`.
pub(crate) fn add_to_linker<W: Send + 'static>(
    linker: &mut Linker<HostState<W>>,
) -> wasmtime::Result<()> {
    linker.func_wrap(MODULE, "input_len", |caller: Ctx<'_, W>| -> i32 {
        caller.data().input.len() as i32
    })?;
    linker.func_wrap(
        MODULE,
        "input_read",
        |mut caller: Ctx<'_, W>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let input = std::mem::take(&mut caller.data_mut().input);
            let copied = write_guest(&mut caller, "input_read", ptr, len, &input);
            caller.data_mut().input = input;
            copied
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "call",
        |mut caller: Ctx<'_, W>, (id_ptr, id_len, args_ptr, args_len): (i32, i32, i32, i32)| {
            Box::new(async move { call(&mut caller, id_ptr, id_len, args_ptr, args_len).await })
        },
    )?;
    linker.func_wrap(MODULE, "result_len", |caller: Ctx<'_, W>| -> i32 {
        caller.data().pending.len() as i32
    })?;
    linker.func_wrap(
        MODULE,
        "result_read",
        |mut caller: Ctx<'_, W>, ptr: i32, len: i32| -> wasmtime::Result<i32> {
            let pending = std::mem::take(&mut caller.data_mut().pending);
            let copied = write_guest(&mut caller, "result_read", ptr, len, &pending);
            caller.data_mut().pending = pending;
            copied
        },
    )?;
    linker.func_wrap(
        MODULE,
        "output",
        |mut caller: Ctx<'_, W>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let max = caller.data().max_message;
            let bytes = read_guest(&mut caller, "output", "value", ptr, len, max)?;
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(value) => {
                    caller.data_mut().output = Some(value);
                    Ok(())
                }
                Err(e) => Err(caller.data_mut().fail(Fault::Abi(format!(
                    "toolexec.output: the value is not valid JSON: {e}"
                )))),
            }
        },
    )?;
    linker.func_wrap(
        MODULE,
        "log",
        |mut caller: Ctx<'_, W>, ptr: i32, len: i32| -> wasmtime::Result<()> {
            let max = caller.data().max_message;
            let mut bytes = read_guest(&mut caller, "log", "message", ptr, len, max)?;
            bytes.push(b'\n');
            let stdio = caller.data().stdio.clone();
            stdio
                .write(crate::output::Stream::Stderr, &bytes)
                .map_err(wasmtime::Error::new)
        },
    )?;
    Ok(())
}

/// `call(id_ptr, id_len, args_ptr, args_len) -> i32`: runs the tool through
/// the [`toolexec_runtime::ToolHost`]; the result (or the error body) is
/// kept for `result_read`. Positive: result length; negative: minus the
/// error length.
async fn call<W: Send + 'static>(
    caller: &mut Ctx<'_, W>,
    id_ptr: i32,
    id_len: i32,
    args_ptr: i32,
    args_len: i32,
) -> wasmtime::Result<i32> {
    let max = caller.data().max_message;
    let id = read_guest(caller, "call", "tool id", id_ptr, id_len, MAX_TOOL_ID)?;
    let args = read_guest(caller, "call", "args", args_ptr, args_len, max)?;
    let result = match (
        String::from_utf8(id),
        serde_json::from_slice::<Value>(&args),
    ) {
        (Err(_), _) => Err(error_body(
            ErrorCode::InvalidToolId,
            "invalid_tool_id: the tool id is not UTF-8".into(),
            serde_json::json!({"field": "id"}),
        )),
        (Ok(_), Err(e)) => Err(error_body(
            ErrorCode::InvalidRequest,
            format!("invalid_request: args is not valid JSON: {e}"),
            serde_json::json!({"field": "args"}),
        )),
        (Ok(id), Ok(args)) => {
            let host = caller.data().host.clone();
            let result = host.call(&id, args).await.map_err(|e| e.to_body());
            if let Err(e) = &result
                && e.code == ErrorCode::LimitExceeded
                && e.details.as_ref().and_then(|d| d.get("limit")) == Some(&"tool_calls".into())
                && host.budget_exhausted()
            {
                let max = host.max_tool_calls();
                return Err(caller.data_mut().fail(Fault::ToolBudget { max }));
            }
            result
        }
    };
    let (ok, mut bytes) = match result {
        Ok(value) => (true, serde_json::to_vec(&value).unwrap_or_default()),
        Err(body) => (false, serde_json::to_vec(&body).unwrap_or_default()),
    };
    let mut ok = ok;
    if bytes.len() > max {
        let body = error_body(
            ErrorCode::LimitExceeded,
            format!(
                "limit_exceeded: the tool result is {} bytes, over the {max}-byte message limit",
                bytes.len()
            ),
            serde_json::json!({"limit": "message_bytes", "max": max}),
        );
        bytes = serde_json::to_vec(&body).unwrap_or_default();
        ok = false;
    }
    let len = bytes.len() as i32;
    caller.data_mut().pending = bytes;
    Ok(if ok { len } else { -len })
}

fn error_body(code: ErrorCode, message: String, details: Value) -> ErrorBody {
    ErrorBody {
        code,
        message,
        details: Some(details),
    }
}

/// The module's exported memory, or an ABI fault.
fn memory<W>(caller: &mut Ctx<'_, W>, func: &str) -> wasmtime::Result<wasmtime::Memory> {
    match caller.get_export("memory") {
        Some(Extern::Memory(memory)) => Ok(memory),
        _ => Err(caller.data_mut().fail(Fault::Abi(format!(
            "toolexec.{func}: the module must export its linear memory as \"memory\""
        )))),
    }
}

/// Copies `len` bytes at `ptr` out of guest memory. Lengths are unsigned
/// 32-bit; a range outside memory or over `max` is an ABI fault.
fn read_guest<W>(
    caller: &mut Ctx<'_, W>,
    func: &str,
    what: &str,
    ptr: i32,
    len: i32,
    max: usize,
) -> wasmtime::Result<Vec<u8>> {
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    if len > max {
        return Err(caller.data_mut().fail(Fault::Abi(format!(
            "toolexec.{func}: {what} length {len} is over the limit of {max} bytes"
        ))));
    }
    let memory = memory(caller, func)?;
    let data = memory.data(&*caller);
    match ptr.checked_add(len).filter(|end| *end <= data.len()) {
        Some(end) => Ok(data[ptr..end].to_vec()),
        None => {
            let size = data.len();
            Err(caller.data_mut().fail(Fault::Abi(format!(
                "toolexec.{func}: {what} range {ptr}..{ptr}+{len} is outside linear memory ({size} bytes)"
            ))))
        }
    }
}

/// Copies up to `len` bytes of `bytes` to `ptr` in guest memory and
/// returns how many were copied. The whole `ptr..ptr+len` range must be
/// inside memory.
fn write_guest<W>(
    caller: &mut Ctx<'_, W>,
    func: &str,
    ptr: i32,
    len: i32,
    bytes: &[u8],
) -> wasmtime::Result<i32> {
    let (ptr, len) = (ptr as u32 as usize, len as u32 as usize);
    let memory = memory(caller, func)?;
    let data = memory.data_mut(&mut *caller);
    let size = data.len();
    match ptr.checked_add(len).filter(|end| *end <= size) {
        Some(_) => {
            let n = len.min(bytes.len());
            data[ptr..ptr + n].copy_from_slice(&bytes[..n]);
            Ok(n as i32)
        }
        None => Err(caller.data_mut().fail(Fault::Abi(format!(
            "toolexec.{func}: buffer range {ptr}..{ptr}+{len} is outside linear memory ({size} bytes)"
        )))),
    }
}

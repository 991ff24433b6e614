//! Compiling a script: the user's code becomes the body of an async
//! function, and a syntax error is located in the user's own lines.

use std::ffi::CString;

use rquickjs::{Ctx, Value, qjs};

use super::convert::get_string;
use crate::CodeStatus;

/// The user's code becomes the body of this function. No newline, so line
/// numbers are the user's; columns on line 1 shift by its length.
const PREFIX: &str = "(async function () {";
const SUFFIX: &str = "\n})";
const FILENAME: &str = "script.js";

/// Compiles without running: a syntax error means nothing started.
pub(super) fn compile<'js>(ctx: &Ctx<'js>, code: &str) -> Result<Value<'js>, CodeStatus> {
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

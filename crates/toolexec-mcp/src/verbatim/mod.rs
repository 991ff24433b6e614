//! Large results relayed verbatim, from an upstream's stdout to the
//! gateway's stdout, without rmcp decoding them into its typed messages
//! and encoding them again (which made a proxied 1 MiB `resources/read`
//! cost two thirds more than a direct one; see BENCHMARKS.md).
//!
//! Only where both ends are byte streams this crate reads and writes:
//!
//! 1. The gateway marks a request whose answer it relays unchanged
//!    ([`Verbatim`], a request extension, never serialized).
//! 2. `InOrder` (the upstream's transport) records the request's id as it sends it
//!    ([`Wanted`], one per upstream session).
//! 3. [`HoldingReader`], under rmcp's stdio transport on the upstream's
//!    stdout, finds the answer to that id. When it is a large, complete
//!    `resources/read` result, it keeps the result's bytes (checked to be
//!    JSON, never decoded) under a random token and hands rmcp a
//!    placeholder result in its place: no contents, the token in `_meta`.
//! 4. The placeholder goes through the gateway as any answer would.
//! 5. [`ReleasingWriter`], under rmcp's stdio transport on the gateway's
//!    stdout, puts the kept bytes back in the place of the placeholder.
//!
//! A kept result that is not released within [`HOLD_FOR`] is dropped (its
//! placeholder, if it comes later, is answered with an error), and at most
//! [`MAX_HELD_BYTES`] are kept at once (past that, results are decoded as
//! usual). Tokens are 128 random bits, so neither an upstream nor a client
//! can name a result it was not given.

mod reader;
// Without the gateway nothing asks for a verbatim result: the reader hands
// every line on unchanged, and there is no writer.
#[cfg(feature = "gateway")]
mod writer;

use std::collections::HashMap;
use std::sync::LazyLock;
use std::time::Duration;

use parking_lot::Mutex;
use rmcp::model::RequestId;

pub(crate) use reader::HoldingReader;
#[cfg(feature = "gateway")]
pub(crate) use writer::ReleasingWriter;

/// The `_meta` key of a placeholder result; its value is the token.
const MARKER: &str = "io.toolexec/verbatim";
/// [`MARKER`] as a key in JSON, as rmcp writes it, followed by the value's
/// opening quote: what the writer looks for in short lines.
#[cfg(feature = "gateway")]
const MARKER_KEY: &[u8] = b"\"io.toolexec/verbatim\":\"";
/// Results smaller than this are decoded as usual: their parse costs less
/// than keeping them aside.
pub(crate) const MIN_BYTES: usize = 64 * 1024;
/// How long a kept result waits for its placeholder to be written out.
pub(crate) const HOLD_FOR: Duration = Duration::from_secs(60);
/// The most bytes kept at once, over every upstream.
pub(crate) const MAX_HELD_BYTES: usize = 256 * 1024 * 1024;
/// The most request ids an upstream session waits on at once; past it the
/// oldest are forgotten (their answers are then decoded as usual).
const MAX_WANTED: usize = 1024;
/// The deepest nesting relayed verbatim (serde_json's own limit).
const MAX_DEPTH: usize = 128;
/// The longest client request id (as JSON) whose answer may be relayed
/// verbatim: the writer looks for placeholders among short lines only.
#[cfg(feature = "gateway")]
pub(crate) const MAX_ID_BYTES: usize = 256;

/// A request extension: relay this request's answer verbatim when the
/// transports allow it (only `resources/read` answers are kept).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Verbatim {
    /// The client speaks 2026-07-28: a result it gets must say
    /// `resultType` `complete` and carry the caching hints (`ttlMs`,
    /// `cacheScope`) rmcp would otherwise add.
    pub(crate) modern: bool,
}

/// The ids of one upstream session's requests whose answers are wanted
/// verbatim.
#[derive(Debug, Default)]
pub(crate) struct Wanted {
    ids: Mutex<Vec<(String, Verbatim)>>,
}

impl Wanted {
    /// Waits for the answer to `id`.
    pub(crate) fn add(&self, id: &RequestId, how: Verbatim) {
        let mut ids = self.ids.lock();
        if ids.len() >= MAX_WANTED {
            ids.remove(0);
        }
        ids.push((id_key(id), how));
    }

    /// How the answer to `id` is wanted, if it is (then forgotten); also
    /// how a cancelled request is forgotten.
    pub(crate) fn take(&self, id: &RequestId) -> Option<Verbatim> {
        let mut ids = self.ids.lock();
        let key = id_key(id);
        let i = ids.iter().position(|(k, _)| *k == key)?;
        Some(ids.swap_remove(i).1)
    }

    fn is_empty(&self) -> bool {
        self.ids.lock().is_empty()
    }
}

/// An id as JSON: `5` and `"5"` stay apart.
fn id_key(id: &RequestId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

/// A kept result: the line it came in and where in it the result is.
struct Kept {
    line: bytes::Bytes,
    #[cfg_attr(not(feature = "gateway"), allow(dead_code))]
    result: std::ops::Range<usize>,
}

#[derive(Default)]
struct Held {
    by_token: HashMap<String, Kept>,
    bytes: usize,
}

/// Every kept result of this process, by token.
static HELD: LazyLock<Mutex<Held>> = LazyLock::new(Mutex::default);

/// Keeps the result at `result` in `line`; the token to release it with,
/// or the line back when it cannot be kept (no randomness, or too much is
/// kept already).
fn hold(line: bytes::Bytes, result: std::ops::Range<usize>) -> Result<String, bytes::Bytes> {
    let mut random = [0u8; 16];
    if getrandom::fill(&mut random).is_err() {
        return Err(line);
    }
    let token: String = random.iter().map(|b| format!("{b:02x}")).collect();
    // Dropped after HOLD_FOR, whatever else happens (a placeholder rmcp
    // dropped because its request was given up is never written).
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return Err(line);
    };
    let mut held = HELD.lock();
    if held.bytes + line.len() > MAX_HELD_BYTES {
        return Err(line);
    }
    held.bytes += line.len();
    held.by_token.insert(token.clone(), Kept { line, result });
    drop(held);
    let expired = token.clone();
    runtime.spawn(async move {
        tokio::time::sleep(HOLD_FOR).await;
        drop(release(&expired));
    });
    Ok(token)
}

/// The result kept under `token`, taken out (each is released once).
fn release(token: &str) -> Option<Kept> {
    let mut held = HELD.lock();
    let kept = held.by_token.remove(token)?;
    held.bytes -= kept.line.len();
    Some(kept)
}

/// Whether the JSON `text` (known to be valid) nests arrays and objects at
/// most [`MAX_DEPTH`] deep, has no unpaired surrogate escape (what rmcp's
/// decoding, serde_json's, would refuse) and no carriage return: what a
/// result relayed verbatim must not carry to the client.
pub(crate) fn plain_json(text: &[u8]) -> bool {
    let (mut depth, mut i) = (0usize, 0usize);
    while i < text.len() {
        match text[i] {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            // A carriage return between tokens: some clients end a line
            // there, so the typed path (which writes none) is taken.
            b'\r' => return false,
            b'"' => {
                // A string: jump from escape to escape, to its end.
                i += 1;
                loop {
                    let Some(at) = memchr::memchr2(b'"', b'\\', &text[i..]) else {
                        return false;
                    };
                    i += at;
                    if text[i] == b'"' {
                        break;
                    }
                    match surrogate(&text[i..]) {
                        None => i += 2,
                        Some(0xD800..=0xDBFF) => match text.get(i + 6..).and_then(surrogate) {
                            Some(0xDC00..=0xDFFF) => i += 12,
                            _ => return false,
                        },
                        Some(0xDC00..=0xDFFF) => return false,
                        Some(_) => i += 6,
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    true
}

/// The code unit of a `\uXXXX` escape at the start of `at`, if it is one.
fn surrogate(at: &[u8]) -> Option<u16> {
    let hex = at.strip_prefix(b"\\u")?.get(..4)?;
    u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// The placeholder line for a result kept under `token`, answering `id`
/// (its JSON as the server wrote it).
fn placeholder(id: &str, token: &str) -> Vec<u8> {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"contents\":[],\"_meta\":{{\"{MARKER}\":\"{token}\"}}}}}}\n"
    )
    .into_bytes()
}

#[cfg(all(test, feature = "gateway"))]
mod tests;

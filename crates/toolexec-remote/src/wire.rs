//! Frames exchanged after the upgrade, and the outcome's wire form.
//!
//! Each frame is a 4-byte big-endian length and that many bytes of UTF-8
//! JSON (the framing of the sandbox channel protocol), at most
//! [`MAX_FRAME_BYTES`].

use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolexec::{DetailLevel, ErrorBody};

/// Largest frame either side accepts: 16 MiB.
pub const MAX_FRAME_BYTES: usize = 16 << 20;

/// stdout and stderr travel in chunks of at most this many bytes.
pub const OUTPUT_CHUNK_BYTES: usize = 64 << 10;

/// The length-delimited codec both sides use.
pub(crate) fn codec() -> tokio_util::codec::LengthDelimitedCodec {
    tokio_util::codec::LengthDelimitedCodec::builder()
        .length_field_length(4)
        .big_endian()
        .max_frame_length(MAX_FRAME_BYTES)
        .new_codec()
}

/// Server → caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerFrame {
    /// The unit is starting on `runtime`; the request is not retried from here on.
    Started {
        /// The server's runtime chosen for the profile.
        runtime: String,
    },
    /// A chunk of the unit's stdout.
    Stdout {
        /// Text (lossy UTF-8, as in [`RunOutcome::stdout`]).
        data: String,
    },
    /// A chunk of the unit's stderr.
    Stderr {
        /// Text.
        data: String,
    },
    /// The unit asks the caller's catalog for something.
    ToolCall {
        /// Correlates the caller's `tool_result`.
        id: u64,
        /// What it asks.
        #[serde(flatten)]
        request: ToolRequest,
    },
    /// The run is over; the connection closes after this frame.
    Outcome {
        /// The outcome, with `stdout`/`stderr` empty (they came as chunks,
        /// live while the unit ran where the runtime streams, else after it)
        /// and `tool_calls` holding only the calls the server refused.
        outcome: Value,
    },
}

/// A tool request forwarded from the server's channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum ToolRequest {
    /// Run a tool.
    Call {
        /// The id.
        tool: String,
        /// The arguments.
        args: Value,
    },
    /// Rank tools.
    Search {
        /// Free text.
        query: String,
        /// Maximum hits.
        limit: usize,
    },
    /// Document a tool.
    Describe {
        /// The id.
        tool: String,
        /// How much.
        detail: DetailLevel,
    },
}

/// Caller → server.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientFrame {
    /// The answer to a `tool_call`: `error` when it failed, else `result`.
    ToolResult {
        /// The request's id.
        id: u64,
        /// The value (absent means `null`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// The error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorBody>,
    },
}

/// Splits `text` into chunks of at most [`OUTPUT_CHUNK_BYTES`], on char boundaries.
pub(crate) fn chunks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(OUTPUT_CHUNK_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (head, tail) = rest.split_at(end);
        out.push(head);
        rest = tail;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_respect_char_boundaries() {
        let text = "é".repeat(OUTPUT_CHUNK_BYTES);
        let parts = chunks(&text);
        assert!(parts.iter().all(|p| p.len() <= OUTPUT_CHUNK_BYTES));
        assert_eq!(parts.concat(), text);
        assert!(chunks("").is_empty());
    }
}

/// Turns a stream's bytes into text chunks as they arrive, holding back a
/// trailing incomplete UTF-8 sequence, so that the chunks concatenated equal
/// `String::from_utf8_lossy` of all the bytes (what the outcome holds).
#[derive(Debug, Default)]
pub(crate) struct LiveText {
    pending: Vec<u8>,
    /// Everything sent so far.
    pub(crate) sent: String,
}

impl LiveText {
    /// Adds bytes; returns the text that is complete now (maybe empty).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut keep_from = self.pending.len();
        if let Some(chunk) = self.pending.utf8_chunks().last() {
            let invalid = chunk.invalid();
            let at_end = !invalid.is_empty()
                && std::str::from_utf8(invalid).is_err_and(|e| e.error_len().is_none());
            if at_end {
                keep_from -= invalid.len();
            }
        }
        let text = String::from_utf8_lossy(&self.pending[..keep_from]).into_owned();
        self.pending.drain(..keep_from);
        self.sent.push_str(&text);
        text
    }

    /// The held-back bytes, lossily, at the end of the stream.
    pub(crate) fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        self.sent.push_str(&text);
        text
    }

    /// What of the outcome's `full` text was not sent yet.
    pub(crate) fn rest_of<'a>(&self, full: &'a str) -> &'a str {
        full.strip_prefix(self.sent.as_str()).unwrap_or("")
    }
}

#[cfg(test)]
mod live_text_tests {
    use super::LiveText;

    #[test]
    fn split_characters_are_held_back_until_complete() {
        let bytes = "héllo wörld €".as_bytes();
        for cut in 0..bytes.len() {
            let mut live = LiveText::default();
            let mut out = live.push(&bytes[..cut]);
            out.push_str(&live.push(&bytes[cut..]));
            out.push_str(&live.finish());
            assert_eq!(out, "héllo wörld €", "cut at {cut}");
        }
    }

    #[test]
    fn invalid_bytes_match_lossy_decoding() {
        let bytes = b"a\xffb\xe2\x82";
        let mut live = LiveText::default();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&live.push(&[*b]));
        }
        out.push_str(&live.finish());
        assert_eq!(out, String::from_utf8_lossy(bytes));
        assert_eq!(live.rest_of(&String::from_utf8_lossy(bytes)), "");
    }
}

//! The upstream's side: [`HoldingReader`] keeps large `resources/read`
//! results aside and hands rmcp a placeholder for each.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rmcp::model::RequestId;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, ReadBuf};

use super::{MIN_BYTES, Wanted, hold, placeholder, plain_json};

/// The most bytes buffered while looking for the end of a line: rmcp's own
/// limit, past which it drops the line itself.
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;
/// How much is read from the server at once.
const CHUNK: usize = 64 * 1024;

/// Reads an upstream server's stdout line by line for rmcp's transport,
/// replacing the answer to a [`Wanted`] request, when it is a large
/// complete `resources/read` result, by a placeholder (see the module
/// docs). Every other line passes unchanged.
pub(crate) struct HoldingReader<R> {
    inner: R,
    wanted: Arc<Wanted>,
    /// Read from the server and not handed out: `data[start..filled]`
    /// (`data` is initialized throughout).
    data: Vec<u8>,
    start: usize,
    filled: usize,
    /// Where the search for a newline resumes.
    searched: usize,
    /// Being handed out.
    out: Out,
    /// A line too long to buffer, passed through until its newline.
    passing: bool,
    eof: bool,
    /// The most bytes buffered for a line ([`MAX_LINE`]).
    pub(super) max_line: usize,
}

/// What `poll_read` hands out next.
enum Out {
    None,
    /// `data[start..end]`, as the server wrote it.
    Data {
        end: usize,
    },
    /// A placeholder, or a line that could not be kept.
    Owned {
        bytes: Vec<u8>,
        pos: usize,
    },
}

impl<R> HoldingReader<R> {
    pub(crate) fn new(inner: R, wanted: Arc<Wanted>) -> Self {
        HoldingReader {
            inner,
            wanted,
            data: vec![0; CHUNK],
            start: 0,
            filled: 0,
            searched: 0,
            out: Out::None,
            passing: false,
            eof: false,
            max_line: MAX_LINE,
        }
    }

    /// Done with `data[start..end]`.
    fn consume(&mut self, end: usize) {
        self.start = end;
        self.searched = self.searched.max(end);
        if self.start == self.filled {
            (self.start, self.filled, self.searched) = (0, 0, 0);
            if self.data.len() > 4 * CHUNK {
                // Back to its usual size after a long line.
                self.data = vec![0; CHUNK];
            }
        }
    }

    /// Room to read into: what is left moves to the front, or `data`
    /// grows (up to [`MAX_LINE`]).
    fn make_room(&mut self) {
        if self.filled < self.data.len() {
            return;
        }
        if self.start > 0 {
            self.data.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.searched -= self.start;
            self.start = 0;
        } else {
            let grown = (self.data.len() * 2).min(self.max_line.max(CHUNK));
            self.data.resize(grown, 0);
        }
    }

    /// Decides what to hand out for the line `data[start..end]`.
    fn line(&mut self, end: usize) {
        let Some((id, result)) = self.keepable(&self.data[self.start..end]) else {
            self.out = Out::Data { end };
            return;
        };
        let line = if self.start == 0 {
            // The buffer goes to the store; what follows the line stays.
            let mut rest = self.data[end..self.filled].to_vec();
            rest.resize(rest.len().max(CHUNK), 0);
            let mut line = std::mem::replace(&mut self.data, rest);
            line.truncate(end);
            self.filled -= end;
            self.searched = 0;
            line
        } else {
            let line = self.data[self.start..end].to_vec();
            self.consume(end);
            line
        };
        self.out = match hold(line, result) {
            Ok(token) => Out::Owned {
                bytes: placeholder(&id, &token),
                pos: 0,
            },
            // Not kept: handed out as it came.
            Err(line) => Out::Owned {
                bytes: line,
                pos: 0,
            },
        };
    }

    /// The id (as the server wrote it) and the result's place in `line`,
    /// when `line` answers a wanted request with a large complete
    /// `resources/read` result. The wanted id is forgotten on any answer.
    fn keepable(&self, line: &[u8]) -> Option<(String, std::ops::Range<usize>)> {
        if self.wanted.is_empty() {
            return None;
        }
        let body = line.strip_suffix(b"\n").unwrap_or(line);
        let body = body.strip_suffix(b"\r").unwrap_or(body);
        let body = std::str::from_utf8(body).ok()?;
        if !body.starts_with('{') {
            return None;
        }
        let answer: Answer<'_> = serde_json::from_str(body).ok()?;
        if answer.method.is_some() {
            return None;
        }
        let raw_id = answer.id?;
        let id: RequestId = serde_json::from_str(raw_id.get()).ok()?;
        if !self.wanted.take(&id) || line.len() < MIN_BYTES {
            return None;
        }
        let result = answer.result?;
        if !is_object(result) || !plain_json(result.get().as_bytes()) {
            return None;
        }
        let read: ReadResult<'_> = serde_json::from_str(result.get()).ok()?;
        // A result with `resultType` (a 2026-07-28 server's) is rewritten
        // for a client of an earlier revision: decoded.
        if read.result_type.is_some() || !read.meta.is_none_or(is_object) {
            return None;
        }
        for contents in read.contents {
            if !is_object(contents) {
                return None;
            }
            let contents: Contents<'_> = serde_json::from_str(contents.get()).ok()?;
            if !contents.is_valid() {
                return None;
            }
        }
        let start = result.get().as_ptr() as usize - body.as_ptr() as usize;
        Some((raw_id.get().to_owned(), start..start + result.get().len()))
    }
}

/// A JSON-RPC message, as far as telling an answer and its id.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    method: Option<IgnoredAny>,
}

/// A `resources/read` result, as far as telling one whose contents have
/// the shape MCP gives them (what rmcp's decoding would check), without
/// copying or unescaping their text.
#[derive(Deserialize)]
struct ReadResult<'a> {
    #[serde(borrow)]
    contents: Vec<&'a RawValue>,
    #[serde(borrow, rename = "resultType")]
    result_type: Option<&'a RawValue>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

/// One of a read result's contents: a URI and either text or a blob, all
/// strings, and the optional fields MCP defines with their types.
#[derive(Deserialize)]
struct Contents<'a> {
    #[serde(borrow)]
    uri: &'a RawValue,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    blob: Option<&'a RawValue>,
    #[serde(borrow, rename = "mimeType")]
    mime_type: Option<&'a RawValue>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

impl Contents<'_> {
    fn is_valid(&self) -> bool {
        let string = |v: &RawValue| v.get().starts_with('"');
        string(self.uri)
            && self.mime_type.is_none_or(string)
            && self.meta.is_none_or(is_object)
            && match (self.text, self.blob) {
                (Some(text), None) => string(text),
                (None, Some(blob)) => string(blob),
                _ => false,
            }
    }
}

fn is_object(v: &RawValue) -> bool {
    v.get().starts_with('{')
}

impl<R: AsyncRead + Unpin> AsyncRead for HoldingReader<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            match &mut this.out {
                Out::Data { end } if this.start < *end => {
                    let n = buf.remaining().min(*end - this.start);
                    buf.put_slice(&this.data[this.start..this.start + n]);
                    this.start += n;
                    return Poll::Ready(Ok(()));
                }
                Out::Data { end } => {
                    let end = *end;
                    this.out = Out::None;
                    this.consume(end);
                }
                Out::Owned { bytes, pos } if *pos < bytes.len() => {
                    let n = buf.remaining().min(bytes.len() - *pos);
                    buf.put_slice(&bytes[*pos..*pos + n]);
                    *pos += n;
                    return Poll::Ready(Ok(()));
                }
                Out::Owned { .. } => this.out = Out::None,
                Out::None => {}
            }
            let from = this.searched.max(this.start);
            if let Some(i) = memchr::memchr(b'\n', &this.data[from..this.filled]) {
                let end = from + i + 1;
                if std::mem::take(&mut this.passing) {
                    this.out = Out::Data { end };
                } else {
                    this.line(end);
                }
                continue;
            }
            this.searched = this.filled;
            let pending = this.filled - this.start;
            if pending > 0 && (this.passing || pending >= this.max_line || this.eof) {
                // Too long to keep (rmcp drops it), or the last bytes.
                this.passing = !this.eof;
                this.out = Out::Data { end: this.filled };
                continue;
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            this.make_room();
            let mut read = ReadBuf::new(&mut this.data[this.filled..]);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut read))?;
            match read.filled().len() {
                0 => this.eof = true,
                n => this.filled += n,
            }
        }
    }
}

//! The upstream's side: [`HoldingReader`] keeps large `resources/read`
//! results aside and hands rmcp a placeholder for each.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use rmcp::model::RequestId;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::io::poll_read_buf;

use super::{MIN_BYTES, Verbatim, Wanted, hold, placeholder, plain_json};
use crate::pipes::Widen;

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
    /// Read from the server and not handed out yet.
    data: BytesMut,
    /// Where the search for a newline in `data` resumes.
    searched: usize,
    /// Being handed out: a line as the server wrote it, or a placeholder.
    out: Bytes,
    /// A line too long to buffer, passed through until its newline.
    passing: bool,
    eof: bool,
    /// The most bytes buffered for a line ([`MAX_LINE`]).
    pub(super) max_line: usize,
    /// The longest line kept so far: room for one as long is made at once
    /// when a long line comes (instead of growing the buffer step by step).
    longest: usize,
    /// The server's pipe, widened once a large message came through it.
    widen: Widen,
}

impl<R> HoldingReader<R> {
    pub(crate) fn new(inner: R, wanted: Arc<Wanted>) -> Self {
        HoldingReader {
            inner,
            wanted,
            data: BytesMut::with_capacity(CHUNK),
            searched: 0,
            out: Bytes::new(),
            passing: false,
            eof: false,
            max_line: MAX_LINE,
            longest: 0,
            widen: Widen::default(),
        }
    }

    /// Widens the pipe `inner` reads when a large message comes through it.
    pub(crate) fn widening(mut self, widen: Widen) -> Self {
        self.widen = widen;
        self
    }

    /// What to hand out for `line`: itself, or a placeholder.
    fn line(&mut self, line: BytesMut) -> Bytes {
        let Some((id, result)) = self.keepable(&line) else {
            return line.freeze();
        };
        self.longest = self.longest.max(line.len());
        match hold(line.freeze(), result) {
            Ok(token) => placeholder(&id, &token).into(),
            // Not kept: handed out as it came.
            Err(line) => line,
        }
    }

    /// Room to read into: a chunk, or for a long line as much as the
    /// longest line kept so far (up to [`MAX_LINE`]).
    fn make_room(&mut self) {
        if self.data.capacity() - self.data.len() >= CHUNK / 4 {
            return;
        }
        let len = self.data.len();
        let want = if len >= CHUNK {
            self.longest.max(2 * len).min(self.max_line.max(CHUNK)) - len
        } else {
            CHUNK
        };
        self.data.reserve(want.max(CHUNK / 4));
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
        let how = self.wanted.take(&id)?;
        if line.len() < MIN_BYTES {
            return None;
        }
        let result = answer.result?;
        if !is_object(result) || !plain_json(result.get().as_bytes()) {
            return None;
        }
        // Without a backslash the texts are skimmed, not scanned again.
        let raw = result.get();
        let fits = if memchr::memchr(b'\\', raw.as_bytes()).is_none() {
            serde_json::from_str::<ReadResult<'_, Skimmed>>(raw).is_ok_and(|r| r.fits(how))
        } else {
            serde_json::from_str::<ReadResult<'_, Scanned>>(raw).is_ok_and(|r| r.fits(how))
        };
        if !fits {
            return None;
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
/// copying or unescaping their text. `S` reads the text or blob of each
/// ([`Skimmed`] or [`Scanned`]).
#[derive(Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
struct ReadResult<'a, S> {
    #[serde(borrow)]
    contents: Vec<Contents<'a, S>>,
    #[serde(borrow, rename = "resultType")]
    result_type: Option<&'a RawValue>,
    #[serde(borrow, rename = "ttlMs")]
    ttl_ms: Option<&'a RawValue>,
    #[serde(borrow, rename = "cacheScope")]
    cache_scope: Option<&'a RawValue>,
    #[serde(borrow, rename = "_meta")]
    meta: Option<&'a RawValue>,
}

impl<S> ReadResult<'_, S> {
    /// Whether a client of `how`'s revision may get this result as it is.
    fn fits(&self, how: Verbatim) -> bool {
        // A 2026-07-28 server's result says `complete` and carries caching
        // hints, which a 2026-07-28 client needs; an earlier server's has
        // none, and is decoded for such a client (rmcp adds them). A 2025
        // client may get `resultType` (its revision's results allow any
        // field), where rmcp would remove it.
        let complete = self.result_type.map(RawValue::get) == Some("\"complete\"");
        // The caching hints as rmcp reads them, when present.
        let ttl_ok = self
            .ttl_ms
            .is_none_or(|t| serde_json::from_str::<u64>(t.get()).is_ok());
        let scope_ok = self
            .cache_scope
            .is_none_or(|c| serde_json::from_str::<rmcp::model::CacheScope>(c.get()).is_ok());
        let revision_ok = if how.modern {
            complete && self.ttl_ms.is_some() && self.cache_scope.is_some()
        } else {
            self.result_type.is_none() || complete
        };
        ttl_ok
            && scope_ok
            && revision_ok
            && self.meta.is_none_or(is_object)
            && self.contents.iter().all(Contents::is_valid)
    }
}

/// One of a read result's contents: a URI and either text or a blob, all
/// strings, and the optional fields MCP defines with their types. Read
/// from a JSON object only, its fields once each (a key written twice, or
/// escaped, is refused: clients could read either value).
struct Contents<'a, S> {
    uri: Option<&'a RawValue>,
    text: Option<S>,
    blob: Option<S>,
    mime_type: Option<&'a RawValue>,
    meta: Option<&'a RawValue>,
}

/// A JSON string in a result without a backslash, read for its end only
/// (serde_json's byte-string path: a quote search): the whole answer was
/// checked to be JSON (the `Answer` it is part of), every character once,
/// and the text of a large result is most of its bytes. With escapes that
/// path copies the string, so such results are [`Scanned`].
struct Skimmed;

impl<'de> Deserialize<'de> for Skimmed {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_bytes(SkimVisitor)
    }
}

struct SkimVisitor;

impl serde::de::Visitor<'_> for SkimVisitor {
    type Value = Skimmed;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a string")
    }

    fn visit_bytes<E: serde::de::Error>(self, _: &[u8]) -> Result<Skimmed, E> {
        Ok(Skimmed)
    }
}

/// A JSON string read as a borrowed raw value (every byte checked again,
/// nothing copied).
struct Scanned;

impl<'de> Deserialize<'de> for Scanned {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw: &'de RawValue = Deserialize::deserialize(deserializer)?;
        if raw.get().starts_with('"') {
            Ok(Scanned)
        } else {
            Err(serde::de::Error::custom("a string"))
        }
    }
}

impl<'de: 'a, 'a, S: Deserialize<'de>> Deserialize<'de> for Contents<'a, S> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ContentsVisitor(std::marker::PhantomData))
    }
}

struct ContentsVisitor<'a, S>(std::marker::PhantomData<(&'a (), S)>);

impl<'de: 'a, 'a, S: Deserialize<'de>> serde::de::Visitor<'de> for ContentsVisitor<'a, S> {
    type Value = Contents<'a, S>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("resource contents, an object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut contents = Contents {
            uri: None,
            text: None,
            blob: None,
            mime_type: None,
            meta: None,
        };
        while let Some(key) = map.next_key::<&'de str>()? {
            let string = match key {
                "text" => Some(&mut contents.text),
                "blob" => Some(&mut contents.blob),
                _ => None,
            };
            if let Some(slot) = string {
                if slot.is_some() {
                    return Err(serde::de::Error::duplicate_field("contents field"));
                }
                *slot = Some(map.next_value::<S>()?);
                continue;
            }
            let slot = match key {
                "uri" => &mut contents.uri,
                "mimeType" => &mut contents.mime_type,
                "_meta" => &mut contents.meta,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            if slot.is_some() {
                return Err(serde::de::Error::duplicate_field("contents field"));
            }
            *slot = Some(map.next_value::<&'de RawValue>()?);
        }
        Ok(contents)
    }
}

impl<S> Contents<'_, S> {
    fn is_valid(&self) -> bool {
        let string = |v: &RawValue| v.get().starts_with('"');
        self.uri.is_some_and(string)
            && self.mime_type.is_none_or(string)
            && self.meta.is_none_or(is_object)
            && self.text.is_some() != self.blob.is_some()
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
            if !this.out.is_empty() {
                let n = buf.remaining().min(this.out.len());
                buf.put_slice(&this.out.split_to(n));
                return Poll::Ready(Ok(()));
            }
            if let Some(i) = memchr::memchr(b'\n', &this.data[this.searched..]) {
                let line = this.data.split_to(this.searched + i + 1);
                if line.len() >= MIN_BYTES {
                    this.widen.fit(line.len());
                }
                this.searched = 0;
                this.out = if std::mem::take(&mut this.passing) {
                    line.freeze()
                } else {
                    this.line(line)
                };
                continue;
            }
            this.searched = this.data.len();
            let pending = this.data.len();
            if pending > 0 && (this.passing || pending >= this.max_line || this.eof) {
                // Too long to keep (rmcp drops it), or the last bytes.
                this.widen.fit(pending);
                this.passing = !this.eof;
                this.out = this.data.split().freeze();
                this.searched = 0;
                continue;
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            this.make_room();
            if ready!(poll_read_buf(Pin::new(&mut this.inner), cx, &mut this.data))? == 0 {
                this.eof = true;
            }
        }
    }
}

//! The client's side: [`ReleasingWriter`] writes a kept result where rmcp
//! wrote its placeholder.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::AsyncWrite;

use super::{MARKER_KEY, release};
use crate::pipes::Widen;

/// A longer message is not a placeholder (those are about 150 bytes).
const PLACEHOLDER_MAX: usize = 1024;

/// Writes rmcp's messages to the client unchanged, except a placeholder
/// answer, which it replaces with the answer kept for it (see the module
/// docs): the answer's id and the kept result's bytes.
pub(crate) struct ReleasingWriter<W> {
    inner: W,
    /// The start of a message that may be a placeholder.
    line: Vec<u8>,
    /// Passing a longer message through, until its newline.
    passing: bool,
    /// To write before anything else.
    out: VecDeque<Bytes>,
    /// The client's pipe, widened once a large message went through it.
    widen: Widen,
}

impl<W> ReleasingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        ReleasingWriter {
            inner,
            line: Vec::new(),
            passing: false,
            out: VecDeque::new(),
            widen: Widen::default(),
        }
    }

    /// Widens the pipe `fd` (what `inner` writes to, held open as long as
    /// it) when large messages go through it.
    pub(crate) fn widening(mut self, fd: std::os::fd::RawFd) -> Self {
        self.widen = Widen::pipe(fd);
        self
    }

    /// Queues the message `line` (newline included), or the kept answer it
    /// is the placeholder of.
    fn queue(&mut self, line: Vec<u8>) {
        let placeholder = (line.len() <= PLACEHOLDER_MAX
            && memchr::memmem::find(&line, MARKER_KEY).is_some())
        .then(|| serde_json::from_slice::<Placeholder<'_>>(&line).ok())
        .flatten();
        let Some(placeholder) = placeholder else {
            self.out.push_back(line.into());
            return;
        };
        let id = placeholder.id.get();
        match release(&placeholder.result.meta.token) {
            Some(kept) => {
                self.widen.fit(kept.result.len());
                let head = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":");
                self.out.push_back(head.into());
                self.out.push_back(kept.line.slice(kept.result));
                self.out.push_back(Bytes::from_static(b"}\n"));
            }
            // Its result was dropped (kept too long) or released already:
            // an error for its request, never the empty placeholder.
            None => {
                let error = format!(
                    "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32603,\"message\":\"the server's answer was dropped before it could be sent (kept over {} s)\"}}}}\n",
                    super::HOLD_FOR.as_secs()
                );
                self.out.push_back(error.into());
            }
        }
    }

    /// Writes out what is queued.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>
    where
        W: AsyncWrite + Unpin,
    {
        while let Some(bytes) = self.out.front_mut() {
            if bytes.is_empty() {
                self.out.pop_front();
                continue;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, bytes))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            bytes.advance(n);
        }
        Poll::Ready(Ok(()))
    }
}

/// A placeholder answer, as rmcp wrote it.
#[derive(Deserialize)]
struct Placeholder<'a> {
    #[serde(borrow)]
    id: &'a RawValue,
    result: PlaceholderResult,
}

#[derive(Deserialize)]
struct PlaceholderResult {
    #[serde(rename = "_meta")]
    meta: PlaceholderMeta,
}

#[derive(Deserialize)]
struct PlaceholderMeta {
    #[serde(rename = "io.toolexec/verbatim")]
    token: String,
}

impl<W: AsyncWrite + Unpin> AsyncWrite for ReleasingWriter<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let newline = memchr::memchr(b'\n', buf);
        let end = newline.map_or(buf.len(), |i| i + 1);
        if !this.passing && this.line.len() + end > PLACEHOLDER_MAX {
            // Not a placeholder: what was gathered of it goes first.
            this.passing = true;
            let gathered = std::mem::take(&mut this.line);
            if !gathered.is_empty() {
                this.out.push_back(gathered.into());
                ready!(this.poll_drain(cx))?;
            }
        }
        if this.passing {
            if end >= super::MIN_BYTES {
                this.widen.fit(end);
            }
            let n = ready!(Pin::new(&mut this.inner).poll_write(cx, &buf[..end]))?;
            if n == end && newline.is_some() {
                this.passing = false;
            }
            return Poll::Ready(Ok(n));
        }
        this.line.extend_from_slice(&buf[..end]);
        if newline.is_some() {
            let line = std::mem::take(&mut this.line);
            this.queue(line);
        }
        Poll::Ready(Ok(end))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.line.is_empty() {
            // Flushed mid-message (rmcp writes whole lines): sent as it is.
            let line = std::mem::take(&mut this.line);
            this.out.push_back(line.into());
            this.passing = true;
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.as_mut().poll_flush(cx))?;
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

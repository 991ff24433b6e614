//! Capped in-memory stdout and stderr for WASI, shared by both streams.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use toolexec_runtime::OutputSink;
use toolexec_sandbox::Capture;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// The error that ends a run whose output went past the cap.
#[derive(Debug, Clone, thiserror::Error)]
#[error("output limit of {cap} bytes (stdout plus stderr) exceeded")]
pub(crate) struct OutputOverflow {
    /// The cap.
    pub cap: usize,
}

/// The stdout and stderr of one run: the shared capture (one cap on
/// their sum, forwarded live to the run's output sink). A write past the
/// cap keeps what fits, marks the run overflowed and traps.
#[derive(Clone)]
pub(crate) struct Output {
    cap: usize,
    capture: Capture,
}

/// Which of the two streams.
pub(crate) use toolexec_runtime::OutputStream as Stream;

impl Output {
    /// Empty buffers under `cap` bytes in total, forwarding to `live`.
    pub(crate) fn new(cap: usize, live: Option<OutputSink>) -> Self {
        Output {
            cap,
            capture: Capture::new(cap, live),
        }
    }

    /// Appends to `stream`; past the cap, keeps what fits and fails.
    pub(crate) fn write(&self, stream: Stream, bytes: &[u8]) -> Result<(), OutputOverflow> {
        if self.capture.push(stream, bytes) {
            Ok(())
        } else {
            Err(OutputOverflow { cap: self.cap })
        }
    }

    /// Whether a write went past the cap.
    pub(crate) fn overflowed(&self) -> bool {
        self.capture.did_overflow()
    }

    /// Takes stdout and stderr as (lossy) UTF-8.
    pub(crate) fn contents(&self) -> (String, String) {
        let (stdout, stderr) = self.capture.take();
        (
            String::from_utf8_lossy(&stdout).into_owned(),
            String::from_utf8_lossy(&stderr).into_owned(),
        )
    }

    /// A WASI stream writing to `stream`.
    pub(crate) fn pipe(&self, stream: Stream) -> Pipe {
        Pipe {
            output: self.clone(),
            stream,
        }
    }
}

/// One WASI stdio stream of an [`Output`].
#[derive(Clone)]
pub(crate) struct Pipe {
    output: Output,
    stream: Stream,
}

/// Bytes WASI may write per permit; writes past the cap still trap.
const PERMIT: usize = 64 << 10;

impl IsTerminal for Pipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Pipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Pipe {
    async fn ready(&mut self) {}
}

impl OutputStream for Pipe {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.output
            .write(self.stream, &bytes)
            .map_err(|e| StreamError::Trap(wasmtime::Error::new(e)))
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(PERMIT)
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Poll::Ready(
            self.output
                .write(self.stream, buf)
                .map(|()| buf.len())
                .map_err(std::io::Error::other),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_covers_both_streams_and_keeps_what_fits() {
        let (sink, mut live) = OutputSink::channel();
        let out = Output::new(10, Some(sink));
        out.write(Stream::Stdout, b"hello").unwrap();
        out.write(Stream::Stderr, b"1234").unwrap();
        assert!(!out.overflowed());
        let err = out.write(Stream::Stdout, b"abc").unwrap_err();
        assert_eq!(err.cap, 10);
        assert!(out.overflowed());
        assert_eq!(out.contents(), ("helloa".into(), "1234".into()));
        let mut seen = Vec::new();
        while let Ok(chunk) = live.try_recv() {
            seen.extend(chunk.bytes);
        }
        assert_eq!(seen, b"hello1234a", "what was kept went live, in order");
    }
}

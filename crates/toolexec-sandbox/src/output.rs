//! Captured stdout and stderr with one shared byte budget, forwarded live
//! to the run's [`OutputSink`] as they arrive: what every runtime that
//! reads a unit's output (pipes, a container's attach stream) shares.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::io::AsyncReadExt;
use tokio::sync::Notify;
use toolexec_runtime::{OutputSink, OutputStream};

/// The output of one run: up to `max` bytes of stdout and stderr together.
/// Clones share the budget and the buffers.
#[derive(Clone)]
pub struct Capture {
    max: usize,
    state: Arc<Mutex<State>>,
    overflow: Arc<Notify>,
    live: Option<OutputSink>,
}

#[derive(Default)]
struct State {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    overflowed: bool,
}

impl Capture {
    /// A capture of at most `max` bytes, forwarding what it keeps to `live`.
    pub fn new(max: usize, live: Option<OutputSink>) -> Self {
        Capture {
            max,
            state: Arc::default(),
            overflow: Arc::new(Notify::new()),
            live,
        }
    }

    /// Keeps what fits of `bytes` and forwards it live. Returns `false`
    /// once the budget is passed (the rest is dropped and
    /// [`Capture::overflowed`] resolves).
    pub fn push(&self, stream: OutputStream, bytes: &[u8]) -> bool {
        let keep = {
            let mut state = self.state.lock();
            if state.overflowed {
                return false;
            }
            let used = state.stdout.len() + state.stderr.len();
            let keep = bytes.len().min(self.max.saturating_sub(used));
            let buffer = match stream {
                OutputStream::Stdout => &mut state.stdout,
                OutputStream::Stderr => &mut state.stderr,
            };
            buffer.extend_from_slice(&bytes[..keep]);
            state.overflowed = keep < bytes.len();
            keep
        };
        if let Some(live) = self.live.as_ref().filter(|_| keep > 0) {
            live.send(stream, &bytes[..keep]);
        }
        if keep < bytes.len() {
            self.overflow.notify_one();
            return false;
        }
        true
    }

    /// Reads `pipe` as `stream` to its end, or until the budget is passed.
    pub async fn drain(self, mut pipe: impl tokio::io::AsyncRead + Unpin, stream: OutputStream) {
        let mut chunk = vec![0u8; 16 * 1024];
        loop {
            match pipe.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) if !self.push(stream, &chunk[..n]) => return,
                Ok(_) => {}
            }
        }
    }

    /// Resolves once the unit wrote more than the budget.
    pub async fn overflowed(&self) {
        self.overflow.notified().await
    }

    /// Whether the budget was passed.
    pub fn did_overflow(&self) -> bool {
        self.state.lock().overflowed
    }

    /// Takes stdout and stderr, leaving the buffers empty.
    pub fn take(&self) -> (Vec<u8>, Vec<u8>) {
        let mut state = self.state.lock();
        (
            std::mem::take(&mut state.stdout),
            std::mem::take(&mut state.stderr),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_budget_is_shared_and_forwarded_live() {
        let (sink, mut rx) = OutputSink::channel();
        let capture = Capture::new(10, Some(sink));
        assert!(capture.push(OutputStream::Stdout, b"hello"));
        assert!(capture.push(OutputStream::Stderr, b"oops"));
        assert!(!capture.push(OutputStream::Stdout, b"world"));
        assert!(capture.did_overflow());
        capture.overflowed().await;
        assert!(!capture.push(OutputStream::Stdout, b"more"));
        let (out, err) = capture.take();
        assert_eq!((&out[..], &err[..]), (&b"hellow"[..], &b"oops"[..]));
        let mut live = Vec::new();
        while let Ok(chunk) = rx.try_recv() {
            live.push((chunk.stream, chunk.bytes));
        }
        assert_eq!(live.len(), 3, "{live:?}");
        assert_eq!(live[2].0, OutputStream::Stdout);
    }
}

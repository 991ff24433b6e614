//! stdout and stderr from the attach stream, with one shared byte budget.

use std::pin::Pin;
use std::sync::Arc;

use bollard::container::LogOutput;
use futures::{Stream, StreamExt};
use parking_lot::Mutex;
use tokio::sync::Notify;

/// The captured output of one run.
#[derive(Clone)]
pub(crate) struct Capture {
    max: usize,
    state: Arc<Mutex<State>>,
    overflow: Arc<Notify>,
}

#[derive(Default)]
struct State {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    overflowed: bool,
}

/// The attach output stream.
pub(crate) type OutputStream =
    Pin<Box<dyn Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

impl Capture {
    pub(crate) fn new(max: usize) -> Self {
        Capture {
            max,
            state: Arc::default(),
            overflow: Arc::new(Notify::new()),
        }
    }

    /// Reads the stream to its end, or until the budget is spent.
    pub(crate) async fn drain(self, mut output: OutputStream) {
        while let Some(Ok(chunk)) = output.next().await {
            let (is_err, bytes) = match chunk {
                LogOutput::StdErr { message } => (true, message),
                LogOutput::StdOut { message } | LogOutput::Console { message } => (false, message),
                LogOutput::StdIn { .. } => continue,
            };
            let mut state = self.state.lock();
            let used = state.stdout.len() + state.stderr.len();
            let keep = bytes.len().min(self.max.saturating_sub(used));
            let buffer = if is_err {
                &mut state.stderr
            } else {
                &mut state.stdout
            };
            buffer.extend_from_slice(&bytes[..keep]);
            if keep < bytes.len() {
                state.overflowed = true;
                drop(state);
                self.overflow.notify_one();
                return;
            }
        }
    }

    /// Resolves once the unit wrote more than the budget.
    pub(crate) async fn overflowed(&self) {
        self.overflow.notified().await
    }

    /// Whether the budget was passed.
    pub(crate) fn did_overflow(&self) -> bool {
        self.state.lock().overflowed
    }

    /// stdout and stderr, lossy UTF-8.
    pub(crate) fn take(&self) -> (String, String) {
        let mut state = self.state.lock();
        (
            String::from_utf8_lossy(&std::mem::take(&mut state.stdout)).into_owned(),
            String::from_utf8_lossy(&std::mem::take(&mut state.stderr)).into_owned(),
        )
    }
}

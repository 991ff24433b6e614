//! A stdio server's transport: rmcp's line transport over the child's
//! pipes, its stdout read through a [`HoldingReader`] (results relayed
//! verbatim, see `crate::verbatim`). rmcp's `TokioChildProcess` does not
//! expose the child's stdout, so this spawns the child itself and shuts it
//! down the way `TokioChildProcess` does (the MCP stdio shutdown: close its
//! stdin, wait, `SIGTERM`, wait, kill).

use std::borrow::Cow;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use crate::verbatim::{HoldingReader, Wanted};

/// How long the server has to exit after its stdin closes, and again after
/// `SIGTERM`.
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// A spawned server and the transport over its pipes.
pub(crate) struct ChildStdio {
    /// `None` once it exited or was killed (`kill_on_drop` covers a drop
    /// before that).
    child: Option<Child>,
    transport: AsyncRwTransport<RoleClient, HoldingReader<ChildStdout>, ChildStdin>,
}

impl ChildStdio {
    /// Spawns `cmd` with piped stdio; its stderr is returned to be read.
    pub(crate) fn spawn(
        mut cmd: tokio::process::Command,
        wanted: Arc<Wanted>,
    ) -> std::io::Result<(Self, ChildStderr)> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn()?;
        let missing = || std::io::Error::other("the child's pipes were not set up");
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let widen = crate::pipes::Widen::pipe(std::os::fd::AsRawFd::as_raw_fd(&stdout));
        let reader = HoldingReader::new(stdout, wanted).widening(widen);
        let transport = AsyncRwTransport::new(reader, stdin);
        Ok((
            ChildStdio {
                child: Some(child),
                transport,
            },
            stderr,
        ))
    }

    /// The server's process id, while it runs.
    pub(crate) fn id(&self) -> Option<u32> {
        self.child.as_ref()?.id()
    }

    /// Closes the server's stdin and waits for it to exit; `SIGTERM`, then
    /// a kill, if it does not.
    async fn shutdown(&mut self) -> std::io::Result<()> {
        self.transport.close().await?;
        let Some(child) = self.child.as_mut() else {
            return Ok(());
        };
        let exited = |r: Result<std::io::Result<_>, _>| matches!(r, Ok(Ok(_)));
        if exited(tokio::time::timeout(EXIT_WAIT, child.wait()).await) {
            self.child = None;
            return Ok(());
        }
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) on our own child's pid, which is not reaped
            // yet (`id` is `None` once it is), so it names no other process.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            if exited(tokio::time::timeout(EXIT_WAIT, child.wait()).await) {
                self.child = None;
                return Ok(());
            }
        }
        let killed = child.kill().await;
        self.child = None;
        killed
    }
}

impl Transport<RoleClient> for ChildStdio {
    type Error = std::io::Error;

    fn name() -> Cow<'static, str> {
        "ChildStdio".into()
    }

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.transport.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.transport.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.shutdown()
    }
}

//! The runsc channel socket. gVisor cannot inherit descriptor 3, so the
//! unit reaches the host through a Unix socket in a per-run directory
//! bound into the sandbox. Socket paths are short (108 bytes), so the
//! directory lives in [`crate::OciConfig::channel_dir`], a private parent
//! (see [`toolexec_sandbox::channel_socket::private_dir`]) that other
//! local users cannot traverse; the host also serves only connections
//! whose peer has this process's uid (gVisor's gofer, which connects on
//! the unit's behalf): [`PeerPolicy::current_user`].

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_util::task::AbortOnDropHandle;
use toolexec::CancellationToken;
use toolexec_runtime::protocol::{ChannelServer, ProtocolError};
use toolexec_sandbox::channel_socket::PeerPolicy;

use crate::OciError;
use crate::spec;

/// Binds `<parent>/<name>/channel.sock` in a fresh directory (an existing
/// one is an error), after checking `parent` is private. The run directory
/// is 0755 and the socket 0666 because the unit (uid `nobody` inside the
/// sandbox) sees them through the bind mount; on the host, the 0700
/// parent keeps other users out.
pub(crate) fn bind(parent: &Path, name: &str) -> Result<(PathBuf, UnixListener), OciError> {
    OciError::private_dir("runtime.channel_dir", parent)?;
    let dir = parent.join(name);
    let err =
        |e: std::io::Error| OciError::setup(format!("channel socket in {}: {e}", dir.display()));
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(&dir)
        .map_err(err)?;
    let bound = (|| {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let path = dir.join(spec::CHANNEL_SOCKET_NAME);
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))?;
        Ok(listener)
    })();
    match bound {
        Ok(listener) => Ok((dir, listener)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(err(e))
        }
    }
}

/// How long tool calls still in flight when the unit is gone may take
/// before they are abandoned (and logged as cancelled), as for runc.
const CALLS_GRACE: Duration = Duration::from_millis(200);

/// The most [`finish`] waits for the unit's end of the connection to
/// close. Once the launcher has exited by itself, gVisor has destroyed
/// the sandbox and the end is closed already; the bound is only a
/// backstop against a sandbox that outlives its launcher.
const FINISH_LIMIT: Duration = Duration::from_secs(10);

/// Accepts the unit's one channel connection and serves it; connections
/// from another uid are closed unserved. A protocol violation ends the
/// run.
///
/// `exited` is cancelled once the launcher has exited by itself: all the
/// unit wrote is then in the socket (gVisor writes a host socket's data
/// through before the unit's `write` returns), but this task may not have
/// read it yet, typically the script worker's last frame, a `result`
/// notification nothing answers. So a connection already waiting is still
/// accepted, every frame is read up to the end of the connection, and only
/// then are calls still in flight given [`CALLS_GRACE`].
pub(crate) async fn serve(
    listener: UnixListener,
    server: ChannelServer,
    error: Arc<Mutex<Option<ProtocolError>>>,
    cancel: CancellationToken,
    exited: CancellationToken,
) {
    let policy = PeerPolicy::current_user();
    let stream = tokio::select! {
        biased;
        accepted = policy.accept(&listener) => match accepted {
            Ok(stream) => stream,
            Err(_) => return,
        },
        // The unit never connected.
        () = exited.cancelled() => return,
    };
    // One connection per run: later ones are refused.
    drop(listener);
    let closed = CancellationToken::new();
    let stream = UntilClosed {
        stream,
        closed: closed.clone(),
    };
    let abandon = async {
        exited.cancelled().await;
        closed.cancelled().await;
        tokio::time::sleep(CALLS_GRACE).await;
    };
    tokio::select! {
        served = server.serve(stream) => {
            if let Err(e) = served {
                *error.lock() = Some(e);
                cancel.cancel();
            }
        }
        () = abandon => {}
    }
}

/// Waits for [`serve`] to take the unit's last frames after the launcher
/// exited by itself (`exited` cancelled), at most [`FINISH_LIMIT`];
/// past that the task is aborted.
pub(crate) async fn finish(task: AbortOnDropHandle<()>) {
    if tokio::time::timeout(FINISH_LIMIT, task).await.is_err() {
        tracing::warn!(
            "the channel connection stayed open {FINISH_LIMIT:?} after the launcher exited; abandoned"
        );
    }
}

/// The unit's connection, noting when its end is closed (a read of
/// nothing, or a read error): every frame it sent has been read then.
struct UntilClosed {
    stream: UnixStream,
    closed: CancellationToken,
}

impl AsyncRead for UntilClosed {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        let ended = match &polled {
            Poll::Ready(Ok(())) => buf.filled().len() == before && buf.remaining() > 0,
            Poll::Ready(Err(_)) => true,
            Poll::Pending => false,
        };
        if ended {
            self.closed.cancel();
        }
        polled
    }
}

impl AsyncWrite for UntilClosed {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::process::CommandExt;
    use toolexec_runtime::protocol::{ChannelClient, ChannelConfig};
    use toolexec_runtime::{RuntimeLimits, ToolHost};

    fn skip(test: &str, why: &str) {
        assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
        let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
    }

    fn scratch(test: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("toolexec-oci-gw-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Python as uid `nobody`: connect to `path`, print what happened.
    fn connect_as_nobody(path: &Path) -> String {
        let py = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\nexcept PermissionError:\n    print('denied'); sys.exit()\nprint('closed' if s.recv(1) == b'' else 'served')";
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", py])
            .arg(path)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    #[test]
    fn parent_is_private_and_checked() {
        use std::os::unix::fs::MetadataExt;
        let base = scratch("parent");
        let parent = base.join("gw");
        let (dir, listener) = {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let _enter = rt.enter();
            bind(&parent, "run-1").unwrap()
        };
        drop(listener);
        let meta = std::fs::symlink_metadata(&parent).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        assert!(dir.starts_with(&parent));
        // A name already taken is not reused.
        assert!(bind(&parent, "run-1").is_err());
        // A symlink (even to a private directory of ours) is refused,
        // typed and naming the setting and the path.
        let link = base.join("link");
        std::os::unix::fs::symlink(&parent, &link).unwrap();
        let e = bind(&link, "run-2").unwrap_err();
        let body = e.to_body();
        assert_eq!(body.code.as_str(), "backend_unavailable");
        let details = body.details.unwrap();
        assert_eq!(details["field"], "runtime.channel_dir");
        assert_eq!(details["path"], link.display().to_string());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[tokio::test]
    async fn other_users_cannot_reach_the_channel() {
        let test = "other_users_cannot_reach_the_channel";
        let euid = toolexec_sandbox::channel_socket::euid();
        if euid == 0 && !Path::new("/usr/bin/python3").exists() {
            return skip(test, "/usr/bin/python3 is missing");
        }
        if euid != 0 {
            return skip(test, "needs root to run a client as another uid");
        }
        let base = scratch("reach");
        // Through the private parent: no search permission for nobody.
        let (dir, listener) = bind(&base.join("gw"), "run").unwrap();
        let path = dir.join(spec::CHANNEL_SOCKET_NAME);
        let who = tokio::task::spawn_blocking(move || connect_as_nobody(&path));
        assert_eq!(who.await.unwrap(), "denied");
        drop(listener);

        // Even where the path is open to all, a foreign uid is not served,
        // and the run's own connection still is.
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = open.join("g.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let limits = RuntimeLimits::default();
        let server = ChannelServer::new(ToolHost::without_tools(&limits), ChannelConfig::default());
        let error = Arc::default();
        let serving = tokio::spawn(serve(
            listener,
            server,
            error,
            CancellationToken::new(),
            CancellationToken::new(),
        ));
        let nobody_path = path.clone();
        let who = tokio::task::spawn_blocking(move || connect_as_nobody(&nobody_path));
        assert_eq!(who.await.unwrap(), "closed");
        let client = ChannelClient::new(tokio::net::UnixStream::connect(&path).await.unwrap());
        client.hello().await.unwrap();
        serving.abort();
        std::fs::remove_dir_all(&base).unwrap();
    }
}

//! The per-run gateway socket: Docker cannot pass descriptors, so each run
//! gets a Unix socket in a private host directory, bind-mounted into the
//! container, served with the shared [`GatewayServer`].

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::net::UnixListener;
use toolexec::CancellationToken;
use toolexec_runtime::protocol::{GatewayServer, ProtocolError};

/// Connections one run may hold open at once; more wait in the backlog.
const MAX_CONNECTIONS: usize = 16;

/// A listening gateway socket in its own directory, removed on drop.
#[derive(Debug)]
pub(crate) struct GatewaySocket {
    dir: PathBuf,
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl GatewaySocket {
    /// Binds `<base>/toolexec-docker-<run_id>/gateway.sock`: the directory
    /// is the owner's only (the daemon, as root, bind-mounts the socket
    /// itself), the socket is connectable by any uid (units run as nobody).
    pub(crate) fn bind(base: &Path, run_id: &str) -> std::io::Result<Self> {
        let dir = base.join(format!("toolexec-docker-{run_id}"));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("gateway.sock");
        // From here on, drop removes the directory whatever fails.
        let mut socket = GatewaySocket {
            dir,
            path,
            listener: None,
        };
        socket.listener = Some(UnixListener::bind(&socket.path)?);
        std::fs::set_permissions(&socket.path, std::fs::Permissions::from_mode(0o666))?;
        Ok(socket)
    }

    /// The socket's directory on the host.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The socket's host path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the listener (once).
    pub(crate) fn take_listener(&mut self) -> Option<UnixListener> {
        self.listener.take()
    }
}

impl Drop for GatewaySocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Accepts the container's connections and serves each against the run's
/// tool host, until `stop` (then until the open sessions end). Returns the
/// first protocol violation, which ends the run.
pub(crate) async fn serve(
    listener: UnixListener,
    server: GatewayServer,
    stop: CancellationToken,
) -> Option<ProtocolError> {
    let mut sessions = FuturesUnordered::new();
    let mut accepting = true;
    loop {
        if !accepting && sessions.is_empty() {
            return None;
        }
        tokio::select! {
            _ = stop.cancelled(), if accepting => accepting = false,
            accepted = listener.accept(), if accepting && sessions.len() < MAX_CONNECTIONS => {
                match accepted {
                    Ok((stream, _)) => {
                        let server = server.clone();
                        sessions.push(async move { server.serve(stream).await });
                    }
                    // Out of descriptors or similar: the unit's calls fail,
                    // the run goes on.
                    Err(e) => {
                        tracing::warn!("docker gateway: accept failed: {e}");
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    }
                }
            }
            Some(result) = sessions.next(), if !sessions.is_empty() => {
                if let Err(e) = result {
                    return Some(e);
                }
            }
        }
    }
}

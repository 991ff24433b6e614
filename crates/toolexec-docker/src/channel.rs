//! The per-run channel socket: Docker cannot pass descriptors, so each run
//! gets a Unix socket in a private host directory, bind-mounted into the
//! container, served with the shared [`ChannelServer`] to the unit's uid
//! only ([`PeerPolicy`], the policy the OCI runtime's socket has too).

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::net::UnixListener;
use toolexec::CancellationToken;
use toolexec_runtime::protocol::{ChannelServer, ProtocolError};
use toolexec_sandbox::channel_socket::PeerPolicy;

/// Connections one run may hold open at once; more wait in the backlog.
const MAX_CONNECTIONS: usize = 16;

/// A listening channel socket in its own directory, removed on drop.
#[derive(Debug)]
pub(crate) struct ChannelSocket {
    dir: PathBuf,
    path: PathBuf,
    listener: Option<UnixListener>,
}

impl ChannelSocket {
    /// Binds `<base>/toolexec-docker-<run_id>/channel.sock`: the directory
    /// is the owner's only (the daemon, as root, bind-mounts the socket
    /// itself), the socket is connectable by any uid (units run as nobody).
    pub(crate) fn bind(base: &Path, run_id: &str) -> std::io::Result<Self> {
        let dir = base.join(format!("toolexec-docker-{run_id}"));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let path = dir.join("channel.sock");
        // From here on, drop removes the directory whatever fails.
        let mut socket = ChannelSocket {
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

impl Drop for ChannelSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Accepts the container's connections that `policy` admits (the unit's
/// host uid, from `SO_PEERCRED`; others are closed unserved) and serves
/// each against the run's tool host, until `stop` (then until the open
/// sessions end). Returns the first protocol violation, which ends the run.
pub(crate) async fn serve(
    listener: UnixListener,
    server: ChannelServer,
    stop: CancellationToken,
    policy: PeerPolicy,
) -> Option<ProtocolError> {
    let mut sessions = FuturesUnordered::new();
    let mut accepting = true;
    loop {
        if !accepting && sessions.is_empty() {
            return None;
        }
        tokio::select! {
            _ = stop.cancelled(), if accepting => accepting = false,
            accepted = policy.accept(&listener), if accepting && sessions.len() < MAX_CONNECTIONS => {
                match accepted {
                    Ok(stream) => {
                        let server = server.clone();
                        sessions.push(async move { server.serve(stream).await });
                    }
                    // Out of descriptors or similar: the unit's calls fail,
                    // the run goes on.
                    Err(e) => {
                        tracing::warn!("docker channel: accept failed: {e}");
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::os::unix::process::CommandExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use toolexec_runtime::protocol::ChannelConfig;
    use toolexec_runtime::{RuntimeLimits, ToolHost};

    const HELLO: &str = r#"{"id":1,"method":"hello","protocol":"toolexec-channel","version":1}"#;

    /// Python as `uid`: connect to `path`, send a hello frame, print
    /// `served` if an answer comes, `closed` if the host hangs up.
    fn python_client(path: &Path, uid: u32) -> String {
        let py = "import socket, struct, sys\ns = socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nb = sys.argv[2].encode()\ndef recv(n):\n    got = b''\n    while len(got) < n:\n        c = s.recv(n - len(got))\n        if not c: break\n        got += c\n    return got\ntry:\n    s.sendall(struct.pack('>I', len(b)) + b)\n    head = recv(4)\n    got = recv(struct.unpack('>I', head)[0]) if len(head) == 4 else b''\nexcept (BrokenPipeError, ConnectionResetError):\n    got = b''\nprint('served' if got else 'closed')";
        let out = std::process::Command::new("/usr/bin/python3")
            .args(["-c", py])
            .arg(path)
            .arg(HELLO)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Issue 10: the channel serves the unit's host uid only, as the OCI
    /// runtime's does; any other local user (root included) reaching the
    /// socket is closed unserved, and the run goes on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_the_units_uid_is_served() {
        let test = "only_the_units_uid_is_served";
        let why = if toolexec_sandbox::channel_socket::euid() != 0 {
            Some("needs root to run clients as other uids")
        } else if !Path::new("/usr/bin/python3").exists() {
            Some("/usr/bin/python3 is missing")
        } else {
            None
        };
        if let Some(why) = why {
            assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
            let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
            return;
        }
        // A directory open to all: only the peer check stands in the way.
        let dir = std::env::temp_dir().join(format!("toolexec-docker-peer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let path = dir.join("channel.sock");
        let listener = UnixListener::bind(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let limits = RuntimeLimits::default();
        let server = ChannelServer::new(ToolHost::without_tools(&limits), ChannelConfig::default());
        let stop = CancellationToken::new();
        let serving = tokio::spawn(serve(
            listener,
            server,
            stop.clone(),
            PeerPolicy::uid(65534),
        ));

        for (uid, expected) in [(12345, "closed"), (65534, "served"), (4242, "closed")] {
            let p = path.clone();
            let got = tokio::task::spawn_blocking(move || python_client(&p, uid))
                .await
                .unwrap();
            assert_eq!(got, expected, "uid {uid}");
        }
        // This process is root: not the unit, not served.
        let mut root = tokio::net::UnixStream::connect(&path).await.unwrap();
        let _ = root.write_all(&(HELLO.len() as u32).to_be_bytes()).await;
        let _ = root.write_all(HELLO.as_bytes()).await;
        let mut buf = [0u8; 4];
        let read = root.read(&mut buf).await.unwrap_or(0);
        assert_eq!(read, 0, "root's connection was served");
        stop.cancel();
        assert!(serving.await.unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! A real runtime server on loopback, and clients for it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use toolexec::{CancellationToken, Exec, Secret};
use toolexec_remote::{RemoteConfig, RemoteRuntime, RetryPolicy, RuntimeServer, ServerConfig};
use toolexec_runtime::{Profile, ProfileMap, RunOutcome, RunRequest, Runtime, Runtimes, Unit};
use toolexec_sandbox::{HostRuntime, UnsandboxedOptIn};

pub(crate) const KEY: &str = "test-key-0123456789abcdef-remote";

pub(crate) fn key() -> Secret {
    Secret::new(KEY)
}

/// A server on 127.0.0.1, stopped on drop.
pub(crate) struct TestServer {
    pub addr: SocketAddr,
    pub server: RuntimeServer,
    stop: CancellationToken,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestServer {
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// The server's runtimes: the opt-in host runtime for `dev`.
pub(crate) fn host_runtimes() -> Runtimes {
    let map = ProfileMap {
        dev: vec![HostRuntime::NAME.into()],
        ..ProfileMap::default()
    };
    let mut runtimes = Runtimes::new(map);
    runtimes.register(HostRuntime::new(
        UnsandboxedOptIn::i_understand_units_run_unsandboxed(),
    ));
    runtimes
}

pub(crate) async fn start(config: ServerConfig) -> TestServer {
    start_with(host_runtimes(), config).await
}

pub(crate) async fn start_with(runtimes: Runtimes, config: ServerConfig) -> TestServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(listener, runtimes, config)
}

pub(crate) fn serve_on(
    listener: tokio::net::TcpListener,
    runtimes: Runtimes,
    config: ServerConfig,
) -> TestServer {
    let addr = listener.local_addr().unwrap();
    let server = RuntimeServer::new(runtimes, config);
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    tokio::spawn(
        server
            .clone()
            .serve(listener, async move { shutdown.cancelled().await }),
    );
    TestServer { addr, server, stop }
}

/// A port held by a bound socket that does not listen: connecting is
/// refused at once (no self-connect, no other test can take the port)
/// until [`ReservedPort::listen`] hands it to a server.
pub(crate) struct ReservedPort {
    socket: socket2::Socket,
    pub addr: SocketAddr,
}

impl ReservedPort {
    pub(crate) fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        // No SO_REUSEADDR: nobody else can bind the port while we hold it.
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        socket
            .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        let addr = socket.local_addr().unwrap().as_socket().unwrap();
        ReservedPort { socket, addr }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts listening on the held port.
    pub(crate) fn listen(self) -> tokio::net::TcpListener {
        self.socket.listen(128).unwrap();
        self.socket.set_nonblocking(true).unwrap();
        tokio::net::TcpListener::from_std(self.socket.into()).unwrap()
    }
}

pub(crate) fn client_config(url: &str) -> RemoteConfig {
    let mut config = RemoteConfig::new(url, Some(key()));
    config.max_profile = Profile::Dev;
    config.retry = RetryPolicy {
        max_attempts: 3,
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
    };
    config
}

pub(crate) fn client(url: &str) -> Arc<RemoteRuntime> {
    Arc::new(RemoteRuntime::new(client_config(url)).unwrap())
}

/// The caller's runtimes: only `remote`, for `dev`.
pub(crate) fn caller_runtimes(remote: Arc<RemoteRuntime>) -> Runtimes {
    let map = ProfileMap {
        dev: vec![RemoteRuntime::NAME.into()],
        ..ProfileMap::default()
    };
    let mut runtimes = Runtimes::new(map);
    runtimes.register_arc(remote);
    runtimes
}

/// Runs `request` on `remote` directly (no availability probe), with the
/// built-in catalog on the caller's side.
pub(crate) async fn run_direct(
    remote: &RemoteRuntime,
    request: RunRequest,
    exec: &Exec,
) -> RunOutcome {
    let cancel = CancellationToken::new();
    let host = toolexec_runtime::ToolHost::new(exec.clone(), &request.limits, cancel.clone());
    remote
        .run(
            request,
            toolexec_runtime::RunContext {
                host,
                cancel,
                output: None,
            },
        )
        .await
}

pub(crate) fn dev(unit: Unit) -> RunRequest {
    RunRequest::new(unit, Profile::Dev)
}

pub(crate) use toolexec_testkit::python3;

/// A python channel client prelude: `call(tool, args)` returns the answer.
pub(crate) const PY_CHANNEL: &str = r#"
import os, json, struct, socket, sys
s = socket.socket(fileno=int(os.environ["TOOLEXEC_CHANNEL_FD"]))
n = [0]
def send(o):
    b = json.dumps(o).encode(); s.sendall(struct.pack('>I', len(b)) + b)
def readn(k):
    buf = b''
    while len(buf) < k:
        c = s.recv(k - len(buf))
        if not c:
            sys.exit(7)
        buf += c
    return buf
def recv():
    return json.loads(readn(struct.unpack('>I', readn(4))[0]))
def call(tool, args):
    n[0] += 1
    send({"id": n[0], "method": "call", "tool": tool, "args": args})
    return recv()
def search(q):
    n[0] += 1
    send({"id": n[0], "method": "search", "query": q, "limit": 5})
    return recv()
"#;

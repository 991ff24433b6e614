//! Helpers shared by the `upstream_*` integration tests.
#![allow(dead_code)]

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use toolexec::StreamEvent;

#[allow(unused_imports)] // not every includer needs them
pub(crate) use toolexec_testkit::{deps, free_port};

/// A child process killed (and reaped) on drop.
pub(crate) struct ChildGuard(pub Child);

impl ChildGuard {
    pub(crate) fn spawn(cmd: &mut Command) -> ChildGuard {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        ChildGuard(child)
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until something accepts connections on `127.0.0.1:port`.
pub(crate) async fn wait_listening(port: u16, timeout: Duration) {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < timeout,
            "nothing listens on port {port} after {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends SIGKILL to `pid`.
pub(crate) fn kill_pid(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid} failed");
}

/// Every event of a streamed run, up to and including the final one.
pub(crate) async fn collect_events(mut stream: toolexec::EventStream) -> Vec<StreamEvent> {
    let mut events = Vec::new();
    while let Some(ev) = tokio::time::timeout(Duration::from_secs(30), stream.next_event())
        .await
        .expect("stream stalled")
    {
        let last = matches!(ev, StreamEvent::Done { .. } | StreamEvent::Error { .. });
        events.push(ev);
        if last {
            break;
        }
    }
    events
}

/// The progress events of a run, as `(progress, total, message)`.
pub(crate) fn progress_of(events: &[StreamEvent]) -> Vec<(f64, Option<f64>, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Progress {
                progress,
                total,
                message,
                ..
            } => Some((*progress, *total, message.clone())),
            _ => None,
        })
        .collect()
}

/// Polls `check` every 50 ms until it holds or `timeout` passes.
pub(crate) async fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs to the test output when `RUST_LOG` is set (for example
/// `RUST_LOG=toolexec_mcp=debug,rmcp=debug`).
pub(crate) fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A streamable HTTP upstream at `127.0.0.1:port/mcp` with a 20 s call timeout.
/// The Python SDK fixture server (`tests/fixtures/py_upstream_server.py`).
pub(crate) const PY_FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_upstream_server.py"
);

/// The Python fixture over stdio as upstream `name`, with `env` and a
/// 20 s call timeout.
pub(crate) fn py_stdio_config(
    name: &str,
    python: &str,
    env: std::collections::BTreeMap<String, toolexec::Secret>,
) -> toolexec_mcp::upstream::UpstreamConfig {
    let mut config = toolexec_mcp::upstream::UpstreamConfig::new(
        name,
        toolexec_mcp::upstream::UpstreamTransport::Stdio {
            command: python.to_owned(),
            args: vec![PY_FIXTURE.to_owned(), "stdio".to_owned()],
            env,
            inherit_env: Vec::new(),
            cwd: Some(std::env::temp_dir()),
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

pub(crate) fn http_config(name: &str, port: u16) -> toolexec_mcp::upstream::UpstreamConfig {
    let mut config = toolexec_mcp::upstream::UpstreamConfig::new(
        name,
        toolexec_mcp::upstream::UpstreamTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: std::collections::BTreeMap::new(),
            bearer_token: None,
            tls: Default::default(),
            oauth: None,
            token_exchange: None,
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

/// Asserts `r` failed with error code `code` and returns the error.
pub(crate) fn assert_code<T: std::fmt::Debug>(
    r: Result<T, toolexec::Error>,
    code: &str,
) -> toolexec::Error {
    match r {
        Err(e) => {
            assert_eq!(e.code().as_str(), code, "{e}");
            e
        }
        Ok(v) => panic!("expected {code}, got {v:?}"),
    }
}

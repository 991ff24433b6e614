//! Helpers shared by the `upstream_*` integration tests, included with
//! `#[path = "support/upstream.rs"] mod support;`.
#![allow(dead_code)]

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use toolexec::StreamEvent;

/// The values of `vars`, or `None` after printing `SKIPPED: <test>: <why>`
/// when one is missing. Under `CI` a missing variable fails the test instead.
pub fn require_env(test: &str, vars: &[&str]) -> Option<Vec<String>> {
    let mut values = Vec::new();
    let mut missing = Vec::new();
    for var in vars {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => values.push(v),
            _ => missing.push(*var),
        }
    }
    if missing.is_empty() {
        return Some(values);
    }
    let why = format!(
        "{} not set (run scripts/install-test-deps.sh, then source ~/.cache/toolexec/deps/env.sh)",
        missing.join(", ")
    );
    assert!(std::env::var_os("CI").is_none(), "{test}: {why}");
    // Written to the real stderr, which the test harness does not capture.
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
    None
}

/// A child process killed (and reaped) on drop.
pub struct ChildGuard(pub Child);

impl ChildGuard {
    pub fn spawn(cmd: &mut Command) -> ChildGuard {
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

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// Waits until something accepts connections on `127.0.0.1:port`.
pub async fn wait_listening(port: u16, timeout: Duration) {
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
pub fn kill_pid(pid: u32) {
    let status = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -9 {pid} failed");
}

/// Every event of a streamed run, up to and including the final one.
pub async fn collect_events(mut stream: toolexec::EventStream) -> Vec<StreamEvent> {
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
pub fn progress_of(events: &[StreamEvent]) -> Vec<(f64, Option<f64>, Option<String>)> {
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
pub async fn eventually(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Logs to the test output when `RUST_LOG` is set (for example
/// `RUST_LOG=toolexec_mcp=debug,rmcp=debug`).
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}

/// A streamable HTTP upstream at `127.0.0.1:port/mcp` with a 20 s call timeout.
pub fn http_config(name: &str, port: u16) -> toolexec_mcp::upstream::UpstreamConfig {
    let mut config = toolexec_mcp::upstream::UpstreamConfig::new(
        name,
        toolexec_mcp::upstream::UpstreamTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
            headers: std::collections::BTreeMap::new(),
            bearer_token: None,
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

/// Asserts `r` failed with error code `code` and returns the error.
pub fn assert_code<T: std::fmt::Debug>(
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

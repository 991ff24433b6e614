//! Helpers shared by the CLI's integration tests (what other crates' tests
//! share too comes from `toolexec_testkit`).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The `toolexec` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_toolexec");

/// toolexec-mcp's fixtures, reused by path.
pub(crate) const PY_GATEWAY_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolexec-mcp/tests/fixtures/py_gateway_client.py"
);
pub(crate) const PY_UPSTREAM_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolexec-mcp/tests/fixtures/py_upstream_server.py"
);
pub(crate) const PY_ASKING_SERVER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolexec-mcp/tests/fixtures/py_asking_server.py"
);
pub(crate) const PY_RELAY_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../toolexec-mcp/tests/fixtures/py_relay_client.py"
);
/// This crate's fixtures.
pub(crate) const PY_DEMO_UPSTREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_demo_upstream.py"
);
/// A stdio server of the standard library only, answering exact bytes.
pub(crate) const PY_RAW_UPSTREAM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_raw_upstream.py"
);
pub(crate) const PY_SERVE_CLIENT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_serve_client.py"
);
/// The test OAuth issuer (metadata, key set, signed tokens).
pub(crate) const PY_OAUTH_ISSUER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/py_oauth_issuer.py"
);

/// Deadline for any one command; only there so that a hang fails instead of
/// stalling the suite.
pub(crate) const DEADLINE: Duration = Duration::from_secs(60);

pub(crate) use toolexec_testkit::{TempDir, dep, deps, free_port};

/// `s` as a TOML basic string (JSON string escapes are valid TOML).
pub(crate) fn toml_str(s: impl AsRef<str>) -> String {
    serde_json::to_string(s.as_ref()).unwrap()
}

/// `toolexec ARGS` run in `cwd`, with no token or log filter inherited.
/// `TOOLEXEC_TEST_BIN` names another copy of the binary (one an
/// unprivileged user can reach, when the build cache is not).
pub(crate) fn toolexec(cwd: &Path, args: &[&str]) -> Command {
    let bin = std::env::var("TOOLEXEC_TEST_BIN").unwrap_or_else(|_| BIN.to_owned());
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .current_dir(cwd)
        .env_remove("TOOLEXEC_TOKEN")
        .env_remove("TOOLEXEC_LOG");
    cmd
}

/// What a finished command printed.
#[derive(Debug)]
pub(crate) struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Stdout as JSON, or a panic showing both streams.
    #[track_caller]
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{self}"))
    }

    /// The last stdout line as JSON (the Python clients' summary).
    #[track_caller]
    pub(crate) fn last_line_json(&self) -> serde_json::Value {
        let last = self.stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|e| panic!("no JSON summary ({e}):\n{self}"))
    }

    /// Panics (showing both streams) unless the exit code is `code`.
    #[track_caller]
    pub(crate) fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code(), Some(code), "{self}");
        self
    }
}

impl std::fmt::Display for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status: {}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` (stdin closed) to completion; kills it and panics after [`DEADLINE`].
pub(crate) fn run(cmd: &mut Command) -> Out {
    run_with_input(cmd, None)
}

/// [`run`], with `input` on stdin.
pub(crate) fn run_with_input(cmd: &mut Command, input: Option<&str>) -> Out {
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
        let input = input.to_owned();
        std::thread::spawn(move || {
            let _ = stdin.write_all(input.as_bytes());
        });
    }
    let stdout = drain(child.stdout.take().unwrap());
    let stderr = drain(child.stderr.take().unwrap());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out after {DEADLINE:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Out {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// A background process (a server), stopped on drop: SIGINT, then SIGKILL
/// if it is still running after a moment. Its output goes to files.
pub(crate) struct Background {
    child: Child,
    what: String,
    log: TempDir,
}

impl Background {
    pub(crate) fn spawn(cmd: &mut Command) -> Background {
        let log = TempDir::new("log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(log.path().join("stdout")).unwrap())
            .stderr(std::fs::File::create(log.path().join("stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Background {
            child,
            what: format!("{cmd:?}"),
            log,
        }
    }

    /// What the process printed so far.
    pub(crate) fn output(&self) -> String {
        let read = |n| std::fs::read_to_string(self.log.path().join(n)).unwrap_or_default();
        format!(
            "{}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.what,
            read("stdout"),
            read("stderr")
        )
    }

    /// Waits until something accepts connections on `127.0.0.1:port`,
    /// failing early if the process exits first.
    pub(crate) fn wait_listening(&mut self, port: u16) {
        let start = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "exited ({status}) before listening on {port}:\n{}",
                    self.output()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "nothing listens on {port} after 20s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits for a stdout line starting with `prefix` and returns the rest,
    /// failing early if the process exits first.
    pub(crate) fn wait_stdout_line(&mut self, prefix: &str) -> String {
        let start = Instant::now();
        loop {
            let out = std::fs::read_to_string(self.log.path().join("stdout")).unwrap_or_default();
            if let Some(rest) = out.lines().find_map(|l| l.strip_prefix(prefix)) {
                return rest.to_owned();
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "exited ({status}) before printing {prefix:?}:\n{}",
                    self.output()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no {prefix:?} line after 20s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// Waits up to `timeout` for the process to exit by itself.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() >= timeout {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL, as a crash: no chance to clean up.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGINT (ctrl-c) and waits up to `timeout` for the exit.
    pub(crate) fn interrupt(&mut self, timeout: Duration) -> Option<ExitStatus> {
        self.signal("-INT", timeout)
    }

    /// Sends `signal` (`-TERM`, `-INT`) and waits up to `timeout` for the exit.
    pub(crate) fn signal(&mut self, signal: &str, timeout: Duration) -> Option<ExitStatus> {
        if let Some(status) = self.child.try_wait().unwrap() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < timeout {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.interrupt(Duration::from_secs(3)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A raw HTTP/1.1 POST to `127.0.0.1:port/mcp`; returns the status code.
pub(crate) fn post_status(port: u16, headers: &[&str], body: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            other => panic!("no status line from port {port}: {other:?}"),
        }
    }
    let line = String::from_utf8_lossy(&head);
    line.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {line:?}"))
}

/// A raw HTTP/1.1 GET of `127.0.0.1:port{path}` with extra `headers`;
/// returns the status code and the body (the server closes the connection).
pub(crate) fn get_with(port: u16, path: &str, headers: &[&str]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut response = Vec::new();
    let _ = s.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad response from port {port}: {text:?}"));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

/// The body of a `200` GET (panics on another status).
pub(crate) fn get(port: u16, path: &str) -> String {
    let (status, body) = get_with(port, path, &[]);
    assert_eq!(status, 200, "GET {path}: {body}");
    body
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n.min(rest.len())]);
        body = rest.get(n + 2..).unwrap_or("");
    }
    out
}

/// A JSON-RPC `initialize` request body.
pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// A raw MCP session with `toolexec serve` over its stdin/stdout: every
/// stdout line is kept (and must be JSON-RPC); stderr goes to a file.
pub(crate) struct StdioSession {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    lines: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<()>>,
    /// Every stdout line so far.
    pub seen: Vec<String>,
    log: TempDir,
}

impl StdioSession {
    /// Spawns `cmd` and completes the `initialize` handshake.
    pub(crate) fn start(cmd: &mut Command) -> StdioSession {
        Self::start_with(cmd, serde_json::json!({}))
    }

    /// [`StdioSession::start`], the client declaring `capabilities`.
    pub(crate) fn start_with(cmd: &mut Command, capabilities: serde_json::Value) -> StdioSession {
        let log = TempDir::new("stdio");
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log.path().join("stderr")).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let (tx, lines) = std::sync::mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = StdioSession {
            stdin: child.stdin.take(),
            child,
            lines,
            reader: Some(reader),
            seen: Vec::new(),
            log,
        };
        let mut init: serde_json::Value = serde_json::from_str(INITIALIZE).unwrap();
        init["params"]["capabilities"] = capabilities;
        let r = s.request(1, "initialize", init["params"].clone());
        assert!(r["result"]["serverInfo"].is_object(), "{r}");
        s.send(serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    pub(crate) fn send(&mut self, msg: serde_json::Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request; returns the response with its id.
    pub(crate) fn request(
        &mut self,
        id: u64,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        self.request_with_id(id.into(), method, params)
    }

    /// [`StdioSession::request`] with any JSON-RPC id.
    pub(crate) fn request_with_id(
        &mut self,
        id: serde_json::Value,
        method: &str,
        params: serde_json::Value,
    ) -> serde_json::Value {
        self.send(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        );
        let start = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(start.elapsed());
            let Ok(line) = self.lines.recv_timeout(left) else {
                panic!(
                    "no response to {method}; stdout so far: {:?}\n--- stderr:\n{}",
                    self.seen,
                    self.stderr()
                );
            };
            self.seen.push(line.clone());
            let msg: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON-RPC ({e}): {line:?}"));
            if msg["id"] == id {
                return msg;
            }
        }
    }

    /// The names `tools/list` returns.
    pub(crate) fn tool_names(&mut self, id: u64) -> Vec<String> {
        let r = self.request(id, "tools/list", serde_json::json!({}));
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the server wrote to stderr so far.
    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(self.log.path().join("stderr")).unwrap_or_default()
    }

    /// Closes stdin (ending the session) and waits for the exit; the rest of
    /// stdout lands in `seen`.
    pub(crate) fn finish(&mut self) -> ExitStatus {
        drop(self.stdin.take());
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "serve did not exit after stdin closed:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        self.seen.extend(self.lines.try_iter());
        status
    }
}

impl Drop for StdioSession {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Whether runtime `name` is available in a `toolexec --json runtimes`
/// listing; if not, says why (`SKIPPED: test: what: reason`), or fails
/// under `CI`.
pub(crate) fn runtime_available(listing: &Out, name: &str, test: &str, what: &str) -> bool {
    let list = listing.json();
    let runtime = list["runtimes"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["name"] == name))
        .cloned()
        .unwrap_or_else(|| panic!("{name} is not registered: {listing}"));
    if runtime["available"] == true {
        return true;
    }
    let why = runtime["reason"]
        .as_str()
        .unwrap_or("unavailable")
        .to_owned();
    toolexec_testkit::skip(test, format!("{what}: {why}"));
    false
}

//! MCP benchmarks over stdio, driven by one rmcp client (this binary) that
//! spawns every server as a child process, as an agent host would:
//!
//! 1. `throughput`: `tools/call` latency (sequential) and throughput (N calls
//!    in flight) of `toolexec serve` on the built-in `math:add` (as
//!    `math__add` with `--expose all`, and through the `run_tool` meta-tool)
//!    against a Python SDK server (FastMCP, `tests/fixtures/py_bench_server.py`)
//!    doing the same work, plus a bare rmcp server as the floor;
//! 2. `proxy`: the latency the gateway adds in front of an upstream stdio
//!    server (server-everything's `echo`, the Python server's `add`, a bare
//!    rmcp server's `add`): the same client calls the server directly and
//!    through `toolexec serve --expose all --config ...`, alternating; and,
//!    as the floor of any stdio proxy built on rmcp, through a bare rmcp
//!    relay (this binary in relay mode) that forwards `tools/call` as is;
//! 3. `import`: `toolexec serve` importing 10,000 tools from an upstream
//!    server (this binary in server mode), then `search_tools` over them;
//! 4. `resources`: `resources/read` of a 1 MiB resource from a bare rmcp
//!    server, directly, through a byte relay (this binary copying the pipes,
//!    no parsing), through the bare rmcp relay and through `toolexec
//!    serve`, alternating.
//!
//! Reference rows, all served by this binary in a child mode
//! (`TOOLEXEC_BENCH_UPSTREAM`): a bare rmcp server with `add` (the floor of
//! an rmcp stdio server), the same on rmcp's `stdio_pipes()` transport, and
//! the toolexec gateway library itself served on `stdio()` (a control that
//! should match `toolexec serve`) and on `stdio_pipes()` (what the gateway
//! would do with that transport).
//!
//! ```text
//! cargo bench -p toolexec-mcp --bench gateway_stdio [-- throughput|proxy|import|resources ...]
//! ```
//!
//! `bash scripts/bench-mcp.sh` builds the release binaries, sources the
//! test-dependency env file and runs this. The `toolexec` binary is
//! `$TOOLEXEC_BIN`, else `target/release/toolexec` (built here with cargo
//! when `TOOLEXEC_BIN` is unset). Python rows need `TOOLEXEC_PYTHON`,
//! server-everything rows `TOOLEXEC_NODE22` and `TOOLEXEC_MCP_EVERYTHING`
//! (from the environment or `~/.cache/toolexec/deps/env.sh`); without them
//! those rows are skipped with a message, never failed.
//!
//! Knobs: `TOOLEXEC_BENCH_CALLS` (sequential calls per row, default 5000),
//! `TOOLEXEC_BENCH_SECS` (seconds per concurrency level, default 2),
//! `TOOLEXEC_BENCH_IMPORT_RUNS` (default 3), `TOOLEXEC_BENCH_ROWS` (run only
//! the overhead rows whose label contains one of these `|`-separated
//! strings; default all), `TOOLEXEC_BENCH_RT` (`current` or `one`: the bench
//! binary's proxies, relay and gateway library, on a current-thread or a
//! one-worker runtime instead of `toolexec serve`'s). The results are printed as
//! Markdown tables on stdout; progress goes to stderr; the servers' stderr
//! to `$TMPDIR/toolexec-bench-mcp/*.stderr`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool as McpTool,
    ToolsCapability,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData as McpError, Peer, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// In this binary's environment: run as a child server over stdio instead
/// of benchmarking. A number N: a bare rmcp server with `add` plus N
/// generated tools; `relay`: a bare rmcp proxy in front of the command line
/// that follows (default: this binary as a bare server); `gateway`: the
/// toolexec gateway library (`--expose all`, built-ins, optionally an
/// upstream `NS COMMAND ARGS...` from the command line).
const UPSTREAM_ENV: &str = "TOOLEXEC_BENCH_UPSTREAM";
/// In the bare upstream's and relay's environment: `pipes` serves over
/// rmcp's `stdio_pipes()` (non-blocking pipes on the IO reactor) instead of
/// `stdio()` (tokio's stdin/stdout, one blocking-pool hand-off per read and
/// write), which `toolexec serve` uses.
const STDIO_ENV: &str = "TOOLEXEC_BENCH_STDIO";
/// Tools the big upstream lists.
const BIG_TOOLS: usize = 10_000;
/// `tools/list` page size of the bare upstream.
const UPSTREAM_PAGE: usize = 1000;
/// Calls in flight for the throughput runs.
const CONCURRENCY: [usize; 3] = [1, 8, 32];
/// Calls before any timed run on a connection.
const WARMUP: usize = 500;
/// Timed `search_tools` calls.
const SEARCH_CALLS: usize = 2000;
/// Interleaved rounds of the proxy comparison.
const PROXY_ROUNDS: usize = 10;
/// The bare upstream's big resource, and its size.
const BIG_RESOURCE: &str = "bench://one-mebibyte";
const BIG_RESOURCE_BYTES: usize = 1 << 20;

const SEARCH_QUERIES: &[&str] = &[
    "get the weather forecast for a city",
    "send an email message to a contact",
    "convert currency exchange rates",
    "upload a file to a storage bucket",
    "cancel a flight booking",
    "list the commits of a repository",
    "restore a database backup",
    "translate a sentence into another language",
    "stock price history",
    "schedule a calendar meeting",
    "invoice payment refund",
    "monitor server uptime metrics",
];

fn main() {
    if let Ok(mode) = std::env::var(UPSTREAM_ENV) {
        upstream::main(&mode);
        return;
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants =
        |name: &str| filters.is_empty() || filters.iter().any(|f| name.contains(f.as_str()));
    let settings = Settings::from_env();
    // The client runs on one thread, so the servers keep at least one of the
    // machine's cores; every server is driven by this same client.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = rt.block_on(async {
        let deps = Deps::find();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "MCP stdio benchmarks ({}): {} sequential calls per row after {WARMUP} warm-up calls, {} s per concurrency level; load average at start: {}",
            if filters.is_empty() { "all sections".to_owned() } else { filters.join(", ") },
            settings.calls,
            settings.secs.as_secs_f64(),
            loadavg()
        );
        let sections: [(&str, SectionFn); 4] = [
            ("throughput", |d, s| Box::pin(throughput(d, s))),
            ("proxy", |d, s| Box::pin(proxy(d, s))),
            ("import", |d, s| Box::pin(import(d, s))),
            ("resources", |d, s| Box::pin(resources(d, s))),
        ];
        for (name, section) in sections {
            if !wants(name) {
                continue;
            }
            eprintln!("== {name}");
            match section(&deps, &settings).await {
                Ok(text) => out.push_str(&text),
                Err(e) => {
                    eprintln!("FAILED: {name}: {e}");
                    let _ = writeln!(out, "\n{name}: FAILED: {e}");
                }
            }
        }
        let _ = writeln!(out, "\nload average at end: {}", loadavg());
        for skipped in &deps.skipped {
            let _ = writeln!(out, "SKIPPED: {skipped}");
        }
        out
    });
    println!("{report}");
}

type SectionFn = for<'a> fn(
    &'a Deps,
    &'a Settings,
)
    -> std::pin::Pin<Box<dyn Future<Output = Result<String, String>> + 'a>>;

struct Settings {
    calls: usize,
    secs: Duration,
    import_runs: usize,
    /// Substrings of the overhead rows to run; empty runs them all.
    rows: Vec<String>,
}

impl Settings {
    fn from_env() -> Settings {
        let num = |var: &str, default: f64| {
            std::env::var(var)
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| *v > 0.0)
                .unwrap_or(default)
        };
        Settings {
            calls: num("TOOLEXEC_BENCH_CALLS", 5000.0) as usize,
            secs: Duration::from_secs_f64(num("TOOLEXEC_BENCH_SECS", 2.0)),
            import_runs: num("TOOLEXEC_BENCH_IMPORT_RUNS", 3.0) as usize,
            rows: std::env::var("TOOLEXEC_BENCH_ROWS")
                .map(|v| {
                    v.split('|')
                        .filter(|r| !r.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

// ---------------------------------------------------------------------------
// External programs

/// A program and its leading arguments.
#[derive(Clone)]
struct Program {
    command: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Program {
    fn new(command: impl Into<PathBuf>, args: &[&str]) -> Program {
        Program {
            command: command.into(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
        }
    }

    fn env(mut self, key: &str, value: impl Into<String>) -> Program {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    fn arg(mut self, arg: impl Into<String>) -> Program {
        self.args.push(arg.into());
        self
    }

    /// This program as a `[[servers]]` entry of `toolexec.toml`.
    fn toml_server(&self, name: &str) -> String {
        let mut s = format!(
            "[[servers]]\nname = {}\ncommand = {}\nargs = [{}]\ntimeout = \"60s\"\n",
            toml_str(name),
            toml_str(&self.command.to_string_lossy()),
            self.args
                .iter()
                .map(|a| toml_str(a))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !self.env.is_empty() {
            let env: Vec<String> = self
                .env
                .iter()
                .map(|(k, v)| format!("{} = {}", toml_str(k), toml_str(v)))
                .collect();
            let _ = writeln!(s, "env = {{ {} }}", env.join(", "));
        }
        s
    }
}

fn toml_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The programs the benchmarks run, and why some are missing.
struct Deps {
    toolexec: Result<PathBuf, String>,
    python: Option<Program>,
    everything: Option<Program>,
    /// This binary as a bare rmcp upstream with `add` only.
    bare: Program,
    /// The same over rmcp's `stdio_pipes()`.
    bare_pipes: Program,
    /// This binary as a bare rmcp upstream with `add` and [`BIG_TOOLS`] more.
    big: Program,

    skipped: Vec<String>,
    work: PathBuf,
}

impl Deps {
    fn find() -> Deps {
        let work = std::env::temp_dir().join("toolexec-bench-mcp");
        std::fs::create_dir_all(&work).expect("create the bench work directory");
        let mut skipped = Vec::new();
        let python = match dep("TOOLEXEC_PYTHON") {
            Ok(py) => Some(Program::new(
                py,
                &[concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/py_bench_server.py"
                )],
            )),
            Err(why) => {
                skipped.push(format!("Python SDK rows: {why}"));
                None
            }
        };
        let everything = match (dep("TOOLEXEC_NODE22"), dep("TOOLEXEC_MCP_EVERYTHING")) {
            (Ok(node), Ok(bin)) => Some(Program::new(node, &[&bin, "stdio"])),
            (Err(why), _) | (_, Err(why)) => {
                skipped.push(format!("server-everything rows: {why}"));
                None
            }
        };
        let me = std::env::current_exe().expect("current exe");
        let bare = Program::new(&me, &[]).env(UPSTREAM_ENV, "0");
        let bare_pipes = bare.clone().env(STDIO_ENV, "pipes");
        let big = Program::new(&me, &[]).env(UPSTREAM_ENV, BIG_TOOLS.to_string());
        let toolexec = toolexec_bin();
        if let Err(why) = &toolexec {
            skipped.push(format!("toolexec rows: {why}"));
        }
        for s in &skipped {
            eprintln!("SKIPPED: {s}");
        }
        Deps {
            toolexec,
            python,
            everything,
            bare,
            bare_pipes,
            big,
            skipped,
            work,
        }
    }

    /// The toolexec gateway library in this binary (`--expose all`, the
    /// built-ins), over rmcp's `stdio()` as `toolexec serve` does, or over
    /// `stdio_pipes()`; with `upstream` imported as namespace `ns`.
    fn gateway_lib(&self, pipes: bool, upstream: Option<(&str, &Program)>) -> Program {
        let mut p = Program::new(&self.bare.command, &[]).env(UPSTREAM_ENV, "gateway");
        if pipes {
            p = p.env(STDIO_ENV, "pipes");
        }
        if let Some((ns, u)) = upstream {
            p.args.push(ns.to_owned());
            p.args.push(u.command.to_string_lossy().into_owned());
            p.args.extend(u.args.iter().cloned());
            p.env.extend(
                u.env
                    .iter()
                    .filter(|(k, _)| k != UPSTREAM_ENV && k != STDIO_ENV)
                    .cloned(),
            );
        }
        p
    }

    /// This binary as a minimal rmcp proxy in front of `upstream`.
    fn relay(&self, upstream: &Program) -> Program {
        let mut p = Program::new(&self.bare.command, &[]).env(UPSTREAM_ENV, "relay");
        p.args.push(upstream.command.to_string_lossy().into_owned());
        p.args.extend(upstream.args.iter().cloned());
        // The relayed upstream inherits the relay's environment.
        p.env.extend(
            upstream
                .env
                .iter()
                .filter(|(k, _)| k != UPSTREAM_ENV)
                .cloned(),
        );
        p
    }

    fn toolexec(&self) -> Result<&Path, String> {
        self.toolexec.as_deref().map_err(Clone::clone)
    }

    /// `toolexec serve` with these flags and, when `servers` is not empty, a
    /// config with those upstream servers (and no built-ins).
    fn gateway(
        &self,
        label: &str,
        flags: &[&str],
        servers: &[(&str, &Program)],
    ) -> Result<Program, String> {
        let mut p = Program::new(self.toolexec()?, &["serve"]);
        for f in flags {
            p = p.arg(*f);
        }
        if !servers.is_empty() {
            let mut toml = String::from("[builtins]\nenabled = false\n\n");
            for (name, program) in servers {
                toml.push_str(&program.toml_server(name));
                toml.push('\n');
            }
            let path = self.work.join(format!("{label}.toml"));
            std::fs::write(&path, toml).map_err(|e| format!("write {}: {e}", path.display()))?;
            p = p.arg("--config").arg(path.to_string_lossy().into_owned());
        }
        Ok(p)
    }
}

/// An external dependency from the environment, or from the env file
/// `scripts/install-test-deps.sh` writes when the variable is unset.
fn dep(var: &str) -> Result<String, String> {
    let value = std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| env_file_value(var))
        .ok_or_else(|| {
            format!("{var} is not set (run scripts/install-test-deps.sh and source ~/.cache/toolexec/deps/env.sh)")
        })?;
    if Path::new(&value).exists() {
        Ok(value)
    } else {
        Err(format!("{var}={value} does not exist"))
    }
}

fn env_file_value(var: &str) -> Option<String> {
    let deps = std::env::var_os("TOOLEXEC_DEPS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/toolexec/deps")))?;
    let text = std::fs::read_to_string(deps.join("env.sh")).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.trim().strip_prefix("export ")?.split_once('=')?;
        (k == var).then(|| v.trim_matches('"').to_owned())
    })
}

/// `$TOOLEXEC_BIN`, else `target/release/toolexec`, built first.
fn toolexec_bin() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("TOOLEXEC_BIN") {
        let bin = PathBuf::from(bin);
        return if bin.exists() {
            Ok(bin)
        } else {
            Err(format!("TOOLEXEC_BIN={} does not exist", bin.display()))
        };
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    eprintln!("building toolexec (cargo build --release -p toolexec-cli) ...");
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "toolexec-cli",
            "--manifest-path",
        ])
        .arg(workspace.join("Cargo.toml"))
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err("cargo build --release -p toolexec-cli failed".into());
    }
    // target/release/deps/<bench> → target/release/toolexec
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join(format!("toolexec{}", std::env::consts::EXE_SUFFIX)))
        .ok_or("no target directory")?;
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!("{} was not built", bin.display()))
    }
}

// ---------------------------------------------------------------------------
// The client

type Client = RunningService<RoleClient, ()>;

/// A client connected to a server it spawned.
struct Conn {
    client: Client,
    /// The server's process id.
    pid: Option<u32>,
}

impl Conn {
    fn peer(&self) -> &Peer<RoleClient> {
        self.client.peer()
    }

    /// CPU time the server process used so far (all its threads).
    fn cpu(&self) -> Option<Duration> {
        cpu_time(&format!("/proc/{}/stat", self.pid?))
    }

    /// The server's resident memory, from `/proc/PID/status`.
    fn rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid?)).ok()?;
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb / 1024.0)
    }

    async fn close(self) {
        let _ = self.client.cancel().await;
    }
}

/// utime + stime of a `/proc/.../stat` file.
fn cpu_time(path: &str) -> Option<Duration> {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    let ticks = *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    });
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the parenthesized command name: state is field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let t: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(Duration::from_secs_f64(t / ticks))
}

/// CPU time per call over `calls`, from two readings.
fn per_call(before: Option<Duration>, after: Option<Duration>, calls: usize) -> Option<Duration> {
    Some(after?.saturating_sub(before?) / calls.max(1) as u32)
}

fn opt_us(d: Option<Duration>) -> String {
    d.map(us).unwrap_or_else(|| "n/a".into())
}

/// Spawns `program` and completes the MCP handshake over its stdio.
async fn connect(deps: &Deps, label: &str, program: &Program) -> Result<Conn, String> {
    let log_path = deps.work.join(format!("{label}.stderr"));
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut cmd = tokio::process::Command::new(&program.command);
    cmd.args(&program.args);
    for (k, v) in &program.env {
        cmd.env(k, v);
    }
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| format!("{label}: cannot start {}: {e}", program.command.display()))?;
    let pid = transport.id();
    match tokio::time::timeout(Duration::from_secs(90), ().serve(transport)).await {
        Ok(Ok(client)) => Ok(Conn { client, pid }),
        Ok(Err(e)) => Err(format!(
            "{label}: MCP handshake failed: {e} (server stderr: {})",
            log_path.display()
        )),
        Err(_) => Err(format!(
            "{label}: no MCP handshake within 90 s (server stderr: {})",
            log_path.display()
        )),
    }
}

/// One kind of `tools/call`: the tool name and the arguments of call `i`.
#[derive(Clone, Copy)]
struct CallSpec {
    tool: &'static str,
    args: fn(u64) -> Value,
    /// The structured result of call `i` is `{"result": i + 1}`.
    adds: bool,
}

fn add(tool: &'static str) -> CallSpec {
    CallSpec {
        tool,
        args: |i| json!({"a": i, "b": 1}),
        adds: true,
    }
}

const RUN_TOOL_ADD: CallSpec = CallSpec {
    tool: "run_tool",
    args: |i| json!({"tool_id": "math:add", "args": {"a": i, "b": 1}}),
    adds: true,
};

fn echo(tool: &'static str) -> CallSpec {
    CallSpec {
        tool,
        args: |_| json!({"message": "hello from the toolexec bench"}),
        adds: false,
    }
}

const SEARCH: CallSpec = CallSpec {
    tool: "search_tools",
    adds: false,
    args: |i| {
        json!({
            "query": SEARCH_QUERIES[i as usize % SEARCH_QUERIES.len()],
            "limit": 10
        })
    },
};

async fn call(peer: &Peer<RoleClient>, spec: CallSpec, i: u64) -> Result<CallToolResult, String> {
    let Value::Object(args) = (spec.args)(i) else {
        unreachable!("arguments are objects")
    };
    let params = CallToolRequestParams::new(spec.tool).with_arguments(args);
    match peer.call_tool_once(params).await {
        Ok(CallToolResponse::Complete(r)) if r.is_error != Some(true) => Ok(r),
        Ok(CallToolResponse::Complete(r)) => {
            Err(format!("{}: error result: {:?}", spec.tool, r.content))
        }
        Ok(_) => Err(format!("{}: not a complete result", spec.tool)),
        Err(e) => Err(format!("{}: {e}", spec.tool)),
    }
}

/// Warm-up calls; checks that `add`-style calls return `i + 1`.
async fn warm_up(peer: &Peer<RoleClient>, spec: CallSpec, n: usize) -> Result<(), String> {
    for i in 0..n as u64 {
        let r = call(peer, spec, i).await?;
        if spec.adds {
            let got = r
                .structured_content
                .as_ref()
                .and_then(|s| s.get("result"))
                .and_then(Value::as_f64);
            if got != Some((i + 1) as f64) {
                return Err(format!(
                    "{}: expected structured {{\"result\": {}}}, got {:?}",
                    spec.tool,
                    i + 1,
                    r.structured_content
                ));
            }
        }
    }
    Ok(())
}

/// Latencies of `n` calls, one at a time.
async fn sequential(
    peer: &Peer<RoleClient>,
    spec: CallSpec,
    n: usize,
    offset: u64,
) -> Result<Vec<Duration>, String> {
    let mut lat = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let t = Instant::now();
        call(peer, spec, offset + i).await?;
        lat.push(t.elapsed());
    }
    Ok(lat)
}

/// Calls per second with `inflight` calls always outstanding for `dur`,
/// and their latencies.
async fn concurrent(
    peer: &Peer<RoleClient>,
    spec: CallSpec,
    inflight: usize,
    dur: Duration,
) -> Result<(f64, Stats, usize), String> {
    let start = Instant::now();
    let deadline = start + dur;
    let workers: Vec<_> = (0..inflight)
        .map(|w| {
            let peer = peer.clone();
            tokio::spawn(async move {
                let mut lat = Vec::new();
                let mut i = (w as u64) << 32;
                while Instant::now() < deadline {
                    let t = Instant::now();
                    call(&peer, spec, i).await?;
                    lat.push(t.elapsed());
                    i += 1;
                }
                Ok::<_, String>(lat)
            })
        })
        .collect();
    let mut all = Vec::new();
    for w in workers {
        all.extend(w.await.map_err(|e| e.to_string())??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let n = all.len();
    Ok((n as f64 / elapsed, Stats::of(all), n))
}

#[derive(Clone, Copy, Default)]
struct Stats {
    p50: Duration,
    p90: Duration,
    p99: Duration,
    mean: Duration,
}

impl Stats {
    fn of(mut lat: Vec<Duration>) -> Stats {
        if lat.is_empty() {
            return Stats::default();
        }
        lat.sort_unstable();
        let n = lat.len();
        let pct = |p: f64| lat[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Stats {
            p50: pct(0.50),
            p90: pct(0.90),
            p99: pct(0.99),
            mean: lat.iter().sum::<Duration>() / n as u32,
        }
    }
}

fn us(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10_000.0 {
        format!("{:.1} ms", us / 1000.0)
    } else if us >= 100.0 {
        format!("{us:.0} µs")
    } else {
        format!("{us:.1} µs")
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn per_sec(x: f64) -> String {
    thousands(x.round() as usize)
}

/// `10000` as `10,000`.
fn thousands(n: usize) -> String {
    if n >= 1000 {
        format!("{},{:03}", n / 1000, n % 1000)
    } else {
        n.to_string()
    }
}

// ---------------------------------------------------------------------------
// 1. Throughput and latency: toolexec vs the Python SDK

struct ThroughputRow {
    server: String,
    tool: &'static str,
    seq: Stats,
    seq_rate: f64,
    /// Server and client CPU time per sequential call.
    seq_cpu: (Option<Duration>, Option<Duration>),
    /// (in flight, calls/s, latencies, server CPU per call)
    conc: Vec<(usize, f64, Stats, Option<Duration>)>,
}

fn self_cpu() -> Option<Duration> {
    cpu_time("/proc/self/stat")
}

async fn throughput(deps: &Deps, s: &Settings) -> Result<String, String> {
    let mut targets: Vec<(String, Result<Program, String>, CallSpec)> = vec![
        (
            "`toolexec serve --expose all`".into(),
            deps.gateway("all", &["--expose", "all"], &[]),
            add("math__add"),
        ),
        (
            "`toolexec serve` (meta-tools)".into(),
            deps.gateway("meta", &[], &[]),
            RUN_TOOL_ADD,
        ),
    ];
    if let Some(py) = &deps.python {
        targets.push((
            "Python SDK (FastMCP, mcp 1.30)".into(),
            Ok(py.clone()),
            add("add"),
        ));
    }
    targets.push((
        "bare rmcp server (floor: no toolexec, no validation)".into(),
        Ok(deps.bare.clone()),
        add("add"),
    ));
    targets.push((
        "toolexec gateway library in the bench binary, on `stdio()` (control, as `toolexec serve`)"
            .into(),
        Ok(deps.gateway_lib(false, None)),
        add("math__add"),
    ));
    targets.push((
        "toolexec gateway library in the bench binary, on `stdio_pipes()`".into(),
        Ok(deps.gateway_lib(true, None)),
        add("math__add"),
    ));
    targets.push((
        "bare rmcp server on `stdio_pipes()`".into(),
        Ok(deps.bare_pipes.clone()),
        add("add"),
    ));
    let mut rows = Vec::new();
    for (label, program, spec) in targets {
        let program = match program {
            Ok(p) => p,
            Err(e) => {
                eprintln!("SKIPPED: {label}: {e}");
                continue;
            }
        };
        eprintln!("-- {label}: {}", spec.tool);
        let conn = connect(deps, &format!("throughput-{}", rows.len()), &program).await?;
        let peer = conn.peer().clone();
        warm_up(&peer, spec, WARMUP).await?;
        let (server0, client0) = (conn.cpu(), self_cpu());
        let t = Instant::now();
        let lat = sequential(&peer, spec, s.calls, 1 << 40).await?;
        let seq_rate = s.calls as f64 / t.elapsed().as_secs_f64();
        let seq_cpu = (
            per_call(server0, conn.cpu(), s.calls),
            per_call(client0, self_cpu(), s.calls),
        );
        let seq = Stats::of(lat);
        eprintln!(
            "   sequential: p50 {} p90 {} p99 {} ({} calls/s), CPU per call: server {} client {}",
            us(seq.p50),
            us(seq.p90),
            us(seq.p99),
            per_sec(seq_rate),
            opt_us(seq_cpu.0),
            opt_us(seq_cpu.1)
        );
        let mut conc = Vec::new();
        for n in CONCURRENCY {
            let before = conn.cpu();
            let (rate, st, calls) = concurrent(&peer, spec, n, s.secs).await?;
            let cpu = per_call(before, conn.cpu(), calls);
            eprintln!(
                "   {n:>2} in flight: {} calls/s, p50 {}, server CPU per call {}",
                per_sec(rate),
                us(st.p50),
                opt_us(cpu)
            );
            conc.push((n, rate, st, cpu));
        }
        conn.close().await;
        rows.push(ThroughputRow {
            server: label,
            tool: spec.tool,
            seq,
            seq_rate,
            seq_cpu,
            conc,
        });
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### 1. `tools/call` latency and throughput\n\nSequential: {} calls one at a time. In flight: N client tasks calling in a loop for {} s each; calls/s (p50 latency). CPU: the server process's user+system time per call (sequential / at {} in flight), and this client's per sequential call.\n\n| server | tool | p50 | p90 | p99 | calls/s sequential | {} | server CPU/call | client CPU/call |\n|---|---|---|---|---|---|{}---|---|",
        s.calls,
        s.secs.as_secs_f64(),
        CONCURRENCY[CONCURRENCY.len() - 1],
        CONCURRENCY
            .iter()
            .map(|n| format!("{n} in flight"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(CONCURRENCY.len())
    );
    for r in &rows {
        let _ = writeln!(
            out,
            "| {} | `{}` | {} | {} | {} | {} | {} | {} / {} | {} |",
            r.server,
            r.tool,
            us(r.seq.p50),
            us(r.seq.p90),
            us(r.seq.p99),
            per_sec(r.seq_rate),
            r.conc
                .iter()
                .map(|(_, rate, st, _)| format!("{} ({})", per_sec(*rate), us(st.p50)))
                .collect::<Vec<_>>()
                .join(" | "),
            opt_us(r.seq_cpu.0),
            opt_us(r.conc.last().and_then(|c| c.3)),
            opt_us(r.seq_cpu.1)
        );
    }
    if let Some(py) = rows.iter().find(|r| r.server.starts_with("Python")) {
        out.push('\n');
        for r in rows.iter().filter(|r| !r.server.starts_with("Python")) {
            let ratios: Vec<String> = r
                .conc
                .iter()
                .zip(&py.conc)
                .map(|(a, b)| format!("{:.1}× at {}", a.1 / b.1, a.0))
                .collect();
            let cpu_ratio = match (py.seq_cpu.0, r.seq_cpu.0) {
                (Some(p), Some(t)) if !t.is_zero() => {
                    format!("{:.0}×", p.as_secs_f64() / t.as_secs_f64())
                }
                _ => "n/a".into(),
            };
            let _ = writeln!(
                out,
                "- {} `{}` vs Python, throughput: **{:.1}× sequential, {}** in flight; p50 latency {:.1}× lower; server CPU per call {cpu_ratio} less.",
                r.server,
                r.tool,
                r.seq_rate / py.seq_rate,
                ratios.join(", "),
                py.seq.p50.as_secs_f64() / r.seq.p50.as_secs_f64(),
            );
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// 2. Gateway overhead in front of an upstream stdio server

struct ProxyPair<'a> {
    label: String,
    upstream: &'a Program,
    proxy: Program,
    direct: CallSpec,
    proxied: CallSpec,
}

async fn proxy(deps: &Deps, s: &Settings) -> Result<String, String> {
    let mut upstreams: Vec<(&str, &str, &Program, CallSpec, CallSpec)> = Vec::new();
    if let Some(e) = &deps.everything {
        upstreams.push((
            "server-everything (Node 22)",
            "everything",
            e,
            echo("echo"),
            echo("everything__echo"),
        ));
    }
    if let Some(py) = &deps.python {
        upstreams.push(("Python SDK (FastMCP)", "py", py, add("add"), add("py__add")));
    }
    upstreams.push((
        "bare rmcp server",
        "rs",
        &deps.bare,
        add("add"),
        add("rs__add"),
    ));
    let mut pairs: Vec<ProxyPair> = Vec::new();
    for (label, ns, upstream, direct, proxied) in upstreams {
        match deps.gateway(
            &format!("proxy-{ns}"),
            &["--expose", "all"],
            &[(ns, upstream)],
        ) {
            Ok(proxy) => pairs.push(ProxyPair {
                label: format!("{label} via `toolexec serve`"),
                upstream,
                proxy,
                direct,
                proxied,
            }),
            Err(e) => eprintln!("SKIPPED: proxy {label}: {e}"),
        }
        pairs.push(ProxyPair {
            label: format!("{label} via a bare rmcp relay (floor)"),
            upstream,
            proxy: deps.relay(upstream),
            direct,
            proxied: direct,
        });
    }
    for pipes in [false, true] {
        pairs.push(ProxyPair {
            label: format!(
                "bare rmcp server via the toolexec gateway library in the bench binary, on {}",
                if pipes {
                    "`stdio_pipes()`"
                } else {
                    "`stdio()` (control, as `toolexec serve`)"
                }
            ),
            upstream: &deps.bare,
            proxy: deps.gateway_lib(pipes, Some(("rs", &deps.bare))),
            direct: add("add"),
            proxied: add("rs__add"),
        });
    }
    pairs.push(ProxyPair {
        label: "bare rmcp server via a bare rmcp relay, both on `stdio_pipes()`".into(),
        upstream: &deps.bare_pipes,
        proxy: deps.relay(&deps.bare_pipes),
        direct: add("add"),
        proxied: add("add"),
    });
    let mut out = format!(
        "\n### 2. Gateway overhead on an upstream stdio server\n\n{} calls each way, one at a time, in {PROXY_ROUNDS} alternating rounds (direct, then proxied) over two open connections; overhead = proxied − direct. Proxy CPU: the proxy process's own CPU time per proxied call (its upstream excluded).\n\n| path | tool | direct p50 | proxied p50 | **overhead p50** | direct p90 / p99 | proxied p90 / p99 | overhead mean | proxy CPU/call |\n|---|---|---|---|---|---|---|---|---|\n",
        s.calls
    );
    pairs.retain(|p| s.rows.is_empty() || s.rows.iter().any(|r| p.label.contains(r.as_str())));
    for (k, pair) in pairs.iter().enumerate() {
        eprintln!(
            "-- {}: {} vs {}",
            pair.label, pair.direct.tool, pair.proxied.tool
        );
        let direct = connect(deps, &format!("proxy-{k}-direct"), pair.upstream).await?;
        let proxied = connect(deps, &format!("proxy-{k}-proxy"), &pair.proxy).await?;
        warm_up(direct.peer(), pair.direct, WARMUP).await?;
        warm_up(proxied.peer(), pair.proxied, WARMUP).await?;
        let per_round = s.calls.div_ceil(PROXY_ROUNDS);
        let (mut d, mut p) = (Vec::new(), Vec::new());
        let mut proxy_cpu = Duration::ZERO;
        let mut cpu_ok = true;
        for round in 0..PROXY_ROUNDS as u64 {
            d.extend(sequential(direct.peer(), pair.direct, per_round, round << 32).await?);
            let before = proxied.cpu();
            p.extend(sequential(proxied.peer(), pair.proxied, per_round, round << 32).await?);
            match (before, proxied.cpu()) {
                (Some(b), Some(a)) => proxy_cpu += a.saturating_sub(b),
                _ => cpu_ok = false,
            }
        }
        let calls = p.len();
        let (d, p) = (Stats::of(d), Stats::of(p));
        let diff = p.p50.as_secs_f64() - d.p50.as_secs_f64();
        let cpu = cpu_ok.then(|| proxy_cpu / calls as u32);
        eprintln!(
            "   direct p50 {} proxied p50 {} overhead {:.1} µs, proxy CPU per call {}",
            us(d.p50),
            us(p.p50),
            diff * 1e6,
            opt_us(cpu)
        );
        let _ = writeln!(
            out,
            "| {} | `{}` → `{}` | {} | {} | **{:.1} µs** | {} / {} | {} / {} | {:.1} µs | {} |",
            pair.label,
            pair.proxied.tool,
            pair.direct.tool,
            us(d.p50),
            us(p.p50),
            diff * 1e6,
            us(d.p90),
            us(d.p99),
            us(p.p90),
            us(p.p99),
            (p.mean.as_secs_f64() - d.mean.as_secs_f64()) * 1e6,
            opt_us(cpu)
        );
        direct.close().await;
        proxied.close().await;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// 4. resources/read of 1 MiB, direct and through the gateway

async fn read_big(peer: &Peer<RoleClient>) -> Result<Duration, String> {
    let start = Instant::now();
    let r = peer
        .read_resource(rmcp::model::ReadResourceRequestParams::new(BIG_RESOURCE))
        .await
        .map_err(|e| format!("resources/read: {e}"))?;
    let elapsed = start.elapsed();
    match r.contents.first() {
        Some(rmcp::model::ResourceContents::TextResourceContents { text, .. })
            if text.len() == BIG_RESOURCE_BYTES =>
        {
            Ok(elapsed)
        }
        other => Err(format!(
            "unexpected contents: {:?}",
            other.map(|c| format!("{c:?}").chars().take(80).collect::<String>())
        )),
    }
}

async fn resources(deps: &Deps, s: &Settings) -> Result<String, String> {
    let gateway = deps.gateway("resources", &[], &[("rs", &deps.bare)])?;
    let bytes = Program::new(&deps.bare.command, &[]).env(UPSTREAM_ENV, "bytes");
    let paths = [
        (
            "direct",
            connect(deps, "resources-direct", &deps.bare).await?,
        ),
        (
            "through a byte relay (floor: copies, no parsing)",
            connect(deps, "resources-bytes", &bytes).await?,
        ),
        (
            "through a bare rmcp relay (floor of a typed proxy)",
            connect(deps, "resources-relay", &deps.relay(&deps.bare)).await?,
        ),
        (
            "through `toolexec serve`",
            connect(deps, "resources-proxy", &gateway).await?,
        ),
    ];
    let reads = (s.calls / 10).clamp(PROXY_ROUNDS, 1000);
    for _ in 0..20 {
        for (_, conn) in &paths {
            read_big(conn.peer()).await?;
        }
    }
    let per_round = reads.div_ceil(PROXY_ROUNDS);
    let mut lat: Vec<Vec<Duration>> = paths.iter().map(|_| Vec::new()).collect();
    for _ in 0..PROXY_ROUNDS {
        for ((_, conn), lat) in paths.iter().zip(&mut lat) {
            for _ in 0..per_round {
                lat.push(read_big(conn.peer()).await?);
            }
        }
    }
    let stats: Vec<Stats> = lat.into_iter().map(Stats::of).collect();
    let direct = stats[0].p50.as_secs_f64();
    let mut out = format!(
        "\n### 4. `resources/read` of 1 MiB through the gateway\n\n{} reads each way of a 1 MiB text resource from a bare rmcp server, in {PROXY_ROUNDS} alternating rounds: directly, through two floors (a process that only copies the bytes, and a bare rmcp proxy) and through `toolexec serve`.\n\n| path | p50 | p90 / p99 | mean | overhead at p50 |\n|---|---|---|---|---|\n",
        per_round * PROXY_ROUNDS
    );
    for ((label, _), st) in paths.iter().zip(&stats) {
        let overhead = (st.p50.as_secs_f64() / direct - 1.0) * 100.0;
        eprintln!("   {label}: p50 {} ({overhead:+.1} %)", us(st.p50));
        let _ = writeln!(
            out,
            "| {label} | {} | {} / {} | {} | {overhead:+.1} % |",
            us(st.p50),
            us(st.p90),
            us(st.p99),
            us(st.mean)
        );
    }
    for (_, conn) in paths {
        conn.close().await;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// 3. Importing 10,000 tools, and search_tools over them

async fn import(deps: &Deps, s: &Settings) -> Result<String, String> {
    let gateway = match deps.gateway("import", &["--expose", "both"], &[("big", &deps.big)]) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("SKIPPED: import: {e}");
            return Ok(format!("\n### 3. Importing tools\n\nSKIPPED: {e}\n"));
        }
    };
    // The upstream alone: spawn, handshake, list every tool.
    let mut alone = Vec::new();
    for run in 0..s.import_runs {
        let t = Instant::now();
        let conn = connect(deps, &format!("import-upstream-{run}"), &deps.big).await?;
        let tools = conn
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| e.to_string())?;
        alone.push(t.elapsed());
        if tools.len() != BIG_TOOLS + 1 {
            return Err(format!("the upstream listed {} tools", tools.len()));
        }
        conn.close().await;
    }
    // The gateway: `toolexec serve` connects its upstreams (spawn, handshake,
    // tools/list, registration) before it answers `initialize`.
    let (mut ready, mut listed, mut total) = (Vec::new(), Vec::new(), Vec::new());
    let mut search = None;
    let mut listed_tools = 0;
    let mut memory = None;
    for run in 0..s.import_runs {
        let t = Instant::now();
        let conn = connect(deps, &format!("import-gateway-{run}"), &gateway).await?;
        let t_ready = t.elapsed();
        let tools = conn
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| e.to_string())?;
        let t_total = t.elapsed();
        let imported = tools.iter().filter(|t| t.name.starts_with("big__")).count();
        if imported != BIG_TOOLS + 1 {
            return Err(format!(
                "tools/list shows {imported} imported tools, expected {}",
                BIG_TOOLS + 1
            ));
        }
        eprintln!(
            "   run {run}: initialize after {}, tools/list ({} tools) after {}",
            ms(t_ready),
            tools.len(),
            ms(t_total)
        );
        ready.push(t_ready);
        listed.push(t_total - t_ready);
        listed_tools = tools.len();
        total.push(t_total);
        if run + 1 == s.import_runs {
            let peer = conn.peer().clone();
            let first = call(&peer, SEARCH, 0).await?;
            let top = first
                .structured_content
                .as_ref()
                .and_then(|v| v["results"].get(0))
                .and_then(|r| r["id"].as_str())
                .unwrap_or("none")
                .to_owned();
            warm_up(&peer, SEARCH, 200).await?;
            let cpu0 = conn.cpu();
            let lat = sequential(&peer, SEARCH, SEARCH_CALLS, 0).await?;
            let cpu = per_call(cpu0, conn.cpu(), SEARCH_CALLS);
            search = Some((Stats::of(lat), top, cpu));
            memory = conn.rss_mib();
        }
        conn.close().await;
    }
    let median = |mut v: Vec<Duration>| {
        v.sort_unstable();
        let (lo, hi) = (v[0], v[v.len() - 1]);
        format!("{} ({}–{})", ms(v[v.len() / 2]), ms(lo), ms(hi))
    };
    let mut out = format!(
        "\n### 3. Importing {} tools; `search_tools` over them\n\nUpstream: a bare rmcp server (this bench binary) listing `add` plus {} generated tools (verb_noun names, 10–30-word descriptions, 1–5 typed parameters) in pages of {UPSTREAM_PAGE}; `toolexec serve --expose both` with it as `[[servers]]` (built-ins off). Median of {} runs (min–max).\n\n| measurement | result |\n|---|---|\n",
        thousands(BIG_TOOLS),
        thousands(BIG_TOOLS),
        s.import_runs
    );
    let _ = writeln!(
        out,
        "| upstream alone: spawn + initialize + tools/list of {} tools | {} |",
        thousands(BIG_TOOLS + 1),
        median(alone)
    );
    let _ = writeln!(
        out,
        "| gateway: spawn until `initialize` answered (upstream spawned and listed, {} tools registered) | {} |",
        thousands(BIG_TOOLS + 1),
        median(ready)
    );
    let _ = writeln!(
        out,
        "| gateway: then `tools/list` of all {} tools over MCP | {} |",
        thousands(listed_tools),
        median(listed)
    );
    let _ = writeln!(
        out,
        "| **gateway: spawn until `tools/list` shows them** | **{}** |",
        median(total)
    );
    if let Some((st, top, cpu)) = search {
        let _ = writeln!(
            out,
            "| `search_tools` (limit 10, {} queries, {SEARCH_CALLS} calls): p50 / p90 / p99 | **{}** / {} / {} |",
            SEARCH_QUERIES.len(),
            us(st.p50),
            us(st.p90),
            us(st.p99)
        );
        let _ = writeln!(
            out,
            "| gateway CPU per `search_tools` call | {} |",
            opt_us(cpu)
        );
        if let Some(mib) = memory {
            let _ = writeln!(
                out,
                "| gateway resident memory with the {} tools | {mib:.0} MiB |",
                thousands(BIG_TOOLS + 1)
            );
        }
        let _ = writeln!(out, "\nTop hit for \"{}\": `{top}`.", SEARCH_QUERIES[0]);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// The bare rmcp upstream (this binary with TOOLEXEC_BENCH_UPSTREAM set)

mod upstream {
    use super::*;
    use toolexec::{Exec, Secret};
    use toolexec_mcp::gateway::{Expose, Gateway, GatewayOptions};
    use toolexec_mcp::upstream::{Upstream, UpstreamConfig, UpstreamTransport};

    const VERBS: &[&str] = &[
        "get",
        "list",
        "create",
        "update",
        "delete",
        "search",
        "find",
        "fetch",
        "send",
        "upload",
        "download",
        "convert",
        "translate",
        "analyze",
        "summarize",
        "validate",
        "parse",
        "format",
        "compute",
        "generate",
        "schedule",
        "cancel",
        "resolve",
        "lookup",
        "sync",
        "export",
        "import",
        "render",
        "merge",
        "split",
    ];
    const NOUNS: &[&str] = &[
        "user",
        "file",
        "weather",
        "forecast",
        "invoice",
        "payment",
        "order",
        "product",
        "image",
        "video",
        "email",
        "message",
        "calendar",
        "event",
        "ticket",
        "issue",
        "repository",
        "commit",
        "branch",
        "document",
        "spreadsheet",
        "record",
        "customer",
        "account",
        "balance",
        "stock",
        "price",
        "currency",
        "address",
        "location",
        "route",
        "flight",
        "hotel",
        "booking",
        "recipe",
        "movie",
        "song",
        "playlist",
        "article",
        "news",
        "translation",
        "sentence",
        "contact",
        "report",
        "metric",
        "log",
        "alert",
        "container",
        "cluster",
        "database",
    ];
    const QUALIFIERS: &[&str] = &[
        "", "_v2", "_batch", "_by_id", "_async", "_legacy", "_bulk", "_preview",
    ];
    const WORDS: &[&str] = &[
        "returns",
        "details",
        "information",
        "given",
        "specified",
        "current",
        "latest",
        "historical",
        "data",
        "api",
        "service",
        "request",
        "response",
        "result",
        "query",
        "filter",
        "sort",
        "page",
        "limit",
        "identifier",
        "unique",
        "name",
        "title",
        "status",
        "value",
        "field",
        "date",
        "time",
        "range",
        "daily",
        "weekly",
        "monthly",
        "users",
        "customers",
        "orders",
        "products",
        "inventory",
        "shipping",
        "delivery",
        "tracking",
        "city",
        "country",
        "region",
        "coordinates",
        "distance",
        "directions",
        "traffic",
        "temperature",
        "humidity",
        "wind",
        "rain",
        "climate",
        "storm",
        "market",
        "exchange",
        "rates",
        "crypto",
        "wallet",
        "transaction",
        "tax",
        "refund",
        "subscription",
        "billing",
        "chat",
        "channel",
        "notification",
        "sms",
        "phone",
        "meeting",
        "reminder",
        "task",
        "project",
        "bug",
        "pull",
        "review",
        "code",
        "folder",
        "storage",
        "bucket",
        "photo",
        "audio",
        "music",
        "album",
        "artist",
        "lyrics",
        "episode",
        "rating",
        "headline",
        "language",
        "text",
        "grammar",
        "sentiment",
        "summary",
        "keywords",
        "entities",
        "model",
        "prediction",
        "score",
        "ingredients",
        "nutrition",
        "restaurant",
        "menu",
        "airport",
        "airline",
        "travel",
        "trip",
        "sports",
        "team",
        "player",
        "league",
        "season",
        "statistics",
        "health",
        "fitness",
        "sleep",
        "medical",
        "job",
        "salary",
        "company",
        "employee",
        "domain",
        "dns",
        "certificate",
        "security",
        "vulnerability",
        "password",
        "token",
        "login",
        "session",
        "permission",
        "monitoring",
        "uptime",
        "server",
        "deploy",
        "table",
        "rows",
        "sql",
        "backup",
        "restore",
        "cache",
        "queue",
        "webhook",
        "quickly",
        "securely",
        "automatically",
        "supports",
        "multiple",
        "formats",
        "optional",
        "default",
    ];
    const PARAMS: &[(&str, &str)] = &[
        ("id", "string"),
        ("query", "string"),
        ("limit", "integer"),
        ("offset", "integer"),
        ("city", "string"),
        ("country", "string"),
        ("start_date", "string"),
        ("end_date", "string"),
        ("currency", "string"),
        ("amount", "number"),
        ("verbose", "boolean"),
        ("language", "string"),
        ("format", "string"),
        ("page", "integer"),
        ("latitude", "number"),
        ("longitude", "number"),
        ("email", "string"),
        ("tags", "array"),
        ("include_archived", "boolean"),
        ("timeout_seconds", "number"),
    ];

    /// Deterministic pseudo-random numbers (a 64-bit LCG).
    struct Lcg(u64);

    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((self.0 >> 33) % n as u64) as usize
        }

        fn words(&mut self, lo: usize, hi: usize) -> String {
            let n = lo + self.below(hi - lo + 1);
            (0..n)
                .map(|_| WORDS[self.below(WORDS.len())])
                .collect::<Vec<_>>()
                .join(" ")
        }
    }

    fn object(v: Value) -> Arc<JsonObject> {
        match v {
            Value::Object(m) => Arc::new(m),
            _ => unreachable!("schemas are objects"),
        }
    }

    /// `add` plus `extra` generated tools: verb_noun names with qualifiers,
    /// 10–30-word descriptions, 1–5 typed parameters each.
    pub(super) fn tools(extra: usize) -> Vec<McpTool> {
        let add = McpTool::new(
            "add",
            "Adds two numbers and returns a + b.",
            object(json!({
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"]
            })),
        )
        .with_raw_output_schema(object(json!({
            "type": "object",
            "properties": {"result": {"type": "number"}},
            "required": ["result"]
        })));
        let mut tools = vec![add];
        let mut rng = Lcg(0x5eed);
        'outer: for q in QUALIFIERS {
            for n in NOUNS {
                for v in VERBS {
                    if tools.len() > extra {
                        break 'outer;
                    }
                    let name = format!("{v}_{n}{q}");
                    let description = format!(
                        "{} {n} {}",
                        v[..1].to_uppercase() + &v[1..],
                        rng.words(10, 30)
                    );
                    let mut props = JsonObject::new();
                    let mut required = Vec::new();
                    for k in 0..1 + rng.below(5) {
                        let (p, ty) = PARAMS[rng.below(PARAMS.len())];
                        let key = if props.contains_key(p) {
                            format!("{p}_{k}")
                        } else {
                            p.to_owned()
                        };
                        let mut schema = json!({"type": ty, "description": rng.words(3, 8)});
                        if ty == "array" {
                            schema["items"] = json!({"type": "string"});
                        }
                        if k == 0 || rng.below(3) == 0 {
                            required.push(key.clone());
                        }
                        props.insert(key, schema);
                    }
                    tools.push(McpTool::new(
                        name,
                        description,
                        object(
                            json!({"type": "object", "properties": props, "required": required}),
                        ),
                    ));
                }
            }
        }
        assert_eq!(tools.len(), extra + 1, "not enough name combinations");
        tools
    }

    #[derive(Clone)]
    struct Server {
        tools: Arc<Vec<McpTool>>,
    }

    impl ServerHandler for Server {
        fn get_info(&self) -> ServerConfig {
            let mut capabilities = ServerCapabilities::default();
            capabilities.tools = Some(ToolsCapability::default());
            capabilities.resources = Some(rmcp::model::ResourcesCapability::default());
            ServerConfig::new(capabilities)
                .with_server_info(Implementation::new("toolexec-bench-upstream", "0"))
        }

        async fn list_resources(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<rmcp::model::ListResourcesResult, McpError> {
            let resource = rmcp::model::Resource::new(BIG_RESOURCE, "one-mebibyte");
            Ok(rmcp::model::ListResourcesResult::with_all_items(vec![
                resource,
            ]))
        }

        async fn read_resource(
            &self,
            request: rmcp::model::ReadResourceRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
            if request.uri != BIG_RESOURCE {
                return Err(McpError::resource_not_found("no such resource", None));
            }
            static BIG: std::sync::OnceLock<String> = std::sync::OnceLock::new();
            let text = BIG.get_or_init(|| "0123456789abcdef".repeat(BIG_RESOURCE_BYTES / 16));
            Ok(rmcp::model::ReadResourceResponse::Complete(
                rmcp::model::ReadResourceResult::new(vec![rmcp::model::ResourceContents::text(
                    text.clone(),
                    BIG_RESOURCE,
                )]),
            ))
        }

        async fn list_tools(
            &self,
            request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, McpError> {
            let start: usize = match request.and_then(|r| r.cursor) {
                None => 0,
                Some(c) => c
                    .parse()
                    .map_err(|_| McpError::invalid_params("bad cursor", None))?,
            };
            let end = (start + UPSTREAM_PAGE).min(self.tools.len());
            let mut page =
                ListToolsResult::with_all_items(self.tools[start.min(end)..end].to_vec());
            page.next_cursor = (end < self.tools.len()).then(|| end.to_string());
            Ok(page)
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, McpError> {
            let args = request.arguments.unwrap_or_default();
            let num = |k: &str| args.get(k).and_then(Value::as_f64);
            match (request.name.as_ref(), num("a"), num("b")) {
                ("add", Some(a), Some(b)) => {
                    Ok(CallToolResult::structured(json!({"result": a + b})).into())
                }
                ("add", _, _) => Err(McpError::invalid_params("a and b must be numbers", None)),
                (name, _, _) => Ok(CallToolResult::structured(json!({"tool": name})).into()),
            }
        }
    }

    /// A minimal rmcp proxy: relays `tools/list` and `tools/call` to a bare
    /// upstream it spawns (this binary again), nothing else.
    #[derive(Clone)]
    struct Relay {
        peer: Peer<RoleClient>,
    }

    impl ServerHandler for Relay {
        fn get_info(&self) -> ServerConfig {
            let mut capabilities = ServerCapabilities::default();
            capabilities.tools = Some(ToolsCapability::default());
            capabilities.resources = Some(Default::default());
            ServerConfig::new(capabilities)
                .with_server_info(Implementation::new("toolexec-bench-relay", "0"))
        }

        async fn read_resource(
            &self,
            request: rmcp::model::ReadResourceRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<rmcp::model::ReadResourceResponse, McpError> {
            self.peer
                .read_resource(request)
                .await
                .map(rmcp::model::ReadResourceResponse::Complete)
                .map_err(|e| McpError::internal_error(e.to_string(), None))
        }

        async fn list_tools(
            &self,
            request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, McpError> {
            self.peer
                .list_tools(request)
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, McpError> {
            self.peer
                .call_tool_once(request)
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))
        }
    }

    async fn serve(server: impl ServerHandler) {
        let running = if std::env::var_os(STDIO_ENV).is_some_and(|v| v == "pipes") {
            server.serve(rmcp::transport::stdio_pipes()).await
        } else {
            server.serve(rmcp::transport::stdio()).await
        };
        match running {
            Ok(running) => {
                let _ = running.waiting().await;
            }
            Err(e) => eprintln!("bench upstream: {e}"),
        }
    }

    /// Copies bytes from `from` to `to` through a 64 KiB buffer until
    /// `from` ends: what any proxy process must at least do with a message
    /// (read it into its memory and write it out), with no parsing.
    fn copy_bytes(mut from: impl std::io::Read, mut to: impl std::io::Write) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// A byte relay in front of this binary as a bare server: one thread
    /// per direction copying the pipes (no MCP, no Tokio), the floor of any
    /// proxy that runs as its own process.
    fn byte_relay() {
        let mut child = std::process::Command::new(std::env::current_exe().expect("exe"))
            .env(UPSTREAM_ENV, "0")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the relayed upstream");
        let (to_child, from_child) = (child.stdin.take(), child.stdout.take());
        let down = std::thread::spawn(move || {
            copy_bytes(std::io::stdin().lock(), to_child.expect("stdin"));
        });
        copy_bytes(from_child.expect("stdout"), std::io::stdout().lock());
        let _ = down.join();
        let _ = child.wait();
    }

    /// `mode`: the number of generated tools to list besides `add`,
    /// `gateway`, `relay` or `bytes`.
    pub(super) fn main(mode: &str) {
        if mode == "bytes" {
            byte_relay();
            return;
        }
        // The proxies' runtime (`TOOLEXEC_BENCH_RT`: `current` or `one`
        // worker; default as `toolexec serve`); upstreams keep the default.
        let flavor = match mode {
            "gateway" | "relay" => std::env::var("TOOLEXEC_BENCH_RT").ok(),
            _ => None,
        };
        let rt = match flavor.as_deref() {
            Some("current") => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build(),
            Some("one") => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build(),
            _ => tokio::runtime::Runtime::new(),
        }
        .expect("tokio runtime");
        rt.block_on(async {
            if mode == "gateway" {
                // The toolexec gateway library, as `toolexec serve --expose
                // all` runs it, over the built-ins plus an optional upstream
                // `NS COMMAND ARGS...` from the command line.
                let catalog = toolexec_builtins::catalog();
                let argv: Vec<String> = std::env::args().skip(1).collect();
                let _upstream = match argv.as_slice() {
                    [ns, command, args @ ..] => Some(
                        Upstream::connect(
                            UpstreamConfig::new(
                                ns.clone(),
                                UpstreamTransport::Stdio {
                                    command: command.clone(),
                                    args: args.to_vec(),
                                    // A bare upstream, on rmcp's `stdio()` whatever
                                    // this process serves on.
                                    env: [
                                        (UPSTREAM_ENV.to_owned(), Secret::new("0")),
                                        (STDIO_ENV.to_owned(), Secret::new("stdio")),
                                    ]
                                    .into(),
                                    inherit_env: Vec::new(),
                                    cwd: None,
                                },
                            ),
                            catalog.clone(),
                        )
                        .await
                        .expect("connect the upstream"),
                    ),
                    _ => None,
                };
                let options = GatewayOptions {
                    expose: Expose::All,
                    ..GatewayOptions::default()
                };
                serve(Gateway::new(Exec::new(catalog), options)).await;
            } else if mode == "relay" {
                // The upstream's command line follows; with none, this binary.
                let mut argv = std::env::args_os().skip(1);
                let mut cmd = match argv.next() {
                    Some(program) => tokio::process::Command::new(program),
                    None => tokio::process::Command::new(std::env::current_exe().expect("exe")),
                };
                cmd.args(argv).env(UPSTREAM_ENV, "0");
                let transport = TokioChildProcess::new(cmd).expect("spawn the relayed upstream");
                let upstream = ().serve(transport).await.expect("relayed upstream handshake");
                serve(Relay {
                    peer: upstream.peer().clone(),
                })
                .await;
                let _ = upstream.cancel().await;
            } else {
                let extra = mode.parse().unwrap_or(0);
                serve(Server {
                    tools: Arc::new(tools(extra)),
                })
                .await;
            }
        });
    }
}

//! Command-line arguments (clap).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use toolexec::units::{parse_duration, parse_size};

/// toolexec: run AI-agent tools from a catalog — search, describe, run, chain.
#[derive(Debug, Parser)]
#[command(name = "toolexec", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// Machine-readable JSON output instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Configuration file (default: ./toolexec.toml when present, else the
    /// built-in catalog alone).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Log line format on stderr (`json`: one object per line, with the
    /// current span's fields and trace id).
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormatArg,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Browse the catalog: list, search, describe, namespaces.
    #[command(subcommand)]
    Tools(ToolsCommand),
    /// Run one tool: `toolexec run math:add '{"a":1,"b":2}'`.
    Run(RunArgs),
    /// Run a chain of steps from a JSON file (or `-` for stdin).
    Chain(ChainArgs),
    /// Run a JavaScript file (or `-` for stdin) in code mode: one sandboxed
    /// script that calls many tools (`await tools.math.add({a: 1, b: 2})`).
    Code(CodeArgs),
    /// Serve the catalog to agents as an MCP server (stdio, or streamable HTTP with --http).
    Serve(ServeArgs),
    /// List the sandbox runtimes: isolation, strongest profile, unit kinds,
    /// the profiles each serves in the configured mapping, and availability.
    Runtimes,
    /// Sign in to upstream servers with OAuth (`[[servers]] auth.oauth`):
    /// login, status, logout.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// Run units for remote callers (`[runtimes.remote]` elsewhere) on this
    /// machine's runtimes, over HTTP with HMAC-signed requests.
    RuntimeServer(RuntimeServerArgs),
    /// Serve runs for a NATS JetStream cluster (`[cluster]`): pull the
    /// calls of this machine's namespaces, run them on its own catalog.
    Worker(WorkerArgs),
    /// The cluster's state: workers, capacity, queue depth, redeliveries.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// The sandboxed side of hardened code mode (started by sandbox runtimes).
    #[command(name = "__script-worker", hide = true)]
    ScriptWorker,
}

/// `toolexec auth ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum AuthCommand {
    /// Sign in to SERVER: prints the authorization URL, opens a browser when
    /// one is available, and waits for the redirect on 127.0.0.1.
    Login(AuthLoginArgs),
    /// What the token files hold: signed in, scopes, expiry (never tokens).
    Status {
        /// One server (default: every server with `auth.oauth`).
        server: Option<String>,
    },
    /// Delete SERVER's stored tokens.
    Logout {
        /// The server's name in `[[servers]]`.
        server: String,
    },
}

/// `toolexec worker`.
#[derive(Debug, Args)]
pub(crate) struct WorkerArgs {
    /// NATS server URL (default: `[cluster] nats`).
    #[arg(long, value_name = "URL")]
    pub nats: Option<String>,
    /// Cluster name (default: `[cluster] name`, else `default`).
    #[arg(long)]
    pub cluster: Option<String>,
    /// A namespace to serve (repeatable; default: `[worker] namespaces`).
    #[arg(long = "namespace", value_name = "NS")]
    pub namespaces: Vec<String>,
    /// Runs at a time (default: `[worker] capacity`, else 16).
    #[arg(long)]
    pub capacity: Option<usize>,
    /// This worker's id (default: `[worker] id`, else host name and pid).
    #[arg(long)]
    pub id: Option<String>,
    /// Also run code-mode scripts sent to the cluster (durable code runs,
    /// on this worker's catalog; default: `[worker] code`).
    #[arg(long)]
    pub code: bool,
    /// The profile of those scripts: `standard` in process, `hardened` in
    /// a sandbox runtime of this machine (default: `[worker]
    /// code_profile`, else standard).
    #[arg(long, value_enum)]
    pub code_profile: Option<CodeProfile>,
    /// Also run callers' sandboxed command units of this profile
    /// (repeatable; default: `[worker] unit_profiles`), on a runtime of
    /// this machine that enforces it (checked at start).
    #[arg(long = "unit-profile", value_name = "PROFILE")]
    pub unit_profiles: Vec<toolexec_runtime::Profile>,
}

/// `toolexec cluster ...`.
#[derive(Debug, Subcommand)]
pub(crate) enum ClusterCommand {
    /// Workers (capacity, runs in flight, draining), and each namespace's
    /// queue: pending, running, redelivered.
    Status,
}

/// `toolexec auth login`.
#[derive(Debug, Args)]
pub(crate) struct AuthLoginArgs {
    /// The server's name in `[[servers]]`.
    pub server: String,
    /// A scope to ask for besides the configured ones (repeatable), as a
    /// server's `insufficient_scope` refusal names them.
    #[arg(long = "scope", value_name = "SCOPE")]
    pub scopes: Vec<String>,
    /// Port of the loopback redirect listener (0: any free port; a
    /// pre-registered client needs the port its redirect URI names).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Print the URL only, never start a browser.
    #[arg(long)]
    pub no_browser: bool,
    /// How long to wait for the redirect.
    #[arg(long, value_parser = parse_duration, default_value = "5m")]
    pub timeout: Duration,
}

/// Log line format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormatArg {
    /// Human-readable lines.
    #[default]
    Text,
    /// JSON Lines.
    Json,
}

/// Where a code-mode script runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum CodeProfile {
    /// In process (QuickJS with enforced limits), as in the `standard` profile.
    #[default]
    Standard,
    /// In a sandbox runtime selected for the `hardened` profile (a separate
    /// worker process under kernel isolation).
    Hardened,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Serve streamable HTTP at ADDR (`PORT` or `IP:PORT`; loopback when only a port), endpoint `/mcp`.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// File holding the bearer token HTTP clients must send (else $TOOLEXEC_TOKEN, else the config's gateway.token).
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,
    /// Serve HTTP without authentication (only for local experiments; on a
    /// loopback address unless --allow-insecure-non-loopback).
    #[arg(long)]
    pub insecure_no_auth: bool,
    /// With --insecure-no-auth, allow a non-loopback --http address: anyone
    /// who can reach it may run every tool.
    #[arg(long, requires = "insecure_no_auth")]
    pub allow_insecure_non_loopback: bool,
    /// What to publish: meta-tools only, every catalog tool, or both.
    #[arg(long, value_enum)]
    pub expose: Option<ExposeArg>,
    /// Where `execute_code` scripts run: in process (`standard`) or in a
    /// sandbox runtime (`hardened`) [default: the config's
    /// gateway.code_profile, else standard].
    #[arg(long, value_enum)]
    pub code_profile: Option<CodeProfile>,
    /// Also serve Prometheus metrics at `http://ADDR/metrics` (`PORT` or
    /// `IP:PORT`; loopback when only a port), unauthenticated: bind it
    /// where only the scraper reaches. With --http they are also at
    /// `/metrics` behind the gateway's token.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("key").required(true).args(["key_file", "key_env"])))]
pub(crate) struct RuntimeServerArgs {
    /// Address to listen on (`IP:PORT`, or `PORT` for loopback); port 0
    /// picks a free one. The bound address is printed on stdout.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub listen: String,
    /// File holding the shared HMAC key (at least 16 bytes).
    #[arg(long, value_name = "PATH")]
    pub key_file: Option<PathBuf>,
    /// Environment variable holding the shared HMAC key.
    #[arg(long, value_name = "NAME")]
    pub key_env: Option<String>,
    /// Accepted clock difference with callers, e.g. `30s` [default: 30s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub max_skew: Option<Duration>,
    /// Largest request body, e.g. `4MiB` [default: 4MiB].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub max_body: Option<usize>,
    /// Units running at once; more are refused with `503 busy` [default: 16].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_runs: Option<u32>,
    /// A `host:port` callers address this server by (a DNS name, a port
    /// mapping), repeatable. Requests are signed for the host they are sent
    /// to; others are refused [default: only the address connections
    /// arrive on].
    #[arg(long = "host", value_name = "HOST:PORT")]
    pub hosts: Vec<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum ExposeArg {
    Meta,
    All,
    Both,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ToolsCommand {
    /// List tools, ordered by id, a page at a time.
    List {
        /// Only this namespace.
        #[arg(long, short)]
        namespace: Option<String>,
        /// Page size (1-1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this cursor (printed at the end of the previous page).
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Ranked search: full text, or fused with embeddings when a model is set.
    Search {
        /// What the tool should do, in words.
        query: String,
        /// Most results.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Only this namespace.
        #[arg(long, short)]
        namespace: Option<String>,
        /// `lexical`, `semantic` or `hybrid` (default: `[search] mode`, else
        /// hybrid with a model, lexical without).
        #[arg(long)]
        mode: Option<String>,
    },
    /// Show a tool's documentation.
    Describe {
        /// Tool id (`namespace:name[:version]`).
        id: String,
        /// How much to show.
        #[arg(long, value_enum, default_value_t = Detail::Full)]
        detail: Detail,
    },
    /// List namespaces with their tool counts.
    Namespaces,
    /// Print the TypeScript declarations of what a code-mode script can call.
    Types {
        /// Only this namespace.
        namespace: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum Detail {
    Summary,
    Schema,
    Full,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Tool id (`namespace:name[:version]`).
    pub id: String,
    /// Arguments as a JSON object, or `-` to read them from stdin. Default `{}`.
    pub args: Option<String>,
    /// Idempotency key of a call to a fleet tool (`[cluster] namespaces`):
    /// a call with a key already run returns the recorded result.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    #[command(flatten)]
    pub flags: RunFlags,
}

#[derive(Debug, Args)]
pub(crate) struct ChainArgs {
    /// JSON file holding an array of steps (or `{"steps": [...]}`); `-` for stdin.
    pub file: PathBuf,
    #[command(flatten)]
    pub flags: RunFlags,
}

#[derive(Debug, Args)]
pub(crate) struct CodeArgs {
    /// JavaScript file: the body of an async function (`await`, `return`); `-` for stdin.
    pub file: PathBuf,
    /// Wall-time limit of the whole script, e.g. `500ms`, `5s`, `2m` [default: 30s].
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Memory limit of the script's heap: bytes, or with KiB, MiB or GiB (`64MiB`) [default: 64MiB].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub memory: Option<usize>,
    /// Most tool calls the script may make [default: 100].
    #[arg(long, value_name = "N")]
    pub max_tool_calls: Option<usize>,
    /// Only let the script call tools matching PATTERN (an id or a glob like
    /// `math:*`); repeatable. Default: every tool.
    #[arg(long = "allow", value_name = "PATTERN")]
    pub allow: Vec<String>,
    /// Most bytes of console output plus result, e.g. `1MiB` [default: 1MiB].
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub max_output: Option<usize>,
    /// Where the script runs: in process (`standard`) or in a sandbox (`hardened`).
    #[arg(long, value_enum, default_value_t = CodeProfile::Standard)]
    pub profile: CodeProfile,
}

#[derive(Debug, Args)]
pub(crate) struct RunFlags {
    /// Deadline per tool call, e.g. `500ms`, `30s`, `2m`.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
    /// Print progress and chunks as they happen.
    #[arg(long)]
    pub stream: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}

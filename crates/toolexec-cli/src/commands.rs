//! Subcommands. Each returns the process exit code: 0 success, 1 tool or
//! execution error, 2 usage or invalid input.

use std::io::{self, Read, Write};
use std::path::Path;

use futures::StreamExt;
use serde_json::{Value, json};
use toolexec::{
    DetailLevel, Error, ErrorBody, ErrorCode, Exec, ListRequest, RunOptions, StreamEvent,
    StreamRequest, parse_chain,
};

use std::sync::Arc;

use toolexec_mcp::upstream::Upstream;

use crate::args::{
    ChainArgs, Cli, Command, Detail, RunArgs, RunFlags, RuntimeServerArgs, ToolsCommand,
};
use crate::config::Config;
use crate::render;
use toolexec_telemetry::Telemetry;

/// Success.
pub(crate) const EXIT_OK: u8 = 0;
/// The tool or its execution failed.
pub(crate) const EXIT_TOOL_ERROR: u8 = 1;
/// Bad usage or invalid input.
pub(crate) const EXIT_USAGE: u8 = 2;

/// Largest JSON document read from a file or stdin.
const MAX_INPUT_BYTES: u64 = 64 << 20;

const TABLE_WIDTH: usize = 120;

/// Exit code for an error: input problems are the caller's (2), the rest 1.
pub(crate) fn exit_code(body: &ErrorBody) -> u8 {
    match body.code {
        ErrorCode::InvalidToolId
        | ErrorCode::ToolNotFound
        | ErrorCode::ValidationInput
        | ErrorCode::InvalidRequest => EXIT_USAGE,
        ErrorCode::LimitExceeded => {
            let limit = body.details.as_ref().and_then(|d| d["limit"].as_str());
            match limit {
                Some("input_bytes" | "input_depth" | "chain_steps") => EXIT_USAGE,
                _ => EXIT_TOOL_ERROR,
            }
        }
        _ => EXIT_TOOL_ERROR,
    }
}

pub(crate) async fn dispatch(cli: Cli) -> u8 {
    let json = cli.json;
    let config = match Config::discover(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let body = ErrorBody {
                code: ErrorCode::InvalidRequest,
                message: e.to_string(),
                details: None,
            };
            return report(&body, json, EXIT_USAGE);
        }
    };
    let serving = matches!(cli.command, Command::Serve(_));
    let telemetry = match crate::telemetry::install(&config, cli.log_format, serving) {
        Ok(t) => t,
        Err(e) => {
            let body = e.to_body();
            return report(&body, json, exit_code(&body));
        }
    };
    let code = dispatch_command(cli, config, &telemetry).await;
    telemetry.shutdown(std::time::Duration::from_secs(5));
    code
}

async fn dispatch_command(cli: Cli, config: Config, telemetry: &Telemetry) -> u8 {
    let json = cli.json;
    // The runtime server needs the runtimes only, not the catalog.
    if let Command::RuntimeServer(args) = &cli.command {
        return runtime_server(&config, args, json).await;
    }
    // The cluster's state needs its connection, not the catalog.
    if let Command::Cluster(cmd) = cli.command {
        return finish(
            crate::fleet::cluster(&config.cluster, cmd, json).await,
            json,
        );
    }
    // Signing in needs the server's settings, not a connection.
    if let Command::Auth(cmd) = &cli.command {
        return finish(crate::auth::run(&config, cmd, json).await, json);
    }
    // `serve`'s own options are checked before any upstream server starts.
    let mut serve_plan = match &cli.command {
        Command::Serve(args) => match crate::serve::plan(&config, args) {
            Ok(plan) => Some(plan),
            Err(e) => {
                let body = e.to_body();
                return report(&body, json, exit_code(&body));
            }
        },
        _ => None,
    };
    let mut runtimes = crate::runtimes::build(&config.runtimes);
    // A worker runs its own namespaces: it never sends them to the fleet.
    let fleet = !matches!(cli.command, Command::Worker(_));
    // `[cluster] profiles`: sandboxed units of those profiles run on the
    // fleet, and nowhere else (no quiet fallback to this machine).
    let fleet_runtime = crate::fleet::units_runtime(&config.cluster, fleet, &mut runtimes);
    let runtimes = Arc::new(runtimes);
    // Policy and quotas are about the gateway's callers: only `serve`
    // enforces them (local commands run as the user who typed them).
    let gate = serve_plan
        .as_mut()
        .map(|plan| (config.policy.clone(), plan.take_quotas()));
    // Only a gateway has clients to relay upstream servers' requests to.
    let relay = serve_plan.is_some();
    let built = build_exec(&config, &runtimes, telemetry, gate, fleet, relay).await;
    let (exec, upstreams, fleet) = match built {
        Ok(x) => x,
        Err(e) => {
            let body = e.to_body();
            return report(&body, json, exit_code(&body));
        }
    };
    if let (Some(runtime), Some(client)) = (&fleet_runtime, &fleet) {
        runtime.bind(client.clone());
    }
    let result = match cli.command {
        Command::Tools(cmd) => tools(&exec, cmd, json),
        Command::Run(args) => run(&exec, args, json).await,
        Command::Worker(args) => {
            crate::fleet::worker(exec, runtimes.clone(), &config.cluster, args, json).await
        }
        Command::Chain(args) => chain(&exec, args, json).await,
        Command::Code(args) => {
            // `[cluster] code = true`: scripts run on the fleet, on a
            // worker of their profile.
            let fleet = fleet.filter(|_| config.cluster.code);
            crate::code::run(&exec, &runtimes, fleet, args, json).await
        }
        Command::Runtimes => crate::runtimes::list(&runtimes, json)
            .map(|()| EXIT_OK)
            .map_err(Failure::Io),
        // Handled in `main` before any configuration is read, and above.
        Command::ScriptWorker
        | Command::RuntimeServer(_)
        | Command::Auth(_)
        | Command::Cluster(_) => Ok(EXIT_USAGE),
        Command::Serve(_) => {
            let plan = serve_plan.expect("planned before connecting");
            crate::serve::serve(
                exec,
                runtimes.clone(),
                upstreams.clone(),
                fleet,
                config.cluster.code,
                plan,
                telemetry,
            )
            .await
            .map(|()| EXIT_OK)
            .map_err(Failure::Error)
        }
    };
    for upstream in upstreams {
        upstream.shutdown().await;
    }
    finish(result, json)
}

/// The exit code of a command's result, reporting its failure.
pub(crate) fn finish(result: Result<u8, Failure>, json: bool) -> u8 {
    match result {
        Ok(code) => code,
        Err(Failure::Error(e)) => {
            let body = e.to_body();
            report(&body, json, exit_code(&body))
        }
        Err(Failure::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(Failure::Io(e)) => {
            eprintln!("error: {e}");
            EXIT_TOOL_ERROR
        }
    }
}

/// `toolexec runtime-server`: the key and flags are checked first (exit 2),
/// then the server runs until SIGTERM or Ctrl-C (exit 0).
async fn runtime_server(config: &Config, args: &RuntimeServerArgs, json: bool) -> u8 {
    let result = match crate::runtime_server::server_config(args) {
        Ok(server_config) => {
            let runtimes = crate::runtimes::build(&config.runtimes);
            crate::runtime_server::run(runtimes, server_config, args, json).await
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(e) => {
            let body = e.to_body();
            report(&body, json, exit_code(&body))
        }
    }
}

pub(crate) enum Failure {
    Error(Error),
    Io(io::Error),
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure::Error(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Io(e)
    }
}

/// The catalog the configuration describes: enabled built-ins, command
/// tools, the operations of every OpenAPI document, plain HTTP tools, the
/// methods of every gRPC service, and
/// every upstream server's tools (connected before returning, unless
/// `lazy`).
async fn build_exec(
    config: &Config,
    runtimes: &Arc<toolexec_runtime::Runtimes>,
    telemetry: &Telemetry,
    gate: Option<(
        Option<toolexec::policy::Policy>,
        Option<toolexec::quota::Quotas>,
    )>,
    fleet: bool,
    relay_client_requests: bool,
) -> Result<
    (
        Exec,
        Vec<Arc<Upstream>>,
        Option<Arc<toolexec_fleet::FleetClient>>,
    ),
    Error,
> {
    let catalog = Arc::new(toolexec::Catalog::new());
    toolexec_builtins::register(&catalog, &config.builtins)?;
    for def in &config.commands {
        toolexec_runtime::CommandTool::register(&catalog, def.clone(), runtimes.clone())?;
    }
    for options in &config.openapi {
        let import = toolexec_http::openapi::import(options.clone()).await?;
        for s in &import.skipped {
            tracing::warn!(api = %options.name, operation = %s.operation, "operation skipped: {}", s.reason);
        }
        catalog.register_many(import.tools(), false)?;
    }
    for (tool, client) in &config.http {
        let (definition, backend) = tool.clone().build(client.clone())?;
        catalog.register(definition, backend)?;
    }
    for options in &config.grpc {
        // Skipped methods are logged by the import.
        let import = toolexec_grpc::import(options.clone()).await?;
        catalog.register_many(import.tools(), false)?;
    }
    let mut upstreams = Vec::with_capacity(config.servers.len());
    for server in &config.servers {
        let mut server = server.clone();
        if !relay_client_requests {
            server.relay = toolexec_mcp::upstream::ClientRelay::NONE;
        }
        upstreams.push(Arc::new(Upstream::connect(server, catalog.clone()).await?));
    }
    let fleet = if fleet {
        crate::fleet::attach(&config.cluster, &catalog).await?
    } else {
        None
    };
    attach_model(&catalog, &config.search)?;
    let mut exec = telemetry.instrument(
        Exec::builder()
            .catalog(catalog)
            .limits(config.limits.clone()),
    );
    if let Some((policy, quotas)) = gate {
        if let Some(policy) = policy {
            exec = exec.policy(policy);
        }
        if let Some(quotas) = quotas {
            exec = exec.quotas(quotas);
        }
    }
    let exec = exec.build();
    Ok((exec, upstreams, fleet))
}

/// `[search] model`: the catalog's tools are embedded in the background
/// (vectors cached under `cache`, default `$XDG_CACHE_HOME/toolexec/embeddings`
/// or `~/.cache/toolexec/embeddings`) at `precision`, and `mode` becomes
/// the default.
fn attach_model(
    catalog: &Arc<toolexec::Catalog>,
    search: &crate::config::SearchConfig,
) -> Result<(), Error> {
    #[cfg(feature = "embeddings")]
    if let Some(dir) = &search.model {
        let precision = if search.exact {
            toolexec_embed::Precision::F32
        } else {
            toolexec_embed::Precision::Int8
        };
        let model = toolexec_embed::SentenceModel::load_with(dir, precision)?;
        let cache = search.cache.clone().unwrap_or_else(default_cache);
        let embedder = toolexec_embed::CachedEmbedder::new(model, &cache);
        catalog.set_embedder(Arc::new(embedder))?;
    }
    if let Some(mode) = search.mode {
        catalog.set_search_mode(mode)?;
    }
    Ok(())
}

#[cfg(feature = "embeddings")]
fn default_cache() -> std::path::PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("toolexec").join("embeddings")
}

pub(crate) fn report(body: &ErrorBody, json: bool, code: u8) -> u8 {
    let mut err = io::stderr().lock();
    let _ = if json {
        render::json(&mut err, &json!({ "error": body }))
    } else {
        render::error(&mut err, body)
    };
    code
}

fn tools(exec: &Exec, cmd: ToolsCommand, json: bool) -> Result<u8, Failure> {
    let mut out = io::stdout().lock();
    match cmd {
        ToolsCommand::List {
            namespace,
            limit,
            cursor,
        } => {
            let page = exec.catalog().list(&ListRequest {
                namespace,
                cursor,
                limit: Some(limit),
            })?;
            if json {
                let tools: Vec<Value> = page
                    .tools
                    .iter()
                    .map(|t| serde_json::to_value(t.tool()).unwrap_or(Value::Null))
                    .collect();
                render::json(
                    &mut out,
                    &json!({"tools": tools, "next_cursor": page.next_cursor}),
                )?;
            } else {
                let rows: Vec<Vec<String>> = page
                    .tools
                    .iter()
                    .map(|t| vec![t.tool().id.to_string(), t.tool().summary().to_owned()])
                    .collect();
                render::table(&mut out, &["ID", "SUMMARY"], &rows, TABLE_WIDTH)?;
                if let Some(c) = page.next_cursor {
                    writeln!(out, "\nmore: toolexec tools list --cursor {c}")?;
                }
            }
        }
        ToolsCommand::Search {
            query,
            limit,
            namespace,
            mode,
        } => {
            let limit = limit.clamp(1, 100);
            let catalog = exec.catalog();
            let mode = match mode {
                Some(m) => toolexec::search::SearchMode::parse(&m).ok_or_else(|| {
                    Error::invalid_request(
                        "mode",
                        format!("{m:?} is not lexical, semantic or hybrid"),
                    )
                })?,
                None => catalog.default_search_mode(),
            };
            // A one-shot search waits for the tools to be embedded (from
            // the cache, after the first time).
            if mode != toolexec::search::SearchMode::Lexical {
                catalog.wait_for_embeddings(std::time::Duration::from_secs(3600));
            }
            let results: Vec<toolexec::ToolMatch> = catalog
                .search_with(&query, limit, namespace.as_deref(), mode)?
                .iter()
                .map(toolexec::ToolMatch::from)
                .collect();
            if json {
                render::json(&mut out, &json!({ "results": results }))?;
            } else if results.is_empty() {
                writeln!(out, "no tools match {query:?}")?;
            } else {
                let rows: Vec<Vec<String>> = results
                    .iter()
                    .map(|m| vec![m.id.clone(), format!("{:.2}", m.score), m.summary.clone()])
                    .collect();
                render::table(&mut out, &["ID", "SCORE", "SUMMARY"], &rows, TABLE_WIDTH)?;
            }
        }
        ToolsCommand::Describe { id, detail } => {
            let level = match detail {
                Detail::Summary => DetailLevel::Summary,
                Detail::Schema => DetailLevel::Schema,
                Detail::Full => DetailLevel::Full,
            };
            let d = exec.describe_tool(&id, level)?;
            let typescript = match level {
                DetailLevel::Summary => None,
                _ => Some(toolexec_code::typescript_declaration(
                    exec.catalog().get(&id)?.tool(),
                )),
            };
            let d = crate::code::Described {
                description: &d,
                typescript,
            };
            if json {
                render::json(&mut out, &d)?;
            } else {
                write!(out, "{}", crate::code::describe_markdown(&d))?;
            }
        }
        ToolsCommand::Types { namespace } => {
            if let Some(ns) = &namespace
                && !exec.list_namespaces().iter().any(|n| &n.name == ns)
            {
                return Err(Error::invalid_request(
                    "namespace",
                    format!("no namespace {ns:?} in the catalog (see `toolexec tools namespaces`)"),
                )
                .into());
            }
            let ts = toolexec_code::typescript_declarations(exec.catalog(), namespace.as_deref());
            if json {
                render::json(&mut out, &json!({"namespace": namespace, "typescript": ts}))?;
            } else {
                write!(out, "{ts}")?;
            }
        }
        ToolsCommand::Namespaces => {
            let ns = exec.list_namespaces();
            if json {
                render::json(&mut out, &json!({ "namespaces": ns }))?;
            } else {
                let rows: Vec<Vec<String>> = ns
                    .iter()
                    .map(|n| vec![n.name.clone(), n.tools.to_string()])
                    .collect();
                render::table(&mut out, &["NAMESPACE", "TOOLS"], &rows, TABLE_WIDTH)?;
            }
        }
    }
    Ok(EXIT_OK)
}

async fn run(exec: &Exec, args: RunArgs, json: bool) -> Result<u8, Failure> {
    let input = match args.args.as_deref() {
        None => Value::Object(Default::default()),
        Some("-") => parse_json("args", &read_stdin()?)?,
        Some(text) => parse_json("args", text)?,
    };
    if !input.is_object() {
        return Err(Error::invalid_request("args", "ARGS_JSON must be a JSON object").into());
    }
    let opts = RunOptions {
        idempotency_key: args.idempotency_key,
        ..options(&args.flags)
    };
    if args.flags.stream {
        let request = StreamRequest::Tool {
            id: args.id,
            args: input,
        };
        return stream(exec, request, opts, json).await;
    }
    let output = exec.run_tool_with(&args.id, input, &opts).await?;
    let mut out = io::stdout().lock();
    if json {
        render::json(&mut out, &output)?;
    } else {
        render::value(&mut out, &output.value)?;
    }
    Ok(EXIT_OK)
}

async fn chain(exec: &Exec, args: ChainArgs, json: bool) -> Result<u8, Failure> {
    let text = if args.file == Path::new("-") {
        read_stdin()?
    } else {
        read_file(&args.file)?
    };
    let steps = parse_chain(&parse_json("chain", &text)?)?;
    let opts = options(&args.flags);
    if args.flags.stream {
        return stream(exec, StreamRequest::Chain(steps), opts, json).await;
    }
    let result = exec.run_chain_with(&steps, &opts).await?;
    let mut out = io::stdout().lock();
    if json {
        render::json(&mut out, &result)?;
    } else {
        let rows: Vec<Vec<String>> = result
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let status = if s.skipped {
                    "skipped".to_owned()
                } else if let Some(e) = &s.error {
                    e.message.clone()
                } else {
                    "ok".to_owned()
                };
                vec![
                    i.to_string(),
                    s.tool_id.clone(),
                    format!("{:.2}ms", s.duration_ms),
                    status,
                ]
            })
            .collect();
        render::table(
            &mut out,
            &["STEP", "TOOL", "TIME", "STATUS"],
            &rows,
            TABLE_WIDTH,
        )?;
        if let Some(v) = &result.output {
            writeln!(out)?;
            render::value(&mut out, v)?;
        }
    }
    Ok(if result.ok {
        EXIT_OK
    } else {
        chain_failure_code(&result)
    })
}

fn chain_failure_code(result: &toolexec::ChainResult) -> u8 {
    result
        .first_error()
        .map(exit_code)
        .unwrap_or(EXIT_TOOL_ERROR)
}

async fn stream(
    exec: &Exec,
    request: StreamRequest,
    opts: RunOptions,
    json: bool,
) -> Result<u8, Failure> {
    let mut events = exec.run_stream(request, opts);
    let mut code = EXIT_OK;
    while let Some(ev) = events.next().await {
        let mut out = io::stdout().lock();
        if json {
            serde_json::to_writer(&mut out, &ev).map_err(io::Error::other)?;
            writeln!(out)?;
        } else {
            render::event(&mut out, &ev)?;
        }
        match &ev {
            StreamEvent::Error { error } => code = exit_code(error),
            StreamEvent::Done { result } => {
                if let toolexec::RunResult::Chain(c) = result.as_ref()
                    && !c.ok
                {
                    code = chain_failure_code(c);
                }
            }
            _ => {}
        }
    }
    Ok(code)
}

fn options(flags: &RunFlags) -> RunOptions {
    RunOptions {
        timeout: flags.timeout,
        ..RunOptions::default()
    }
}

fn parse_json(what: &str, text: &str) -> Result<Value, Error> {
    serde_json::from_str(text)
        .map_err(|e| Error::invalid_request(what, format!("invalid JSON: {e}")))
}

fn read_stdin() -> Result<String, Failure> {
    read_capped(io::stdin().lock(), "stdin", MAX_INPUT_BYTES)
}

fn read_file(path: &Path) -> Result<String, Failure> {
    let file = std::fs::File::open(path).map_err(|e| {
        Error::invalid_request("file", format!("cannot open {}: {e}", path.display()))
    })?;
    read_capped(file, &path.display().to_string(), MAX_INPUT_BYTES)
}

/// Reads at most `max` bytes of UTF-8 text; more is an `invalid_request`.
pub(crate) fn read_capped(reader: impl Read, what: &str, max: u64) -> Result<String, Failure> {
    let mut buf = String::new();
    let n = reader
        .take(max + 1)
        .read_to_string(&mut buf)
        .map_err(|e| Error::invalid_request(what, format!("cannot read: {e}")))?;
    if n as u64 > max {
        return Err(Error::invalid_request(what, format!("larger than {max} bytes")).into());
    }
    Ok(buf)
}

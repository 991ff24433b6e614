//! `toolexec serve`: the MCP gateway over stdio or streamable HTTP.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolexec::quota::Quotas;
use toolexec::{Error, Exec, Secret};

use toolexec_mcp::gateway::{
    self, CodeModeOptions, Expose, Gateway, GatewayOptions, HttpAuth, HttpOptions, NameConflict,
    RunLimits, TaskJournal, TaskOptions,
};
use toolexec_mcp::upstream::Upstream;
use toolexec_runtime::{Profile, Runtimes};

use crate::args::{CodeProfile, ExposeArg, ServeArgs};
use crate::config::Config;
use toolexec_telemetry::Telemetry;

/// Environment variable holding the HTTP bearer token.
pub(crate) const TOKEN_ENV: &str = "TOOLEXEC_TOKEN";

/// What `serve` will do, from the flags and the config. Built before any
/// upstream server is started, so that a usage error (no token, a bad
/// `--http` address) is reported as such, at once.
pub(crate) struct Plan {
    expose: Expose,
    /// Servers with `prefix = false`, in file order.
    unprefixed: Vec<String>,
    /// Every server's name, in file order (for error paths).
    servers: Vec<String>,
    code_profile: Profile,
    runs: RunLimits,
    tasks: toolexec_mcp::gateway::TaskOptions,
    http: Option<HttpOptions>,
    metrics: Option<SocketAddr>,
    /// `[quotas]`, compiled.
    quotas: Option<Quotas>,
}

impl Plan {
    /// The quotas the executor enforces (taken once, when it is built).
    pub(crate) fn take_quotas(&mut self) -> Option<Quotas> {
        self.quotas.take()
    }
}

pub(crate) fn plan(config: &Config, args: &ServeArgs) -> Result<Plan, Error> {
    let expose = match args.expose {
        Some(ExposeArg::Meta) => Expose::Meta,
        Some(ExposeArg::All) => Expose::All,
        Some(ExposeArg::Both) => Expose::Both,
        None => config.gateway.expose.unwrap_or(Expose::Meta),
    };
    let code_profile = match args.code_profile {
        Some(CodeProfile::Standard) => Profile::Standard,
        Some(CodeProfile::Hardened) => Profile::Hardened,
        None => config.gateway.code_profile.unwrap_or(Profile::Standard),
    };
    let runs = config.gateway.runs;
    let metrics = match args.metrics.as_deref() {
        Some(addr) => {
            if config.telemetry.metrics.is_none() {
                return Err(Error::invalid_request(
                    "metrics",
                    "--metrics needs metrics on (the config says telemetry.metrics = false)",
                ));
            }
            Some(parse_bind(addr).map_err(|_| {
                Error::invalid_request("metrics", format!("expected PORT or IP:PORT, got {addr:?}"))
            })?)
        }
        None => None,
    };
    let quotas = config.quotas.as_ref().map(Quotas::new).transpose()?;
    let Some(http) = args.http.as_deref() else {
        return Ok(Plan {
            expose,
            unprefixed: config.unprefixed.clone(),
            servers: config.servers.iter().map(|s| s.name.clone()).collect(),
            code_profile,
            runs,
            tasks: config.gateway.tasks.clone(),
            http: None,
            metrics,
            quotas,
        });
    };
    let bind = parse_bind(http)?;
    let auth = if args.insecure_no_auth {
        if !bind.ip().is_loopback() && !args.allow_insecure_non_loopback {
            return Err(Error::invalid_request(
                "insecure_no_auth",
                format!(
                    "refusing to serve {bind} without authentication: it is not a loopback \
                     address, so anyone who reaches it could run every tool; use a token, \
                     bind 127.0.0.1, or add --allow-insecure-non-loopback"
                ),
            ));
        }
        HttpAuth::InsecureNoAuth
    } else if let Some(oauth) = &config.gateway.oauth {
        if args.token_file.is_some() || std::env::var_os(TOKEN_ENV).is_some() {
            return Err(Error::invalid_request(
                "token",
                format!(
                    "the config says callers bring OAuth access tokens (gateway.auth): \
                     --token-file and ${TOKEN_ENV} would replace them with one static token"
                ),
            ));
        }
        HttpAuth::OAuth(oauth.clone())
    } else if !config.gateway.tokens.is_empty() {
        if args.token_file.is_some() || std::env::var_os(TOKEN_ENV).is_some() {
            return Err(Error::invalid_request(
                "token",
                format!(
                    "the config names its callers' tokens (gateway.tokens): --token-file and \
                     ${TOKEN_ENV} would replace them all with one; remove one or the other"
                ),
            ));
        }
        HttpAuth::Tokens(config.gateway.tokens.clone())
    } else {
        HttpAuth::Bearer(token(args, config)?)
    };
    let mut http = HttpOptions::new(bind, auth);
    http.allowed_origins = config.gateway.allowed_origins.clone();
    http.limits = config.gateway.http_limits;
    Ok(Plan {
        expose,
        unprefixed: config.unprefixed.clone(),
        servers: config.servers.iter().map(|s| s.name.clone()).collect(),
        code_profile,
        runs,
        tasks: config.gateway.tasks.clone(),
        http: Some(http),
        metrics,
        quotas,
    })
}

/// Serves the gateway: the catalog's tools, and the resources, prompts and
/// completion of `upstreams`.
pub(crate) async fn serve(
    exec: Exec,
    runtimes: Arc<Runtimes>,
    upstreams: Vec<Arc<Upstream>>,
    fleet: Option<Arc<toolexec_fleet::FleetClient>>,
    fleet_code: bool,
    plan: Plan,
    telemetry: &Telemetry,
) -> Result<(), Error> {
    // `[cluster] code = true`: scripts run on the fleet, durably. On a
    // worker of the code profile (one that checked at start it can enforce
    // it), their calls outside the worker's namespaces coming back to this
    // gateway's tools.
    let code_executor = fleet.clone().filter(|_| fleet_code).map(|fleet| {
        let code =
            toolexec_fleet::FleetCode::new(fleet, plan.code_profile).with_tools(exec.clone());
        Arc::new(code) as Arc<dyn toolexec_code::CodeExecutor>
    });
    let gateway = Gateway::with_upstreams(
        exec,
        GatewayOptions {
            expose: plan.expose,
            unprefixed: plan.unprefixed.clone(),
            server_name: "toolexec".into(),
            instructions: None,
            code: CodeModeOptions {
                profile: plan.code_profile,
                ..CodeModeOptions::default()
            },
            runtimes: Some(runtimes),
            code_executor,
            runs: plan.runs,
            // Tasks of calls that run on the fleet are kept in the
            // cluster, for any gateway of it to answer and resume.
            tasks: TaskOptions {
                journal: fleet
                    .map(|fleet| Arc::new(crate::fleet::FleetTasks(fleet)) as Arc<dyn TaskJournal>),
                ..plan.tasks.clone()
            },
        },
        upstreams.clone(),
    );
    if let Some(conflict) = gateway.name_conflicts().await.first() {
        return Err(name_conflict(conflict, &plan.servers));
    }
    let shutdown = CancellationToken::new();
    let mut http = plan.http;
    if let Some(metrics) = telemetry.metrics() {
        register_gauges(metrics, &gateway, upstreams);
        if let Some(http) = &mut http {
            let loopback = http.bind.ip().is_loopback();
            http.routes = Some(toolexec_telemetry::metrics_router(
                metrics.clone(),
                loopback,
            ));
        }
        if let Some(addr) = plan.metrics {
            let stop = shutdown.clone();
            let (bound, server) =
                toolexec_telemetry::serve_metrics(addr, metrics.clone(), async move {
                    stop.cancelled().await
                })
                .await
                .map_err(|e| {
                    Error::backend_unavailable("metrics", format!("cannot listen on {addr}: {e}"))
                })?;
            tracing::info!(%bound, "metrics at http://{bound}/metrics");
            tokio::spawn(async move {
                if let Err(e) = server.await {
                    tracing::warn!(error = %e, "the metrics listener stopped");
                }
            });
        }
    }
    let Some(options) = http else {
        let served = gateway::serve_stdio(gateway).await;
        shutdown.cancel();
        return served;
    };
    let signal = shutdown_signal("gateway")?;
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            signal.await;
            shutdown.cancel();
        });
    }
    gateway::serve_http(gateway, options, shutdown)
        .await
        .map(|_| ())
}

/// A name several things claim, as the configuration error it is: at the
/// `prefix` key of the last server involved, naming every one.
fn name_conflict(conflict: &NameConflict, servers: &[String]) -> Error {
    let involved: Vec<&str> = conflict
        .claimants
        .iter()
        .filter(|c| *c != "meta-tool")
        .filter_map(|c| c.split(':').next())
        .collect();
    let field = involved
        .iter()
        .filter_map(|name| servers.iter().position(|s| s == name))
        .max()
        .map_or_else(|| "servers".to_owned(), |i| format!("servers[{i}].prefix"));
    let quoted: Vec<String> = involved.iter().map(|s| format!("{s:?}")).collect();
    let message = if conflict.claimants.first().is_some_and(|c| c == "meta-tool") {
        format!(
            "server {} publishes a tool named {:?} (prefix = false), the name of a \
             meta-tool; prefix its tools or serve with --expose all",
            quoted.join(", "),
            conflict.name
        )
    } else {
        format!(
            "servers {} all publish a {} named {:?} (prefix = false); prefix all but one",
            quoted.join(" and "),
            conflict.kind,
            conflict.name
        )
    };
    Error::invalid_request(field, message)
}

/// Gauges read at each scrape: tool runs in flight and waiting, and each
/// upstream server's state (1 connected, 0 not).
fn register_gauges(
    metrics: &toolexec_telemetry::Metrics,
    gateway: &Gateway,
    upstreams: Vec<Arc<Upstream>>,
) {
    let g = gateway.clone();
    metrics.gauge_fn(
        "toolexec_runs_in_flight",
        "Tool runs (run_tool, run_chain, direct tools) running now",
        move || g.run_load().0 as i64,
    );
    let g = gateway.clone();
    metrics.gauge_fn(
        "toolexec_runs_queued",
        "Tool runs waiting for a slot now",
        move || g.run_load().1 as i64,
    );
    let servers = upstreams.clone();
    metrics.labelled_gauge_fn(
        "toolexec_upstream_restarts",
        "Sessions each upstream server started after its first (restarts, re-initialized HTTP sessions)",
        "server",
        move || {
            servers
                .iter()
                .map(|u| (u.name().to_owned(), u.restarts() as i64))
                .collect()
        },
    );
    metrics.labelled_gauge_fn(
        "toolexec_upstream_up",
        "Upstream MCP servers: 1 when connected, 0 while connecting, restarting or failed",
        "server",
        move || {
            upstreams
                .iter()
                .map(|u| {
                    let up = matches!(
                        u.status(),
                        toolexec_mcp::upstream::UpstreamStatus::Connected { .. }
                    );
                    (u.name().to_owned(), i64::from(up))
                })
                .collect()
        },
    );
}

/// A future resolving on SIGTERM (what service managers send) or SIGINT
/// (Ctrl-C), with both handlers installed before it returns, so a signal
/// sent right after is not fatal. `component` names the server in the error.
pub(crate) fn shutdown_signal(
    component: &'static str,
) -> Result<impl Future<Output = ()> + Send + 'static, Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind| {
        signal(kind)
            .map_err(|e| Error::backend_unavailable(component, format!("signal handler: {e}")))
    };
    let mut term = install(SignalKind::terminate())?;
    let mut int = install(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

fn token(args: &ServeArgs, config: &Config) -> Result<Secret, Error> {
    let missing = || {
        Error::invalid_request(
            "token",
            format!(
                "HTTP mode needs a bearer token: --token-file PATH, ${TOKEN_ENV}, or gateway.token in the config (or --insecure-no-auth)"
            ),
        )
    };
    let token = if let Some(path) = &args.token_file {
        Secret::from_private_file(path).map_err(|e| e.into_error("token_file"))?
    } else if let Ok(t) = std::env::var(TOKEN_ENV) {
        Secret::new(t)
    } else if let Some(t) = &config.gateway.token {
        t.clone()
    } else {
        return Err(missing());
    };
    if token.is_empty() {
        return Err(missing());
    }
    Ok(token)
}

/// `8080` binds 127.0.0.1:8080; `IP:PORT` binds as given.
pub(crate) fn parse_bind(s: &str) -> Result<SocketAddr, Error> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse::<SocketAddr>()
        .map_err(|_| Error::invalid_request("http", format!("expected PORT or IP:PORT, got {s:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_defaults_to_loopback() {
        assert_eq!(
            parse_bind("8080").unwrap(),
            "127.0.0.1:8080".parse().unwrap()
        );
        assert_eq!(parse_bind("[::1]:9").unwrap(), "[::1]:9".parse().unwrap());
        assert!(parse_bind("localhost").is_err());
    }

    /// The one shutdown future both servers use: installed before it is
    /// returned, so a SIGTERM right after creation stops it instead of
    /// killing the process.
    #[tokio::test]
    async fn shutdown_signal_resolves_on_sigterm() {
        let signal = shutdown_signal("test").unwrap();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::time::timeout(std::time::Duration::from_secs(10), signal)
            .await
            .expect("SIGTERM resolves the shutdown future");
    }
}

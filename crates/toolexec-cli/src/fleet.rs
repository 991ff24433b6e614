//! `toolexec worker` and `toolexec cluster status`: the NATS JetStream
//! fleet (`toolexec-fleet`) from the command line.

use std::io::{self, Write};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use toolexec::{BoxFuture, Catalog, Error, Exec};
use toolexec_fleet::{Cluster, ClusterSettings, FleetClient, FleetRuntime, Worker, WorkerOptions};

use crate::args::{ClusterCommand, CodeProfile, WorkerArgs};
use crate::commands::{EXIT_OK, Failure};
use crate::config::ClusterConfig;
use toolexec_runtime::Profile;

/// Runs of one worker at a time when neither `--capacity` nor `[worker]
/// capacity` says.
const DEFAULT_CAPACITY: usize = 16;

/// The cluster settings, `--nats` and `--cluster` over `[cluster]`.
fn settings(
    config: &ClusterConfig,
    nats: Option<&str>,
    name: Option<&str>,
) -> Result<ClusterSettings, Error> {
    let mut settings = match (&config.settings, nats) {
        (_, Some(url)) => {
            let mut s = config
                .settings
                .clone()
                .unwrap_or_else(|| ClusterSettings::new(Vec::new(), "default"));
            s.urls = vec![url.to_owned()];
            s
        }
        (Some(s), None) => s.clone(),
        (None, None) => {
            return Err(Error::invalid_request(
                "cluster.nats",
                "no cluster: give --nats URL or [cluster] nats in toolexec.toml",
            ));
        }
    };
    if let Some(name) = name {
        settings.name = name.to_owned();
    }
    Ok(settings)
}

/// `[cluster] namespaces`: their tools come from the fleet's workers.
/// `None` when the configuration sends nothing to a fleet.
pub(crate) async fn attach(
    config: &ClusterConfig,
    catalog: &Arc<Catalog>,
) -> Result<Option<Arc<FleetClient>>, Error> {
    let Some(settings) = &config.settings else {
        return Ok(None);
    };
    if config.namespaces.is_empty() && !config.code && config.profiles.is_empty() {
        return Ok(None);
    }
    let cluster = Cluster::connect(settings.clone(), "gateway").await?;
    let client = FleetClient::attach(cluster, config.namespaces.clone(), catalog.clone()).await?;
    Ok(Some(client))
}

/// `[cluster] profiles`: registers the fleet as the only runtime of those
/// profiles (bound to the cluster once connected). `None` without any, or
/// in a worker (which runs units itself).
pub(crate) fn units_runtime(
    config: &ClusterConfig,
    sends_to_fleet: bool,
    runtimes: &mut toolexec_runtime::Runtimes,
) -> Option<Arc<FleetRuntime>> {
    let settings = config.settings.as_ref()?;
    if config.profiles.is_empty() || !sends_to_fleet {
        return None;
    }
    let runtime = Arc::new(FleetRuntime::new(&settings.name, &config.profiles));
    runtimes.register_arc(runtime.clone());
    let mut map = runtimes.profile_map().clone();
    for profile in &config.profiles {
        *map.candidates_mut(*profile) = vec![FleetRuntime::NAME.to_owned()];
    }
    runtimes.set_profile_map(map);
    Some(runtime)
}

/// The gateway's tasks kept in the cluster: a task whose tool runs on the
/// fleet is resumable anywhere (its call made again under the task's
/// idempotency key returns the first run's outcome).
#[derive(Debug)]
pub(crate) struct FleetTasks(pub(crate) Arc<FleetClient>);

impl toolexec_mcp::gateway::TaskJournal for FleetTasks {
    fn resumable(&self, tool: &toolexec::RegisteredTool) -> bool {
        tool.backend().kind() == "fleet"
    }

    fn save<'a>(&'a self, id: &'a str, record: Vec<u8>) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.0
                .save_task(id, record)
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn load<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, String>> {
        Box::pin(async move { self.0.load_task(id).await.map_err(|e| e.to_string()) })
    }

    fn cancel<'a>(
        &'a self,
        tool: &'a str,
        args: &'a serde_json::Value,
        id: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(self.0.cancel_keyed(tool, args, id))
    }

    /// Tasks of anonymous callers are not kept (every gateway has them);
    /// a local (stdio) user's are kept under the host's name too.
    fn owner(&self, principal: &str) -> Option<String> {
        if principal == toolexec::telemetry::PrincipalKind::Anonymous.as_str() {
            return None;
        }
        if principal.starts_with("local:") {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            return Some(format!("{principal}@{}", host.trim()));
        }
        Some(principal.to_owned())
    }
}

/// `toolexec worker`: serves until SIGINT or SIGTERM, then drains.
pub(crate) async fn worker(
    exec: Exec,
    runtimes: Arc<toolexec_runtime::Runtimes>,
    config: &ClusterConfig,
    args: WorkerArgs,
    json: bool,
) -> Result<u8, Failure> {
    let settings = settings(config, args.nats.as_deref(), args.cluster.as_deref())?;
    let namespaces = if args.namespaces.is_empty() {
        config.worker.namespaces.clone()
    } else {
        args.namespaces
    };
    let options = WorkerOptions {
        id: args.id.or_else(|| config.worker.id.clone()),
        namespaces,
        capacity: args
            .capacity
            .or(config.worker.capacity)
            .unwrap_or(DEFAULT_CAPACITY),
        code: (args.code || config.worker.code).then(|| match args.code_profile {
            Some(CodeProfile::Hardened) => Profile::Hardened,
            Some(CodeProfile::Standard) => Profile::Standard,
            None => config.worker.code_profile.unwrap_or(Profile::Standard),
        }),
        units: if args.unit_profiles.is_empty() {
            config.worker.unit_profiles.clone()
        } else {
            args.unit_profiles
        },
        unit_ceilings: toolexec_runtime::LimitCeilings::default(),
        runtimes: Some(runtimes),
    };
    let cluster = Cluster::connect(settings, "worker").await?;
    let worker = Worker::start(cluster, exec, options).await?;
    let signal = crate::serve::shutdown_signal("worker")?;
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            signal.await;
            shutdown.cancel();
            // A second signal stops at once: the runs in flight are
            // delivered again elsewhere (their journal decides).
            if let Ok(again) = crate::serve::shutdown_signal("worker") {
                again.await;
                eprintln!("worker: stopped before its runs finished");
                std::process::exit(1);
            }
        });
    }
    // Ready: the consumers exist, so runs queued from now on are served.
    let mut out = io::stdout().lock();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"worker": worker.id(), "ready": true})
        )
    } else {
        writeln!(out, "worker {} ready", worker.id())
    }
    .and_then(|()| out.flush())
    .map_err(Failure::Io)?;
    drop(out);
    let report = worker.run(shutdown).await?;
    tracing::info!(runs = report.runs, "worker stopped");
    Ok(EXIT_OK)
}

/// `toolexec cluster status`.
pub(crate) async fn cluster(
    config: &ClusterConfig,
    command: ClusterCommand,
    json: bool,
) -> Result<u8, Failure> {
    let ClusterCommand::Status = command;
    let settings = settings(config, None, None)?;
    let cluster = Cluster::connect(settings, "status").await?;
    let status = toolexec_fleet::status(&cluster).await?;
    let mut out = io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &status).map_err(io::Error::other)?;
        writeln!(out)?;
        return Ok(EXIT_OK);
    }
    writeln!(
        out,
        "cluster {}: {} runs queued",
        status.cluster, status.queued
    )?;
    writeln!(out, "workers:")?;
    for w in &status.workers {
        writeln!(
            out,
            "  {:<24} {}/{} runs{}  namespaces {}  done {}",
            w.id,
            w.in_flight,
            w.capacity,
            if w.draining { " (draining)" } else { "" },
            w.namespaces.join(","),
            w.done
        )?;
        let mut runs = Vec::new();
        if let Some(code) = &w.code {
            runs.push(format!("code {code}"));
        }
        if !w.units.is_empty() {
            runs.push(format!("units {}", w.units.join(",")));
        }
        if !w.runtimes.is_empty() {
            runs.push(format!("runtimes {}", w.runtimes.join(",")));
        }
        if !runs.is_empty() {
            writeln!(out, "  {:<24} {}", "", runs.join("  "))?;
        }
    }
    writeln!(out, "namespaces:")?;
    for n in &status.namespaces {
        writeln!(
            out,
            "  {:<24} pending {}  running {}  redelivered {}",
            n.namespace, n.pending, n.running, n.redelivered
        )?;
    }
    Ok(EXIT_OK)
}

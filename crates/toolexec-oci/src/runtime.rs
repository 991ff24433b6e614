//! [`OciRuntime`]: units as OCI containers under runc or runsc.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::task::AbortOnDropHandle;
use toolexec::{Availability, BoxFuture};
use toolexec_runtime::protocol::{ChannelConfig, ChannelServer, ProtocolError};
use toolexec_runtime::{
    CommandUnit, Enforcement, LimitKind, NetworkPolicy, Profile, RunContext, RunOutcome,
    RunRequest, RunStatus, Runtime, RuntimeLimits, ScriptUnit, Unit, UnitKind,
};
use toolexec_sandbox::process::{Ended, ProcessSpec, run_process};
use toolexec_sandbox::{find_binary, verdict};

use crate::bundle::{RunGuard, container_id};
use crate::cgroup::{self, RunCgroup};
use crate::config::{OciConfig, OciFlavor};
use crate::spec::{self, ChannelMode, SpecInput};
use crate::{OciError, channel, rootfs};

/// Host tasks the gVisor sandbox itself (sentry, gofer, ptrace stubs)
/// needs besides the unit's processes; added to `pids.max` for runsc.
pub const RUNSC_PIDS_OVERHEAD: u64 = 96;

/// How often the host reads the run's cgroup counters (OOM kills,
/// refused forks, CPU time).
const CGROUP_POLL: Duration = Duration::from_millis(50);

/// Runs [`Unit::Command`]s (and [`Unit::Script`]s through a configured
/// script worker) as OCI containers: a bundle per run with a
/// read-only root, a sized `/tmp`, no network, no capabilities, a seccomp
/// deny-list, rlimits and a per-run cgroup; the channel reaches the unit
/// as descriptor 3 (runc) or a bound Unix socket (runsc).
///
/// ```no_run
/// use toolexec_oci::{OciConfig, OciFlavor, OciRuntime, RootfsSource};
/// use toolexec_runtime::Runtime;
/// let runc = OciRuntime::new(OciConfig::new(OciFlavor::Runc, RootfsSource::Dir("/srv/rootfs".into())));
/// assert_eq!(runc.name(), "runc");
/// ```
pub struct OciRuntime {
    config: OciConfig,
    availability: OnceLock<Availability>,
}

impl std::fmt::Debug for OciRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OciRuntime")
            .field("config", &self.config)
            .finish()
    }
}

impl OciRuntime {
    /// A runtime with `config`. Nothing is checked until
    /// [`Runtime::availability`] or the first run.
    pub fn new(config: OciConfig) -> Self {
        OciRuntime {
            config,
            availability: OnceLock::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OciConfig {
        &self.config
    }

    /// The runtime binary, resolved on `PATH`.
    fn binary(&self) -> Result<PathBuf, OciError> {
        find_binary(&self.config.binary).ok_or_else(|| {
            OciError::setup(format!(
                "{} not found on PATH",
                self.config.binary.display()
            ))
        })
    }

    /// The configured script worker, checked to be a file.
    fn script_worker(&self) -> Result<PathBuf, OciError> {
        let Some(worker) = &self.config.script_worker else {
            return Err(OciError::not_configured(
                "runtime.script_worker",
                format!(
                    "{} runs script units through a script worker, and none is configured",
                    self.config.flavor.name()
                ),
            ));
        };
        if !worker.is_file() {
            return Err(OciError::not_configured(
                "runtime.script_worker",
                format!("script worker {} is not a file", worker.display()),
            ));
        }
        Ok(worker.clone())
    }

    /// The launcher's arguments for `run`.
    fn launcher_args(&self, bundle: &Path, id: &str) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec!["--root".into(), self.config.state_dir.clone().into()];
        match self.config.flavor {
            OciFlavor::Runc => {
                args.extend(
                    ["run", "--keep", "--preserve-fds", "1", "--bundle"].map(OsString::from),
                );
            }
            OciFlavor::Runsc => {
                args.extend(
                    [
                        "--platform=ptrace",
                        "--network=none",
                        "--oci-seccomp",
                        "--host-uds=open",
                        "run",
                        "--bundle",
                    ]
                    .map(OsString::from),
                );
            }
        }
        args.push(bundle.into());
        args.push(id.into());
        args
    }

    /// Checks binary, privileges, cgroups and the root filesystem, then
    /// runs the probe command once.
    fn probe(&self) -> Availability {
        let name = self.config.flavor.name();
        if let Err(e) = self.binary() {
            return unavailable(e.to_string());
        }
        // SAFETY: plain syscall.
        if unsafe { libc::geteuid() } != 0 {
            return unavailable(format!(
                "{name} needs root here (rootless containers are not configured)"
            ));
        }
        if let Err(why) = cgroup::check(&self.config.cgroup_root, &self.config.cgroup_parent) {
            return unavailable(why);
        }
        if let Err(e) = rootfs::resolve(&self.config.rootfs, &self.config.cache_dir) {
            return unavailable(e.to_string());
        }
        let request = RunRequest::new(
            Unit::command(self.config.probe_argv.clone()),
            self.config.flavor.max_profile(),
        )
        .with_limits(RuntimeLimits {
            wall_time: Duration::from_secs(30),
            ..RuntimeLimits::default()
        });
        let outcome = std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .ok()?;
                let ctx = RunContext {
                    host: toolexec_runtime::ToolHost::without_tools(&request.limits),
                    cancel: Default::default(),
                    output: None,
                };
                Some(rt.block_on(self.run_unit(request.clone(), ctx)))
            })
            .join()
            .ok()
            .flatten()
        });
        match outcome {
            Some(o) if o.is_ok() => Availability::Available,
            Some(o) => {
                let detail = o
                    .stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                let status = match &o.status {
                    RunStatus::Error { error } => error.message.clone(),
                    other => other.as_str().to_owned(),
                };
                let platform = if self.config.flavor == OciFlavor::Runsc {
                    " with --platform=ptrace"
                } else {
                    ""
                };
                unavailable(
                    format!("{name} cannot start a container here{platform}: {status} {detail}")
                        .trim()
                        .to_owned(),
                )
            }
            None => unavailable(format!("{name}: the probe run could not start")),
        }
    }

    async fn run_unit(&self, request: RunRequest, ctx: RunContext) -> RunOutcome {
        let name = self.config.flavor.name();
        match self.run_checked(&request, &ctx).await {
            Ok(outcome) => outcome,
            Err(e) => RunOutcome::new(name, RunStatus::Error { error: e.to_body() }),
        }
    }

    async fn run_checked(
        &self,
        request: &RunRequest,
        ctx: &RunContext,
    ) -> Result<RunOutcome, OciError> {
        let flavor = self.config.flavor;
        let name = flavor.name();
        self.config.check_user()?;
        let limits = &request.limits;
        limits.validate().map_err(OciError::refused)?;
        let script_command;
        let (command, worker) = match &request.unit {
            Unit::Command(command) => (command, None),
            Unit::Script(script) => {
                let worker = self.script_worker()?;
                script_command = worker_command(script, limits);
                (&script_command, Some(worker))
            }
            other => {
                return Err(OciError::invalid(
                    "unit.kind",
                    format!(
                        "runtime {name} does not run {} units",
                        other.kind().as_str()
                    ),
                ));
            }
        };
        if let NetworkPolicy::Allow { .. } = limits.network {
            return Err(OciError::invalid(
                "limits.network",
                format!("{name} containers have no network; host allowlists are not supported"),
            ));
        }
        let binary = self.binary()?;
        let source = self.config.rootfs.clone();
        let cache = self.config.cache_dir.clone();
        let root = tokio::task::spawn_blocking(move || rootfs::resolve(&source, &cache))
            .await
            .map_err(|e| OciError::setup(format!("rootfs task failed: {e}")))??;

        let id = container_id();
        let mut guard = RunGuard::create(
            flavor,
            &binary,
            &self.config.state_dir,
            &self.config.work_dir,
            &id,
        )?;
        // Every way out after this point (errors included) cleans up here,
        // deterministically; only a dropped future leaves it to the guard.
        let result: Result<RunOutcome, OciError> = async {
            let pids_max = limits.max_processes.map(|n| match flavor {
                OciFlavor::Runc => u64::from(n),
                OciFlavor::Runsc => u64::from(n) + RUNSC_PIDS_OVERHEAD,
            });
            let cgroup = RunCgroup::create(
                &self.config.cgroup_root,
                &self.config.cgroup_parent,
                &id,
                limits.memory_bytes,
                pids_max,
            )?;
            let cgroups_path = cgroup.container_path(flavor);
            guard.set_cgroup(cgroup);

            // The channel: descriptor 3 for runc, a bound socket for runsc.
            let (channel, listener) = match flavor {
                OciFlavor::Runc => (ChannelMode::Fd, None),
                OciFlavor::Runsc => {
                    // Unix socket paths are short (108 bytes): not in the bundle.
                    let name = format!("txgw-{}", id.trim_start_matches("toolexec-"));
                    let (dir, listener) = channel::bind(&self.config.channel_dir, &name)?;
                    guard.set_extra_dir(dir.clone());
                    (ChannelMode::Socket(dir), Some(listener))
                }
            };
            let spec = spec::build(&SpecInput {
                flavor,
                rootfs: &root,
                command,
                limits,
                user: self.config.user,
                binds: &self.config.binds,
                cgroups_path,
                channel,
                worker: worker.as_deref(),
            })?;
            let config_path = guard.bundle().join("config.json");
            std::fs::write(&config_path, spec.to_string()).map_err(|e| {
                OciError::setup(format!("cannot write {}: {e}", config_path.display()))
            })?;

            let run_cancel = ctx.cancel.child_token();
            let inner_ctx = RunContext {
                host: ctx.host.clone(),
                cancel: run_cancel.clone(),
                output: ctx.output.clone(),
            };
            let server = ChannelServer::new(ctx.host.clone(), ChannelConfig::default());
            let protocol_error: Arc<Mutex<Option<ProtocolError>>> = Arc::default();
            // Cancelled when the launcher exits by itself: the channel then
            // takes what the unit wrote before it ended (see channel::serve).
            let launcher_exited = toolexec::CancellationToken::new();
            let channel_task = listener.map(|listener| {
                AbortOnDropHandle::new(tokio::spawn(channel::serve(
                    listener,
                    server.clone(),
                    protocol_error.clone(),
                    run_cancel.clone(),
                    launcher_exited.clone(),
                )))
            });

            let process = ProcessSpec {
                program: binary.clone(),
                args: self.launcher_args(guard.bundle(), &id),
                env: vec![(
                    "PATH".into(),
                    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
                )],
                cwd: Some(guard.bundle().to_owned()),
                stdin: command.stdin.clone().map(String::into_bytes),
                channel: flavor == OciFlavor::Runc,
                ..ProcessSpec::default()
            };
            // The cgroup watch stops the run on an OOM kill, a refused
            // fork or CPU time past the limit.
            let tripped: Mutex<Option<RunStatus>> = Mutex::new(None);
            let run = tokio::select! {
                run = run_process(process, limits, &inner_ctx) => run,
                _ = verdict::stop_on_limit(guard.cgroup().map(|c| move || c.events()), limits, CGROUP_POLL, &run_cancel, &tripped) => unreachable!("the watch never ends"),
            };
            // A launcher that exited by itself: the channel takes the unit's
            // last frames first. Stopped by toolexec, or never started: the
            // channel goes now (dropping the task aborts it).
            if let Some(task) = channel_task
                && matches!(&run, Ok(run) if run.ended.is_none())
            {
                launcher_exited.cancel();
                channel::finish(task).await;
            }
            let run = run.map_err(|e| OciError::setup(e.to_string()))?;
            let ended = run.ended.clone();
            let signal = run.signal(true);
            let mut outcome = run.into_outcome(name, ctx, limits, true);
            if flavor == OciFlavor::Runsc && outcome.value.is_none() {
                outcome.value = server.value();
            }
            let events = guard.cgroup().map(|c| c.events()).unwrap_or_default();
            // Our own stops first, then what the cgroups saw.
            let own_cancel = matches!(ended, Some(Ended::Cancelled)) && !ctx.cancel.is_cancelled();
            if let Some(status) = tripped.lock().take().filter(|_| own_cancel) {
                outcome.status = status;
            } else if let Some(e) = protocol_error.lock().take().filter(|_| own_cancel) {
                outcome.status = RunStatus::Error { error: e.to_body() };
            } else if matches!(outcome.status, RunStatus::Failed { .. })
                || (ended.is_none() && !outcome.is_ok())
            {
                if let Some(status) = events.failure_verdict(limits, signal) {
                    outcome.status = status;
                }
            } else if matches!(ended, None | Some(Ended::WallTime))
                && events.pids_refused > 0
                && limits.max_processes.is_some()
            {
                // A refused fork is the limit at work even when the unit
                // carries on and exits 0 (bubblewrap and Docker stop the
                // run on it).
                outcome.status = verdict::processes_exceeded(limits, events.pids_refused);
            }
            outcome.enforcement = self.enforcement(limits, guard.cgroup(), pids_max);
            Ok(outcome)
        }
        .await;
        guard.cleanup().await;
        result
    }

    fn enforcement(
        &self,
        limits: &RuntimeLimits,
        cgroup: Option<&RunCgroup>,
        pids_max: Option<u64>,
    ) -> Vec<Enforcement> {
        let flavor = self.config.flavor;
        let path = |ctrl: &str| cgroup.map(|c| c.display(ctrl)).unwrap_or_default();
        let sandbox = if flavor == OciFlavor::Runsc {
            ", counting the gVisor sandbox itself"
        } else {
            ""
        };
        let none = |limit| Enforcement::not_enforced(limit, "no limit requested");
        let mut list = vec![
            Enforcement::by(
                LimitKind::WallTime,
                format!("host timer, SIGKILL to {} and forced delete", flavor.name()),
            ),
            Enforcement::by(LimitKind::Output, "host pipe capture"),
            Enforcement::by(LimitKind::ToolCalls, "host channel budget"),
            Enforcement::by(
                LimitKind::Network,
                match flavor {
                    OciFlavor::Runc => "empty network namespace (loopback only)",
                    OciFlavor::Runsc => "runsc --network=none (loopback only)",
                },
            ),
        ];
        list.push(match (limits.cpu_time, flavor) {
            (None, _) => none(LimitKind::CpuTime),
            (Some(cpu), OciFlavor::Runc) => Enforcement::by(
                LimitKind::CpuTime,
                format!(
                    "cgroup v1 cpuacct.usage watch ({}), RLIMIT_CPU {} s per process as a backstop",
                    path("cpuacct"),
                    toolexec_sandbox::rlimits::rlimit_cpu_seconds(cpu) + 1
                ),
            ),
            (Some(_), OciFlavor::Runsc) => Enforcement::by(
                LimitKind::CpuTime,
                format!(
                    "cgroup v1 cpuacct.usage watch ({}){sandbox}",
                    path("cpuacct")
                ),
            ),
        });
        list.push(match limits.memory_bytes {
            None => none(LimitKind::Memory),
            Some(m) => Enforcement::by(
                LimitKind::Memory,
                format!(
                    "cgroup v1 memory.limit_in_bytes {m} ({}){sandbox}",
                    path("memory")
                ),
            ),
        });
        list.push(match pids_max {
            None => none(LimitKind::Processes),
            Some(n) if flavor == OciFlavor::Runsc => Enforcement::by(LimitKind::Processes, format!(
                "cgroup v1 pids.max {n} = limit + {RUNSC_PIDS_OVERHEAD} host tasks of the gVisor sandbox ({})", path("pids"))),
            Some(n) => Enforcement::by(LimitKind::Processes, format!("cgroup v1 pids.max {n} ({})", path("pids"))),
        });
        list.push(match limits.disk_bytes {
            None => none(LimitKind::Disk),
            Some(d) => Enforcement::by(
                LimitKind::Disk,
                format!("tmpfs /tmp size={d}, read-only root, RLIMIT_FSIZE"),
            ),
        });
        list
    }
}

/// The command that runs `script` through the worker bound at
/// [`spec::WORKER_PATH`]: `{"language","source","limits"}` on stdin.
fn worker_command(script: &ScriptUnit, limits: &RuntimeLimits) -> CommandUnit {
    let input = serde_json::json!({
        "language": script.language,
        "source": script.source,
        "limits": limits,
    });
    CommandUnit {
        argv: vec![spec::WORKER_PATH.into(), "__script-worker".into()],
        stdin: Some(input.to_string()),
        cwd: Some("/tmp".into()),
        ..CommandUnit::default()
    }
}

impl Runtime for OciRuntime {
    fn name(&self) -> &str {
        self.config.flavor.name()
    }

    fn isolation(&self) -> &str {
        self.config.flavor.descriptor().isolation
    }

    fn max_profile(&self) -> Profile {
        self.config.flavor.max_profile()
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        if self.config.script_worker.is_some() {
            &[UnitKind::Command, UnitKind::Script]
        } else {
            &[UnitKind::Command]
        }
    }

    /// Probes once (a trivial container run) and caches the answer.
    fn availability(&self) -> Availability {
        self.availability.get_or_init(|| self.probe()).clone()
    }

    fn run<'a>(&'a self, request: RunRequest, ctx: RunContext) -> BoxFuture<'a, RunOutcome> {
        Box::pin(self.run_unit(request, ctx))
    }
}

fn unavailable(reason: impl Into<String>) -> Availability {
    Availability::Unavailable {
        reason: reason.into(),
    }
}

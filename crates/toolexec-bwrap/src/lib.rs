//! The bubblewrap namespaces sandbox.
//!
//! Place in the workspace: one runtime of the contract (`toolexec-runtime`),
//! built on the shared plumbing (`toolexec-sandbox`); step 5 of
//! ARCHITECTURE.md's call flow.
//!
//! Every unit runs in new user, pid, net, mount, ipc, uts and cgroup
//! namespaces (`bwrap --unshare-all`) over a minimal read-only filesystem
//! (the host's `/usr` and library dirs, only `ld.so.cache` of `/etc`), with
//! a fresh read-only `/proc` with the leak-prone files masked, a minimal
//! `/dev`, a private size-limited `/tmp`, no capabilities, a seccomp
//! filter, Landlock (through the sandbox [`init`]), rlimits and a per-run
//! cgroup.
//!
//! Units never run as host uid 0: when toolexec is root, bwrap itself is
//! started as a host uid of the sandbox's own, leased from
//! [`BubblewrapConfig::users`] (see [`UidRange`]), so the sandbox's user
//! namespace maps to an unprivileged user no other process shares.
//!
//! The runtime serves [`Profile::Hardened`] only when every mechanism it
//! promises is in force here, measured once by running the init's
//! `probe` inside a real sandbox ([`toolexec_runtime::Runtime::mechanisms`] lists them);
//! otherwise it serves [`Profile::Standard`] at most and refuses hardened
//! runs with `backend_unavailable` naming what is missing.
//!
//! ```no_run
//! use toolexec_bwrap::{BubblewrapConfig, BubblewrapRuntime};
//! use toolexec_runtime::{Profile, RunRequest, Runtime, Unit};
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let runtime = BubblewrapRuntime::new(BubblewrapConfig {
//!     // The `toolexec` binary (as `toolexec __sandbox-init`) or this
//!     // crate's `toolexec-sandbox-init` binary.
//!     init: Some("/usr/local/bin/toolexec".into()),
//!     ..BubblewrapConfig::default()
//! });
//! let request = RunRequest::new(Unit::command(["echo", "hi"]), Profile::Hardened);
//! let host = toolexec_runtime::ToolHost::without_tools(&request.limits);
//! let ctx = toolexec_runtime::RunContext::new(host, Default::default());
//! let outcome = runtime.run(request, ctx).await;
//! assert_eq!(outcome.stdout, "hi\n");
//! # }
//! ```

mod args;
mod config;
pub mod init;
mod pool;
mod users;

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::json;
use toolexec::{Availability, BoxFuture, ErrorBody, ErrorCode};

pub use args::{INIT_PATH, SANDBOX_PATH, WORKER_PATH};
pub use config::{BubblewrapConfig, MAX_POOL_SIZE};
pub use users::{Lease, UidRange};

use toolexec_runtime::protocol::{CHANNEL_FD, CHANNEL_FD_ENV};
use toolexec_runtime::{
    Enforcement, LimitKind, Mechanism, NetworkPolicy, Profile, RunContext, RunOutcome, RunStatus,
    RuntimeDescriptor, RuntimeLimits, ToolHost, Unit, UnitKind,
};
pub use toolexec_sandbox::cgroup::CgroupLayout;
use toolexec_sandbox::cgroup::{self, CgroupLimits, RunCgroup};
use toolexec_sandbox::process::{ProcessSpec, Spawned, run_process, spawn_process};
use toolexec_sandbox::rlimits::{self, Rlimit, RlimitResource};
use toolexec_sandbox::seccomp::bpf as seccomp;
use toolexec_sandbox::verdict;
use toolexec_sandbox::{SandboxUser, find_binary};

use args::SandboxShape;
use pool::{Pool, Warm};

/// Processes of bubblewrap itself inside the run's cgroup: the outer
/// monitor and the pid-namespace reaper.
const SUPERVISORS: u64 = 2;
/// How often a running unit's cgroup counters are read.
const CGROUP_POLL: Duration = Duration::from_millis(20);
/// Descriptor numbers of the seccomp programs and the pool's spec pipe.
const SECCOMP_FDS: [i32; 2] = [4, 5];
const SPEC_FD: i32 = 6;
/// Descriptor numbers of the init and script worker binaries (`O_PATH`).
const INIT_FD: i32 = 7;
const WORKER_FD: i32 = 8;

/// Runs command and script units in bubblewrap sandboxes; see the module
/// documentation. Fit for [`Profile::Hardened`].
pub struct BubblewrapRuntime {
    shared: Arc<Shared>,
    pool: OnceLock<Option<Pool>>,
}

struct Shared {
    config: BubblewrapConfig,
    bwrap: Option<PathBuf>,
    /// The detected layout, before checking it can be used.
    detected: CgroupLayout,
    /// The usable layout, and why cgroups (or some controllers) are not
    /// used; prepared once, at the first run.
    cgroups: OnceLock<(CgroupLayout, Option<String>)>,
    landlock_abi: Option<i64>,
    /// The uids bwrap is started as (`None`: this process's own, which is
    /// not root), or why the configured range is unfit.
    user: Result<Option<UidRange>, String>,
    /// The probe's verdict, once: what is in force inside a real sandbox
    /// (no report without an init to measure it).
    available: OnceLock<Result<Option<init::ProbeReport>, String>>,
    /// The mechanisms, measured once (after the probe and cgroup setup).
    mechanisms: OnceLock<Vec<Mechanism>>,
    seccomp: OnceLock<Result<[Vec<u8>; 2], String>>,
}

impl std::fmt::Debug for BubblewrapRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BubblewrapRuntime")
            .field("config", &self.shared.config)
            .field("layout", self.shared.layout())
            .field("pool", &self.pool.get())
            .finish()
    }
}

fn error(code: ErrorCode, field: &str, message: String) -> RunOutcome {
    RunOutcome::new(
        BubblewrapRuntime::NAME,
        RunStatus::Error {
            error: ErrorBody {
                code,
                message: format!("{}: {message}", code.as_str()),
                details: Some(json!({"field": field})),
            },
        },
    )
}

/// A unit turned into what runs inside the sandbox.
struct Prepared {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    cwd: String,
    stdin: Option<Vec<u8>>,
}

impl BubblewrapRuntime {
    /// The runtime name.
    pub const NAME: &'static str = "bubblewrap";

    /// What bubblewrap is, before it is built or probed.
    pub const DESCRIPTOR: RuntimeDescriptor = RuntimeDescriptor {
        name: Self::NAME,
        isolation: "bubblewrap: user/pid/net/mount/ipc/uts/cgroup namespaces, read-only minimal \
                    filesystem, no capabilities, seccomp, Landlock, rlimits, per-run cgroup",
        max_profile: Profile::Hardened,
        unit_kinds: &[UnitKind::Command, UnitKind::Script],
    };

    /// A runtime with `config`. Cheap: nothing runs until the first
    /// [`toolexec_runtime::Runtime::availability`] or run.
    pub fn new(config: BubblewrapConfig) -> Self {
        let detected = CgroupLayout::detect(&config.cgroup_root);
        BubblewrapRuntime {
            shared: Arc::new(Shared {
                bwrap: find_binary(&config.bwrap),
                detected,
                cgroups: OnceLock::new(),
                landlock_abi: init::kernel_abi(),
                user: config
                    .users
                    .check()
                    .map(|()| is_root().then(|| config.users.clone()))
                    .map_err(|e| e.to_string()),
                available: OnceLock::new(),
                mechanisms: OnceLock::new(),
                seccomp: OnceLock::new(),
                config,
            }),
            pool: OnceLock::new(),
        }
    }

    /// The cgroup layout in use: the detected one, less the controllers
    /// whose toolexec parent cannot be created (see
    /// [`BubblewrapRuntime::cgroup_problem`]).
    pub fn cgroup_layout(&self) -> &CgroupLayout {
        self.shared.layout()
    }

    /// Why cgroups (or some controllers) are not used, if so: runs then go
    /// without them, with rlimits only.
    pub fn cgroup_problem(&self) -> Option<&str> {
        self.shared.cgroups().1.as_deref()
    }

    /// Pool entries ready now (0 without a pool).
    pub fn pool_ready(&self) -> usize {
        self.pool().map_or(0, Pool::ready)
    }

    /// Starts the pool (if configured) now instead of at the first run.
    pub fn warm_up(&self) {
        let _ = self.pool();
    }

    fn pool(&self) -> Option<&Pool> {
        self.pool
            .get_or_init(|| {
                let shared = self.shared.clone();
                if shared.config.pool_size == 0
                    || shared.config.init.is_none()
                    || shared.check().is_err()
                {
                    return None;
                }
                let tmp = shared.config.pool_disk_bytes;
                let make = Arc::new(move || shared.warm());
                Pool::start(self.shared.config.pool_size, tmp, make)
                    .map_err(|e| tracing::warn!("bubblewrap pool: {e}"))
                    .ok()
            })
            .as_ref()
    }

    async fn run_unit(&self, request: toolexec_runtime::RunRequest, ctx: RunContext) -> RunOutcome {
        let shared = &self.shared;
        if let Err(why) = shared.check() {
            return error(ErrorCode::BackendUnavailable, "runtime", why.clone());
        }
        let hardened = request.profile == Profile::Hardened;
        if hardened {
            let gaps = shared.hardened_gaps();
            if !gaps.is_empty() {
                return error(
                    ErrorCode::BackendUnavailable,
                    "profile",
                    format!(
                        "bubblewrap cannot serve profile hardened on this machine: {}",
                        gaps.join("; ")
                    ),
                );
            }
        }
        let limits = &request.limits;
        if let NetworkPolicy::Allow { hosts } = &limits.network {
            return error(
                ErrorCode::BackendUnavailable,
                "limits.network",
                format!(
                    "bubblewrap cannot filter the network by host (asked for {}); \
                     units run with no network, use network off or another runtime",
                    hosts.join(", ")
                ),
            );
        }
        let prepared = match shared.prepare(&request.unit, limits) {
            Ok(p) => p,
            Err(outcome) => return *outcome,
        };
        let cg_limits = CgroupLimits {
            memory: limits.memory_bytes,
            pids: limits.max_processes.map(|n| u64::from(n) + SUPERVISORS),
        };

        let warm = self.pool().and_then(|p| p.take(limits.disk_bytes));
        let pooled = warm.is_some();
        let started = match warm {
            Some(warm) => shared.release(warm, &prepared, limits, cg_limits, hardened),
            None => shared.cold(&prepared, limits, cg_limits, hardened),
        };
        let Started {
            spawned,
            cgroup,
            lease,
            cgroup_problem,
        } = match started {
            Ok(s) => s,
            Err(why) => return error(ErrorCode::BackendUnavailable, "runtime", why),
        };

        let has_memory_cg = cgroup.as_ref().is_some_and(RunCgroup::has_memory);

        let stop = ctx.cancel.child_token();
        let inner = RunContext {
            host: ctx.host.clone(),
            cancel: stop.clone(),
            output: ctx.output.clone(),
        };
        let tripped: Mutex<Option<RunStatus>> = Mutex::new(None);
        let run = tokio::select! {
            run = spawned.drive(limits, &inner) => run,
            _ = verdict::stop_on_limit(cgroup.as_ref().map(|c| move || c.events()), limits, CGROUP_POLL, &stop, &tripped) => unreachable!("the watch never ends"),
        };
        let launcher_sigxcpu = run.launcher_sigxcpu();
        let signal = run.signal(true);
        let mut outcome = run.into_outcome(Self::NAME, &ctx, limits, true);
        let events = cgroup.as_ref().map(RunCgroup::events).unwrap_or_default();
        if let Some(status) = tripped.lock().take()
            && !ctx.cancel.is_cancelled()
        {
            outcome.status = status;
        } else if matches!(
            outcome.status,
            RunStatus::Failed { .. }
                | RunStatus::LimitExceeded {
                    limit: LimitKind::WallTime,
                    ..
                }
        ) {
            if let Some(status) = events.failure_verdict(limits, signal) {
                outcome.status = status;
            } else if let (true, Some(max), Some(used)) =
                (launcher_sigxcpu, limits.cpu_time, events.cpu)
                && used + max / 10 >= max
            {
                // bwrap's 128 + SIGXCPU, backed by the cgroup's count: a
                // unit that merely exits with that code stays `Failed`.
                // The kernel's RLIMIT_CPU check and cpuacct differ by some
                // tens of ms (measured: SIGXCPU at 1 s with 0.976 s
                // accounted), hence the 10% slack.
                outcome.status = verdict::cpu_exceeded(limits, Some(used), "RLIMIT_CPU, SIGXCPU");
            }
        }
        outcome.enforcement = shared.enforcement(
            limits,
            cgroup.as_ref(),
            has_memory_cg,
            pooled,
            cgroup_problem.as_deref(),
        );
        // The cgroup first (it kills what is left), then the identity.
        drop(cgroup);
        drop(lease);
        outcome
    }
}

/// Whether this process is root (real or effective uid 0).
fn is_root() -> bool {
    // SAFETY: plain syscalls without arguments.
    unsafe { libc::geteuid() == 0 || libc::getuid() == 0 }
}

/// An `O_PATH` descriptor of a helper binary, for `--ro-bind-fd` at `n`:
/// opened here with this process's rights, so the unprivileged bwrap can
/// bind a binary it could not reach by path.
fn open_helper(path: Option<&Path>, n: i32) -> Result<Option<(OwnedFd, i32)>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(path) = path else { return Ok(None) };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("cannot open the sandbox helper {}: {e}", path.display()))?;
    Ok(Some((file.into(), n)))
}

/// The cgroup controllers hardened needs (memory, pids, CPU accounting).
fn cgroup_mechanism(layout: &CgroupLayout, problem: Option<&str>) -> Mechanism {
    let missing = |what: &str| match problem {
        Some(why) => format!("{what}: {why}"),
        None => what.to_owned(),
    };
    match layout {
        CgroupLayout::V2 { root } => Mechanism::enforced(
            "cgroups",
            format!("cgroup v2 memory, pids, cpu under {}", root.display()),
        ),
        CgroupLayout::V1 {
            memory: Some(_),
            pids: Some(_),
            cpuacct: Some(_),
        } => Mechanism::enforced("cgroups", "cgroup v1 memory, pids, cpuacct per run"),
        CgroupLayout::V1 {
            memory,
            pids,
            cpuacct,
        } => {
            let absent: Vec<&str> = [("memory", memory), ("pids", pids), ("cpuacct", cpuacct)]
                .into_iter()
                .filter(|(_, d)| d.is_none())
                .map(|(n, _)| n)
                .collect();
            Mechanism::missing(
                "cgroups",
                missing(&format!(
                    "no usable cgroup v1 {} controller",
                    absent.join(", ")
                )),
            )
        }
        CgroupLayout::None => Mechanism::missing("cgroups", missing("no usable cgroup controller")),
    }
}

fn no_cgroup_for_hardened(problem: Option<String>) -> String {
    format!(
        "profile hardened needs a per-run cgroup, and none could be made: {}",
        problem.as_deref().unwrap_or("no cgroup controllers")
    )
}

/// One bwrap launch: what differs between cold runs, pool entries and
/// the probe.
struct Launch {
    /// The `/tmp` size.
    tmp_bytes: Option<u64>,
    /// `--chdir`, environment and command (see [`args::unit_args`]).
    tail: Vec<OsString>,
    rlimits: Vec<Rlimit>,
    join_cgroups: Vec<std::fs::File>,
    stdin: Option<Vec<u8>>,
    /// One more inherited descriptor (the pool's spec pipe).
    extra: Option<(OwnedFd, i32)>,
    /// The host identity (when toolexec is root).
    user: Option<SandboxUser>,
}

/// What [`Shared::cold`] and [`Shared::release`] start.
struct Started {
    spawned: Spawned,
    cgroup: Option<RunCgroup>,
    /// The sandbox's host identity, held until the run is over.
    lease: Option<users::Lease>,
    /// Why the run has no cgroup, when cgroups were expected.
    cgroup_problem: Option<String>,
}

impl Shared {
    fn cgroups(&self) -> &(CgroupLayout, Option<String>) {
        self.cgroups.get_or_init(|| cgroup::prepare(&self.detected))
    }

    fn layout(&self) -> &CgroupLayout {
        &self.cgroups().0
    }

    /// Whether bwrap runs here, probed once through the real spawn path
    /// (the unprivileged identity, seccomp, the helpers bound by
    /// descriptor, the init and its Landlock): a bwrap too old for a flag,
    /// missing user namespaces, a sandbox user that cannot be taken or an
    /// init that does not start make the runtime unavailable rather than
    /// fail every run. With an init, the sandbox is also measured from
    /// inside ([`init::ProbeReport`]).
    fn check(&self) -> Result<(), &String> {
        self.probe().map(|_| ())
    }

    fn probe(&self) -> Result<Option<&init::ProbeReport>, &String> {
        self.available
            .get_or_init(|| {
                if self.bwrap.is_none() {
                    return Err(format!("{} not found on PATH", self.config.bwrap.display()));
                }
                self.user.as_ref().map_err(Clone::clone)?;
                // Spawning needs a tokio runtime, and this may be called
                // inside one (or none): a scoped thread has its own.
                std::thread::scope(|scope| {
                    scope
                        .spawn(|| self.run_probe())
                        .join()
                        .unwrap_or_else(|_| Err("the sandbox probe panicked".into()))
                })
            })
            .as_ref()
            .map(Option::as_ref)
    }

    fn run_probe(&self) -> Result<Option<init::ProbeReport>, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the sandbox probe cannot start a runtime: {e}"))?;
        let limits = RuntimeLimits {
            wall_time: Duration::from_secs(10),
            ..RuntimeLimits::default()
        };
        let argv: Vec<String> = match self.config.init {
            Some(_) => vec![INIT_PATH.into(), init::SUBCOMMAND.into(), "probe".into()],
            None => vec!["true".into()],
        };
        let tail = args::unit_args("/tmp", &[("PATH".into(), SANDBOX_PATH.into())], &argv);
        let lease = self.lease()?;
        let spec = self.spec(Launch {
            tmp_bytes: Some(4096),
            tail,
            rlimits: self.rlimits(&limits, None),
            join_cgroups: Vec::new(),
            stdin: None,
            extra: None,
            user: lease.as_ref().map(|l| l.user),
        })?;
        let run = rt.block_on(async {
            let ctx = RunContext::new(ToolHost::without_tools(&limits), Default::default());
            run_process(spec, &limits, &ctx).await
        });
        let run = run.map_err(|e| format!("the sandbox probe cannot start: {e}"))?;
        if !run.status.is_some_and(|s| s.success()) {
            let err = String::from_utf8_lossy(&run.stderr);
            return Err(format!(
                "the sandbox probe failed ({}): {}",
                run.status.map_or("killed".into(), |s| s.to_string()),
                err.lines().next().unwrap_or("no message")
            ));
        }
        if self.config.init.is_none() {
            return Ok(None);
        }
        serde_json::from_slice(&run.stdout)
            .map(Some)
            .map_err(|e| format!("the sandbox init's probe report is unreadable: {e}"))
    }

    /// A host identity of its own for one sandbox when toolexec is root
    /// (`None`: the sandbox runs as this unprivileged process's user).
    fn lease(&self) -> Result<Option<users::Lease>, String> {
        match &self.user {
            Ok(Some(range)) => range.lease().map(Some),
            Ok(None) => Ok(None),
            Err(why) => Err(why.clone()),
        }
    }

    /// Every isolation mechanism, as measured once (see
    /// [`toolexec_runtime::Runtime::mechanisms`]).
    fn mechanisms(&self) -> &[Mechanism] {
        self.mechanisms.get_or_init(|| self.measure())
    }

    fn measure(&self) -> Vec<Mechanism> {
        let report = match self.probe() {
            Ok(report) => report,
            Err(why) => return vec![Mechanism::missing("sandbox", why.clone())],
        };
        let unmeasured = "not measured: no init helper configured to probe the sandbox";
        let measured = |name: &str, ok: Option<bool>, how: &str, why: String| match ok {
            Some(true) => Mechanism::enforced(name, how),
            Some(false) => Mechanism::missing(name, why),
            None => Mechanism::missing(name, unmeasured),
        };
        let mut out = vec![Mechanism::enforced(
            "namespaces",
            "user, pid, net, mount, ipc, uts, cgroup (bwrap --unshare-all); no nested user namespaces",
        )];
        out.push(match &self.user {
            Ok(Some(range)) => Mechanism::enforced(
                "host user",
                format!(
                    "a host uid and gid of its own per sandbox, from {}..={} (leased under {}; setresuid before bwrap)",
                    range.first,
                    range.last(),
                    range.lock_dir.display()
                ),
            ),
            Ok(None) => Mechanism::enforced(
                "host user",
                format!(
                    "toolexec's own unprivileged uid {}",
                    toolexec_sandbox::channel_socket::euid()
                ),
            ),
            Err(why) => Mechanism::missing("host user", why.clone()),
        });
        out.push(measured(
            "proc",
            report.map(|r| r.proc_sys_read_only),
            "read-only /proc (so /proc/sys, sysrq-trigger, irq, bus); kcore, keys, timer_list and the like masked",
            "/proc/sys is writable inside the sandbox".into(),
        ));
        out.push(measured(
            "capabilities",
            report.map(init::ProbeReport::no_capabilities),
            "none (bwrap --cap-drop ALL; CapEff 0 measured inside)",
            format!(
                "capabilities remain inside: CapEff {}",
                report.and_then(|r| r.cap_eff.clone()).unwrap_or_default()
            ),
        ));
        out.push(measured(
            "seccomp",
            report.map(|r| r.seccomp_mode == Some(2) && r.no_new_privs == Some(1)),
            &format!(
                "deny-list of {} system calls, plus clone3 (filter mode 2 and no_new_privs measured inside)",
                toolexec_sandbox::seccomp::DENIED.len()
            ),
            "no seccomp filter in force inside the sandbox".into(),
        ));
        out.push(match (report, self.landlock_abi) {
            (Some(r), Some(abi)) if r.landlock_enforced => Mechanism::enforced(
                "landlock",
                format!(
                    "{} (kernel ABI {abi}), applied by the sandbox init",
                    r.landlock
                ),
            ),
            (Some(r), _) => Mechanism::missing("landlock", r.landlock.clone()),
            (None, _) => Mechanism::missing("landlock", "no init helper configured"),
        });
        out.push(cgroup_mechanism(self.layout(), self.cgroups().1.as_deref()));
        out.push(self.processes_mechanism());
        out
    }

    /// How a unit's process limit is held: the per-run pids cgroup, else
    /// `RLIMIT_NPROC` set by the init once the sandbox's user namespace
    /// exists (there it counts only the sandbox's own tasks), else nothing.
    fn processes_mechanism(&self) -> Mechanism {
        let pids = match self.layout() {
            CgroupLayout::V1 { pids, .. } => pids.is_some(),
            CgroupLayout::V2 { .. } => true,
            CgroupLayout::None => false,
        };
        if pids && self.cgroups().1.is_none() {
            Mechanism::enforced("processes", "pids.max of the per-run cgroup")
        } else if self.config.init.is_some() {
            Mechanism::enforced(
                "processes",
                "RLIMIT_NPROC set by the init inside the sandbox's user namespace \
                 (no per-run pids cgroup: a refused fork gives no verdict)",
            )
        } else {
            Mechanism::missing(
                "processes",
                "no per-run pids cgroup and no init helper to set RLIMIT_NPROC inside the sandbox",
            )
        }
    }

    /// `RLIMIT_NPROC` for the init to set inside the sandbox when no pids
    /// cgroup holds the process limit: the unit's limit plus bubblewrap's
    /// supervisors (the tasks of the sandbox's user and user namespace).
    fn nproc_inside(&self, limits: &RuntimeLimits, cgroup: Option<&RunCgroup>) -> Option<u64> {
        let by_cgroup = cgroup.is_some_and(|c| c.pids_mechanism.is_some());
        match (limits.max_processes, by_cgroup, &self.config.init) {
            (Some(n), false, Some(_)) => Some(u64::from(n) + SUPERVISORS),
            _ => None,
        }
    }

    /// What hardened needs and is missing here (empty: fit for hardened).
    fn hardened_gaps(&self) -> Vec<String> {
        self.mechanisms()
            .iter()
            .filter(|m| !m.enforced)
            .map(|m| format!("{}: {}", m.name, m.detail))
            .collect()
    }

    fn prepare(&self, unit: &Unit, limits: &RuntimeLimits) -> Result<Prepared, Box<RunOutcome>> {
        let mut env = vec![
            ("PATH".to_owned(), SANDBOX_PATH.to_owned()),
            ("HOME".to_owned(), "/tmp".to_owned()),
            (CHANNEL_FD_ENV.to_owned(), CHANNEL_FD.to_string()),
        ];
        match unit {
            Unit::Command(command) => {
                command
                    .check()
                    .map_err(|e| Box::new(RunOutcome::error(BubblewrapRuntime::NAME, &e)))?;
                for (k, v) in &command.env {
                    env.retain(|(key, _)| key != k);
                    env.push((k.clone(), v.clone()));
                }
                let cwd = command.cwd.clone().unwrap_or_else(|| "/tmp".into());
                Ok(Prepared {
                    argv: command.argv.clone(),
                    env,
                    cwd,
                    stdin: command.stdin.clone().map(String::into_bytes),
                })
            }
            Unit::Script(script) => {
                if self.config.script_worker.is_none() {
                    return Err(Box::new(error(
                        ErrorCode::BackendUnavailable,
                        "runtime.script_worker",
                        "bubblewrap runs script units through a script worker, and none is configured"
                            .into(),
                    )));
                }
                let input =
                    json!({"language": script.language, "source": script.source, "limits": limits});
                Ok(Prepared {
                    argv: vec![WORKER_PATH.into(), "__script-worker".into()],
                    env,
                    cwd: "/tmp".into(),
                    stdin: Some(serde_json::to_vec(&input).unwrap_or_default()),
                })
            }
            other => Err(Box::new(RunOutcome::unsupported(
                BubblewrapRuntime::NAME,
                other,
            ))),
        }
    }

    /// The shared rlimits ([`rlimits::for_limits`]), `RLIMIT_NOFILE`, and
    /// `RLIMIT_AS` only without a memory cgroup. With the cgroup's CPU
    /// accounting (which decides the CPU verdict, see [`watch`]),
    /// `RLIMIT_CPU` is one second later: a backstop, not the judge.
    fn rlimits(&self, limits: &RuntimeLimits, cgroup: Option<&RunCgroup>) -> Vec<Rlimit> {
        let has_memory_cg = cgroup.is_some_and(RunCgroup::has_memory);
        let mut out = rlimits::for_limits(limits, !has_memory_cg);
        if cgroup.is_some_and(RunCgroup::has_cpu) {
            rlimits::backstop_cpu(&mut out);
        }
        let open = self.config.max_open_files;
        out.push(Rlimit {
            resource: RlimitResource::OpenFiles,
            soft: open,
            hard: open,
        });
        out
    }

    /// The compiled programs, built once per runtime.
    fn seccomp_programs(&self) -> Result<&[Vec<u8>; 2], String> {
        self.seccomp
            .get_or_init(|| {
                let bytes = |p: Result<_, seccomp::SeccompError>| {
                    p.map(|p| seccomp::to_bytes(&p)).map_err(|e| e.to_string())
                };
                Ok([
                    bytes(seccomp::deny_filter())?,
                    bytes(seccomp::clone3_filter())?,
                ])
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Fresh pipes holding the programs, one per descriptor bwrap reads.
    fn seccomp_fds(&self) -> Result<Vec<(OwnedFd, i32)>, String> {
        self.seccomp_programs()?
            .iter()
            .zip(SECCOMP_FDS)
            .map(|(bytes, n)| {
                let fd = seccomp::pipe_with(bytes).map_err(|e| e.to_string())?;
                Ok((fd, n))
            })
            .collect()
    }

    fn spec(&self, launch: Launch) -> Result<ProcessSpec, String> {
        let Launch {
            tmp_bytes,
            tail,
            rlimits,
            join_cgroups,
            stdin,
            extra,
            user,
        } = launch;
        let mut inherit = self.seccomp_fds()?;
        inherit.extend(extra);
        let init_fd = open_helper(self.config.init.as_deref(), INIT_FD)?;
        let worker_fd = open_helper(self.config.script_worker.as_deref(), WORKER_FD)?;
        let shape = SandboxShape {
            init_fd: init_fd.as_ref().map(|(_, n)| *n),
            worker_fd: worker_fd.as_ref().map(|(_, n)| *n),
            tmp_bytes,
            seccomp_fds: SECCOMP_FDS.to_vec(),
        };
        inherit.extend(init_fd);
        inherit.extend(worker_fd);
        let mut args = args::base_args(&shape);
        args.extend(tail);
        Ok(ProcessSpec {
            program: self.bwrap.clone().unwrap_or_default(),
            args,
            env: vec![("PATH".into(), SANDBOX_PATH.into())],
            cwd: Some("/".into()),
            stdin,
            rlimits,
            channel: true,
            inherit,
            join_cgroups,
            user,
        })
    }

    /// The run's cgroup and the files to join it, or none and why: a
    /// cgroup that cannot be made means a run with rlimits only, not a
    /// failed run.
    fn cgroup(
        &self,
        limits: CgroupLimits,
    ) -> (Option<(RunCgroup, Vec<std::fs::File>)>, Option<String>) {
        let (layout, problem) = self.cgroups();
        if *layout == CgroupLayout::None {
            return (None, problem.clone());
        }
        let made =
            RunCgroup::create(layout, limits).and_then(|cg| cg.join_files().map(|join| (cg, join)));
        match made {
            Ok(made) => (Some(made), problem.clone()),
            Err(e) => {
                tracing::warn!("bubblewrap: running without a cgroup: {e}");
                (None, Some(e.to_string()))
            }
        }
    }

    /// Starts a sandbox for `prepared` now. `need_cgroup` (hardened)
    /// refuses to start without a per-run cgroup rather than fall back.
    fn cold(
        &self,
        prepared: &Prepared,
        limits: &RuntimeLimits,
        cg_limits: CgroupLimits,
        need_cgroup: bool,
    ) -> Result<Started, String> {
        let (made, cgroup_problem) = self.cgroup(cg_limits);
        let (cgroup, join) = match made {
            Some((cg, join)) => (Some(cg), join),
            None if need_cgroup => return Err(no_cgroup_for_hardened(cgroup_problem)),
            None => (None, Vec::new()),
        };
        let rlimits = self.rlimits(limits, cgroup.as_ref());
        let mut argv = Vec::new();
        if self.config.init.is_some() {
            argv.extend([INIT_PATH.to_owned(), init::SUBCOMMAND.into(), "exec".into()]);
            if let Some(n) = self.nproc_inside(limits, cgroup.as_ref()) {
                argv.extend(["--nproc".into(), n.to_string()]);
            }
            argv.push("--".into());
        }
        argv.extend(prepared.argv.iter().cloned());
        let tail = args::unit_args(&prepared.cwd, &prepared.env, &argv);
        let lease = self.lease()?;
        let spec = self.spec(Launch {
            tmp_bytes: limits.disk_bytes,
            tail,
            rlimits,
            join_cgroups: join,
            stdin: prepared.stdin.clone(),
            extra: None,
            user: lease.as_ref().map(|l| l.user),
        })?;
        let spawned = spawn_process(spec).map_err(|e| e.to_string())?;
        Ok(Started {
            spawned,
            cgroup,
            lease,
            cgroup_problem,
        })
    }

    /// Starts a pool entry: the init waits for its spec on [`SPEC_FD`].
    fn warm(&self) -> Result<Warm, String> {
        let (made, cgroup_problem) = self.cgroup(CgroupLimits::default());
        let (cgroup, join) = match made {
            Some((cg, join)) => (Some(cg), join),
            None => (None, Vec::new()),
        };
        let (read, write) = std::io::pipe().map_err(|e| e.to_string())?;
        let tail = args::unit_args(
            "/tmp",
            &[],
            &[
                INIT_PATH.into(),
                init::SUBCOMMAND.into(),
                "wait".into(),
                SPEC_FD.to_string(),
            ],
        );
        let lease = self.lease()?;
        let spec = self.spec(Launch {
            tmp_bytes: self.config.pool_disk_bytes,
            tail,
            rlimits: Vec::new(),
            join_cgroups: join,
            stdin: Some(Vec::new()),
            extra: Some((read.into(), SPEC_FD)),
            user: lease.as_ref().map(|l| l.user),
        })?;
        let spawned = spawn_process(spec).map_err(|e| e.to_string())?;
        Ok(Warm {
            spawned,
            spec: write,
            cgroup,
            cgroup_problem,
            lease,
        })
    }

    /// Hands `prepared` to a waiting pool entry.
    fn release(
        &self,
        warm: Warm,
        prepared: &Prepared,
        limits: &RuntimeLimits,
        cg_limits: CgroupLimits,
        need_cgroup: bool,
    ) -> Result<Started, String> {
        let Warm {
            mut spawned,
            mut spec,
            mut cgroup,
            cgroup_problem,
            lease,
        } = warm;
        if need_cgroup && cgroup.is_none() {
            // The init is still waiting: nothing of the unit has run.
            return Err(no_cgroup_for_hardened(cgroup_problem));
        }
        if let Some(cg) = &mut cgroup {
            cg.set_limits(cg_limits).map_err(|e| e.to_string())?;
        }
        let mut rlimits = self.rlimits(limits, cgroup.as_ref());
        if let Some(n) = self.nproc_inside(limits, cgroup.as_ref()) {
            rlimits.push(Rlimit {
                resource: RlimitResource::Processes,
                soft: n,
                hard: n,
            });
        }
        let init_spec = init::InitSpec {
            argv: prepared.argv.clone(),
            env: prepared.env.clone(),
            cwd: prepared.cwd.clone(),
            rlimits: rlimits
                .iter()
                .map(|r| (r.resource.raw(), r.soft, r.hard))
                .collect(),
        };
        let bytes = serde_json::to_vec(&init_spec).map_err(|e| e.to_string())?;
        spec.write_all(&bytes)
            .map_err(|e| format!("pool sandbox is gone: {e}"))?;
        drop(spec);
        spawned.set_stdin(prepared.stdin.clone().unwrap_or_default());
        spawned.restart_clock();
        Ok(Started {
            spawned,
            cgroup,
            lease,
            cgroup_problem,
        })
    }

    fn enforcement(
        &self,
        limits: &RuntimeLimits,
        cgroup: Option<&RunCgroup>,
        has_memory_cg: bool,
        pooled: bool,
        cgroup_problem: Option<&str>,
    ) -> Vec<Enforcement> {
        let no_cgroup = |what: &str| match cgroup_problem {
            Some(why) => format!("cannot create cgroups: {why}"),
            None => format!("no {what} cgroup"),
        };
        let how = if pooled {
            "setrlimit in the sandbox init"
        } else {
            "setrlimit before bwrap"
        };
        let mut out = vec![Enforcement::by(
            LimitKind::WallTime,
            "host timer; SIGKILL of bwrap's process group tears down the pid namespace",
        )];
        if let Some(secs) = rlimits::cpu_seconds(limits) {
            let mechanism = if cgroup.is_some_and(RunCgroup::has_cpu) {
                format!(
                    "cgroup cpu accounting of all processes (checked every 20 ms) + RLIMIT_CPU {} s per process as a backstop ({how})",
                    secs + 1
                )
            } else {
                format!("RLIMIT_CPU {secs} s per process ({how})")
            };
            out.push(Enforcement::by(LimitKind::CpuTime, mechanism));
        }
        if limits.memory_bytes.is_some() {
            out.push(match cgroup.and_then(|c| c.memory_mechanism.clone()) {
                Some(m) => Enforcement::by(LimitKind::Memory, m),
                None if !has_memory_cg => Enforcement::by(
                    LimitKind::Memory,
                    format!("RLIMIT_AS ({how}; {})", no_cgroup("memory")),
                ),
                None => Enforcement::not_enforced(LimitKind::Memory, no_cgroup("memory")),
            });
        }
        if limits.max_processes.is_some() {
            out.push(match cgroup.and_then(|c| c.pids_mechanism.clone()) {
                Some(m) => Enforcement::by(
                    LimitKind::Processes,
                    format!("{m} (the unit's limit + bwrap's {SUPERVISORS} supervisors)"),
                ),
                None => match self.nproc_inside(limits, cgroup) {
                    Some(n) => Enforcement::by(
                        LimitKind::Processes,
                        format!(
                            "RLIMIT_NPROC {n} set by the init inside the sandbox's user namespace \
                             (the unit's limit + bwrap's {SUPERVISORS} supervisors; {}: a refused \
                             fork gives no verdict)",
                            no_cgroup("pids")
                        ),
                    ),
                    None => Enforcement::not_enforced(
                        LimitKind::Processes,
                        format!(
                            "{} and no init helper to set RLIMIT_NPROC",
                            no_cgroup("pids")
                        ),
                    ),
                },
            });
        }
        out.push(Enforcement::by(LimitKind::Output, "host pipe capture"));
        let landlock = match self.mechanisms().iter().find(|m| m.name == "landlock") {
            Some(m) if m.enforced => format!("Landlock: {}", m.detail),
            Some(m) => format!(
                "Landlock not enforced: {} (the read-only mounts remain)",
                m.detail
            ),
            None => "Landlock not enforced".into(),
        };
        out.push(match limits.disk_bytes {
            Some(bytes) => Enforcement::by(
                LimitKind::Disk,
                format!(
                    "tmpfs /tmp and /dev/shm of {} bytes each (bwrap --size) + RLIMIT_FSIZE; /dev remounted read-only; everything else read-only bind mounts; {landlock}",
                    bytes.max(4096)
                ),
            ),
            None => Enforcement::not_enforced(
                LimitKind::Disk,
                format!("no disk limit set (/tmp and /dev/shm are tmpfs mounts charged to the memory cgroup); {landlock}"),
            ),
        });
        out.push(Enforcement::by(
            LimitKind::Network,
            "empty network namespace (bwrap --unshare-net)",
        ));
        out.push(Enforcement::by(LimitKind::ToolCalls, "host channel budget"));
        out
    }
}

impl toolexec_runtime::Runtime for BubblewrapRuntime {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn isolation(&self) -> &str {
        Self::DESCRIPTOR.isolation
    }

    /// Hardened only when every mechanism is in force here (see
    /// [`toolexec_runtime::Runtime::mechanisms`]); standard otherwise.
    fn max_profile(&self) -> Profile {
        if self.shared.hardened_gaps().is_empty() {
            Profile::Hardened
        } else {
            Profile::Standard
        }
    }

    fn unit_kinds(&self) -> &[UnitKind] {
        Self::DESCRIPTOR.unit_kinds
    }

    fn mechanisms(&self) -> Vec<Mechanism> {
        self.shared.mechanisms().to_vec()
    }

    fn availability(&self) -> Availability {
        match self.shared.check() {
            Ok(()) => Availability::Available,
            Err(reason) => Availability::Unavailable {
                reason: reason.clone(),
            },
        }
    }

    fn run<'a>(
        &'a self,
        request: toolexec_runtime::RunRequest,
        ctx: RunContext,
    ) -> BoxFuture<'a, RunOutcome> {
        Box::pin(self.run_unit(request, ctx))
    }
}

//! What the sandbox init does inside the sandbox: restrict the
//! filesystem with Landlock, then exec the unit. In pool mode it first
//! waits for the unit's [`InitSpec`] on a descriptor.
//!
//! The init is [`main`], run as `toolexec __sandbox-init ...` (it ships
//! inside the `toolexec` binary) or as the standalone
//! `toolexec-sandbox-init` binary of this crate, for library users:
//!
//! - `exec [--nproc N] -- PROGRAM ARGS...`: restrict (with `RLIMIT_NPROC` at
//!   `N` when given) and exec;
//! - `wait FD`: a pre-warmed pool entry; reads the unit's JSON spec
//!   (`{argv, env, cwd, rlimits}`) from descriptor `FD` until EOF,
//!   applies it, restricts and execs;
//! - `probe`: restrict, then print a [`ProbeReport`] of what is in force
//!   inside the sandbox (the runtime's availability check runs it).
//!
//! Exit codes: 126 when the sandbox cannot be set up (Landlock, spec),
//! 127 when the unit cannot be executed.

use std::ffi::CString;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::Path;

use landlock::{
    ABI, Access, AccessFs, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus,
};
use serde::{Deserialize, Serialize};

/// Directories the unit may read and execute from.
pub const READ_ONLY: &[&str] = &[
    "/usr",
    "/lib",
    "/lib64",
    "/bin",
    "/sbin",
    "/etc",
    "/proc",
    "/dev",
    "/run/toolexec",
];

/// Directories the unit may write: the two sized tmpfs mounts.
pub const READ_WRITE: &[&str] = &["/tmp", "/dev/shm"];

/// Device files the unit may read, write and `ioctl` (nothing else of
/// `/dev` is writable).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/random",
    "/dev/urandom",
];

/// The Landlock ABI the ruleset is written for.
const LANDLOCK_ABI: ABI = ABI::V5;

/// The unit a pool sandbox waits for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// The whole environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: String,
    /// `(resource, soft, hard)` with the `RLIMIT_*` numbers.
    pub rlimits: Vec<(u32, u64, u64)>,
}

/// The first argument that selects the init in the `toolexec` binary;
/// [`main`] accepts (and skips) it too, so the runtime passes it always.
pub const SUBCOMMAND: &str = "__sandbox-init";

/// What `probe` finds inside the sandbox, after Landlock.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// Landlock's state (`fully enforced`, `partially enforced ...`, or
    /// `not enforced: why`).
    pub landlock: String,
    /// Whether Landlock rules are in force.
    pub landlock_enforced: bool,
    /// `Seccomp:` of `/proc/self/status` (2: a filter is in force).
    pub seccomp_mode: Option<u32>,
    /// `NoNewPrivs:` of `/proc/self/status`.
    pub no_new_privs: Option<u32>,
    /// `CapEff:` of `/proc/self/status`, hex.
    pub cap_eff: Option<String>,
    /// Whether `/proc/sys` is on a read-only mount.
    pub proc_sys_read_only: bool,
}

impl ProbeReport {
    /// Measures this process (inside the sandbox, after [`apply_landlock`]).
    fn measure(landlock: Result<String, InitError>) -> ProbeReport {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
        };
        let (landlock, landlock_enforced) = match landlock {
            Ok(state) => {
                let enforced = !state.starts_with("not enforced");
                (state, enforced)
            }
            Err(e) => (format!("not enforced: {e}"), false),
        };
        ProbeReport {
            landlock,
            landlock_enforced,
            seccomp_mode: field("Seccomp:").and_then(|v| v.parse().ok()),
            no_new_privs: field("NoNewPrivs:").and_then(|v| v.parse().ok()),
            cap_eff: field("CapEff:"),
            proc_sys_read_only: read_only("/proc/sys"),
        }
    }

    /// Whether the process has no capabilities at all.
    pub fn no_capabilities(&self) -> bool {
        self.cap_eff
            .as_deref()
            .is_some_and(|c| c.chars().all(|ch| ch == '0'))
    }
}

fn read_only(path: &str) -> bool {
    let Ok(c) = CString::new(path) else {
        return false;
    };
    // SAFETY: `st` is a plain struct the call fills; `c` is a valid C string.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        libc::statvfs(c.as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_RDONLY != 0
    }
}

/// The init's entry point: `args` without the program name (a leading
/// [`SUBCOMMAND`] is skipped). Returns only on failure, or after `probe`.
pub fn main(args: &[String]) -> std::process::ExitCode {
    use std::process::ExitCode;
    let args = match args.first().map(String::as_str) {
        Some(SUBCOMMAND) => &args[1..],
        _ => args,
    };
    let result = match args.first().map(String::as_str) {
        Some("exec") => match exec_args(&args[1..]) {
            Some((nproc, argv)) => set_nproc(nproc)
                .and_then(|_| apply_landlock())
                .map(|_| exec(argv)),
            None => {
                eprintln!("sandbox init: exec [--nproc N] -- PROGRAM [ARGS...]");
                return ExitCode::from(126);
            }
        },
        Some("wait") => match args.get(1).and_then(|fd| fd.parse::<i32>().ok()) {
            Some(fd) if fd > 3 => read_spec(fd)
                .and_then(|spec| apply_spec(&spec).map(|_| spec))
                .and_then(|spec| apply_landlock().map(|_| exec(&spec.argv))),
            _ => {
                eprintln!("sandbox init: wait needs a descriptor number above 3");
                return ExitCode::from(126);
            }
        },
        Some("probe") => {
            let report = ProbeReport::measure(apply_landlock());
            let line = serde_json::to_string(&report).unwrap_or_default();
            let mut out = std::io::stdout().lock();
            return match writeln!(out, "{line}") {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::from(126),
            };
        }
        _ => {
            eprintln!(
                "usage: {SUBCOMMAND} exec [--nproc N] -- PROGRAM [ARGS...] | wait FD | probe"
            );
            return ExitCode::from(126);
        }
    };
    match result {
        // `exec` only returns with its error.
        Ok(exec_error) => {
            eprintln!("sandbox init: {exec_error}");
            ExitCode::from(127)
        }
        Err(e) => {
            eprintln!("sandbox init: {e}");
            ExitCode::from(126)
        }
    }
}

/// Errors of the init.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// Landlock could not be applied (fully).
    #[error("landlock: {0}")]
    Landlock(String),
    /// The spec could not be read.
    #[error("spec: {0}")]
    Spec(String),
    /// The unit could not be started.
    #[error("cannot exec {program}: {source}")]
    Exec {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// The Landlock ABI version the running kernel supports; `None` when it
/// has no Landlock (not built in, or disabled at boot).
pub fn kernel_abi() -> Option<i64> {
    // SAFETY: the version query takes no pointers (attr NULL, size 0).
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    (v > 0).then_some(v)
}

/// Restricts this process and its future children to [`READ_ONLY`],
/// [`READ_WRITE`] and [`DEVICES`]. On a kernel without Landlock
/// ([`kernel_abi`] is `None`) it does nothing and says so: the runtime
/// makes the same check and reports Landlock as not enforced. On a kernel
/// with Landlock, fails unless the rules are enforced.
pub fn apply_landlock() -> Result<String, InitError> {
    if kernel_abi().is_none() {
        return Ok("not enforced: the kernel lacks Landlock".into());
    }
    let err = |e: &dyn std::fmt::Display| InitError::Landlock(e.to_string());
    let read = AccessFs::from_read(LANDLOCK_ABI);
    let all = AccessFs::from_all(LANDLOCK_ABI);
    let mut ruleset = Ruleset::default()
        .handle_access(all)
        .map_err(|e| err(&e))?
        .create()
        .map_err(|e| err(&e))?;
    let file = AccessFs::from_file(LANDLOCK_ABI);
    for (dirs, access) in [(READ_ONLY, read), (READ_WRITE, all), (DEVICES, file)] {
        for dir in dirs.iter().filter(|d| Path::new(d).exists()) {
            let fd = PathFd::new(dir).map_err(|e| err(&e))?;
            ruleset = ruleset
                .add_rule(PathBeneath::new(fd, access))
                .map_err(|e| err(&e))?;
        }
    }
    let status = ruleset.restrict_self().map_err(|e| err(&e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok("fully enforced".into()),
        RulesetStatus::PartiallyEnforced => Ok("partially enforced (older kernel ABI)".into()),
        RulesetStatus::NotEnforced => Err(InitError::Landlock(
            "the kernel does not enforce Landlock".into(),
        )),
    }
}

/// Reads an [`InitSpec`] from descriptor `fd` until EOF (at most 4 MiB).
pub fn read_spec(fd: i32) -> Result<InitSpec, InitError> {
    // SAFETY: the launcher passes this descriptor for the init to own.
    let file = unsafe { std::fs::File::from_raw_fd(fd) };
    let mut bytes = Vec::new();
    file.take(4 << 20)
        .read_to_end(&mut bytes)
        .map_err(|e| InitError::Spec(e.to_string()))?;
    if bytes.is_empty() {
        return Err(InitError::Spec("no spec (the pool was shut down)".into()));
    }
    serde_json::from_slice(&bytes).map_err(|e| InitError::Spec(e.to_string()))
}

/// `[--nproc N] -- PROGRAM [ARGS...]`: the process limit, if any, and argv.
fn exec_args(args: &[String]) -> Option<(Option<u64>, &[String])> {
    match args {
        [flag, n, dashes, argv @ ..] if flag == "--nproc" && dashes == "--" => {
            Some((Some(n.parse().ok()?), argv))
        }
        [dashes, argv @ ..] if dashes == "--" => Some((None, argv)),
        _ => None,
    }
}

/// Sets `RLIMIT_NPROC` (soft and hard) to `n`. Inside the sandbox's user
/// namespace the kernel counts only that namespace's tasks of the user
/// against it, so it bounds the unit however many processes the user has
/// outside.
fn set_nproc(n: Option<u64>) -> Result<(), InitError> {
    let Some(n) = n else { return Ok(()) };
    let limit = libc::rlimit {
        rlim_cur: n,
        rlim_max: n,
    };
    // SAFETY: plain syscall with a valid struct.
    if unsafe { libc::setrlimit(libc::RLIMIT_NPROC, &limit) } != 0 {
        return Err(InitError::Spec(format!(
            "setrlimit RLIMIT_NPROC: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Applies `spec`'s environment, working directory and rlimits.
pub fn apply_spec(spec: &InitSpec) -> Result<(), InitError> {
    for (key, _) in std::env::vars_os() {
        // SAFETY: single-threaded init before exec.
        unsafe { std::env::remove_var(key) };
    }
    for (k, v) in &spec.env {
        if k.is_empty() || k.contains(['=', '\0']) || v.contains('\0') {
            return Err(InitError::Spec(format!("bad environment variable {k:?}")));
        }
        // SAFETY: single-threaded init before exec.
        unsafe { std::env::set_var(k, v) };
    }
    std::env::set_current_dir(&spec.cwd)
        .map_err(|e| InitError::Spec(format!("cwd {}: {e}", spec.cwd)))?;
    for (resource, soft, hard) in &spec.rlimits {
        let limit = libc::rlimit {
            rlim_cur: *soft,
            rlim_max: *hard,
        };
        // SAFETY: plain syscall with a valid struct.
        if unsafe { libc::setrlimit(*resource as _, &limit) } != 0 {
            return Err(InitError::Spec(format!(
                "setrlimit {resource}: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// Closes descriptors above the channel's and execs `argv` (looked up on
/// `PATH`). Returns only on failure.
pub fn exec(argv: &[String]) -> InitError {
    let program = argv.first().cloned().unwrap_or_default();
    let fail = |source| InitError::Exec {
        program: program.clone(),
        source,
    };
    let args: Result<Vec<CString>, _> = argv.iter().map(|a| CString::new(a.as_str())).collect();
    let Ok(args) = args else {
        return fail(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    };
    if args.is_empty() {
        return fail(std::io::Error::from(std::io::ErrorKind::InvalidInput));
    }
    let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: plain syscalls; `ptrs` is a NULL-terminated array of valid
    // C strings that outlive the call.
    unsafe {
        libc::syscall(libc::SYS_close_range, 4u32, u32::MAX, 0u32);
        libc::execvp(ptrs[0], ptrs.as_ptr());
    }
    fail(std::io::Error::last_os_error())
}

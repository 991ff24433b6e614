//! What an OCI runtime is configured with.

use std::path::PathBuf;

use toolexec_runtime::{Profile, RuntimeDescriptor, UnitKind};

/// Which OCI runtime runs the containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OciFlavor {
    /// `runc`: namespaces, cgroups, seccomp on the host kernel (profile
    /// `standard`).
    Runc,
    /// gVisor `runsc` on the ptrace platform: a user-space kernel between
    /// the unit and the host (profile `hardened`).
    Runsc,
}

impl OciFlavor {
    /// The runtime name as registered (`runc`, `runsc`).
    pub const fn name(self) -> &'static str {
        match self {
            OciFlavor::Runc => "runc",
            OciFlavor::Runsc => "runsc",
        }
    }

    /// What the flavor's runtime is, before it is built or probed.
    pub const fn descriptor(self) -> RuntimeDescriptor {
        match self {
            OciFlavor::Runc => RuntimeDescriptor {
                name: "runc",
                isolation: "OCI container under runc: namespaces (pid, net, mount, ipc, uts, \
                            cgroup), read-only root, no capabilities, seccomp deny-list, cgroup v1 \
                            limits",
                max_profile: Profile::Standard,
                unit_kinds: &[UnitKind::Command, UnitKind::Script],
            },
            OciFlavor::Runsc => RuntimeDescriptor {
                name: "runsc",
                isolation: "OCI container under gVisor runsc (ptrace platform): user-space \
                            kernel, no network, read-only root, no capabilities, seccomp deny-list \
                            inside the sandbox, cgroup v1 limits on the whole sandbox",
                max_profile: Profile::Hardened,
                unit_kinds: &[UnitKind::Command, UnitKind::Script],
            },
        }
    }

    /// The strongest profile the flavor is fit for.
    pub const fn max_profile(self) -> Profile {
        self.descriptor().max_profile
    }
}

/// Where the container's root filesystem comes from. It is always mounted
/// read-only; the unit writes only to its `/tmp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootfsSource {
    /// A directory, used in place (read-only).
    Dir(PathBuf),
    /// A tarball, unpacked once into the cache directory, keyed by the
    /// SHA-256 of its bytes.
    Tarball(PathBuf),
}

/// A host directory bound read-only into every container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOnlyBind {
    /// Host path (must exist).
    pub source: PathBuf,
    /// Absolute path inside the container.
    pub destination: String,
}

/// The configuration of an [`crate::OciRuntime`].
///
/// ```
/// use toolexec_oci::{OciConfig, OciFlavor, RootfsSource};
/// let config = OciConfig::new(OciFlavor::Runc, RootfsSource::Dir("/srv/rootfs".into()));
/// assert_eq!(config.binary, std::path::PathBuf::from("runc"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciConfig {
    /// runc or runsc.
    pub flavor: OciFlavor,
    /// The runtime binary (looked up on `PATH` when not absolute).
    pub binary: PathBuf,
    /// The root filesystem.
    pub rootfs: RootfsSource,
    /// Host directories bound read-only (e.g. `/usr`, `/lib` for a rootfs
    /// built from the host's own system).
    pub binds: Vec<ReadOnlyBind>,
    /// Where bundles are created (one directory per run). Like every
    /// directory below, it must be private: created 0700 if missing, owned
    /// by this process's uid, not a symlink, and below directories only
    /// root or this uid can change; otherwise runs fail
    /// `backend_unavailable` naming the path (whoever controls a bundle or
    /// the runtime's state controls the container's spec and hooks).
    pub work_dir: PathBuf,
    /// Where tarball root filesystems are unpacked (private, see
    /// [`OciConfig::work_dir`]).
    pub cache_dir: PathBuf,
    /// The runtime's state directory (`--root`), private to toolexec (see
    /// [`OciConfig::work_dir`]).
    pub state_dir: PathBuf,
    /// The private parent of runsc's per-run channel socket directories
    /// (see [`OciConfig::work_dir`]). Unix socket paths are at most 108
    /// bytes: keep it short.
    pub channel_dir: PathBuf,
    /// The cgroup v1 hierarchy root (normally `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// Parent cgroup of every run, below each controller.
    pub cgroup_parent: String,
    /// The command [`crate::OciRuntime::availability`] runs once to probe
    /// the runtime (must exit 0 in the root filesystem).
    pub probe_argv: Vec<String>,
    /// The user the unit runs as (uid, gid). Without a user namespace
    /// these are host ids too: uid 0 or gid 0 is refused (runs fail
    /// `backend_unavailable`, field `runtime.user`).
    pub user: (u32, u32),
    /// The script worker binary on the host (`toolexec __script-worker`
    /// or `toolexec-code-worker`), bound read-only into the container for
    /// [`toolexec_runtime::Unit::Script`]. It must run in the root
    /// filesystem (static, or with its libraries in the root or in
    /// [`OciConfig::binds`]). Without it, script units fail
    /// `backend_unavailable`.
    pub script_worker: Option<PathBuf>,
}

impl OciConfig {
    /// Defaults for `flavor` with `rootfs`: the binary from `PATH`, work,
    /// state and channel directories under [`default_run_dir`], the rootfs
    /// cache in [`default_cache_dir`], user `nobody` (65534:65534).
    pub fn new(flavor: OciFlavor, rootfs: RootfsSource) -> Self {
        let base = default_run_dir();
        OciConfig {
            flavor,
            binary: PathBuf::from(flavor.name()),
            rootfs,
            binds: Vec::new(),
            work_dir: base.join("bundles"),
            cache_dir: default_cache_dir(),
            state_dir: base.join(format!("state-{}", flavor.name())),
            channel_dir: base.join("gw"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            cgroup_parent: "toolexec-oci".into(),
            probe_argv: vec!["true".into()],
            user: (65534, 65534),
            script_worker: None,
        }
    }

    /// Refuses a unit user that is root on the host.
    pub(crate) fn check_user(&self) -> Result<(), crate::OciError> {
        let (uid, gid) = self.user;
        if uid == 0 || gid == 0 {
            return Err(crate::OciError::Unsafe {
                field: "runtime.user".into(),
                message: format!(
                    "{uid}:{gid}: units never run as uid 0 or gid 0 (the host's root without a user namespace)"
                ),
            });
        }
        Ok(())
    }
}

/// The default parent of bundles, runtime state and channel sockets:
/// `/run/toolexec/oci` as root, else `$XDG_RUNTIME_DIR/toolexec/oci`, else
/// `<temp dir>/toolexec-oci-<uid>`. Each run checks it is private.
pub(crate) fn default_run_dir() -> PathBuf {
    let euid = toolexec_sandbox::channel_socket::euid();
    if euid == 0 {
        return PathBuf::from("/run/toolexec/oci");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("toolexec/oci"),
        _ => std::env::temp_dir().join(format!("toolexec-oci-{euid}")),
    }
}

/// The default rootfs cache: `/var/cache/toolexec/oci` as root, else
/// `$XDG_CACHE_HOME/toolexec/oci`, else `$HOME/.cache/toolexec/oci`, else
/// `rootfs-cache` in [`default_run_dir`]. Each run checks it is private.
pub(crate) fn default_cache_dir() -> PathBuf {
    if toolexec_sandbox::channel_socket::euid() == 0 {
        return PathBuf::from("/var/cache/toolexec/oci");
    }
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(cache) = absolute("XDG_CACHE_HOME") {
        return cache.join("toolexec/oci");
    }
    if let Some(home) = absolute("HOME") {
        return home.join(".cache/toolexec/oci");
    }
    default_run_dir().join("rootfs-cache")
}

//! What an OCI runtime is configured with.

use std::path::PathBuf;

use toolexec_runtime::Profile;

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

    /// The strongest profile the flavor is fit for.
    pub const fn max_profile(self) -> Profile {
        match self {
            OciFlavor::Runc => Profile::Standard,
            OciFlavor::Runsc => Profile::Hardened,
        }
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
    /// Where bundles are created (one temporary directory per run).
    pub work_dir: PathBuf,
    /// Where tarball root filesystems are unpacked.
    pub cache_dir: PathBuf,
    /// The runtime's state directory (`--root`), private to toolexec.
    pub state_dir: PathBuf,
    /// The cgroup v1 hierarchy root (normally `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// Parent cgroup of every run, below each controller.
    pub cgroup_parent: String,
    /// The command [`crate::OciRuntime::availability`] runs once to probe
    /// the runtime (must exit 0 in the root filesystem).
    pub probe_argv: Vec<String>,
    /// The user the unit runs as inside the container (uid, gid).
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
    /// Defaults for `flavor` with `rootfs`: the binary from `PATH`, work and
    /// state under the system's temporary directory, user `nobody`.
    pub fn new(flavor: OciFlavor, rootfs: RootfsSource) -> Self {
        let base = std::env::temp_dir().join("toolexec-oci");
        OciConfig {
            flavor,
            binary: PathBuf::from(flavor.name()),
            rootfs,
            binds: Vec::new(),
            work_dir: base.join("bundles"),
            cache_dir: base.join("rootfs-cache"),
            state_dir: base.join(format!("state-{}", flavor.name())),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            cgroup_parent: "toolexec-oci".into(),
            probe_argv: vec!["true".into()],
            user: (65534, 65534),
            script_worker: None,
        }
    }
}

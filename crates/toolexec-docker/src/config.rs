//! Configuration of the Docker runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where the daemon is and how units' containers look.
///
/// ```
/// use toolexec_docker::DockerConfig;
/// let config = DockerConfig::new("toolexec-test/busybox:1");
/// assert_eq!(config.user, "65534:65534");
/// assert!(config.socket.is_none()); // DOCKER_HOST, else /var/run/docker.sock
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct DockerConfig {
    /// The daemon's Unix socket; `None`: `DOCKER_HOST` (`unix://...`), else
    /// `/var/run/docker.sock`.
    pub socket: Option<PathBuf>,
    /// The image units run in (must be present; it is never pulled).
    pub image: String,
    /// The user units run as (`uid:gid`); never root by default.
    pub user: String,
    /// CPUs the container may use (`NanoCpus`), e.g. `1.0`.
    pub cpus: f64,
    /// Open descriptors per process (`RLIMIT_NOFILE`).
    pub max_open_files: u64,
    /// Where per-run gateway socket directories are created on the host
    /// (default: the system temporary directory). Must be visible to the
    /// daemon at the same path.
    pub gateway_dir: Option<PathBuf>,
    /// Extra labels on every container (the runtime's own `toolexec.*`
    /// labels win on conflict).
    pub labels: BTreeMap<String, String>,
}

impl DockerConfig {
    /// A configuration running units in `image`, as `65534:65534`, on one
    /// CPU, with the socket from the environment.
    pub fn new(image: impl Into<String>) -> Self {
        DockerConfig {
            socket: None,
            image: image.into(),
            user: "65534:65534".into(),
            cpus: 1.0,
            max_open_files: 1024,
            gateway_dir: None,
            labels: BTreeMap::new(),
        }
    }

    /// Sets the daemon socket.
    pub fn with_socket(mut self, socket: impl Into<PathBuf>) -> Self {
        self.socket = Some(socket.into());
        self
    }

    /// The socket to connect to, or why there is none usable.
    pub fn resolve_socket(&self) -> Result<PathBuf, String> {
        if let Some(socket) = &self.socket {
            return Ok(socket.clone());
        }
        match std::env::var("DOCKER_HOST") {
            Ok(host) if !host.is_empty() => match host.strip_prefix("unix://") {
                Some(path) if !path.is_empty() => Ok(PathBuf::from(path)),
                _ => Err(format!(
                    "DOCKER_HOST={host:?} is not a unix:// socket (TCP and TLS are not supported)"
                )),
            },
            _ => Ok(PathBuf::from("/var/run/docker.sock")),
        }
    }

    /// Checks the values are usable: `Err((field, why))`.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.image.trim().is_empty() {
            return Err(("image", "must name an image".into()));
        }
        if self.user.trim().is_empty() || self.user.contains(char::is_whitespace) {
            return Err(("user", format!("{:?} is not a uid:gid", self.user)));
        }
        if self.user == "0" || self.user.starts_with("0:") || self.user == "root" {
            return Err(("user", "units never run as root".into()));
        }
        if !(self.cpus.is_finite() && self.cpus > 0.0 && self.cpus <= 1024.0) {
            return Err(("cpus", format!("{} is not in (0, 1024]", self.cpus)));
        }
        if self.max_open_files == 0 {
            return Err(("max_open_files", "must be at least 1".into()));
        }
        Ok(())
    }
}

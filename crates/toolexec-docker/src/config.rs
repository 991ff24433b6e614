//! Configuration of the Docker runtime.

use std::collections::BTreeMap;
use std::path::PathBuf;
use toolexec::Error;

/// Where the daemon is and how units' containers look.
///
/// It deserializes from a configuration table (`[runtimes.docker]` of
/// `toolexec.toml`): `socket` and `image`; unknown keys are refused, and the
/// other settings keep the defaults of [`DockerConfig::new`]. A table
/// without `image` gives an empty image, which [`DockerConfig::validate`]
/// refuses: a caller for whom the image is optional checks
/// `image.is_empty()` first.
///
/// ```
/// use toolexec_docker::DockerConfig;
/// let config = DockerConfig::new("toolexec-test/busybox:1");
/// assert_eq!(config.user, "65534:65534");
/// assert!(config.socket.is_none()); // DOCKER_HOST, else /var/run/docker.sock
/// ```
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(default = "DockerConfig::without_image", deny_unknown_fields)]
pub struct DockerConfig {
    /// The daemon's Unix socket; `None`: `DOCKER_HOST` (`unix://...`), else
    /// `/var/run/docker.sock`.
    pub socket: Option<PathBuf>,
    /// The image units run in (must be present; it is never pulled).
    pub image: String,
    /// The user units run as: numeric `uid:gid`, neither 0. Names are
    /// refused (the image's `/etc/passwd` could map any name to root), and
    /// so is a uid alone (Docker then picks the group, gid 0 for a uid the
    /// image does not list).
    #[serde(skip)]
    pub user: String,
    /// CPUs the container may use (`NanoCpus`), e.g. `1.0`.
    #[serde(skip)]
    pub cpus: f64,
    /// Open descriptors per process (`RLIMIT_NOFILE`).
    #[serde(skip)]
    pub max_open_files: u64,
    /// Where per-run channel socket directories are created on the host
    /// (default: the system temporary directory). Must be visible to the
    /// daemon at the same path.
    #[serde(skip)]
    pub channel_dir: Option<PathBuf>,
    /// The host uid whose connections the channel socket serves (checked
    /// with `SO_PEERCRED`); `None`: the uid of [`DockerConfig::user`]. Set
    /// it when the daemon remaps user namespaces (`userns-remap`), where
    /// the unit's host uid is the remapped one.
    #[serde(skip)]
    pub channel_peer_uid: Option<u32>,
    /// Extra labels on every container (the runtime's own `toolexec.*`
    /// labels win on conflict).
    #[serde(skip)]
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
            channel_dir: None,
            channel_peer_uid: None,
            labels: BTreeMap::new(),
        }
    }

    /// The defaults of [`DockerConfig::new`] with no image yet.
    fn without_image() -> Self {
        DockerConfig::new(String::new())
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

    /// Checks the values are usable: `invalid_request` naming the field
    /// (`docker.user`, ...).
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &str, message: String| {
            Err(Error::invalid_request(format!("docker.{field}"), message))
        };
        if self.image.trim().is_empty() {
            return bad("image", "must name an image".into());
        }
        if let Err((field, message)) = self.unit_user() {
            return bad(field, message);
        }
        if self.channel_peer_uid == Some(0) {
            return bad(
                "channel_peer_uid",
                "units never run as host uid 0; the channel does not serve it".into(),
            );
        }
        if !(self.cpus.is_finite() && self.cpus > 0.0 && self.cpus <= 1024.0) {
            return bad("cpus", format!("{} is not in (0, 1024]", self.cpus));
        }
        if self.max_open_files == 0 {
            return bad("max_open_files", "must be at least 1".into());
        }
        Ok(())
    }

    /// [`DockerConfig::user`] as numbers: `Err((field, why))` unless it is
    /// `uid:gid` in decimal digits with neither 0.
    pub(crate) fn unit_user(&self) -> Result<(u32, u32), (&'static str, String)> {
        let number = |s: &str| {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse::<u32>().ok())
                .flatten()
        };
        let parsed = self
            .user
            .split_once(':')
            .and_then(|(uid, gid)| Some((number(uid)?, number(gid)?)));
        match parsed {
            None => Err((
                "user",
                format!(
                    "{:?} is not a numeric uid:gid (names and a uid alone are refused: the image decides what they mean)",
                    self.user
                ),
            )),
            Some((0, _)) | Some((_, 0)) => Err((
                "user",
                format!("{:?}: units never run as uid 0 or gid 0", self.user),
            )),
            Some(ids) => Ok(ids),
        }
    }

    /// The host uid the channel socket serves.
    pub(crate) fn channel_uid(&self) -> Option<u32> {
        self.channel_peer_uid
            .or_else(|| self.unit_user().ok().map(|(uid, _)| uid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_its_file_keys_and_refuses_others() {
        let config: DockerConfig =
            serde_json::from_str(r#"{"image": "busybox:1", "socket": "/run/d.sock"}"#).unwrap();
        assert_eq!(
            config,
            DockerConfig::new("busybox:1").with_socket("/run/d.sock")
        );
        let config: DockerConfig = serde_json::from_str(r#"{"socket": "/run/d.sock"}"#).unwrap();
        assert!(config.image.is_empty());
        assert_eq!(config.validate().unwrap_err().field(), Some("docker.image"));
        for key in ["user", "labels", "images"] {
            let err = serde_json::from_str::<DockerConfig>(&format!(r#"{{"{key}": "x"}}"#))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
        }
        let err = serde_json::from_str::<DockerConfig>(r#"{"image": 7}"#).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
    }

    /// Every spelling of root (and anything the image could resolve to
    /// root) is refused; plain numeric users pass.
    #[test]
    fn root_in_any_spelling_is_refused() {
        let with = |user: &str| DockerConfig {
            user: user.into(),
            ..DockerConfig::new("img")
        };
        for user in [
            "0",
            "0:0",
            "root",
            "root:root",
            "00",
            "00:00",
            "0:65534",
            "65534:0",
            "000:1",
            "toor",
            "nobody",
            "nobody:nogroup",
            "65534",
            "+1:+1",
            "1:",
            ":1",
            "-1:1",
            "65534:65534:1",
            " 65534:65534",
            "4294967296:1",
        ] {
            let err = with(user).validate().unwrap_err();
            assert_eq!(err.field(), Some("docker.user"), "{user:?}: {err:?}");
        }
        for (user, ids) in [("65534:65534", (65534, 65534)), ("1000:100", (1000, 100))] {
            assert_eq!(with(user).unit_user(), Ok(ids), "{user}");
            assert!(with(user).validate().is_ok());
        }
        let mut remapped = with("1000:1000");
        assert_eq!(remapped.channel_uid(), Some(1000));
        remapped.channel_peer_uid = Some(166536);
        assert_eq!(remapped.channel_uid(), Some(166536));
        remapped.channel_peer_uid = Some(0);
        let err = remapped.validate().unwrap_err();
        assert_eq!(err.field(), Some("docker.channel_peer_uid"));
    }
}

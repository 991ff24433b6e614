//! What a [`crate::BubblewrapRuntime`] is configured with.

use std::path::PathBuf;

use toolexec_runtime::RuntimeLimits;

use crate::UidRange;

/// Settings of [`crate::BubblewrapRuntime`].
///
/// It deserializes from a configuration table (`[runtimes.bubblewrap]` of
/// `toolexec.toml`): `bwrap` and `pool_size`; unset keys keep their
/// defaults, unknown keys are refused, and the other settings (the init and
/// worker binaries, cgroup root, uids) are the embedding program's, never
/// read from files. Call [`BubblewrapConfig::validate`] after.
///
/// ```
/// use toolexec_bwrap::BubblewrapConfig;
/// let config: BubblewrapConfig = serde_json::from_str(r#"{"pool_size": 4}"#).unwrap();
/// assert_eq!(config.pool_size, 4);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BubblewrapConfig {
    /// The `bwrap` binary; a bare name is looked up on the host's `PATH`.
    pub bwrap: PathBuf,
    /// The sandbox init on the host: the `toolexec` binary (run as
    /// `toolexec __sandbox-init`) or this crate's `toolexec-sandbox-init`.
    /// It applies Landlock inside the sandbox, waits for pool units and
    /// measures the sandbox for the availability probe. Without it: no
    /// Landlock, no pool, and profile standard at most.
    #[serde(skip)]
    pub init: Option<PathBuf>,
    /// The script worker binary (`toolexec __script-worker`), for
    /// [`toolexec_runtime::Unit::Script`]; without it script units fail `backend_unavailable`.
    #[serde(skip)]
    pub script_worker: Option<PathBuf>,
    /// Sandboxes kept started ahead (needs `init`); 0 disables the pool.
    pub pool_size: usize,
    /// The `/tmp` size of pool sandboxes; units asking another size start
    /// cold. Default: the default limits' `disk_bytes`.
    #[serde(skip)]
    pub pool_disk_bytes: Option<u64>,
    /// The cgroup mount (`/sys/fs/cgroup`).
    #[serde(skip)]
    pub cgroup_root: PathBuf,
    /// `RLIMIT_NOFILE` of units.
    #[serde(skip)]
    pub max_open_files: u64,
    /// The host uids sandboxes run as when toolexec is root, one of its own
    /// per sandbox (bwrap is started as it, so the sandbox maps to it,
    /// never to host root or a shared user). Ignored when toolexec already
    /// runs unprivileged; a range holding 0 or 65534 makes the runtime
    /// unavailable.
    #[serde(skip)]
    pub users: UidRange,
}

impl Default for BubblewrapConfig {
    fn default() -> Self {
        BubblewrapConfig {
            bwrap: "bwrap".into(),
            init: None,
            script_worker: None,
            pool_size: 0,
            pool_disk_bytes: RuntimeLimits::default().disk_bytes,
            cgroup_root: "/sys/fs/cgroup".into(),
            max_open_files: 1024,
            users: UidRange::default(),
        }
    }
}

/// Most sandboxes [`BubblewrapConfig::pool_size`] keeps warm.
pub const MAX_POOL_SIZE: usize = 64;

impl BubblewrapConfig {
    /// `invalid_request` naming the field (`bubblewrap.pool_size`) when a
    /// setting is out of range.
    pub fn validate(&self) -> Result<(), toolexec::Error> {
        if self.pool_size > MAX_POOL_SIZE {
            return Err(toolexec::Error::invalid_request(
                "bubblewrap.pool_size",
                format!("must be at most {MAX_POOL_SIZE}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_its_file_keys_and_refuses_others() {
        let config: BubblewrapConfig =
            serde_json::from_str(r#"{"bwrap": "/opt/bwrap", "pool_size": 2}"#).unwrap();
        assert_eq!(config.bwrap, PathBuf::from("/opt/bwrap"));
        assert_eq!(config.pool_size, 2);
        assert_eq!(
            config.max_open_files,
            BubblewrapConfig::default().max_open_files
        );
        for key in ["init", "cgroup_root", "pool"] {
            let err = serde_json::from_str::<BubblewrapConfig>(&format!(r#"{{"{key}": "x"}}"#))
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("unknown field `{key}`")), "{err}");
        }
        let err = serde_json::from_str::<BubblewrapConfig>(r#"{"pool_size": -1}"#).unwrap_err();
        assert!(err.to_string().contains("invalid value"), "{err}");
    }

    #[test]
    fn validate_names_the_field() {
        let config: BubblewrapConfig = serde_json::from_str(r#"{"pool_size": 65}"#).unwrap();
        let err = config.validate().unwrap_err();
        assert_eq!(err.field(), Some("bubblewrap.pool_size"));
        assert!(err.to_string().ends_with("must be at most 64"), "{err}");
        let config: BubblewrapConfig = serde_json::from_str(r#"{"pool_size": 64}"#).unwrap();
        assert!(config.validate().is_ok());
    }
}

//! Limits as data: what a unit of work may consume.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolexec::Error;

/// The resource limits of one run. Every runtime enforces what it can and
/// reports, per limit, the mechanism it used ([`crate::Enforcement`]); a
/// limit a runtime cannot enforce is reported as such, never silently
/// dropped.
///
/// ```
/// use std::time::Duration;
/// use toolexec_runtime::{NetworkPolicy, RuntimeLimits};
/// let limits = RuntimeLimits {
///     wall_time: Duration::from_secs(5),
///     memory_bytes: Some(64 << 20),
///     ..RuntimeLimits::default()
/// };
/// assert_eq!(limits.network, NetworkPolicy::Off);
/// assert!(limits.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeLimits {
    /// Wall-clock deadline from start to result.
    #[serde(with = "duration_ms")]
    pub wall_time: Duration,
    /// CPU time of all processes of the unit.
    #[serde(with = "opt_duration_ms")]
    pub cpu_time: Option<Duration>,
    /// Memory (address space or cgroup memory, per runtime).
    pub memory_bytes: Option<u64>,
    /// Number of processes (or threads) the unit may have at once.
    pub max_processes: Option<u32>,
    /// Bytes of stdout plus stderr kept; more ends the run.
    pub max_output_bytes: usize,
    /// Bytes the unit may write to its scratch space (`/tmp`).
    pub disk_bytes: Option<u64>,
    /// Network access.
    pub network: NetworkPolicy,
    /// Tool calls through the channel.
    pub max_tool_calls: usize,
    /// Tool ids (exact or `*`/`?` globs) the unit may call; empty means all.
    pub allowed_tools: Vec<String>,
}

impl Default for RuntimeLimits {
    /// 30 s wall, 10 s CPU, 256 MiB, 64 processes, 1 MiB output, 64 MiB
    /// disk, no network, 100 tool calls, all tools.
    fn default() -> Self {
        RuntimeLimits {
            wall_time: Duration::from_secs(30),
            cpu_time: Some(Duration::from_secs(10)),
            memory_bytes: Some(256 << 20),
            max_processes: Some(64),
            max_output_bytes: 1 << 20,
            disk_bytes: Some(64 << 20),
            network: NetworkPolicy::Off,
            max_tool_calls: 100,
            allowed_tools: Vec::new(),
        }
    }
}

impl RuntimeLimits {
    /// Checks the limits are usable: non-zero wall time and output, and
    /// memory of at least 1 MiB when set.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &str, message: &str| Err(Error::invalid_request(field, message));
        if self.wall_time.is_zero() {
            return bad("limits.wall_time", "must be greater than zero");
        }
        if self.cpu_time.is_some_and(|d| d.is_zero()) {
            return bad("limits.cpu_time", "must be greater than zero");
        }
        if self.memory_bytes.is_some_and(|m| m < 1 << 20) {
            return bad("limits.memory_bytes", "must be at least 1 MiB");
        }
        if self.max_processes == Some(0) {
            return bad("limits.max_processes", "must be at least 1");
        }
        if self.max_output_bytes == 0 {
            return bad("limits.max_output_bytes", "must be greater than zero");
        }
        if let NetworkPolicy::Allow { hosts } = &self.network {
            if hosts.is_empty() {
                return bad("limits.network.allow", "needs at least one host");
            }
            if let Some(bad_host) = hosts
                .iter()
                .find(|h| h.is_empty() || h.contains(['/', ' ']))
            {
                return bad("limits.network.allow", &format!("bad host {bad_host:?}"));
            }
        }
        Ok(())
    }
}

/// Network access of a unit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum NetworkPolicy {
    /// No network at all (an empty network namespace, or no socket API).
    #[default]
    Off,
    /// Only these hosts (`host` or `host:port`). Runtimes that cannot filter
    /// by host refuse this policy rather than open the whole network.
    Allow {
        /// The allowlist.
        hosts: Vec<String>,
    },
}

/// One limit, as named in outcomes and enforcement reports: the core's
/// [`toolexec::LimitKind`] (`wall_time`, `cpu_time`, `memory`, `processes`,
/// `output`, `disk`, `network`, `tool_calls` for sandboxed runs).
pub use toolexec::LimitKind;

mod duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis().min(u64::MAX as u128) as u64)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

mod opt_duration_ms {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis().min(u64::MAX as u128) as u64)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

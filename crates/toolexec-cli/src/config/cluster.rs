//! `[cluster]` (the NATS JetStream cluster this machine belongs to, and the
//! namespaces whose calls go to it) and `[worker]` (what `toolexec worker`
//! serves here).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolexec_fleet::{ClusterSettings, Security};

use super::error::Fault;
use super::values::{DurationText, SecretSource, relative_to};

/// `[cluster]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ClusterTable {
    nats: Option<Urls>,
    name: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    code: bool,
    #[serde(default)]
    profiles: Vec<toolexec_runtime::Profile>,
    heartbeat: Option<DurationText>,
    max_queue: Option<i64>,
    journal_ttl: Option<DurationText>,
    max_deliver: Option<i64>,
    creds: Option<SecretSource>,
    nkey: Option<SecretSource>,
    token: Option<SecretSource>,
    user: Option<String>,
    password: Option<SecretSource>,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    require_tls: bool,
}

/// One URL or several.
#[derive(Deserialize)]
#[serde(untagged)]
enum Urls {
    One(String),
    Many(Vec<String>),
}

/// `[worker]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct WorkerTable {
    id: Option<String>,
    #[serde(default)]
    namespaces: Vec<String>,
    capacity: Option<usize>,
    #[serde(default)]
    code: bool,
    code_profile: Option<toolexec_runtime::Profile>,
    #[serde(default)]
    unit_profiles: Vec<toolexec_runtime::Profile>,
}

/// `[cluster]` and `[worker]`, resolved.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterConfig {
    /// How to reach the cluster; `None` without `[cluster] nats`.
    pub settings: Option<ClusterSettings>,
    /// Namespaces whose calls go to the fleet.
    pub namespaces: Vec<String>,
    /// `toolexec code` runs scripts on the fleet (durable code runs).
    pub code: bool,
    /// Sandboxed command units of these profiles run on the fleet.
    pub profiles: Vec<toolexec_runtime::Profile>,
    /// `[worker]`.
    pub worker: WorkerConfig,
}

/// `[worker]`, resolved.
#[derive(Debug, Clone, Default)]
pub(crate) struct WorkerConfig {
    /// Its id (default: host name and pid).
    pub id: Option<String>,
    /// Namespaces it serves.
    pub namespaces: Vec<String>,
    /// Runs at a time (default: 16).
    pub capacity: Option<usize>,
    /// Runs code-mode scripts too.
    pub code: bool,
    /// Their profile (default `standard`).
    pub code_profile: Option<toolexec_runtime::Profile>,
    /// Runs callers' sandboxed command units of these profiles.
    pub unit_profiles: Vec<toolexec_runtime::Profile>,
}

impl ClusterTable {
    pub(super) fn resolve(self, worker: WorkerTable, base: &Path) -> Result<ClusterConfig, Fault> {
        let worker = WorkerConfig {
            id: worker.id,
            namespaces: worker.namespaces,
            capacity: worker.capacity,
            code: worker.code,
            code_profile: worker.code_profile,
            unit_profiles: worker.unit_profiles,
        };
        let Some(urls) = self.nats else {
            if !self.namespaces.is_empty() || self.code || !self.profiles.is_empty() {
                let key = if self.code {
                    "cluster.code"
                } else if !self.profiles.is_empty() {
                    "cluster.profiles"
                } else {
                    "cluster.namespaces"
                };
                return Err(Fault::new(
                    key,
                    "sending work to a fleet needs cluster.nats (the NATS server URL)",
                ));
            }
            return Ok(ClusterConfig {
                settings: None,
                namespaces: Vec::new(),
                code: false,
                profiles: Vec::new(),
                worker,
            });
        };
        let urls = match urls {
            Urls::One(u) => vec![u],
            Urls::Many(u) => u,
        };
        let mut settings =
            ClusterSettings::new(urls, self.name.unwrap_or_else(|| "default".into()));
        if let Some(d) = self.heartbeat {
            settings.heartbeat = d.0;
        }
        if let Some(n) = self.max_queue {
            settings.max_queue = n;
        }
        if let Some(d) = self.journal_ttl {
            settings.journal_ttl = d.0;
        }
        if let Some(n) = self.max_deliver {
            settings.max_deliver = n;
        }
        let secret = |key: &str, source: Option<SecretSource>| {
            source
                .map(|s| s.resolve(&format!("cluster.{key}"), base))
                .transpose()
        };
        settings.security = Security {
            creds: secret("creds", self.creds)?,
            nkey: secret("nkey", self.nkey)?,
            token: secret("token", self.token)?,
            password: secret("password", self.password)?,
            user: self.user,
            ca_file: self.ca_file.map(|p| relative_to(base, &p)),
            require_tls: self.require_tls,
        };
        settings
            .validate()
            .map_err(|e| Fault::refused("cluster", e, &[]))?;
        Ok(ClusterConfig {
            settings: Some(settings),
            namespaces: self.namespaces,
            code: self.code,
            profiles: self.profiles,
            worker,
        })
    }
}

//! How to reach a cluster, and the JetStream names derived from its name.

use std::path::PathBuf;
use std::time::Duration;

use toolexec::{Error, Secret};
use toolexec_runtime::Profile;

/// One cluster: its NATS servers, its name and the timings every member
/// must share. The gateway's `[cluster]` and `toolexec worker` build it.
#[derive(Clone)]
pub struct ClusterSettings {
    /// NATS server URLs (`nats://host:4222`, `tls://host:4222`).
    pub urls: Vec<String>,
    /// The cluster's name: scopes every subject, stream and bucket, so
    /// clusters sharing one NATS account never see each other's runs.
    pub name: String,
    /// How often a worker tells JetStream a run is still alive and
    /// re-advertises itself. A run whose worker misses three heartbeats is
    /// redelivered to another worker.
    pub heartbeat: Duration,
    /// Runs queued beyond this are refused with `backend_unavailable`
    /// (the fleet is saturated) instead of waiting without bound.
    pub max_queue: i64,
    /// How long the journal keeps a run's entry (at least an hour, and
    /// longer than any run), so a retry with the same idempotency key gets
    /// the result instead of running again; queued runs older than this
    /// are dropped.
    pub journal_ttl: Duration,
    /// Deliveries of one run before it ends as `interrupted` whatever the
    /// tool: bounds a run that kills every worker it lands on.
    pub max_deliver: i64,
    /// Credentials and TLS.
    pub security: Security,
}

impl std::fmt::Debug for ClusterSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("ClusterSettings")
            .field("urls", &urls)
            .field("name", &self.name)
            .field("heartbeat", &self.heartbeat)
            .field("max_queue", &self.max_queue)
            .field("journal_ttl", &self.journal_ttl)
            .field("max_deliver", &self.max_deliver)
            .field("security", &self.security)
            .finish()
    }
}

impl ClusterSettings {
    /// Settings for `urls` and cluster `name`, with the defaults: 2 s
    /// heartbeat, 10,000 queued runs, results kept a day, 5 deliveries.
    pub fn new(urls: Vec<String>, name: impl Into<String>) -> Self {
        ClusterSettings {
            urls,
            name: name.into(),
            heartbeat: Duration::from_secs(2),
            max_queue: 10_000,
            journal_ttl: Duration::from_secs(24 * 3600),
            max_deliver: 5,
            security: Security::default(),
        }
    }

    /// Checks the values a cluster cannot run with.
    pub fn validate(&self) -> Result<(), Error> {
        if self.urls.is_empty() {
            return Err(Error::invalid_request("cluster.nats", "no NATS server URL"));
        }
        for url in &self.urls {
            let scheme = url.split("://").next().unwrap_or_default();
            if !url.contains("://") || !matches!(scheme, "nats" | "tls") {
                return Err(Error::invalid_request(
                    "cluster.nats",
                    format!("{:?} is not a nats:// or tls:// URL", redact(url)),
                ));
            }
        }
        check_token("cluster.name", &self.name)?;
        if self.heartbeat < Duration::from_millis(100) || self.heartbeat > Duration::from_secs(60) {
            return Err(Error::invalid_request(
                "cluster.heartbeat",
                "must be between 100ms and 60s",
            ));
        }
        if self.max_queue < 1 {
            return Err(Error::invalid_request(
                "cluster.max_queue",
                "must be at least 1",
            ));
        }
        if self.max_deliver < 2 {
            return Err(Error::invalid_request(
                "cluster.max_deliver",
                "must be at least 2 (a lost worker's runs are delivered again)",
            ));
        }
        // A run's entry must outlive the run: an entry expired mid-run
        // would let a redelivery run it again.
        if self.journal_ttl < Duration::from_secs(3600) {
            return Err(Error::invalid_request(
                "cluster.journal_ttl",
                "must be at least 1h (longer than any run)",
            ));
        }
        Ok(())
    }

    /// JetStream's ack wait: three heartbeats.
    pub(crate) fn ack_wait(&self) -> Duration {
        self.heartbeat * 3
    }

    pub(crate) fn names(&self) -> Names {
        Names {
            cluster: self.name.clone(),
        }
    }
}

/// How the cluster's members authenticate to NATS, and TLS. Every secret
/// comes from a secret source (environment, file), never from the
/// configuration file itself.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// A `.creds` file's content (a user JWT and its nkey seed).
    pub creds: Option<Secret>,
    /// An nkey seed (`SU...`).
    pub nkey: Option<Secret>,
    /// A token.
    pub token: Option<Secret>,
    /// A user name, with [`Security::password`].
    pub user: Option<String>,
    /// The user's password.
    pub password: Option<Secret>,
    /// Extra root certificates (PEM) for `tls://` servers.
    pub ca_file: Option<PathBuf>,
    /// Refuse servers that do not offer TLS.
    pub require_tls: bool,
}

/// `url` without the credentials it may carry (`nats://user:pass@host`).
pub(crate) fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, _)), Some(at)) => format!("{scheme}://***{}", &url[at..]),
        _ => url.to_owned(),
    }
}

/// Checks a name used as one NATS subject token and in stream names.
pub(crate) fn check_token(field: &str, value: &str) -> Result<(), Error> {
    let ok = !value.is_empty()
        && value.len() <= 64
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_request(
            field,
            format!("{value:?}: use 1 to 64 letters, digits, '-' or '_'"),
        ))
    }
}

/// The subjects, stream, consumers and buckets of one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    cluster: String,
}

impl Names {
    /// The work-queue stream holding every queued run.
    pub(crate) fn stream(&self) -> String {
        format!("TOOLEXEC_{}_RUNS", self.cluster)
    }

    /// Runs of tools of `namespace`.
    pub(crate) fn runs(&self, namespace: &str) -> String {
        format!("toolexec.{}.run.{namespace}", self.cluster)
    }

    /// Every run subject, as the stream binds them.
    pub(crate) fn all_runs(&self) -> String {
        format!("toolexec.{}.run.*", self.cluster)
    }

    /// Code runs of `profile` (a subject apart: any token could be a
    /// namespace).
    pub(crate) fn code_runs(&self, profile: Profile) -> String {
        format!("toolexec.{}.code.{}", self.cluster, profile.as_str())
    }

    /// Every code run subject, as the stream binds them.
    pub(crate) fn all_code_runs(&self) -> String {
        format!("toolexec.{}.code.*", self.cluster)
    }

    /// The durable consumer of code runs of `profile`.
    pub(crate) fn code_consumer(&self, profile: Profile) -> String {
        format!("code_{}", profile.as_str())
    }

    /// Sandboxed units of `profile` (the caller's command tools).
    pub(crate) fn unit_runs(&self, profile: Profile) -> String {
        format!("toolexec.{}.unit.{}", self.cluster, profile.as_str())
    }

    /// Every unit subject, as the stream binds them.
    pub(crate) fn all_unit_runs(&self) -> String {
        format!("toolexec.{}.unit.*", self.cluster)
    }

    /// The durable consumer of units of `profile`.
    pub(crate) fn unit_consumer(&self, profile: Profile) -> String {
        format!("unit_{}", profile.as_str())
    }

    /// The durable consumer every worker serving `namespace` shares.
    pub(crate) fn consumer(&self, namespace: &str) -> String {
        format!("ns_{namespace}")
    }

    /// Cancellation of the run with `key`.
    pub(crate) fn cancel(&self, key: &str) -> String {
        format!("toolexec.{}.cancel.{key}", self.cluster)
    }

    /// Every cancellation, as a worker subscribes to them.
    pub(crate) fn all_cancels(&self) -> String {
        format!("toolexec.{}.cancel.*", self.cluster)
    }

    /// Run journal: each run's state and result, by key.
    pub(crate) fn journal(&self) -> String {
        format!("toolexec_{}_journal", self.cluster)
    }

    /// Tasks of the cluster's gateways (MCP Tasks), by task id.
    pub(crate) fn tasks(&self) -> String {
        format!("toolexec_{}_tasks", self.cluster)
    }

    /// Worker adverts, by worker id; an advert not renewed expires.
    pub(crate) fn workers(&self) -> String {
        format!("toolexec_{}_workers", self.cluster)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_name_their_field() {
        let ok = ClusterSettings::new(vec!["nats://127.0.0.1:4222".into()], "prod");
        ok.validate().unwrap();
        type Spoil = fn(&mut ClusterSettings);
        let cases: [(&str, Spoil); 5] = [
            ("cluster.nats", |s| s.urls = vec!["http://x".into()]),
            ("cluster.name", |s| s.name = "a.b".into()),
            ("cluster.heartbeat", |s| s.heartbeat = Duration::ZERO),
            ("cluster.max_queue", |s| s.max_queue = 0),
            ("cluster.max_deliver", |s| s.max_deliver = 1),
        ];
        for (field, spoil) in cases {
            let mut s = ok.clone();
            spoil(&mut s);
            let err = s.validate().unwrap_err();
            assert!(
                matches!(&err, Error::InvalidRequest { field: f, .. } if f == field),
                "{err}"
            );
        }
    }
}

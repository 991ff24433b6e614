//! A connection to a cluster: NATS, and the JetStream stream and buckets,
//! created on first use and checked on every start.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use toolexec::Error;

use crate::settings::{ClusterSettings, Names, Security, redact};

/// How long publishes and JetStream API calls wait for the server.
const API_TIMEOUT: Duration = Duration::from_secs(5);

/// A member's connection to its cluster (a gateway's or a worker's).
#[derive(Debug, Clone)]
pub struct Cluster {
    pub(crate) settings: ClusterSettings,
    pub(crate) names: Names,
    pub(crate) client: async_nats::Client,
    pub(crate) js: jetstream::Context,
    pub(crate) journal: kv::Store,
    pub(crate) workers: kv::Store,
    /// The gateways' tasks bucket, opened by the first member that uses it
    /// (workers never do).
    pub(crate) tasks: std::sync::Arc<tokio::sync::OnceCell<kv::Store>>,
}

impl Cluster {
    /// Connects, then creates the cluster's stream and buckets if they are
    /// missing and checks them if they are not. `member` names the
    /// connection in the server's monitoring (`gateway`, `worker-3`).
    pub async fn connect(settings: ClusterSettings, member: &str) -> Result<Cluster, Error> {
        settings.validate()?;
        let names = settings.names();
        let options = connect_options(&settings.security, member).await?;
        let urls = settings.urls.join(",");
        let shown: Vec<String> = settings.urls.iter().map(|u| redact(u)).collect();
        let client = options.connect(urls.as_str()).await.map_err(|e| {
            unavailable(format!(
                "cannot connect to NATS at {}: {e}",
                shown.join(",")
            ))
        })?;
        let js = jetstream::ContextBuilder::new()
            .timeout(API_TIMEOUT)
            .build(client.clone());
        ensure_stream(&js, &settings, &names).await?;
        let journal = ensure_bucket(
            &js,
            kv::Config {
                bucket: names.journal(),
                description: "toolexec: each run's state and result, by idempotency key".into(),
                history: 1,
                max_age: settings.journal_ttl,
                storage: stream::StorageType::File,
                ..Default::default()
            },
        )
        .await?;
        let workers = ensure_bucket(
            &js,
            kv::Config {
                bucket: names.workers(),
                description: "toolexec: live workers, renewed every heartbeat".into(),
                history: 1,
                max_age: settings.ack_wait(),
                // On file, as the rest: a server restart keeps the bucket.
                storage: stream::StorageType::File,
                ..Default::default()
            },
        )
        .await?;
        Ok(Cluster {
            settings,
            names,
            client,
            js,
            journal,
            workers,
            tasks: Default::default(),
        })
    }

    /// The gateways' tasks bucket, created if missing.
    pub(crate) async fn tasks(&self) -> Result<&kv::Store, Error> {
        self.tasks
            .get_or_try_init(|| {
                ensure_bucket(
                    &self.js,
                    kv::Config {
                        bucket: self.names.tasks(),
                        description: "toolexec: the gateways' MCP tasks, by task id".into(),
                        history: 1,
                        max_age: self.settings.journal_ttl,
                        storage: stream::StorageType::File,
                        ..Default::default()
                    },
                )
            })
            .await
    }

    /// The settings it was started with.
    pub fn settings(&self) -> &ClusterSettings {
        &self.settings
    }
}

/// A `backend_unavailable` error of the fleet.
pub(crate) fn unavailable(message: impl Into<String>) -> Error {
    Error::backend_unavailable("fleet", message)
}

async fn connect_options(
    security: &Security,
    member: &str,
) -> Result<async_nats::ConnectOptions, Error> {
    let mut options = async_nats::ConnectOptions::new()
        .name(format!("toolexec {member}"))
        .connection_timeout(API_TIMEOUT)
        .request_timeout(Some(API_TIMEOUT));
    if let Some(creds) = &security.creds {
        options = options.credentials(creds.expose()).map_err(|e| {
            Error::invalid_request("cluster.creds", format!("not a NATS credentials file: {e}"))
        })?;
    }
    if let Some(seed) = &security.nkey {
        options = options.nkey(seed.expose().to_owned());
    }
    if let Some(token) = &security.token {
        options = options.token(token.expose().to_owned());
    }
    if let Some(user) = &security.user {
        let password = security
            .password
            .as_ref()
            .map(|p| p.expose().to_owned())
            .unwrap_or_default();
        options = options.user_and_password(user.clone(), password);
    }
    if let Some(ca) = &security.ca_file {
        if !ca.is_file() {
            return Err(Error::invalid_request(
                "cluster.ca_file",
                format!("{} is not a readable file", ca.display()),
            ));
        }
        options = options.add_root_certificates(ca.clone());
    }
    Ok(options.require_tls(security.require_tls))
}

/// Creates the work stream, or checks the one there: a stream of another
/// shape (not a work queue, other subjects) would lose or double runs.
async fn ensure_stream(
    js: &jetstream::Context,
    settings: &ClusterSettings,
    names: &Names,
) -> Result<(), Error> {
    let wanted = stream::Config {
        name: names.stream(),
        description: Some("toolexec: queued runs, one per idempotency key".into()),
        subjects: vec![
            names.all_runs(),
            names.all_code_runs(),
            names.all_unit_runs(),
        ],
        retention: stream::RetentionPolicy::WorkQueue,
        storage: stream::StorageType::File,
        max_messages: settings.max_queue,
        discard: stream::DiscardPolicy::New,
        duplicate_window: Duration::from_secs(120),
        // A run nobody took within the journal's time is dropped, never
        // kept against the queue bound for good.
        max_age: settings.journal_ttl,
        ..Default::default()
    };
    let mut stream = js
        .get_or_create_stream(wanted.clone())
        .await
        .map_err(|e| unavailable(format!("stream {}: {e}", wanted.name)))?;
    let info = stream
        .info()
        .await
        .map_err(|e| unavailable(format!("stream {}: {e}", wanted.name)))?;
    let mut have = info.config.clone();
    let older = have.subjects.len() < wanted.subjects.len()
        && have.subjects.iter().all(|s| wanted.subjects.contains(s));
    if have.retention == stream::RetentionPolicy::WorkQueue && older {
        // A stream of an earlier toolexec: its subjects, and the new ones.
        have.subjects = wanted.subjects.clone();
        have = js
            .update_stream(have)
            .await
            .map_err(|e| unavailable(format!("stream {}: adding subjects: {e}", wanted.name)))?
            .config;
    }
    let have = &have;
    // A later toolexec may have added subjects of its own, within the
    // cluster's: the ones this member needs must all be there.
    let ours = format!("toolexec.{}.", settings.name);
    let fits = wanted.subjects.iter().all(|s| have.subjects.contains(s))
        && have.subjects.iter().all(|s| s.starts_with(&ours));
    if have.retention != stream::RetentionPolicy::WorkQueue || !fits {
        return Err(unavailable(format!(
            "stream {} exists with another shape (retention {:?}, subjects {:?}; \
             toolexec needs a work queue on {:?}): delete it or use another cluster name",
            wanted.name, have.retention, have.subjects, wanted.subjects
        )));
    }
    if have.max_messages != wanted.max_messages {
        tracing::warn!(
            stream = %wanted.name,
            configured = wanted.max_messages,
            in_force = have.max_messages,
            "the stream's queue bound differs from this member's max_queue; the stream's is in force"
        );
    }
    Ok(())
}

async fn ensure_bucket(js: &jetstream::Context, config: kv::Config) -> Result<kv::Store, Error> {
    let name = config.bucket.clone();
    match js.get_key_value(&name).await {
        Ok(store) => Ok(store),
        Err(_) => match js.create_key_value(config).await {
            Ok(store) => Ok(store),
            // Another member created it meanwhile.
            Err(create) => js
                .get_key_value(&name)
                .await
                .map_err(|_| unavailable(format!("bucket {name}: {create}"))),
        },
    }
}

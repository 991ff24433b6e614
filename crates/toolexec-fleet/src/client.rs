//! The caller's side: the tools of the fleet's namespaces in the local
//! catalog, each call queued on the work stream and its result awaited on
//! a reply subject, with the journal as the durable copy.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::kv;
use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use toolexec::{
    BoxFuture, Catalog, Error, ErrorBody, ErrorCode, Exec, Tool, ToolContext, ToolOutput,
};

use toolexec_runtime::{Profile, RunContext, RunOutcome, RunStatus};

use crate::adverts::{Live, Serving};
use crate::callback::{CALLBACK_HEADER, Callbacks};
use crate::cluster::{Cluster, unavailable};
use crate::journal;
use crate::wire::{Advert, Event, Journal, Outcome, REPLY_HEADER, RunRequest};

/// The label (`tool`) of code runs in journals and errors.
pub(crate) const CODE_LABEL: &str = "code";

/// The label (`tool`) of sandboxed units in journals and errors.
pub(crate) const UNIT_LABEL: &str = "unit";

/// The `worker` of a journal entry a caller wrote when it gave up on a run
/// no worker had taken.
const ABANDONED: &str = "abandoned-by-caller";

/// How long a call keeps queuing its run while NATS does not confirm it.
const PUBLISH_PATIENCE: Duration = Duration::from_secs(20);

tokio::task_local! {
    static IDEMPOTENCY_KEY: String;
}

/// Runs `fut` with `key` as the idempotency key of the fleet calls it
/// makes: a call with a key already run returns the recorded result
/// instead of running again.
pub async fn with_idempotency_key<F: Future>(key: impl Into<String>, fut: F) -> F::Output {
    IDEMPOTENCY_KEY.scope(key.into(), fut).await
}

/// The fleet as seen from a gateway or a CLI: which workers are alive, and
/// the backend of the tools they advertise.
#[derive(Debug)]
pub struct FleetClient {
    pub(crate) cluster: Cluster,
    pub(crate) namespaces: Vec<String>,
    /// Live workers, by id.
    pub(crate) live: Mutex<HashMap<String, Live>>,
    /// Where advertised tools are imported.
    pub(crate) catalog: std::sync::Weak<Catalog>,
    /// When the adverts were last read in full (outside the watch).
    pub(crate) last_read: tokio::sync::Mutex<Option<Instant>>,
}

impl FleetClient {
    /// Queues one call and waits for its outcome.
    pub(crate) async fn call(
        self: &Arc<Self>,
        tool: &Tool,
        args: serde_json::Value,
        ctx: &ToolContext,
    ) -> Result<ToolOutput, Error> {
        let id = tool.id.to_string();
        let key = self.key_for(&id, &args, ctx.idempotency_key());
        let prior = self.prior(&key, given_key(ctx.idempotency_key())).await?;
        // A keyed run already in the journal is waited for (or its outcome
        // returned) whether or not a worker is seen now; one abandoned
        // before it started is queued again, so needs a worker.
        let recorded = prior.as_ref().is_some_and(|e| {
            !matches!(serde_json::from_slice::<Journal>(&e.value),
                      Ok(Journal::Done { worker, .. }) if worker == ABANDONED)
        });
        if !recorded && self.live_now(Serving::Namespace(tool.namespace())).await == 0 {
            // Never queued for nobody: it would run whenever a worker came.
            return Err(unavailable(format!(
                "no live worker of cluster {} serves namespace {}",
                self.cluster.settings.name,
                tool.namespace()
            )));
        }
        let run = RunRequest {
            key,
            tool: id,
            args,
            timeout_ms: None,
            code: None,
            unit: None,
        };
        let subject = self.cluster.names.runs(tool.namespace());
        self.submit(subject, run, prior, ctx, None)
            .await?
            .into_result()
    }

    /// Runs a code-mode script on a worker of the fleet that runs code of
    /// `profile`, durably: its tool calls (to the worker's catalog) are
    /// journaled, and a run whose worker is lost resumes on another by
    /// replaying the journal. The script reaches the namespaces the worker
    /// serves. Honours [`with_idempotency_key`].
    pub async fn execute_code(
        self: &Arc<Self>,
        request: &toolexec_code::CodeRequest,
        profile: Profile,
        cancel: &toolexec::CancellationToken,
    ) -> Result<toolexec_code::CodeOutcome, Error> {
        self.run_code(request, profile, cancel, None).await
    }

    /// [`FleetClient::execute_code`], the script also reaching the tools of
    /// `tools` (the caller's catalog, with its policy and credentials):
    /// a call outside the worker's namespaces comes back here, is run
    /// behind the script's budget and allowlist, and is run once whatever
    /// the worker asks again after a takeover.
    pub async fn execute_code_with_tools(
        self: &Arc<Self>,
        request: &toolexec_code::CodeRequest,
        profile: Profile,
        cancel: &toolexec::CancellationToken,
        tools: Exec,
    ) -> Result<toolexec_code::CodeOutcome, Error> {
        self.run_code(request, profile, cancel, Some(tools)).await
    }

    async fn run_code(
        self: &Arc<Self>,
        request: &toolexec_code::CodeRequest,
        profile: Profile,
        cancel: &toolexec::CancellationToken,
        tools: Option<Exec>,
    ) -> Result<toolexec_code::CodeOutcome, Error> {
        if self.live_now(Serving::Code(profile)).await == 0 {
            return Err(unavailable(format!(
                "no live worker of cluster {} runs {} code (toolexec worker --code{})",
                self.cluster.settings.name,
                profile.as_str(),
                if profile == Profile::Standard {
                    ""
                } else {
                    " --code-profile hardened"
                }
            )));
        }
        let code = crate::code::CodeWire::of(request);
        let run = RunRequest {
            key: self.key_for(
                CODE_LABEL,
                &serde_json::to_value(&code).unwrap_or_default(),
                None,
            ),
            tool: CODE_LABEL.to_owned(),
            args: serde_json::Value::Null,
            timeout_ms: None,
            code: Some(code),
            unit: None,
        };
        let callbacks = match tools {
            Some(exec) => Some(
                Callbacks::listen(
                    &self.cluster.client,
                    exec,
                    &run.key,
                    request.limits.max_tool_calls,
                    &request.limits.allowed_tools,
                )
                .await?,
            ),
            None => None,
        };
        let ctx = ToolContext::with_cancel(cancel.clone());
        let subject = self.cluster.names.code_runs(profile);
        let prior = self.prior(&run.key, given_key(None)).await?;
        match self.submit(subject, run, prior, &ctx, callbacks).await? {
            Outcome::Code { outcome } => Ok(*outcome),
            other => other
                .into_result()
                .and_then(|_| Err(unavailable("a code run was answered with a tool's outcome"))),
        }
    }

    /// Runs a sandboxed unit on a worker that runs units of its profile
    /// (one that checked at start that a runtime of its machine enforces
    /// it), the unit's tool calls coming back to `ctx.host` (the caller's
    /// tools, budget and allowlist). A unit whose worker is lost is not run
    /// again: it ends `interrupted`.
    pub async fn run_unit(
        self: &Arc<Self>,
        request: toolexec_runtime::RunRequest,
        ctx: RunContext,
    ) -> RunOutcome {
        let failed = |e: &Error| RunOutcome::error(crate::runtime::NAME, e);
        let profile = request.profile;
        if self.live_now(Serving::Unit(profile)).await == 0 {
            return failed(&unavailable(format!(
                "no live worker of cluster {} runs {} units (toolexec worker --unit-profile {})",
                self.cluster.settings.name,
                profile.as_str(),
                profile.as_str()
            )));
        }
        let args = serde_json::to_value(&request).unwrap_or_default();
        let key = self.key_for(UNIT_LABEL, &args, None);
        let callbacks =
            match Callbacks::listen_on(&self.cluster.client, ctx.host.clone(), &key).await {
                Ok(callbacks) => callbacks,
                Err(e) => return failed(&e),
            };
        let run = RunRequest {
            key,
            tool: UNIT_LABEL.to_owned(),
            args: serde_json::Value::Null,
            timeout_ms: None,
            code: None,
            unit: Some(Box::new(request)),
        };
        let tool_ctx = ToolContext::with_cancel(ctx.cancel.clone());
        let subject = self.cluster.names.unit_runs(profile);
        let prior = match self.prior(&run.key, given_key(None)).await {
            Ok(prior) => prior,
            Err(e) => return failed(&e),
        };
        let mut outcome = match self
            .submit(subject, run, prior, &tool_ctx, Some(callbacks))
            .await
        {
            Ok(Outcome::Unit { outcome }) => match RunOutcome::from_value(outcome) {
                Ok(mut outcome) => {
                    outcome.runtime = format!("{}/{}", crate::runtime::NAME, outcome.runtime);
                    outcome
                }
                Err(e) => failed(&unavailable(format!(
                    "a worker's unit outcome is unreadable: {e}"
                ))),
            },
            Ok(Outcome::Err { error }) => {
                RunOutcome::new(crate::runtime::NAME, RunStatus::Error { error })
            }
            Ok(_) => failed(&unavailable("a unit was answered with a tool's outcome")),
            Err(Error::Cancelled { .. }) => {
                RunOutcome::new(crate::runtime::NAME, RunStatus::Cancelled)
            }
            Err(e) => failed(&e),
        };
        // The calls this side ran, then those the worker refused itself
        // (whatever way the run ended).
        let ran = ctx.host.take_tool_calls();
        let refused = toolexec_runtime::unseen(std::mem::take(&mut outcome.tool_calls), &ran);
        outcome.tool_calls = ran;
        outcome.tool_calls.extend(refused);
        outcome
    }

    /// Keeps `record` as task `id` of the cluster's gateways (32 hex
    /// digits), for `journal_ttl`.
    pub async fn save_task(&self, id: &str, record: Vec<u8>) -> Result<(), Error> {
        if !task_id(id) {
            return Err(Error::invalid_request(
                "taskId",
                "not a task id of this cluster",
            ));
        }
        self.cluster
            .tasks()
            .await?
            .put(id, Bytes::from(record))
            .await
            .map(|_| ())
            .map_err(|e| unavailable(format!("task {id}: {e}")))
    }

    /// The record of task `id`, if the cluster keeps one.
    pub async fn load_task(&self, id: &str) -> Result<Option<Vec<u8>>, Error> {
        if !task_id(id) {
            return Ok(None);
        }
        self.cluster
            .tasks()
            .await?
            .get(id)
            .await
            .map(|v| v.map(|b| b.to_vec()))
            .map_err(|e| unavailable(format!("task {id}: {e}")))
    }

    /// Stops the run of `tool` with `args` under idempotency key `given`
    /// (made by this caller's principal), or keeps it from starting: the
    /// worker holding it is told, and a run no worker took yet is settled
    /// as cancelled.
    pub async fn cancel_keyed(&self, tool: &str, args: &serde_json::Value, given: &str) {
        let key = self.key_for(tool, args, Some(given));
        abandon(
            &self.cluster.client,
            self.cluster.names.cancel(&key),
            &self.cluster.journal,
            &key,
        )
        .await;
    }

    /// The run key: the caller's idempotency key, scoped to the caller,
    /// the tool (`label`) and the arguments, else a fresh one. Another
    /// caller, or other arguments, under the same key is another run.
    fn key_for(&self, label: &str, args: &serde_json::Value, explicit: Option<&str>) -> String {
        match given_key(explicit) {
            Some(given) => {
                let caller = toolexec::telemetry::current_caller()
                    .and_then(|c| c.principal.clone())
                    .unwrap_or_default();
                let args = serde_json::to_vec(args).unwrap_or_default();
                keyed(&[label.as_bytes(), caller.as_bytes(), &args, given.as_bytes()])
            }
            None => random_key(),
        }
    }

    /// What the journal holds for a run keyed by the caller's idempotency
    /// key `given` (nothing is read for a run without one: its key is new).
    async fn prior(&self, key: &str, given: Option<String>) -> Result<Option<kv::Entry>, Error> {
        if given.is_none() {
            return Ok(None);
        }
        Ok(self
            .cluster
            .journal
            .entry(key)
            .await
            .map_err(|e| unavailable(format!("journal read: {e}")))?
            .filter(|e| e.operation == kv::Operation::Put))
    }

    /// Queues `run` on `subject` and waits for its outcome, relaying its
    /// progress and chunks to `ctx`, and serving its calls back. A keyed
    /// run whose outcome is recorded (`prior`, read by [`Self::prior`])
    /// gets it without queuing again.
    async fn submit(
        &self,
        subject: String,
        run: RunRequest,
        prior: Option<kv::Entry>,
        ctx: &ToolContext,
        mut callbacks: Option<Callbacks>,
    ) -> Result<Outcome, Error> {
        let key = run.key.clone();
        // The message id: the key, so a publish sent twice is dropped as a
        // duplicate; a fresh one when the key is reopened below.
        let mut message_id = key.clone();
        let store = &self.cluster.journal;
        if let Some(entry) = prior {
            match serde_json::from_slice::<Journal>(&entry.value) {
                // Abandoned by a caller before any worker took it: it
                // never ran, so a retry runs it (the entry removed only
                // if it is still that one).
                Ok(Journal::Done { worker, .. }) if worker == ABANDONED => {
                    let _ = store
                        .delete_expect_revision(key.as_str(), Some(entry.revision))
                        .await;
                    message_id = format!("{key}-{}", random_key());
                }
                // Already run (a retry with the same idempotency key):
                // the recorded outcome, without queuing again.
                Ok(Journal::Done { outcome, .. }) => return Ok(outcome),
                _ => {}
            }
        }
        let client = &self.cluster.client;
        let inbox = client.new_inbox();
        let mut replies = client
            .subscribe(inbox.clone())
            .await
            .map_err(|e| unavailable(format!("reply subscription: {e}")))?;
        let payload = Bytes::from(serde_json::to_vec(&run).expect("runs serialize"));
        let max = self.cluster.client.server_info().max_payload;
        if payload.len() + 1024 > max {
            return Err(Error::limit_exceeded(
                toolexec::LimitKind::InputBytes,
                format!(
                    "the run of {} ({} bytes) is over the NATS server's max_payload ({max} bytes)",
                    run.tool,
                    payload.len()
                ),
            ));
        }
        let mut headers = HeaderMap::new();
        headers.insert(async_nats::header::NATS_MESSAGE_ID, message_id.as_str());
        headers.insert(REPLY_HEADER, inbox.as_str());
        if let Some(callbacks) = &callbacks {
            headers.insert(CALLBACK_HEADER, callbacks.subject.as_str());
        }
        // Armed before the publish: a caller that goes away while the run
        // is being queued (or after) leaves it settled as abandoned, and
        // the worker running it is told to stop.
        let mut guard = CancelOnDrop {
            client: client.clone(),
            subject: self.cluster.names.cancel(&key),
            journal: self.cluster.journal.clone(),
            key: key.clone(),
            armed: true,
        };
        self.queue(subject, headers, payload).await?;
        let every = self.cluster.settings.heartbeat.max(Duration::from_secs(1));
        let mut poll = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        // Since when the worker holding the run has not been seen.
        let mut gone_since: Option<Instant> = None;
        let result = loop {
            tokio::select! {
                message = replies.next() => {
                    let Some(message) = message else {
                        break Err(unavailable("the connection to NATS closed during the call"));
                    };
                    match serde_json::from_slice::<Event>(&message.payload) {
                        Ok(Event::Progress { progress, total, message }) => {
                            ctx.progress(progress, total, message.as_deref());
                        }
                        Ok(Event::Chunk { data }) => ctx.chunk(data).await,
                        Ok(Event::Done { outcome }) => break Ok(outcome),
                        Err(e) => tracing::warn!(key = %key, "unreadable event: {e}"),
                    }
                }
                _ = poll.tick() => {
                    // The durable copy: a reply lost to a reconnect, or a run
                    // another caller queued under the same key.
                    match journal::read_entry(&self.cluster.journal, &key).await {
                        Ok(Some((Journal::Done { outcome, .. }, _))) => break Ok(outcome),
                        Ok(Some((held @ Journal::Running { .. }, revision))) => {
                            if let Some(outcome) = self.reap(&key, &held, revision, &mut gone_since).await {
                                break Ok(outcome);
                            }
                        }
                        _ => gone_since = None,
                    }
                }
                () = ctx.cancelled() => {
                    break Err(Error::Cancelled { tool: run.tool.clone() });
                }
                () = serve(&mut callbacks) => unreachable!("serving calls back never ends"),
            }
        };
        guard.armed = matches!(result, Err(Error::Cancelled { .. }));
        result
    }

    /// Settles a run whose holder has been gone longer than every delivery
    /// could take (its last delivery's worker died: nothing delivers it
    /// again): `interrupted`, by compare-and-set.
    async fn reap(
        &self,
        key: &str,
        held: &Journal,
        revision: u64,
        gone_since: &mut Option<Instant>,
    ) -> Option<Outcome> {
        let Journal::Running {
            instance, worker, ..
        } = held
        else {
            return None;
        };
        if self.instance_alive(instance) {
            *gone_since = None;
            return None;
        }
        let since = *gone_since.get_or_insert_with(Instant::now);
        let settings = &self.cluster.settings;
        let every_delivery = settings.ack_wait() * (settings.max_deliver.max(1) as u32 + 1);
        if since.elapsed() < every_delivery {
            return None;
        }
        // The holder's own advert, read now: a watch that missed adverts
        // never settles a healthy run.
        if let Ok(Some(advert)) = self.cluster.workers.get(worker.as_str()).await
            && serde_json::from_slice::<Advert>(&advert).is_ok_and(|a| &a.instance == instance)
        {
            *gone_since = None;
            return None;
        }
        journal::abandon_lost(&self.cluster.journal, key, revision, held)
            .await
            .ok()
            .flatten()
    }

    /// Publishes a run until JetStream confirms it. A publish whose
    /// confirmation was lost (NATS restarting) may have landed, so it is
    /// sent again, under the same message id, which JetStream drops as a
    /// duplicate: failing it instead could have a caller retry a run that
    /// is queued after all.
    async fn queue(
        &self,
        subject: String,
        headers: HeaderMap,
        payload: Bytes,
    ) -> Result<(), Error> {
        let mut delay = Duration::from_millis(100);
        let give_up = Instant::now() + PUBLISH_PATIENCE;
        loop {
            let sent = async {
                let ack = self
                    .cluster
                    .js
                    .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
                    .await?;
                ack.await
            }
            .await;
            let e = match sent {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            let detail = e.to_string();
            let transient = !detail.contains("maximum messages")
                && matches!(
                    e.kind(),
                    PublishErrorKind::TimedOut
                        | PublishErrorKind::BrokenPipe
                        | PublishErrorKind::StreamNotFound
                        | PublishErrorKind::Other
                );
            if !transient || Instant::now() + delay > give_up {
                return Err(self.refused(e.kind(), &detail));
            }
            tracing::debug!("queuing a run again: {detail}");
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    fn refused(&self, kind: PublishErrorKind, detail: &str) -> Error {
        let detail = detail.to_owned();
        if detail.contains("maximum messages") {
            return unavailable(format!(
                "the fleet is saturated: {} runs are queued (cluster max_queue); try again later",
                self.cluster.settings.max_queue
            ));
        }
        match kind {
            PublishErrorKind::StreamNotFound => unavailable(format!(
                "the cluster's stream {} is missing",
                self.cluster.names.stream()
            )),
            PublishErrorKind::TimedOut => unavailable(format!(
                "JetStream did not confirm the run within {}s (is NATS up?); \
                 it may still run",
                PUBLISH_PATIENCE.as_secs()
            )),
            _ => unavailable(format!("queuing the run failed: {detail}")),
        }
    }
}

/// Serves `callbacks` while polled; pending for ever without them.
async fn serve(callbacks: &mut Option<Callbacks>) {
    match callbacks {
        Some(callbacks) => callbacks.serve().await,
        None => std::future::pending().await,
    }
}

/// The fleet as a [`CodeExecutor`](toolexec_code::CodeExecutor): the MCP
/// gateway's `execute_code` scripts run as durable code runs of one
/// profile, reaching the worker's namespaces and, when given, the
/// caller's own tools ([`FleetCode::with_tools`]).
#[derive(Debug, Clone)]
pub struct FleetCode {
    client: Arc<FleetClient>,
    profile: Profile,
    tools: Option<Exec>,
}

impl FleetCode {
    /// Scripts of `profile` on `client`'s fleet, reaching the namespaces
    /// the caller sends to the fleet.
    pub fn new(client: Arc<FleetClient>, profile: Profile) -> Self {
        FleetCode {
            client,
            profile,
            tools: None,
        }
    }

    /// Scripts also reach `tools` (the gateway's catalog, with its
    /// policy), their calls sent back from the worker.
    pub fn with_tools(mut self, tools: Exec) -> Self {
        self.tools = Some(tools);
        self
    }
}

impl toolexec_code::CodeExecutor for FleetCode {
    fn execute<'a>(
        &'a self,
        request: toolexec_code::CodeRequest,
        cancel: &'a toolexec::CancellationToken,
    ) -> BoxFuture<'a, Result<toolexec_code::CodeOutcome, ErrorBody>> {
        let mut request = request;
        Box::pin(async move {
            let ran = match &self.tools {
                Some(tools) => {
                    self.client
                        .execute_code_with_tools(&request, self.profile, cancel, tools.clone())
                        .await
                }
                None => {
                    request.limits.allowed_tools =
                        scope_allowed(&request.limits.allowed_tools, &self.client.namespaces);
                    self.client
                        .execute_code(&request, self.profile, cancel)
                        .await
                }
            };
            ran.map_err(|e| e.to_body())
        })
    }
}

/// A script's allowed tools, within the caller's fleet namespaces (when it
/// names some): every tool of them when the caller allows every tool, else
/// the caller's patterns whose namespace is one of them (never more than
/// the caller allowed). The worker keeps scripts to its own namespaces too.
fn scope_allowed(patterns: &[String], namespaces: &[String]) -> Vec<String> {
    if namespaces.is_empty() {
        return patterns.to_vec();
    }
    let ours = |p: &String| {
        p.split_once(':')
            .is_some_and(|(ns, _)| namespaces.iter().any(|n| n == ns))
    };
    if patterns.is_empty() {
        return namespaces.iter().map(|ns| format!("{ns}:*")).collect();
    }
    let kept: Vec<String> = patterns.iter().filter(|p| ours(p)).cloned().collect();
    if kept.is_empty() {
        // None of the caller's tools is on the fleet: a pattern no tool
        // id matches (an empty list would allow every tool).
        vec![":".to_owned()]
    } else {
        kept
    }
}

/// Sends the worker a cancellation when a call is abandoned (its caller
/// cancelled, its deadline passed, or the future was dropped).
/// A run still queued is settled as cancelled in the journal, so no
/// worker starts it later (a caller retrying it would run it twice).
struct CancelOnDrop {
    client: async_nats::Client,
    subject: String,
    journal: async_nats::jetstream::kv::Store,
    key: String,
    armed: bool,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (client, subject) = (self.client.clone(), std::mem::take(&mut self.subject));
        let (journal, key) = (self.journal.clone(), std::mem::take(&mut self.key));
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move { abandon(&client, subject, &journal, &key).await });
        }
    }
}

/// Tells the worker holding run `key` to stop (on its cancel `subject`),
/// and settles the run as cancelled where no worker claimed it yet, so no
/// worker starts it later.
async fn abandon(
    client: &async_nats::Client,
    subject: String,
    journal: &async_nats::jetstream::kv::Store,
    key: &str,
) {
    let _ = client.publish(subject, Bytes::new()).await;
    let cancelled = Journal::Done {
        worker: ABANDONED.into(),
        outcome: Outcome::Err {
            error: ErrorBody {
                code: ErrorCode::Cancelled,
                message: "cancelled: the caller gave up before the run started".into(),
                details: None,
            },
        },
    };
    if let Ok(bytes) = serde_json::to_vec(&cancelled) {
        // Only where no worker claimed it yet.
        let _ = journal.create(key, Bytes::from(bytes)).await;
    }
}

/// The journal key of a caller-given idempotency key: scoped to the tool,
/// and safe as a NATS subject token whatever the caller wrote.
fn keyed(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    hex(&h.finalize()[..16])
}

/// The caller's idempotency key: the run's own
/// ([`RunOptions::idempotency_key`](toolexec::RunOptions::idempotency_key)),
/// else the one [`with_idempotency_key`] set around the call.
fn given_key(explicit: Option<&str>) -> Option<String> {
    explicit
        .map(str::to_owned)
        .or_else(|| IDEMPOTENCY_KEY.try_with(Clone::clone).ok())
}

/// A task id as gateways make them: 32 hex digits.
fn task_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(crate) fn random_key() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the OS random source works");
    hex(&bytes)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::scope_allowed;

    #[test]
    fn scripts_stay_within_the_callers_fleet_namespaces() {
        let ns = vec!["billing".to_owned()];
        let v = |xs: &[&str]| xs.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        // Everything allowed: every tool of the fleet namespaces.
        assert_eq!(scope_allowed(&[], &ns), v(&["billing:*"]));
        // Never more than the caller allowed.
        assert_eq!(
            scope_allowed(&v(&["billing:charge", "text:*"]), &ns),
            v(&["billing:charge"])
        );
        assert_eq!(scope_allowed(&v(&["text:*"]), &ns), v(&[":"]));
        assert!(!toolexec::glob_match(":", "billing:charge"));
        // No fleet namespaces: the worker's own bound applies.
        assert_eq!(scope_allowed(&v(&["a:b"]), &[]), v(&["a:b"]));
    }
}

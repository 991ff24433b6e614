//! The sandbox side of a script unit (hardened code mode): a process
//! started inside a sandbox reads its script from stdin, runs it in the
//! [`CodeEngine`] with tool access through the tool channel
//! (descriptor 3), and sends the [`CodeOutcome`] back as its channel
//! `result`.
//!
//! Input on stdin, one JSON object: `{"language": "javascript", "source":
//! "...", "limits": <toolexec_runtime::RuntimeLimits>}`.

use std::io::Read;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value as Json;
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use toolexec::{DetailLevel, Error, ToolAccess, until_cancelled};
use toolexec_runtime::RuntimeLimits;
use toolexec_runtime::protocol::{ChannelClient, ClientError, DEFAULT_MAX_FRAME_BYTES};

use super::{engine_limits, report};
use crate::{CodeEngine, CodeLimit, CodeOutcome, CodeRequest, CodeStatus};

/// Largest input accepted on stdin (a 1 MiB script, JSON-escaped, and limits).
pub const MAX_INPUT_BYTES: u64 = 8 << 20;

/// What the sandbox runtime writes to the worker's stdin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct WorkerInput {
    /// The engine: only `javascript`.
    pub language: String,
    /// The script.
    pub source: String,
    /// The run's limits; the script's limits are derived with
    /// [`code_limits_from_runtime`](crate::code_limits_from_runtime).
    #[serde(default)]
    pub limits: RuntimeLimits,
}

/// Why the worker could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Stdin is unreadable, too large or not a [`WorkerInput`].
    #[error("invalid_request: stdin: {0}")]
    Input(String),
    /// No usable tool channel.
    #[error("backend_unavailable: channel: {0}")]
    Channel(#[from] ClientError),
}

/// Reads the [`WorkerInput`] from `reader` (at most [`MAX_INPUT_BYTES`]).
pub fn read_input(reader: impl Read) -> Result<WorkerInput, WorkerError> {
    let mut bytes = Vec::new();
    reader
        .take(MAX_INPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| WorkerError::Input(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(WorkerError::Input(format!(
            "more than {MAX_INPUT_BYTES} bytes"
        )));
    }
    let input: WorkerInput = serde_json::from_slice(&bytes)
        .map_err(|e| WorkerError::Input(format!("not a script request: {e}")))?;
    if input.language != "javascript" {
        return Err(WorkerError::Input(format!(
            "language {:?} is not supported (only javascript)",
            input.language
        )));
    }
    Ok(input)
}

/// The whole worker process: a single-threaded runtime, [`run_script_worker`],
/// and the exit code (0 once the outcome is sent, 1 if no runtime could
/// start, 2 on a worker error, printed to stderr). `toolexec __script-worker`
/// and the `toolexec-code-worker` binary are this function.
pub fn worker_main() -> std::process::ExitCode {
    use std::process::ExitCode;
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run_script_worker()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs one script as the sandboxed worker: stdin → engine → channel
/// `result`. Must run inside a Tokio runtime; returns once the result is
/// sent (the caller then exits 0).
///
/// The engine forwards every tool call to the host (its own allowlist is
/// left open): the host's [`toolexec_runtime::ToolHost`] enforces the
/// allowlist and the budget and keeps the authoritative call log.
pub async fn run_script_worker() -> Result<(), WorkerError> {
    let input = read_input(std::io::stdin().lock())?;
    let client = Arc::new(ChannelClient::from_env().await?);
    client.hello().await?;
    let outcome = run_with(client.clone(), &input).await;
    client.send_result(result_value(outcome)).await?;
    Ok(())
}

/// Runs `input` with tools through `client`.
async fn run_with(client: Arc<ChannelClient<UnixStream>>, input: &WorkerInput) -> CodeOutcome {
    let limits = engine_limits(&input.limits);
    let engine = CodeEngine::with_tools(Arc::new(ChannelTools(client)), 1);
    engine
        .execute(CodeRequest::new(input.source.clone()).with_limits(limits))
        .await
}

/// The outcome as the worker sends it: the [`CodeOutcome`] JSON without
/// its tool calls (the host keeps its own log and reads only the status,
/// value and console output, so the calls' arguments and results must not
/// count against the frame), cut to fit one channel frame (console output
/// shortened, the status then `limit_exceeded: output`).
pub fn result_value(mut outcome: CodeOutcome) -> Json {
    let value = report(&mut outcome);
    let budget = DEFAULT_MAX_FRAME_BYTES - 4096;
    if serde_json::to_vec(&value).map_or(0, |b| b.len()) <= budget {
        return value;
    }
    // Each kept character may take up to 6 bytes escaped.
    let keep = budget / 2 / 6 / 2;
    let cut = |s: &mut String| s.truncate(s.floor_char_boundary(keep));
    cut(&mut outcome.stdout);
    cut(&mut outcome.stderr);
    outcome.value = None;
    outcome.status = CodeStatus::LimitExceeded {
        limit: CodeLimit::Output,
        message: format!(
            "the outcome does not fit one channel frame of {DEFAULT_MAX_FRAME_BYTES} bytes"
        ),
    };
    report(&mut outcome)
}

/// Tool access through the tool channel: the host's answers, their codes kept
/// (`Error::from` the body); a broken channel is `backend_unavailable`.
struct ChannelTools(Arc<ChannelClient<UnixStream>>);

fn client_error(e: ClientError) -> Error {
    match e {
        ClientError::Tool(body) => Error::from(body),
        other => Error::backend_unavailable("tool channel", other.to_string()),
    }
}

impl ToolAccess for ChannelTools {
    fn call(
        &self,
        tool_id: &str,
        args: Json,
        cancel: CancellationToken,
    ) -> toolexec::BoxFuture<'static, Result<Json, Error>> {
        let client = self.0.clone();
        let id = tool_id.to_owned();
        Box::pin(async move {
            let call = async { client.call(&id, args).await.map_err(client_error) };
            until_cancelled(&id, call, &cancel).await
        })
    }

    fn search(
        &self,
        query: &str,
        limit: usize,
    ) -> toolexec::BoxFuture<'static, Result<Json, Error>> {
        let client = self.0.clone();
        let query = query.to_owned();
        Box::pin(async move {
            client
                .search(&query, limit.clamp(1, 50))
                .await
                .map_err(client_error)
        })
    }

    fn describe(
        &self,
        tool_id: &str,
        level: DetailLevel,
    ) -> toolexec::BoxFuture<'static, Result<Json, Error>> {
        let client = self.0.clone();
        let id = tool_id.to_owned();
        let detail = match level {
            DetailLevel::Summary => "summary",
            DetailLevel::Schema => "schema",
            DetailLevel::Full => "full",
        };
        Box::pin(async move { client.describe(&id, detail).await.map_err(client_error) })
    }
}

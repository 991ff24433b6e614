//! A 2026-07-28 server's requests for client input: instead of asking the
//! client during a call, the server answers `tools/call`, `prompts/get` or
//! `resources/read` with `input_required` (sampling, elicitation or roots
//! requests, and an opaque state), and the client sends the request again
//! with the answers. toolexec asks the client of the request for each
//! ([`Asker`], as for a 2025 server's requests) and sends it again, at most
//! [`MAX_ROUNDS`] times ([`Shared::request_answering`]).

use std::time::Duration;

use rmcp::model::{ClientRequest, InputRequest, InputRequiredResult, InputResponses, ServerResult};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolexec::{Error, ToolContext};

use super::call::RequestError;
use super::client_requests::{Asker, for_client};
use super::links::{Relayed, Target};
use super::shared::Shared;

/// Most `input_required` answers one call takes before it fails.
pub(crate) const MAX_ROUNDS: usize = 8;
/// Most input requests of one round (the gateway's client link also holds
/// at most 8 requests to the client of one call at once).
const MAX_INPUTS: usize = 8;

/// The rounds of one call so far.
#[derive(Debug)]
pub(crate) struct Rounds {
    taken: usize,
    /// Rounds in a row that asked for nothing (state only): each waits a
    /// little longer before calling again.
    idle: u32,
    /// The call's deadline, which bounds the client's answers too.
    deadline: tokio::time::Instant,
}

impl Rounds {
    /// No round yet, for a call that ends by `deadline`.
    pub(crate) fn new(deadline: tokio::time::Instant) -> Self {
        Rounds {
            taken: 0,
            idle: 0,
            deadline,
        }
    }
}

impl Shared {
    /// Sends `request` and, while the server answers it with
    /// `input_required` (and relays client requests at all), asks the
    /// client of the request for the inputs and sends it again with the
    /// answers and the server's state: all within one call timeout. For a
    /// caller that answers such requests itself (`ctx` has a
    /// [`ClientInput`](toolexec::ClientInput)), the first `input_required`
    /// is the result.
    /// `label` names the request in errors (a tool id, or the method and
    /// server).
    pub(crate) async fn request_answering(
        &self,
        label: &str,
        mut request: ClientRequest,
        ctx: &ToolContext,
    ) -> Result<ServerResult, RequestError> {
        let deadline = tokio::time::Instant::now() + self.call_timeout;
        let mut rounds = Rounds::new(deadline);
        let relayed = if self.relay.any() {
            Relayed::ToCaller
        } else {
            Relayed::No
        };
        let answered_here = relayed != Relayed::No && ctx.client_input().is_none();
        let rounds_of_request = async {
            loop {
                let result = self
                    .request_for(label, request.clone(), ctx, relayed)
                    .await?;
                match result {
                    ServerResult::InputRequiredResult(r)
                        if answered_here && takes_inputs(&request) =>
                    {
                        let (responses, state) = self
                            .answer_inputs(label, r, &mut rounds, ctx)
                            .await
                            .map_err(RequestError::Local)?;
                        with_inputs(&mut request, responses, state);
                    }
                    other => return Ok(other),
                }
            }
        };
        tokio::time::timeout_at(deadline, rounds_of_request)
            .await
            .unwrap_or_else(|_| {
                Err(RequestError::Local(Error::Timeout {
                    tool: label.to_owned(),
                    after: self.call_timeout,
                }))
            })
    }

    /// `result` as a caller that answers input itself gets it: each
    /// request one this server's `relay` setting allows (at most
    /// [`MAX_INPUTS`]), prepared as for a client asked during a call
    /// (no sampling context, the server's name in `_meta`); else why it
    /// cannot be.
    pub(crate) fn returned_inputs(
        &self,
        result: InputRequiredResult,
    ) -> Result<InputRequiredResult, String> {
        let mut value = serde_json::to_value(&result).map_err(|e| e.to_string())?;
        if let Some(Value::Object(requests)) = value.get_mut("inputRequests") {
            if requests.len() > MAX_INPUTS {
                return Err(format!(
                    "the server asked for {} client inputs at once; at most {MAX_INPUTS} are relayed",
                    requests.len()
                ));
            }
            for (key, request) in requests.iter_mut() {
                let method = request
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if !self.relay.allows(&method) {
                    return Err(format!(
                        "the server asked for {method:?} (input {key:?}), which this server is not \
                         configured to relay to clients (its `relay` setting)"
                    ));
                }
                if let Some(params) = request.get_mut("params") {
                    for_client(&method, params, &self.name);
                }
            }
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// Answers one `input_required` result of the call of `tool`: each
    /// input request goes to the client of the call. Returns the answers
    /// and the state to call again with.
    pub(crate) async fn answer_inputs(
        &self,
        tool: &str,
        result: InputRequiredResult,
        rounds: &mut Rounds,
        ctx: &ToolContext,
    ) -> Result<(Option<InputResponses>, Option<String>), Error> {
        let failed = |message: String, data: Option<Value>| Error::ExecutionFailed {
            tool: tool.to_owned(),
            message,
            data,
            panicked: false,
        };
        rounds.taken += 1;
        if rounds.taken > MAX_ROUNDS {
            return Err(failed(
                format!("the server asked for client input more than {MAX_ROUNDS} times"),
                None,
            ));
        }
        let requests = result.input_requests.unwrap_or_default();
        if requests.is_empty() {
            if result.request_state.is_none() {
                return Err(failed(
                    "the server answered input_required with neither requests nor state".to_owned(),
                    None,
                ));
            }
            let pause = Duration::from_millis(50) * 2u32.pow(rounds.idle.min(4));
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = ctx.cancelled() => return Err(Error::Cancelled { tool: tool.to_owned() }),
            }
            rounds.idle += 1;
            return Ok((None, result.request_state));
        }
        if requests.len() > MAX_INPUTS {
            return Err(failed(
                format!(
                    "the server asked for {} client inputs at once; at most {MAX_INPUTS} are relayed",
                    requests.len()
                ),
                None,
            ));
        }
        rounds.idle = 0;
        let asker = Asker {
            server: &self.name,
            relay: self.relay,
            timeout: rounds
                .deadline
                .saturating_duration_since(tokio::time::Instant::now()),
        };
        let ended = CancellationToken::new();
        let _ended = ended.clone().drop_guard();
        let target: Target = toolexec::telemetry::current_caller()
            .and_then(|c| c.link.clone())
            .map(|link| (link, ended.clone()))
            .ok_or_else(|| "the call was not made by a client that can be asked".to_owned());
        let asks = requests.into_iter().map(|(key, request)| {
            let asker = &asker;
            let target = target.clone();
            let cancelled = ended.clone();
            async move {
                let (method, params) = match request {
                    InputRequest::CreateMessage(r) => {
                        ("sampling/createMessage", serde_json::to_value(r.params))
                    }
                    InputRequest::Elicitation(r) => {
                        ("elicitation/create", serde_json::to_value(r.params))
                    }
                    InputRequest::ListRoots(_) => ("roots/list", Ok(json!({}))),
                    other => {
                        return Err(rmcp::ErrorData::invalid_params(
                            format!("an input request toolexec does not know: {other:?}"),
                            None,
                        ));
                    }
                };
                let params = params.map_err(|e| {
                    rmcp::ErrorData::internal_error(format!("encoding {method}: {e}"), None)
                })?;
                let answer = asker.ask(method, params, target, cancelled).await?;
                Ok::<_, rmcp::ErrorData>((key, checked(method, answer)?))
            }
        });
        let answers = tokio::select! {
            answers = futures::future::try_join_all(asks) => answers,
            _ = ctx.cancelled() => return Err(Error::Cancelled { tool: tool.to_owned() }),
        };
        let answers = answers.map_err(|e| {
            failed(
                format!(
                    "the server asked for client input, and the client did not give it: {}",
                    e.message
                ),
                Some(json!({"code": e.code.0, "data": e.data})),
            )
        })?;
        Ok((Some(answers.into_iter().collect()), result.request_state))
    }
}

/// Whether `request` is one a server may answer with `input_required`.
fn takes_inputs(request: &ClientRequest) -> bool {
    matches!(
        request,
        ClientRequest::CallToolRequest(_)
            | ClientRequest::GetPromptRequest(_)
            | ClientRequest::ReadResourceRequest(_)
    )
}

/// `request` again, with the client's answers and the server's state.
fn with_inputs(
    request: &mut ClientRequest,
    responses: Option<InputResponses>,
    state: Option<String>,
) {
    match request {
        ClientRequest::CallToolRequest(r) => {
            r.params.input_responses = responses;
            r.params.request_state = state;
        }
        ClientRequest::GetPromptRequest(r) => {
            r.params.input_responses = responses;
            r.params.request_state = state;
        }
        ClientRequest::ReadResourceRequest(r) => {
            r.params.input_responses = responses;
            r.params.request_state = state;
        }
        _ => {}
    }
}

/// The client's answer to `method`, checked against the result type the
/// method has (as a 2025 server's requests are), before it reaches the
/// server.
fn checked(method: &str, answer: Value) -> Result<Value, rmcp::ErrorData> {
    #[allow(deprecated)] // sampling and roots: deprecated by SEP-2577, current in 2025-11-25.
    let parsed = match method {
        "sampling/createMessage" => {
            serde_json::from_value::<rmcp::model::CreateMessageResult>(answer)
                .and_then(serde_json::to_value)
        }
        "elicitation/create" => serde_json::from_value::<rmcp::model::ElicitResult>(answer)
            .and_then(serde_json::to_value),
        _ => serde_json::from_value::<rmcp::model::ListRootsResult>(answer)
            .and_then(serde_json::to_value),
    };
    parsed.map_err(|e| {
        rmcp::ErrorData::internal_error(
            format!("the client's answer to {method} is malformed: {e}"),
            None,
        )
    })
}

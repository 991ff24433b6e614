//! The `requestState` a 2026-07-28 client gets with an upstream's
//! `input_required`: the server's own state (or none), sealed with an
//! HMAC (rmcp's [`RequestStateCodec`], a key of this gateway process) to
//! the round it belongs to: the caller's principal, the method, the server
//! and the tool, prompt or URI. The client sends it back with its answers;
//! the gateway opens it against the request it comes with, so the answers
//! and the server's state reach only the server that asked, for the same
//! request and caller, within [`STATE_TTL`].

use std::time::Duration;

use rmcp::ErrorData as McpError;
use rmcp::model::{InputRequiredResult, RequestStateCodec, SealOptions};
use serde_json::json;

use super::Passthrough;

/// How long a sealed state can be sent back.
const STATE_TTL: Duration = Duration::from_secs(3600);

/// The sealing key of one gateway process.
pub(crate) struct InputStates {
    /// `None` when the system had no randomness for a key: then no state is
    /// handed out, and no input round is passed to a client.
    codec: Option<RequestStateCodec>,
}

impl InputStates {
    /// A fresh random key.
    pub(crate) fn new() -> Self {
        let mut key = [0u8; 32];
        let codec = getrandom::fill(&mut key)
            .ok()
            .and_then(|()| RequestStateCodec::try_new(key.to_vec()).ok());
        InputStates { codec }
    }
}

/// What an input round belongs to, besides the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Round<'a> {
    /// `tools/call`, `prompts/get` or `resources/read`.
    pub(crate) method: &'a str,
    /// The upstream server's name.
    pub(crate) server: &'a str,
    /// The tool id, the prompt's name on its server, or the URI.
    pub(crate) target: &'a str,
}

impl Round<'_> {
    /// The round and the current caller's principal, unambiguously.
    fn bound(&self) -> Vec<u8> {
        let principal = toolexec::telemetry::current_caller()
            .map(|c| c.principal_key())
            .unwrap_or_default();
        serde_json::to_vec(&[principal.as_str(), self.method, self.server, self.target])
            .unwrap_or_default()
    }
}

impl Passthrough {
    /// `result` as its client gets it: its state sealed to `round`.
    pub(crate) fn seal_inputs(
        &self,
        round: Round<'_>,
        mut result: InputRequiredResult,
    ) -> Result<InputRequiredResult, McpError> {
        let Some(codec) = &self.input_states.codec else {
            return Err(McpError::internal_error(
                format!(
                    "server {} asked for client input, and this gateway has no key to seal \
                     the request's state (no randomness)",
                    round.server
                ),
                Some(json!({"code": "execution_failed", "server": round.server})),
            ));
        };
        let payload = serde_json::to_vec(&result.request_state).unwrap_or_default();
        let bound = round.bound();
        let options = SealOptions::new().associated_data(&bound).ttl(STATE_TTL);
        result.request_state = Some(codec.seal_with(&payload, &options));
        Ok(result)
    }

    /// The server's own state inside `sealed`, a state this gateway sealed
    /// to `round` and the current caller; otherwise an `invalid_params`
    /// error naming `requestState` (one answer for every reason, as the
    /// codec asks).
    pub(crate) fn open_inputs(
        &self,
        round: Round<'_>,
        sealed: &str,
    ) -> Result<Option<String>, McpError> {
        let opened = self
            .input_states
            .codec
            .as_ref()
            .and_then(|codec| codec.open_with(sealed, &round.bound()).ok())
            .and_then(|payload: Vec<u8>| serde_json::from_slice::<Option<String>>(&payload).ok());
        opened.ok_or_else(|| {
            McpError::invalid_params(
                format!(
                    "requestState is not one this gateway gave this caller for this {} of {} \
                     (or it expired): send the request again without it",
                    round.method, round.target
                ),
                Some(json!({"code": "invalid_request", "field": "requestState"})),
            )
        })
    }
}

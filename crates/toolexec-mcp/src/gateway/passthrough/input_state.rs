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

impl InputStates {
    /// `result` as its client gets it: its state sealed to `round`.
    pub(crate) fn seal(
        &self,
        round: Round<'_>,
        mut result: InputRequiredResult,
    ) -> Result<InputRequiredResult, McpError> {
        let Some(codec) = &self.codec else {
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
    pub(crate) fn open(&self, round: Round<'_>, sealed: &str) -> Result<Option<String>, McpError> {
        let opened = self
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use toolexec::telemetry::{Caller, PrincipalKind, with_caller};

    use super::*;

    fn caller(kind: PrincipalKind, principal: Option<&str>) -> Arc<Caller> {
        Arc::new(Caller {
            principal: principal.map(str::to_owned),
            kind,
            ..Caller::default()
        })
    }

    const ROUND: Round<'static> = Round {
        method: "tools/call",
        server: "files",
        target: "files:delete",
    };

    /// A state sealed for one caller and round opens for that caller and
    /// round only: another principal (or the anonymous caller), another
    /// method, server or target, and a state altered by one character are
    /// each refused with the same `invalid_params` naming `requestState`.
    #[tokio::test]
    async fn a_sealed_state_opens_only_for_its_caller_and_round() {
        let states = InputStates::new();
        let alice = caller(PrincipalKind::Subject, Some("alice"));
        let asks = InputRequiredResult::new(None, Some("server-state-7".into()));
        let sealed = with_caller(alice.clone(), async { states.seal(ROUND, asks) })
            .await
            .unwrap()
            .request_state
            .unwrap();
        assert!(!sealed.contains("server-state-7"), "{sealed}");

        let opened = with_caller(alice.clone(), async { states.open(ROUND, &sealed) }).await;
        assert_eq!(opened.unwrap().as_deref(), Some("server-state-7"));

        let refused = |r: Result<Option<String>, McpError>| {
            let e = r.unwrap_err();
            assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS, "{e:?}");
            assert_eq!(e.data.unwrap()["field"], "requestState");
        };
        // Another principal, the same name under another kind, and nobody.
        for other in [
            caller(PrincipalKind::Subject, Some("mallory")),
            caller(PrincipalKind::Token, Some("alice")),
            caller(PrincipalKind::Anonymous, None),
        ] {
            refused(with_caller(other, async { states.open(ROUND, &sealed) }).await);
        }
        refused(states.open(ROUND, &sealed));
        // The same caller, another round.
        for round in [
            Round {
                method: "prompts/get",
                ..ROUND
            },
            Round {
                server: "other",
                ..ROUND
            },
            Round {
                target: "files:read",
                ..ROUND
            },
        ] {
            refused(with_caller(alice.clone(), async { states.open(round, &sealed) }).await);
        }
        // Altered, or sealed by another gateway process.
        let mut altered = sealed.clone().into_bytes();
        let last = altered.len() - 1;
        altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(altered).unwrap();
        refused(with_caller(alice.clone(), async { states.open(ROUND, &altered) }).await);
        let elsewhere = InputStates::new();
        refused(with_caller(alice, async { elsewhere.open(ROUND, &sealed) }).await);
    }
}

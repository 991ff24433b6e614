//! Which request's HTTP response stream a server's log message came on.
//!
//! Over streamable HTTP a server sends what belongs to a request (its
//! progress, its log messages, its requests to the client) on that
//! request's response stream. rmcp marks the server's *requests* with the
//! stream they came on (`InboundStreamOrigin`), not its notifications, so
//! a log message on a call's own stream would read as naming no call, and
//! go through the unassociated rule ([`Links::target`]): dropped whenever
//! calls of several principals are about.
//!
//! The HTTP client ([`SessionAwareClient`]) therefore marks each log
//! message (and `notifications/elicitation/complete`) that arrives on a
//! request's response stream with that request's id, in the
//! notification's `_meta` under [`KEY`], sealed with a random secret of
//! this process. [`InOrder`] takes the mark off before anything else sees
//! the notification and trusts only its own seal: a server that writes the
//! key itself, on any transport, is read as naming no call.
//!
//! [`Links::target`]: super::links::Links::target
//! [`SessionAwareClient`]: super::http_client::SessionAwareClient
//! [`InOrder`]: super::routing::InOrder

use std::sync::OnceLock;

use rmcp::model::{GetMeta, RequestId, ServerNotification};
use serde_json::{Value, json};

/// The `_meta` key of the mark.
const KEY: &str = "io.toolexec/stream";
/// The notifications marked: those relayed to the client of one call.
const MARKED: [&str; 2] = [
    "notifications/message",
    super::routing::ELICITATION_COMPLETE,
];
/// Events longer than this are not read for a mark (a log message that
/// long goes through the unassociated rule), so that a large result is
/// never parsed twice.
const MAX_MARKED: usize = 64 * 1024;

/// This process's seal: 128 random bits, hex; `None` without randomness
/// (then nothing is marked).
fn seal() -> Option<&'static str> {
    static SEAL: OnceLock<Option<String>> = OnceLock::new();
    SEAL.get_or_init(|| {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
    })
    .as_deref()
}

/// Marks `data`, one event of request `id`'s response stream, with `id`
/// when it is a notification that [`MARKED`] names.
pub(crate) fn mark(data: &mut String, id: &RequestId) {
    if data.len() > MAX_MARKED || !data.contains("notifications/") {
        return;
    }
    let Some(seal) = seal() else {
        return;
    };
    let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(data) else {
        return;
    };
    let marked = message.get("id").is_none()
        && message
            .get("method")
            .and_then(Value::as_str)
            .is_some_and(|m| MARKED.contains(&m));
    if !marked {
        return;
    }
    let params = message.entry("params").or_insert_with(|| json!({}));
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    meta.insert(KEY.to_owned(), json!({"request": id, "seal": seal}));
    if let Ok(text) = serde_json::to_string(&message) {
        *data = text;
    }
}

/// Takes the mark off `notification`: the request whose response stream it
/// came on, when this process sealed the mark.
pub(crate) fn take(notification: &mut ServerNotification) -> Option<RequestId> {
    if !notification.get_meta().0.0.contains_key(KEY) {
        return None;
    }
    let mark = notification.get_meta_mut().0.0.remove(KEY)?;
    let seal = seal()?;
    if mark.get("seal").and_then(Value::as_str) != Some(seal) {
        return None;
    }
    serde_json::from_value(mark.get("request")?.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ServerJsonRpcMessage};

    fn marked(data: &str, id: i64) -> String {
        let mut data = data.to_owned();
        mark(&mut data, &NumberOrString::Number(id));
        data
    }

    /// The request the notification `data` names, once its mark is taken
    /// off (checked gone).
    fn origin_of(data: &str) -> Option<RequestId> {
        let message: ServerJsonRpcMessage = serde_json::from_str(data).unwrap();
        let ServerJsonRpcMessage::Notification(mut n) = message else {
            panic!("not a notification: {data}");
        };
        let origin = take(&mut n.notification);
        assert!(!n.notification.get_meta().0.0.contains_key(KEY), "{data}");
        origin
    }

    /// A log message on request 7's stream reads back as request 7's, and
    /// its mark is gone once taken; other messages are left as they were.
    #[test]
    fn log_messages_are_marked_with_their_request() {
        let log = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}"#;
        assert_eq!(origin_of(&marked(log, 7)), Some(NumberOrString::Number(7)));
        assert_eq!(origin_of(log), None);

        for other in [
            r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"notifications/message"}]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"notifications/message","params":{}}"#,
            "not json, notifications/message",
        ] {
            assert_eq!(marked(other, 7), other);
        }
    }

    /// A mark the server wrote itself (no seal, or another one) names no
    /// request, and is taken off all the same.
    #[test]
    fn a_servers_own_mark_names_nothing() {
        for forged in [
            json!({"request": 3}),
            json!({"request": 3, "seal": "0123456789abcdef0123456789abcdef"}),
        ] {
            let data = json!({
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": "hi", "_meta": {KEY: forged}},
            })
            .to_string();
            assert_eq!(origin_of(&data), None, "{data}");
        }
    }
}

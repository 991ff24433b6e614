//! Which client a server's request or log message is meant for: the
//! `tools/call` requests in flight on one upstream, each recorded with the
//! client it was made for ([`Caller::link`]) as the transport sends it.
//!
//! Over streamable HTTP a server sends a request or log message on the
//! response stream of the call it belongs to, which names the call (rmcp
//! marks requests; [`origin`](super::origin) log messages). Otherwise
//! (stdio, the standalone HTTP stream, the HTTP+SSE transport) nothing
//! does, and one upstream session serves every client of the gateway. Such a message goes to the calls in flight only when every call
//! in flight on that server, and every call that ended there in the last
//! [`Links::recent`] window, was made for one principal: a server working
//! late on one client's call must never reach another client, and when
//! calls of several principals are about, nothing is relayed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rmcp::model::RequestId;
use rmcp::service::InboundStreamOrigin;
use tokio_util::sync::CancellationToken;
use toolexec::ClientLink;
use toolexec::telemetry::Caller;

/// Calls that ended, remembered for the unassociated rule; older ones are
/// forgotten first.
const MAX_RECENT: usize = 1024;

/// The client a request is made for, recorded by the transport as it sends
/// the request ([`WatchProgress`](super::routing::WatchProgress)).
#[derive(Clone, Debug)]
pub(crate) struct ForClient {
    pub(crate) caller: Arc<Caller>,
    /// Cancelled when the request ends, perhaps before it was sent.
    pub(crate) ended: CancellationToken,
    /// Tells this registration from a later one with the same request id
    /// (ids start over on a new session).
    pub(crate) serial: u64,
    /// The request is held across its client's rounds
    /// ([`held`](super::held)): it stays in flight while its client thinks.
    pub(crate) held: bool,
}

impl ForClient {
    /// A registration for `caller`, ended by `ended`.
    pub(crate) fn new(caller: Arc<Caller>, ended: CancellationToken, held: bool) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        ForClient {
            caller,
            ended,
            serial: NEXT.fetch_add(1, Ordering::Relaxed),
            held,
        }
    }
}

/// Whether a server's requests during one of toolexec's requests may be
/// relayed to the client it is made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Relayed {
    /// Not relayed.
    No,
    /// To the current caller's client.
    ToCaller,
    /// To the current caller's client, the request being held across its
    /// rounds ([`held`](super::held)).
    ToHeld,
}

/// Where a server's request is relayed: the client and the token that ends
/// the relay with the call, or why it is not relayed.
pub(crate) type Target = Result<(ClientLink, CancellationToken), String>;

/// A request in flight made for a client that can be asked back.
#[derive(Debug)]
struct Linked {
    link: ClientLink,
    principal: String,
    ended: CancellationToken,
    serial: u64,
    held: bool,
}

/// The calls in flight on one upstream, and the principals of those that
/// ended lately.
#[derive(Debug)]
pub(crate) struct Links {
    linked: Mutex<HashMap<RequestId, Linked>>,
    recent: Mutex<VecDeque<(Instant, String)>>,
    /// How long an ended call keeps its principal in the unassociated rule.
    recent_window: Duration,
}

impl Links {
    /// Remembers ended calls for `recent` (the server's call timeout: how
    /// long a server may legitimately still work on a call toolexec gave
    /// up on).
    pub(crate) fn new(recent_window: Duration) -> Self {
        Links {
            linked: Mutex::default(),
            recent: Mutex::default(),
            recent_window,
        }
    }

    /// Records the request `id`, sent for `client` (none: made for no
    /// client that can be asked back; or one that already ended). An entry
    /// already under `id` is an earlier session's (request ids start over
    /// on a new session), so it goes, whatever is recorded: a message on
    /// this request's stream must never reach that call's client.
    pub(crate) fn sent(&self, id: RequestId, client: Option<&ForClient>) {
        let mut linked = self.linked.lock();
        if let Some(stale) = linked.remove(&id) {
            stale.ended.cancel();
            self.remember(stale.principal);
        }
        let Some(client) = client else {
            return;
        };
        let Some(link) = &client.caller.link else {
            return;
        };
        if client.ended.is_cancelled() {
            return;
        }
        linked.insert(
            id,
            Linked {
                link: link.clone(),
                principal: client.caller.principal_key(),
                ended: client.ended.clone(),
                serial: client.serial,
                held: client.held,
            },
        );
    }

    /// Forgets the request `id` of registration `serial`: what was relayed
    /// to its client for it is abandoned; its principal stays in the
    /// unassociated rule for the recent window.
    pub(crate) fn ended(&self, id: &RequestId, serial: u64) {
        let mut linked = self.linked.lock();
        if linked.get(id).is_some_and(|l| l.serial == serial)
            && let Some(l) = linked.remove(id)
        {
            l.ended.cancel();
            self.remember(l.principal);
        }
        // Entries the transport recorded after their request ended.
        let stale: Vec<RequestId> = linked
            .iter()
            .filter(|(_, l)| l.ended.is_cancelled())
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some(l) = linked.remove(&id) {
                self.remember(l.principal);
            }
        }
    }

    fn remember(&self, principal: String) {
        let mut recent = self.recent.lock();
        if recent.len() >= MAX_RECENT {
            recent.pop_front();
        }
        recent.push_back((Instant::now(), principal));
    }

    /// The client a server's request (or log message) that arrived on
    /// `origin` (the HTTP stream that carried it, if known) is meant for.
    pub(crate) fn target(&self, origin: Option<&InboundStreamOrigin>) -> Target {
        let mut linked = self.linked.lock();
        let stale: Vec<RequestId> = linked
            .iter()
            .filter(|(_, l)| l.ended.is_cancelled())
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            if let Some(l) = linked.remove(&id) {
                self.remember(l.principal);
            }
        }
        if let Some(InboundStreamOrigin::OutboundRequest(id)) = origin {
            return linked
                .get(id)
                .map(|l| (l.link.clone(), l.ended.clone()))
                .ok_or_else(|| {
                    "it belongs to a request that is not a call toolexec can ask a client \
                     about"
                        .to_owned()
                });
        }
        // Nothing says which call it belongs to.
        let mut principals: HashSet<&str> = linked.values().map(|l| l.principal.as_str()).collect();
        let mut recent = self.recent.lock();
        while recent
            .front()
            .is_some_and(|(at, _)| at.elapsed() > self.recent_window)
        {
            recent.pop_front();
        }
        principals.extend(recent.iter().map(|(_, p)| p.as_str()));
        if principals.len() > 1 {
            return Err(
                "calls made for other clients are in flight on this server (or ended \
                 moments ago), and its transport does not say which call the request \
                 belongs to"
                    .to_owned(),
            );
        }
        // A held request waits for its client's next round, perhaps for
        // minutes: the oldest call is no longer a safe guess.
        if linked.len() > 1 && linked.values().any(|l| l.held) {
            return Err(
                "several calls are in flight on this server, one of them waiting for its \
                 client's answers, and its transport does not say which call the request \
                 belongs to"
                    .to_owned(),
            );
        }
        linked
            .values()
            .min_by_key(|l| l.serial)
            .map(|l| (l.link.clone(), l.ended.clone()))
            .ok_or_else(|| {
                "no call made for a client is in flight on this server; toolexec relays \
                 requests to a client only during one of its calls"
                    .to_owned()
            })
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;
    use serde_json::Value;
    use toolexec::telemetry::PrincipalKind;
    use toolexec::{BoxFuture, ClientError, ClientRequests};

    use super::*;

    /// A client link that answers nothing: these tests look at routing only.
    #[derive(Debug)]
    struct Named(#[allow(dead_code)] &'static str); // read through `Debug`

    impl ClientRequests for Named {
        fn supports(&self, _: &str, _: &Value) -> bool {
            true
        }
        fn request(&self, _: &str, _: Value) -> BoxFuture<'static, Result<Value, ClientError>> {
            Box::pin(async { Err(ClientError::Failed("unused".into())) })
        }
        fn notify(&self, _: &str, _: Value) {}
    }

    fn name(target: Target) -> String {
        format!("{:?}", target.unwrap().0.0)
    }

    /// Request `id` sent for `client` of `principal`, as the transport
    /// records it.
    fn sent(links: &Links, id: i64, client: &'static str, principal: &str) -> ForClient {
        sent_as(links, id, client, principal, false)
    }

    fn sent_as(
        links: &Links,
        id: i64,
        client: &'static str,
        principal: &str,
        held: bool,
    ) -> ForClient {
        let caller = Arc::new(Caller {
            principal: Some(principal.to_owned()),
            kind: PrincipalKind::Token,
            link: Some(ClientLink(Arc::new(Named(client)))),
            ..Caller::default()
        });
        let registration = ForClient::new(caller, CancellationToken::new(), held);
        links.sent(NumberOrString::Number(id), Some(&registration));
        registration
    }

    fn id(n: i64) -> RequestId {
        NumberOrString::Number(n)
    }

    #[test]
    fn requests_go_to_the_client_of_their_call_and_never_to_a_guess() {
        let links = Links::new(Duration::from_secs(60));
        let no_call = links.target(None).unwrap_err();
        assert!(no_call.contains("no call"), "{no_call}");

        // One principal in flight (two calls): no association needed; the
        // oldest call is asked.
        let a1 = sent(&links, 1, "a1", "alice");
        let _a2 = sent(&links, 2, "a2", "alice");
        assert_eq!(name(links.target(None)), "Named(\"a1\")");

        // Two principals: without association, refused; with it, exact.
        let b = sent(&links, 3, "b", "bob");
        let refused = links
            .target(Some(&InboundStreamOrigin::Unassociated))
            .unwrap_err();
        assert!(refused.contains("other clients"), "{refused}");
        let origin = InboundStreamOrigin::OutboundRequest(id(3));
        let (link, ended) = links.target(Some(&origin)).unwrap();
        assert_eq!(format!("{:?}", link.0), "Named(\"b\")");
        let unknown = InboundStreamOrigin::OutboundRequest(id(9));
        assert!(links.target(Some(&unknown)).is_err());

        // Bob's call ends: it is abandoned, and while it is recent Alice's
        // calls still get nothing unassociated (a late message may be Bob's).
        links.ended(&id(3), b.serial);
        assert!(ended.is_cancelled());
        assert!(links.target(Some(&origin)).is_err());
        assert!(
            links
                .target(None)
                .unwrap_err()
                .contains("ended moments ago")
        );

        // An ended registration never removes a later one with the same id.
        a1.ended.cancel();
        let later = sent(&links, 1, "a3", "alice");
        links.ended(&id(1), a1.serial);
        assert!(!later.ended.is_cancelled());
    }

    /// A held call alone is asked; beside another call of the same
    /// principal, an unassociated request is refused rather than guessed.
    #[test]
    fn a_held_call_is_asked_only_when_alone() {
        let links = Links::new(Duration::from_secs(60));
        let held = sent_as(&links, 1, "held", "alice", true);
        assert_eq!(name(links.target(None)), "Named(\"held\")");
        let _other = sent(&links, 2, "other", "alice");
        let refused = links.target(None).unwrap_err();
        assert!(
            refused.contains("waiting for its client's answers"),
            "{refused}"
        );
        // Named by its stream, each is still reached.
        let origin = InboundStreamOrigin::OutboundRequest(id(2));
        assert_eq!(
            format!("{:?}", links.target(Some(&origin)).unwrap().0.0),
            "Named(\"other\")"
        );
        links.ended(&id(1), held.serial);
        assert_eq!(name(links.target(None)), "Named(\"other\")");
    }

    /// A request sent under the id of a call still recorded (ids start
    /// over on a new session) replaces it, even one made for no client:
    /// what comes on its stream never reaches the old call's client, whose
    /// principal stays in the unassociated rule for the window.
    #[test]
    fn a_reused_id_replaces_an_earlier_sessions_call() {
        let links = Links::new(Duration::from_secs(60));
        let old = sent(&links, 3, "old", "alice");
        links.sent(id(3), None);
        let origin = InboundStreamOrigin::OutboundRequest(id(3));
        assert!(links.target(Some(&origin)).is_err());
        assert!(old.ended.is_cancelled());
        let _b = sent(&links, 4, "b", "bob");
        assert!(links.target(None).is_err());

        let _new = sent(&links, 3, "new", "carol");
        assert_eq!(
            format!("{:?}", links.target(Some(&origin)).unwrap().0.0),
            "Named(\"new\")"
        );
    }

    #[test]
    fn a_recent_call_is_forgotten_after_the_window() {
        let links = Links::new(Duration::from_millis(20));
        let b = sent(&links, 1, "b", "bob");
        links.ended(&id(1), b.serial);
        let _a = sent(&links, 2, "a", "alice");
        assert!(links.target(None).is_err());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(name(links.target(None)), "Named(\"a\")");
    }
}

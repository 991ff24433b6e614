//! OAuth 2.1 sign-in to upstream HTTP servers, on rmcp's authorization
//! client: discovery from the server's `401` (RFC 9728 protected resource
//! metadata, then RFC 8414 or OpenID Connect discovery), dynamic client
//! registration (RFC 7591), Client ID Metadata Documents, pre-registered
//! clients, PKCE, refresh before expiry and after a `401`.
//!
//! Three grants ([`Grant`]):
//! - **Authorization code** for a person's account: [`login`] runs the
//!   flow once (the user opens a URL, the authorization server redirects to
//!   a loopback listener) and stores the tokens; sessions then use and
//!   refresh them. A server that needs a sign-in nobody did, or whose
//!   refresh token was revoked, fails its connection with
//!   `backend_unavailable` saying to run `toolexec auth login NAME`.
//! - **Client credentials** for a machine account: the token is fetched
//!   when a session opens and again before it expires, and a `403
//!   insufficient_scope` fetches one with the scopes the server named
//!   (step-up), once per new scope set. The client authenticates with its
//!   secret, or with `private_key_jwt` (RFC 7523) signed by its own key.
//! - **Enterprise-managed** (SEP-990): the user's ID token from the
//!   enterprise identity provider ([`EnterpriseIdp`]) is exchanged for an
//!   ID-JAG, which the server's authorization server redeems; no browser.
//!
//! Separately, [`TokenExchange`] (RFC 8693) makes each call carry a token
//! exchanged for the calling user's own.
//!
//! Tokens live in a file per server ([`UpstreamOAuth::token_file`]) that
//! only its owner may read, bound to the server's URL; they never appear in
//! logs, errors or `Debug` output.

mod assertion;
mod authorizer;
mod enterprise;
mod exchange;
mod http;
mod login;
mod settings;
mod store;
mod transport;

use rmcp::transport::auth::AuthError;

pub use self::enterprise::EnterpriseIdp;
pub use self::exchange::TokenExchange;
pub use self::login::{LoginOptions, LoginReport, TokenStatus, login, logout, status};
pub use self::settings::{Grant, UpstreamOAuth};

pub(crate) use self::authorizer::Authorizer;
pub(crate) use self::exchange::Exchanger;
pub(crate) use self::transport::SignedIn;

/// Longest error text kept from an authorization server's answer.
const MAX_DETAIL: usize = 300;

/// Text from a remote server made safe to print: control characters
/// dropped, at most [`MAX_DETAIL`] characters.
pub(crate) fn printable(text: &str) -> String {
    let mut out: String = text
        .chars()
        .filter(|c| !c.is_control())
        .take(MAX_DETAIL)
        .collect();
    if text
        .chars()
        .filter(|c| !c.is_control())
        .nth(MAX_DETAIL)
        .is_some()
    {
        out.push_str("...");
    }
    out
}

/// An rmcp error as one printable line without secrets (rmcp's messages
/// carry no token values, but may quote the authorization server).
fn describe(e: &AuthError) -> String {
    printable(&crate::upstream::session::error_chain(e))
}

#[cfg(test)]
mod tests {
    use super::settings::is_scope_token;
    use super::*;

    #[test]
    fn remote_text_is_made_printable() {
        assert!(is_scope_token("mcp:read") && is_scope_token("a/b!"));
        for bad in ["", "a b", "a\"b", "a\\b", "$(x)\n"] {
            assert!(!is_scope_token(bad), "{bad:?}");
        }
        assert_eq!(printable("ok\u{1b}[31m\n"), "ok[31m");
        let long = "x".repeat(1000);
        assert_eq!(printable(&long).len(), MAX_DETAIL + 3);
    }
}

//! Who an HTTP request is from: [`HttpAuth`] (one shared bearer token,
//! named tokens, OAuth access tokens, or none) and the [`Caller`] a
//! request's `Authorization` header proves. The HTTP layer
//! ([`super::bind_http`]) puts that caller in the request, for the policy,
//! the quotas and the audit log.

use axum::http::HeaderValue;
use toolexec::telemetry::{Caller, PrincipalKind};
use toolexec::{Error, Secret};

#[cfg(feature = "oauth")]
use super::oauth::OAuthOptions;

/// How HTTP clients authenticate.
#[derive(Debug, Clone)]
pub enum HttpAuth {
    /// Every request must carry `Authorization: Bearer <token>`; others get
    /// `401` with `WWW-Authenticate: Bearer`. Compared in constant time.
    /// Callers are the token named [`BEARER_TOKEN_NAME`].
    Bearer(Secret),
    /// Like [`HttpAuth::Bearer`] with several tokens, each with a name:
    /// the name of the token a request carries is its caller's principal
    /// ([`PrincipalKind::Token`]), which policies and quotas match.
    Tokens(Vec<NamedToken>),
    /// OAuth 2.1 access tokens (JWTs) of an authorization server: the
    /// caller is the token's subject ([`PrincipalKind::Subject`]) with its
    /// scopes and claims (feature `oauth`; see [`OAuthOptions`]).
    #[cfg(feature = "oauth")]
    OAuth(OAuthOptions),
    /// No authentication (local experiments only; `toolexec serve` refuses
    /// it on a non-loopback address unless told twice).
    InsecureNoAuth,
}

/// The principal of requests that carry [`HttpAuth::Bearer`]'s token.
pub const BEARER_TOKEN_NAME: &str = "bearer_token";

/// One of [`HttpAuth::Tokens`].
#[derive(Debug, Clone)]
pub struct NamedToken {
    /// The caller's name (`ci`, `alice`): what policies call the token.
    pub name: String,
    /// The token.
    pub token: Secret,
}

impl HttpAuth {
    /// `invalid_request` for an empty token, or token names that are
    /// empty or repeated (at `auth.tokens[i].name`).
    pub fn check(&self) -> Result<(), Error> {
        match self {
            HttpAuth::Bearer(token) if token.is_empty() => {
                Err(Error::invalid_request("auth", "the bearer token is empty"))
            }
            HttpAuth::Tokens(tokens) => {
                if tokens.is_empty() {
                    return Err(Error::invalid_request("auth.tokens", "no tokens"));
                }
                for (i, t) in tokens.iter().enumerate() {
                    if t.name.trim().is_empty() || t.name.contains(['*', '?']) {
                        return Err(Error::invalid_request(
                            format!("auth.tokens[{i}].name"),
                            "must not be empty, nor hold * or ? (policies read those as globs)",
                        ));
                    }
                    if t.token.is_empty() {
                        return Err(Error::invalid_request(
                            format!("auth.tokens[{i}].token"),
                            "the token is empty",
                        ));
                    }
                    if let Some(j) = tokens[..i].iter().position(|o| o.name == t.name) {
                        return Err(Error::invalid_request(
                            format!("auth.tokens[{i}].name"),
                            format!("{:?} is also the name of tokens[{j}]", t.name),
                        ));
                    }
                    if tokens[..i]
                        .iter()
                        .any(|o| o.token.constant_time_eq(t.token.expose()))
                    {
                        return Err(Error::invalid_request(
                            format!("auth.tokens[{i}].token"),
                            "two tokens are the same: a caller could not be told apart",
                        ));
                    }
                }
                Ok(())
            }
            #[cfg(feature = "oauth")]
            HttpAuth::OAuth(o) => o.check(),
            _ => Ok(()),
        }
    }

    /// The caller a request's `Authorization` header proves, or `None`
    /// when it proves none.
    pub(super) fn authenticate(&self, value: Option<&HeaderValue>) -> Option<Caller> {
        let presented = || bearer(value);
        let token = |name: &str| Caller {
            principal: Some(name.to_owned()),
            kind: PrincipalKind::Token,
            ..Caller::default()
        };
        match self {
            // Checked by `check_request` with the issuer's keys.
            #[cfg(feature = "oauth")]
            HttpAuth::OAuth(_) => None,
            HttpAuth::InsecureNoAuth => Some(Caller {
                principal: Some("anonymous".into()),
                ..Caller::default()
            }),
            HttpAuth::Bearer(secret) => {
                let t = presented()?;
                secret.constant_time_eq(t).then(|| token(BEARER_TOKEN_NAME))
            }
            HttpAuth::Tokens(tokens) => {
                let t = presented()?;
                // Every token is compared (in constant time), so the time
                // taken does not say which one nearly matched.
                let mut found = None;
                for named in tokens {
                    if named.token.constant_time_eq(t) && found.is_none() {
                        found = Some(named.name.as_str());
                    }
                }
                found.map(token)
            }
        }
    }
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in
/// any case, RFC 7235).
pub(super) fn bearer(value: Option<&HeaderValue>) -> Option<&str> {
    let v = value.and_then(|v| v.to_str().ok())?;
    match v.trim().split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => Some(t.trim()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(auth: &HttpAuth, header: Option<&str>) -> Option<(String, PrincipalKind)> {
        let h = header.map(|s| HeaderValue::from_str(s).unwrap());
        auth.authenticate(h.as_ref())
            .map(|c| (c.principal.unwrap_or_default(), c.kind))
    }

    #[test]
    fn bearer_tokens() {
        let g = HttpAuth::Bearer(Secret::new("t0k"));
        let ok = Some((BEARER_TOKEN_NAME.to_owned(), PrincipalKind::Token));
        assert_eq!(principal(&g, Some("Bearer t0k")), ok);
        assert_eq!(principal(&g, Some("bearer t0k")), ok);
        for bad in [Some("Bearer t0k2"), Some("Basic t0k"), Some("t0k"), None] {
            assert_eq!(principal(&g, bad), None, "{bad:?}");
        }
        let open = HttpAuth::InsecureNoAuth;
        let anonymous = Some(("anonymous".to_owned(), PrincipalKind::Anonymous));
        assert_eq!(principal(&open, None), anonymous);
    }

    #[test]
    fn named_tokens_name_their_callers() {
        let named = |name: &str, token: &str| NamedToken {
            name: name.into(),
            token: Secret::new(token),
        };
        let g = HttpAuth::Tokens(vec![named("ci", "ci-secret"), named("alice", "a-secret")]);
        let token = |n: &str| Some((n.to_owned(), PrincipalKind::Token));
        assert_eq!(principal(&g, Some("Bearer ci-secret")), token("ci"));
        assert_eq!(principal(&g, Some("Bearer a-secret")), token("alice"));
        assert_eq!(principal(&g, Some("Bearer a-secre")), None);
        assert_eq!(principal(&g, None), None);

        let field =
            |auth: HttpAuth| auth.check().unwrap_err().to_body().details.unwrap()["field"].clone();
        assert_eq!(field(HttpAuth::Tokens(vec![])), "auth.tokens");
        assert_eq!(
            field(HttpAuth::Tokens(vec![named("a", "x"), named("a", "y")])),
            "auth.tokens[1].name"
        );
        assert_eq!(
            field(HttpAuth::Tokens(vec![named("a", "x"), named("b", "x")])),
            "auth.tokens[1].token"
        );
        assert_eq!(
            field(HttpAuth::Tokens(vec![named(" ", "x")])),
            "auth.tokens[0].name"
        );
        assert_eq!(
            field(HttpAuth::Tokens(vec![named("a*", "x")])),
            "auth.tokens[0].name"
        );
        assert_eq!(
            field(HttpAuth::Tokens(vec![named("a", "")])),
            "auth.tokens[0].token"
        );
    }
}

//! The issuer's signing keys: its JSON Web Key Set, found through its
//! metadata (RFC 8414, then OpenID Connect discovery) unless configured,
//! fetched once, refreshed when older than a bound, and fetched again (at
//! most once per interval) when a token names a key the set lacks, so a
//! key rotation needs no restart and unknown key ids cannot make the
//! gateway hammer the issuer.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{Jwk, JwkSet};
use parking_lot::RwLock;
use serde::Deserialize;
use tokio::sync::Mutex;
use toolexec::Error;
use toolexec_http::tls::{error_chain, next_link};

/// Most bytes read from a metadata document or key set.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// Time allowed for one metadata or key-set request.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The backend name in `backend_unavailable` errors about the issuer.
pub(super) const BACKEND: &str = "oauth";

/// The cached key set of one issuer.
pub(super) struct Jwks {
    client: reqwest::Client,
    issuer: String,
    /// Configured, or learned from the issuer's metadata on first use.
    uri: RwLock<Option<String>>,
    keys: RwLock<Option<Fetched>>,
    /// When a fetch was last started.
    attempted: RwLock<Option<Instant>>,
    /// One fetch at a time; waiters then read what it fetched.
    fetching: Mutex<()>,
    max_age: Duration,
    min_interval: Duration,
}

struct Fetched {
    set: Arc<JwkSet>,
    at: Instant,
}

/// Why no key could be found for a token.
pub(super) enum KeyError {
    /// The set (fresh) has no key with that id.
    Unknown,
    /// The key set cannot be fetched.
    Unavailable(Error),
}

impl Jwks {
    pub(super) fn new(
        client: reqwest::Client,
        issuer: String,
        uri: Option<String>,
        max_age: Duration,
        min_interval: Duration,
    ) -> Self {
        Jwks {
            client,
            issuer,
            uri: RwLock::new(uri),
            keys: RwLock::new(None),
            attempted: RwLock::new(None),
            fetching: Mutex::new(()),
            max_age,
            min_interval,
        }
    }

    /// The key `kid` (any key when the token names none and the set has
    /// exactly one), fetching or refreshing the set as needed: when it is
    /// older than `max_age`, or lacks `kid`, and the last attempt is at
    /// least `min_interval` old.
    pub(super) async fn key(&self, kid: Option<&str>) -> Result<Jwk, KeyError> {
        let now = Instant::now();
        let cached = self.keys.read().as_ref().map(|f| (f.set.clone(), f.at));
        let attempted = *self.attempted.read();
        let may_fetch = attempted.is_none_or(|t| now.duration_since(t) >= self.min_interval);
        if let Some((set, at)) = &cached {
            let fresh = now.duration_since(*at) < self.max_age;
            if fresh || !may_fetch {
                if let Some(key) = pick(set, kid) {
                    return Ok(key);
                }
                if !may_fetch {
                    return Err(KeyError::Unknown);
                }
            }
        } else if !may_fetch {
            return Err(KeyError::Unavailable(unavailable(format!(
                "the issuer's keys could not be fetched; the next attempt is at most {:?} away",
                self.min_interval
            ))));
        }
        let set = self.refresh(attempted).await?;
        pick(&set, kid).ok_or(KeyError::Unknown)
    }

    /// Fetches the set, unless another task attempted it since `seen`.
    async fn refresh(&self, seen: Option<Instant>) -> Result<Arc<JwkSet>, KeyError> {
        let _one = self.fetching.lock().await;
        if *self.attempted.read() != seen {
            return match self.keys.read().as_ref() {
                Some(f) => Ok(f.set.clone()),
                None => Err(KeyError::Unavailable(unavailable(
                    "the issuer's keys could not be fetched".into(),
                ))),
            };
        }
        *self.attempted.write() = Some(Instant::now());
        match self.fetch().await {
            Ok(set) => {
                let set = Arc::new(set);
                *self.keys.write() = Some(Fetched {
                    set: set.clone(),
                    at: Instant::now(),
                });
                Ok(set)
            }
            Err(e) => {
                // Keys fetched before stay usable while the issuer is down.
                match self.keys.read().as_ref() {
                    Some(f) => {
                        tracing::warn!(target: "toolexec::oauth", error = %e, "cannot refresh the issuer's keys; using the last set");
                        Ok(f.set.clone())
                    }
                    None => Err(KeyError::Unavailable(e)),
                }
            }
        }
    }

    /// Fetches the set now: at start, so a wrong issuer is reported at once.
    pub(super) async fn prime(&self) -> Result<usize, Error> {
        let seen = *self.attempted.read();
        match self.refresh(seen).await {
            Ok(set) => Ok(set.keys.len()),
            Err(KeyError::Unavailable(e)) => Err(e),
            Err(KeyError::Unknown) => Ok(0),
        }
    }

    async fn fetch(&self) -> Result<JwkSet, Error> {
        let configured = self.uri.read().clone();
        let uri = match configured {
            Some(uri) => uri,
            None => {
                let uri = self.discover().await?;
                *self.uri.write() = Some(uri.clone());
                uri
            }
        };
        let set: JwkSet = self.get_json(&uri).await?;
        tracing::debug!(target: "toolexec::oauth", %uri, keys = set.keys.len(), "fetched the issuer's keys");
        Ok(set)
    }

    /// `jwks_uri` from the issuer's metadata: RFC 8414's
    /// `/.well-known/oauth-authorization-server`, then OpenID Connect's
    /// `/.well-known/openid-configuration`. The metadata must name the
    /// configured issuer (RFC 8414, section 3.3).
    async fn discover(&self) -> Result<String, Error> {
        #[derive(Deserialize)]
        struct Metadata {
            issuer: String,
            jwks_uri: Option<String>,
        }
        let mut last = None;
        for url in metadata_urls(&self.issuer) {
            match self.get_json::<Metadata>(&url).await {
                Ok(m) if m.issuer != self.issuer => {
                    return Err(unavailable(format!(
                        "{url} names issuer {:?}, not the configured {:?}",
                        m.issuer, self.issuer
                    )));
                }
                Ok(Metadata {
                    jwks_uri: Some(uri),
                    ..
                }) => return Ok(uri),
                Ok(_) => last = Some(unavailable(format!("{url} has no jwks_uri"))),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| unavailable("no metadata URL".into())))
    }

    async fn get_json<T: serde::de::DeserializeOwned>(&self, url: &str) -> Result<T, Error> {
        let response = tokio::time::timeout(FETCH_TIMEOUT, self.client.get(url).send())
            .await
            .map_err(|_| unavailable(format!("{url}: no answer within {FETCH_TIMEOUT:?}")))?
            .map_err(|e| unavailable(format!("{url}: {}", error_chain(&e, next_link))))?;
        let status = response.status();
        if !status.is_success() {
            return Err(unavailable(format!("{url}: HTTP {status}")));
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = tokio::time::timeout(FETCH_TIMEOUT, response.chunk())
            .await
            .map_err(|_| unavailable(format!("{url}: body not read within {FETCH_TIMEOUT:?}")))?
            .map_err(|e| unavailable(format!("{url}: {e}")))?
        {
            if body.len() + chunk.len() > MAX_DOCUMENT_BYTES {
                return Err(unavailable(format!(
                    "{url}: larger than {MAX_DOCUMENT_BYTES} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        serde_json::from_slice(&body).map_err(|e| unavailable(format!("{url}: {e}")))
    }
}

/// The key named `kid`; without a `kid`, the set's only key.
fn pick(set: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => set.find(kid).cloned(),
        None if set.keys.len() == 1 => set.keys.first().cloned(),
        None => None,
    }
}

/// Where an issuer's metadata lives: the well-known name goes between the
/// host and the issuer's path (RFC 8414, section 3.1), and OpenID
/// Connect's after it.
pub(super) fn metadata_urls(issuer: &str) -> Vec<String> {
    let issuer = issuer.trim_end_matches('/');
    let (origin, path) = match issuer.find("://").map(|i| i + 3) {
        Some(start) => match issuer[start..].find('/') {
            Some(slash) => issuer.split_at(start + slash),
            None => (issuer, ""),
        },
        None => (issuer, ""),
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{issuer}/.well-known/openid-configuration"),
    ]
}

fn unavailable(message: String) -> Error {
    Error::backend_unavailable(BACKEND, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_urls_follow_rfc_8414() {
        assert_eq!(
            metadata_urls("https://as.example.com"),
            [
                "https://as.example.com/.well-known/oauth-authorization-server",
                "https://as.example.com/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            metadata_urls("https://as.example.com/tenant/1/"),
            [
                "https://as.example.com/.well-known/oauth-authorization-server/tenant/1",
                "https://as.example.com/tenant/1/.well-known/openid-configuration"
            ]
        );
    }
}

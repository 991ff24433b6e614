//! The HTTP client of every OAuth request made for one upstream server
//! (discovery, registration, token requests), as rmcp's
//! [`OAuthHttpClient`]: the server's own TLS configuration, a deadline,
//! bounded bodies, and an address policy.
//!
//! The URLs it fetches come from metadata the upstream server and its
//! authorization server publish, so a hostile server could point them at
//! the gateway's own network. Names are resolved here and each address is
//! checked: link-local (cloud metadata services), unspecified and multicast
//! addresses are always refused; loopback addresses only when the server's
//! own URL is on loopback, private ones only when it is loopback or private.
//! Plain `http://` is refused except on loopback, so client secrets and
//! tokens never cross a network in clear.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use rmcp::transport::auth::{
    OAuthHttpClient, OAuthHttpClientError, OAuthHttpClientFuture, OAuthHttpRedirectPolicy,
    OAuthHttpRequest,
};
use toolexec_http::body::read_capped;
use url::Url;

/// Deadline of one OAuth request.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read.
const MAX_BODY: usize = 1 << 20;
/// Most redirects followed where following is allowed.
const MAX_REDIRECTS: usize = 5;

/// How far from the public internet an address is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    Public,
    Private,
    Loopback,
    /// Link-local, unspecified, multicast, broadcast: never contacted.
    Never,
}

fn reach(ip: IpAddr) -> Reach {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Reach::Loopback
            } else if v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || a == 0
                || a >= 240
            {
                Reach::Never
            } else if v4.is_private()
                || a == 100 && (b & 0xc0) == 64
                || a == 198 && (b & 0xfe) == 18
            {
                Reach::Private
            } else {
                Reach::Public
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = embedded_ipv4(v6) {
                return reach(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Reach::Loopback
            } else if v6.is_unspecified() || v6.is_multicast() || (first & 0xffc0) == 0xfe80 {
                Reach::Never
            } else if (first & 0xfe00) == 0xfc00 {
                Reach::Private
            } else {
                Reach::Public
            }
        }
    }
}

/// The IPv4 address an IPv6 address stands for: mapped (`::ffff:a.b.c.d`),
/// compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`), or 6to4 (`2002::/16`).
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| {
        std::net::Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8)
    };
    if let Some(mapped) = v6.to_ipv4_mapped() {
        Some(mapped)
    } else if (s[..6] == [0; 6] && !v6.is_loopback() && !v6.is_unspecified())
        || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
    {
        Some(v4(s[6], s[7]))
    } else if s[0] == 0x2002 {
        Some(v4(s[1], s[2]))
    } else {
        None
    }
}

/// What the server's own URL allows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AddressPolicy {
    /// The farthest-from-public class allowed.
    widest: Reach,
}

impl AddressPolicy {
    /// The policy for a server at `server_url`: loopback and private
    /// addresses only as far as the server itself is.
    pub(crate) fn for_server(server_url: &Url) -> AddressPolicy {
        let widest = match server_url.host() {
            Some(url::Host::Ipv4(ip)) => reach(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => reach(IpAddr::V6(ip)),
            Some(url::Host::Domain(d)) if d.eq_ignore_ascii_case("localhost") => Reach::Loopback,
            _ => Reach::Public,
        };
        AddressPolicy {
            widest: widest.min(Reach::Loopback),
        }
    }

    fn allows(&self, ip: IpAddr) -> bool {
        let r = reach(ip);
        r != Reach::Never && r <= self.widest
    }

    /// Checks a URL before it is fetched: its scheme, and its host when it
    /// is an address.
    pub(crate) fn check_url(&self, url: &Url) -> Result<(), String> {
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        }
        .map(|ip| {
            if self.allows(ip) {
                Ok(reach(ip) == Reach::Loopback)
            } else {
                Err(format!("{url}: the address is not allowed for this server"))
            }
        })
        .transpose()?
        .unwrap_or_else(|| url.host_str() == Some("localhost"));
        match url.scheme() {
            "https" => Ok(()),
            "http" if loopback => Ok(()),
            _ => Err(format!(
                "{url}: OAuth endpoints must be https:// (plain http:// only on loopback)"
            )),
        }
    }
}

/// Whether an operator-configured endpoint is `https://`, or `http://` on
/// a loopback host (`localhost` or a loopback address).
pub(crate) fn https_or_loopback(url: &Url) -> bool {
    let loopback = match url.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    url.scheme() == "https" || url.scheme() == "http" && loopback
}

/// A resolver that drops addresses the policy refuses.
struct Filtered(AddressPolicy);

impl Resolve for Filtered {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.0;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| policy.allows(a.ip()))
                .collect();
            if found.is_empty() {
                return Err(format!("{host}: no address allowed for this server").into());
            }
            Ok(Box::new(found.into_iter()) as Addrs)
        })
    }
}

/// The OAuth HTTP client of one upstream server.
pub(crate) struct OAuthHttp {
    follow: reqwest::Client,
    stop: reqwest::Client,
    policy: AddressPolicy,
}

/// A client whose names resolve under `policy`, with `redirect`.
fn build(
    tls: &rustls::ClientConfig,
    policy: AddressPolicy,
    timeout: Duration,
    redirect: reqwest::redirect::Policy,
) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls.clone())
        .timeout(timeout)
        .dns_resolver(Arc::new(Filtered(policy)))
        // A proxy would resolve names itself, past the address policy.
        .no_proxy()
        .redirect(redirect)
        .build()
        .map_err(|e| format!("cannot build the OAuth HTTP client: {e}"))
}

impl OAuthHttp {
    /// A plain client under `policy` that follows no redirects, for
    /// requests made outside rmcp (token exchange).
    pub(crate) fn client(
        tls: rustls::ClientConfig,
        policy: AddressPolicy,
        timeout: Duration,
    ) -> Result<reqwest::Client, String> {
        build(&tls, policy, timeout, reqwest::redirect::Policy::none())
    }

    pub(crate) fn new(
        tls: rustls::ClientConfig,
        policy: AddressPolicy,
    ) -> Result<OAuthHttp, String> {
        let build = |redirect| build(&tls, policy, TIMEOUT, redirect);
        let follow = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
            } else if let Err(e) = policy.check_url(attempt.url()) {
                attempt.error(e)
            } else {
                attempt.follow()
            }
        });
        Ok(OAuthHttp {
            follow: build(follow)?,
            stop: build(reqwest::redirect::Policy::none())?,
            policy,
        })
    }
}

fn boxed(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> OAuthHttpClientError {
    e.into()
}

impl OAuthHttpClient for OAuthHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let client = match request.redirect_policy {
                OAuthHttpRedirectPolicy::Stop => &self.stop,
                _ => &self.follow,
            };
            let request = reqwest::Request::try_from(request.request).map_err(boxed)?;
            self.policy.check_url(request.url()).map_err(boxed)?;
            let mut response = client.execute(request).await.map_err(boxed)?;
            let mut builder = http::Response::builder()
                .status(response.status())
                .version(response.version());
            for (name, value) in response.headers() {
                builder = builder.header(name, value);
            }
            let body = read_capped(&mut response, MAX_BODY).await.map_err(boxed)?;
            builder.body(body).map_err(boxed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(url: &str) -> AddressPolicy {
        AddressPolicy::for_server(&Url::parse(url).unwrap())
    }

    #[test]
    fn addresses_by_server_reach() {
        let public = policy("https://mcp.example.com/mcp");
        let private = policy("http://10.0.0.5/mcp");
        let local = policy("http://127.0.0.1:3000/mcp");
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for p in [public, private, local] {
            assert!(p.allows(ip("93.184.216.34")));
            assert!(!p.allows(ip("169.254.169.254")), "cloud metadata");
            assert!(!p.allows(ip("fe80::1")));
            assert!(!p.allows(ip("0.0.0.0")));
            assert!(!p.allows(ip("::ffff:169.254.169.254")));
            assert!(
                !p.allows(ip("64:ff9b::a9fe:a9fe")),
                "NAT64 of 169.254.169.254"
            );
            assert!(
                !p.allows(ip("2002:a9fe:a9fe::1")),
                "6to4 of 169.254.169.254"
            );
            assert!(!p.allows(ip("0.1.2.3")) && !p.allows(ip("240.0.0.1")));
        }
        assert!(!public.allows(ip("10.1.2.3")) && !public.allows(ip("127.0.0.1")));
        assert!(!public.allows(ip("fd00::1")) && !public.allows(ip("::1")));
        assert!(!public.allows(ip("64:ff9b::a00:1")), "NAT64 of 10.0.0.1");
        assert!(!public.allows(ip("198.18.0.1")));
        assert!(private.allows(ip("192.168.1.1")) && !private.allows(ip("127.0.0.1")));
        assert!(local.allows(ip("127.0.0.1")) && local.allows(ip("10.1.2.3")));
    }

    #[test]
    fn plain_http_only_on_loopback() {
        let local = policy("http://localhost:3000/mcp");
        let ok = |p: &AddressPolicy, u: &str| p.check_url(&Url::parse(u).unwrap());
        assert!(ok(&local, "http://127.0.0.1:9/token").is_ok());
        assert!(ok(&local, "http://localhost:9/token").is_ok());
        assert!(ok(&local, "https://as.example.com/token").is_ok());
        let e = ok(&local, "http://as.example.com/token").unwrap_err();
        assert!(e.contains("must be https://"), "{e}");
        let public = policy("https://mcp.example.com/mcp");
        let e = ok(&public, "https://169.254.169.254/latest").unwrap_err();
        assert!(e.contains("not allowed"), "{e}");
        assert!(ok(&public, "http://127.0.0.1/token").is_err());
    }
}

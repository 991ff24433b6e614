//! TLS for every outbound HTTP client (MCP upstreams, HTTP providers):
//! rustls with graviola's pure-Rust crypto (no C toolchain), the system's
//! roots or a CA file, an optional client certificate; and, from an error's
//! chain, why a handshake failed.

use std::error::Error as StdError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;

use rustls::client::ResolvesClientCert;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{AlertDescription, CertificateError, ClientConfig, RootCertStore, SignatureScheme};
use toolexec::Error;

/// TLS settings of an `https://` server: PEM files, read (and checked)
/// when a client is built, or earlier with [`TlsOptions::check`]. The
/// server's certificate is verified against the system's roots, or against
/// `ca_file` alone when it is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// CA certificates (PEM) trusted instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain (PEM, end-entity first), presented when the
    /// server asks for one. Needs `client_key`.
    pub client_cert: Option<PathBuf>,
    /// The private key of `client_cert` (PEM: PKCS#8, PKCS#1 or SEC1). Like
    /// a secret file, it is refused when its group or others may access it.
    pub client_key: Option<PathBuf>,
}

/// The crypto provider of every outbound connection: graviola's, never the
/// process-wide default (this library does not install one).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls_graviola::default_provider())
}

/// The files of an [`TlsOptions`], read and parsed.
struct Loaded {
    /// The certificates of `ca_file`, when set.
    roots: Option<Vec<CertificateDer<'static>>>,
    /// The client certificate chain and its key, checked to match.
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
}

impl TlsOptions {
    /// True when nothing is set (the system's roots, no client certificate).
    pub fn is_empty(&self) -> bool {
        *self == TlsOptions::default()
    }

    /// Reads and parses the files as connecting does, so a configuration can
    /// be refused early: `invalid_request` naming the field (`tls.ca_file`,
    /// `tls.client_cert`, `tls.client_key`) and the file, never the key's
    /// contents. The client key must be private to its owner (see
    /// [`toolexec::secret::read_private_file`]) and match the certificate.
    ///
    /// ```
    /// let tls = toolexec_http::TlsOptions {
    ///     ca_file: Some("/nonexistent/ca.pem".into()),
    ///     ..Default::default()
    /// };
    /// let err = tls.check().unwrap_err();
    /// assert_eq!(err.field(), Some("tls.ca_file"));
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        self.load(&provider()).map(drop)
    }

    fn load(&self, provider: &CryptoProvider) -> Result<Loaded, Error> {
        let roots = match &self.ca_file {
            Some(path) => {
                let pem = read("tls.ca_file", path)?;
                let certs = certificates("tls.ca_file", path, &pem)?;
                let mut store = RootCertStore::empty();
                for cert in &certs {
                    store.add(cert.clone()).map_err(|e| {
                        Error::invalid_request(
                            "tls.ca_file",
                            format!("{}: not a usable CA certificate: {e}", path.display()),
                        )
                    })?;
                }
                Some(certs)
            }
            None => None,
        };
        let identity = match (&self.client_cert, &self.client_key) {
            (None, None) => None,
            (Some(_), None) => {
                return Err(Error::invalid_request(
                    "tls.client_key",
                    "missing: client_cert needs its client_key",
                ));
            }
            (None, Some(_)) => {
                return Err(Error::invalid_request(
                    "tls.client_cert",
                    "missing: client_key needs its client_cert",
                ));
            }
            (Some(cert_path), Some(key_path)) => {
                let chain = certificates(
                    "tls.client_cert",
                    cert_path,
                    &read("tls.client_cert", cert_path)?,
                )?;
                let key_pem = toolexec::secret::read_private_file(key_path)
                    .map_err(|e| e.into_error("tls.client_key"))?;
                let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| {
                    Error::invalid_request(
                        "tls.client_key",
                        format!("{}: no PEM private key: {e}", key_path.display()),
                    )
                })?;
                CertifiedKey::from_der(chain.clone(), key.clone_key(), provider).map_err(|e| {
                    Error::invalid_request(
                        "tls.client_key",
                        format!(
                            "{} does not fit {}: {e}",
                            key_path.display(),
                            cert_path.display()
                        ),
                    )
                })?;
                Some((chain, key))
            }
        };
        Ok(Loaded { roots, identity })
    }

    /// The roots trusted, in words: `ca_file PATH` or `the system's roots`.
    pub fn trusted(&self) -> String {
        match &self.ca_file {
            Some(path) => format!("ca_file {}", path.display()),
            None => "the system's roots".to_owned(),
        }
    }

    /// What an `https://` client of `server` connects with: `ca_file`'s
    /// roots, else the system's (none found is `backend_unavailable`
    /// naming `server`).
    pub fn client_config(&self, server: &str) -> Result<Tls, Error> {
        let provider = provider();
        let loaded = self.load(&provider)?;
        let mut roots = RootCertStore::empty();
        match loaded.roots {
            Some(certs) => {
                roots.add_parsable_certificates(certs);
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                let (added, _) = roots.add_parsable_certificates(native.certs);
                if added == 0 {
                    let why = native
                        .errors
                        .first()
                        .map_or_else(String::new, |e| format!(" ({e})"));
                    return Err(Error::backend_unavailable(
                        server,
                        format!(
                            "no CA certificates found on this system{why}: set ca_file, \
                             or SSL_CERT_FILE / SSL_CERT_DIR"
                        ),
                    ));
                }
            }
        }
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::backend_unavailable(server, format!("TLS setup: {e}")))?
            .with_root_certificates(roots);
        let (config, no_client_cert) = match loaded.identity {
            None => {
                let resolver = Arc::new(NoClientCert::default());
                let config = builder.with_client_cert_resolver(resolver.clone());
                (config, Some(resolver))
            }
            Some((chain, key)) => {
                let config = builder.with_client_auth_cert(chain, key).map_err(|e| {
                    Error::invalid_request("tls.client_key", format!("not usable: {e}"))
                })?;
                (config, None)
            }
        };
        Ok(Tls {
            config,
            trusted: self.trusted(),
            no_client_cert,
        })
    }
}

/// What an HTTP client connects with: its rustls configuration, and what
/// explains a failed handshake.
#[derive(Debug, Clone)]
pub struct Tls {
    /// Handed to reqwest (clones share the session cache, so reconnections
    /// resume TLS sessions).
    pub config: ClientConfig,
    /// The roots trusted, in words (empty for `http://`).
    trusted: String,
    /// Without a client certificate configured: whether the server asked.
    no_client_cert: Option<Arc<NoClientCert>>,
}

impl Tls {
    /// A connector over this configuration for HTTP/2 clients (gRPC
    /// channels): TCP without Nagle, bounded by `connect_timeout`, h2
    /// offered by the connector itself; `http://` URLs refused when
    /// `https_only`, else connected in the clear.
    pub fn h2_connector(
        &self,
        connect_timeout: Duration,
        https_only: bool,
    ) -> hyper_rustls::HttpsConnector<HttpConnector> {
        let mut config = self.config.clone();
        config.alpn_protocols.clear();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config);
        let builder = if https_only {
            builder.https_only()
        } else {
            builder.https_or_http()
        };
        builder.enable_http2().wrap_connector(http)
    }

    /// For an `http://` server, where reqwest never uses it (redirects are
    /// off): no roots, so nothing is trusted. reqwest built with rustls
    /// wants a configuration even then, else it looks for a process-wide
    /// provider.
    pub fn unused() -> Tls {
        let config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("graviola supports the default protocol versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
        Tls {
            config,
            trusted: String::new(),
            no_client_cert: None,
        }
    }

    /// Forgets what earlier connections saw: called before each session
    /// is opened, so [`Tls::failure_in`] explains this attempt only.
    pub fn new_attempt(&self) {
        if let Some(r) = &self.no_client_cert {
            r.asked.store(false, Ordering::Relaxed);
        }
    }

    /// The TLS failure in `e`'s chain, if any, walking the chain with
    /// `next` ([`next_link`], or a caller's own that also looks inside its
    /// error types). A server that asked for a client certificate, got none
    /// and hung up without an alert (Python's `ssl` does) is recognized by
    /// its question.
    pub fn failure_in(
        &self,
        e: &(dyn StdError + 'static),
        next: for<'a> fn(&'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)>,
    ) -> Option<TlsFailure> {
        let mut hung_up = false;
        let mut cur = Some(e);
        while let Some(err) = cur {
            let io = err.downcast_ref::<std::io::Error>();
            if let Some(r) = err.downcast_ref::<rustls::Error>() {
                return Some(describe(r, &self.trusted));
            }
            hung_up |= io.is_some_and(|io| {
                matches!(
                    io.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::BrokenPipe
                )
            });
            cur = next(err);
        }
        let asked = self
            .no_client_cert
            .as_ref()
            .is_some_and(|r| r.asked.load(Ordering::Relaxed));
        (hung_up && asked).then(|| TlsFailure {
            reason: "the server asked for a client certificate, none is configured \
                     (client_cert, client_key), and it closed the connection"
                .to_owned(),
            permanent: true,
        })
    }
}

/// The client-certificate resolver when none is configured: presents none,
/// and remembers that a server asked for one.
#[derive(Debug, Default)]
struct NoClientCert {
    asked: AtomicBool,
}

impl ResolvesClientCert for NoClientCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Relaxed);
        None
    }

    fn has_certs(&self) -> bool {
        false
    }
}

fn read(field: &str, path: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(path)
        .map_err(|e| Error::invalid_request(field, format!("cannot read {}: {e}", path.display())))
}

/// Every certificate of a PEM file; none is an error.
fn certificates(
    field: &str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::invalid_request(field, format!("{}: unreadable PEM: {e}", path.display()))
        })?;
    if certs.is_empty() {
        return Err(Error::invalid_request(
            field,
            format!("{}: no PEM certificate in the file", path.display()),
        ));
    }
    Ok(certs)
}

/// The next error in `e`'s chain: the error an `std::io::Error` wraps
/// (its `source()` skips it, and rustls errors travel inside I/O errors, as
/// hyper-rustls and reqwest wrap them), else `source()`.
pub fn next_link<'a>(e: &'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)> {
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        return Some(inner);
    }
    e.source()
}

/// `e` and its chain (walked with `next`) in one line, each link's text
/// once: `error sending request: client error (Connect): tcp connect
/// error: Connection refused (os error 111)`.
pub fn error_chain(
    e: &(dyn StdError + 'static),
    next: for<'a> fn(&'a (dyn StdError + 'static)) -> Option<&'a (dyn StdError + 'static)>,
) -> String {
    let mut out = e.to_string();
    let mut cur = next(e);
    while let Some(err) = cur {
        let text = err.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = next(err);
    }
    out.replace('\n', " ")
}

/// Why a TLS connection failed, from a rustls error in an error's chain.
#[derive(Debug, PartialEq, Eq)]
pub struct TlsFailure {
    /// One sentence: what is wrong, in the terms of the configuration.
    pub reason: String,
    /// Retrying cannot help: the certificates or the settings must change.
    pub permanent: bool,
}

fn describe(e: &rustls::Error, trusted: &str) -> TlsFailure {
    let permanent = |reason: String| TlsFailure {
        reason,
        permanent: true,
    };
    match e {
        rustls::Error::InvalidCertificate(cert) => permanent(match cert {
            CertificateError::UnknownIssuer => format!(
                "the server's certificate is not trusted: unknown issuer (no CA of \
                 {trusted} signed it)"
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("the server's certificate has expired ({cert})")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("the server's certificate is not valid yet ({cert})")
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("wrong host name: {cert}")
            }
            other => format!("the server's certificate is invalid: {other}"),
        }),
        rustls::Error::AlertReceived(alert) => {
            let client_cert = matches!(
                alert,
                AlertDescription::CertificateRequired
                    | AlertDescription::BadCertificate
                    | AlertDescription::UnsupportedCertificate
                    | AlertDescription::CertificateRevoked
                    | AlertDescription::CertificateExpired
                    | AlertDescription::CertificateUnknown
                    | AlertDescription::UnknownCA
                    | AlertDescription::AccessDenied
            );
            let handshake = matches!(
                alert,
                AlertDescription::HandshakeFailure
                    | AlertDescription::ProtocolVersion
                    | AlertDescription::InsufficientSecurity
            );
            let hint = if client_cert {
                ": it wants a client certificate it accepts (client_cert, client_key)"
            } else if handshake {
                ": no TLS version or cipher suite in common"
            } else {
                ""
            };
            TlsFailure {
                reason: format!("the server refused the TLS connection (alert {alert:?}){hint}"),
                permanent: client_cert || handshake,
            }
        }
        rustls::Error::PeerIncompatible(why) => {
            permanent(format!("the server's TLS is incompatible: {why:?}"))
        }
        other => TlsFailure {
            reason: format!("TLS failed: {other}"),
            permanent: false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_rustls_errors_inside_io_errors() {
        // As hyper-rustls and reqwest wrap them: an io::Error in an io::Error.
        let io = std::io::Error::other(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        ));
        // io::Error::source() skips the wrapped error: it must be looked into.
        assert!(std::error::Error::source(&io).is_none());
        let tls = Tls {
            trusted: "ca_file ca.pem".to_owned(),
            ..Tls::unused()
        };
        let failure = tls.failure_in(&io, next_link).unwrap();
        assert!(failure.permanent);
        assert!(
            failure
                .reason
                .contains("unknown issuer (no CA of ca_file ca.pem"),
            "{failure:?}"
        );
        let plain = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(tls.failure_in(&plain, next_link), None);
    }

    #[test]
    fn client_certificate_alerts_are_permanent_other_errors_not() {
        let required = describe(
            &rustls::Error::AlertReceived(AlertDescription::CertificateRequired),
            "",
        );
        assert!(required.permanent);
        assert!(required.reason.contains("client_cert"), "{required:?}");
        let internal = describe(
            &rustls::Error::AlertReceived(AlertDescription::InternalError),
            "",
        );
        assert!(!internal.permanent);
        let expired = describe(
            &rustls::Error::InvalidCertificate(CertificateError::Expired),
            "",
        );
        assert!(expired.permanent && expired.reason.contains("expired"));
    }

    #[test]
    fn missing_halves_of_a_client_identity_are_refused() {
        let tls = TlsOptions {
            client_cert: Some("/nonexistent/cert.pem".into()),
            ..TlsOptions::default()
        };
        assert_eq!(tls.check().unwrap_err().field(), Some("tls.client_key"));
        let tls = TlsOptions {
            client_key: Some("/nonexistent/key.pem".into()),
            ..TlsOptions::default()
        };
        assert_eq!(tls.check().unwrap_err().field(), Some("tls.client_cert"));
        assert!(TlsOptions::default().check().is_ok());
    }
}

//! Request signing: HMAC-SHA256 over a canonical string, and the shared key.
//!
//! The canonical string (see `docs/remote-protocol.md`) is six lines joined
//! by `\n`, after a fixed version line:
//!
//! ```text
//! toolexec-remote-v2
//! <METHOD>
//! <authority: the Host header, e.g. 10.0.0.5:7878>
//! <path and query, as sent>
//! <timestamp: unix seconds>
//! <nonce>
//! <the x-toolexec-content-sha256 header: lowercase hex SHA-256 of the body>
//! ```
//!
//! The signature header is `v2=<lowercase hex HMAC-SHA256(key, canonical)>`.
//! Because the body's digest travels in a signed header, the server
//! authenticates a request (signature, freshness, nonce) from its head
//! alone, before it reads a byte of the body, and then checks the body
//! against the digest.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use toolexec::Secret;

/// Header carrying the signature (`v1=<hex>`).
pub const SIGNATURE_HEADER: &str = "x-toolexec-signature";
/// Header carrying the timestamp (unix seconds).
pub const TIMESTAMP_HEADER: &str = "x-toolexec-timestamp";
/// Header carrying the nonce (16 to 128 characters of `[A-Za-z0-9_-]`).
pub const NONCE_HEADER: &str = "x-toolexec-nonce";
/// Header carrying the lowercase hex SHA-256 of the body (signed).
pub const CONTENT_SHA256_HEADER: &str = "x-toolexec-content-sha256";
/// First line of the canonical string.
pub const CANONICAL_VERSION: &str = "toolexec-remote-v2";
/// Prefix of the signature header's value.
pub const SIGNATURE_PREFIX: &str = "v2=";
/// Shortest accepted key, in bytes.
pub const MIN_KEY_BYTES: usize = 16;

/// The four signing headers of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// Unix seconds.
    pub timestamp: u64,
    /// Random, unique per request.
    pub nonce: String,
    /// Lowercase hex SHA-256 of the body ([`body_sha256`]).
    pub content_sha256: String,
    /// `v2=<hex>`.
    pub signature: String,
}

/// What a signature covers besides the timestamp and nonce: the request
/// line and the server it is addressed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// `GET`, `POST`, ...
    pub method: &'a str,
    /// The `Host` header (`host:port`): a request signed for one server is
    /// refused by another sharing the key.
    pub authority: &'a str,
    /// The request target as sent: path and query.
    pub path_and_query: &'a str,
}

/// The lowercase hex SHA-256 of `body`: the value of
/// [`CONTENT_SHA256_HEADER`].
///
/// ```
/// assert_eq!(
///     toolexec_remote::auth::body_sha256(b""),
///     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/// );
/// ```
pub fn body_sha256(body: &[u8]) -> String {
    hex(&Sha256::digest(body))
}

/// Whether `digest` has the shape of [`body_sha256`]'s output (64
/// lowercase hex digits).
pub fn valid_sha256(digest: &str) -> bool {
    digest.len() == 64
        && digest
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The canonical string that is signed; `content_sha256` is the body's
/// digest as sent in [`CONTENT_SHA256_HEADER`].
///
/// ```
/// use toolexec_remote::auth::{body_sha256, canonical_string, Target};
/// let target = Target { method: "POST", authority: "127.0.0.1:7878", path_and_query: "/v1/runs" };
/// let s = canonical_string(target, 1700000000, "abcdefghijklmnop", &body_sha256(b""));
/// assert_eq!(s.lines().count(), 7);
/// assert_eq!(s.lines().next(), Some("toolexec-remote-v2"));
/// assert_eq!(s.lines().nth(2), Some("127.0.0.1:7878"));
/// assert!(s.ends_with("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
/// ```
pub fn canonical_string(
    target: Target<'_>,
    timestamp: u64,
    nonce: &str,
    content_sha256: &str,
) -> String {
    let Target {
        method,
        authority,
        path_and_query,
    } = target;
    format!(
        "{CANONICAL_VERSION}\n{method}\n{authority}\n{path_and_query}\n{timestamp}\n{nonce}\n{content_sha256}"
    )
}

fn mac(key: &Secret) -> Hmac<Sha256> {
    // HMAC accepts keys of any length; this cannot fail.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key.expose().as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"))
}

/// Signs a request now, with a fresh random nonce.
pub fn sign(key: &Secret, target: Target<'_>, body: &[u8]) -> Signature {
    sign_at(key, target, body, unix_now(), &random_nonce())
}

/// Signs a request with a given timestamp and nonce.
pub fn sign_at(
    key: &Secret,
    target: Target<'_>,
    body: &[u8],
    timestamp: u64,
    nonce: &str,
) -> Signature {
    let content_sha256 = body_sha256(body);
    let mut mac = mac(key);
    mac.update(canonical_string(target, timestamp, nonce, &content_sha256).as_bytes());
    Signature {
        timestamp,
        nonce: nonce.to_owned(),
        content_sha256,
        signature: format!("{SIGNATURE_PREFIX}{}", hex(&mac.finalize().into_bytes())),
    }
}

/// Checks `signature` (`v2=<hex>`) in constant time, over the body's
/// digest as sent (the body itself is checked against it once read).
pub fn verify(
    key: &Secret,
    target: Target<'_>,
    content_sha256: &str,
    timestamp: u64,
    nonce: &str,
    signature: &str,
) -> bool {
    let Some(bytes) = signature.strip_prefix(SIGNATURE_PREFIX).and_then(unhex) else {
        return false;
    };
    let mut mac = mac(key);
    mac.update(canonical_string(target, timestamp, nonce, content_sha256).as_bytes());
    // `verify_slice` compares in constant time.
    mac.verify_slice(&bytes).is_ok()
}

/// Whether `nonce` has the accepted shape.
pub fn valid_nonce(nonce: &str) -> bool {
    (16..=128).contains(&nonce.len())
        && nonce
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// 16 random bytes as 32 hex characters.
pub fn random_nonce() -> String {
    let mut bytes = [0u8; 16];
    fill_random(&mut bytes);
    hex(&bytes)
}

/// Fills `buf` from the OS random source.
pub(crate) fn fill_random(buf: &mut [u8]) {
    if getrandom::fill(buf).is_err() {
        // No OS randomness: fall back to time-derived bytes, still unique
        // per request together with the timestamp (nonces only need
        // uniqueness, not secrecy).
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let digest = Sha256::digest(seed.to_le_bytes());
        for (b, d) in buf.iter_mut().zip(digest.iter().cycle()) {
            *b = *d;
        }
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Where the shared key comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A file; one trailing newline (`\n` or `\r\n`) is dropped.
    File(PathBuf),
    /// An environment variable.
    Env(String),
}

/// Why a key could not be loaded. Never contains the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("invalid_request: key file {path}: {reason}")]
    File {
        /// The file.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// The variable is not set or not UTF-8.
    #[error("invalid_request: key variable {0} is not set")]
    Env(String),
    /// Shorter than [`MIN_KEY_BYTES`].
    #[error("invalid_request: key from {0} is shorter than {MIN_KEY_BYTES} bytes")]
    TooShort(String),
    /// The file grants access to group or others (any bit of `0o077`): anyone
    /// who can read it could sign requests, so it is refused, as ssh refuses
    /// such private keys.
    #[error(
        "invalid_request: key file {path} is accessible by group or others (mode {mode:04o}); \
         make it private to its owner, e.g. chmod 600 {path}"
    )]
    Permissions {
        /// The file.
        path: String,
        /// Its permission bits (`st_mode & 0o7777`).
        mode: u32,
    },
}

/// Largest key file read; a longer one is refused (`/dev/zero` is not a key).
pub const MAX_KEY_FILE_BYTES: u64 = 64 << 10;

/// Reads a key file after checking, on the opened file, that only its
/// owner may access it.
fn read_key_file(path: &std::path::Path) -> Result<String, KeyError> {
    use std::io::Read;
    let shown = || path.display().to_string();
    let failed = |reason: String| KeyError::File {
        path: shown(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| failed(e.to_string()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = file
            .metadata()
            .map_err(|e| failed(e.to_string()))?
            .permissions()
            .mode()
            & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyError::Permissions {
                path: shown(),
                mode,
            });
        }
    }
    let mut text = String::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| failed(e.to_string()))?;
    if text.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(failed(format!("larger than {MAX_KEY_FILE_BYTES} bytes")));
    }
    Ok(text)
}

impl KeySource {
    /// Reads the key. A key file must be private to its owner (no
    /// permission bits for group or others, [`KeyError::Permissions`]).
    ///
    /// ```
    /// use toolexec_remote::auth::{KeyError, KeySource};
    /// let err = KeySource::Env("TOOLEXEC_DOC_TEST_UNSET_KEY".into()).load().unwrap_err();
    /// assert!(matches!(err, KeyError::Env(_)));
    /// ```
    pub fn load(&self) -> Result<Secret, KeyError> {
        let (value, from) = match self {
            KeySource::File(path) => (read_key_file(path)?, format!("file {}", path.display())),
            KeySource::Env(name) => (
                std::env::var(name).map_err(|_| KeyError::Env(name.clone()))?,
                format!("variable {name}"),
            ),
        };
        let value = value
            .strip_suffix("\r\n")
            .or_else(|| value.strip_suffix('\n'))
            .unwrap_or(&value);
        if value.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort(from));
        }
        Ok(Secret::new(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target<'a>(method: &'a str, authority: &'a str, path: &'a str) -> Target<'a> {
        Target {
            method,
            authority,
            path_and_query: path,
        }
    }

    /// Known answers, so a change of the HMAC or SHA-256 crates cannot
    /// change signatures unnoticed: RFC 4231 test case 2 and the SHA-256
    /// of "abc" (FIPS 180-2).
    #[test]
    fn hmac_and_digest_match_known_answers() {
        let mut m = mac(&Secret::new("Jefe"));
        m.update(b"what do ya want for nothing?");
        assert_eq!(
            hex(&m.finalize().into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            body_sha256(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn sign_then_verify_and_tamper() {
        let key = Secret::new("0123456789abcdef0123");
        let good = target("POST", "10.0.0.1:7878", "/v1/runs");
        let sig = sign_at(&key, good, b"{}", 100, "nonce-nonce-nonce");
        assert_eq!(sig.content_sha256, body_sha256(b"{}"));
        assert!(verify(
            &key,
            good,
            &body_sha256(b"{}"),
            100,
            "nonce-nonce-nonce",
            &sig.signature
        ));
        for (m, a, p, b, t, n) in [
            (
                "GET",
                "10.0.0.1:7878",
                "/v1/runs",
                &b"{}"[..],
                100,
                "nonce-nonce-nonce",
            ),
            (
                "POST",
                "10.0.0.2:7878",
                "/v1/runs",
                b"{}",
                100,
                "nonce-nonce-nonce",
            ),
            (
                "POST",
                "10.0.0.1:7879",
                "/v1/runs",
                b"{}",
                100,
                "nonce-nonce-nonce",
            ),
            (
                "POST",
                "10.0.0.1:7878",
                "/v1/run",
                b"{}",
                100,
                "nonce-nonce-nonce",
            ),
            (
                "POST",
                "10.0.0.1:7878",
                "/v1/runs",
                b"{ }",
                100,
                "nonce-nonce-nonce",
            ),
            (
                "POST",
                "10.0.0.1:7878",
                "/v1/runs",
                b"{}",
                101,
                "nonce-nonce-nonce",
            ),
            (
                "POST",
                "10.0.0.1:7878",
                "/v1/runs",
                b"{}",
                100,
                "nonce-nonce-noncE",
            ),
        ] {
            assert!(
                !verify(&key, target(m, a, p), &body_sha256(b), t, n, &sig.signature),
                "{m} {a} {p} {t} {n}"
            );
        }
        let other = Secret::new("0123456789abcdef0124");
        assert!(!verify(
            &other,
            good,
            &body_sha256(b"{}"),
            100,
            "nonce-nonce-nonce",
            &sig.signature
        ));
        // A version-1 signature over the same string is not accepted.
        let v1 = format!("v1={}", &sig.signature[3..]);
        for bad in [
            "",
            "v2=",
            "v2=zz",
            "v1=00",
            "v2=abc",
            &sig.signature[3..],
            &v1,
        ] {
            assert!(!verify(
                &key,
                good,
                &body_sha256(b"{}"),
                100,
                "nonce-nonce-nonce",
                bad
            ));
        }
        assert!(valid_sha256(&sig.content_sha256));
        for bad in [
            "",
            "abc",
            &sig.content_sha256.to_uppercase(),
            &"g".repeat(64),
        ] {
            assert!(!valid_sha256(bad), "{bad}");
        }
    }

    #[test]
    fn nonce_shape() {
        assert!(valid_nonce(&random_nonce()));
        assert_ne!(random_nonce(), random_nonce());
        assert!(!valid_nonce("short"));
        assert!(!valid_nonce("has space in it, long enough"));
        assert!(!valid_nonce(&"a".repeat(129)));
    }

    fn write_private(path: &std::path::Path, text: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }

    #[test]
    fn key_file_trailing_newline_and_short_keys() {
        let dir = std::env::temp_dir().join(format!("toolexec-remote-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        write_private(&path, "0123456789abcdef-key\n");
        let key = KeySource::File(path.clone()).load().unwrap();
        assert_eq!(key.expose(), "0123456789abcdef-key");
        write_private(&path, "short\n");
        let err = KeySource::File(path.clone()).load().unwrap_err();
        assert!(matches!(err, KeyError::TooShort(_)));
        assert!(!err.to_string().contains("short\n"));
        let missing = KeySource::File(dir.join("missing")).load().unwrap_err();
        assert!(matches!(missing, KeyError::File { .. }));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// A key file others may read (or write) is refused, naming the path
    /// and the mode; the key never appears. Root reads any file, so the
    /// check is on the mode, not on whether opening fails.
    #[test]
    fn key_files_accessible_by_others_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir =
            std::env::temp_dir().join(format!("toolexec-remote-key-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("key");
        write_private(&path, "0123456789abcdef-secret-key\n");
        assert!(KeySource::File(path.clone()).load().is_ok());
        for mode in [0o644, 0o640, 0o604, 0o660, 0o602, 0o610] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = KeySource::File(path.clone()).load().unwrap_err();
            assert_eq!(
                err,
                KeyError::Permissions {
                    path: path.display().to_string(),
                    mode
                },
                "{mode:o}"
            );
            let text = err.to_string();
            assert!(text.starts_with("invalid_request: "), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(&format!("{mode:04o}")), "{text}");
            assert!(!text.contains("secret-key"), "{text}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(KeySource::File(path.clone()).load().is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }
}

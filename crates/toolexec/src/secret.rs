//! Secrets (tokens, keys, header values) that never appear in logs, errors,
//! `Debug` output or serialized descriptions.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::{Error, ErrorCode};

/// A secret string. `Debug` and `Display` print `[redacted]`; it does not
/// implement `Serialize`, nor `PartialEq`: compare with
/// [`Secret::constant_time_eq`]. Read it with [`Secret::expose`] only where
/// it is sent.
///
/// ```
/// let token = toolexec::Secret::new("s3cr3t");
/// assert_eq!(format!("{token:?} {token}"), "[redacted] [redacted]");
/// assert_eq!(token.expose(), "s3cr3t");
/// assert!(token.constant_time_eq("s3cr3t"));
/// ```
///
/// Secrets are not comparable with `==`:
///
/// ```compile_fail
/// let _ = toolexec::Secret::new("a") == toolexec::Secret::new("a");
/// ```
#[derive(Clone)]
pub struct Secret {
    value: String,
    /// SHA-256 of `value`, computed once, so a comparison never touches the
    /// secret's own bytes (whose length would show in the time taken).
    digest: [u8; 32],
}

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        let value = value.into();
        let digest = Sha256::digest(value.as_bytes()).into();
        Secret { value, digest }
    }

    /// Reads a secret from a file that only its owner may access (see
    /// [`read_private_file`]), dropping trailing `\n` and `\r`.
    pub fn from_private_file(path: &Path) -> Result<Self, SecretFileError> {
        let text = read_private_file(path)?;
        Ok(Secret::new(text.trim_end_matches(['\n', '\r'])))
    }

    /// The secret value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.value
    }

    /// True for an empty secret.
    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// Compares with `candidate` in time independent of the secret: the
    /// candidate's SHA-256 digest is compared in constant time with the
    /// secret's (computed once, in [`Secret::new`]), so neither where they
    /// differ nor how long the secret is shows in the time taken (only the
    /// candidate's own length does).
    pub fn constant_time_eq(&self, candidate: &str) -> bool {
        let candidate: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        self.digest.ct_eq(&candidate).into()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

/// Permission bits a secret file must not have: any access by its group or
/// by others (the rule OpenSSH applies to private keys).
pub const SECRET_FILE_FORBIDDEN_MODE: u32 = 0o077;

/// Why a secret file was refused. `Display` names the path (never the
/// contents); the code is always [`ErrorCode::InvalidRequest`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretFileError {
    /// The file could not be opened or read.
    #[error("cannot read secret file {}: {kind}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        kind: std::io::ErrorKind,
    },
    /// Its group or others may read or write it.
    #[error(
        "secret file {} has mode {mode:04o}: its group or others may access it; \
         make it private (chmod 600 {})",
        path.display(),
        path.display()
    )]
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its permission bits (`st_mode & 0o7777`).
        mode: u32,
    },
    /// Not valid UTF-8.
    #[error("secret file {} is not valid UTF-8", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
}

impl SecretFileError {
    /// The stable code: [`ErrorCode::InvalidRequest`].
    pub fn code(&self) -> ErrorCode {
        ErrorCode::InvalidRequest
    }

    /// As an [`Error::InvalidRequest`] about `field` (a flag or config key).
    pub fn into_error(self, field: impl Into<String>) -> Error {
        Error::invalid_request(field, self.to_string())
    }
}

/// Reads a file holding a secret, refusing it when its group or others may
/// access it (any of [`SECRET_FILE_FORBIDDEN_MODE`] set on the file itself,
/// symlinks followed). The mode is checked on the opened file, so the file
/// read is the file checked.
///
/// ```
/// use std::os::unix::fs::PermissionsExt;
/// let path = std::env::temp_dir().join(format!("toolexec-doc-secret-{}", std::process::id()));
/// std::fs::write(&path, "s3cr3t\n").unwrap();
/// std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
/// let err = toolexec::secret::read_private_file(&path).unwrap_err();
/// assert!(matches!(err, toolexec::secret::SecretFileError::Permissions { mode: 0o644, .. }));
/// std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
/// assert_eq!(toolexec::secret::read_private_file(&path).unwrap(), "s3cr3t\n");
/// std::fs::remove_file(&path).unwrap();
/// ```
pub fn read_private_file(path: &Path) -> Result<String, SecretFileError> {
    let read_error = |e: std::io::Error| SecretFileError::Read {
        path: path.to_owned(),
        kind: e.kind(),
    };
    let mut file = std::fs::File::open(path).map_err(read_error)?;
    check_private(path, &file)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(read_error)?;
    String::from_utf8(bytes).map_err(|_| SecretFileError::NotUtf8 {
        path: path.to_owned(),
    })
}

#[cfg(unix)]
fn check_private(path: &Path, file: &std::fs::File) -> Result<(), SecretFileError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = file.metadata().map_err(|e| SecretFileError::Read {
        path: path.to_owned(),
        kind: e.kind(),
    })?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & SECRET_FILE_FORBIDDEN_MODE != 0 {
        return Err(SecretFileError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path, _file: &std::fs::File) -> Result<(), SecretFileError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_without_leaking() {
        let s = Secret::new("abc");
        assert!(s.constant_time_eq("abc"));
        assert!(!s.constant_time_eq("abd"));
        assert!(!s.constant_time_eq("ab"));
        assert!(!s.constant_time_eq("abcd"));
        assert!(!s.constant_time_eq(""));
        assert!(Secret::new("").constant_time_eq(""));
        assert_eq!(format!("{:?}", Some(s)), "Some([redacted])");
    }

    /// Length independence holds by construction (two 32-byte digests
    /// meet in `ct_eq`), not by a timing test: what is checked here is that
    /// secrets of any length compare by digest.
    #[test]
    fn long_secrets_compare_by_digest() {
        let secret = Secret::new("k".repeat(16 << 20));
        assert!(!secret.constant_time_eq("x"));
        assert!(secret.constant_time_eq(&"k".repeat(16 << 20)));
        assert!(!secret.constant_time_eq(&"k".repeat((16 << 20) - 1)));
    }

    #[cfg(unix)]
    #[test]
    fn secret_files_must_be_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("toolexec-secret-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "t0k\r\n").unwrap();
        for mode in [0o644, 0o640, 0o604, 0o620, 0o602, 0o660, 0o666, 0o601] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = Secret::from_private_file(&path).unwrap_err();
            assert_eq!(
                err,
                SecretFileError::Permissions {
                    path: path.clone(),
                    mode
                }
            );
            let text = err.to_string();
            assert!(text.contains(&format!("{mode:04o}")), "{text}");
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(!text.contains("t0k"), "{text}");
            assert_eq!(err.code(), ErrorCode::InvalidRequest);
            assert!(
                err.into_error("token_file")
                    .to_string()
                    .starts_with("invalid_request: token_file: secret file ")
            );
        }
        for mode in [0o600, 0o400, 0o700] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(
                Secret::from_private_file(&path)
                    .unwrap()
                    .constant_time_eq("t0k")
            );
        }
        // A symlink is judged by its target.
        let link = dir.join("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&path, &link).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Secret::from_private_file(&link),
            Err(SecretFileError::Permissions { mode: 0o644, .. })
        ));
        assert!(matches!(
            Secret::from_private_file(&dir.join("missing")),
            Err(SecretFileError::Read {
                kind: std::io::ErrorKind::NotFound,
                ..
            })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

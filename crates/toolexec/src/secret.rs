//! Secrets (tokens, keys, header values) that never appear in logs, errors,
//! `Debug` output or serialized descriptions.

use std::fmt;

/// A secret string. `Debug` and `Display` print `[redacted]`; it does not
/// implement `Serialize`. Read it with [`Secret::expose`] only where it is sent.
///
/// ```
/// let token = toolexec::Secret::new("s3cr3t");
/// assert_eq!(format!("{token:?} {token}"), "[redacted] [redacted]");
/// assert_eq!(token.expose(), "s3cr3t");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True for an empty secret.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Compares with `candidate` in time independent of where they differ.
    pub fn constant_time_eq(&self, candidate: &str) -> bool {
        let a = self.0.as_bytes();
        let b = candidate.as_bytes();
        let mut diff = a.len() ^ b.len();
        for i in 0..a.len().max(b.len()) {
            let x = a.get(i).copied().unwrap_or(0);
            let y = b.get(i).copied().unwrap_or(0);
            diff |= usize::from(x ^ y);
        }
        diff == 0
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
        assert_eq!(format!("{:?}", Some(s)), "Some([redacted])");
    }
}

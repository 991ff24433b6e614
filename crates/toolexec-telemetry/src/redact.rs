//! What of a call's arguments may leave the process: a digest always, the
//! values only when configured, with secrets redacted and a size cap.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Replaces a redacted value.
pub const REDACTED: &str = "[redacted]";

/// Object keys whose values are never recorded (compared case-insensitively,
/// ignoring `-` and `_`): credentials by their usual names.
const SECRET_KEYS: [&str; 16] = [
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "token",
    "apikey",
    "authorization",
    "proxyauthorization",
    "auth",
    "cookie",
    "setcookie",
    "credential",
    "credentials",
    "privatekey",
    "clientsecret",
];

fn is_secret_key(key: &str) -> bool {
    let folded: String = key
        .chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect();
    SECRET_KEYS.iter().any(|s| folded == *s)
        || folded.ends_with("token")
        || folded.ends_with("secret")
        || folded.ends_with("password")
        || folded.ends_with("apikey")
        || folded.ends_with("key")
            && (folded.contains("secret")
                || folded.contains("access")
                || folded.contains("private"))
}

/// The arguments' digest: `hmac-sha256:` and the hex HMAC of their JSON
/// text under `key`, or without a key `sha256:` and the plain hash (which
/// a dictionary of likely arguments reverses: configure a key).
pub fn digest(args: &Value, key: Option<&toolexec::Secret>) -> String {
    let bytes = serde_json::to_vec(args).unwrap_or_default();
    let (prefix, sum): (&str, Vec<u8>) = match key {
        Some(key) => {
            let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.expose().as_bytes())
                .expect("HMAC takes keys of any length");
            mac.update(&bytes);
            ("hmac-sha256:", mac.finalize().into_bytes().to_vec())
        }
        None => ("sha256:", Sha256::digest(&bytes).to_vec()),
    };
    let mut out = String::with_capacity(prefix.len() + 64);
    out.push_str(prefix);
    for b in sum {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// The arguments with secret-named values replaced by [`REDACTED`], as JSON
/// text cut to `max_bytes` at a character boundary (and then marked with a
/// trailing `…`).
pub fn redacted_text(args: &Value, max_bytes: usize) -> String {
    let mut v = args.clone();
    redact(&mut v);
    let mut text = v.to_string();
    if text.len() > max_bytes {
        let mut cut = max_bytes;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

fn redact(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, val) in map.iter_mut() {
                if is_secret_key(k) {
                    *val = Value::String(REDACTED.into());
                } else {
                    redact(val);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_are_redacted_and_text_capped() {
        let args = json!({"q": "x", "api_key": "k", "nested": [{"Access-Token": "t", "n": 1}]});
        let text = redacted_text(&args, 1000);
        assert!(!text.contains("\"k\"") && !text.contains("\"t\""), "{text}");
        assert!(
            text.contains("\"q\":\"x\"") && text.contains("\"n\":1"),
            "{text}"
        );
        let long = json!({"q": "é".repeat(100)});
        let cut = redacted_text(&long, 21);
        assert!(
            cut.ends_with('…') && cut.len() <= 21 + '…'.len_utf8(),
            "{cut}"
        );
    }

    #[test]
    fn the_digest_is_stable_and_distinguishes() {
        let a = digest(&json!({"a": 1}), None);
        assert_eq!(a, digest(&json!({"a": 1}), None));
        assert_ne!(a, digest(&json!({"a": 2}), None));
        assert_eq!(a.len(), 7 + 64);
        let key = toolexec::Secret::new("k".to_owned());
        let keyed = digest(&json!({"a": 1}), Some(&key));
        assert!(
            keyed.starts_with("hmac-sha256:") && keyed.len() == 12 + 64,
            "{keyed}"
        );
        assert_ne!(
            keyed,
            digest(
                &json!({"a": 1}),
                Some(&toolexec::Secret::new("j".to_owned()))
            )
        );
    }
}

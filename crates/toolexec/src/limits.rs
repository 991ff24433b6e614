//! Limits as data, and the checks that enforce size and depth limits on JSON.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, LimitKind};

/// Limits applied to every call. Explicit data, in the spirit of wasmtime's
/// `Config`: nothing is implied.
///
/// It deserializes from a configuration table (unset keys keep their
/// defaults, unknown keys are refused, `default_timeout` is text such as
/// `"30s"`); [`Limits::validate`] then checks the values.
///
/// ```
/// let limits: toolexec::Limits =
///     serde_json::from_str(r#"{"default_timeout": "5s", "max_input_bytes": 4096}"#).unwrap();
/// assert_eq!(limits.max_input_bytes, 4096);
/// assert!(limits.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Deadline of a call when the caller gives none.
    #[serde(deserialize_with = "crate::units::duration")]
    pub default_timeout: Duration,
    /// Largest accepted arguments, in bytes of compact JSON.
    pub max_input_bytes: usize,
    /// Deepest accepted argument nesting (a scalar is depth 0).
    pub max_input_depth: usize,
    /// Largest accepted result, in bytes of compact JSON.
    pub max_output_bytes: usize,
    /// Deepest accepted result nesting.
    pub max_output_depth: usize,
    /// Most steps in one chain.
    pub max_chain_steps: usize,
    /// Most schema violations listed in one error.
    pub max_violations: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            default_timeout: Duration::from_secs(30),
            max_input_bytes: 1 << 20,
            max_input_depth: 64,
            max_output_bytes: 16 << 20,
            max_output_depth: 128,
            max_chain_steps: 100,
            max_violations: 20,
        }
    }
}

impl Limits {
    /// `invalid_request` naming the first limit that is zero
    /// (`limits.max_input_bytes`, ...).
    pub fn validate(&self) -> Result<(), Error> {
        let zero = [
            ("default_timeout", self.default_timeout.is_zero()),
            ("max_input_bytes", self.max_input_bytes == 0),
            ("max_input_depth", self.max_input_depth == 0),
            ("max_output_bytes", self.max_output_bytes == 0),
            ("max_output_depth", self.max_output_depth == 0),
            ("max_chain_steps", self.max_chain_steps == 0),
            ("max_violations", self.max_violations == 0),
        ];
        match zero.iter().find(|(_, z)| *z) {
            Some((field, _)) => Err(Error::invalid_request(
                format!("limits.{field}"),
                "must be greater than 0",
            )),
            None => Ok(()),
        }
    }
}

/// Which side of a call a JSON check guards.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Side {
    Input,
    Output,
}

/// Checks size and depth in one walk that stops as soon as either limit
/// is passed, so a hostile 1 GB value costs no more than the limit.
pub(crate) fn check_json(
    value: &Value,
    max_bytes: usize,
    max_depth: usize,
    side: Side,
) -> Result<(), Error> {
    let mut budget = Budget {
        bytes: 0,
        max_bytes,
        max_depth,
    };
    match budget.walk(value, 0) {
        Ok(()) => Ok(()),
        Err(Over::Depth) => Err(Error::LimitExceeded {
            limit: match side {
                Side::Input => LimitKind::InputDepth,
                Side::Output => LimitKind::OutputDepth,
            },
            message: format!("JSON nesting deeper than {max_depth} levels"),
        }),
        Err(Over::Bytes) => Err(Error::LimitExceeded {
            limit: match side {
                Side::Input => LimitKind::InputBytes,
                Side::Output => LimitKind::OutputBytes,
            },
            message: format!("JSON larger than {max_bytes} bytes"),
        }),
    }
}

enum Over {
    Depth,
    Bytes,
}

struct Budget {
    bytes: usize,
    max_bytes: usize,
    max_depth: usize,
}

impl Budget {
    fn add(&mut self, n: usize) -> Result<(), Over> {
        self.bytes = self.bytes.saturating_add(n);
        if self.bytes > self.max_bytes {
            Err(Over::Bytes)
        } else {
            Ok(())
        }
    }

    /// Counts a lower bound of the compact JSON size (quotes, separators,
    /// unescaped string bytes), exact for ASCII without escapes or floats.
    fn walk(&mut self, v: &Value, depth: usize) -> Result<(), Over> {
        match v {
            Value::Null => self.add(4),
            Value::Bool(b) => self.add(if *b { 4 } else { 5 }),
            Value::Number(n) => self.add(number_len(n)),
            Value::String(s) => self.add(s.len() + 2),
            Value::Array(items) => {
                if depth >= self.max_depth {
                    return Err(Over::Depth);
                }
                self.add(2 + items.len().saturating_sub(1))?;
                items.iter().try_for_each(|i| self.walk(i, depth + 1))
            }
            Value::Object(map) => {
                if depth >= self.max_depth {
                    return Err(Over::Depth);
                }
                self.add(2 + map.len().saturating_sub(1))?;
                map.iter().try_for_each(|(k, v)| {
                    self.add(k.len() + 3)?;
                    self.walk(v, depth + 1)
                })
            }
        }
    }
}

/// Exact length of integers; a lower bound (3, as in `1.5`) for floats.
fn number_len(n: &serde_json::Number) -> usize {
    fn digits(mut x: u64) -> usize {
        let mut d = 1;
        while x >= 10 {
            x /= 10;
            d += 1;
        }
        d
    }
    if let Some(u) = n.as_u64() {
        digits(u)
    } else if let Some(i) = n.as_i64() {
        1 + digits(i.unsigned_abs())
    } else {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_deserialize_with_defaults_and_refuse_unknown_keys() {
        let limits: Limits =
            serde_json::from_value(json!({"default_timeout": "2m", "max_chain_steps": 3})).unwrap();
        assert_eq!(limits.default_timeout, Duration::from_secs(120));
        assert_eq!(limits.max_chain_steps, 3);
        assert_eq!(limits.max_input_bytes, Limits::default().max_input_bytes);
        let unknown = serde_json::from_value::<Limits>(json!({"max_input_byte": 1})).unwrap_err();
        assert!(unknown.to_string().contains("max_input_byte"), "{unknown}");
        let bad = serde_json::from_value::<Limits>(json!({"default_timeout": "soon"})).unwrap_err();
        assert!(bad.to_string().contains("expected a duration"), "{bad}");
    }

    #[test]
    fn validate_names_the_zero_limit() {
        let limits: Limits = serde_json::from_value(json!({"max_output_depth": 0})).unwrap();
        let err = limits.validate().unwrap_err();
        assert_eq!(err.field(), Some("limits.max_output_depth"));
        assert!(err.to_string().starts_with("invalid_request: "), "{err}");
        assert!(Limits::default().validate().is_ok());
    }

    fn nested(depth: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..depth {
            v = json!([v]);
        }
        v
    }

    #[test]
    fn depth_limit_counts_containers() {
        assert!(check_json(&nested(3), 1000, 3, Side::Input).is_ok());
        let err = check_json(&nested(4), 1000, 3, Side::Input).unwrap_err();
        assert!(err.to_string().contains("input_depth"), "{err}");
    }

    #[test]
    fn byte_limit_matches_compact_json_for_ascii() {
        let v = json!({"text": "hello", "n": [1, 2, true, null]});
        let exact = serde_json::to_string(&v).unwrap().len();
        assert!(check_json(&v, exact, 10, Side::Output).is_ok());
        let err = check_json(&v, exact - 1, 10, Side::Output).unwrap_err();
        assert!(err.to_string().contains("output_bytes"), "{err}");
    }
}

//! Durations and sizes written as text (`"500ms"`, `"30s"`, `"64MiB"`), as
//! command lines and configuration files write them; and the serde
//! functions that read them (`#[serde(deserialize_with = "...")]`), so a
//! configuration type deserializes itself in the crate that owns it.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Parses `250ms`, `30s`, `2m`, `1h` (a bare number means seconds): positive
/// and at most 7 days.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(toolexec::units::parse_duration("2m"), Ok(Duration::from_secs(120)));
/// assert!(toolexec::units::parse_duration("0s").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like 500ms, 30s or 2m, got {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("unknown unit {unit:?}: use ms, s, m or h")),
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 * 7.0 {
        return Err("duration must be positive and at most 7 days".into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses a size: plain bytes (`1048576`, `512B`) or a whole number of
/// KiB, MiB or GiB (`64MiB`, `8 mib`); never zero.
///
/// ```
/// assert_eq!(toolexec::units::parse_size("64MiB"), Ok(64 << 20));
/// assert!(toolexec::units::parse_size("64MB").is_err());
/// ```
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("expected a size like 65536, 512KiB, 64MiB or 1GiB, got {s:?}");
    let n: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "kib" => 10,
        "mib" => 20,
        "gib" => 30,
        "k" | "kb" | "m" | "mb" | "g" | "gb" => {
            return Err(format!(
                "{s:?}: write sizes in KiB, MiB or GiB (powers of 1024) or plain bytes"
            ));
        }
        _ => return Err(bad()),
    };
    if n == 0 {
        return Err(format!("{s:?}: the size must be positive"));
    }
    n.checked_mul(1 << shift)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Reads a duration written as text ([`parse_duration`]).
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map_err(serde::de::Error::custom)
}

/// Reads a size written as bytes (`1048576`) or text (`"64MiB"`,
/// [`parse_size`]); never zero.
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Bytes(u64),
        Text(String),
    }
    match Raw::deserialize(d)? {
        Raw::Bytes(0) => Err(serde::de::Error::custom("the size must be positive")),
        Raw::Bytes(n) => {
            usize::try_from(n).map_err(|_| serde::de::Error::custom("the size is too large"))
        }
        Raw::Text(s) => parse_size(&s).map_err(serde::de::Error::custom),
    }
}

/// [`size`] as a `u64`.
pub fn size_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    size(d).map(|n| n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1048576").unwrap(), 1 << 20);
        assert_eq!(parse_size("512B").unwrap(), 512);
        assert_eq!(parse_size("64KiB").unwrap(), 64 << 10);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("8 mib").unwrap(), 8 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert!(parse_size("64MB").unwrap_err().contains("KiB, MiB or GiB"));
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999999GiB").is_err());
    }

    #[derive(Debug, Deserialize)]
    struct Sized {
        #[serde(deserialize_with = "size")]
        n: usize,
        #[serde(deserialize_with = "duration")]
        d: Duration,
    }

    #[test]
    fn serde_reads_bytes_and_text() {
        let read = |v: serde_json::Value| serde_json::from_value::<Sized>(v);
        let s = read(serde_json::json!({"n": 4096, "d": "2s"})).unwrap();
        assert_eq!((s.n, s.d), (4096, Duration::from_secs(2)));
        let s = read(serde_json::json!({"n": "1KiB", "d": "5ms"})).unwrap();
        assert_eq!((s.n, s.d), (1024, Duration::from_millis(5)));
        let zero = read(serde_json::json!({"n": 0, "d": "1s"})).unwrap_err();
        assert!(zero.to_string().contains("positive"), "{zero}");
        let bad = read(serde_json::json!({"n": 1, "d": "soon"})).unwrap_err();
        assert!(bad.to_string().contains("duration"), "{bad}");
    }
}

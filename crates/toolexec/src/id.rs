//! Tool ids: `namespace:name` and `namespace:name:version`, parsed and printed here only.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, truncate_for_message};

/// Longest namespace or name, as MCP allows for tool names.
pub const MAX_NAME_LEN: usize = 128;
/// Longest version string.
pub const MAX_VERSION_LEN: usize = 64;

/// A borrowed, validated view of a tool id. Parsing never allocates, so the
/// run pipeline can resolve an id without touching the heap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ToolIdRef<'a> {
    /// `namespace:name`: the catalog key shared by every version of a tool.
    pub key: &'a str,
    /// The namespace part.
    pub namespace: &'a str,
    /// The name part.
    pub name: &'a str,
    /// The version part, if any.
    pub version: Option<&'a str>,
}

impl<'a> ToolIdRef<'a> {
    /// Parses `namespace:name[:version]`.
    ///
    /// ```
    /// let id = toolexec::ToolIdRef::parse("math:add:1.2").unwrap();
    /// assert_eq!((id.namespace, id.name, id.version), ("math", "add", Some("1.2")));
    /// assert_eq!(id.key, "math:add");
    /// assert!(toolexec::ToolIdRef::parse("math").is_err());
    /// ```
    pub fn parse(s: &'a str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::InvalidToolId {
            id: truncate_for_message(s, 200),
            reason: reason.to_owned(),
        };
        let Some(first) = s.find(':') else {
            return Err(bad("expected namespace:name or namespace:name:version"));
        };
        let namespace = &s[..first];
        let rest = &s[first + 1..];
        let (name, version, key_end) = match rest.find(':') {
            Some(second) => (
                &rest[..second],
                Some(&rest[second + 1..]),
                first + 1 + second,
            ),
            None => (rest, None, s.len()),
        };
        check_segment(namespace, "namespace", MAX_NAME_LEN).map_err(|r| bad(&r))?;
        check_segment(name, "name", MAX_NAME_LEN).map_err(|r| bad(&r))?;
        if let Some(v) = version {
            check_segment(v, "version", MAX_VERSION_LEN).map_err(|r| bad(&r))?;
        }
        Ok(ToolIdRef {
            key: &s[..key_end],
            namespace,
            name,
            version,
        })
    }

    /// An owned copy.
    pub fn to_owned_id(&self) -> ToolId {
        ToolId {
            namespace: self.namespace.to_owned(),
            name: self.name.to_owned(),
            version: self.version.map(str::to_owned),
        }
    }
}

/// Characters MCP allows in a tool name; namespaces and versions use the same set.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')
}

/// Checks one id segment (namespace, name or version).
pub(crate) fn check_segment(s: &str, what: &str, max: usize) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{what} is empty"));
    }
    if s.len() > max {
        return Err(format!("{what} is longer than {max} characters"));
    }
    if let Some(c) = s.chars().find(|c| !is_name_char(*c)) {
        return Err(format!(
            "{what} contains {c:?}; allowed are A-Z a-z 0-9 _ - ."
        ));
    }
    Ok(())
}

/// An owned tool id. Prints as `namespace:name` or `namespace:name:version`
/// and (de)serializes as that string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolId {
    namespace: String,
    name: String,
    version: Option<String>,
}

impl ToolId {
    /// Builds an id from parts, validating each.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        version: Option<String>,
    ) -> Result<Self, Error> {
        let id = ToolId {
            namespace: namespace.into(),
            name: name.into(),
            version,
        };
        // Validate through the single parser so the rules live in one place.
        ToolIdRef::parse(&id.to_string())?;
        Ok(id)
    }

    /// Parses `namespace:name[:version]`.
    pub fn parse(s: &str) -> Result<Self, Error> {
        ToolIdRef::parse(s).map(|r| r.to_owned_id())
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version, if any.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// `namespace:name`, the key shared by all versions.
    pub fn key(&self) -> String {
        format!("{}:{}", self.namespace, self.name)
    }
}

impl fmt::Display for ToolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.namespace, self.name)?;
        if let Some(v) = &self.version {
            write!(f, ":{v}")?;
        }
        Ok(())
    }
}

impl FromStr for ToolId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        ToolId::parse(s)
    }
}

impl Serialize for ToolId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ToolId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        ToolId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Orders version strings: dot-separated segments, numeric segments compared
/// as numbers (`1.10` > `1.9`), others lexically. Used to pick the newest
/// version when an id has none.
pub fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let mut xs = a.split(['.', '-', '+']);
    let mut ys = b.split(['.', '-', '+']);
    loop {
        match (xs.next(), ys.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => {
                let ord = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    (Ok(_), Err(_)) => std::cmp::Ordering::Greater,
                    (Err(_), Ok(_)) => std::cmp::Ordering::Less,
                    (Err(_), Err(_)) => x.cmp(y),
                };
                if ord.is_ne() {
                    return ord;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorCode;

    #[test]
    fn parses_and_prints_round_trip() {
        for s in ["math:add", "math:add:1.0.2", "a-b.c:d_e:v1-beta"] {
            assert_eq!(ToolId::parse(s).unwrap().to_string(), s);
        }
    }

    #[test]
    fn rejects_malformed_ids_with_a_reason() {
        let cases = [
            ("", "expected"),
            ("math", "expected"),
            (":add", "namespace is empty"),
            ("math:", "name is empty"),
            ("math:add:", "version is empty"),
            ("math:add:1:2", "version contains ':'"),
            ("ma th:add", "namespace contains ' '"),
            ("math:ädd", "name contains 'ä'"),
        ];
        for (input, reason) in cases {
            let err = ToolIdRef::parse(input).unwrap_err();
            assert_eq!(err.code(), ErrorCode::InvalidToolId, "{input}");
            assert!(err.to_string().contains(reason), "{input}: {err}");
        }
        let long = format!("ns:{}", "a".repeat(129));
        assert!(ToolIdRef::parse(&long).is_err());
        let ok = format!("ns:{}", "a".repeat(128));
        assert!(ToolIdRef::parse(&ok).is_ok());
    }

    #[test]
    fn huge_id_error_is_truncated() {
        let huge = "x".repeat(1 << 20);
        let err = ToolIdRef::parse(&huge).unwrap_err();
        assert!(err.to_string().len() < 400);
    }

    #[test]
    fn version_order_is_numeric_aware() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("1.10", "1.9"), Greater);
        assert_eq!(compare_versions("2", "10"), Less);
        assert_eq!(compare_versions("1.0", "1.0"), Equal);
        assert_eq!(compare_versions("1.0.1", "1.0"), Greater);
    }
}

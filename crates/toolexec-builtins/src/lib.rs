//! # toolexec-builtins
//!
//! The built-in tool catalog that `toolexec` serves with no configuration:
//! small, pure, well-documented tools an agent can rely on.
//!
//! Place in the workspace: a leaf on the core: tools registered into a
//! `Catalog` like any local tool (see ARCHITECTURE.md).
//!
//! | Group | Tools |
//! |-------|-------|
//! | [`Group::Math`] | `math:add`, `math:subtract`, `math:multiply`, `math:divide`, `math:power`, `math:sqrt`, `math:round`, `math:stats` |
//! | [`Group::Text`] | `text:case`, `text:split`, `text:regex_replace`, `text:word_count` |
//! | [`Group::Json`] | `json:query` (jq), `json:merge`, `json:diff`, `json:patch` |
//! | [`Group::Time`] | `time:now`, `time:convert` |
//! | [`Group::Hash`] | `hash:sha256`, `hash:sha512` |
//! | [`Group::Encoding`] | `encoding:base64_encode`, `encoding:base64_decode`, `encoding:uuid` |
//!
//! Every tool has typed arguments (unknown fields are rejected), an output
//! schema, MCP annotations, tags and docs with checked examples.
//!
//! `json:query` runs untrusted jq filters in a sandbox: a dedicated thread
//! with a guard that stops runaway recursion, loops and allocation (see the
//! `jq` module's docs).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use serde_json::json;
//! let exec = toolexec::Exec::builder().catalog(toolexec_builtins::catalog()).build();
//! let out = exec.run_tool("math:add", json!({"a": 2, "b": 3})).await.unwrap();
//! assert_eq!(out.value, json!({"result": 5.0}));
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use toolexec::{Catalog, LocalTool};

mod encoding;
mod hash;
mod jq;
mod json;
mod math;
mod text;
mod time;

/// A group of built-in tools; its name is the tools' namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Arithmetic and statistics (`math:*`).
    Math,
    /// Case conversion, splitting, regex replacement, counting (`text:*`).
    Text,
    /// jq queries, merge patches, JSON Patch diff and apply (`json:*`).
    Json,
    /// Current time and time zone conversion (`time:*`).
    Time,
    /// Cryptographic hashes (`hash:*`).
    Hash,
    /// Base64 and UUIDs (`encoding:*`).
    Encoding,
}

impl Group {
    /// Every group, in documentation order.
    pub const ALL: [Group; 6] = [
        Group::Math,
        Group::Text,
        Group::Json,
        Group::Time,
        Group::Hash,
        Group::Encoding,
    ];

    /// The group's name, which is also its tools' namespace.
    pub const fn as_str(self) -> &'static str {
        match self {
            Group::Math => "math",
            Group::Text => "text",
            Group::Json => "json",
            Group::Time => "time",
            Group::Hash => "hash",
            Group::Encoding => "encoding",
        }
    }

    fn tools(self) -> Vec<LocalTool> {
        match self {
            Group::Math => math::tools(),
            Group::Text => text::tools(),
            Group::Json => json::tools(),
            Group::Time => time::tools(),
            Group::Hash => hash::tools(),
            Group::Encoding => encoding::tools(),
        }
    }
}

impl fmt::Display for Group {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an unknown group name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownGroup(pub String);

impl fmt::Display for UnknownGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = Group::ALL.iter().map(|g| g.as_str()).collect();
        write!(
            f,
            "unknown tool group {:?}; expected one of {}",
            self.0,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownGroup {}

impl FromStr for Group {
    type Err = UnknownGroup;

    /// Parses a group name (`"math"`, ...), ignoring case and surrounding space.
    fn from_str(s: &str) -> Result<Self, UnknownGroup> {
        let name = s.trim();
        Group::ALL
            .into_iter()
            .find(|g| g.as_str().eq_ignore_ascii_case(name))
            .ok_or_else(|| UnknownGroup(s.to_owned()))
    }
}

/// Registers the tools of `groups` (duplicates in `groups` are ignored) into
/// `catalog`, all or none: if any tool id is already taken, nothing is
/// registered and the error is `already_exists`.
///
/// ```
/// use toolexec_builtins::Group;
/// let catalog = toolexec::Catalog::new();
/// toolexec_builtins::register(&catalog, &[Group::Math, Group::Hash]).unwrap();
/// assert!(catalog.get("math:add").is_ok());
/// assert!(catalog.get("json:query").is_err());
/// ```
pub fn register(catalog: &Catalog, groups: &[Group]) -> Result<(), toolexec::Error> {
    let mut groups = groups.to_vec();
    groups.sort();
    groups.dedup();
    let mut tools = Vec::new();
    for group in groups {
        for tool in group.tools() {
            tools.push(tool.build()?);
        }
    }
    catalog.register_many(tools, false).map(|_| ())
}

/// Registers every group into `catalog` (see [`register`]).
pub fn register_all(catalog: &Catalog) -> Result<(), toolexec::Error> {
    register(catalog, &Group::ALL)
}

/// A new catalog holding every built-in tool.
///
/// # Panics
///
/// Never in practice: the built-in definitions are checked by the tests.
pub fn catalog() -> Arc<Catalog> {
    let catalog = Catalog::new();
    register_all(&catalog).expect("the built-in tool definitions are valid");
    Arc::new(catalog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_parse_and_print() {
        for g in Group::ALL {
            assert_eq!(g.as_str().parse::<Group>().unwrap(), g);
            assert_eq!(g.to_string(), g.as_str());
        }
        assert_eq!(" JSON ".parse::<Group>().unwrap(), Group::Json);
        let err = "nope".parse::<Group>().unwrap_err();
        assert!(err.to_string().contains("math, text"), "{err}");
    }

    #[test]
    fn namespaces_match_groups() {
        for g in Group::ALL {
            for t in g.tools() {
                let (tool, _) = t.build().unwrap();
                assert_eq!(tool.namespace(), g.as_str());
            }
        }
    }

    #[test]
    fn registration_is_all_or_none() {
        let catalog = Catalog::new();
        register(&catalog, &[Group::Math, Group::Math]).unwrap();
        let n = catalog.len();
        let err = register(&catalog, &[Group::Text, Group::Math]).unwrap_err();
        assert_eq!(err.code().as_str(), "already_exists");
        assert_eq!(catalog.len(), n);
    }
}

//! The reversible mapping between toolexec ids and MCP tool names.
//!
//! MCP tool names allow `A-Z a-z 0-9 _ - .` (1 to 128 characters); toolexec
//! ids are `namespace:name[:version]` over the same characters plus `:`.
//! The gateway replaces each `:` with `__`:
//!
//! | toolexec id        | MCP name              |
//! |--------------------|-----------------------|
//! | `math:add`         | `math__add`           |
//! | `math:add:1.2.0`   | `math__add__1.2.0`    |
//!
//! Splitting an MCP name on `__` gives the id back, which is unambiguous as
//! long as no segment contains `__` or starts or ends with `_`. Tools whose id
//! breaks that rule, or whose MCP name would exceed 128 characters, are not
//! published directly (logged at debug level); with the meta-tools exposed
//! they stay reachable through `run_tool` with the id.
//!
//! A namespace configured unprefixed (`[[servers]] prefix = false`,
//! [`GatewayOptions::unprefixed`](super::GatewayOptions::unprefixed))
//! publishes `docs:search` as `search`. A name more than one tool claims
//! is published by none (see [`NameConflict`]).
//!
//! As in toolexec, an id without a version resolves to the newest version:
//! once `ns:name:2` exists, `ns__name` runs version 2 and an unversioned
//! `ns:name` entry is no longer listed (it could not be called).

use std::collections::HashSet;

use rmcp::ErrorData as McpError;
use serde_json::json;
use toolexec::ListRequest;

use super::meta::META_TOOLS;
use super::server::Gateway;

/// A name more than one thing claims. A meta-tool keeps its name;
/// otherwise nothing does: the name is left out of the list and calling it
/// is an error naming the claimants (a tool stays reachable by id through
/// `run_tool`). Nothing depends on who came first, so no server takes
/// over another's name by adding a tool or prompt at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameConflict {
    /// `tool` or `prompt`.
    pub kind: &'static str,
    /// The published name.
    pub name: String,
    /// Who claims it: tool ids, `server:prompt`, or `meta-tool` (first).
    pub claimants: Vec<String>,
}

/// How long [`Gateway::name_conflicts`] waits for the prompt lists: a
/// server that answers slowly or pages without end cannot hold it longer.
#[cfg(feature = "upstream")]
const PROMPT_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The separator that stands for `:`.
pub(super) const SEPARATOR: &str = "__";

/// Longest MCP tool name.
pub(super) const MAX_MCP_NAME: usize = 128;

/// The MCP name of a tool id, or `None` when the id cannot be published
/// directly (see the module docs).
///
/// ```
/// use toolexec_mcp::gateway::{id_to_mcp_name, mcp_name_to_id};
/// assert_eq!(id_to_mcp_name("math:add").as_deref(), Some("math__add"));
/// assert_eq!(id_to_mcp_name("math:add:1.2").as_deref(), Some("math__add__1.2"));
/// assert_eq!(mcp_name_to_id("math__add__1.2").as_deref(), Some("math:add:1.2"));
/// assert_eq!(id_to_mcp_name("a:b__c"), None);
/// ```
pub fn id_to_mcp_name(id: &str) -> Option<String> {
    let segments: Vec<&str> = id.split(':').collect();
    if !(2..=3).contains(&segments.len()) || !segments.iter().all(|s| segment_ok(s)) {
        return None;
    }
    let name = segments.join(SEPARATOR);
    (name.len() <= MAX_MCP_NAME).then_some(name)
}

/// The tool id an MCP name stands for, or `None` when the name is not of the
/// mapped form (a meta-tool name, for instance).
pub fn mcp_name_to_id(name: &str) -> Option<String> {
    let segments: Vec<&str> = name.split(SEPARATOR).collect();
    if !(2..=3).contains(&segments.len()) || !segments.iter().all(|s| segment_ok(s)) {
        return None;
    }
    Some(segments.join(":"))
}

/// The name under which the gateway publishes `id`: its MCP name, without
/// the namespace when that namespace is one of `unprefixed` (`[[servers]]
/// prefix = false`): `docs:search` → `search`, `docs:search:2` →
/// `search__2`.
pub(super) fn published_name(id: &str, unprefixed: &[String]) -> Option<String> {
    let segments: Vec<&str> = id.split(':').collect();
    if !(2..=3).contains(&segments.len()) || !segments.iter().all(|s| segment_ok(s)) {
        return None;
    }
    let name = if unprefixed.iter().any(|u| u == segments[0]) {
        segments[1..].join(SEPARATOR)
    } else {
        segments.join(SEPARATOR)
    };
    (name.len() <= MAX_MCP_NAME).then_some(name)
}

/// The ids a published name may stand for: its reading in each
/// `unprefixed` namespace, and the prefixed reading (`ns__name`) unless
/// its namespace is unprefixed. One that exists owns the name; several
/// make it ambiguous.
pub(super) fn candidate_ids(name: &str, unprefixed: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    if name.len() > MAX_MCP_NAME {
        return out;
    }
    let segments: Vec<&str> = name.split(SEPARATOR).collect();
    if (1..=2).contains(&segments.len()) && segments.iter().all(|s| segment_ok(s)) {
        let rest = segments.join(":");
        out.extend(unprefixed.iter().map(|ns| format!("{ns}:{rest}")));
    }
    if let Some(id) = mcp_name_to_id(name)
        && !unprefixed.iter().any(|u| id.split(':').next() == Some(u))
    {
        out.push(id);
    }
    out
}

impl Gateway {
    /// The name `id` is published under, or `None` when it is not
    /// published directly: it has no MCP name, or a meta-tool or another
    /// tool claims the name too (see [`NameConflict`]).
    pub(super) fn published(&self, id: &str) -> Option<String> {
        let unprefixed = &self.shared.options.unprefixed;
        let name = published_name(id, unprefixed)?;
        if unprefixed.is_empty() {
            // Every name is `ns__name`: no other tool and no meta-tool
            // (no `__` in theirs) can claim it, so no lookup is needed.
            return Some(name);
        }
        match self.owner(&name) {
            Some(Owner::Tool(owner)) if owner == id => Some(name),
            _ => None,
        }
    }

    /// The tool id a published name calls: `None` for no tool (or a
    /// meta-tool); an error naming the claimants for a name several tools
    /// claim.
    pub(super) fn resolve_name(&self, name: &str) -> Result<Option<String>, McpError> {
        match self.owner(name) {
            Some(Owner::Tool(id)) => Ok(Some(id)),
            Some(Owner::Ambiguous(ids)) => {
                // run_tool is a way out only when it is the meta-tool: under
                // `--expose all` the name may be an upstream's tool.
                let hint = if self.shared.options.expose.meta() {
                    "; call run_tool with the id"
                } else {
                    ""
                };
                Err(McpError::invalid_params(
                    format!(
                        "tool name {name:?} is ambiguous: {} all publish it (prefix = false){hint}",
                        ids.join(", ")
                    ),
                    Some(json!({"tool": name, "claimants": ids})),
                ))
            }
            Some(Owner::Meta) | None => Ok(None),
        }
    }

    fn owner(&self, name: &str) -> Option<Owner> {
        if self.shared.options.expose.meta() && META_TOOLS.contains(&name) {
            return Some(Owner::Meta);
        }
        let catalog = self.exec().catalog();
        let mut ids: Vec<String> = candidate_ids(name, &self.shared.options.unprefixed)
            .into_iter()
            .filter(|id| catalog.get(id).is_ok())
            .collect();
        match ids.len() {
            0 => None,
            1 => ids.pop().map(Owner::Tool),
            _ => Some(Owner::Ambiguous(ids)),
        }
    }

    /// Names more than one thing claims, now: with
    /// [`unprefixed`](super::GatewayOptions::unprefixed) namespaces, tools
    /// or prompts of the same name on two servers, or a tool named like a
    /// meta-tool (see [`NameConflict`]). Reads the unprefixed servers'
    /// prompt lists (for at most 30 s). `toolexec serve` refuses to start
    /// with any; servers connected later (lazy ones, reconnections) are
    /// not checked, and a shared name stays published by neither.
    pub async fn name_conflicts(&self) -> Vec<NameConflict> {
        #[cfg_attr(not(feature = "upstream"), allow(unused_mut))]
        let mut out = self.tool_conflicts();
        #[cfg(feature = "upstream")]
        if !self.shared.options.unprefixed.is_empty() {
            let cancel = tokio_util::sync::CancellationToken::new();
            let _stop = cancel.clone().drop_guard();
            let check = self.shared.passthrough.prompt_conflicts(cancel);
            match tokio::time::timeout(PROMPT_CHECK_TIMEOUT, check).await {
                Ok(conflicts) => out.extend(conflicts),
                Err(_) => tracing::warn!(
                    "the unprefixed servers' prompt lists were not read within {PROMPT_CHECK_TIMEOUT:?}; \
                     prompt names are not checked now (a shared one is still published by neither)"
                ),
            }
        }
        out
    }

    fn tool_conflicts(&self) -> Vec<NameConflict> {
        if !self.shared.options.expose.direct() {
            return Vec::new();
        }
        let catalog = self.exec().catalog();
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut cursor = None;
        loop {
            let Ok(page) = catalog.list(&ListRequest {
                namespace: None,
                cursor: cursor.take(),
                limit: Some(super::TOOLS_PAGE),
            }) else {
                break;
            };
            for entry in &page.tools {
                let id = entry.tool().id.to_string();
                let Some(name) = published_name(&id, &self.shared.options.unprefixed) else {
                    continue;
                };
                let claimants = match self.owner(&name) {
                    Some(Owner::Meta) => vec!["meta-tool".to_owned(), id],
                    Some(Owner::Ambiguous(ids)) => ids,
                    Some(Owner::Tool(_)) | None => continue,
                };
                if seen.insert(name.clone()) {
                    out.push(NameConflict {
                        kind: "tool",
                        name,
                        claimants,
                    });
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        out
    }
}

/// What a published name stands for.
enum Owner {
    Meta,
    Tool(String),
    /// Several tools: none is published under the name.
    Ambiguous(Vec<String>),
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.contains(SEPARATOR)
        && !s.starts_with('_')
        && !s.ends_with('_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for id in ["math:add", "math:add:1.2.0", "a-b.c:d_e:v1-beta", "x:y_z"] {
            let name = id_to_mcp_name(id).unwrap();
            assert_eq!(mcp_name_to_id(&name).as_deref(), Some(id), "{name}");
        }
    }

    #[test]
    fn refuses_ambiguous_ids() {
        for id in ["a:b__c", "a_:b", "a:_b", "a:b:_1", "a", "a:b:c:d", "a:b c"] {
            assert_eq!(id_to_mcp_name(id), None, "{id}");
        }
        let long = format!("ns:{}", "a".repeat(127));
        assert_eq!(id_to_mcp_name(&long), None);
    }

    #[test]
    fn unprefixed_names_round_trip() {
        let unprefixed = vec!["docs".to_owned(), "web".to_owned()];
        for (id, name) in [
            ("docs:search", "search"),
            ("docs:search:2", "search__2"),
            ("web:fetch", "fetch"),
            ("math:add", "math__add"),
        ] {
            assert_eq!(published_name(id, &unprefixed).as_deref(), Some(name));
            assert!(candidate_ids(name, &unprefixed).contains(&id.to_owned()));
        }
        // Unprefixed namespaces in order, then the prefixed reading.
        assert_eq!(
            candidate_ids("a__b", &unprefixed),
            ["docs:a:b", "web:a:b", "a:b"]
        );
        // A prefixed reading into an unprefixed namespace is not one.
        assert_eq!(
            candidate_ids("docs__search", &unprefixed),
            ["docs:docs:search", "web:docs:search"]
        );
        assert!(candidate_ids("x___y", &unprefixed).is_empty());
    }

    #[test]
    fn meta_tool_names_are_not_ids() {
        for name in ["search_tools", "run_tool", "run_chain", "x___y", "__a"] {
            assert_eq!(mcp_name_to_id(name), None, "{name}");
        }
    }
}

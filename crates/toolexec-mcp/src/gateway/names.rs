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
//! published directly (logged at debug level); they stay reachable through
//! the meta-tools (`run_tool` with the id).
//!
//! As in toolexec, an id without a version resolves to the newest version:
//! once `ns:name:2` exists, `ns__name` runs version 2 and an unversioned
//! `ns:name` entry is no longer listed (it could not be called).

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
    fn meta_tool_names_are_not_ids() {
        for name in ["search_tools", "run_tool", "run_chain", "x___y", "__a"] {
            assert_eq!(mcp_name_to_id(name), None, "{name}");
        }
    }
}

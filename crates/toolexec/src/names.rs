//! Mapping foreign names (MCP tool names, OpenAPI operation ids) to
//! toolexec tool names.
//!
//! Other systems allow names that toolexec ids do not (`/`, `:`, spaces,
//! names longer than [`MAX_NAME_LEN`]). The mapping is deterministic, so a
//! tool keeps its id across reconnects and restarts:
//!
//! 1. every character outside `[A-Za-z0-9_.-]` becomes `_`;
//! 2. a name longer than [`MAX_NAME_LEN`] bytes is cut and ends in `-` plus
//!    eight hex digits of a hash (FNV-1a) of the original name;
//! 3. when several original names map to the same name, the one that needs no
//!    mapping wins, else the smallest original name; the others are skipped.

use std::collections::BTreeMap;

use crate::id::{MAX_NAME_LEN, is_name_char};

/// Maps one foreign name to a valid toolexec name.
///
/// ```
/// assert_eq!(toolexec::names::map_name("files/read file:v2"), "files_read_file_v2");
/// ```
pub fn map_name(original: &str) -> String {
    let mut out: String = original
        .chars()
        .map(|c| if is_name_char(c) { c } else { '_' })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    if out.len() > MAX_NAME_LEN {
        // Every char is ASCII now, so any byte index is a char boundary.
        let suffix = format!("-{:08x}", fnv1a32(original.as_bytes()));
        out.truncate(MAX_NAME_LEN - suffix.len());
        out.push_str(&suffix);
    }
    out
}

/// 32-bit FNV-1a: tiny, stable across Rust versions and platforms.
fn fnv1a32(bytes: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in bytes {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The outcome of mapping a server's tool names.
#[derive(Debug, Default)]
pub struct NameMapping {
    /// Mapped name → original name, for the names that are kept.
    pub kept: BTreeMap<String, String>,
    /// `(original, mapped, winner)` for each name skipped because of a collision.
    pub collisions: Vec<(String, String, String)>,
}

/// Maps every name and resolves collisions deterministically (independent of
/// the order the server lists its tools in).
pub fn map_names<'a>(originals: impl IntoIterator<Item = &'a str>) -> NameMapping {
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for original in originals {
        groups.entry(map_name(original)).or_default().push(original);
    }
    let mut mapping = NameMapping::default();
    for (mapped, mut candidates) in groups {
        candidates.sort_unstable();
        candidates.dedup();
        let winner = candidates
            .iter()
            .copied()
            .find(|c| *c == mapped)
            .unwrap_or(candidates[0]);
        for c in &candidates {
            if *c != winner {
                mapping
                    .collisions
                    .push(((*c).to_owned(), mapped.clone(), winner.to_owned()));
            }
        }
        mapping.kept.insert(mapped, winner.to_owned());
    }
    mapping
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_names_are_kept() {
        assert_eq!(map_name("get-sum"), "get-sum");
        assert_eq!(map_name("a.b_c-D9"), "a.b_c-D9");
    }

    #[test]
    fn invalid_chars_become_underscores() {
        assert_eq!(map_name("files/read file:v2"), "files_read_file_v2");
        assert_eq!(map_name("héllo"), "h_llo");
        assert_eq!(map_name(""), "_");
    }

    #[test]
    fn long_names_are_cut_with_a_stable_hash() {
        let long = "x".repeat(300);
        let a = map_name(&long);
        assert_eq!(a.len(), MAX_NAME_LEN);
        assert_eq!(a, map_name(&long), "deterministic");
        let other = format!("{}y", "x".repeat(299));
        assert_ne!(a, map_name(&other), "different originals, different ids");
        assert!(crate::ToolIdRef::parse(&format!("ns:{a}")).is_ok());
    }

    #[test]
    fn collisions_are_resolved_independently_of_order() {
        for names in [
            ["dup:name", "dup/name", "ok"],
            ["ok", "dup/name", "dup:name"],
        ] {
            let m = map_names(names);
            assert_eq!(m.kept["dup_name"], "dup/name");
            assert_eq!(m.kept["ok"], "ok");
            assert_eq!(
                m.collisions,
                [(
                    "dup:name".to_owned(),
                    "dup_name".to_owned(),
                    "dup/name".to_owned()
                )]
            );
        }
        // A name that needs no mapping wins over mapped ones.
        let m = map_names(["a/b", "a_b"]);
        assert_eq!(m.kept["a_b"], "a_b");
    }
}

//! Tool allowlists: exact ids and `*`/`?` globs.

use crate::ToolIdRef;

/// Matches `text` against a glob where `*` matches any run of characters
/// (including none) and `?` exactly one. Everything else is literal.
///
/// ```
/// use toolexec::glob_match;
/// assert!(glob_match("math:*", "math:add"));
/// assert!(glob_match("*:*", "text:case"));
/// assert!(glob_match("hash:sha???", "hash:sha256"));
/// assert!(!glob_match("math:*", "mathx:add"));
/// ```
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    // Iterative matcher with single-star backtracking over UTF-8 bytes (no
    // allocation; `?` takes one whole character): linear in practice,
    // O(p·t) at worst, never exponential.
    let (mut pi, mut ti) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        let tl = utf8_len(t[ti]);
        if pi < p.len() && p[pi] == b'?' {
            pi += 1;
            ti += tl;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi..].starts_with(&t[ti..ti + tl]) {
            // `t[ti..ti + tl]` is one whole character, and `pi` is on a
            // character boundary, so this compares characters.
            pi += tl;
            ti += tl;
        } else if let Some((sp, st)) = star {
            let next = st + utf8_len(t[st]);
            pi = sp + 1;
            ti = next;
            star = Some((sp, next));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The length of the UTF-8 character that starts with byte `b`.
fn utf8_len(b: u8) -> usize {
    match b {
        0..0xE0 => 1 + usize::from(b >= 0xC0),
        0xE0..0xF0 => 3,
        _ => 4,
    }
}

/// A list of tool-id patterns; empty allows every tool.
///
/// ```
/// use toolexec::AllowList;
/// let allow = AllowList::new(&["math:*".to_string()]);
/// assert!(allow.permits("math:add:1.0"));
/// assert!(!allow.permits("text:case"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct AllowList {
    patterns: Vec<String>,
}

impl AllowList {
    /// An allowlist of these patterns.
    pub fn new(patterns: &[String]) -> Self {
        AllowList {
            patterns: patterns.to_vec(),
        }
    }

    /// True when every tool is allowed.
    pub fn is_open(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether `id` (as the script wrote it) may be called: a pattern must
    /// match the id itself or its `namespace:name` key.
    pub fn permits(&self, id: &str) -> bool {
        if self.is_open() {
            return true;
        }
        let key = ToolIdRef::parse(id).map(|r| r.key).ok();
        self.patterns
            .iter()
            .any(|p| glob_match(p, id) || key.is_some_and(|k| glob_match(p, k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_characters() {
        assert!(glob_match("caf?", "café"));
        assert!(glob_match("*é*", "résumé"));
        assert!(glob_match("r?sum?", "résumé"));
        assert!(!glob_match("caf??", "café"));
        assert!(glob_match("ns:*-?", "ns:ab-ü"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("?", ""));
        assert!(glob_match("a*b*c", "a🎉b🎉c"));
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("math:add", "math:add"));
        assert!(!glob_match("math:add", "math:addx"));
        assert!(glob_match("*:sha256", "hash:sha256"));
        assert!(!glob_match("?", ""));
    }

    #[test]
    fn versions_match_by_key() {
        let a = AllowList::new(&["math:add".into()]);
        assert!(a.permits("math:add"));
        assert!(a.permits("math:add:2.0"));
        assert!(!a.permits("math:subtract"));
        assert!(AllowList::new(&[]).permits("anything:at_all"));
    }
}

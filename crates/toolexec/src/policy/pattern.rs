//! A rule's glob, compiled once: exact text, or `*`-separated literal
//! pieces found in order (each with a substring searcher built once), or
//! the general matcher when the glob has `?`. Same meaning as
//! [`glob_match`](crate::glob_match).

use crate::glob_match;

#[derive(Debug, Clone)]
pub(super) struct Pattern {
    glob: String,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// No `*` or `?`.
    Exact,
    /// Only `*`: the text starts with `first`, ends with `last`, and holds
    /// `middle` in order between them.
    Pieces {
        first: String,
        middle: Vec<Box<[u8]>>,
        last: String,
    },
    /// Has `?`.
    Glob,
}

impl Pattern {
    pub(super) fn new(glob: &str) -> Self {
        Pattern {
            glob: glob.to_owned(),
            kind: Kind::of(glob),
        }
    }

    /// The glob as written.
    pub(super) fn glob(&self) -> &str {
        &self.glob
    }

    /// The text the glob is written as when it has no wildcard.
    pub(super) fn exact(&self) -> Option<&str> {
        match self.kind {
            Kind::Exact => Some(&self.glob),
            _ => None,
        }
    }

    pub(super) fn matches(&self, text: &str) -> bool {
        match &self.kind {
            Kind::Exact => self.glob == text,
            Kind::Glob => glob_match(&self.glob, text),
            Kind::Pieces {
                first,
                middle,
                last,
            } => {
                let t = text.as_bytes();
                if t.len() < first.len() + last.len()
                    || !same(&t[..first.len()], first.as_bytes())
                    || !same(&t[t.len() - last.len()..], last.as_bytes())
                {
                    return false;
                }
                let mut rest = &t[first.len()..t.len() - last.len()];
                for piece in middle {
                    match find(rest, piece) {
                        Some(i) => rest = &rest[i + piece.len()..],
                        None => return false,
                    }
                }
                true
            }
        }
    }
}

impl Kind {
    fn of(glob: &str) -> Self {
        if glob.contains('?') {
            return Kind::Glob;
        }
        let mut pieces: Vec<&str> = glob.split('*').collect();
        if pieces.len() == 1 {
            return Kind::Exact;
        }
        let last = pieces.pop().unwrap_or_default().to_owned();
        let first = pieces.remove(0).to_owned();
        Kind::Pieces {
            first,
            middle: pieces
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(|p| p.as_bytes().into())
                .collect(),
            last,
        }
    }
}

/// Byte equality in a plain loop: ids and URIs are short, and a libc
/// `memcmp` call per rule costs more than the bytes.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

/// The first position of `needle` (not empty) in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let n = needle.len();
    if n > hay.len() {
        return None;
    }
    (0..=hay.len() - n).find(|&i| hay[i] == needle[0] && same(&hay[i..i + n], needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compiled_globs_agree_with_glob_match() {
        let globs = [
            "*",
            "**",
            "a*",
            "*a",
            "a*b",
            "a*b*c",
            "*:write_*",
            "ns:*_file",
            "x",
            "",
            "a?c",
            "*é*",
            "ab*ab",
            "*aa*",
            "a**b",
        ];
        let texts = [
            "",
            "a",
            "b",
            "ab",
            "abc",
            "aXbYc",
            "acb",
            "ns:read_file",
            "ns:write_x",
            "ns:write_",
            "x",
            "café",
            "abab",
            "ab",
            "aa",
            "aab",
            "a:b:write_c",
        ];
        for g in globs {
            let p = Pattern::new(g);
            for t in texts {
                assert_eq!(p.matches(t), glob_match(g, t), "{g:?} vs {t:?}");
            }
        }
    }
}

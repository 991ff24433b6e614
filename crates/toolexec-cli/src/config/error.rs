//! The one error of configuration files, [`ConfigError`]: the file, the
//! line and column, the key and the message; and how a key is found in the
//! file ([`Document`]) for the checks that run after deserialization.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// A configuration error: file, line, column, key and message.
#[derive(Debug)]
pub(crate) struct ConfigError {
    file: PathBuf,
    position: Option<(usize, usize)>,
    key: String,
    message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid_request: config {}", self.file.display())?;
        if let Some((line, col)) = self.position {
            write!(f, ":{line}:{col}")?;
        }
        if !self.key.is_empty() {
            write!(f, ": key `{}`", self.key)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    /// The file could not be read.
    pub(super) fn unreadable(file: &Path, error: std::io::Error) -> Self {
        ConfigError {
            file: file.to_owned(),
            position: None,
            key: String::new(),
            message: format!("cannot read: {error}"),
        }
    }

    /// A syntax or type error the TOML deserializer reported, at `key`
    /// (empty for a syntax error).
    pub(super) fn toml(file: &Path, text: &str, key: String, error: toml::de::Error) -> Self {
        ConfigError {
            file: file.to_owned(),
            position: error.span().map(|s| line_col(text, s.start)),
            key,
            message: error.message().to_owned(),
        }
    }

    /// A value refused after deserialization, at the position of its key.
    pub(super) fn at(file: &Path, document: &Document<'_>, fault: Fault) -> Self {
        ConfigError {
            file: file.to_owned(),
            position: document
                .span(&fault.key)
                .map(|s| line_col(document.text, s.start)),
            key: fault.key,
            message: fault.message,
        }
    }
}

/// A value refused after deserialization: the file's key (`servers[0].url`,
/// `runtimes.dev[1]`) and why.
#[derive(Debug, PartialEq)]
pub(super) struct Fault {
    pub key: String,
    pub message: String,
}

impl Fault {
    pub(super) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Fault {
            key: key.into(),
            message: message.into(),
        }
    }

    /// A refusal by a runtime or server crate's own check, which names its
    /// field (`wasm.pool_instances`): reported at `table` (the file's table
    /// holding that type's keys, `runtimes.wasm`) with the file's key, the
    /// crate's field name renamed through `renames` (`max_memory_bytes` is
    /// written `max_memory`). The message is the bare one: the file's error
    /// carries the code.
    pub(super) fn refused(table: &str, error: toolexec::Error, renames: &[(&str, &str)]) -> Self {
        let (field, message) = error.into_field_message("");
        // The crate's own prefix (`wasm.`) stands for `table`.
        let field = field.split_once('.').map_or(field.as_str(), |(_, f)| f);
        let field = renames
            .iter()
            .find(|(from, _)| *from == field)
            .map_or(field, |(_, to)| to);
        let key = if field.is_empty() {
            table.to_owned()
        } else {
            format!("{table}.{field}")
        };
        Fault { key, message }
    }
}

/// The file as written, with the position of every key and value.
pub(super) struct Document<'t> {
    text: &'t str,
    root: Spanned<DeValue<'t>>,
}

impl<'t> Document<'t> {
    /// Parses `text`; a syntax error is the deserializer's (reported by
    /// the caller with its position).
    pub(super) fn parse(text: &'t str) -> Result<Self, toml::de::Error> {
        let table: Spanned<DeTable<'t>> = DeTable::parse(text)?;
        let span = table.span();
        Ok(Document {
            text,
            root: Spanned::new(span, DeValue::Table(table.into_inner())),
        })
    }

    /// Where `key` (`servers[0].env.TOKEN`) is written: its value, else the
    /// nearest enclosing table or array that is (a missing key is reported
    /// at the table that lacks it).
    pub(super) fn span(&self, key: &str) -> Option<Range<usize>> {
        let mut at = &self.root;
        let mut found = None;
        for step in steps(key) {
            let next = match step {
                Step::Key(name) => at.get_ref().get(name),
                Step::Index(i) => at.get_ref().get(i),
            };
            match next {
                Some(next) => {
                    at = next;
                    found = Some(at.span());
                }
                None => break,
            }
        }
        found
    }

    /// True when `key` is written in the file.
    pub(super) fn has(&self, key: &str) -> bool {
        let mut at = &self.root;
        for step in steps(key) {
            let next = match step {
                Step::Key(name) => at.get_ref().get(name),
                Step::Index(i) => at.get_ref().get(i),
            };
            match next {
                Some(next) => at = next,
                None => return false,
            }
        }
        true
    }
}

/// One step of a key path: a table key or an array index.
#[derive(Debug, PartialEq)]
enum Step<'k> {
    Key(&'k str),
    Index(usize),
}

/// `servers[0].env.K` as `servers`, `0`, `env`, `K`.
fn steps(key: &str) -> Vec<Step<'_>> {
    let mut steps = Vec::new();
    for part in key.split('.').filter(|p| !p.is_empty()) {
        let (name, mut rest) = part.split_at(part.find('[').unwrap_or(part.len()));
        if !name.is_empty() {
            steps.push(Step::Key(name));
        }
        while let Some(inner) = rest.strip_prefix('[') {
            let Some((index, after)) = inner.split_once(']') else {
                break;
            };
            match index.parse() {
                Ok(i) => steps.push(Step::Index(i)),
                Err(_) => break,
            }
            rest = after;
        }
    }
    steps
}

/// The 1-based line and column (in characters) of byte `offset`.
pub(super) fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_into_steps() {
        assert_eq!(
            steps("servers[0].env.K"),
            [
                Step::Key("servers"),
                Step::Index(0),
                Step::Key("env"),
                Step::Key("K")
            ]
        );
        assert_eq!(
            steps("runtimes.dev[12]"),
            [Step::Key("runtimes"), Step::Key("dev"), Step::Index(12)]
        );
        assert_eq!(steps(""), []);
    }

    #[test]
    fn keys_are_found_at_their_value_or_their_table() {
        let text = "[[servers]]\nname = \"a\"\nargs = [\"x\", \"y\"]\n\n[runtimes.wasm]\npool_instances = 0\n";
        let doc = Document::parse(text).unwrap();
        let at = |key: &str| doc.span(key).map(|s| line_col(text, s.start));
        assert_eq!(at("servers[0].name"), Some((2, 8)));
        assert_eq!(at("servers[0].args[1]"), Some((3, 14)));
        assert_eq!(
            at("servers[0].command"),
            Some((1, 1)),
            "the table lacking it"
        );
        assert_eq!(at("runtimes.wasm.pool_instances"), Some((6, 18)));
        assert_eq!(at("gateway.token"), None);
        assert!(doc.has("servers[0].args") && !doc.has("servers[1]"));
    }

    #[test]
    fn refusals_are_reported_under_the_file_key() {
        let e = toolexec::Error::invalid_request("wasm.max_memory_bytes", "too small");
        assert_eq!(
            Fault::refused("runtimes.wasm", e, &[("max_memory_bytes", "max_memory")]),
            Fault::new("runtimes.wasm.max_memory", "too small")
        );
        let e = toolexec::Error::invalid_request("limits.memory_bytes", "must be at least 1 MiB");
        assert_eq!(
            Fault::refused("commands[2].limits", e, &[("memory_bytes", "memory")]).key,
            "commands[2].limits.memory"
        );
    }
}

//! `$ref`s: in the document (`#/components/...`) and in local files next
//! to it (`common.yaml#/Pet`), followed for parameters, bodies and
//! responses, and kept as references for schemas (see
//! [`schema`](super::schema)), so recursive schemas stay finite.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::load::{self, Origin};

/// Most `$ref` hops followed for one object.
const MAX_HOPS: usize = 32;

/// Where a value lives: a document (index into [`Documents`]) and a JSON
/// pointer into it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Location {
    pub(crate) doc: usize,
    pub(crate) pointer: String,
}

/// The main document (index 0) and the local files its `$ref`s name,
/// read as they are first needed.
#[derive(Debug)]
pub(crate) struct Documents {
    docs: Vec<Loaded>,
    by_path: HashMap<PathBuf, usize>,
    /// The main document's directory, canonical: referenced files must be
    /// inside it.
    root: Option<PathBuf>,
}

#[derive(Debug)]
struct Loaded {
    value: Value,
    /// The file, when the document is one (relative refs need it).
    path: Option<PathBuf>,
    /// A short name for schema keys (`common` for `common.yaml`).
    stem: String,
}

impl Documents {
    pub(crate) fn new(main: Value, origin: &Origin) -> Self {
        let path = match origin {
            Origin::File(p) => p.canonicalize().ok(),
            Origin::Url(_) => None,
        };
        let root = path
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf);
        Documents {
            docs: vec![Loaded {
                value: main,
                path,
                stem: String::new(),
            }],
            by_path: HashMap::new(),
            root,
        }
    }

    pub(crate) fn main(&self) -> &Value {
        &self.docs[0].value
    }

    /// The key prefix of document `doc`: empty for the main one.
    pub(crate) fn stem(&self, doc: usize) -> &str {
        &self.docs[doc].stem
    }

    pub(crate) fn get(&self, at: &Location) -> Option<&Value> {
        self.docs[at.doc].value.pointer(&at.pointer)
    }

    /// Where `reference` (a `$ref` met in document `from`) points.
    pub(crate) fn target(&mut self, from: usize, reference: &str) -> Result<Location, String> {
        let (file, fragment) = match reference.split_once('#') {
            Some((file, fragment)) => (file, fragment),
            None => (reference, ""),
        };
        let pointer = percent_encoding::percent_decode_str(fragment)
            .decode_utf8()
            .map_err(|_| format!("$ref {reference:?}: the fragment is not UTF-8"))?
            .into_owned();
        if !pointer.is_empty() && !pointer.starts_with('/') {
            return Err(format!(
                "$ref {reference:?}: only JSON pointer fragments (#/...) are supported"
            ));
        }
        let doc = if file.is_empty() {
            from
        } else {
            self.file(from, file, reference)?
        };
        let at = Location { doc, pointer };
        if self.get(&at).is_none() {
            return Err(format!("$ref {reference:?} points at nothing"));
        }
        Ok(at)
    }

    fn file(&mut self, from: usize, file: &str, reference: &str) -> Result<usize, String> {
        if file.contains("://") {
            return Err(format!(
                "$ref {reference:?}: remote references are not followed"
            ));
        }
        let Some(base) = self.docs[from].path.as_deref() else {
            return Err(format!(
                "$ref {reference:?}: a document read from a URL can only refer within itself"
            ));
        };
        // Only files in the main document's directory or below: a document
        // must not read (and show, through describe) any file it names.
        let root = self.root.as_deref().ok_or_else(|| {
            format!("$ref {reference:?}: the document's directory cannot be resolved")
        })?;
        let path = base
            .parent()
            .unwrap_or(Path::new("."))
            .join(file)
            .canonicalize()
            .map_err(|e| format!("$ref {reference:?}: {e}"))?;
        if !path.starts_with(root) {
            return Err(format!(
                "$ref {reference:?}: only files next to the document (or below) are read"
            ));
        }
        if let Some(&i) = self.by_path.get(&path) {
            return Ok(i);
        }
        let text = load::read_file(&path).map_err(|e| format!("$ref {reference:?}: {e}"))?;
        let value = load::parse(&text, &path.display().to_string()).map_err(|e| e.to_string())?;
        let stem = path
            .file_stem()
            .map_or_else(|| "doc".to_owned(), |s| s.to_string_lossy().into_owned());
        self.docs.push(Loaded {
            value,
            path: Some(path.clone()),
            stem,
        });
        let i = self.docs.len() - 1;
        self.by_path.insert(path, i);
        Ok(i)
    }

    /// `value` (met in document `doc`), its `$ref`s followed to the object
    /// they name; returns the document it was found in too.
    pub(crate) fn deref(&mut self, doc: usize, value: &Value) -> Result<(usize, Value), String> {
        let mut doc = doc;
        let mut value = value.clone();
        for _ in 0..MAX_HOPS {
            let Some(reference) = value.get("$ref").and_then(Value::as_str) else {
                return Ok((doc, value));
            };
            let at = self.target(doc, reference)?;
            doc = at.doc;
            value = self.get(&at).cloned().unwrap_or(Value::Null);
        }
        Err(format!("more than {MAX_HOPS} $ref hops (a cycle?)"))
    }
}

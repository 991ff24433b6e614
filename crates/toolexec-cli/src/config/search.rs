//! `[search]`: the embedding model of semantic and hybrid tool search.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use toolexec::search::SearchMode;

use super::error::Fault;
use super::values::relative_to;

/// `[search]` as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchTable {
    model: Option<PathBuf>,
    mode: Option<String>,
    cache: Option<PathBuf>,
    precision: Option<String>,
}

/// `[search]`, resolved.
#[derive(Debug, Clone, Default)]
pub(crate) struct SearchConfig {
    /// A sentence-transformers model directory.
    pub model: Option<PathBuf>,
    /// The default mode, when given.
    pub mode: Option<SearchMode>,
    /// Where embeddings are cached (default: the user's cache directory).
    pub cache: Option<PathBuf>,
    /// Run the model in 32-bit floats (`precision = "f32"`) rather than
    /// the default 8-bit integers where the CPU has them natively.
    pub exact: bool,
}

impl SearchTable {
    pub(super) fn resolve(self, base: &Path) -> Result<SearchConfig, Fault> {
        let mode = match self.mode.as_deref() {
            None => None,
            Some(m) => Some(SearchMode::parse(m).ok_or_else(|| {
                Fault::new(
                    "search.mode",
                    format!("{m:?} is not lexical, semantic or hybrid"),
                )
            })?),
        };
        if mode.is_some_and(|m| m != SearchMode::Lexical) && self.model.is_none() {
            return Err(Fault::new(
                "search.mode",
                "semantic and hybrid search need search.model (a sentence-transformers model directory)",
            ));
        }
        let exact = match self.precision.as_deref() {
            None | Some("int8") => false,
            Some("f32") => true,
            Some(p) => {
                return Err(Fault::new(
                    "search.precision",
                    format!("{p:?} is not int8 or f32"),
                ));
            }
        };
        if self.model.is_some() && !cfg!(feature = "embeddings") {
            return Err(Fault::new(
                "search.model",
                "this toolexec was built without the embeddings feature",
            ));
        }
        Ok(SearchConfig {
            model: self.model.map(|p| relative_to(base, &p)),
            mode,
            cache: self.cache.map(|p| relative_to(base, &p)),
            exact,
        })
    }
}

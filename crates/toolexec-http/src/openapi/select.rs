//! Which operations of a document become tools: by tag, path glob or
//! operationId, included and excluded.

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde_json::Value;
use toolexec::Error;

/// Operations to import: those any `include` criterion matches (all when
/// `include` is empty), minus those any `exclude` criterion matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    /// Operations to keep.
    pub include: Filter,
    /// Operations to leave out, even when included.
    pub exclude: Filter,
}

/// Criteria matching operations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Operations with any of these tags.
    pub tags: Vec<String>,
    /// Operations whose path template matches any of these globs
    /// (`/pets/**`, `/users/*/repos`).
    pub paths: Vec<String>,
    /// Operations with any of these operationIds.
    pub operations: Vec<String>,
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.tags.is_empty() && self.paths.is_empty() && self.operations.is_empty()
    }
}

/// A [`Selection`] with its globs compiled.
pub(crate) struct Selector {
    include: Compiled,
    exclude: Compiled,
}

struct Compiled {
    filter: Filter,
    paths: GlobSet,
}

impl Selection {
    /// Compiles the globs; a bad one is `invalid_request` at
    /// `include.paths[i]` or `exclude.paths[i]`.
    pub(crate) fn compile(&self) -> Result<Selector, Error> {
        Ok(Selector {
            include: Compiled::new(&self.include, "include")?,
            exclude: Compiled::new(&self.exclude, "exclude")?,
        })
    }
}

impl Compiled {
    fn new(filter: &Filter, field: &str) -> Result<Self, Error> {
        let mut set = GlobSetBuilder::new();
        for (i, glob) in filter.paths.iter().enumerate() {
            let glob = Glob::new(glob).map_err(|e| {
                Error::invalid_request(format!("{field}.paths[{i}]"), e.to_string())
            })?;
            set.add(glob);
        }
        let paths = set
            .build()
            .map_err(|e| Error::invalid_request(format!("{field}.paths"), e.to_string()))?;
        Ok(Compiled {
            filter: filter.clone(),
            paths,
        })
    }

    fn matches(&self, path: &str, operation: &Value) -> bool {
        let id = operation.get("operationId").and_then(Value::as_str);
        let tags = operation.get("tags").and_then(Value::as_array);
        self.paths.is_match(path)
            || id.is_some_and(|id| self.filter.operations.iter().any(|o| o == id))
            || tags
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .any(|t| {
                    self.filter
                        .tags
                        .iter()
                        .any(|want| want.eq_ignore_ascii_case(t))
                })
    }
}

impl Selector {
    /// Whether the operation at `path` is imported.
    pub(crate) fn includes(&self, path: &str, operation: &Value) -> bool {
        (self.include.filter.is_empty() || self.include.matches(path, operation))
            && !self.exclude.matches(path, operation)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn include_then_exclude() {
        let s = Selection {
            include: Filter {
                tags: vec!["Pets".into()],
                paths: vec!["/stores/**".into()],
                ..Filter::default()
            },
            exclude: Filter {
                operations: vec!["deletePet".into()],
                ..Filter::default()
            },
        }
        .compile()
        .unwrap();
        assert!(s.includes(
            "/pets",
            &json!({"tags": ["pets"], "operationId": "listPets"})
        ));
        assert!(!s.includes(
            "/pets/{id}",
            &json!({"tags": ["pets"], "operationId": "deletePet"})
        ));
        assert!(s.includes("/stores/1/orders", &json!({})));
        assert!(!s.includes("/users", &json!({"tags": ["users"]})));
        assert!(
            Selection::default()
                .compile()
                .unwrap()
                .includes("/x", &json!({}))
        );
    }

    #[test]
    fn bad_globs_name_their_field() {
        let s = Selection {
            exclude: Filter {
                paths: vec!["/ok".into(), "/bad[".into()],
                ..Filter::default()
            },
            ..Selection::default()
        };
        assert_eq!(s.compile().err().unwrap().field(), Some("exclude.paths[1]"));
    }
}

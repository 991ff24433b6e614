//! The catalog's semantic and hybrid search machinery: background
//! embedding, incremental updates, modes, filters and failures. The model
//! here is a small deterministic embedder (hashed words), since the core
//! cannot depend on candle; `toolexec-embed`'s tests run the real model
//! through the same paths.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use toolexec::search::{Embedder, SearchMode};
use toolexec::{Catalog, Error, ErrorCode, ToolError};

/// Words hashed into 64 dimensions, normalised: passages sharing words are
/// near. Counts the passages it embedded; can be made to fail.
#[derive(Default)]
struct Words {
    embedded: AtomicUsize,
    fail: AtomicBool,
}

impl Embedder for Words {
    fn model_id(&self) -> &str {
        "words-64"
    }

    fn embed(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(Error::backend_unavailable(
                "embeddings",
                "the model is broken",
            ));
        }
        self.embedded.fetch_add(passages.len(), Ordering::SeqCst);
        Ok(passages
            .iter()
            .map(|p| {
                let mut v = vec![0.0f32; 64];
                for w in p
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| w.len() > 2)
                {
                    let h = w
                        .bytes()
                        .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
                    v[(h % 64) as usize] += 1.0;
                }
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.iter().map(|x| x / norm).collect()
            })
            .collect())
    }
}

fn tool(catalog: &Catalog, id: &str, description: &str) {
    catalog
        .tool(id, description, |_: serde_json::Value| async {
            Ok::<_, ToolError>(json!(null))
        })
        .unwrap();
}

fn ids(results: &[toolexec::SearchResult]) -> Vec<String> {
    results
        .iter()
        .map(|r| r.tool.tool().id.to_string())
        .collect()
}

#[test]
fn without_a_model_search_is_lexical_and_says_so() {
    let catalog = Catalog::new();
    tool(&catalog, "weather:forecast", "Daily forecast for a city");
    assert_eq!(catalog.default_search_mode(), SearchMode::Lexical);
    assert!(catalog.embedding_status().is_none());
    let e = catalog
        .search_with("forecast", 5, None, SearchMode::Semantic)
        .unwrap_err();
    assert_eq!(e.field(), Some("mode"), "{e}");
    assert_eq!(
        catalog
            .set_search_mode(SearchMode::Hybrid)
            .unwrap_err()
            .field(),
        Some("mode")
    );
    assert_eq!(
        ids(&catalog.search("forecast", 5, None)),
        ["weather:forecast"]
    );
}

#[test]
fn tools_are_embedded_in_the_background_and_kept_up_to_date() {
    let catalog = Catalog::new();
    tool(
        &catalog,
        "weather:forecast",
        "Daily forecast with temperature and rain for a city",
    );
    tool(
        &catalog,
        "money:convert",
        "Convert an amount between currencies at today's rate",
    );
    let words = Arc::new(Words::default());
    catalog.set_embedder(words.clone()).unwrap();
    assert_eq!(catalog.default_search_mode(), SearchMode::Hybrid);
    assert!(catalog.wait_for_embeddings(Duration::from_secs(30)));
    let status = catalog.embedding_status().unwrap();
    assert_eq!(
        (status.embedded, status.pending, status.failures),
        (2, 0, 0)
    );
    assert_eq!(status.model, "words-64");

    // Found by meaning (shared words), not by its name.
    let found = catalog
        .search_with("rain temperature city", 1, None, SearchMode::Semantic)
        .unwrap();
    assert_eq!(ids(&found), ["weather:forecast"]);
    // Registered later: embedded too.
    tool(
        &catalog,
        "files:read",
        "Read a file from disk and return its text",
    );
    assert!(catalog.wait_for_embeddings(Duration::from_secs(30)));
    assert_eq!(catalog.embedding_status().unwrap().embedded, 3);
    let found = catalog
        .search_with("disk file text", 1, None, SearchMode::Semantic)
        .unwrap();
    assert_eq!(ids(&found), ["files:read"]);

    // Replaced with another description: embedded again, from the new text.
    let before = words.embedded.load(Ordering::SeqCst);
    catalog.unregister("files:read").unwrap();
    assert_eq!(catalog.embedding_status().unwrap().embedded, 2);
    tool(&catalog, "files:read", "Fetch a web page over the network");
    assert!(catalog.wait_for_embeddings(Duration::from_secs(30)));
    assert!(words.embedded.load(Ordering::SeqCst) > before);
    let found = catalog
        .search_with("web page network", 1, None, SearchMode::Semantic)
        .unwrap();
    assert_eq!(ids(&found), ["files:read"]);

    // Filters and the exact id hold in every mode.
    for mode in [
        SearchMode::Lexical,
        SearchMode::Semantic,
        SearchMode::Hybrid,
    ] {
        let only = catalog
            .search_with("rain city rate", 5, Some("money"), mode)
            .unwrap();
        assert!(
            ids(&only).iter().all(|id| id.starts_with("money:")),
            "{mode}: {:?}",
            ids(&only)
        );
        let exact = catalog.search_with("money:convert", 3, None, mode).unwrap();
        assert_eq!(ids(&exact)[0], "money:convert", "{mode}");
    }
    catalog.set_search_mode(SearchMode::Semantic).unwrap();
    assert_eq!(catalog.default_search_mode(), SearchMode::Semantic);
}

#[test]
fn a_failing_model_leaves_lexical_search_working() {
    let catalog = Catalog::new();
    tool(&catalog, "weather:forecast", "Daily forecast for a city");
    let words = Arc::new(Words::default());
    words.fail.store(true, Ordering::SeqCst);
    catalog.set_embedder(words.clone()).unwrap();
    assert!(catalog.wait_for_embeddings(Duration::from_secs(30)));
    let status = catalog.embedding_status().unwrap();
    assert_eq!(status.embedded, 0);
    assert!(status.failures >= 1);
    // The default (hybrid) answers lexically; asking for semantic is a
    // clear error, never a panic.
    assert_eq!(
        ids(&catalog.search("forecast", 5, None)),
        ["weather:forecast"]
    );
    let e = catalog
        .search_with("forecast", 5, None, SearchMode::Semantic)
        .unwrap_err();
    assert_eq!(e.code(), ErrorCode::BackendUnavailable, "{e}");
}

//! The sentence model and its cache, with the real all-MiniLM-L6-v2
//! (`$TOOLEXEC_EMBED_MODEL`).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use toolexec::Error;
use toolexec::search::Embedder;
use toolexec_embed::{CachedEmbedder, SentenceModel};
use toolexec_testkit::TempDir;

fn load(test: &str) -> Option<SentenceModel> {
    let dir = toolexec_testkit::dep(test, "TOOLEXEC_EMBED_MODEL")?;
    Some(SentenceModel::load(Path::new(&dir)).expect("load"))
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn a_missing_or_broken_model_is_a_clear_error() {
    let dir = TempDir::new("embed-missing");
    let e = SentenceModel::load(&dir.path().join("nope")).unwrap_err();
    assert_eq!(e.field(), Some("search.model"), "{e}");
    assert!(e.to_string().contains("config.json"), "{e}");
    dir.write("config.json", "{\"not\": \"bert\"}");
    let e = SentenceModel::load(dir.path()).unwrap_err();
    assert_eq!(e.field(), Some("search.model"), "{e}");
}

#[test]
fn vectors_are_unit_length_ordered_and_meaningful() {
    let Some(model) = load("vectors_are_unit_length_ordered_and_meaningful") else {
        return;
    };
    assert_eq!(model.dimension(), 384);
    let passages = [
        "Daily weather forecast for a city: temperature, wind and rain",
        "what will the weather be like tomorrow in Paris",
        "Convert an amount of money between two currencies",
        "a much longer passage about reading files from a disk, listing directories, \
         checking permissions and returning the text of each file that matches a pattern",
    ];
    let vectors = model.embed(&passages).unwrap();
    for v in &vectors {
        let norm = cosine(v, v).sqrt();
        assert!((norm - 1.0).abs() < 1e-3, "{norm}");
    }
    // Batched by length inside, returned in the passages' order.
    for (i, p) in passages.iter().enumerate() {
        let alone = model.embed(&[p]).unwrap();
        assert!(cosine(&alone[0], &vectors[i]) > 0.999, "passage {i}");
    }
    assert!(cosine(&vectors[0], &vectors[1]) > cosine(&vectors[0], &vectors[2]) + 0.2);
}

/// Counts what reaches the model.
struct Counting<E>(E, Arc<AtomicUsize>);

impl<E: Embedder> Embedder for Counting<E> {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }

    fn embed(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        self.1.fetch_add(passages.len(), Ordering::SeqCst);
        self.0.embed(passages)
    }
}

#[test]
fn the_cache_embeds_each_passage_once_and_survives_a_torn_write() {
    let Some(model) = load("the_cache_embeds_each_passage_once_and_survives_a_torn_write") else {
        return;
    };
    let dir = TempDir::new("embed-cache");
    let count = Arc::new(AtomicUsize::new(0));
    let cached = CachedEmbedder::new(Counting(model, count.clone()), dir.path());
    let first = cached.embed(&["alpha tool", "beta tool"]).unwrap();
    let again = cached
        .embed(&["beta tool", "alpha tool", "gamma tool"])
        .unwrap();
    assert_eq!(again[1], first[0]);
    assert_eq!(
        count.load(Ordering::SeqCst),
        3,
        "each passage reached the model once"
    );
    let path = cached.path().to_owned();
    // A crash mid-append leaves part of a record.
    let len = std::fs::metadata(&path).unwrap().len();
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&[7u8; 100]).unwrap();
    }
    let model = load("the_cache_embeds_each_passage_once_and_survives_a_torn_write").unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let reopened = CachedEmbedder::new(Counting(model, count.clone()), dir.path());
    assert_eq!(reopened.cached(), 3);
    let v = reopened.embed(&["alpha tool", "delta tool"]).unwrap();
    assert_eq!(v[0], first[0]);
    assert_eq!(count.load(Ordering::SeqCst), 1, "only the new passage");
    // The torn record was cut off before the new one was appended.
    assert!(std::fs::metadata(&path).unwrap().len() > len);
    let model = load("the_cache_embeds_each_passage_once_and_survives_a_torn_write").unwrap();
    let third = CachedEmbedder::new(model, dir.path());
    assert_eq!(third.cached(), 4);
}

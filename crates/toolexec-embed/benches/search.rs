//! Search latency with 10,000 tools, and the time to make them searchable.
//!
//! The tools are StableToolBench's 2,479 (`../shared/retrieval`) in four
//! namespaces (9,916 distinct passages). Before the timed runs, the setup
//! prints how long embedding took: cold (an empty cache) the first time
//! this runs on a machine, then warm (every vector from the cache under
//! `$TOOLEXEC_BENCH_CACHE`, default `~/.cache/toolexec/bench-embeddings`).
//!
//! - `search/lexical`, `search/hybrid`, `search/semantic`: one query of one
//!   sentence through `Catalog::search_with` (hybrid and semantic include
//!   embedding the query).
//! - `search/hybrid_long`: a StableToolBench-style request of three
//!   sentences (each embedded too).
//! - `embed/query`: embedding the one-sentence query alone, at the default
//!   precision (int8 where the CPU has VNNI); `embed/query_f32` in f32.
//!
//! `cargo bench -p toolexec-embed --bench search` (needs
//! `$TOOLEXEC_EMBED_MODEL` from `scripts/install-test-deps.sh`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use toolexec::search::{Embedder, SearchMode};
use toolexec::{Backend, BoxFuture, Call, Catalog, Error, ToolOutput};
use toolexec_embed::{CachedEmbedder, Precision, SentenceModel};

const QUERY: &str = "what will the weather be like in Paris tomorrow";
const LONG: &str = "I'm planning a trip to Paris next week. Can you tell me the weather \
                    forecast there? Also convert 500 US dollars to euros for me.";

/// Never called: the tools are only searched.
struct Unused;

impl Backend for Unused {
    fn kind(&self) -> &str {
        "unused"
    }

    fn call<'a>(&'a self, _: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, Error>> {
        Box::pin(async { Err(Error::backend_unavailable("unused", "search only")) })
    }
}

fn catalog(model_dir: &Path, cache: &Path) -> Catalog {
    let Some((tools, _)) = toolexec_testkit::retrieval::load("search bench") else {
        panic!("the retrieval set is needed");
    };
    let catalog = Catalog::new();
    let mut batch = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for copy in 0..4 {
        for t in &tools {
            let id = format!(
                "{}{copy}:{}",
                toolexec::names::map_name(&t.namespace),
                toolexec::names::map_name(&t.name)
            );
            if !seen.insert(id.clone()) {
                continue;
            }
            let properties: serde_json::Map<String, serde_json::Value> = t
                .params
                .iter()
                .map(|(n, d)| {
                    (
                        n.clone(),
                        serde_json::json!({"type": "string", "description": d}),
                    )
                })
                .collect();
            let Ok(tool) = toolexec::Tool::builder(&id)
                .description(&t.description)
                .input_schema(serde_json::json!({"type": "object", "properties": properties}))
                .build()
            else {
                continue;
            };
            batch.push((tool, Arc::new(Unused) as Arc<dyn Backend>));
        }
    }
    catalog.register_many(batch, false).unwrap();
    let started = Instant::now();
    let model = SentenceModel::load(model_dir).unwrap();
    let embedder = CachedEmbedder::new(model, cache);
    let cached = embedder.cached();
    catalog.set_embedder(Arc::new(embedder)).unwrap();
    assert!(catalog.wait_for_embeddings(Duration::from_secs(4 * 3600)));
    println!(
        "{} tools searchable in {:.2?} (model load included; {} vectors were cached)",
        catalog.len(),
        started.elapsed(),
        cached
    );
    catalog
}

fn benches(c: &mut Criterion) {
    let Ok(model_dir) = std::env::var("TOOLEXEC_EMBED_MODEL") else {
        eprintln!("SKIPPED: search bench: TOOLEXEC_EMBED_MODEL is not set");
        return;
    };
    let cache = std::env::var_os("TOOLEXEC_BENCH_CACHE").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/toolexec/bench-embeddings")
        },
        PathBuf::from,
    );
    let catalog = catalog(Path::new(&model_dir), &cache);
    let model = SentenceModel::load(Path::new(&model_dir)).unwrap();

    let mut group = c.benchmark_group("search");
    for (name, mode, query) in [
        ("lexical", SearchMode::Lexical, QUERY),
        ("semantic", SearchMode::Semantic, QUERY),
        ("hybrid", SearchMode::Hybrid, QUERY),
        ("hybrid_long", SearchMode::Hybrid, LONG),
    ] {
        group.bench_function(name, |b| {
            b.iter(|| catalog.search_with(query, 10, None, mode).unwrap())
        });
    }
    group.finish();
    c.bench_function("embed/query", |b| b.iter(|| model.embed(&[QUERY]).unwrap()));
    let exact = SentenceModel::load_with(Path::new(&model_dir), Precision::F32).unwrap();
    c.bench_function("embed/query_f32", |b| {
        b.iter(|| exact.embed(&[QUERY]).unwrap())
    });
}

criterion_group!(search, benches);
criterion_main!(search);

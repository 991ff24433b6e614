//! Semantic and hybrid search quality on the StableToolBench
//! tool-retrieval set, with all-MiniLM-L6-v2 (`$TOOLEXEC_EMBED_MODEL`,
//! installed by `scripts/install-test-deps.sh`).
//!
//! `hybrid_beats_lexical` asserts hybrid search keeps its recorded figures
//! and beats lexical search; `fusion_variants` (ignored; `--ignored
//! --nocapture`) prints the ablations behind the fusion, and the chosen
//! fusion per StableToolBench group (G1 queries need one RapidAPI tool's
//! endpoints, G2 and G3 several tools'); `sentence_variants` (ignored too)
//! the ablations that fuse each sentence of a query on its own;
//! `feedback_variants` (ignored) pseudo-relevance feedback, and
//! `named_namespace_variants` (ignored) a bonus for the namespaces a query
//! names; neither adopted.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use toolexec::search::{
    Embedder, SearchIndex, SearchMode, SearchQuery, VectorIndex, fuse, passage, query_passages,
    with_sentences,
};
use toolexec::{Backend, BoxFuture, Call, Catalog, Error, ToolOutput};
use toolexec_embed::{CachedEmbedder, Precision, SentenceModel};
use toolexec_testkit::retrieval::{self, FULL, Metrics, Query, Tool, header, row};

/// Hybrid's figures through the catalog in f32, as recorded in
/// BENCHMARKS.md (issue 17); the tests fail below them (less a rounding
/// margin).
const HYBRID_F32: Metrics = Metrics {
    r1: 0.3605,
    r5: 0.7942,
    r10: 0.8680,
    hit1: 0.7712,
    hit5: 0.9294,
    ndcg10: 0.7953,
};

/// The same in int8 (the default where the CPU has VNNI).
const HYBRID_INT8: Metrics = Metrics {
    r1: 0.3585,
    r5: 0.7930,
    r10: 0.8677,
    hit1: 0.7673,
    hit5: 0.9281,
    ndcg10: 0.7946,
};

type Hits = Vec<(Arc<str>, f32)>;

struct Ranked {
    lexical: Vec<Hits>,
    semantic: Vec<Hits>,
    /// Best similarity of any sentence of the query (and the whole query).
    sentences: Vec<Hits>,
    /// Each sentence's own lexical and semantic rankings (none for a
    /// one-sentence query).
    parts: Vec<Vec<(Hits, Hits)>>,
    /// Every tool's vector, by id, and the index over them.
    vectors: HashMap<Arc<str>, Vec<f32>>,
    index: VectorIndex,
    /// Each query's whole-text vector.
    query_vectors: Vec<Vec<f32>>,
}

/// Lexical and semantic rankings (top `depth`) of every query.
fn rank(test: &str, tools: &[Tool], queries: &[Query], depth: usize) -> Option<Ranked> {
    let dir = toolexec_testkit::dep(test, "TOOLEXEC_EMBED_MODEL")?;
    let model = SentenceModel::load(Path::new(&dir)).expect("load the model");
    let cache = std::env::temp_dir().join("toolexec-embed-eval-cache");
    let model = CachedEmbedder::new(model, &cache);
    let mut lexical_index = SearchIndex::new();
    for t in tools {
        lexical_index.upsert(&t.doc(FULL));
    }
    let passages: Vec<String> = tools.iter().map(|t| passage(&t.doc(FULL))).collect();
    let refs: Vec<&str> = passages.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let vectors = model.embed(&refs).expect("embed the tools");
    println!(
        "embedded {} tools in {:.1?}",
        tools.len(),
        started.elapsed()
    );
    let mut index = VectorIndex::new();
    for (t, v) in tools.iter().zip(&vectors) {
        index.upsert(&t.id, v);
    }
    let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
    let query_vectors = model.embed(&texts).expect("embed the queries");
    let lexical = queries
        .iter()
        .map(|q| {
            lexical_index
                .search(&SearchQuery {
                    text: &q.text,
                    limit: depth,
                    namespace: None,
                })
                .into_iter()
                .map(|h| (h.id, h.score))
                .collect()
        })
        .collect();
    let semantic: Vec<Hits> = query_vectors
        .iter()
        .map(|v| index.nearest(v, depth, |_| true))
        .collect();
    let split: Vec<Vec<String>> = queries
        .iter()
        .map(|q| query_passages(&q.text).into_iter().skip(1).collect())
        .collect();
    let flat: Vec<&str> = split.iter().flatten().map(String::as_str).collect();
    let started = std::time::Instant::now();
    let flat_vectors = model.embed(&flat).expect("embed the sentences");
    println!(
        "embedded {} sentences in {:.1?}",
        flat.len(),
        started.elapsed()
    );
    let mut next = 0;
    let parts: Vec<Vec<(Hits, Hits)>> = split
        .iter()
        .map(|texts| {
            let v = &flat_vectors[next..next + texts.len()];
            next += texts.len();
            texts
                .iter()
                .zip(v)
                .map(|(text, v)| {
                    let lex = lexical_index
                        .search(&SearchQuery {
                            text,
                            limit: depth,
                            namespace: None,
                        })
                        .into_iter()
                        .map(|h| (h.id, h.score))
                        .collect();
                    (lex, index.nearest(v, depth, |_| true))
                })
                .collect()
        })
        .collect();
    let mut next = 0;
    let sentences = split
        .iter()
        .zip(&semantic)
        .map(|(parts, whole)| {
            let mut best: HashMap<Arc<str>, f32> = whole.iter().cloned().collect();
            for v in &flat_vectors[next..next + parts.len()] {
                for (id, score) in index.nearest(v, depth, |_| true) {
                    let e = best.entry(id).or_insert(f32::MIN);
                    *e = e.max(score);
                }
            }
            next += parts.len();
            let mut all: Hits = best.into_iter().collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.truncate(depth);
            all
        })
        .collect();
    Some(Ranked {
        lexical,
        semantic,
        sentences,
        parts,
        vectors: tools
            .iter()
            .zip(vectors)
            .map(|(t, v)| (Arc::from(t.id.as_str()), v))
            .collect(),
        index,
        query_vectors,
    })
}

fn strings(hits: &[(Arc<str>, f32)]) -> Vec<String> {
    hits.iter().map(|(id, _)| id.to_string()).collect()
}

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

/// The cached model, with queries cached too: the set's queries are fixed,
/// so caching them (in this test's own cache) keeps the evaluation from
/// embedding each of them twice per run and ever again on this machine;
/// the catalog's own path (`embed_query`, uncached) is what the product
/// runs.
struct QueriesCached(CachedEmbedder<SentenceModel>);

impl Embedder for QueriesCached {
    fn model_id(&self) -> &str {
        self.0.model_id()
    }

    fn embed(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        self.0.embed(passages)
    }

    fn embed_query(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        self.0.embed(passages)
    }
}

/// The set as a catalog with the model: tool ids mapped to toolexec ids
/// (and back), every tool embedded, and every query's passages (the
/// whole query and its sentences, as the catalog splits them) embedded in
/// one batch up front: the catalog's per-query calls then read them from
/// the cache, where a cold run would otherwise embed them a few at a time
/// at well under half the throughput.
fn catalog(
    test: &str,
    tools: &[Tool],
    queries: &[Query],
    precision: Precision,
) -> Option<(Catalog, HashMap<String, String>, Precision)> {
    let dir = toolexec_testkit::dep(test, "TOOLEXEC_EMBED_MODEL")?;
    let model = SentenceModel::load_with(Path::new(&dir), precision).expect("load the model");
    let precision = model.precision();
    let cache = std::env::temp_dir().join("toolexec-embed-eval-cache");
    let catalog = Catalog::new();
    let mut back = HashMap::new();
    let mut batch = Vec::new();
    for t in tools {
        let id = format!(
            "{}:{}",
            toolexec::names::map_name(&t.namespace),
            toolexec::names::map_name(&t.name)
        );
        if back.contains_key(&id) {
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
        let mut builder = toolexec::Tool::builder(&id)
            .description(&t.description)
            .input_schema(serde_json::json!({"type": "object", "properties": properties}))
            .tags(t.tags.clone());
        if !t.title.is_empty() {
            builder = builder.title(&t.title);
        }
        let Ok(tool) = builder.build() else { continue };
        back.insert(id, t.id.clone());
        batch.push((tool, Arc::new(Unused) as Arc<dyn Backend>));
    }
    catalog.register_many(batch, false).expect("register");
    let embedder = Arc::new(QueriesCached(CachedEmbedder::new(model, &cache)));
    let passages: Vec<String> = queries
        .iter()
        .flat_map(|q| query_passages(&q.text))
        .collect();
    let refs: Vec<&str> = passages.iter().map(String::as_str).collect();
    let started = std::time::Instant::now();
    embedder.embed(&refs).expect("embed the queries");
    println!(
        "{} query passages embedded in {:.1?}",
        refs.len(),
        started.elapsed()
    );
    catalog.set_embedder(embedder).expect("embedder");
    let started = std::time::Instant::now();
    assert!(catalog.wait_for_embeddings(std::time::Duration::from_secs(1800)));
    let status = catalog.embedding_status().unwrap();
    println!(
        "{} tools searchable, {} embedded in {:.1?} ({} failures)",
        catalog.len(),
        status.embedded,
        started.elapsed(),
        status.failures
    );
    assert_eq!(status.embedded, catalog.len());
    Some((catalog, back, precision))
}

/// Through the catalog, as `search_tools` answers: hybrid beats lexical and
/// keeps its recorded figures, at the default precision.
#[test]
fn hybrid_beats_lexical() {
    hybrid_keeps_its_figures("hybrid_beats_lexical", Precision::default());
}

/// The same in f32.
#[test]
fn hybrid_beats_lexical_f32() {
    hybrid_keeps_its_figures("hybrid_beats_lexical_f32", Precision::F32);
}

fn hybrid_keeps_its_figures(test: &str, precision: Precision) {
    let Some((tools, queries)) = retrieval::load(test) else {
        return;
    };
    let Some((catalog, back, precision)) = catalog(test, &tools, &queries, precision) else {
        return;
    };
    let recorded = match precision {
        Precision::F32 => HYBRID_F32,
        Precision::Int8 => HYBRID_INT8,
    };
    let eval = |mode: SearchMode| {
        retrieval::evaluate(&queries, |_, q| {
            catalog
                .search_with(&q.text, 10, None, mode)
                .expect("search")
                .iter()
                .filter_map(|r| back.get(&r.tool.tool().id.to_string()).cloned())
                .collect()
        })
    };
    let lexical = eval(SearchMode::Lexical);
    let semantic = eval(SearchMode::Semantic);
    let hybrid = eval(SearchMode::Hybrid);
    println!("precision: {}", precision.as_str());
    header();
    row("lexical (BM25F)", &lexical);
    row("semantic (all-MiniLM-L6-v2)", &semantic);
    row("hybrid (weighted, sentences)", &hybrid);
    assert!(hybrid.r5 > lexical.r5 && hybrid.ndcg10 > lexical.ndcg10);
    assert!(
        hybrid.r5 >= recorded.r5 - 0.002,
        "R@5 {:.4} below {:.4}",
        hybrid.r5,
        recorded.r5
    );
    assert!(
        hybrid.ndcg10 >= recorded.ndcg10 - 0.002,
        "nDCG@10 {:.4} below {:.4}",
        hybrid.ndcg10,
        recorded.ndcg10
    );
}

fn norm(hits: &[(Arc<str>, f32)]) -> Hits {
    let max = hits.iter().map(|h| h.1).fold(f32::MIN, f32::max);
    let min = hits.iter().map(|h| h.1).fold(f32::MAX, f32::min);
    let span = (max - min).max(1e-6);
    hits.iter()
        .map(|(id, s)| (id.clone(), (s - min) / span))
        .collect()
}

/// Min-max normalised scores, combined with weight `alpha` on semantic.
fn weighted_scores(
    lexical: &[(Arc<str>, f32)],
    semantic: &[(Arc<str>, f32)],
    alpha: f32,
) -> HashMap<Arc<str>, f32> {
    let mut scores: HashMap<Arc<str>, f32> = HashMap::new();
    for (id, s) in norm(lexical) {
        *scores.entry(id).or_default() += (1.0 - alpha) * s;
    }
    for (id, s) in norm(semantic) {
        *scores.entry(id).or_default() += alpha * s;
    }
    scores
}

fn weighted(lexical: &[(Arc<str>, f32)], semantic: &[(Arc<str>, f32)], alpha: f32) -> Vec<String> {
    top(weighted_scores(lexical, semantic, alpha))
}

/// Each tool's score plus `beta` times the best score in its namespace;
/// with `expand`, the namespaces of the first `expand` tools bring in
/// their unranked siblings at `beta` times that best score.
fn coherent(
    mut scores: HashMap<Arc<str>, f32>,
    beta: f32,
    expand: usize,
    ns: &HashMap<Arc<str>, Arc<str>>,
    members: &HashMap<Arc<str>, Vec<Arc<str>>>,
) -> Vec<String> {
    let mut best: HashMap<Arc<str>, f32> = HashMap::new();
    for (id, s) in &scores {
        let e = best.entry(ns[id].clone()).or_insert(f32::MIN);
        *e = e.max(*s);
    }
    if expand > 0 {
        let mut ranked: Hits = scores.iter().map(|(k, v)| (k.clone(), *v)).collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        for (id, _) in ranked.iter().take(expand) {
            for m in &members[&ns[id]] {
                scores.entry(m.clone()).or_insert(0.0);
            }
        }
    }
    for (id, s) in scores.iter_mut() {
        *s += beta * best[&ns[id]];
    }
    top(scores)
}

/// Reciprocal rank fusion with constant `k` over the top `depth` of each.
fn rrf(
    lexical: &[(Arc<str>, f32)],
    semantic: &[(Arc<str>, f32)],
    k: f32,
    depth: usize,
) -> Vec<String> {
    let mut scores: HashMap<Arc<str>, f32> = HashMap::new();
    for list in [lexical, semantic] {
        for (rank, (id, _)) in list.iter().take(depth).enumerate() {
            *scores.entry(id.clone()).or_default() += 1.0 / (k + rank as f32 + 1.0);
        }
    }
    top(scores)
}

fn top(scores: HashMap<Arc<str>, f32>) -> Vec<String> {
    let mut all: Hits = scores.into_iter().collect();
    all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(10);
    strings(&all)
}

/// The set and its rankings (top 100) for an ablation, the table's header
/// printed; `None` when the model or the set is missing.
fn ablation(test: &str) -> Option<(Vec<Tool>, Vec<Query>, Ranked)> {
    let (tools, queries) = retrieval::load(test)?;
    let r = rank(test, &tools, &queries, 100)?;
    header();
    Some((tools, queries, r))
}

#[test]
#[ignore = "prints the fusion ablations; run with --ignored --nocapture"]
fn fusion_variants() {
    let Some((tools, queries, r)) = ablation("fusion_variants") else {
        return;
    };
    let eval = |f: &dyn Fn(usize) -> Vec<String>| retrieval::evaluate(&queries, |i, _| f(i));
    row("lexical", &eval(&|i| strings(&r.lexical[i])));
    row("semantic", &eval(&|i| strings(&r.semantic[i])));
    for k in [1.0, 60.0] {
        for depth in [20, 100] {
            let m = eval(&|i| rrf(&r.lexical[i], &r.semantic[i], k, depth));
            row(&format!("RRF k={k} depth={depth}"), &m);
        }
    }
    row(
        "semantic, best sentence",
        &eval(&|i| strings(&r.sentences[i])),
    );
    for alpha in [0.1, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5] {
        let m = eval(&|i| weighted(&r.lexical[i], &r.semantic[i], alpha));
        row(&format!("min-max weighted, semantic {alpha}"), &m);
        let m = eval(&|i| weighted(&r.lexical[i], &r.sentences[i], alpha));
        row(&format!("min-max weighted, sentences {alpha}"), &m);
    }
    for k in [1.0, 5.0] {
        let m = eval(&|i| rrf(&r.lexical[i], &r.sentences[i], k, 100));
        row(&format!("RRF sentences k={k} depth=100"), &m);
    }
    let ns: HashMap<Arc<str>, Arc<str>> = tools
        .iter()
        .map(|t| (Arc::from(t.id.as_str()), Arc::from(t.namespace.as_str())))
        .collect();
    let mut members: HashMap<Arc<str>, Vec<Arc<str>>> = HashMap::new();
    for t in &tools {
        members
            .entry(Arc::from(t.namespace.as_str()))
            .or_default()
            .push(Arc::from(t.id.as_str()));
    }
    for expand in [0, 1] {
        for beta in [0.2, 0.5, 0.7, 1.0, 1.5] {
            let m = eval(&|i| {
                let s = norm(&r.lexical[i]).into_iter().collect();
                coherent(s, beta, expand, &ns, &members)
            });
            row(&format!("lexical + namespace {beta} expand {expand}"), &m);
            let m = eval(&|i| {
                let s = weighted_scores(&r.lexical[i], &r.sentences[i], 0.35);
                coherent(s, beta, expand, &ns, &members)
            });
            row(
                &format!("hybrid 0.35 + namespace {beta} expand {expand}"),
                &m,
            );
        }
    }
    let m = eval(&|i| strings(&fuse(&r.lexical[i], &r.sentences[i], 10)));
    row("chosen (`fuse`)", &m);
    for g in ["G1", "G2", "G3"] {
        let idx: Vec<usize> = (0..queries.len())
            .filter(|&i| queries[i].group.starts_with(g))
            .collect();
        let subset: Vec<Query> = idx.iter().map(|&i| queries[i].clone()).collect();
        let eval =
            |f: &dyn Fn(usize) -> Vec<String>| retrieval::evaluate(&subset, |j, _| f(idx[j]));
        println!("{g}: {} queries", idx.len());
        row(&format!("{g} lexical"), &eval(&|i| strings(&r.lexical[i])));
        for beta in [0.0, 0.5, 1.0] {
            let m = eval(&|i| {
                let s = weighted_scores(&r.lexical[i], &r.sentences[i], 0.35);
                coherent(s, beta, 0, &ns, &members)
            });
            row(&format!("{g} hybrid 0.35 + namespace {beta}"), &m);
        }
    }
}

/// Scores min-max normalised to [0, 1], by id.
fn unit(hits: &[(Arc<str>, f32)]) -> HashMap<Arc<str>, f32> {
    norm(hits).into_iter().collect()
}

#[test]
#[ignore = "prints the sentence-level ablations; run with --ignored --nocapture"]
fn sentence_variants() {
    let Some((_, queries, r)) = ablation("sentence_variants") else {
        return;
    };
    let eval = |f: &dyn Fn(usize) -> Vec<String>| retrieval::evaluate(&queries, |i, _| f(i));
    let chosen = |i: usize| fuse(&r.lexical[i], &r.sentences[i], 100);
    row(
        "chosen (`fuse`)",
        &eval(&|i| strings(&chosen(i)[..chosen(i).len().min(10)])),
    );
    // The whole query's fused scores plus lambda times each tool's best
    // fused score over the sentences (each sentence's list normalised).
    let whole_plus = |i: usize, lambda: f32| {
        let mut scores = unit(&chosen(i));
        let mut best: HashMap<Arc<str>, f32> = HashMap::new();
        for (lex, sem) in &r.parts[i] {
            for (id, s) in unit(&fuse(lex, sem, 100)) {
                let e = best.entry(id).or_insert(0.0);
                *e = e.max(s);
            }
        }
        for (id, s) in best {
            *scores.entry(id).or_default() += lambda * s;
        }
        top(scores)
    };
    for g in ["G1", "G2", "G3"] {
        let idx: Vec<usize> = (0..queries.len())
            .filter(|&i| queries[i].group.starts_with(g))
            .collect();
        let subset: Vec<Query> = idx.iter().map(|&i| queries[i].clone()).collect();
        let eval =
            |f: &dyn Fn(usize) -> Vec<String>| retrieval::evaluate(&subset, |j, _| f(idx[j]));
        row(
            &format!("{g} chosen"),
            &eval(&|i| strings(&chosen(i)[..chosen(i).len().min(10)])),
        );
        for lambda in [0.75, 1.0, 1.25] {
            row(
                &format!("{g} whole + {lambda}"),
                &eval(&|i| whole_plus(i, lambda)),
            );
        }
    }
    row(
        "adopted (`with_sentences`)",
        &eval(&|i| strings(&adopted(&r, i, 10))),
    );
    for lambda in [0.25, 0.5, 0.75, 1.0, 1.25, 2.0] {
        let m = eval(&|i| whole_plus(i, lambda));
        row(&format!("whole + {lambda} x best sentence"), &m);
    }
    // Round robin: the whole query's first `lead`, then each sentence's
    // best not yet taken (sentences in the order of their best fused
    // score, those under `floor` of the best left out), then the whole
    // query's list.
    for lead in [1usize, 2] {
        for floor in [0.0f32, 0.5, 0.8] {
            let m = eval(&|i| {
                let whole = chosen(i);
                let mut out: Vec<String> = Vec::new();
                let push = |out: &mut Vec<String>, id: &str| {
                    if out.len() < 10 && !out.iter().any(|o| o == id) {
                        out.push(id.to_owned());
                    }
                };
                for (id, _) in whole.iter().take(lead) {
                    push(&mut out, id);
                }
                let mut lists: Vec<Hits> =
                    r.parts[i].iter().map(|(l, s)| fuse(l, s, 100)).collect();
                lists.sort_by(|a, b| {
                    let top = |h: &Hits| h.first().map_or(0.0, |x| x.1);
                    top(b).total_cmp(&top(a))
                });
                let best = lists.first().and_then(|l| l.first()).map_or(0.0, |x| x.1);
                for depth in 0..3 {
                    for l in &lists {
                        if l.first().map_or(0.0, |x| x.1) < floor * best {
                            continue;
                        }
                        if let Some((id, _)) = l.get(depth) {
                            push(&mut out, id);
                        }
                    }
                    if depth == 0 {
                        for (id, _) in whole.iter().take(lead + 2) {
                            push(&mut out, id);
                        }
                    }
                }
                for (id, _) in &whole {
                    push(&mut out, id);
                }
                out
            });
            row(&format!("round robin, lead {lead}, floor {floor}"), &m);
        }
    }
}

/// Query `i`'s first `limit` as hybrid search ranks them: [`fuse`] over
/// the whole query, then [`with_sentences`] over each sentence's own.
fn adopted(r: &Ranked, i: usize, limit: usize) -> Hits {
    let whole = fuse(&r.lexical[i], &r.sentences[i], 100);
    let parts: Vec<Hits> = r.parts[i].iter().map(|(l, s)| fuse(l, s, 100)).collect();
    with_sentences(&whole, &parts, limit)
}

/// `a + w * b`, normalised to unit length.
fn mix(a: &[f32], b: &[f32], w: f32) -> Vec<f32> {
    let v: Vec<f32> = a.iter().zip(b).map(|(x, y)| x + w * y).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter().map(|x| x / n).collect()
}

#[test]
#[ignore = "prints the pseudo-relevance feedback ablations; run with --ignored --nocapture"]
fn feedback_variants() {
    let Some((_, queries, r)) = ablation("feedback_variants") else {
        return;
    };
    let eval = |f: &dyn Fn(usize) -> Vec<String>| retrieval::evaluate(&queries, |i, _| f(i));
    row("adopted", &eval(&|i| strings(&adopted(&r, i, 10))));
    // The mean vector of the adopted ranking's first `k`.
    let centroid = |hits: &Hits, k: usize| {
        let dim = r.query_vectors[0].len();
        let mut c = vec![0.0f32; dim];
        for (id, _) in hits.iter().take(k) {
            for (x, y) in c.iter_mut().zip(&r.vectors[id]) {
                *x += y;
            }
        }
        c
    };
    for k in [1usize, 3, 5] {
        // Neighbours of the first results, added to the adopted scores.
        for gamma in [0.1f32, 0.2, 0.35] {
            let m = eval(&|i| {
                let first = adopted(&r, i, 100);
                let near = r.index.nearest(&centroid(&first, k), 100, |_| true);
                let mut scores = unit(&first);
                for (id, s) in unit(&near) {
                    *scores.entry(id).or_default() += gamma * s;
                }
                top(scores)
            });
            row(&format!("adopted + {gamma} x neighbours of top {k}"), &m);
        }
        // Rocchio: the query moved towards the first results, fused again.
        for beta in [0.25f32, 0.5, 1.0] {
            let m = eval(&|i| {
                let first = adopted(&r, i, 100);
                let c = centroid(&first, k);
                let q = mix(&r.query_vectors[i], &c, beta / k as f32);
                let moved = r.index.nearest(&q, 100, |_| true);
                let mut best: HashMap<Arc<str>, f32> = r.sentences[i].iter().cloned().collect();
                for (id, s) in moved {
                    let e = best.entry(id).or_insert(f32::MIN);
                    *e = e.max(s);
                }
                let mut sem: Hits = best.into_iter().collect();
                sem.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                sem.truncate(100);
                let whole = fuse(&r.lexical[i], &sem, 100);
                let parts: Vec<Hits> = r.parts[i].iter().map(|(l, s)| fuse(l, s, 100)).collect();
                strings(&with_sentences(&whole, &parts, 10))
            });
            row(&format!("Rocchio beta {beta}, top {k}"), &m);
        }
    }
}

#[test]
#[ignore = "prints the ablations of a bonus for namespaces a query names; run with --ignored --nocapture"]
fn named_namespace_variants() {
    let Some((tools, queries, r)) = ablation("named_namespace_variants") else {
        return;
    };
    let eval = |f: &dyn Fn(usize) -> Vec<String>| retrieval::evaluate(&queries, |i, _| f(i));
    row("adopted", &eval(&|i| strings(&adopted(&r, i, 10))));
    let ns: HashMap<Arc<str>, String> = tools
        .iter()
        .map(|t| (Arc::from(t.id.as_str()), t.namespace.to_lowercase()))
        .collect();
    // A namespace is named when its whole name (at least `min` bytes)
    // appears in the query, case aside.
    for min in [4usize, 8] {
        for bonus in [0.25f32, 0.5, 1.0] {
            let m = eval(&|i| {
                let text = queries[i].text.to_lowercase();
                let mut scores = unit(&adopted(&r, i, 100));
                for (id, s) in scores.iter_mut() {
                    let name = &ns[id];
                    if name.len() >= min && text.contains(name.as_str()) {
                        *s += bonus;
                    }
                }
                top(scores)
            });
            row(&format!("named namespace (>= {min} bytes) + {bonus}"), &m);
        }
    }
}

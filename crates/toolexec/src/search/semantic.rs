//! The semantic half of search: tools as unit vectors of a sentence
//! embedding model, nearest neighbours by cosine similarity, and the fusion
//! with the lexical ranking.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::SearchDoc;
use crate::error::Error;

/// Turns passages into vectors. `toolexec-embed` implements it with a
/// sentence-transformers model run by candle; the catalog calls it off the
/// request path for tools and on it for queries.
pub trait Embedder: Send + Sync + 'static {
    /// Names the model and its files (a digest of them): vectors of
    /// different models are never mixed.
    fn model_id(&self) -> &str;

    /// One unit vector per passage, in order, all of the same length.
    fn embed(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error>;

    /// The vectors of a search query's passages: as [`Embedder::embed`],
    /// but an embedder that keeps what it embeds (a cache) should not keep
    /// these, which are as many as the queries people type.
    fn embed_query(&self, passages: &[&str]) -> Result<Vec<Vec<f32>>, Error> {
        self.embed(passages)
    }
}

/// The text a tool is embedded from: the fields BM25F indexes, as one
/// passage (`namespace name: title. description Parameters: p: what p is;
/// ...`), identifiers split into words (`getWeather` → `get Weather`).
pub fn passage(doc: &SearchDoc<'_>) -> String {
    let mut out = format!("{} {}", words(doc.namespace), words(doc.name));
    if let Some(title) = doc.title.filter(|t| !t.trim().is_empty()) {
        out.push_str(": ");
        out.push_str(title.trim());
    }
    if !doc.description.trim().is_empty() {
        out.push_str(". ");
        out.push_str(doc.description.trim());
    }
    if !doc.params.is_empty() {
        out.push_str(" Parameters: ");
        for (i, (name, description)) in doc.params.iter().enumerate() {
            if i > 0 {
                out.push_str("; ");
            }
            out.push_str(&words(name));
            if !description.trim().is_empty() {
                out.push_str(": ");
                out.push_str(description.trim());
            }
        }
    }
    out
}

/// `get_weather`, `getWeather`, `get-weather` → `get weather`, `get Weather`.
fn words(identifier: &str) -> String {
    let mut out = String::with_capacity(identifier.len() + 4);
    let mut prev: Option<char> = None;
    for c in identifier.chars() {
        if matches!(c, '_' | '-' | '.' | '/' | ':') {
            out.push(' ');
        } else {
            if c.is_uppercase() && prev.is_some_and(char::is_lowercase) {
                out.push(' ');
            }
            out.push(c);
        }
        prev = Some(c);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// How a search ranks tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    /// BM25F over names, descriptions, tags and parameters.
    Lexical,
    /// Cosine similarity of the query's and the tools' embeddings.
    Semantic,
    /// Both rankings fused ([`fuse`]).
    Hybrid,
}

impl SearchMode {
    /// The mode's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            SearchMode::Lexical => "lexical",
            SearchMode::Semantic => "semantic",
            SearchMode::Hybrid => "hybrid",
        }
    }

    /// Parses `lexical`, `semantic` or `hybrid`.
    pub fn parse(s: &str) -> Option<SearchMode> {
        match s {
            "lexical" => Some(SearchMode::Lexical),
            "semantic" => Some(SearchMode::Semantic),
            "hybrid" => Some(SearchMode::Hybrid),
            _ => None,
        }
    }
}

impl std::fmt::Display for SearchMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Tool vectors, searched exhaustively: a dot product per tool, linear in
/// the catalog (a few ms for 10,000 tools of 384 dimensions, less than
/// embedding the query). An approximate index such as HNSW becomes worth
/// its memory and build time past about 100,000 tools, where the scan
/// would outgrow the query's embedding.
///
/// Vectors are kept in 8-bit integers with a scale per vector (a quarter
/// of the memory the scan reads, which bounds it): a similarity is off by
/// about a thousandth, far below the gaps that order tools.
#[derive(Debug, Default)]
pub struct VectorIndex {
    dim: usize,
    ids: Vec<Arc<str>>,
    /// `ids.len() × dim` components, row by row, each row scaled by its
    /// entry in `scales`.
    data: Vec<i8>,
    scales: Vec<f32>,
    slot: HashMap<Arc<str>, usize>,
}

/// `vector` as 8-bit integers and the scale that multiplies them back.
fn quantize(vector: &[f32], out: &mut [i8]) -> f32 {
    let max = vector.iter().fold(0f32, |m, x| m.max(x.abs()));
    let scale = if max > 0.0 && max.is_finite() {
        max / 127.0
    } else {
        1.0
    };
    for (q, x) in out.iter_mut().zip(vector) {
        *q = (x / scale).round().clamp(-127.0, 127.0) as i8;
    }
    scale
}

impl VectorIndex {
    /// An empty index.
    pub fn new() -> Self {
        VectorIndex::default()
    }

    /// Number of tools with a vector.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when no tool has a vector.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether `id` has a vector.
    pub fn contains(&self, id: &str) -> bool {
        self.slot.contains_key(id)
    }

    /// Sets `id`'s vector. A vector of another length than the index's
    /// first one is ignored (a model changed under a running index).
    pub fn upsert(&mut self, id: &str, vector: &[f32]) {
        if self.dim == 0 {
            self.dim = vector.len();
        }
        if vector.len() != self.dim || self.dim == 0 {
            return;
        }
        let i = match self.slot.get(id) {
            Some(&i) => i,
            None => {
                let id: Arc<str> = Arc::from(id);
                self.slot.insert(id.clone(), self.ids.len());
                self.ids.push(id);
                self.data.resize(self.data.len() + self.dim, 0);
                self.scales.push(1.0);
                self.ids.len() - 1
            }
        };
        self.scales[i] = quantize(vector, &mut self.data[i * self.dim..(i + 1) * self.dim]);
    }

    /// Drops `id`'s vector.
    pub fn remove(&mut self, id: &str) -> bool {
        let Some(i) = self.slot.remove(id) else {
            return false;
        };
        let last = self.ids.len() - 1;
        if i != last {
            self.ids.swap(i, last);
            self.scales.swap(i, last);
            let (head, tail) = self.data.split_at_mut(last * self.dim);
            head[i * self.dim..(i + 1) * self.dim].copy_from_slice(&tail[..self.dim]);
            self.slot.insert(self.ids[i].clone(), i);
        }
        self.ids.pop();
        self.scales.pop();
        self.data.truncate(last * self.dim);
        true
    }

    /// The `limit` tools most similar to `query` (dot product of unit
    /// vectors), best first, among those `keep` accepts.
    pub fn nearest(
        &self,
        query: &[f32],
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<(Arc<str>, f32)> {
        if query.len() != self.dim || limit == 0 {
            return Vec::new();
        }
        let mut q = vec![0i8; self.dim];
        let q_scale = quantize(query, &mut q);
        let mut scored: Vec<(usize, f32)> = self
            .data
            .chunks_exact(self.dim)
            .zip(&self.scales)
            .enumerate()
            .map(|(i, (row, scale))| (i, dot_i8(row, &q) as f32 * scale * q_scale))
            .filter(|(i, _)| keep(&self.ids[*i]))
            .collect();
        let by_score = |a: &(usize, f32), b: &(usize, f32)| b.1.total_cmp(&a.1);
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit - 1, by_score);
            scored.truncate(limit);
        }
        scored.sort_by(by_score);
        scored
            .into_iter()
            .map(|(i, s)| (self.ids[i].clone(), s))
            .collect()
    }
}

impl VectorIndex {
    /// The `limit` tools most similar to any of `queries`, each scored by
    /// its best similarity.
    pub fn nearest_any(
        &self,
        queries: &[Vec<f32>],
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<(Arc<str>, f32)> {
        best_of(&self.nearest_each(queries, limit, keep), limit)
    }

    /// The `limit` tools most similar to each of `queries`, a list each.
    pub fn nearest_each(
        &self,
        queries: &[Vec<f32>],
        limit: usize,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<Vec<(Arc<str>, f32)>> {
        queries
            .iter()
            .map(|query| self.nearest(query, limit, &keep))
            .collect()
    }
}

/// The `limit` best of `lists` (rankings of the same tools), each tool
/// scored by its best in any: exactly the `limit` best by that score, as a
/// tool among them is within the first `limit` of the list it is best in.
pub fn best_of(lists: &[Vec<(Arc<str>, f32)>], limit: usize) -> Vec<(Arc<str>, f32)> {
    if let [one] = lists {
        return one.iter().take(limit).cloned().collect();
    }
    let mut best: HashMap<Arc<str>, f32> = HashMap::new();
    for (id, score) in lists.iter().flatten() {
        let e = best.entry(id.clone()).or_insert(f32::MIN);
        *e = e.max(*score);
    }
    let mut out: Vec<(Arc<str>, f32)> = best.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(limit);
    out
}

/// Independent partial sums in [`dot_i8`], which become SIMD registers
/// (one running sum would make every addition wait for the last).
const LANES: usize = 32;

/// The dot product of two 8-bit vectors, over [`LANES`] `i32` sums
/// (products of two `i8` fit an `i16`; any vector a model makes is far too
/// short for its sums to overflow an `i32`).
fn dot_i8(a: &[i8], b: &[i8]) -> i32 {
    let (a_chunks, a_rest) = a.as_chunks::<LANES>();
    let (b_chunks, b_rest) = b.as_chunks::<LANES>();
    let mut sums = [0i32; LANES];
    for (x, y) in a_chunks.iter().zip(b_chunks) {
        for ((sum, x), y) in sums.iter_mut().zip(x).zip(y) {
            *sum += i32::from(i16::from(*x) * i16::from(*y));
        }
    }
    let rest: i32 = a_rest
        .iter()
        .zip(b_rest)
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum();
    sums.iter().sum::<i32>() + rest
}

/// The weight of the semantic score in [`fuse`] (the lexical one weighs
/// `1 − SEMANTIC_WEIGHT`); measured best on StableToolBench (BENCHMARKS.md,
/// issue 17).
pub const SEMANTIC_WEIGHT: f32 = 0.35;

/// How much of the best score in a tool's namespace [`fuse`] adds to the
/// tool's own: a task that needs one tool of a server often needs its
/// siblings. Measured on StableToolBench (BENCHMARKS.md, issue 17): +1.5
/// points of Recall@5, from single-server queries, none lost on
/// multi-server ones at this weight.
pub const NAMESPACE_WEIGHT: f32 = 0.5;

/// Fuses a lexical and a semantic ranking (ids with scores, best first):
/// each list's scores are scaled to 0–1 by its own minimum and maximum,
/// then summed with weights `1 − SEMANTIC_WEIGHT` and `SEMANTIC_WEIGHT`; a
/// tool missing from a list scores 0 there. Each tool then gains
/// `NAMESPACE_WEIGHT` times the best fused score in its namespace (the id
/// up to its first `:`), which lifts the siblings of a strong match and
/// keeps the order of each namespace's best tools. The `limit` best, ties
/// broken by id. (Reciprocal rank fusion measured worse here: BM25F's
/// score gaps carry information ranks throw away.)
pub fn fuse(
    lexical: &[(Arc<str>, f32)],
    semantic: &[(Arc<str>, f32)],
    limit: usize,
) -> Vec<(Arc<str>, f32)> {
    let mut scores: HashMap<Arc<str>, f32> = HashMap::new();
    for (list, weight) in [
        (lexical, 1.0 - SEMANTIC_WEIGHT),
        (semantic, SEMANTIC_WEIGHT),
    ] {
        for (id, score) in unit(list) {
            *scores.entry(id).or_default() += weight * score;
        }
    }
    let mut out: Vec<(Arc<str>, f32)> = scores.into_iter().collect();
    let mut best: HashMap<&str, f32> = HashMap::with_capacity(out.len());
    for (id, score) in &out {
        let e = best.entry(namespace(id)).or_insert(0.0);
        *e = e.max(*score);
    }
    let lifts: Vec<f32> = out
        .iter()
        .map(|(id, _)| NAMESPACE_WEIGHT * best[namespace(id)])
        .collect();
    for ((_, score), lift) in out.iter_mut().zip(lifts) {
        *score += lift;
    }
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(limit);
    out
}

/// How much of a tool's best score in any single sentence's fused
/// ranking [`with_sentences`] adds to its score for the whole query.
/// Measured on StableToolBench (BENCHMARKS.md, issue 17): +0.7 points of
/// Recall@5 and +1.2 of nDCG@10 overall, +3 of Recall@5 on queries that
/// need several servers' tools, −0.8 on those that need one server's.
pub const SENTENCE_WEIGHT: f32 = 1.0;

/// The `limit` best of a query's fused ranking `whole` (see [`fuse`])
/// when the query has several sentences, each with its own fused ranking
/// in `sentences`: each list's scores scaled to 0–1, a tool's score is its
/// score for the whole query plus [`SENTENCE_WEIGHT`] times its best in
/// any sentence's. A request that asks for several things then has the
/// best tool for each near the top, where the whole query's ranking
/// favours the thing it names most. Ties broken by id.
pub fn with_sentences(
    whole: &[(Arc<str>, f32)],
    sentences: &[Vec<(Arc<str>, f32)>],
    limit: usize,
) -> Vec<(Arc<str>, f32)> {
    let mut scores: HashMap<Arc<str>, f32> = unit(whole).collect();
    let mut best: HashMap<Arc<str>, f32> = HashMap::new();
    for (id, score) in sentences.iter().flat_map(|list| unit(list)) {
        let e = best.entry(id).or_insert(0.0);
        *e = e.max(score);
    }
    for (id, score) in best {
        *scores.entry(id).or_default() += SENTENCE_WEIGHT * score;
    }
    let mut out: Vec<(Arc<str>, f32)> = scores.into_iter().collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.truncate(limit);
    out
}

/// `list`'s scores scaled to 0–1 by its own minimum and maximum.
fn unit(list: &[(Arc<str>, f32)]) -> impl Iterator<Item = (Arc<str>, f32)> + '_ {
    let max = list.iter().map(|h| h.1).fold(f32::MIN, f32::max);
    let min = list.iter().map(|h| h.1).fold(f32::MAX, f32::min);
    let span = (max - min).max(1e-6);
    list.iter()
        .map(move |(id, s)| (id.clone(), (s - min) / span))
}

/// The namespace of a catalog id: up to its first `:`.
fn namespace(id: &str) -> &str {
    id.split_once(':').map_or(id, |(ns, _)| ns)
}

/// What a query is embedded as: the whole query and, when it has several
/// sentences, each of them. A tool's similarity to the query is its best
/// against any ([`VectorIndex::nearest_any`]), and hybrid search also
/// ranks each sentence on its own ([`with_sentences`]): a request that
/// asks for three things finds the tool for each, where one averaged
/// vector blurs them.
pub fn query_passages(query: &str) -> Vec<String> {
    let mut out = vec![query.trim().to_owned()];
    let mut sentences = Vec::new();
    let mut current = String::new();
    for c in query.chars() {
        current.push(c);
        if matches!(c, '.' | '?' | '!') && current.trim().len() > 3 {
            sentences.push(current.trim().to_owned());
            current.clear();
        }
    }
    if current.trim().len() > 3 {
        sentences.push(current.trim().to_owned());
    }
    if sentences.len() > 1 {
        out.extend(sentences.into_iter().take(MAX_QUERY_SENTENCES));
    }
    out
}

/// Most sentences of a query embedded on their own.
const MAX_QUERY_SENTENCES: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_the_plain_sum() {
        for n in [0, 1, 31, 32, 33, 64, 384, 385] {
            let a: Vec<i8> = (0..n).map(|i| ((i * 37) % 255 - 127) as i8).collect();
            let b: Vec<i8> = (0..n).map(|i| ((i * 11) % 255 - 127) as i8).collect();
            let plain: i32 = a
                .iter()
                .zip(&b)
                .map(|(x, y)| i32::from(*x) * i32::from(*y))
                .sum();
            assert_eq!(dot_i8(&a, &b), plain, "n = {n}");
        }
    }

    /// Similarities from the 8-bit vectors stay within a thousandth or so
    /// of the exact ones, for unit vectors of a model's size.
    #[test]
    fn quantized_similarities_are_close() {
        let unit = |seed: f32| {
            let v: Vec<f32> = (0..384).map(|i| (i as f32 * seed).sin()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect::<Vec<f32>>()
        };
        let mut index = VectorIndex::new();
        let rows: Vec<Vec<f32>> = (1..=20).map(|k| unit(0.01 * k as f32)).collect();
        for (k, row) in rows.iter().enumerate() {
            index.upsert(&format!("t:{k}"), row);
        }
        let query = unit(0.093);
        for (id, score) in index.nearest(&query, 20, |_| true) {
            let k: usize = id["t:".len()..].parse().unwrap();
            let exact: f32 = rows[k].iter().zip(&query).map(|(x, y)| x * y).sum();
            assert!((score - exact).abs() < 3e-3, "{id}: {score} vs {exact}");
        }
        // A zero vector scores 0, never NaN.
        index.upsert("t:zero", &[0.0; 384]);
        let hits = index.nearest(&query, 30, |id| id == "t:zero");
        assert_eq!(hits[0].1, 0.0);
    }

    #[test]
    fn nearest_neighbours_and_removal() {
        let mut index = VectorIndex::new();
        index.upsert("a:x", &[1.0, 0.0]);
        index.upsert("a:y", &[0.0, 1.0]);
        index.upsert("b:z", &[0.6, 0.8]);
        let hits = index.nearest(&[1.0, 0.0], 2, |_| true);
        assert_eq!(hits[0].0.as_ref(), "a:x");
        assert_eq!(hits[1].0.as_ref(), "b:z");
        let only_a = index.nearest(&[0.6, 0.8], 5, |id| id.starts_with("a:"));
        assert_eq!(only_a.len(), 2);
        assert!(index.remove("a:x"));
        assert!(!index.remove("a:x"));
        assert_eq!(index.len(), 2);
        assert_eq!(index.nearest(&[1.0, 0.0], 1, |_| true)[0].0.as_ref(), "b:z");
        // The moved row kept its vector.
        assert_eq!(index.nearest(&[0.0, 1.0], 1, |_| true)[0].0.as_ref(), "a:y");
        index.upsert("a:y", &[1.0, 0.0]);
        assert_eq!(index.nearest(&[1.0, 0.0], 1, |_| true)[0].0.as_ref(), "a:y");
        // Wrong lengths are ignored.
        index.upsert("c:w", &[1.0]);
        assert!(!index.contains("c:w"));
    }

    #[test]
    fn fusion_weighs_normalised_scores() {
        let hits = |v: &[(&str, f32)]| {
            v.iter()
                .map(|(id, s)| (Arc::from(*id), *s))
                .collect::<Vec<(Arc<str>, f32)>>()
        };
        // Lexical: a far ahead; semantic: c ahead of b.
        let lexical = hits(&[("a", 20.0), ("b", 5.0), ("c", 4.0)]);
        let semantic = hits(&[("c", 0.9), ("b", 0.8), ("d", 0.1)]);
        let fused = fuse(&lexical, &semantic, 3);
        let names: Vec<&str> = fused.iter().map(|(id, _)| id.as_ref()).collect();
        assert_eq!(names, ["a", "c", "b"]);
        // Each is its namespace's best: its own score, lifted by itself.
        let own = 1.0 - SEMANTIC_WEIGHT;
        assert!((fused[0].1 - own * (1.0 + NAMESPACE_WEIGHT)).abs() < 1e-6);
    }

    fn ranked(v: &[(&str, f32)]) -> Vec<(Arc<str>, f32)> {
        v.iter().map(|(id, s)| (Arc::from(*id), *s)).collect()
    }

    #[test]
    fn best_of_scores_each_tool_by_its_best_list() {
        let a = ranked(&[("x", 0.9), ("y", 0.5), ("z", 0.1)]);
        let b = ranked(&[("z", 0.8), ("y", 0.6)]);
        let best = best_of(&[a.clone(), b], 2);
        assert_eq!(best, ranked(&[("x", 0.9), ("z", 0.8)]));
        assert_eq!(best_of(std::slice::from_ref(&a), 3), a);
        assert!(best_of(&[], 3).is_empty());
    }

    #[test]
    fn each_sentence_brings_its_best_tool_up() {
        // The whole query is mostly about the weather; its second sentence
        // asks for a currency conversion, which the whole ranks last.
        let whole = ranked(&[
            ("weather:now", 1.0),
            ("weather:week", 0.9),
            ("weather:alerts", 0.8),
            ("fx:convert", 0.1),
        ]);
        let sentences = [
            ranked(&[("weather:now", 2.0), ("weather:week", 1.0)]),
            ranked(&[("fx:convert", 3.0), ("fx:rates", 1.0)]),
        ];
        let top: Vec<String> = with_sentences(&whole, &sentences, 3)
            .into_iter()
            .map(|(id, _)| id.to_string())
            .collect();
        assert_eq!(top, ["weather:now", "fx:convert", "weather:week"]);
        // Without sentences, the whole query's order.
        let alone = with_sentences(&whole, &[], 2);
        assert_eq!(alone[0].0.as_ref(), "weather:now");
        assert_eq!(alone[1].0.as_ref(), "weather:week");
    }

    #[test]
    fn fusion_lifts_the_siblings_of_a_strong_match() {
        let hits = |v: &[(&str, f32)]| {
            v.iter()
                .map(|(id, s)| (Arc::from(*id), *s))
                .collect::<Vec<(Arc<str>, f32)>>()
        };
        // weather:forecast leads; weather:alerts trails mail:send alone,
        // and passes it once its namespace's lead counts.
        let lexical = hits(&[
            ("weather:forecast", 10.0),
            ("mail:send", 6.0),
            ("weather:alerts", 5.0),
            ("misc:noop", 0.0),
        ]);
        let fused = fuse(&lexical, &[], 4);
        let names: Vec<&str> = fused.iter().map(|(id, _)| id.as_ref()).collect();
        assert_eq!(
            names,
            [
                "weather:forecast",
                "weather:alerts",
                "mail:send",
                "misc:noop"
            ]
        );
        // The namespaces' leads keep their order.
        assert!(fused[0].1 > fused[2].1);
    }

    #[test]
    fn queries_are_split_into_sentences() {
        assert_eq!(query_passages("get the weather"), ["get the weather"]);
        let parts = query_passages("I need the weather. Also convert 5 USD to EUR!");
        assert_eq!(
            parts,
            [
                "I need the weather. Also convert 5 USD to EUR!",
                "I need the weather.",
                "Also convert 5 USD to EUR!"
            ]
        );
    }
}

//! In-memory, incrementally updated BM25F search over a tool catalog.
//!
//! [`SearchIndex`] keeps one posting list per term; each posting stores the term frequency
//! in every field of one document slot. [`SearchIndex::upsert`] and [`SearchIndex::remove`]
//! update postings and the collection statistics (document count, total field lengths) in
//! place: postings are unsorted and removal is an O(1) `swap_remove` per term thanks to
//! per-document back-pointers. A search accumulates BM25F scores into a reusable dense
//! per-slot buffer (thread-local, so concurrent searches do not contend) and selects the
//! top `limit` hits with a bounded heap.
//!
//! Scoring (BM25F, "simple" variant): for a query term `t` and document `d`,
//! `tf' = Σ_f w_f · tf_f / (1 − b_f + b_f · len_f / avglen_f)` and
//! `score += idf(t) · tf' · (k1 + 1) / (k1 + tf')` with
//! `idf(t) = ln(1 + (N − df + 0.5) / (df + 0.5))`.
//!
//! A query that is exactly a tool id (case-sensitive, trimmed) puts that tool first; a query
//! whose identifier parts equal a tool name's (`get_weather`, `getWeather`, `get weather`)
//! puts the tools with that name right after, ahead of all other hits.

pub(crate) mod embedding;
mod schema;
mod semantic;
mod tokenize;

#[cfg(test)]
mod tests;

pub use embedding::EmbeddingStatus;
pub use schema::schema_params;
pub use semantic::{
    Embedder, NAMESPACE_WEIGHT, SEMANTIC_WEIGHT, SENTENCE_WEIGHT, SearchMode, VectorIndex, best_of,
    fuse, passage, query_passages, with_sentences,
};

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

use tokenize::{Analyzer, identifier_key};

/// Hash map with a fast, per-process randomly seeded hasher (term lookups dominate indexing).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// What the catalog feeds into the index for one tool.
#[derive(Clone, Copy, Debug)]
pub struct SearchDoc<'a> {
    /// Full tool id, e.g. `"math:add"` or `"math:add:1.0"`. Unique key of the index.
    pub id: &'a str,
    /// Namespace the tool belongs to (used by [`SearchQuery::namespace`] filtering).
    pub namespace: &'a str,
    /// Tool name within its namespace.
    pub name: &'a str,
    /// Optional human-readable title.
    pub title: Option<&'a str>,
    /// Free-text description.
    pub description: &'a str,
    /// Tags / categories.
    pub tags: &'a [String],
    /// `(parameter name, parameter description)` pairs, e.g. from [`schema_params`].
    pub params: &'a [(String, String)],
}

/// One search result.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchHit {
    /// Id of the matching tool.
    pub id: Arc<str>,
    /// Relevance score (higher is better); only comparable within one result list.
    pub score: f32,
}

/// A search request.
#[derive(Clone, Copy, Debug)]
pub struct SearchQuery<'a> {
    /// Free-text query; may also be an exact tool id or tool name.
    pub text: &'a str,
    /// Maximum number of hits returned; 0 returns nothing.
    pub limit: usize,
    /// When set, only tools of exactly this namespace are returned.
    pub namespace: Option<&'a str>,
}

/// Weight and length normalization of one indexed field.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FieldConfig {
    /// Multiplier of this field's term frequency; 0 disables the field. Negative or
    /// non-finite values are treated as 0.
    pub weight: f32,
    /// BM25 length normalization in `[0, 1]` (0: none, 1: full); clamped.
    pub b: f32,
}

impl FieldConfig {
    /// Shorthand constructor.
    pub const fn new(weight: f32, b: f32) -> Self {
        Self { weight, b }
    }
}

/// Ranking and analysis settings of a [`SearchIndex`].
///
/// The default (name 2.5, title 2.0, namespace 1.5, tags/description/parameter names 1.0,
/// parameter descriptions 0.5; k1 1.5; stemming and compound tokens on) was chosen on the
/// StableToolBench retrieval set (see `tests/it/retrieval_eval.rs`) while keeping the name the
/// strongest field. The quality surface is flat around it (±0.005 R@5 for ±50% changes of
/// any single weight), so it is not tied to that set.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchConfig {
    /// Tool name field.
    pub name: FieldConfig,
    /// Namespace field.
    pub namespace: FieldConfig,
    /// Title field.
    pub title: FieldConfig,
    /// Tags field (all tags form one field).
    pub tags: FieldConfig,
    /// Description field.
    pub description: FieldConfig,
    /// Parameter names (all parameters form one field).
    pub param_names: FieldConfig,
    /// Parameter descriptions (all parameters form one field).
    pub param_descriptions: FieldConfig,
    /// BM25 term-frequency saturation (≥ 0; non-finite values fall back to 1.2).
    pub k1: f32,
    /// Apply Snowball English stemming to documents and queries.
    pub stemming: bool,
    /// Also index the whole identifier (`get_weather` → `getweather`) besides its parts.
    pub compound_tokens: bool,
    /// At most this many distinct query terms are used (the first ones); clamped to 1..=1024.
    pub max_query_terms: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self {
            name: FieldConfig::new(2.5, 0.75),
            namespace: FieldConfig::new(1.5, 0.75),
            title: FieldConfig::new(2.0, 0.5),
            tags: FieldConfig::new(1.0, 0.5),
            description: FieldConfig::new(1.0, 0.9),
            param_names: FieldConfig::new(1.0, 0.75),
            param_descriptions: FieldConfig::new(0.5, 0.5),
            k1: 1.5,
            stemming: true,
            compound_tokens: true,
            max_query_terms: 64,
        }
    }
}

/// Number of indexed fields.
const NF: usize = 7;
const F_NAME: usize = 0;
const F_NAMESPACE: usize = 1;
const F_TITLE: usize = 2;
const F_TAGS: usize = 3;
const F_DESCRIPTION: usize = 4;
const F_PARAM_NAMES: usize = 5;
const F_PARAM_DESCS: usize = 6;

impl SearchConfig {
    fn fields(&self) -> [FieldConfig; NF] {
        let mut f = [FieldConfig::new(0.0, 0.0); NF];
        f[F_NAME] = self.name;
        f[F_NAMESPACE] = self.namespace;
        f[F_TITLE] = self.title;
        f[F_TAGS] = self.tags;
        f[F_DESCRIPTION] = self.description;
        f[F_PARAM_NAMES] = self.param_names;
        f[F_PARAM_DESCS] = self.param_descriptions;
        for c in &mut f {
            c.weight = if c.weight.is_finite() && c.weight > 0.0 {
                c.weight
            } else {
                0.0
            };
            c.b = if c.b.is_finite() {
                c.b.clamp(0.0, 1.0)
            } else {
                0.75
            };
        }
        f
    }
}

/// Term frequencies of one term in one document, per field (saturating at 255).
#[derive(Clone, Copy, Debug)]
struct Posting {
    slot: u32,
    tf: [u8; NF],
}

#[derive(Debug)]
struct Term {
    text: Box<str>,
    postings: Vec<Posting>,
    /// Bumped whenever the term is freed, invalidating [`Dict::surface`] entries.
    generation: u32,
}

/// [`Dict::surface`] marker for raw tokens that are not terms (stopwords, too short).
const NOT_A_TERM: u32 = u32::MAX;

/// Term dictionary: term text → id, id → postings; ids of emptied terms are reused.
#[derive(Debug, Default)]
struct Dict {
    term_ids: HashMap<Box<str>, u32>,
    terms: Vec<Term>,
    free_terms: Vec<u32>,
    /// Indexing cache: raw lowercase token → (term id or [`NOT_A_TERM`], term generation).
    /// Saves the stopword check, stemming and a lookup per token; bounded in size.
    surface: HashMap<Box<str>, (u32, u32)>,
}

impl Dict {
    /// Term id of a raw token (stopword filtering and stemming through `analyzer`), creating
    /// the term if needed; `None` when the token is not a term.
    fn resolve(&mut self, analyzer: &Analyzer, raw: &str) -> Option<u32> {
        if let Some(&(t, generation)) = self.surface.get(raw) {
            if t == NOT_A_TERM {
                return None;
            }
            if self.terms.get(t as usize).map(|x| x.generation) == Some(generation) {
                return Some(t);
            }
        }
        let entry = match analyzer.normalize(raw) {
            None => (NOT_A_TERM, 0),
            Some(term) => {
                let t = self.intern(&term);
                (t, self.terms[t as usize].generation)
            }
        };
        if self.surface.len() >= 65_536 + 4 * self.term_ids.len() {
            self.surface.clear();
        }
        self.surface.insert(raw.into(), entry);
        (entry.0 != NOT_A_TERM).then_some(entry.0)
    }

    /// Returns the term id of `tok`, creating the term if needed.
    fn intern(&mut self, tok: &str) -> u32 {
        if let Some(&t) = self.term_ids.get(tok) {
            return t;
        }
        let text: Box<str> = tok.into();
        let t = match self.free_terms.pop() {
            Some(t) => {
                self.terms[t as usize].text = text.clone();
                t
            }
            None => {
                self.terms.push(Term {
                    text: text.clone(),
                    postings: Vec::new(),
                    generation: 0,
                });
                (self.terms.len() - 1) as u32
            }
        };
        self.term_ids.insert(text, t);
        t
    }
}

/// A live document slot.
#[derive(Debug)]
struct Doc {
    id: Arc<str>,
    name_key: Box<str>,
    /// `(term id, index of this doc's posting in that term's list)`, sorted by term id.
    terms: Vec<(u32, u32)>,
}

/// In-memory BM25F index over tools. `Send + Sync`; searches take `&self`.
pub struct SearchIndex {
    config: SearchConfig,
    fields: [FieldConfig; NF],
    k1: f32,
    analyzer: Analyzer,
    dict: Dict,
    ids: HashMap<Arc<str>, u32>,
    /// Slot → live doc (`None` for a free slot).
    docs: Vec<Option<Doc>>,
    /// Slot → field lengths in terms (saturating); dense for the scoring loop.
    field_lens: Vec<[u16; NF]>,
    /// Slot → namespace id.
    doc_ns: Vec<u32>,
    free_slots: Vec<u32>,
    /// Namespace string → namespace id.
    ns_ids: HashMap<Arc<str>, u32>,
    /// Namespace id → (namespace, live doc count).
    ns: Vec<(Arc<str>, u32)>,
    free_ns: Vec<u32>,
    /// Normalized name key → slots with that name.
    names: HashMap<Box<str>, Vec<u32>>,
    /// Reused `(term, field)` occurrence buffer of [`SearchIndex::upsert`].
    occ_scratch: Vec<(u32, u8)>,
    /// Sum of field lengths over live docs.
    total_lens: [u64; NF],
    live: usize,
}

impl Default for SearchIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for SearchIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndex")
            .field("len", &self.live)
            .field("terms", &self.dict.term_ids.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Reusable per-thread scoring scratch: dense scores per slot plus the touched slots.
#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    touched: Vec<u32>,
    /// `NF × NORM_TABLE_LEN` field-length normalization factors of the current query.
    norm_table: Vec<f32>,
}

/// Only this many leading bytes of a query are analyzed.
const MAX_QUERY_BYTES: usize = 32 * 1024;

/// Field lengths below this use the per-query normalization table.
const NORM_TABLE_LEN: usize = 64;

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Heap entry ordered so that the *worst* hit is the greatest (top of a max-heap).
struct Cand<'a> {
    score: f32,
    id: &'a str,
    slot: u32,
}

impl Cand<'_> {
    /// `Less` when `self` ranks before `other` (higher score, then smaller id).
    fn rank_cmp(&self, other: &Self) -> Ordering {
        other
            .score
            .total_cmp(&self.score)
            .then_with(|| self.id.cmp(other.id))
    }
}
impl PartialEq for Cand<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.rank_cmp(other) == Ordering::Equal
    }
}
impl Eq for Cand<'_> {}
impl PartialOrd for Cand<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Cand<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank_cmp(other)
    }
}

impl SearchIndex {
    /// Creates an empty index with [`SearchConfig::default`].
    pub fn new() -> Self {
        Self::with_config(SearchConfig::default())
    }

    /// Creates an empty index with the given configuration (out-of-range values are clamped).
    pub fn with_config(config: SearchConfig) -> Self {
        let k1 = if config.k1.is_finite() {
            config.k1.max(0.0)
        } else {
            1.2
        };
        Self {
            fields: config.fields(),
            k1,
            analyzer: Analyzer::new(config.stemming, config.compound_tokens),
            config,
            dict: Dict::default(),
            ids: HashMap::default(),
            docs: Vec::new(),
            field_lens: Vec::new(),
            doc_ns: Vec::new(),
            free_slots: Vec::new(),
            ns_ids: HashMap::default(),
            ns: Vec::new(),
            free_ns: Vec::new(),
            names: HashMap::default(),
            occ_scratch: Vec::new(),
            total_lens: [0; NF],
            live: 0,
        }
    }

    /// The configuration this index was built with.
    pub fn config(&self) -> &SearchConfig {
        &self.config
    }

    /// Number of indexed tools.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no tool is indexed.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// True when a tool with this id is indexed.
    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    /// Inserts a tool, or replaces the tool with the same id. Updates postings and collection
    /// statistics in place.
    pub fn upsert(&mut self, doc: &SearchDoc<'_>) {
        if self.ids.contains_key(doc.id) {
            self.remove(doc.id);
        }
        if self.free_slots.is_empty() && u32::try_from(self.docs.len()).is_err() {
            // Slot ids are u32; beyond that the index refuses new documents.
            return;
        }
        // Collect (term id, field) occurrences.
        let mut occ = std::mem::take(&mut self.occ_scratch);
        occ.clear();
        let mut lens = [0u32; NF];
        {
            let Self {
                analyzer,
                dict,
                fields,
                ..
            } = self;
            let mut add = |field: usize, text: &str| {
                if fields[field].weight == 0.0 {
                    return;
                }
                analyzer.raw_tokens(text, |raw| {
                    if let Some(t) = dict.resolve(analyzer, raw) {
                        occ.push((t, field as u8));
                        lens[field] = lens[field].saturating_add(1);
                    }
                });
            };
            add(F_NAME, doc.name);
            add(F_NAMESPACE, doc.namespace);
            if let Some(t) = doc.title {
                add(F_TITLE, t);
            }
            for t in doc.tags {
                add(F_TAGS, t);
            }
            add(F_DESCRIPTION, doc.description);
            for (n, d) in doc.params {
                add(F_PARAM_NAMES, n);
                add(F_PARAM_DESCS, d);
            }
        }
        occ.sort_unstable();

        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                let s = self.docs.len() as u32;
                self.docs.push(None);
                self.field_lens.push([0; NF]);
                self.doc_ns.push(0);
                s
            }
        };

        let distinct = 1 + occ.windows(2).filter(|w| w[0].0 != w[1].0).count();
        let mut doc_terms: Vec<(u32, u32)> = Vec::with_capacity(distinct.min(occ.len()));
        let mut i = 0;
        while i < occ.len() {
            let t = occ[i].0;
            let mut tf = [0u8; NF];
            while i < occ.len() && occ[i].0 == t {
                let f = occ[i].1 as usize;
                tf[f] = tf[f].saturating_add(1);
                i += 1;
            }
            let postings = &mut self.dict.terms[t as usize].postings;
            let pos = postings.len() as u32;
            postings.push(Posting { slot, tf });
            doc_terms.push((t, pos));
        }
        if occ.capacity() <= 1 << 16 {
            self.occ_scratch = occ;
        }

        let mut field_len = [0u16; NF];
        for f in 0..NF {
            field_len[f] = u16::try_from(lens[f]).unwrap_or(u16::MAX);
            self.total_lens[f] += u64::from(field_len[f]);
        }
        let id: Arc<str> = Arc::from(doc.id);
        let name_key: Box<str> = identifier_key(doc.name).into_boxed_str();
        if !name_key.is_empty() {
            self.names.entry(name_key.clone()).or_default().push(slot);
        }
        let ns = self.intern_ns(doc.namespace);
        let s = slot as usize;
        self.field_lens[s] = field_len;
        self.doc_ns[s] = ns;
        self.docs[s] = Some(Doc {
            id: id.clone(),
            name_key,
            terms: doc_terms,
        });
        self.ids.insert(id, slot);
        self.live += 1;
    }

    /// Removes the tool with this id. Returns whether it was present.
    pub fn remove(&mut self, id: &str) -> bool {
        let Some(slot) = self.ids.remove(id) else {
            return false;
        };
        let s = slot as usize;
        let Some(doc) = self.docs.get_mut(s).and_then(Option::take) else {
            return false;
        };
        for &(t, pos) in &doc.terms {
            let term = &mut self.dict.terms[t as usize];
            let pos = pos as usize;
            term.postings.swap_remove(pos);
            if let Some(moved) = term.postings.get(pos) {
                // Fix the back-pointer of the posting that took this position.
                let moved_slot = moved.slot as usize;
                if let Some(Some(other)) = self.docs.get_mut(moved_slot)
                    && let Ok(k) = other.terms.binary_search_by_key(&t, |&(tt, _)| tt)
                {
                    other.terms[k].1 = pos as u32;
                }
            }
            if term.postings.is_empty() {
                let text = std::mem::take(&mut term.text);
                term.postings = Vec::new();
                term.generation = term.generation.wrapping_add(1);
                self.dict.term_ids.remove(&text);
                self.dict.free_terms.push(t);
            }
        }
        for f in 0..NF {
            self.total_lens[f] -= u64::from(self.field_lens[s][f]);
        }
        self.field_lens[s] = [0; NF];
        if let Some(slots) = self.names.get_mut(&doc.name_key) {
            slots.retain(|&x| x != slot);
            if slots.is_empty() {
                self.names.remove(&doc.name_key);
            }
        }
        let ns = self.doc_ns[s] as usize;
        if let Some(entry) = self.ns.get_mut(ns) {
            entry.1 -= 1;
            if entry.1 == 0 {
                let name = std::mem::replace(&mut entry.0, Arc::from(""));
                self.ns_ids.remove(&name);
                self.free_ns.push(ns as u32);
            }
        }
        self.free_slots.push(slot);
        self.live -= 1;
        true
    }

    /// Returns up to `q.limit` hits, best first; equal scores are ordered by id ascending.
    /// A query without any indexed term (and no exact id/name match) returns nothing.
    pub fn search(&self, q: &SearchQuery<'_>) -> Vec<SearchHit> {
        if q.limit == 0 || self.live == 0 {
            return Vec::new();
        }
        let ns_filter = match q.namespace {
            Some(ns) => match self.ns_ids.get(ns) {
                Some(&id) => Some(id),
                None => return Vec::new(),
            },
            None => None,
        };

        // Query terms: distinct, in order of first occurrence, known to the index.
        let max_terms = self.config.max_query_terms.clamp(1, 1024);
        let mut qterms: Vec<u32> = Vec::new();
        let mut distinct: Vec<Box<str>> = Vec::new();
        let mut text = q.text;
        if text.len() > MAX_QUERY_BYTES {
            let mut end = MAX_QUERY_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text = &text[..end];
        }
        self.analyzer.analyze(text, |tok| {
            if distinct.len() >= max_terms || distinct.iter().any(|d| **d == *tok) {
                return;
            }
            distinct.push(tok.into());
            if let Some(&t) = self.dict.term_ids.get(tok) {
                qterms.push(t);
            }
        });

        // Exact id / name matches.
        let mut exact: Vec<(u32, u8)> = Vec::new();
        let trimmed = q.text.trim();
        if trimmed.len() <= 1024 {
            if let Some(&slot) = self.ids.get(trimmed) {
                exact.push((slot, 2));
            }
            let key = identifier_key(trimmed);
            if let Some(slots) = self.names.get(key.as_str()) {
                for &s in slots {
                    if !exact.iter().any(|e| e.0 == s) {
                        exact.push((s, 1));
                    }
                }
            }
            if let Some(ns) = ns_filter {
                exact.retain(|&(s, _)| self.doc_ns[s as usize] == ns);
            }
        }
        if qterms.is_empty() && exact.is_empty() {
            return Vec::new();
        }

        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut scratch) => self.score_into(&mut scratch, &qterms, &exact, ns_filter, q.limit),
            Err(_) => self.score_into(&mut Scratch::default(), &qterms, &exact, ns_filter, q.limit),
        })
    }

    fn score_into(
        &self,
        scratch: &mut Scratch,
        qterms: &[u32],
        exact: &[(u32, u8)],
        ns_filter: Option<u32>,
        limit: usize,
    ) -> Vec<SearchHit> {
        let Scratch {
            scores,
            touched,
            norm_table,
        } = scratch;
        if scores.len() < self.docs.len() {
            scores.resize(self.docs.len(), 0.0);
        }
        touched.clear();

        let n = self.live as f32;
        let k1 = self.k1;
        // Per-field length normalization: w / (1 - b + b * len / avglen), tabulated for short
        // fields (the common case) to keep divisions out of the posting loop.
        let mut w = [0f32; NF];
        let mut a = [0f32; NF];
        let mut c = [0f32; NF];
        norm_table.clear();
        for f in 0..NF {
            let fc = self.fields[f];
            w[f] = fc.weight;
            let avg = self.total_lens[f] as f32 / n;
            if avg > 0.0 {
                a[f] = 1.0 - fc.b;
                c[f] = fc.b / avg;
            } else {
                a[f] = 1.0;
                c[f] = 0.0;
            }
            norm_table.extend((0..NORM_TABLE_LEN).map(|len| w[f] / (a[f] + c[f] * len as f32)));
        }
        let norm = |f: usize, len: u16| -> f32 {
            match norm_table.get(f * NORM_TABLE_LEN + usize::from(len)) {
                Some(&x) if usize::from(len) < NORM_TABLE_LEN => x,
                _ => w[f] / (a[f] + c[f] * f32::from(len)),
            }
        };

        for &t in qterms {
            let postings = &self.dict.terms[t as usize].postings;
            let df = postings.len() as f32;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            let idf_k = idf * (k1 + 1.0);
            for p in postings {
                let s = p.slot as usize;
                if let Some(ns) = ns_filter
                    && self.doc_ns[s] != ns
                {
                    continue;
                }
                let lens = &self.field_lens[s];
                let mut tfw = 0.0f32;
                for (f, (&tf, &len)) in p.tf.iter().zip(lens).enumerate() {
                    if tf != 0 {
                        tfw += f32::from(tf) * norm(f, len);
                    }
                }
                if tfw > 0.0 {
                    let contrib = idf_k * tfw / (k1 + tfw);
                    if scores[s] == 0.0 {
                        touched.push(p.slot);
                    }
                    scores[s] += contrib;
                }
            }
        }

        // Exact matches go above everything else: ids first, then names.
        if !exact.is_empty() {
            let max = touched
                .iter()
                .map(|&s| scores[s as usize])
                .fold(0.0f32, f32::max);
            for &(slot, tier) in exact {
                let s = slot as usize;
                if scores[s] == 0.0 {
                    touched.push(slot);
                }
                scores[s] += (max + 1.0) * (f32::from(tier) + 1.0);
            }
        }

        let k = limit.min(touched.len());
        let mut heap: BinaryHeap<Cand<'_>> = BinaryHeap::with_capacity(k + 1);
        for &slot in touched.iter() {
            let s = slot as usize;
            let score = scores[s];
            scores[s] = 0.0;
            // Cheap rejection before touching the document (a likely cache miss).
            if heap.len() >= k
                && heap
                    .peek()
                    .is_none_or(|worst| score.total_cmp(&worst.score) == Ordering::Less)
            {
                continue;
            }
            let Some(Some(doc)) = self.docs.get(s) else {
                continue;
            };
            let cand = Cand {
                score,
                id: &doc.id,
                slot,
            };
            if heap.len() < k {
                heap.push(cand);
            } else if let Some(mut worst) = heap.peek_mut()
                && cand < *worst
            {
                *worst = cand;
            }
        }
        touched.clear();
        heap.into_sorted_vec()
            .into_iter()
            .filter_map(|c| {
                let doc = self.docs.get(c.slot as usize)?.as_ref()?;
                Some(SearchHit {
                    id: doc.id.clone(),
                    score: c.score,
                })
            })
            .collect()
    }

    /// Returns the namespace id of `ns`, creating it if needed, and counts one more doc.
    fn intern_ns(&mut self, ns: &str) -> u32 {
        if let Some(&id) = self.ns_ids.get(ns) {
            self.ns[id as usize].1 += 1;
            return id;
        }
        let name: Arc<str> = Arc::from(ns);
        let id = match self.free_ns.pop() {
            Some(id) => {
                self.ns[id as usize] = (name.clone(), 1);
                id
            }
            None => {
                self.ns.push((name.clone(), 1));
                (self.ns.len() - 1) as u32
            }
        };
        self.ns_ids.insert(name, id);
        id
    }

    /// Checks internal invariants (test helper).
    #[cfg(test)]
    fn check_invariants(&self) {
        let mut lens = [0u64; NF];
        let mut live = 0;
        for (s, d) in self.docs.iter().enumerate() {
            let Some(d) = d else {
                assert_eq!(self.field_lens[s], [0; NF]);
                continue;
            };
            live += 1;
            assert_eq!(self.ids.get(&d.id), Some(&(s as u32)));
            for (acc, &l) in lens.iter_mut().zip(&self.field_lens[s]) {
                *acc += u64::from(l);
            }
            assert!(d.terms.windows(2).all(|w| w[0].0 < w[1].0));
            for &(t, pos) in &d.terms {
                assert_eq!(
                    self.dict.terms[t as usize].postings[pos as usize].slot,
                    s as u32
                );
            }
        }
        assert_eq!(live, self.live);
        assert_eq!(self.ids.len(), self.live);
        assert_eq!(lens, self.total_lens);
        let mut postings = 0;
        let free: std::collections::HashSet<u32> = self.dict.free_terms.iter().copied().collect();
        assert_eq!(free.len(), self.dict.free_terms.len());
        for (t, term) in self.dict.terms.iter().enumerate() {
            if term.postings.is_empty() {
                assert!(free.contains(&(t as u32)));
                continue;
            }
            assert_eq!(self.dict.term_ids.get(&term.text), Some(&(t as u32)));
            postings += term.postings.len();
        }
        let doc_terms: usize = self.docs.iter().flatten().map(|d| d.terms.len()).sum();
        assert_eq!(postings, doc_terms);
        assert_eq!(
            self.dict.term_ids.len() + self.dict.free_terms.len(),
            self.dict.terms.len()
        );
        let ns_live: u32 = self.ns.iter().map(|e| e.1).sum();
        assert_eq!(ns_live as usize, self.live);
    }
}

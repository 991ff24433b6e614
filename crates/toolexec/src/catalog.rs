//! The catalog: registered tools with their backends, compiled schemas and
//! search index, safe to read while another thread registers.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::backend::Backend;
use crate::error::{Error, truncate_for_message};
use crate::id::{ToolIdRef, compare_versions};
use crate::local::{Handler, LocalTool};
use crate::schema::CompiledSchema;
use crate::search::embedding::{EmbeddingIndex, EmbeddingStatus};
use crate::search::{
    Embedder, SearchDoc, SearchIndex, SearchMode, SearchQuery, best_of, fuse, passage,
    query_passages, schema_params, with_sentences,
};
use crate::tool::Tool;

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Largest page [`Catalog::list`] returns.
pub const MAX_PAGE: usize = 1000;
/// Page size when the caller gives none.
pub const DEFAULT_PAGE: usize = 100;

/// A tool as registered: definition, backend and compiled schemas.
pub struct RegisteredTool {
    tool: Tool,
    backend: Arc<dyn Backend>,
    pub(crate) input: CompiledSchema,
    pub(crate) output: Option<CompiledSchema>,
    params: Vec<(String, String)>,
}

impl std::fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegisteredTool")
            .field("id", &self.tool.id.to_string())
            .field("backend", &self.backend.kind())
            .finish_non_exhaustive()
    }
}

impl RegisteredTool {
    /// Compiles the schemas (and checks the docs' examples against them):
    /// the expensive part of registration, done outside any lock.
    pub fn prepare(tool: Tool, backend: Arc<dyn Backend>) -> Result<Self, Error> {
        let invalid = |field: &str, message: String| Error::InvalidDefinition {
            tool: tool.id.to_string(),
            field: field.to_owned(),
            message,
        };
        let input =
            CompiledSchema::compile(&tool.input_schema).map_err(|m| invalid("input_schema", m))?;
        let output = match &tool.output_schema {
            Some(s) => Some(CompiledSchema::compile(s).map_err(|m| invalid("output_schema", m))?),
            None => None,
        };
        for (i, ex) in tool.docs.examples.iter().enumerate() {
            if let Some(v) = input.violations(&ex.args, 1).0.first() {
                return Err(invalid(
                    &format!("docs.examples[{i}].args"),
                    format!("breaks the input schema: {v}"),
                ));
            }
            if let (Some(out), Some(result)) = (&output, &ex.result)
                && let Some(v) = out.violations(result, 1).0.first()
            {
                return Err(invalid(
                    &format!("docs.examples[{i}].result"),
                    format!("breaks the output schema: {v}"),
                ));
            }
        }
        let params = schema_params(&tool.input_schema);
        Ok(RegisteredTool {
            tool,
            backend,
            input,
            output,
            params,
        })
    }

    /// The definition.
    pub fn tool(&self) -> &Tool {
        &self.tool
    }

    /// The backend serving it.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The compiled input schema.
    pub fn input_schema(&self) -> &CompiledSchema {
        &self.input
    }

    /// The compiled output schema, if declared.
    pub fn output_schema(&self) -> Option<&CompiledSchema> {
        self.output.as_ref()
    }

    fn search_doc<'a>(&'a self, id: &'a str) -> SearchDoc<'a> {
        SearchDoc {
            id,
            namespace: self.tool.namespace(),
            name: self.tool.name(),
            title: self.tool.title.as_deref(),
            description: &self.tool.description,
            tags: &self.tool.tags,
            params: &self.params,
        }
    }
}

/// A change to the catalog, sent to [`Catalog::subscribe`]rs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CatalogEvent {
    /// A new tool.
    Registered {
        /// Its id.
        id: String,
    },
    /// A tool replaced by a new definition or backend.
    Replaced {
        /// Its id.
        id: String,
    },
    /// A tool removed.
    Unregistered {
        /// Its id.
        id: String,
    },
}

/// A namespace and how many tools it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamespaceInfo {
    /// The namespace.
    pub name: String,
    /// Number of tools (each version counts).
    pub tools: usize,
}

/// A page request for [`Catalog::list`].
#[derive(Debug, Clone, Default)]
pub struct ListRequest {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Continue after this cursor (from a previous page's `next_cursor`).
    pub cursor: Option<String>,
    /// Page size (default 100, at most 1000).
    pub limit: Option<usize>,
}

/// One page of tools, ordered by id.
#[derive(Debug, Clone)]
pub struct Page {
    /// The tools.
    pub tools: Vec<Arc<RegisteredTool>>,
    /// Pass back to get the next page; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// One search result.
#[derive(Debug, Clone)]
pub struct SearchResult {
    /// The tool.
    pub tool: Arc<RegisteredTool>,
    /// Higher is better: the BM25F score (lexical), the cosine similarity
    /// (semantic) or the fused reciprocal-rank score (hybrid).
    pub score: f32,
}

/// How deep each ranking is read before hybrid fusion (BENCHMARKS.md,
/// issue 17).
const HYBRID_DEPTH: usize = 100;

#[derive(Default)]
struct State {
    /// `namespace:name` → versions, ascending; the last is the newest.
    by_key: FastMap<Box<str>, Vec<Arc<RegisteredTool>>>,
    /// Full id → tool, ordered, for listing and paging.
    by_id: BTreeMap<String, Arc<RegisteredTool>>,
    /// Namespace → tool count.
    namespaces: BTreeMap<String, usize>,
}

impl State {
    fn insert(&mut self, id: String, entry: Arc<RegisteredTool>) {
        let key = entry.tool.id.key();
        let versions = self.by_key.entry(key.into_boxed_str()).or_default();
        let version = entry.tool.id.version();
        match versions.iter().position(|e| e.tool.id.version() == version) {
            Some(i) => versions[i] = entry.clone(),
            None => {
                versions.push(entry.clone());
                versions.sort_by(|a, b| version_order(a.tool.id.version(), b.tool.id.version()));
                *self
                    .namespaces
                    .entry(entry.tool.namespace().to_owned())
                    .or_default() += 1;
            }
        }
        self.by_id.insert(id, entry);
    }

    fn remove(&mut self, id: &str) -> Option<Arc<RegisteredTool>> {
        let entry = self.by_id.remove(id)?;
        let key = entry.tool.id.key();
        if let Some(versions) = self.by_key.get_mut(key.as_str()) {
            versions.retain(|e| !Arc::ptr_eq(e, &entry));
            if versions.is_empty() {
                self.by_key.remove(key.as_str());
            }
        }
        let ns = entry.tool.namespace();
        if let Some(n) = self.namespaces.get_mut(ns) {
            *n -= 1;
            if *n == 0 {
                self.namespaces.remove(ns);
            }
        }
        Some(entry)
    }
}

/// Unversioned sorts lowest; versions in numeric-aware order.
fn version_order(a: Option<&str>, b: Option<&str>) -> std::cmp::Ordering {
    match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(a), Some(b)) => compare_versions(a, b),
    }
}

/// The tool catalog.
///
/// Reads (`get`, `list`, `search`) take short read locks; writers are
/// serialized among themselves, compile schemas before taking any lock, and
/// hold the write lock only for the map updates, so reads stay fast while
/// another thread registers.
///
/// `namespace:name` without a version resolves to the newest registered
/// version (numeric-aware order; an unversioned tool counts as the oldest).
pub struct Catalog {
    state: RwLock<State>,
    index: RwLock<SearchIndex>,
    /// Tool vectors, once [`Catalog::set_embedder`] gave a model.
    semantic: RwLock<Option<Arc<EmbeddingIndex>>>,
    /// The mode [`Catalog::search`] uses, when set.
    mode: RwLock<Option<SearchMode>>,
    writer: Mutex<()>,
    events: broadcast::Sender<CatalogEvent>,
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog::new()
    }
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("tools", &self.len())
            .finish_non_exhaustive()
    }
}

impl Catalog {
    /// An empty catalog.
    pub fn new() -> Self {
        Catalog {
            state: RwLock::new(State::default()),
            index: RwLock::new(SearchIndex::new()),
            semantic: RwLock::new(None),
            mode: RwLock::new(None),
            writer: Mutex::new(()),
            events: broadcast::channel(1024).0,
        }
    }

    /// Registers an async function as a tool, with schemas derived from its
    /// argument and result types.
    ///
    /// ```
    /// # use schemars::JsonSchema; use serde::Deserialize;
    /// #[derive(Deserialize, JsonSchema)]
    /// struct AddArgs { a: f64, b: f64 }
    /// let catalog = toolexec::Catalog::new();
    /// catalog.tool("math:add", "Adds two numbers", |a: AddArgs| async move {
    ///     Ok::<_, toolexec::ToolError>(a.a + a.b)
    /// }).unwrap();
    /// ```
    pub fn tool<H, M>(&self, id: &str, description: &str, handler: H) -> Result<(), Error>
    where
        H: Handler<M>,
    {
        LocalTool::new(id, handler)
            .description(description)
            .register(self)
    }

    /// Registers a tool; fails with `already_exists` if the id is taken.
    pub fn register(&self, tool: Tool, backend: Arc<dyn Backend>) -> Result<(), Error> {
        let entry = RegisteredTool::prepare(tool, backend)?;
        self.commit(vec![entry], false).map(|_| ())
    }

    /// Registers or replaces a tool. Returns the previous registration.
    pub fn replace(
        &self,
        tool: Tool,
        backend: Arc<dyn Backend>,
    ) -> Result<Option<Arc<RegisteredTool>>, Error> {
        let entry = RegisteredTool::prepare(tool, backend)?;
        let id = entry.tool.id.to_string();
        let _w = self.writer.lock();
        let previous = self.state.read().by_id.get(&id).cloned();
        self.insert_locked(id.clone(), Arc::new(entry));
        let _ = self.events.send(if previous.is_some() {
            CatalogEvent::Replaced { id }
        } else {
            CatalogEvent::Registered { id }
        });
        Ok(previous)
    }

    /// Registers many tools at once: all or none. Schemas are compiled on all
    /// cores before any lock is taken. With `replace` false, an existing id
    /// fails the whole batch.
    pub fn register_many(
        &self,
        tools: Vec<(Tool, Arc<dyn Backend>)>,
        replace: bool,
    ) -> Result<usize, Error> {
        let entries = prepare_parallel(tools)?;
        self.commit(entries, replace)
    }

    fn commit(&self, entries: Vec<RegisteredTool>, replace: bool) -> Result<usize, Error> {
        let _w = self.writer.lock();
        let ids: Vec<String> = entries.iter().map(|e| e.tool.id.to_string()).collect();
        {
            let state = self.state.read();
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            for id in &ids {
                if (!replace && state.by_id.contains_key(id)) || !seen.insert(id.as_str()) {
                    return Err(Error::AlreadyExists { id: id.clone() });
                }
            }
        }
        let n = entries.len();
        for (id, entry) in ids.into_iter().zip(entries) {
            let replaced = self.state.read().by_id.contains_key(&id);
            self.insert_locked(id.clone(), Arc::new(entry));
            let _ = self.events.send(if replaced {
                CatalogEvent::Replaced { id }
            } else {
                CatalogEvent::Registered { id }
            });
        }
        Ok(n)
    }

    /// Caller holds `writer`.
    fn insert_locked(&self, id: String, entry: Arc<RegisteredTool>) {
        let doc = entry.search_doc(&id);
        self.index.write().upsert(&doc);
        if let Some(semantic) = &*self.semantic.read() {
            semantic.want(&id, passage(&doc));
        }
        self.state.write().insert(id, entry);
    }

    /// Removes the tool with exactly this id (`namespace:name[:version]`).
    pub fn unregister(&self, id: &str) -> Result<Arc<RegisteredTool>, Error> {
        ToolIdRef::parse(id)?;
        let _w = self.writer.lock();
        let removed = self.state.write().remove(id);
        let Some(entry) = removed else {
            return Err(Error::ToolNotFound { id: id.to_owned() });
        };
        self.index.write().remove(id);
        if let Some(semantic) = &*self.semantic.read() {
            semantic.forget(id);
        }
        let _ = self
            .events
            .send(CatalogEvent::Unregistered { id: id.to_owned() });
        Ok(entry)
    }

    /// Resolves an id; without a version, the newest version.
    pub fn get(&self, id: &str) -> Result<Arc<RegisteredTool>, Error> {
        self.resolve(&ToolIdRef::parse(id)?)
    }

    pub(crate) fn resolve(&self, id: &ToolIdRef<'_>) -> Result<Arc<RegisteredTool>, Error> {
        let state = self.state.read();
        let found = state
            .by_key
            .get(id.key)
            .and_then(|versions| match id.version {
                None => versions.last(),
                Some(v) => versions.iter().find(|e| e.tool.id.version() == Some(v)),
            });
        match found {
            Some(e) => Ok(e.clone()),
            None => Err(Error::ToolNotFound {
                id: truncate_for_message(id.key, 300)
                    + &id.version.map(|v| format!(":{v}")).unwrap_or_default(),
            }),
        }
    }

    /// Number of registered tools (each version counts).
    pub fn len(&self) -> usize {
        self.state.read().by_id.len()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lists tools ordered by id, a page at a time. Paging is stable: a
    /// cursor is the last id of the previous page, so tools registered or
    /// removed meanwhile never shift other tools between pages.
    pub fn list(&self, req: &ListRequest) -> Result<Page, Error> {
        let limit = req.limit.unwrap_or(DEFAULT_PAGE);
        if limit == 0 || limit > MAX_PAGE {
            return Err(Error::invalid_request(
                "limit",
                format!("must be between 1 and {MAX_PAGE}"),
            ));
        }
        if let Some(c) = &req.cursor {
            ToolIdRef::parse(c).map_err(|_| {
                Error::invalid_request("cursor", "not a cursor returned by a previous page")
            })?;
        }
        let prefix = req.namespace.as_ref().map(|ns| format!("{ns}:"));
        let state = self.state.read();
        let start = match (&req.cursor, &prefix) {
            (Some(c), Some(p)) if c.as_str() < p.as_str() => Bound::Included(p.clone()),
            (Some(c), _) => Bound::Excluded(c.clone()),
            (None, Some(p)) => Bound::Included(p.clone()),
            (None, None) => Bound::Unbounded,
        };
        let mut tools = Vec::with_capacity(limit.min(state.by_id.len()));
        let mut more = false;
        for (id, entry) in state.by_id.range((start, Bound::Unbounded)) {
            if let Some(p) = &prefix
                && !id.starts_with(p.as_str())
            {
                break;
            }
            if tools.len() == limit {
                more = true;
                break;
            }
            tools.push(entry.clone());
        }
        let next_cursor = if more {
            tools.last().map(|e| e.tool.id.to_string())
        } else {
            None
        };
        Ok(Page { tools, next_cursor })
    }

    /// Every tool, ordered by id.
    pub fn all(&self) -> Vec<Arc<RegisteredTool>> {
        self.state.read().by_id.values().cloned().collect()
    }

    /// Namespaces with their tool counts, ordered by name.
    pub fn namespaces(&self) -> Vec<NamespaceInfo> {
        self.state
            .read()
            .namespaces
            .iter()
            .map(|(name, &tools)| NamespaceInfo {
                name: name.clone(),
                tools,
            })
            .collect()
    }

    /// Gives the catalog a sentence-embedding model: every tool, present
    /// and future, is embedded in the background (in batches, off the
    /// request path; until then it is found lexically), and searches
    /// default to [`SearchMode::Hybrid`].
    pub fn set_embedder(&self, embedder: Arc<dyn Embedder>) -> Result<(), Error> {
        let index = Arc::new(EmbeddingIndex::start(embedder)?);
        let _w = self.writer.lock();
        for (id, entry) in &self.state.read().by_id {
            index.want(id, passage(&entry.search_doc(id)));
        }
        *self.semantic.write() = Some(index);
        Ok(())
    }

    /// How far embedding has got; `None` without a model.
    pub fn embedding_status(&self) -> Option<EmbeddingStatus> {
        self.semantic.read().as_ref().map(|s| s.status())
    }

    /// Waits until every tool registered so far is embedded (or failed),
    /// at most `timeout`; whether that happened (true without a model).
    pub fn wait_for_embeddings(&self, timeout: std::time::Duration) -> bool {
        let semantic = self.semantic.read().clone();
        semantic.is_none_or(|s| s.wait_idle(timeout))
    }

    /// The mode [`Catalog::search`] uses: the one set with
    /// [`Catalog::set_search_mode`], else hybrid with a model and lexical
    /// without.
    pub fn default_search_mode(&self) -> SearchMode {
        if let Some(mode) = *self.mode.read() {
            return mode;
        }
        if self.semantic.read().is_some() {
            SearchMode::Hybrid
        } else {
            SearchMode::Lexical
        }
    }

    /// Sets the mode [`Catalog::search`] uses. Semantic and hybrid need a
    /// model ([`Catalog::set_embedder`] first): else `invalid_request` at
    /// `mode`.
    pub fn set_search_mode(&self, mode: SearchMode) -> Result<(), Error> {
        if mode != SearchMode::Lexical && self.semantic.read().is_none() {
            return Err(Error::invalid_request(
                "mode",
                format!("{mode} search needs an embedding model"),
            ));
        }
        *self.mode.write() = Some(mode);
        Ok(())
    }

    /// Ranked search in the [default mode](Catalog::default_search_mode):
    /// full text over names, namespaces, tags, descriptions and parameters,
    /// fused with embedding similarity when a model is set. A query the
    /// model fails on is answered lexically (and logged).
    pub fn search(&self, query: &str, limit: usize, namespace: Option<&str>) -> Vec<SearchResult> {
        let mode = self.default_search_mode();
        self.search_with(query, limit, namespace, mode)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "semantic search failed; answering lexically");
                self.lexical(query, limit, namespace)
            })
    }

    /// Ranked search in `mode`. Semantic and hybrid need a model
    /// ([`Catalog::set_embedder`]): without one they are `invalid_request`
    /// at `mode`; a query the model fails on is `backend_unavailable`. A
    /// query that is exactly a tool id puts that tool first in every mode.
    pub fn search_with(
        &self,
        query: &str,
        limit: usize,
        namespace: Option<&str>,
        mode: SearchMode,
    ) -> Result<Vec<SearchResult>, Error> {
        let _span = tracing::info_span!(
            target: "toolexec::search",
            "search_tools",
            toolexec.search.mode = mode.as_str(),
            toolexec.search.limit = limit,
        )
        .entered();
        if mode == SearchMode::Lexical {
            return Ok(self.lexical(query, limit, namespace));
        }
        let Some(semantic) = self.semantic.read().clone() else {
            return Err(Error::invalid_request(
                "mode",
                format!(
                    "{mode} search needs an embedding model ([search] model); lexical is available"
                ),
            ));
        };
        let depth = match mode {
            SearchMode::Hybrid => limit.max(HYBRID_DEPTH),
            _ => limit,
        };
        let passages = query_passages(query);
        let texts: Vec<&str> = passages.iter().map(String::as_str).collect();
        let vectors = semantic.embedder().embed_query(&texts)?;
        let prefix = namespace.map(|ns| format!("{ns}:"));
        // The whole query's ranking and each sentence's; a tool's best in
        // any is its similarity to the query.
        let each = semantic.nearest_each(&vectors, depth, |id| {
            prefix.as_deref().is_none_or(|p| id.starts_with(p))
        });
        let sentences = each.get(1..).unwrap_or_default();
        let nearest = best_of(&each, depth);
        let ranked: Vec<(Arc<str>, f32)> = if mode == SearchMode::Semantic {
            nearest
        } else {
            let lexical = |text: &str| -> Vec<(Arc<str>, f32)> {
                self.index
                    .read()
                    .search(&SearchQuery {
                        text,
                        limit: depth,
                        namespace,
                    })
                    .into_iter()
                    .map(|h| (h.id, h.score))
                    .collect()
            };
            if sentences.is_empty() {
                fuse(&lexical(query), &nearest, limit)
            } else {
                let whole = fuse(&lexical(query), &nearest, depth);
                let parts: Vec<Vec<(Arc<str>, f32)>> = passages[1..]
                    .iter()
                    .zip(sentences)
                    .map(|(text, semantic)| fuse(&lexical(text), semantic, depth))
                    .collect();
                with_sentences(&whole, &parts, limit)
            }
        };
        let exact = query.trim();
        let state = self.state.read();
        let mut out: Vec<SearchResult> = Vec::with_capacity(limit);
        if let Some(tool) = state
            .by_id
            .get(exact)
            .filter(|t| namespace.is_none_or(|ns| t.tool.namespace() == ns))
        {
            out.push(SearchResult {
                tool: tool.clone(),
                score: f32::INFINITY,
            });
        }
        for (id, score) in ranked {
            if out.len() == limit {
                break;
            }
            if &*id == exact {
                continue;
            }
            if let Some(tool) = state.by_id.get(&*id) {
                out.push(SearchResult {
                    tool: tool.clone(),
                    score,
                });
            }
        }
        out.truncate(limit);
        Ok(out)
    }

    fn lexical(&self, query: &str, limit: usize, namespace: Option<&str>) -> Vec<SearchResult> {
        let hits = self.index.read().search(&SearchQuery {
            text: query,
            limit,
            namespace,
        });
        let state = self.state.read();
        hits.into_iter()
            .filter_map(|h| {
                state.by_id.get(&*h.id).map(|tool| SearchResult {
                    tool: tool.clone(),
                    score: h.score,
                })
            })
            .collect()
    }

    /// Subscribes to changes. A receiver that falls more than 1024 events
    /// behind gets `RecvError::Lagged` and should re-list.
    pub fn subscribe(&self) -> broadcast::Receiver<CatalogEvent> {
        self.events.subscribe()
    }
}

fn prepare_parallel(tools: Vec<(Tool, Arc<dyn Backend>)>) -> Result<Vec<RegisteredTool>, Error> {
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(tools.len().div_ceil(64).max(1));
    if workers <= 1 {
        return tools
            .into_iter()
            .map(|(t, b)| RegisteredTool::prepare(t, b))
            .collect();
    }
    let chunk = tools.len().div_ceil(workers);
    let mut chunks: Vec<Vec<(Tool, Arc<dyn Backend>)>> = Vec::with_capacity(workers);
    let mut rest = tools;
    while rest.len() > chunk {
        let tail = rest.split_off(chunk);
        chunks.push(rest);
        rest = tail;
    }
    chunks.push(rest);
    let results: Vec<Result<Vec<RegisteredTool>, Error>> = std::thread::scope(|s| {
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|c| {
                s.spawn(move || {
                    c.into_iter()
                        .map(|(t, b)| RegisteredTool::prepare(t, b))
                        .collect::<Result<Vec<_>, _>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::invalid_request(
                        "tools",
                        "schema compilation panicked",
                    ))
                })
            })
            .collect()
    });
    let mut out = Vec::new();
    for r in results {
        out.extend(r?);
    }
    Ok(out)
}

/// JSON listing of a tool for machine output: the MCP fields plus id.
pub fn tool_json(tool: &Tool) -> Value {
    serde_json::to_value(tool).unwrap_or(Value::Null)
}

//! The StableToolBench tool-retrieval set (`../shared/retrieval`) and its
//! metrics, for the lexical and the semantic search evaluations.
//!
//! Data: `$TOOLEXEC_RETRIEVAL_DIR`, else `shared/retrieval/stabletoolbench`
//! next to the workspace, with `tools.jsonl` and `queries.jsonl`; metrics as
//! its README defines them (binary relevance, nDCG@10 with the ideal over
//! min(|relevant|, 10) positions).

use std::path::{Path, PathBuf};

use serde_json::Value;
use toolexec::search::{SearchDoc, schema_params};

/// One tool of the set.
#[derive(Debug, Clone)]
pub struct Tool {
    /// `Tool::api`.
    pub id: String,
    /// The RapidAPI tool, as the namespace.
    pub namespace: String,
    /// The API's name.
    pub name: String,
    /// The API part of the id.
    pub title: String,
    /// Its description.
    pub description: String,
    /// Its category, when it has one.
    pub tags: Vec<String>,
    /// Its parameters' names and descriptions.
    pub params: Vec<(String, String)>,
}

/// Which parts of a tool are indexed.
#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    /// Parameter names and descriptions.
    pub params: bool,
    /// The API part of the id as the title.
    pub title: bool,
    /// The category as a tag.
    pub category: bool,
}

/// Everything indexed.
pub const FULL: Mapping = Mapping {
    params: true,
    title: true,
    category: true,
};

impl Tool {
    /// The search document of this tool under `m`.
    pub fn doc(&self, m: Mapping) -> SearchDoc<'_> {
        SearchDoc {
            id: &self.id,
            namespace: &self.namespace,
            name: &self.name,
            title: (m.title && !self.title.is_empty()).then_some(self.title.as_str()),
            description: &self.description,
            tags: if m.category { &self.tags } else { &[] },
            params: if m.params { &self.params } else { &[] },
        }
    }
}

/// One labelled query.
#[derive(Debug, Clone)]
pub struct Query {
    /// The query text.
    pub text: String,
    /// The ids of the tools that answer it.
    pub relevant: Vec<String>,
    /// Its StableToolBench group (`G1_category`, `G2_instruction`, ...):
    /// G1 queries need tools of one RapidAPI tool, G2 and G3 of several.
    pub group: String,
}

/// Retrieval quality, averaged over queries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Metrics {
    /// Recall@1.
    pub r1: f64,
    /// Recall@5.
    pub r5: f64,
    /// Recall@10.
    pub r10: f64,
    /// Any relevant tool first.
    pub hit1: f64,
    /// Any relevant tool in the first five.
    pub hit5: f64,
    /// nDCG@10.
    pub ndcg10: f64,
}

fn data_dir() -> PathBuf {
    match std::env::var_os("TOOLEXEC_RETRIEVAL_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/retrieval/stabletoolbench")
        }
    }
}

/// The set, or `None` after [`crate::skip()`] when it is not here.
pub fn load(test: &str) -> Option<(Vec<Tool>, Vec<Query>)> {
    let dir = data_dir();
    let tools_path = dir.join("tools.jsonl");
    let queries_path = dir.join("queries.jsonl");
    if !tools_path.is_file() || !queries_path.is_file() {
        crate::skip(
            test,
            format!(
                "retrieval set not found at {} (tools.jsonl, queries.jsonl); set TOOLEXEC_RETRIEVAL_DIR",
                dir.display()
            ),
        );
        return None;
    }
    let read = |p: &Path| -> Vec<Value> {
        let text = std::fs::read_to_string(p)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()));
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("{}:{}: bad JSON: {e}", p.display(), i + 1))
            })
            .collect()
    };
    let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let tools: Vec<Tool> = read(&tools_path)
        .iter()
        .map(|v| {
            let id = s(v, "id");
            let title = id.split_once("::").map_or("", |(_, api)| api).to_string();
            let category = s(v, "category");
            Tool {
                namespace: s(v, "tool_name"),
                name: s(v, "name"),
                title,
                description: s(v, "description"),
                tags: if category.is_empty() {
                    Vec::new()
                } else {
                    vec![category]
                },
                params: v.get("input_schema").map(schema_params).unwrap_or_default(),
                id,
            }
        })
        .collect();
    let queries: Vec<Query> = read(&queries_path)
        .iter()
        .map(|v| Query {
            text: s(v, "query"),
            relevant: v
                .get("relevant")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            group: s(v, "group"),
        })
        .collect();
    assert!(
        !tools.is_empty() && !queries.is_empty(),
        "empty retrieval set"
    );
    Some((tools, queries))
}

/// The metrics of `rank` (a query's tool ids, best first, at least ten
/// when there are) over `queries`.
pub fn evaluate<'q>(
    queries: &'q [Query],
    mut rank: impl FnMut(usize, &'q Query) -> Vec<String>,
) -> Metrics {
    let mut sum = Metrics::default();
    for (i, q) in queries.iter().enumerate() {
        let hits = rank(i, q);
        let rel: Vec<bool> = hits
            .iter()
            .take(10)
            .map(|h| q.relevant.contains(h))
            .collect();
        let n_rel = q.relevant.len().max(1) as f64;
        let found = |k: usize| rel.iter().take(k).filter(|&&r| r).count() as f64;
        sum.r1 += found(1) / n_rel;
        sum.r5 += found(5) / n_rel;
        sum.r10 += found(10) / n_rel;
        sum.hit1 += f64::from(found(1) > 0.0);
        sum.hit5 += f64::from(found(5) > 0.0);
        let dcg: f64 = rel
            .iter()
            .enumerate()
            .filter(|(_, r)| **r)
            .map(|(i, _)| 1.0 / ((i + 2) as f64).log2())
            .sum();
        let ideal: f64 = (0..q.relevant.len().min(10))
            .map(|i| 1.0 / ((i + 2) as f64).log2())
            .sum();
        if ideal > 0.0 {
            sum.ndcg10 += dcg / ideal;
        }
    }
    let n = queries.len() as f64;
    Metrics {
        r1: sum.r1 / n,
        r5: sum.r5 / n,
        r10: sum.r10 / n,
        hit1: sum.hit1 / n,
        hit5: sum.hit5 / n,
        ndcg10: sum.ndcg10 / n,
    }
}

/// Prints the table header.
pub fn header() {
    println!(
        "| {:<44} | {:>6} | {:>6} | {:>6} | {:>6} | {:>6} | {:>7} |",
        "variant", "R@1", "R@5", "R@10", "Hit@1", "Hit@5", "nDCG@10"
    );
    println!(
        "|{:-<46}|{:-<8}|{:-<8}|{:-<8}|{:-<8}|{:-<8}|{:-<9}|",
        "", "", "", "", "", "", ""
    );
}

/// Prints one row.
pub fn row(label: &str, m: &Metrics) {
    println!(
        "| {:<44} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4} | {:.4}  |",
        label, m.r1, m.r5, m.r10, m.hit1, m.hit5, m.ndcg10
    );
}

use super::*;

struct Tool {
    id: String,
    ns: String,
    name: String,
    title: Option<String>,
    desc: String,
    tags: Vec<String>,
    params: Vec<(String, String)>,
}

fn tool(id: &str, desc: &str) -> Tool {
    let (ns, name) = id.split_once(':').unwrap_or(("", id));
    let name = name.split(':').next().unwrap_or(name);
    Tool {
        id: id.into(),
        ns: ns.into(),
        name: name.into(),
        title: None,
        desc: desc.into(),
        tags: Vec::new(),
        params: Vec::new(),
    }
}

impl Tool {
    fn doc(&self) -> SearchDoc<'_> {
        SearchDoc {
            id: &self.id,
            namespace: &self.ns,
            name: &self.name,
            title: self.title.as_deref(),
            description: &self.desc,
            tags: &self.tags,
            params: &self.params,
        }
    }
}

fn q(text: &str) -> SearchQuery<'_> {
    SearchQuery {
        text,
        limit: 10,
        namespace: None,
    }
}

fn ids(hits: &[SearchHit]) -> Vec<&str> {
    hits.iter().map(|h| &*h.id).collect()
}

fn sample() -> (SearchIndex, Vec<Tool>) {
    let tools = vec![
        tool("math:add", "Add two numbers and return the sum"),
        tool("math:subtract", "Subtract one number from another"),
        tool(
            "weather:get_forecast",
            "Get the weather forecast for a city",
        ),
        tool(
            "weather:current",
            "Current weather conditions: temperature, wind",
        ),
        tool(
            "fs:read_file",
            "Read a file from disk and return its contents",
        ),
        tool("fs:write_file", "Write contents to a file on disk"),
        tool("http:fetch", "Fetch a URL over HTTP and return the body"),
    ];
    let mut idx = SearchIndex::new();
    for t in &tools {
        idx.upsert(&t.doc());
    }
    idx.check_invariants();
    (idx, tools)
}

#[test]
fn index_is_send_sync() {
    fn check<T: Send + Sync>() {}
    check::<SearchIndex>();
}

#[test]
fn basic_search() {
    let (idx, _) = sample();
    assert_eq!(idx.len(), 7);
    let hits = idx.search(&q("weather forecast for Paris"));
    assert_eq!(hits[0].id.as_ref(), "weather:get_forecast");
    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
    let hits = idx.search(&q("read a file"));
    assert_eq!(hits[0].id.as_ref(), "fs:read_file");
    let hits = idx.search(&q("reading files"));
    assert_eq!(hits[0].id.as_ref(), "fs:read_file", "stemming: {hits:?}");
}

#[test]
fn empty_index_and_limits() {
    let idx = SearchIndex::new();
    assert!(idx.is_empty());
    assert!(idx.search(&q("anything")).is_empty());
    let (idx, _) = sample();
    let mut query = q("file");
    query.limit = 0;
    assert!(idx.search(&query).is_empty());
    query.limit = 1;
    assert_eq!(idx.search(&query).len(), 1);
    query.limit = usize::MAX;
    assert_eq!(idx.search(&query).len(), 2);
    assert!(idx.search(&q("zzzqqq unknownword")).is_empty());
    assert!(idx.search(&q("")).is_empty());
    assert!(idx.search(&q("the of and")).is_empty());
}

#[test]
fn upsert_replace_remove() {
    let (mut idx, _) = sample();
    let total_before = idx.total_lens;
    // Replace: the new text is searchable, the old text is not.
    let t = tool("math:add", "Concatenate strings together");
    idx.upsert(&t.doc());
    idx.check_invariants();
    assert_eq!(idx.len(), 7);
    assert_eq!(ids(&idx.search(&q("concatenate strings"))), ["math:add"]);
    assert!(!ids(&idx.search(&q("sum"))).contains(&"math:add"));
    assert_ne!(idx.total_lens, total_before);

    // Remove really removes.
    assert!(idx.remove("fs:read_file"));
    assert!(!idx.remove("fs:read_file"));
    assert!(!idx.contains("fs:read_file"));
    idx.check_invariants();
    assert_eq!(idx.len(), 6);
    for text in ["read file", "fs:read_file", "read_file", "disk"] {
        assert!(
            !ids(&idx.search(&q(text))).contains(&"fs:read_file"),
            "{text}"
        );
    }
    // The freed slot is reused.
    let slots = idx.docs.len();
    let t = tool("fs:stat", "File metadata: size and modification time");
    idx.upsert(&t.doc());
    assert_eq!(idx.docs.len(), slots);
    idx.check_invariants();
    assert_eq!(idx.search(&q("metadata"))[0].id.as_ref(), "fs:stat");

    // Remove everything: stats go back to zero, terms are released.
    let all: Vec<String> = idx.ids.keys().map(|k| k.to_string()).collect();
    for id in &all {
        assert!(idx.remove(id));
        idx.check_invariants();
    }
    assert!(idx.is_empty());
    assert_eq!(idx.total_lens, [0; NF]);
    assert!(idx.dict.term_ids.is_empty());
    assert!(idx.ns_ids.is_empty());
    assert!(idx.names.is_empty());
    assert!(idx.search(&q("file")).is_empty());
}

#[test]
fn results_independent_of_history() {
    let (idx_a, tools) = sample();
    // Build the same set with churn in between.
    let mut idx_b = SearchIndex::new();
    for t in tools.iter().rev() {
        idx_b.upsert(&t.doc());
    }
    for t in &tools[..3] {
        idx_b.remove(&t.id);
        idx_b.upsert(&tool("junk:x", "junk words here").doc());
        idx_b.remove("junk:x");
    }
    for t in &tools[..3] {
        idx_b.upsert(&t.doc());
    }
    idx_b.check_invariants();
    for text in ["file", "weather", "return", "number sum", "disk contents"] {
        assert_eq!(idx_a.search(&q(text)), idx_b.search(&q(text)), "{text}");
    }
}

#[test]
fn namespace_filter() {
    let (idx, _) = sample();
    let hits = idx.search(&SearchQuery {
        text: "return",
        limit: 10,
        namespace: Some("fs"),
    });
    assert_eq!(ids(&hits), ["fs:read_file"]);
    let hits = idx.search(&SearchQuery {
        text: "file",
        limit: 10,
        namespace: Some("nope"),
    });
    assert!(hits.is_empty());
    let hits = idx.search(&SearchQuery {
        text: "math:add",
        limit: 10,
        namespace: Some("fs"),
    });
    assert!(hits.is_empty());
}

#[test]
fn exact_name_and_id_rank_first() {
    let mut idx = SearchIndex::new();
    let mut tools = vec![
        tool("text:add_suffix", "add add add add suffix to add text add"),
        tool("math:add", "Sum of numbers"),
        tool("calc:add:1.0", "Addition"),
        tool("calc:add:2.0", "Addition v2"),
    ];
    let mut t = tool("weather:getForecast", "forecast");
    t.name = "getForecast".into();
    tools.push(t);
    for t in &tools {
        idx.upsert(&t.doc());
    }
    // Exact name: all tools named "add" come before the description-heavy one.
    let hits = idx.search(&q("add"));
    assert_eq!(hits.len(), 4);
    assert_eq!(hits[3].id.as_ref(), "text:add_suffix");
    // Exact id wins over exact name.
    for id in [
        "math:add",
        "calc:add:1.0",
        "calc:add:2.0",
        "text:add_suffix",
    ] {
        assert_eq!(idx.search(&q(id))[0].id.as_ref(), id);
        assert_eq!(idx.search(&q(&format!("  {id} ")))[0].id.as_ref(), id);
    }
    // Name in another spelling.
    assert_eq!(
        idx.search(&q("get_forecast"))[0].id.as_ref(),
        "weather:getForecast"
    );
}

#[test]
fn ties_broken_by_id() {
    let mut idx = SearchIndex::new();
    for id in ["b:dup", "a:dup", "c:dup", "a:dup2"] {
        let mut t = tool(id, "identical description text");
        t.name = "same".into();
        t.ns = "ns".into();
        idx.upsert(&t.doc());
    }
    for _ in 0..3 {
        let hits = idx.search(&q("identical"));
        assert_eq!(ids(&hits), ["a:dup", "a:dup2", "b:dup", "c:dup"]);
        assert!(hits.windows(2).all(|w| w[0].score == w[1].score));
    }
    let mut query = q("identical");
    query.limit = 2;
    assert_eq!(ids(&idx.search(&query)), ["a:dup", "a:dup2"]);
}

#[test]
fn hostile_input_does_not_panic() {
    let (mut idx, _) = sample();
    let huge = "weather ".repeat(200_000);
    assert_eq!(idx.search(&q(&huge))[0].id.as_ref(), "weather:get_forecast");
    let many: String = (0..100_000).map(|i| format!("w{i} ")).collect();
    assert!(idx.search(&q(&many)).is_empty());
    let weird = "\u{0}\u{1}\u{202e}\u{feff}𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ﷽ ǅ İı ß \u{301}\u{301} \t\r\n 🦀🦀 \\x00 %s {}";
    let _ = idx.search(&q(weird));
    let _ = idx.search(&SearchQuery {
        text: weird,
        limit: usize::MAX,
        namespace: Some(weird),
    });
    let long_word = "a".repeat(1 << 20);
    let _ = idx.search(&q(&long_word));
    // Hostile documents.
    let mut t = tool("evil:\u{0}", weird);
    t.name = weird.into();
    t.ns = weird.into();
    t.title = Some(huge.clone());
    t.tags = vec![long_word.clone(), String::new()];
    t.params = vec![(weird.into(), many.clone()), (String::new(), String::new())];
    idx.upsert(&t.doc());
    idx.check_invariants();
    let hits = idx.search(&q("weather"));
    assert_eq!(hits[0].id.as_ref(), "evil:\u{0}");
    assert_eq!(idx.search(&q("evil:\u{0}"))[0].id.as_ref(), "evil:\u{0}");
    assert!(idx.remove("evil:\u{0}"));
    idx.check_invariants();
    assert!(!ids(&idx.search(&q("w5"))).contains(&"evil:\u{0}"));
}

#[test]
fn hostile_config_does_not_panic() {
    let cfg = SearchConfig {
        name: FieldConfig::new(f32::NAN, f32::INFINITY),
        namespace: FieldConfig::new(-1.0, -5.0),
        description: FieldConfig::new(1.0, 7.0),
        k1: f32::NAN,
        max_query_terms: 0,
        ..SearchConfig::default()
    };
    let mut idx = SearchIndex::with_config(cfg);
    let t = tool("fs:read", "read a file");
    idx.upsert(&t.doc());
    let hits = idx.search(&q("file"));
    assert_eq!(ids(&hits), ["fs:read"]);
    assert!(hits[0].score.is_finite() && hits[0].score > 0.0);
}

#[test]
fn stats_track_field_lengths() {
    let mut idx = SearchIndex::new();
    let t = tool("a:one", "alpha beta gamma");
    idx.upsert(&t.doc());
    assert_eq!(idx.total_lens[F_DESCRIPTION], 3);
    let t2 = tool("a:two", "delta");
    idx.upsert(&t2.doc());
    assert_eq!(idx.total_lens[F_DESCRIPTION], 4);
    idx.upsert(&tool("a:one", "alpha").doc());
    assert_eq!(idx.total_lens[F_DESCRIPTION], 2);
    idx.remove("a:two");
    assert_eq!(idx.total_lens[F_DESCRIPTION], 1);
    assert_eq!(idx.len(), 1);
    idx.check_invariants();
}

#[test]
fn params_and_tags_are_searchable() {
    let mut idx = SearchIndex::new();
    let mut t = tool("geo:lookup", "Look up a place");
    t.params = vec![("postalCode".into(), "ZIP or postal code".into())];
    t.tags = vec!["geography".into()];
    t.title = Some("Place finder".into());
    idx.upsert(&t.doc());
    idx.upsert(&tool("other:thing", "Unrelated tool").doc());
    for text in ["zip", "postal code", "geography", "finder"] {
        assert_eq!(ids(&idx.search(&q(text))), ["geo:lookup"], "{text}");
    }
}

#[test]
fn concurrent_searches() {
    let (idx, _) = sample();
    let idx = Arc::new(idx);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let idx = idx.clone();
            std::thread::spawn(move || {
                for _ in 0..200 {
                    assert_eq!(
                        idx.search(&q("weather"))[0].id.as_ref(),
                        "weather:get_forecast"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn freed_terms_are_reused_safely() {
    let mut idx = SearchIndex::new();
    idx.upsert(&tool("z:one", "zebra stripes").doc());
    assert!(idx.remove("z:one"));
    // The freed term ids are reused by new terms...
    idx.upsert(&tool("y:two", "yak wool").doc());
    // ...and the old words must not resolve to them through the indexing cache.
    idx.upsert(&tool("z:three", "zebra crossing").doc());
    idx.check_invariants();
    assert_eq!(ids(&idx.search(&q("zebra"))), ["z:three"]);
    assert_eq!(ids(&idx.search(&q("yak"))), ["y:two"]);
    assert_eq!(ids(&idx.search(&q("stripes"))), Vec::<&str>::new());
    assert_eq!(ids(&idx.search(&q("wool"))), ["y:two"]);
}

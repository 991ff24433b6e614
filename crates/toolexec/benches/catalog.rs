//! Registering 10,000 tools until all are searchable, and catalog-level
//! search (index plus result resolution) over them.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use toolexec::{Backend, BoxFuture, Call, Catalog, Tool, ToolOutput};

const VERBS: &[&str] = &[
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "send",
    "fetch",
    "convert",
    "resize",
    "translate",
    "summarize",
    "schedule",
    "cancel",
    "export",
    "import",
    "validate",
    "analyze",
];
const NOUNS: &[&str] = &[
    "user",
    "order",
    "invoice",
    "email",
    "file",
    "image",
    "calendar_event",
    "ticket",
    "repository",
    "weather",
    "stock_price",
    "payment",
    "contact",
    "document",
    "video",
    "playlist",
    "flight",
    "hotel",
    "recipe",
    "news_article",
    "currency",
    "timezone",
    "message",
    "report",
];
const WORDS: &[&str] = &[
    "returns",
    "the",
    "current",
    "details",
    "for",
    "a",
    "given",
    "identifier",
    "with",
    "optional",
    "filters",
    "including",
    "status",
    "date",
    "range",
    "owner",
    "pagination",
    "results",
    "sorted",
    "by",
    "relevance",
    "from",
    "external",
    "service",
    "account",
    "records",
    "matching",
    "query",
    "fields",
    "metadata",
    "format",
    "json",
    "limit",
    "offset",
    "language",
    "region",
    "price",
    "amount",
    "city",
    "country",
    "name",
    "address",
    "phone",
    "webhook",
    "notification",
    "secure",
];

/// Deterministic pseudo-random generator (xorshift), so runs compare.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.next() % xs.len()]
    }
}

struct Noop;
impl Backend for Noop {
    fn kind(&self) -> &str {
        "noop"
    }
    fn call<'a>(&'a self, _: Call<'a>) -> BoxFuture<'a, Result<ToolOutput, toolexec::Error>> {
        Box::pin(async { Ok(ToolOutput::default()) })
    }
}

/// 10,000 varied tools: 50 namespaces, distinct schemas (no two identical).
fn synthetic_tools(n: usize) -> Vec<(Tool, Arc<dyn Backend>)> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let backend: Arc<dyn Backend> = Arc::new(Noop);
    (0..n)
        .map(|i| {
            let verb = rng.pick(VERBS);
            let noun = rng.pick(NOUNS);
            let desc: Vec<&str> = (0..10 + rng.next() % 20).map(|_| rng.pick(WORDS)).collect();
            let mut props = serde_json::Map::new();
            let mut required = Vec::new();
            for p in 0..1 + rng.next() % 5 {
                let name = format!("{}_{p}", rng.pick(WORDS));
                let ty = ["string", "integer", "number", "boolean"][rng.next() % 4];
                props.insert(
                    name.clone(),
                    json!({"type": ty, "description": format!("The {} {} of the {noun}", rng.pick(WORDS), rng.pick(WORDS))}),
                );
                if p == 0 {
                    required.push(Value::String(name));
                }
            }
            let tool = Tool::builder(&format!("ns{}:{verb}_{noun}_{i}", i % 50))
                .description(format!("{verb} {noun}: {}", desc.join(" ")))
                .input_schema(json!({"type": "object", "properties": props, "required": required}))
                .tags([noun])
                .build()
                .unwrap();
            (tool, backend.clone())
        })
        .collect()
}

fn bench_register(c: &mut Criterion) {
    let tools = synthetic_tools(10_000);
    let mut group = c.benchmark_group("register_10k");
    group.sample_size(10);
    group.bench_function("register_many", |b| {
        b.iter_batched(
            || tools.clone(),
            |batch| {
                let catalog = Catalog::new();
                catalog.register_many(batch, false).unwrap();
                // Searchable as soon as registration returns.
                assert!(!catalog.search("send email", 1, None).is_empty());
                catalog
            },
            BatchSize::PerIteration,
        )
    });
    group.bench_function("register_one_by_one", |b| {
        b.iter_batched(
            || tools.clone(),
            |batch| {
                let catalog = Catalog::new();
                for (tool, backend) in batch {
                    catalog.register(tool, backend).unwrap();
                }
                assert!(!catalog.search("send email", 1, None).is_empty());
                catalog
            },
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn bench_search(c: &mut Criterion) {
    let catalog = Catalog::new();
    catalog
        .register_many(synthetic_tools(10_000), false)
        .unwrap();
    let mut group = c.benchmark_group("catalog_search_10k");
    for q in [
        "send email",
        "get the current weather for a city",
        "convert currency price amount",
        "delete_user",
    ] {
        group.bench_function(q, |b| b.iter(|| catalog.search(q, 10, None)));
    }
    group.finish();
    let mut group = c.benchmark_group("catalog_get_10k");
    group.bench_function("get", |b| {
        b.iter(|| catalog.get("ns7:send_email_7").is_ok())
    });
    group.finish();
}

criterion_group!(benches, bench_register, bench_search);
criterion_main!(benches);

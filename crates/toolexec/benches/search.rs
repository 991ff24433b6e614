//! Benchmarks of `toolexec::search` on deterministic synthetic tool catalogs.
//!
//! Run: `cargo bench -p toolexec --bench search -- --warm-up-time 1 --measurement-time 3`.
//! Set `TOOLEXEC_BENCH_100K=1` to also bench search over 100,000 tools.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use toolexec::search::{SearchDoc, SearchIndex, SearchQuery};

const VERBS: &[&str] = &[
    "get",
    "list",
    "create",
    "update",
    "delete",
    "search",
    "find",
    "fetch",
    "send",
    "upload",
    "download",
    "convert",
    "translate",
    "analyze",
    "summarize",
    "validate",
    "parse",
    "format",
    "compute",
    "generate",
    "schedule",
    "cancel",
    "resolve",
    "lookup",
    "sync",
    "export",
    "import",
    "render",
    "merge",
    "split",
];

const NOUNS: &[&str] = &[
    "user",
    "file",
    "weather",
    "forecast",
    "invoice",
    "payment",
    "order",
    "product",
    "image",
    "video",
    "email",
    "message",
    "calendar",
    "event",
    "ticket",
    "issue",
    "repository",
    "commit",
    "branch",
    "document",
    "spreadsheet",
    "record",
    "customer",
    "account",
    "balance",
    "stock",
    "price",
    "currency",
    "address",
    "location",
    "route",
    "flight",
    "hotel",
    "booking",
    "recipe",
    "movie",
    "song",
    "playlist",
    "article",
    "news",
    "translation",
    "sentence",
    "contact",
    "report",
    "metric",
    "log",
    "alert",
    "container",
    "cluster",
    "database",
];

const WORDS: &[&str] = &[
    "returns",
    "list",
    "details",
    "information",
    "given",
    "specified",
    "current",
    "latest",
    "historical",
    "data",
    "api",
    "service",
    "request",
    "response",
    "json",
    "result",
    "results",
    "query",
    "filter",
    "sort",
    "page",
    "pagination",
    "limit",
    "offset",
    "identifier",
    "unique",
    "name",
    "title",
    "description",
    "status",
    "state",
    "value",
    "values",
    "field",
    "fields",
    "object",
    "array",
    "string",
    "number",
    "integer",
    "boolean",
    "date",
    "time",
    "timestamp",
    "range",
    "start",
    "end",
    "duration",
    "interval",
    "daily",
    "weekly",
    "monthly",
    "yearly",
    "user",
    "users",
    "account",
    "accounts",
    "customer",
    "customers",
    "order",
    "orders",
    "product",
    "products",
    "inventory",
    "warehouse",
    "shipping",
    "delivery",
    "tracking",
    "package",
    "parcel",
    "carrier",
    "address",
    "city",
    "country",
    "region",
    "postal",
    "code",
    "latitude",
    "longitude",
    "coordinates",
    "map",
    "distance",
    "route",
    "directions",
    "traffic",
    "weather",
    "temperature",
    "humidity",
    "wind",
    "rain",
    "snow",
    "forecast",
    "climate",
    "alerts",
    "storm",
    "sunrise",
    "sunset",
    "air",
    "quality",
    "pollution",
    "index",
    "stock",
    "stocks",
    "price",
    "prices",
    "market",
    "exchange",
    "currency",
    "rates",
    "conversion",
    "crypto",
    "bitcoin",
    "ethereum",
    "wallet",
    "balance",
    "transaction",
    "transactions",
    "payment",
    "payments",
    "invoice",
    "invoices",
    "tax",
    "refund",
    "subscription",
    "billing",
    "email",
    "emails",
    "message",
    "messages",
    "chat",
    "channel",
    "notification",
    "sms",
    "phone",
    "call",
    "contact",
    "contacts",
    "calendar",
    "event",
    "events",
    "meeting",
    "schedule",
    "reminder",
    "task",
    "tasks",
    "project",
    "projects",
    "issue",
    "issues",
    "ticket",
    "tickets",
    "bug",
    "repository",
    "repositories",
    "commit",
    "commits",
    "branch",
    "pull",
    "merge",
    "review",
    "code",
    "file",
    "files",
    "folder",
    "directory",
    "upload",
    "download",
    "storage",
    "bucket",
    "image",
    "images",
    "photo",
    "photos",
    "video",
    "videos",
    "audio",
    "music",
    "song",
    "songs",
    "playlist",
    "album",
    "artist",
    "lyrics",
    "movie",
    "movies",
    "show",
    "series",
    "episode",
    "rating",
    "ratings",
    "reviews",
    "recommendations",
    "news",
    "article",
    "articles",
    "headline",
    "source",
    "sources",
    "language",
    "languages",
    "translate",
    "translation",
    "text",
    "sentence",
    "words",
    "grammar",
    "spelling",
    "sentiment",
    "summary",
    "keywords",
    "entities",
    "classification",
    "model",
    "prediction",
    "score",
    "confidence",
    "recipe",
    "recipes",
    "ingredients",
    "nutrition",
    "calories",
    "restaurant",
    "restaurants",
    "menu",
    "food",
    "hotel",
    "hotels",
    "booking",
    "bookings",
    "flight",
    "flights",
    "airport",
    "airline",
    "travel",
    "trip",
    "destination",
    "sports",
    "team",
    "teams",
    "player",
    "players",
    "match",
    "matches",
    "league",
    "season",
    "statistics",
    "stats",
    "game",
    "games",
    "health",
    "fitness",
    "steps",
    "sleep",
    "heart",
    "medical",
    "drug",
    "symptoms",
    "doctor",
    "job",
    "jobs",
    "salary",
    "company",
    "companies",
    "employee",
    "employees",
    "domain",
    "dns",
    "ip",
    "whois",
    "ssl",
    "certificate",
    "security",
    "vulnerability",
    "scan",
    "password",
    "token",
    "authentication",
    "login",
    "session",
    "permission",
    "role",
    "admin",
    "log",
    "logs",
    "metrics",
    "monitoring",
    "uptime",
    "server",
    "servers",
    "container",
    "cluster",
    "deploy",
    "deployment",
    "database",
    "table",
    "rows",
    "sql",
    "backup",
    "restore",
    "cache",
    "queue",
    "webhook",
    "webhooks",
    "quickly",
    "securely",
    "automatically",
    "real",
    "free",
    "fast",
    "simple",
    "powerful",
    "supports",
    "multiple",
    "formats",
    "including",
    "optional",
    "required",
    "default",
    "maximum",
    "minimum",
    "number",
    "count",
    "total",
    "average",
];

const PARAMS: &[(&str, &str)] = &[
    ("query", "Search query text"),
    ("limit", "Maximum number of results"),
    ("offset", "Pagination offset"),
    ("id", "Unique identifier"),
    ("userId", "Identifier of the user"),
    ("city", "City name"),
    ("country_code", "ISO country code"),
    ("lat", "Latitude in degrees"),
    ("lon", "Longitude in degrees"),
    ("startDate", "Start of the date range"),
    ("end_date", "End of the date range"),
    ("currency", "Three-letter currency code"),
    ("language", "Language of the response"),
    ("format", "Output format: json or csv"),
    ("url", "URL of the resource"),
    ("file_path", "Path of the file"),
    ("email", "Email address"),
    ("symbol", "Stock ticker symbol"),
    ("sortBy", "Field to sort results by"),
    ("api_key", "API key for authentication"),
];

/// Deterministic xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

struct Tool {
    id: String,
    namespace: String,
    name: String,
    description: String,
    tags: Vec<String>,
    params: Vec<(String, String)>,
}

impl Tool {
    fn doc(&self) -> SearchDoc<'_> {
        SearchDoc {
            id: &self.id,
            namespace: &self.namespace,
            name: &self.name,
            title: None,
            description: &self.description,
            tags: &self.tags,
            params: &self.params,
        }
    }
}

fn tools(n: usize) -> Vec<Tool> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let namespaces: Vec<String> = (0..50)
        .map(|i| {
            format!(
                "{}_{}",
                NOUNS[i % NOUNS.len()],
                ["api", "hub", "svc", "io"][i % 4]
            )
        })
        .collect();
    (0..n)
        .map(|i| {
            let ns = &namespaces[rng.below(namespaces.len())];
            let verb = rng.pick(VERBS);
            let noun = rng.pick(NOUNS);
            let name = if rng.below(3) == 0 {
                format!("{verb}{}{}", noun[..1].to_uppercase(), &noun[1..])
            } else {
                format!("{verb}_{noun}")
            };
            let words = 10 + rng.below(21);
            let mut description = format!("{verb} {noun}");
            for _ in 0..words {
                description.push(' ');
                description.push_str(rng.pick(WORDS));
            }
            let params = (0..1 + rng.below(5))
                .map(|_| {
                    let (p, d) = PARAMS[rng.below(PARAMS.len())];
                    (p.to_string(), d.to_string())
                })
                .collect();
            Tool {
                id: format!("{ns}:{name}:{i}"),
                namespace: ns.clone(),
                name,
                description,
                tags: vec![rng.pick(NOUNS).to_string()],
                params,
            }
        })
        .collect()
}

fn build(tools: &[Tool]) -> SearchIndex {
    let mut idx = SearchIndex::new();
    for t in tools {
        idx.upsert(&t.doc());
    }
    idx
}

const QUERIES: &[&str] = &[
    "weather forecast for a city",
    "send an email message to a contact",
    "convert currency exchange rates",
    "get_user",
    "find flights and hotel booking for my trip",
    "list open issues in a repository and summarize the latest commits",
];

fn bench_search(c: &mut Criterion, n: usize) {
    let tools = tools(n);
    let idx = build(&tools);
    let mut g = c.benchmark_group(format!("search_top10_{}k", n / 1000));
    for q in QUERIES {
        g.bench_function(*q, |b| {
            b.iter(|| {
                black_box(idx.search(&SearchQuery {
                    text: black_box(q),
                    limit: 10,
                    namespace: None,
                }))
            })
        });
    }
    g.bench_function("namespace filter", |b| {
        b.iter(|| {
            black_box(idx.search(&SearchQuery {
                text: black_box("get weather data"),
                limit: 10,
                namespace: Some(&tools[0].namespace),
            }))
        })
    });
    g.finish();
}

fn benches(c: &mut Criterion) {
    bench_search(c, 10_000);
    if std::env::var_os("TOOLEXEC_BENCH_100K").is_some() {
        bench_search(c, 100_000);
    }

    let tools = tools(10_000);
    let mut g = c.benchmark_group("index");
    g.sample_size(20);
    g.bench_function("insert_10k", |b| {
        b.iter_with_large_drop(|| build(black_box(&tools)))
    });
    g.finish();

    let mut g = c.benchmark_group("update");
    let mut idx = build(&tools);
    let t = &tools[1234];
    g.bench_function("remove_reupsert_1_in_10k", |b| {
        b.iter(|| {
            idx.remove(black_box(&t.id));
            idx.upsert(black_box(&t.doc()));
        })
    });
    g.finish();

    bench_vector_scan(c);
    bench_fusion(c);
}

/// Hybrid search's fusion of its two rankings: 100 lexical and 100
/// semantic hits (half of them in both), spread over 25 namespaces.
fn bench_fusion(c: &mut Criterion) {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let hits = |rng: &mut Rng, first: usize| -> Vec<(std::sync::Arc<str>, f32)> {
        let mut v: Vec<(std::sync::Arc<str>, f32)> = (first..first + 100)
            .map(|i| {
                let score = (rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                (format!("ns{}:tool{i}", i % 25).into(), score)
            })
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1));
        v
    };
    let lexical = hits(&mut rng, 0);
    let semantic = hits(&mut rng, 50);
    let mut g = c.benchmark_group("fusion");
    g.bench_function("fuse_100_and_100", |b| {
        b.iter(|| {
            black_box(toolexec::search::fuse(
                black_box(&lexical),
                black_box(&semantic),
                10,
            ))
        })
    });
    // What a three-sentence query adds in hybrid search: each sentence's
    // own fusion, then the whole query's with theirs.
    let sentences: Vec<_> = (0..3)
        .map(|k| (hits(&mut rng, 30 * k), hits(&mut rng, 30 * k + 50)))
        .collect();
    g.bench_function("with_3_sentences", |b| {
        b.iter(|| {
            let whole = toolexec::search::fuse(black_box(&lexical), black_box(&semantic), 100);
            let parts: Vec<_> = sentences
                .iter()
                .map(|(l, s)| toolexec::search::fuse(black_box(l), black_box(s), 100))
                .collect();
            black_box(toolexec::search::with_sentences(&whole, &parts, 10))
        })
    });
    g.finish();
}

/// The exhaustive scan semantic search makes: 10,000 vectors of 384 components
/// (all-MiniLM-L6-v2's size), the 10 nearest to one query. The vectors are
/// pseudo-random unit vectors: the scan's cost does not depend on them.
fn bench_vector_scan(c: &mut Criterion) {
    const DIM: usize = 384;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut unit = || {
        let mut v: Vec<f32> = (0..DIM)
            .map(|_| (rng.next() >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        v
    };
    let mut index = toolexec::search::VectorIndex::new();
    for i in 0..10_000 {
        index.upsert(&format!("ns:tool{i}"), &unit());
    }
    let query = unit();
    let mut g = c.benchmark_group("vector_scan");
    g.bench_function("nearest_10_of_10k", |b| {
        b.iter(|| black_box(index.nearest(black_box(&query), 10, |_| true)))
    });
    g.finish();
}

criterion_group!(search, benches);
criterion_main!(search);

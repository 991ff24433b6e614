//! A large real-world document: GitHub's REST API description (npm
//! `@octokit/openapi`, OpenAPI 3.0.3, 1,223 operations, 10,000 `$ref`s).
//! Every operation is imported or skipped with a reason, and every
//! imported tool's schemas compile in a catalog.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use toolexec_http::openapi::{self, ImportOptions};

const METHODS: &[&str] = &[
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

#[tokio::test(flavor = "multi_thread")]
async fn github_rest_api_description() {
    let Some(spec) =
        toolexec_testkit::dep("github_rest_api_description", "TOOLEXEC_OPENAPI_GITHUB")
    else {
        return;
    };
    // Counted apart from the importer, straight from the file.
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&spec).unwrap()).unwrap();
    let declared: usize = doc["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|item| METHODS.iter().filter(|m| item.get(**m).is_some()).count())
        .sum();
    assert!(declared > 1000, "{declared}");

    let mut options = ImportOptions::new("github", spec);
    // Nothing is called: a loopback base URL needs no TLS roots.
    options.base_url = Some("http://127.0.0.1:9".into());
    let start = Instant::now();
    let import = openapi::import(options).await.expect("import");
    let imported_in = start.elapsed();
    let catalog = Arc::new(toolexec::Catalog::new());
    let start = Instant::now();
    let registered = catalog
        .register_many(import.tools(), false)
        .expect("every schema compiles");
    let registered_in = start.elapsed();

    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &import.skipped {
        *reasons.entry(s.reason.as_str()).or_default() += 1;
    }
    eprintln!(
        "github: {declared} operations declared, {} imported, {} skipped ({reasons:?}); \
         import {imported_in:?}, schema compilation {registered_in:?}",
        import.tools.len(),
        import.skipped.len(),
    );
    assert_eq!(
        import.tools.len() + import.skipped.len() + import.excluded,
        declared
    );
    assert_eq!(registered, import.tools.len());
    // GitHub's descriptions are complete: nothing should be left out.
    assert!(
        import.skipped.len() * 100 <= declared,
        "{:?}",
        import.skipped
    );

    // operationIds like `issues/create` become `issues_create`.
    let create = catalog.get("github:issues_create").expect("issues/create");
    assert!(
        create.tool().input_schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == "owner")
    );
    let hits = catalog.search("create an issue in a repository", 5, Some("github"));
    assert!(
        hits.iter()
            .any(|h| h.tool.tool().id.to_string() == "github:issues_create"),
        "{hits:?}"
    );
}

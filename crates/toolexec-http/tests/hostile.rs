//! What an agent's arguments, a hostile document or a hostile server must
//! not achieve: leave the API's origin with its credentials, change the
//! request's path, read files outside the document's directory, send the
//! client secret to a document-chosen host, or put a key into an error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use toolexec::{Catalog, ErrorCode, Exec, Secret};
use toolexec_http::Credential;
use toolexec_http::openapi::{self, ImportOptions};
use toolexec_testkit::TempDir;

/// A document with one GET operation at `path`, an API key in a header
/// and an OAuth scheme whose token URL is `token_url`.
fn spec(dir: &TempDir, path: &str, token_url: &str) -> String {
    let doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "components": {"securitySchemes": {
            "key": {"type": "apiKey", "in": "header", "name": "X-Key"},
            "oauth": {"type": "oauth2", "flows": {"clientCredentials": {"tokenUrl": token_url, "scopes": {}}}}
        }},
        "security": [{"key": []}],
        "paths": {path: {"get": {
            "operationId": "get",
            "parameters": [
                {"name": "id", "in": "path", "required": true, "schema": {"type": "string"}},
                {"name": "X-Key", "in": "header", "schema": {"type": "string"}},
                {"name": "q", "in": "query", "schema": {"type": "string"}}
            ],
            "responses": {"200": {"description": "ok"}}
        }}}
    });
    dir.write("spec.json", &doc.to_string())
        .display()
        .to_string()
}

async fn exec(options: ImportOptions) -> Exec {
    let import = openapi::import(options).await.expect("import");
    let exec = Exec::new(Arc::new(Catalog::new()));
    exec.catalog().register_many(import.tools(), false).unwrap();
    exec
}

#[tokio::test(flavor = "multi_thread")]
async fn redirects_never_leave_the_origin_with_the_key() {
    // The attacker's server counts what reaches it.
    let hits = Arc::new(AtomicUsize::new(0));
    let seen = hits.clone();
    let evil = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let evil_port = evil.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(move || {
        seen.fetch_add(1, Ordering::SeqCst);
        async { "got it" }
    });
    tokio::spawn(async move { axum::serve(evil, app).await });
    // The API redirects every request there.
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_port = api.local_addr().unwrap().port();
    let target = format!("http://127.0.0.1:{evil_port}/steal");
    let app = axum::Router::new().fallback(move || {
        let target = target.clone();
        async move { axum::response::Redirect::temporary(&target) }
    });
    tokio::spawn(async move { axum::serve(api, app).await });

    let dir = TempDir::new("http-redirect");
    let mut options = ImportOptions::new("r", spec(&dir, "/items/{id}", "/token"));
    options.base_url = Some(format!("http://127.0.0.1:{api_port}"));
    options.credentials = [("key".to_owned(), Credential::ApiKey(Secret::new("KEY-123")))].into();
    let exec = exec(options).await;
    let err = exec
        .run_tool("r:get", json!({"id": "1"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ExecutionFailed, "{err}");
    assert_eq!(err.to_body().details.unwrap()["data"]["status"], 307);
    assert_eq!(hits.load(Ordering::SeqCst), 0, "the redirect was followed");
}

#[tokio::test(flavor = "multi_thread")]
async fn arguments_cannot_change_the_path_or_the_credential() {
    let dir = TempDir::new("http-args");
    let mut options = ImportOptions::new("a", spec(&dir, "/users/{id}/keys", "/token"));
    options.base_url = Some("http://127.0.0.1:9".into());
    options.credentials = [("key".to_owned(), Credential::ApiKey(Secret::new("KEY-123")))].into();
    let import = openapi::import(options).await.unwrap();
    let (tool, _) = &import.tools[0];
    // The key's header is not an argument once a credential sets it.
    assert!(
        tool.input_schema["properties"].get("X-Key").is_none(),
        "{}",
        tool.input_schema
    );
    let exec = Exec::new(Arc::new(Catalog::new()));
    exec.catalog().register_many(import.tools(), false).unwrap();
    for id in ["..", ".", ""] {
        let err = exec.run_tool("a:get", json!({"id": id})).await.unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidRequest, "{id:?}: {err}");
    }
    // An argument that only looks encoded is sent as text (`%252e`): it
    // reaches the server, which is not listening here.
    let err = exec
        .run_tool("a:get", json!({"id": "%2e%2e"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn errors_never_quote_the_url() {
    let dir = TempDir::new("http-url");
    let port = toolexec_testkit::free_port();
    let mut options = ImportOptions::new("u", spec(&dir, "/items/{id}", "/token"));
    options.base_url = Some(format!("http://127.0.0.1:{port}"));
    options.client.retry.max_retries = 0;
    let exec = exec(options).await;
    let err = exec
        .run_tool("u:get", json!({"id": "1", "q": "SECRET-IN-QUERY"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{err}");
    assert!(!err.to_string().contains("SECRET-IN-QUERY"), "{err}");
    assert!(err.to_string().contains("cannot connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_cannot_choose_where_the_client_secret_goes() {
    let dir = TempDir::new("http-token");
    let oauth = Credential::ClientCredentials {
        client_id: "id".into(),
        client_secret: Secret::new("s"),
        token_url: None,
        scopes: Vec::new(),
    };
    let mut options = ImportOptions::new("o", spec(&dir, "/x/{id}", "https://evil.example/token"));
    options.base_url = Some("https://api.example.com".into());
    options.credentials = [("oauth".to_owned(), oauth)].into();
    let err = openapi::import(options).await.unwrap_err();
    assert_eq!(err.field(), Some("auth.oauth"), "{err}");
    assert!(err.to_string().contains("not on the API's origin"), "{err}");
    // Plain http to a non-loopback host is refused even when pinned.
    let mut options = ImportOptions::new("o", spec(&dir, "/x/{id}", "/token"));
    options.base_url = Some("http://127.0.0.1:9".into());
    let pinned = Credential::ClientCredentials {
        client_id: "id".into(),
        client_secret: Secret::new("s"),
        token_url: Some("http://auth.example.com/token".into()),
        scopes: Vec::new(),
    };
    options.credentials = [("oauth".to_owned(), pinned)].into();
    let err = openapi::import(options).await.unwrap_err();
    assert!(err.to_string().contains("https://"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn file_references_stay_in_the_documents_directory() {
    let outside = TempDir::new("http-outside");
    let secret = outside.write("secret.yaml", "token: hunter2\n");
    let dir = TempDir::new("http-refs");
    let doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/a": {"get": {"operationId": "a", "responses": {"200": {"description": "ok", "content": {
                "application/json": {"schema": {"$ref": format!("{}#/token", secret.display())}}}}}}},
            "/b": {"get": {"operationId": "b", "responses": {"200": {"description": "ok", "content": {
                "application/json": {"schema": {"$ref": "common.yaml#/Thing"}}}}}}}
        }
    });
    dir.write("common.yaml", "Thing:\n  type: object\n");
    let spec = dir.write("spec.json", &doc.to_string());
    let mut options = ImportOptions::new("f", spec.display().to_string());
    options.base_url = Some("http://127.0.0.1:9".into());
    let import = openapi::import(options).await.unwrap();
    let names: Vec<&str> = import.tools.iter().map(|(t, _)| t.name()).collect();
    assert_eq!(names, ["b"]);
    assert_eq!(import.skipped.len(), 1);
    assert!(
        import.skipped[0].reason.contains("next to the document"),
        "{:?}",
        import.skipped
    );
    assert!(!format!("{:?}", import.tools).contains("hunter2"));
}

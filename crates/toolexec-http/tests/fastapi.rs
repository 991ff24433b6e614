//! The OpenAPI provider against a real FastAPI service whose OpenAPI 3.1
//! document FastAPI generates (`tests/fixtures/api_server.py`): every
//! operation imported and called, through the run pipeline, with path,
//! query, header, cookie and body parameters, every response kind, errors,
//! credentials, retries and the concurrency limit.

mod support;

use std::time::Duration;

use base64::Engine as _;
use serde_json::{Value, json};
use toolexec::{Content, ErrorCode, Secret};
use toolexec_http::openapi::{self, Filter, ImportOptions, Selection};
use toolexec_http::{Credential, RetryPolicy};

use support::{Server, exec_with, run};

const EVERY_OPERATION: &[&str] = &[
    "boom",
    "create_pet",
    "delete_pet",
    "echo_get",
    "echo_post",
    "flaky_get",
    "flaky_post",
    "get_categories",
    "get_context",
    "get_count",
    "get_file",
    "get_image",
    "get_item",
    "get_pet",
    "get_text",
    "huge",
    "inflight",
    "inflight_max",
    "inflight_reset",
    "issue_token",
    "list_items",
    "list_pets",
    "search_items",
    "secure_api_key",
    "secure_basic",
    "secure_bearer",
    "secure_oauth2",
    "slow",
    "submit_form",
    "update_pet",
    "upload_file",
];

fn error_data(e: &toolexec::Error) -> Value {
    e.to_body().details.unwrap_or_default()["data"].clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_of_the_generated_document_is_imported() {
    let Some(server) = Server::start("every_operation_imported", &[]) else {
        return;
    };
    let (exec, import) = exec_with(server.options("api")).await;
    assert!(import.skipped.is_empty(), "{:?}", import.skipped);
    let ids: Vec<String> = import.tools.iter().map(|(t, _)| t.id.to_string()).collect();
    let expected: Vec<String> = EVERY_OPERATION.iter().map(|n| format!("api:{n}")).collect();
    assert_eq!(ids, expected);
    // No `servers` in the document: requests go where it was fetched from.
    assert_eq!(import.api.base_url().as_str(), server.url("/"));

    // The definitions read as the document wrote them.
    let get_pet = exec.catalog().get("api:get_pet").unwrap();
    let tool = get_pet.tool();
    assert_eq!(tool.title.as_deref(), Some("Get a pet"));
    assert_eq!(tool.input_schema["required"], json!(["pet_id"]));
    assert_eq!(tool.input_schema["properties"]["pet_id"]["type"], "integer");
    assert_eq!(
        tool.annotations.as_ref().unwrap().read_only_hint,
        Some(true)
    );
    let output = tool.output_schema.as_ref().expect("an output schema");
    assert_eq!(output["$ref"], "#/$defs/Pet", "{output}");
    assert!(output["$defs"]["Pet"].is_object(), "{output}");
    let delete = exec.catalog().get("api:delete_pet").unwrap();
    assert_eq!(
        delete.tool().annotations.as_ref().unwrap().destructive_hint,
        Some(true)
    );
    // A recursive schema stays a reference to itself.
    let cats = exec.catalog().get("api:get_categories").unwrap();
    let defs = &cats.tool().output_schema.as_ref().unwrap()["$defs"];
    assert!(
        defs["Category"].to_string().contains("#/$defs/Category"),
        "{defs}"
    );

    // Search finds operations by what they do.
    let hits = exec.catalog().search("upload a file", 3, Some("api"));
    assert!(
        hits.iter()
            .any(|h| h.tool.tool().id.to_string() == "api:upload_file"),
        "{hits:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn path_query_header_and_cookie_parameters() {
    let Some(server) = Server::start("parameters", &[]) else {
        return;
    };
    let (exec, _) = exec_with(server.options("api")).await;
    let item = run(&exec, "api:get_item", json!({"item_id": 1}))
        .await
        .unwrap();
    assert_eq!(item.value["id"], 1);

    // A path segment with a space, a slash, a question mark and a percent.
    let file = run(&exec, "api:get_file", json!({"name": "a b/c?d%"}))
        .await
        .unwrap();
    assert_eq!(
        file.value,
        json!({"name": "a b/c?d%", "raw": "a%20b%2Fc%3Fd%25"})
    );

    let found = run(
        &exec,
        "api:search_items",
        json!({"limit": 5, "q": "e", "kind": "tool", "tag": ["steel", "hand"], "in_stock": true}),
    )
    .await
    .unwrap();
    assert_eq!(
        found.value["params"],
        json!({"limit": 5, "q": "e", "sort": "name", "kind": "tool", "tag": ["steel", "hand"], "in_stock": true})
    );

    let ctx = run(
        &exec,
        "api:get_context",
        json!({"X-Request-Id": "req-1", "session": "s-1.x/y"}),
    )
    .await
    .unwrap();
    assert_eq!(
        ctx.value,
        json!({"request_id": "req-1", "session": "s-1.x/y"})
    );

    // Every style byte for byte, as the server received it.
    let echo = run(
        &exec,
        "api:echo_get",
        json!({
            "q": "a&b=c d", "n": 3, "flag": false, "tag": ["x", "y"],
            "filter": {"status": "open", "owner": "me"}, "ids": [1, 2, 3],
            "X-Trace": "t-1", "session": "abc"
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        echo.value["query"],
        "q=a%26b%3Dc%20d&n=3&flag=false&tag=x&tag=y&filter%5Bowner%5D=me&filter%5Bstatus%5D=open&ids=1,2,3"
    );
    assert_eq!(echo.value["headers"]["x-trace"], "t-1");
    assert_eq!(echo.value["cookies"], json!({"session": "abc"}));

    // Bad arguments never reach the server.
    let err = run(&exec, "api:get_item", json!({"item_id": "one"}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ValidationInput);
    let err = run(&exec, "api:get_item", json!({"item_id": 1, "extra": 2}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ValidationInput);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_form_and_multipart_bodies() {
    let Some(server) = Server::start("bodies", &[]) else {
        return;
    };
    let (exec, _) = exec_with(server.options("api")).await;
    let created = run(
        &exec,
        "api:create_pet",
        json!({"body": {"name": "Rex", "species": "dog", "owner": {"name": "Ann"}}}),
    )
    .await
    .unwrap();
    let id = created.value["id"].as_i64().expect("a server-assigned id");
    assert_eq!(created.value["owner"]["name"], "Ann");
    let updated = run(
        &exec,
        "api:update_pet",
        json!({"pet_id": id, "body": {"name": "Rex II", "species": "dog", "owner": {"name": "Ann"}}}),
    )
    .await
    .unwrap();
    assert_eq!(updated.value["name"], "Rex II");
    let deleted = run(&exec, "api:delete_pet", json!({"pet_id": id}))
        .await
        .unwrap();
    assert_eq!(deleted.value, Value::Null, "204: no body");
    let gone = run(&exec, "api:get_pet", json!({"pet_id": id}))
        .await
        .unwrap_err();
    assert_eq!(gone.code(), ErrorCode::ExecutionFailed);
    assert_eq!(error_data(&gone)["status"], 404, "{gone}");
    assert!(error_data(&gone)["body"]["detail"].is_string(), "{gone}");
    assert!(gone.to_string().contains("HTTP 404 Not Found"), "{gone}");

    let form = run(
        &exec,
        "api:submit_form",
        json!({"body": {"name": "Zoë & co", "age": 31, "subscribe": true, "topics": ["a", "b c"]}}),
    )
    .await
    .unwrap();
    assert_eq!(
        form.value,
        json!({"name": "Zoë & co", "age": 31, "subscribe": true, "topics": ["a", "b c"]})
    );

    let text = "hello, upload\n".repeat(100);
    let upload = run(
        &exec,
        "api:upload_file",
        json!({"body": {"file": text, "description": "notes"}}),
    )
    .await
    .unwrap();
    assert_eq!(upload.value["size"], text.len());
    assert_eq!(upload.value["description"], "notes");
    assert_eq!(upload.value["filename"], "file");

    let echo = run(&exec, "api:echo_post", json!({"body": {"k": [1, "two"]}}))
        .await
        .unwrap();
    assert_eq!(echo.value["body"], r#"{"k":[1,"two"]}"#);
    assert_eq!(echo.value["headers"]["content-type"], "application/json");
}

#[tokio::test(flavor = "multi_thread")]
async fn text_binary_and_error_responses() {
    let Some(server) = Server::start("responses", &[]) else {
        return;
    };
    let mut options = server.options("api");
    options.client.max_response_bytes = 1 << 20;
    options.client.timeout = Duration::from_secs(2);
    let (exec, _) = exec_with(options).await;

    let text = run(&exec, "api:get_text", json!({"name": "toolexec"}))
        .await
        .unwrap();
    assert_eq!(text.value, "Hello, toolexec!\n");

    let image = run(&exec, "api:get_image", json!({})).await.unwrap();
    let Some(Content::Image { data, mime_type }) = image.content.first() else {
        panic!("an image block: {image:?}");
    };
    assert_eq!(mime_type, "image/png");
    let png = base64::engine::general_purpose::STANDARD
        .decode(data)
        .unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(image.value["bytes"], png.len());

    // A 500 with an HTML page: execution_failed with the page's text.
    let boom = run(&exec, "api:boom", json!({})).await.unwrap_err();
    assert_eq!(boom.code(), ErrorCode::ExecutionFailed);
    assert!(
        boom.to_string()
            .contains("HTTP 500 Internal Server Error: (text/html page)"),
        "{boom}"
    );
    assert_eq!(error_data(&boom)["status"], 500);

    // Larger than max_response_bytes: refused from Content-Length, and
    // found while streaming without one, never read whole.
    for declare_length in [true, false] {
        let huge = run(
            &exec,
            "api:huge",
            json!({"mib": 64, "declare_length": declare_length}),
        )
        .await
        .unwrap_err();
        assert_eq!(huge.code(), ErrorCode::LimitExceeded, "{huge}");
        assert!(
            huge.to_string().contains("max_response_bytes 1048576"),
            "{huge}"
        );
    }

    // Slower than the timeout.
    let slow = run(&exec, "api:slow", json!({"seconds": 30}))
        .await
        .unwrap_err();
    assert_eq!(slow.code(), ErrorCode::Timeout, "{slow}");
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_from_the_security_schemes() {
    let Some(server) = Server::start("credentials", &[]) else {
        return;
    };
    let mut options = server.options("api");
    options.credentials = [
        (
            "ApiKeyAuth".to_owned(),
            Credential::ApiKey(Secret::new(support::API_KEY)),
        ),
        (
            "BearerAuth".to_owned(),
            Credential::Bearer(Secret::new(support::BEARER)),
        ),
        (
            "BasicAuth".to_owned(),
            Credential::Basic {
                username: support::BASIC.0.to_owned(),
                password: Secret::new(support::BASIC.1),
            },
        ),
        (
            "OAuth2ClientCredentials".to_owned(),
            Credential::ClientCredentials {
                client_id: support::CLIENT.0.to_owned(),
                client_secret: Secret::new(support::CLIENT.1),
                token_url: None,
                scopes: Vec::new(),
            },
        ),
    ]
    .into();
    let (exec, _) = exec_with(options).await;
    for (tool, who) in [
        ("secure_api_key", "api-key"),
        ("secure_bearer", "bearer"),
        ("secure_basic", "alice"),
        ("secure_oauth2", "oauth2"),
        ("secure_oauth2", "oauth2"),
        ("secure_oauth2", "oauth2"),
    ] {
        let out = run(&exec, &format!("api:{tool}"), json!({})).await.unwrap();
        assert_eq!(out.value, json!({"ok": true, "auth": who}), "{tool}");
    }
    // One token, fetched once (relative tokenUrl resolved), then cached.
    let count = run(&exec, "api:get_count", json!({"key": "oauth-token"}))
        .await
        .unwrap();
    assert_eq!(count.value["count"], 1);

    // Wrong credentials: the server's 401, as execution_failed.
    let mut wrong = server.options("api");
    wrong.credentials = [(
        "BearerAuth".to_owned(),
        Credential::Bearer(Secret::new("nope")),
    )]
    .into();
    let (exec, _) = exec_with(wrong).await;
    let err = run(&exec, "api:secure_bearer", json!({}))
        .await
        .unwrap_err();
    assert_eq!(error_data(&err)["status"], 401, "{err}");
    assert!(
        !err.to_string().contains("nope"),
        "the secret is not shown: {err}"
    );

    // A credential for a scheme the document does not have.
    let mut unknown = server.options("api");
    unknown.credentials = [("Nope".to_owned(), Credential::Bearer(Secret::new("x")))].into();
    let err = openapi::import(unknown).await.unwrap_err();
    assert_eq!(err.field(), Some("auth.Nope"), "{err}");
    // The wrong kind for a scheme.
    let mut kind = server.options("api");
    kind.credentials = [("BasicAuth".to_owned(), Credential::Bearer(Secret::new("x")))].into();
    let err = openapi::import(kind).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("a bearer credential for a http basic scheme"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn idempotent_requests_are_retried_others_not() {
    let Some(server) = Server::start("retries", &[]) else {
        return;
    };
    let mut options = server.options("api");
    options.client.retry = RetryPolicy {
        max_retries: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_secs(2),
    };
    let (exec, _) = exec_with(options).await;
    // GET: 503, 503 (Retry-After: 0), then 200.
    let out = run(
        &exec,
        "api:flaky_get",
        json!({"key": "g1", "fail": 2, "retry_after": "0"}),
    )
    .await
    .unwrap();
    assert_eq!(out.value, json!({"ok": true, "attempt": 3}));
    // POST: not idempotent, one attempt, the 503 comes back.
    let err = run(
        &exec,
        "api:flaky_post",
        json!({"key": "p1", "fail": 1, "retry_after": "0"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error_data(&err)["status"], 503, "{err}");
    let count = run(&exec, "api:get_count", json!({"key": "p1"}))
        .await
        .unwrap();
    assert_eq!(count.value["count"], 1);
    // Marked idempotent in the configuration: retried.
    let mut options = server.options("api2");
    options.idempotent = ["flaky_post".to_owned()].into();
    options.client.retry.initial_backoff = Duration::from_millis(10);
    let (exec, _) = exec_with(options).await;
    let out = run(
        &exec,
        "api2:flaky_post",
        json!({"key": "p2", "fail": 1, "retry_after": "0"}),
    )
    .await
    .unwrap();
    assert_eq!(out.value["attempt"], 2);
    // A Retry-After past the call's deadline is not waited for.
    let mut options = server.options("api3");
    options.client.timeout = Duration::from_secs(5);
    let (exec, _) = exec_with(options).await;
    let err = run(
        &exec,
        "api3:flaky_get",
        json!({"key": "g2", "fail": 5, "retry_after": "60"}),
    )
    .await
    .unwrap_err();
    assert_eq!(error_data(&err)["status"], 503, "{err}");
    let count = run(&exec, "api3:get_count", json!({"key": "g2"}))
        .await
        .unwrap();
    assert_eq!(count.value["count"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_concurrency_limit_holds() {
    let Some(server) = Server::start("concurrency", &[]) else {
        return;
    };
    let mut options = server.options("api");
    options.client.max_concurrency = 2;
    let (exec, _) = exec_with(options).await;
    run(&exec, "api:inflight_reset", json!({})).await.unwrap();
    let calls = (0..6).map(|_| run(&exec, "api:inflight", json!({"ms": 150})));
    for out in futures::future::join_all(calls).await {
        out.unwrap();
    }
    let max = run(&exec, "api:inflight_max", json!({})).await.unwrap();
    assert_eq!(max.value["max"], 2, "{}", max.value);
}

#[tokio::test(flavor = "multi_thread")]
async fn selection_and_bad_input() {
    let Some(server) = Server::start("selection", &[]) else {
        return;
    };
    let mut options = server.options("api");
    options.select = Selection {
        include: Filter {
            tags: vec!["pets".into()],
            paths: vec!["/secure/**".into()],
            ..Filter::default()
        },
        exclude: Filter {
            operations: vec!["delete_pet".into()],
            ..Filter::default()
        },
    };
    let import = openapi::import(options).await.unwrap();
    let names: Vec<&str> = import.tools.iter().map(|(t, _)| t.name()).collect();
    assert_eq!(
        names,
        [
            "create_pet",
            "get_categories",
            "get_pet",
            "list_pets",
            "secure_api_key",
            "secure_basic",
            "secure_bearer",
            "secure_oauth2",
            "update_pet"
        ]
    );
    assert_eq!(import.excluded, EVERY_OPERATION.len() - names.len());

    // Not a document, not reachable, not there.
    let err = openapi::import(ImportOptions::new("x", server.url("/text/hello")))
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("spec"), "{err}");
    let port = toolexec_testkit::free_port();
    let err = openapi::import(ImportOptions::new(
        "x",
        format!("http://127.0.0.1:{port}/openapi.json"),
    ))
    .await
    .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{err}");
    let err = openapi::import(ImportOptions::new("x", "/nonexistent/openapi.yaml"))
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("spec"), "{err}");

    // A server that went away: backend_unavailable, naming the API.
    let (exec, _) = exec_with(server.options("gone")).await;
    drop(server);
    let err = run(&exec, "gone:list_items", json!({})).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{err}");
    assert!(err.to_string().contains("cannot connect"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn https_with_the_upstreams_tls_options() {
    use toolexec_testkit::tls::{TestCa, Usage};
    let dir = toolexec_testkit::TempDir::new("http-tls");
    let ca = TestCa::new("toolexec test CA");
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let cert = ca.issue(&["localhost", "127.0.0.1"], Usage::Server);
    let cert_file = dir.write("server.pem", &cert.cert_pem);
    let key_file = dir.write_private("server.key", &cert.key_pem);
    let Some(server) = Server::start(
        "https",
        &[
            "--tls",
            cert_file.to_str().unwrap(),
            key_file.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let base = format!("https://localhost:{}", server.port);
    // The document over HTTPS too, trusting the test CA.
    let mut options = ImportOptions::new("tls", format!("{base}/openapi.json"));
    options.client.tls.ca_file = Some(ca_file.clone());
    let (exec, import) = exec_with(options).await;
    assert_eq!(import.api.base_url().as_str(), format!("{base}/"));
    let item = run(&exec, "tls:get_item", json!({"item_id": 3}))
        .await
        .unwrap();
    assert_eq!(item.value["name"], "starter kit");

    // Another CA: the handshake fails, saying why in the configuration's
    // terms: fetching the document, and calling.
    let other = dir.write("other.pem", &TestCa::new("another CA").cert_pem);
    let mut options = ImportOptions::new("tls2", format!("{base}/openapi.json"));
    options.client.tls.ca_file = Some(other.clone());
    let err = openapi::import(options).await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{err}");
    assert!(err.to_string().contains("TLS handshake failed"), "{err}");
    let spec = dir.write(
        "spec.json",
        &json!({
            "openapi": "3.1.0",
            "info": {"title": "t", "version": "1"},
            "paths": {"/items/{item_id}": {"get": {
                "operationId": "get_item",
                "parameters": [{"name": "item_id", "in": "path", "required": true, "schema": {"type": "integer"}}],
                "responses": {"200": {"description": "ok"}}
            }}}
        })
        .to_string(),
    );
    let mut options = ImportOptions::new("tls3", spec.display().to_string());
    options.base_url = Some(base.clone());
    options.client.tls.ca_file = Some(other);
    let (exec, _) = exec_with(options).await;
    let err = run(&exec, "tls3:get_item", json!({"item_id": 3}))
        .await
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::BackendUnavailable, "{err}");
    assert!(err.to_string().contains("TLS handshake failed"), "{err}");
    assert!(err.to_string().contains("unknown issuer"), "{err}");
}

//! The gRPC provider against a real grpcio server
//! (`tests/fixtures/grpc_server.py`, from `echo.proto`) with reflection
//! enabled: discovery by reflection and from a descriptor set, the schemas
//! of every kind of field, unary and server-streaming calls through the
//! run pipeline (input and output validated), status codes, deadlines,
//! size limits, metadata, TLS and bad input.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use toolexec::{Error, ErrorCode, Exec, RunOptions, Secret, StreamEvent, StreamRequest};
use toolexec_grpc::{Import, ImportOptions, Source};
use toolexec_testkit::TempDir;

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/grpc_server.py");

/// A running fixture; killed on drop (its stdin closes too, which ends it
/// should this process die first).
struct Server {
    child: Child,
    port: u16,
    /// Where the fixture generated its code and `echo.pb`.
    out: TempDir,
}

impl Server {
    /// Starts the fixture, or `None` after saying why it cannot run here.
    fn start(test: &str, extra: &[&str]) -> Option<Server> {
        let python = toolexec_testkit::dep(test, "TOOLEXEC_PYTHON")?;
        let out = TempDir::new("grpc-fixture");
        let (child, port) = toolexec_testkit::spawn_printing_port(
            Command::new(python)
                .arg(FIXTURE)
                .arg(out.path())
                .args(extra),
        );
        Some(Server { child, port, out })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn descriptor_set(&self) -> PathBuf {
        self.out.path().join("echo.pb")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn exec_with(options: ImportOptions) -> (Exec, Import) {
    let import = toolexec_grpc::import(options).await.expect("import");
    let exec = Exec::new(Arc::new(toolexec::Catalog::new()));
    exec.catalog()
        .register_many(import.tools(), false)
        .expect("register");
    (exec, import)
}

async fn run(exec: &Exec, tool: &str, args: Value) -> Result<Value, Error> {
    exec.run_tool(tool, args).await.map(|out| out.value)
}

fn ids(import: &Import) -> Vec<String> {
    import.tools.iter().map(|(t, _)| t.id.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn reflection_describes_every_method_with_its_schemas() {
    let Some(server) = Server::start("reflection", &[]) else {
        return;
    };
    let (exec, import) = exec_with(ImportOptions::new(
        "echo",
        &server.url(),
        Source::Reflection,
    ))
    .await;
    assert_eq!(
        ids(&import),
        [
            "echo:echo_count",
            "echo:echo_fail",
            "echo:echo_say",
            "echo:vault_whoami"
        ]
    );
    assert_eq!(import.skipped.len(), 1, "{:?}", import.skipped);
    assert_eq!(import.skipped[0].method, "toolexec.test.v1.Echo/Sum");
    assert!(import.skipped[0].reason.contains("client streaming"));

    let say = exec.catalog().get("echo:echo_say").unwrap().tool().clone();
    let input = &say.input_schema;
    assert_eq!(input["additionalProperties"], false);
    let props = &input["properties"];
    assert_eq!(props["text"], json!({"type": "string"}));
    assert_eq!(props["big"]["anyOf"][1]["pattern"], "^-?[0-9]+$");
    assert_eq!(props["blob"]["contentEncoding"], "base64");
    assert_eq!(props["mood"]["$ref"], "#/$defs/toolexec.test.v1.Mood");
    let moods = &input["$defs"]["toolexec.test.v1.Mood"]["enum"];
    assert!(
        moods.as_array().unwrap().contains(&json!("GRUMPY")),
        "{moods}"
    );
    assert_eq!(
        props["points"]["items"]["$ref"],
        "#/$defs/toolexec.test.v1.Point"
    );
    assert_eq!(props["counts"]["additionalProperties"]["type"], "integer");
    assert_eq!(props["at"]["format"], "date-time");
    assert_eq!(props["delayMs"]["maximum"], u32::MAX);
    // The recursive message is a definition that refers to itself.
    assert_eq!(props["tree"]["$ref"], "#/$defs/toolexec.test.v1.Tree");
    assert_eq!(
        input["$defs"]["toolexec.test.v1.Tree"]["properties"]["children"]["items"]["$ref"],
        "#/$defs/toolexec.test.v1.Tree"
    );
    // Reflection carries no comments: the description says what it calls.
    assert!(
        say.description.contains("toolexec.test.v1.Echo/Say"),
        "{}",
        say.description
    );
    let count = exec
        .catalog()
        .get("echo:echo_count")
        .unwrap()
        .tool()
        .clone();
    assert_eq!(
        count.output_schema.as_ref().unwrap()["properties"]["messages"]["items"]["properties"]["n"]
            ["type"],
        "integer"
    );

    // A oneof takes one member, not two (checked by the input schema).
    let both = run(&exec, "echo:echo_say", json!({"user": "a", "group": 2}))
        .await
        .unwrap_err();
    assert_eq!(both.code(), ErrorCode::ValidationInput, "{both}");
    let unknown = run(&exec, "echo:echo_say", json!({"nope": 1}))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), ErrorCode::ValidationInput, "{unknown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unary_calls_round_trip_every_kind_of_field() {
    let Some(server) = Server::start("unary", &[]) else {
        return;
    };
    let (exec, _) = exec_with(ImportOptions::new(
        "echo",
        &server.url(),
        Source::Reflection,
    ))
    .await;
    let args = json!({
        "text": "hello",
        "big": "9007199254740993",
        "blob": "AAEC/w==",
        "mood": "GRUMPY",
        "points": [{"x": 1.5, "y": -2}],
        "counts": {"a": 1, "b": 2},
        "user": "ada",
        "at": "2026-11-24T10:00:00Z",
        "wait": "1.500s",
        "extra": {"k": [1, "two", null]},
        "note": "a wrapped string",
        "tree": {"name": "root", "children": [{"name": "leaf"}]}
    });
    let reply = run(&exec, "echo:echo_say", args).await.unwrap();
    assert_eq!(reply["text"], "hello");
    let echoed = &reply["echoed"];
    assert_eq!(
        echoed["big"], "9007199254740993",
        "64-bit integers stay exact"
    );
    assert_eq!(echoed["blob"], "AAEC/w==");
    assert_eq!(echoed["mood"], "GRUMPY");
    assert_eq!(echoed["points"], json!([{"x": 1.5, "y": -2.0}]));
    assert_eq!(echoed["counts"], json!({"a": 1, "b": 2}));
    assert_eq!(echoed["user"], "ada");
    assert_eq!(echoed["at"], "2026-11-24T10:00:00Z");
    assert_eq!(echoed["wait"], "1.500s");
    assert_eq!(echoed["extra"], json!({"k": [1.0, "two", null]}));
    assert_eq!(echoed["note"], "a wrapped string");
    assert_eq!(echoed["tree"]["children"][0]["name"], "leaf");
    // Every field is present, defaults too.
    assert_eq!(echoed["delayMs"], 0);

    // Numbers for 64-bit integers are accepted too; an empty request is
    // all defaults.
    let reply = run(&exec, "echo:echo_say", json!({"big": 42}))
        .await
        .unwrap();
    assert_eq!(reply["echoed"]["big"], "42");
    let reply = run(&exec, "echo:echo_say", json!({})).await.unwrap();
    assert_eq!(reply["text"], "");

    // A value the schema allows but protobuf does not: invalid_request.
    let bad = run(&exec, "echo:echo_say", json!({"at": "yesterday"}))
        .await
        .unwrap_err();
    assert!(
        matches!(
            bad.code(),
            ErrorCode::InvalidRequest | ErrorCode::ValidationInput
        ),
        "{bad}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn server_streams_are_chunks_and_a_list() {
    let Some(server) = Server::start("streaming", &[]) else {
        return;
    };
    let (exec, _) = exec_with(ImportOptions::new(
        "echo",
        &server.url(),
        Source::Reflection,
    ))
    .await;
    let value = run(&exec, "echo:echo_count", json!({"to": 3}))
        .await
        .unwrap();
    assert_eq!(value, json!({"messages": [{"n": 1}, {"n": 2}, {"n": 3}]}));

    let mut stream = exec.run_stream(
        StreamRequest::Tool {
            id: "echo:echo_count".into(),
            args: json!({"to": 4, "delayMs": 20}),
        },
        RunOptions::default(),
    );
    let mut chunks = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(30), stream.next_event())
            .await
            .expect("stream stalled")
            .expect("a final event");
        match event {
            StreamEvent::Chunk { data, .. } => chunks.push(data),
            StreamEvent::Done { .. } => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        chunks,
        [
            json!({"n": 1}),
            json!({"n": 2}),
            json!({"n": 3}),
            json!({"n": 4})
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn statuses_deadlines_and_limits_become_typed_errors() {
    let Some(server) = Server::start("statuses", &[]) else {
        return;
    };
    let mut options = ImportOptions::new("echo", &server.url(), Source::Reflection);
    options.options.timeout = Duration::from_millis(500);
    options.options.max_message_bytes = 64 << 10;
    options.options.max_stream_messages = 10;
    let (exec, _) = exec_with(options).await;
    let fail = |code: &str| json!({"code": code, "message": format!("asked for {code}")});
    for (status, code) in [
        ("INVALID_ARGUMENT", ErrorCode::InvalidRequest),
        ("OUT_OF_RANGE", ErrorCode::InvalidRequest),
        ("PERMISSION_DENIED", ErrorCode::NotAllowed),
        ("UNAUTHENTICATED", ErrorCode::NotAllowed),
        ("UNAVAILABLE", ErrorCode::BackendUnavailable),
        ("UNIMPLEMENTED", ErrorCode::BackendUnavailable),
        ("RESOURCE_EXHAUSTED", ErrorCode::LimitExceeded),
        ("DEADLINE_EXCEEDED", ErrorCode::Timeout),
        ("NOT_FOUND", ErrorCode::ExecutionFailed),
        ("FAILED_PRECONDITION", ErrorCode::ExecutionFailed),
        ("INTERNAL", ErrorCode::ExecutionFailed),
    ] {
        let e = run(&exec, "echo:echo_fail", fail(status))
            .await
            .unwrap_err();
        assert_eq!(e.code(), code, "{status}: {e}");
        let body = e.to_body();
        let details = body.details.unwrap();
        let grpc = if code == ErrorCode::ExecutionFailed {
            &details["data"]
        } else {
            &details
        };
        assert_eq!(grpc["grpc_code"], status, "{details}");
        assert_eq!(
            grpc["grpc_message"],
            format!("asked for {status}"),
            "{details}"
        );
        assert!(
            body.message.starts_with(code.as_str()) && body.message.matches(": ").count() >= 2,
            "{}",
            body.message
        );
    }

    // The deadline: the server is still waiting when it passes.
    let slow = run(&exec, "echo:echo_say", json!({"delayMs": 5000}))
        .await
        .unwrap_err();
    assert_eq!(slow.code(), ErrorCode::Timeout, "{slow}");

    // An answer over max_message_bytes, and a stream past its count.
    let big = run(&exec, "echo:echo_say", json!({"pad": 200_000}))
        .await
        .unwrap_err();
    assert_eq!(big.code(), ErrorCode::LimitExceeded, "{big}");
    assert!(big.to_string().contains("max_message_bytes"), "{big}");
    // Under the limit on the wire, over it as JSON (defaults spelled out):
    // refused while writing, not after.
    let wide = run(&exec, "echo:echo_say", json!({"pad": 65_500}))
        .await
        .unwrap_err();
    assert_eq!(wide.code(), ErrorCode::LimitExceeded, "{wide}");
    assert!(wide.to_string().contains("as JSON"), "{wide}");
    let long = run(&exec, "echo:echo_count", json!({"to": 50}))
        .await
        .unwrap_err();
    assert_eq!(long.code(), ErrorCode::LimitExceeded, "{long}");
    // The channel is still good after all of that.
    run(&exec, "echo:echo_say", json!({"text": "still here"}))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn metadata_carries_credentials() {
    let Some(server) = Server::start("metadata", &[]) else {
        return;
    };
    let mut options = ImportOptions::new("vault", &server.url(), Source::Reflection);
    options.include = vec!["toolexec.test.v1.Vault".into()];
    let (exec, import) = exec_with(options.clone()).await;
    assert_eq!(ids(&import), ["vault:vault_whoami"]);
    assert_eq!(import.excluded, 4);
    let denied = run(&exec, "vault:vault_whoami", json!({}))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), ErrorCode::NotAllowed, "{denied}");

    options.name = "vault2".into();
    options.options.metadata.insert(
        "Authorization".into(),
        Secret::new("Bearer grpc-test-token"),
    );
    let (exec, _) = exec_with(options.clone()).await;
    let me = run(&exec, "vault2:vault_whoami", json!({})).await.unwrap();
    assert_eq!(me, json!({"subject": "tester"}));

    // Metadata gRPC cannot carry is refused at import, never shown.
    options.options.metadata = [("x-key".to_owned(), Secret::new("line\nbreak"))].into();
    let e = toolexec_grpc::import(options.clone()).await.unwrap_err();
    assert_eq!(e.field(), Some("metadata.x-key"), "{e}");
    assert!(!e.to_string().contains("break"), "{e}");
    options.options.metadata = [("grpc-timeout".to_owned(), Secret::new("1S"))].into();
    let e = toolexec_grpc::import(options).await.unwrap_err();
    assert_eq!(e.field(), Some("metadata.grpc-timeout"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_descriptor_set_gives_the_comments_as_descriptions() {
    let Some(server) = Server::start("descriptor_set", &[]) else {
        return;
    };
    let source = Source::DescriptorSet(server.descriptor_set());
    let mut options = ImportOptions::new("pb", &server.url(), source);
    options.exclude = vec!["toolexec.test.v1.Echo/Fail".into()];
    let (exec, import) = exec_with(options.clone()).await;
    assert_eq!(
        ids(&import),
        ["pb:echo_count", "pb:echo_say", "pb:vault_whoami"]
    );
    let say = exec.catalog().get("pb:echo_say").unwrap().tool().clone();
    assert_eq!(
        say.description,
        "Says the text back, with every field of the request echoed."
    );
    assert_eq!(
        say.input_schema["properties"]["text"]["description"],
        "The text to say back."
    );
    let reply = run(&exec, "pb:echo_say", json!({"text": "from the file"}))
        .await
        .unwrap();
    assert_eq!(reply["text"], "from the file");

    // Entries that name nothing, a missing file, a file that is not a
    // descriptor set: invalid_request naming the key.
    options.exclude = vec!["toolexec.test.v1.Echo/Nope".into()];
    let e = toolexec_grpc::import(options.clone()).await.unwrap_err();
    assert_eq!(e.field(), Some("exclude"), "{e}");
    options.exclude.clear();
    options.source = Source::DescriptorSet(server.out.path().join("missing.pb"));
    let e = toolexec_grpc::import(options.clone()).await.unwrap_err();
    assert_eq!(e.field(), Some("descriptor_set"), "{e}");
    options.source = Source::DescriptorSet(PathBuf::from(FIXTURE));
    let e = toolexec_grpc::import(options).await.unwrap_err();
    assert_eq!(e.field(), Some("descriptor_set"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unreachable_servers_and_bad_urls_are_clear() {
    let port = toolexec_testkit::free_port();
    let options = ImportOptions::new(
        "gone",
        &format!("http://127.0.0.1:{port}"),
        Source::Reflection,
    );
    let e = toolexec_grpc::import(options).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::BackendUnavailable, "{e}");
    assert!(e.to_string().contains("gone"), "{e}");
    for url in ["ftp://127.0.0.1:1", "not a url", "http://"] {
        let e = toolexec_grpc::import(ImportOptions::new("bad", url, Source::Reflection))
            .await
            .unwrap_err();
        assert_eq!(e.field(), Some("url"), "{url}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_with_the_upstreams_options() {
    use toolexec_testkit::tls::{TestCa, Usage};
    let dir = TempDir::new("grpc-tls");
    let ca = TestCa::new("toolexec test CA");
    let ca_file = dir.write("ca.pem", &ca.cert_pem);
    let cert = ca.issue(&["localhost", "127.0.0.1"], Usage::Server);
    let cert_file = dir.write("server.pem", &cert.cert_pem);
    let key_file = dir.write_private("server.key", &cert.key_pem);
    let Some(server) = Server::start(
        "tls",
        &[
            "--tls",
            cert_file.to_str().unwrap(),
            key_file.to_str().unwrap(),
        ],
    ) else {
        return;
    };
    let url = format!("https://localhost:{}", server.port);
    let mut options = ImportOptions::new("tls", &url, Source::Reflection);
    options.options.tls.ca_file = Some(ca_file);
    let (exec, _) = exec_with(options).await;
    let reply = run(&exec, "tls:echo_say", json!({"text": "secure"}))
        .await
        .unwrap();
    assert_eq!(reply["text"], "secure");

    let other = dir.write("other.pem", &TestCa::new("another CA").cert_pem);
    let mut options = ImportOptions::new("tls2", &url, Source::Reflection);
    options.options.tls.ca_file = Some(other);
    let e = toolexec_grpc::import(options).await.unwrap_err();
    assert_eq!(e.code(), ErrorCode::BackendUnavailable, "{e}");
    assert!(e.to_string().contains("TLS handshake failed"), "{e}");
    assert!(e.to_string().contains("unknown issuer"), "{e}");
}

//! `toolexec serve` on stdio relays a large `resources/read` result of a
//! stdio upstream as the server wrote it (toolexec-mcp's `verbatim`): the
//! client gets the server's bytes, escapes and fields rmcp does not know
//! included, under its own request id; small results, and results whose
//! URIs the gateway rewrites, are decoded and encoded as before.

use serde_json::json;

use crate::support::{PY_RAW_UPSTREAM, StdioSession, TempDir, dep, toml_str, toolexec};

/// The text of the fixture's resources as its JSON writes it.
const PIECE: &str = r"caf\u00e9 \/ ";

/// The raw stdout line of the last answer.
fn last_line(s: &StdioSession) -> &str {
    s.seen.last().map(String::as_str).unwrap_or_default()
}

#[test]
fn large_resource_reads_are_relayed_verbatim() {
    let Some(python) = dep(
        "large_resource_reads_are_relayed_verbatim",
        "TOOLEXEC_PYTHON",
    ) else {
        return;
    };
    let dir = TempDir::new("verbatim");
    // Two servers with the same URIs: the second's are rewritten.
    let server = |name: &str| {
        format!(
            "[[servers]]\nname = \"{name}\"\ncommand = {}\nargs = [{}]\n",
            toml_str(&python),
            toml_str(PY_RAW_UPSTREAM)
        )
    };
    let config = dir.write("toolexec.toml", &(server("raw") + &server("raw2")));
    let mut s = StdioSession::start(&mut toolexec(
        dir.path(),
        &["--config", config.to_str().unwrap(), "serve"],
    ));

    // 1 MiB: the server's own bytes, under the client's (string) id.
    let r = s.request_with_id(
        json!("big-1"),
        "resources/read",
        json!({"uri": "raw://big"}),
    );
    let line = last_line(&s);
    let contents = &r["result"]["contents"][0];
    assert_eq!(
        contents["x-note"],
        "kept",
        "{}",
        &line[..200.min(line.len())]
    );
    let text = contents["text"].as_str().unwrap();
    assert!(
        text.len() > 500_000 && text.starts_with("café / café"),
        "{}",
        &text[..40]
    );
    assert!(
        line.starts_with(r#"{"jsonrpc":"2.0","id":"big-1","result":{"contents":[{"uri":"raw://big","mimeType":"text/plain","text":"caf\u00e9 \/ "#),
        "{}",
        &line[..200.min(line.len())]
    );
    assert!(
        line.ends_with(r#"","x-note":"kept"}]}}"#),
        "{}",
        &line[line.len() - 80..]
    );

    // The session goes on, and the same read again is relayed again.
    let again = s.request(2, "resources/read", json!({"uri": "raw://big"}));
    assert_eq!(again["result"], r["result"]);
    assert!(last_line(&s).contains(PIECE));

    // 1 KiB: decoded and encoded by the gateway (serde's escapes, fields
    // MCP defines only).
    let small = s.request(3, "resources/read", json!({"uri": "raw://small"}));
    let line = last_line(&s);
    assert!(!line.contains(PIECE) && line.contains("café / "), "{line}");
    assert_eq!(
        small["result"]["contents"][0].get("x-note"),
        None,
        "{small}"
    );

    // The second server's big resource, under its rewritten URI: decoded,
    // so that its contents name the URI the client asked for.
    let (mut uris, mut cursor, mut id) = (Vec::new(), None::<String>, 10);
    loop {
        let params = cursor.map_or(json!({}), |c| json!({"cursor": c}));
        let page = s.request(id, "resources/list", params);
        id += 1;
        for r in page["result"]["resources"].as_array().unwrap() {
            uris.push(r["uri"].as_str().unwrap().to_owned());
        }
        match page["result"]["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let rewritten: Vec<&String> = uris
        .iter()
        .filter(|u| u.starts_with("toolexec://raw2/") && u.contains("big"))
        .collect();
    assert_eq!(rewritten.len(), 1, "{uris:?}");
    let r = s.request(5, "resources/read", json!({"uri": rewritten[0]}));
    let contents = &r["result"]["contents"][0];
    assert_eq!(contents["uri"], *rewritten[0], "{}", &last_line(&s)[..200]);
    assert_eq!(contents["text"].as_str().map(str::len), Some(text.len()));
    assert!(!last_line(&s).contains(PIECE));

    // An unknown URI: the server's error, relayed.
    let missing = s.request(6, "resources/read", json!({"uri": "raw://none"}));
    assert!(missing["error"].is_object(), "{missing}");
    let status = s.finish();
    assert!(status.success(), "{status:?}\n{}", s.stderr());
}

//! The MCP conformance suite's client driver: toolexec's upstream client
//! (the one `[[servers]]` uses) against the suite's test servers.
//!
//! ```text
//! conformance client --command "conformance_client" --scenario auth/metadata-default
//! ```
//!
//! The suite appends the server URL and sets `MCP_CONFORMANCE_SCENARIO`
//! (and `MCP_CONFORMANCE_CONTEXT`, JSON, for pre-registered clients). For
//! `auth/*` scenarios the driver signs in first with
//! [`oauth::login`](toolexec_mcp::upstream::oauth::login), opening the
//! authorization URL with an HTTP client that follows the redirects back
//! to the loopback listener (the suite's authorization server approves at
//! once). Then it connects, lists the tools and calls each one with
//! arguments made from its schema. A call refused for missing scopes is a
//! step-up: sign in again with the scopes the refusal names, at most three
//! times. Exit status 0 when every step worked.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolexec::{Catalog, Exec};
use toolexec_mcp::upstream::oauth::{self, EnterpriseIdp, Grant, LoginOptions, UpstreamOAuth};
use toolexec_mcp::upstream::{Upstream, UpstreamConfig, UpstreamTransport};

/// The client id metadata document the suite's CIMD scenario expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";
/// Most sign-ins for more scopes.
const MAX_STEP_UPS: usize = 3;

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("conformance_client: {message}");
    std::process::exit(1)
}

/// Arguments for a tool from its input schema: every required property
/// gets a value of its type.
fn arguments(schema: &Value) -> Value {
    let mut args = Map::new();
    let props = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let kind = props
            .and_then(|p| p.get(name))
            .and_then(|p| p.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("string");
        let value = match kind {
            "number" | "integer" => json!(1),
            "boolean" => json!(true),
            "object" => json!({}),
            "array" => json!([]),
            _ => json!("test"),
        };
        args.insert(name.to_owned(), value);
    }
    Value::Object(args)
}

/// The server's settings for this scenario.
fn config(
    url: &str,
    scenario: &str,
    context: &Value,
    token_file: &std::path::Path,
) -> UpstreamConfig {
    let oauth = scenario.starts_with("auth/").then(|| {
        let mut oauth = UpstreamOAuth::new(token_file);
        oauth.client_name = "toolexec-conformance".into();
        oauth.client_metadata_url = Some(CLIENT_METADATA_URL.into());
        if let Some(id) = context.get("client_id").and_then(Value::as_str) {
            oauth.client_id = Some(id.into());
            oauth.client_secret = context
                .get("client_secret")
                .and_then(Value::as_str)
                .map(toolexec::Secret::new);
        }
        if let Some(pem) = context.get("private_key_pem").and_then(Value::as_str) {
            oauth.client_key = Some(toolexec::Secret::new(pem));
            oauth.client_key_alg = context
                .get("signing_algorithm")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if scenario.starts_with("auth/client-credentials") {
            oauth.grant = Grant::ClientCredentials;
        }
        let text = |k: &str| context.get(k).and_then(Value::as_str);
        if let (Some(issuer), Some(endpoint), Some(client), Some(id_token)) = (
            text("idp_issuer"),
            text("idp_token_endpoint"),
            text("idp_client_id"),
            text("idp_id_token"),
        ) {
            oauth.grant = Grant::EnterpriseManaged;
            oauth.client_metadata_url = None;
            oauth.enterprise = Some(EnterpriseIdp::new(
                issuer,
                endpoint,
                client,
                toolexec::Secret::new(id_token),
            ));
        }
        oauth
    });
    let mut config = UpstreamConfig::new(
        "conformance",
        UpstreamTransport::Http {
            url: url.to_owned(),
            headers: Default::default(),
            bearer_token: None,
            tls: Default::default(),
            oauth,
            token_exchange: None,
        },
    );
    config.call_timeout = Duration::from_secs(20);
    config
}

/// Opens the authorization URL as a browser would: follows redirects
/// (the last one lands on the loopback listener).
fn browse(url: &str) {
    let url = url.to_owned();
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap_or_else(|e| fail(format!("HTTP client: {e}")));
        if let Err(e) = client.get(&url).send().await {
            eprintln!("conformance_client: opening the authorization URL: {e}");
        }
    });
}

/// The scopes a refusal names (`needs more scopes (a b): ...`).
fn scopes_named(message: &str) -> Option<Vec<String>> {
    let rest = message.split("needs more scopes (").nth(1)?;
    let list = rest.split(')').next()?;
    Some(list.split_whitespace().map(str::to_owned).collect())
}

async fn sign_in(config: &UpstreamConfig, scopes: Vec<String>) {
    let mut options = LoginOptions::default();
    options.scopes = scopes;
    options.timeout = Duration::from_secs(20);
    match oauth::login(config, &options, &browse).await {
        Ok(report) => eprintln!(
            "conformance_client: signed in as {} (scopes: {:?})",
            report.client_id, report.scopes
        ),
        Err(e) => fail(format!("sign-in failed: {e}")),
    }
}

#[tokio::main]
async fn main() {
    let _ = rustls_graviola::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| fail("usage: conformance_client SERVER_URL"));
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let dir = std::env::temp_dir().join(format!(
        "toolexec-conformance-client-{}",
        std::process::id()
    ));
    let config = config(&url, &scenario, &context, &dir.join("tokens.json"));
    if scenario.starts_with("auth/") {
        sign_in(&config, Vec::new()).await;
    }

    let mut step_ups = 0;
    let outcome = 'session: loop {
        let catalog = Arc::new(Catalog::new());
        let upstream = match Upstream::connect(config.clone(), catalog.clone()).await {
            Ok(u) => u,
            Err(e) => break 'session Err(format!("connect: {e}")),
        };
        let exec = Exec::new(catalog.clone());
        let mut ids = upstream.tool_ids();
        ids.sort();
        eprintln!("conformance_client: tools {ids:?}");
        for id in &ids {
            let args = catalog
                .get(id)
                .map(|t| arguments(&t.tool().input_schema))
                .unwrap_or_else(|_| json!({}));
            match exec.run_tool(id, args).await {
                Ok(out) => eprintln!("conformance_client: {id} -> {}", out.value),
                Err(e) => {
                    let message = e.to_string();
                    if let Some(scopes) = scopes_named(&message)
                        && step_ups < MAX_STEP_UPS
                    {
                        step_ups += 1;
                        eprintln!("conformance_client: step-up {step_ups}: {scopes:?}");
                        upstream.shutdown().await;
                        sign_in(&config, scopes).await;
                        continue 'session;
                    }
                    // A tool error is the server's answer, not a client failure.
                    eprintln!("conformance_client: {id} failed: {message}");
                }
            }
        }
        upstream.shutdown().await;
        break 'session Ok(());
    };
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = outcome {
        fail(e);
    }
}

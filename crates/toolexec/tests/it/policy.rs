//! Policy and quotas through the executor: one decision for every way a
//! call reaches the pipeline (direct, chain step, stream, the
//! [`ToolAccess`] scripts use), search and descriptions filtered, quotas
//! that hold under 1,000 concurrent calls from several callers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use toolexec::policy::{Policy, PolicyConfig};
use toolexec::quota::{CallQuota, QuotaConfig, Quotas};
use toolexec::telemetry::{Caller, PrincipalKind, with_caller};
use toolexec::{
    CancellationToken, ChainStep, DetailLevel, ErrorCode, Exec, StreamEvent, StreamRequest,
    ToolAccess, ToolError,
};

#[derive(Deserialize, JsonSchema)]
struct N {
    n: f64,
}

#[derive(Deserialize, JsonSchema)]
struct Cmd {
    #[allow(dead_code)]
    cmd: String,
}

fn token(name: &str) -> Arc<Caller> {
    Arc::new(Caller {
        principal: Some(name.into()),
        kind: PrincipalKind::Token,
        ..Caller::default()
    })
}

/// `math:double` and `shell:run` (which counts its runs); `ops` may run
/// everything but the shell, `root` everything.
fn exec(runs: Arc<AtomicUsize>) -> Exec {
    let config: PolicyConfig = serde_json::from_value(json!({
        "rules": [
            {"name": "ops", "effect": "allow", "tokens": ["ops"]},
            {"name": "root", "effect": "allow", "tokens": ["root"]},
            {"name": "shell-is-root-only", "effect": "deny", "namespaces": ["shell"], "tokens": ["ops"]},
        ]
    }))
    .unwrap();
    let exec = Exec::builder()
        .policy(Policy::new(&config).unwrap())
        .build();
    let c = exec.catalog();
    c.tool("math:double", "Doubles a number", |a: N| async move {
        Ok::<_, ToolError>(a.n * 2.0)
    })
    .unwrap();
    c.tool("shell:run", "Runs a shell command", move |_: Cmd| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, ToolError>("ran")
        }
    })
    .unwrap();
    exec
}

fn denied(err: &toolexec::ErrorBody, target: &str, rule: &str) {
    assert_eq!(err.code, ErrorCode::NotAllowed, "{err:?}");
    assert_eq!(
        err.details.as_ref().unwrap(),
        &json!({"target": target, "rule": rule})
    );
}

#[tokio::test]
async fn a_denied_tool_is_unreachable_every_way() {
    let runs = Arc::new(AtomicUsize::new(0));
    let exec = exec(runs.clone());
    with_caller(token("ops"), async {
        let direct = exec.run_tool("shell:run", json!({"cmd": "id"})).await;
        denied(
            &direct.unwrap_err().to_body(),
            "shell:run",
            "shell-is-root-only",
        );
        // Denied before the input is looked at: bad arguments change nothing.
        let bad_args = exec.run_tool("shell:run", json!([1])).await;
        denied(
            &bad_args.unwrap_err().to_body(),
            "shell:run",
            "shell-is-root-only",
        );

        let chain = exec
            .run_chain(&[
                ChainStep {
                    tool_id: "math:double".into(),
                    args: Some(json!({"n": 2})),
                    use_previous: false,
                    stop_on_error: true,
                },
                ChainStep {
                    tool_id: "shell:run".into(),
                    args: Some(json!({"cmd": "id"})),
                    use_previous: false,
                    stop_on_error: true,
                },
            ])
            .await
            .unwrap();
        assert!(!chain.ok);
        assert!(chain.steps[0].error.is_none());
        denied(
            chain.steps[1].error.as_ref().unwrap(),
            "shell:run",
            "shell-is-root-only",
        );

        // A stream runs on its own task and keeps the caller.
        let mut stream = exec.run_stream(
            StreamRequest::Tool {
                id: "shell:run".into(),
                args: json!({"cmd": "id"}),
            },
            Default::default(),
        );
        let mut last = None;
        while let Some(ev) = stream.next().await {
            last = Some(ev);
        }
        match last {
            Some(StreamEvent::Error { error }) => {
                denied(&error, "shell:run", "shell-is-root-only");
            }
            other => panic!("{other:?}"),
        }

        // What scripts and sandboxed units call through.
        let access: Arc<dyn ToolAccess> = Arc::new(exec.clone());
        let err = access
            .call("shell:run", json!({"cmd": "id"}), CancellationToken::new())
            .await
            .unwrap_err();
        denied(&err.to_body(), "shell:run", "shell-is-root-only");
        let err = access
            .describe("shell:run", DetailLevel::Summary)
            .await
            .unwrap_err();
        denied(&err.to_body(), "shell:run", "shell-is-root-only");
        let hits = access.search("run shell command", 10).await.unwrap();
        assert_eq!(hits, json!([]), "{hits}");

        assert_eq!(
            access
                .call("math:double", json!({"n": 4}), CancellationToken::new())
                .await
                .unwrap(),
            json!(8.0)
        );
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // No caller is the anonymous caller: the default (deny) decides.
    let err = exec
        .run_tool("math:double", json!({"n": 1}))
        .await
        .unwrap_err();
    denied(&err.to_body(), "math:double", "default");

    with_caller(token("root"), async {
        exec.run_tool("shell:run", json!({"cmd": "id"}))
            .await
            .unwrap();
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn callers_see_different_search_results_and_namespaces() {
    let exec = exec(Arc::default());
    let ids = |hits: Vec<toolexec::ToolMatch>| -> Vec<String> {
        let mut ids: Vec<String> = hits.into_iter().map(|m| m.id).collect();
        ids.sort();
        ids
    };
    let names = |exec: &Exec| -> Vec<(String, usize)> {
        exec.list_namespaces()
            .into_iter()
            .map(|n| (n.name, n.tools))
            .collect()
    };
    let (ops_hits, ops_ns) = with_caller(token("ops"), async {
        (
            ids(exec.search_tools("run double number shell", 10)),
            names(&exec),
        )
    })
    .await;
    let (root_hits, root_ns) = with_caller(token("root"), async {
        (
            ids(exec.search_tools("run double number shell", 10)),
            names(&exec),
        )
    })
    .await;
    assert_eq!(ops_hits, ["math:double"]);
    assert_eq!(root_hits, ["math:double", "shell:run"]);
    assert_eq!(ops_ns, [("math".to_string(), 1)]);
    assert_eq!(root_ns, [("math".to_string(), 1), ("shell".to_string(), 1)]);
    // A limit counts visible tools only.
    let one = with_caller(token("root"), async {
        exec.search_tools("shell run double", 1)
    })
    .await;
    assert_eq!(one.len(), 1);
    let anonymous = exec.search_tools("double", 10);
    assert!(anonymous.is_empty(), "{anonymous:?}");
}

/// A tool that sleeps and records the most calls it saw in flight at once.
fn counting_exec(quotas: QuotaConfig, peak: Arc<(AtomicUsize, AtomicUsize)>) -> Exec {
    let exec = Exec::builder()
        .quotas(Quotas::new(&quotas).unwrap())
        .build();
    exec.catalog()
        .tool("slow:wait", "Waits a little", move |_: Value| {
            let peak = peak.clone();
            async move {
                let now = peak.0.fetch_add(1, Ordering::SeqCst) + 1;
                peak.1.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(20)).await;
                peak.0.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, ToolError>(Value::Null)
            }
        })
        .unwrap();
    exec
}

/// 1,000 calls at once from `callers` callers (round robin): per caller,
/// the number that succeeded and the codes and limits of the refusals.
async fn flood(exec: &Exec, callers: usize) -> Vec<(usize, Vec<String>)> {
    let calls = (0..1000).map(|i| {
        let exec = exec.clone();
        let caller = token(&format!("c{}", i % callers));
        tokio::spawn(with_caller(caller, async move {
            (i % callers, exec.run_tool("slow:wait", json!({})).await)
        }))
    });
    let mut per = vec![(0usize, Vec::new()); callers];
    for done in futures::future::join_all(calls).await {
        let (c, out) = done.unwrap();
        match out {
            Ok(_) => per[c].0 += 1,
            Err(e) => {
                let body = e.to_body();
                assert_eq!(body.code, ErrorCode::LimitExceeded, "{body:?}");
                per[c]
                    .1
                    .push(body.details.unwrap()["limit"].as_str().unwrap().to_owned());
            }
        }
    }
    per
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rate_limits_hold_under_a_thousand_concurrent_calls() {
    // A bucket of 40 per caller that refills one call an hour: exactly 40
    // calls per caller get through, whatever the interleaving.
    let quotas = QuotaConfig {
        caller: Some(CallQuota {
            rate: Some(1.0 / 3600.0),
            burst: Some(40),
            concurrent: None,
        }),
        tool: None,
    };
    let exec = counting_exec(quotas, Arc::default());
    let per = flood(&exec, 4).await;
    for (ok, refused) in &per {
        assert_eq!(*ok, 40, "{per:?}");
        assert_eq!(refused.len(), 210);
        assert!(refused.iter().all(|l| l == "call_rate"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_quotas_hold_under_a_thousand_concurrent_calls() {
    let peak = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let quotas = QuotaConfig {
        caller: Some(CallQuota {
            concurrent: Some(3),
            ..CallQuota::default()
        }),
        tool: Some(CallQuota {
            concurrent: Some(8),
            ..CallQuota::default()
        }),
    };
    let exec = counting_exec(quotas, peak.clone());
    let per = flood(&exec, 5).await;
    let ok: usize = per.iter().map(|p| p.0).sum();
    assert!(ok >= 8, "{per:?}");
    let seen = peak.1.load(Ordering::SeqCst);
    // Five callers of at most 3 each, and at most 8 for the tool.
    assert!((1..=8).contains(&seen), "peak {seen}");
    for (_, refused) in &per {
        assert!(
            refused.iter().all(|l| l == "concurrent_calls"),
            "{refused:?}"
        );
    }
    assert_eq!(peak.0.load(Ordering::SeqCst), 0);
    // Everything was released: a new call gets through.
    exec.run_tool("slow:wait", json!({})).await.unwrap();
}

/// What a script's worker thread holds: an access captured in the caller's
/// scope, used on a thread with no caller of its own. Under an open policy
/// (default allow) a leak would show as the denied tool found or described.
#[tokio::test]
async fn scoped_access_decides_for_its_caller_on_any_thread() {
    let config: PolicyConfig = serde_json::from_value(json!({
        "default": "allow",
        "rules": [{"name": "no-shell-for-interns", "effect": "deny", "tokens": ["intern"], "namespaces": ["shell"]}]
    }))
    .unwrap();
    let exec = Exec::builder()
        .policy(Policy::new(&config).unwrap())
        .build();
    exec.catalog()
        .tool("shell:run", "Runs a shell command", |_: Cmd| async move {
            Ok::<_, ToolError>("ran")
        })
        .unwrap();
    let access = with_caller(token("intern"), async {
        toolexec::telemetry::scoped_access(Arc::new(exec.clone()))
    })
    .await;
    let (found, described, ran) = std::thread::spawn(move || {
        futures::executor::block_on(async {
            (
                access.search("run shell command", 10).await.unwrap(),
                access.describe("shell:run", DetailLevel::Full).await,
                access
                    .call("shell:run", json!({"cmd": "id"}), CancellationToken::new())
                    .await,
            )
        })
    })
    .join()
    .unwrap();
    assert_eq!(found, json!([]));
    denied(
        &described.unwrap_err().to_body(),
        "shell:run",
        "no-shell-for-interns",
    );
    denied(
        &ran.unwrap_err().to_body(),
        "shell:run",
        "no-shell-for-interns",
    );
    // Anyone else (here: no caller at all) may.
    assert_eq!(exec.search_tools("run shell command", 10).len(), 1);
}

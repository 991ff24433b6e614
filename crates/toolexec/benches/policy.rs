//! [`Policy::decide`] with 1,000 rules (issue 13's budget: a JWT check and
//! a policy decision within 20 µs per call), in the two shapes a large
//! policy takes:
//!
//! - `per_subject`: a rule per user (1,000 subjects, each allowed its own
//!   namespace) plus a few rules for everyone (deny destructive tools and
//!   the shell): a decision reads the caller's rules (indexed by principal)
//!   and the open ones;
//! - `open_namespaced`: 1,000 rules about everyone, each a tool glob in a
//!   namespace of its own (`ns7:*_file`): indexed by namespace, a decision
//!   reads the rules of the tool's namespace;
//! - `open_any_namespace`: 1,000 rules about everyone whose globs span
//!   namespaces (`*:write_7*`): the worst case, every rule is matched;
//!
//! and the quotas' admission (`quota/admit`: a caller rate and concurrency
//! plus a tool rate).
//!
//! ```text
//! cargo bench -p toolexec --bench policy
//! ```

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use toolexec::Tool;
use toolexec::policy::{Policy, PolicyConfig, Target};
use toolexec::quota::{CallQuota, QuotaConfig, Quotas};
use toolexec::telemetry::{Caller, PrincipalKind};

fn policy(rules: Vec<serde_json::Value>) -> Policy {
    let config: PolicyConfig = serde_json::from_value(json!({ "rules": rules })).unwrap();
    Policy::new(&config).unwrap()
}

fn subject(name: &str) -> Caller {
    Caller {
        principal: Some(name.into()),
        kind: PrincipalKind::Subject,
        scopes: vec!["tools".into()],
        claims: json!({"groups": ["dev"]}).as_object().cloned().unwrap(),
        ..Caller::default()
    }
}

fn decide(c: &mut Criterion) {
    let tool = Tool::builder("ns500:read_file")
        .description("Reads a file")
        .build()
        .unwrap();
    let target = Target::Tool(&tool);
    let mut group = c.benchmark_group("policy");

    let mut rules: Vec<_> = (0..1000)
        .map(|i| json!({"name": format!("user{i}"), "effect": "allow", "subjects": [format!("user{i}")], "tools": [format!("ns{i}:*")]}))
        .collect();
    rules.push(json!({"name": "no-destructive", "effect": "deny", "annotations": {"destructiveHint": true}, "namespaces": ["prod*"]}));
    rules.push(json!({"name": "no-shell", "effect": "deny", "namespaces": ["shell"]}));
    rules.push(json!({"name": "admins", "effect": "allow", "claims": {"groups": "admin"}}));
    let per_subject = policy(rules);
    let user = subject("user500");
    assert!(per_subject.decide(Some(&user), &target).allowed());
    group.bench_function("per_subject/1000", |b| {
        b.iter(|| black_box(per_subject.decide(Some(black_box(&user)), black_box(&target))))
    });

    let rules: Vec<_> = (0..1000)
        .map(|i| json!({"name": format!("r{i}"), "effect": if i % 2 == 0 { "allow" } else { "deny" }, "tools": [format!("ns{i}:*_file")]}))
        .collect();
    let open = policy(rules);
    assert!(open.decide(Some(&user), &target).allowed());
    group.bench_function("open_namespaced/1000", |b| {
        b.iter(|| black_box(open.decide(Some(black_box(&user)), black_box(&target))))
    });
    let mut rules: Vec<_> = (0..1000)
        .map(|i| json!({"name": format!("r{i}"), "effect": "deny", "tools": [format!("*:write_{i}*")]}))
        .collect();
    rules.push(json!({"name": "all", "effect": "allow"}));
    let any = policy(rules);
    assert!(any.decide(Some(&user), &target).allowed());
    group.bench_function("open_any_namespace/1000", |b| {
        b.iter(|| black_box(any.decide(Some(black_box(&user)), black_box(&target))))
    });
    group.finish();

    let quotas = Arc::new(
        Quotas::new(&QuotaConfig {
            // Rates no benchmark loop exhausts: every call is admitted.
            caller: Some(CallQuota {
                rate: Some(1e9),
                burst: Some(u32::MAX),
                concurrent: Some(1000),
            }),
            tool: Some(CallQuota {
                rate: Some(1e9),
                burst: Some(u32::MAX),
                concurrent: None,
            }),
        })
        .unwrap(),
    );
    c.bench_function("quota/admit", |b| {
        b.iter(|| black_box(quotas.admit(Some(&user), "ns500:read_file").unwrap()))
    });
}

criterion_group!(benches, decide);
criterion_main!(benches);

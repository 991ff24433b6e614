use serde_json::json;

use super::*;
use crate::tool::{Tool, ToolAnnotations};

fn policy(v: Value) -> Policy {
    Policy::new(&serde_json::from_value(v).unwrap()).unwrap()
}

fn bad(v: Value) -> String {
    let config: PolicyConfig = serde_json::from_value(v).unwrap();
    let body = Policy::new(&config).unwrap_err().to_body();
    assert_eq!(body.code.as_str(), "invalid_request");
    body.details.unwrap()["field"].as_str().unwrap().to_owned()
}

fn token(name: &str) -> Caller {
    Caller {
        principal: Some(name.into()),
        kind: PrincipalKind::Token,
        ..Caller::default()
    }
}

fn subject(name: &str, scopes: &[&str], claims: Value) -> Caller {
    Caller {
        principal: Some(name.into()),
        kind: PrincipalKind::Subject,
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        claims: claims.as_object().cloned().unwrap_or_default(),
        ..Caller::default()
    }
}

fn tool(id: &str) -> Tool {
    Tool::builder(id).description("a tool").build().unwrap()
}

fn annotated(id: &str, a: ToolAnnotations) -> Tool {
    let mut t = tool(id);
    t.annotations = Some(a);
    t
}

fn allowed(p: &Policy, caller: Option<&Caller>, target: Target<'_>) -> (bool, String) {
    let d = p.decide(caller, &target);
    (d.allowed(), d.rule_name().to_owned())
}

#[test]
fn deny_wins_over_allow_and_the_default_decides_the_rest() {
    let p = policy(json!({"rules": [
        {"name": "ci", "effect": "allow", "tokens": ["ci"]},
        {"name": "no-shell", "effect": "deny", "namespaces": ["shell"]},
    ]}));
    let ci = token("ci");
    let math = tool("math:add");
    let shell = tool("shell:run");
    assert_eq!(
        allowed(&p, Some(&ci), Target::Tool(&math)),
        (true, "ci".into())
    );
    assert_eq!(
        allowed(&p, Some(&ci), Target::Tool(&shell)),
        (false, "no-shell".into())
    );
    assert_eq!(
        allowed(&p, Some(&token("other")), Target::Tool(&math)),
        (false, "default".into())
    );
    assert_eq!(
        allowed(&p, None, Target::Tool(&math)),
        (false, "default".into())
    );
    let open = policy(json!({"default": "allow", "rules": [
        {"name": "no-shell", "effect": "deny", "namespaces": ["shell"]},
    ]}));
    assert!(open.decide(None, &Target::Tool(&math)).allowed());
    assert!(!open.decide(None, &Target::Tool(&shell)).allowed());
}

#[test]
fn the_refusal_names_the_target_and_the_rule() {
    let p = policy(json!({"rules": [{"name": "x", "effect": "deny", "tools": ["math:*"]}]}));
    let math = tool("math:add");
    let target = Target::Tool(&math);
    let body = p
        .decide(None, &target)
        .check(&target)
        .unwrap_err()
        .to_body();
    assert_eq!(body.code.as_str(), "not_allowed");
    assert_eq!(
        body.details.unwrap(),
        json!({"target": "math:add", "rule": "x"})
    );
    assert!(
        body.message.contains("policy rule \"x\""),
        "{}",
        body.message
    );
}

#[test]
fn a_token_name_is_not_a_subject() {
    let p = policy(json!({"rules": [{"name": "a", "effect": "allow", "subjects": ["alice"]}]}));
    let math = tool("math:add");
    assert!(
        !p.decide(Some(&token("alice")), &Target::Tool(&math))
            .allowed()
    );
    let alice = subject("alice", &[], json!({}));
    assert!(p.decide(Some(&alice), &Target::Tool(&math)).allowed());
    // Globs over principals are not indexed but match the same way.
    let g = policy(json!({"rules": [{"effect": "allow", "subjects": ["ali*"]}]}));
    assert_eq!(
        allowed(&g, Some(&alice), Target::Tool(&math)),
        (true, "rules[0]".into())
    );
    assert!(
        !g.decide(Some(&token("alice")), &Target::Tool(&math))
            .allowed()
    );
}

#[test]
fn scopes_must_all_be_held_and_claims_match_values_or_members() {
    let p = policy(json!({"rules": [
        {"name": "writers", "effect": "allow", "scopes": ["tools:read", "tools:write"]},
        {"name": "admins", "effect": "allow", "claims": {"groups": "admin", "tenant": 7}},
    ]}));
    let math = tool("math:add");
    let t = Target::Tool(&math);
    let reader = subject("r", &["tools:read"], json!({}));
    let writer = subject("w", &["tools:read", "tools:write"], json!({}));
    assert!(!p.decide(Some(&reader), &t).allowed());
    assert_eq!(allowed(&p, Some(&writer), t), (true, "writers".into()));
    let admin = subject("a", &[], json!({"groups": ["dev", "admin"], "tenant": 7}));
    assert_eq!(allowed(&p, Some(&admin), t), (true, "admins".into()));
    let other_tenant = subject("a", &[], json!({"groups": ["admin"], "tenant": 8}));
    assert!(!p.decide(Some(&other_tenant), &t).allowed());
    let string_tenant = subject("a", &[], json!({"groups": "admin", "tenant": "7"}));
    assert!(!p.decide(Some(&string_tenant), &t).allowed());
}

#[test]
fn annotations_use_the_protocol_defaults() {
    let p = policy(json!({"default": "allow", "rules": [
        {"name": "destructive", "effect": "deny", "annotations": {"destructiveHint": true}},
    ]}));
    let unset = tool("fs:write");
    let read_only = annotated(
        "fs:read",
        ToolAnnotations {
            read_only_hint: Some(true),
            ..ToolAnnotations::default()
        },
    );
    let safe = annotated(
        "fs:touch",
        ToolAnnotations {
            destructive_hint: Some(false),
            ..ToolAnnotations::default()
        },
    );
    assert!(!p.decide(None, &Target::Tool(&unset)).allowed());
    assert!(p.decide(None, &Target::Tool(&read_only)).allowed());
    assert!(p.decide(None, &Target::Tool(&safe)).allowed());
}

#[test]
fn rules_about_tools_prompts_or_resources_match_only_their_kind() {
    let p = policy(json!({"rules": [
        {"name": "tools", "effect": "allow", "tools": ["gh:*"]},
        {"name": "prompts", "effect": "allow", "prompts": ["gh:review"]},
        {"name": "files", "effect": "allow", "resources": ["file:///pub/*"]},
        {"name": "docs-server", "effect": "allow", "namespaces": ["docs"]},
    ]}));
    let gh = tool("gh:issue");
    assert_eq!(allowed(&p, None, Target::Tool(&gh)), (true, "tools".into()));
    let review = Target::Prompt {
        namespace: "gh",
        name: "review",
    };
    assert_eq!(allowed(&p, None, review), (true, "prompts".into()));
    let other = Target::Prompt {
        namespace: "gh",
        name: "issue",
    };
    assert!(!p.decide(None, &other).allowed());
    let public = Target::Resource {
        namespace: "fs",
        uri: "file:///pub/a.txt",
    };
    assert_eq!(allowed(&p, None, public), (true, "files".into()));
    let private = Target::Resource {
        namespace: "fs",
        uri: "file:///etc/passwd",
    };
    assert!(!p.decide(None, &private).allowed());
    let docs = Target::Resource {
        namespace: "docs",
        uri: "docs://x",
    };
    assert_eq!(allowed(&p, None, docs), (true, "docs-server".into()));
}

#[test]
fn versioned_ids_match_by_key_and_by_full_id() {
    let p = policy(json!({"rules": [
        {"name": "v1", "effect": "deny", "tools": ["math:add:1.*"]},
        {"name": "any", "effect": "allow", "tools": ["math:add"]},
    ]}));
    let v1 = tool("math:add:1.2");
    let v2 = tool("math:add:2.0");
    assert_eq!(allowed(&p, None, Target::Tool(&v1)), (false, "v1".into()));
    assert_eq!(allowed(&p, None, Target::Tool(&v2)), (true, "any".into()));
}

#[test]
fn the_first_matching_rule_of_the_winning_effect_is_named() {
    let p = policy(json!({"rules": [
        {"name": "first", "effect": "deny", "namespaces": ["m*"]},
        {"name": "named", "effect": "deny", "tokens": ["ci"]},
        {"name": "later", "effect": "deny", "tools": ["math:*"]},
    ]}));
    let math = tool("math:add");
    // `named` is indexed by principal and `first` is not: file order still
    // decides.
    assert_eq!(
        allowed(&p, Some(&token("ci")), Target::Tool(&math)),
        (false, "first".into())
    );
}

#[test]
fn bad_rules_name_their_field() {
    assert_eq!(
        bad(json!({"rules": [{"effect": "allow", "annotations": {"fooHint": true}}]})),
        "policy.rules[0].annotations.fooHint"
    );
    assert_eq!(
        bad(
            json!({"rules": [{"effect": "allow"}, {"effect": "allow", "tools": ["a:*"], "prompts": ["a:b"]}]})
        ),
        "policy.rules[1].tools"
    );
    assert_eq!(
        bad(
            json!({"rules": [{"effect": "allow", "prompts": ["a:b"], "annotations": {"readOnlyHint": true}}]})
        ),
        "policy.rules[0].annotations"
    );
    assert_eq!(
        bad(json!({"rules": [{"effect": "allow", "tokens": ["ok", " "]}]})),
        "policy.rules[0].tokens[1]"
    );
    assert_eq!(
        bad(json!({"rules": [{"effect": "allow", "claims": {"groups": ["a"]}}]})),
        "policy.rules[0].claims.groups"
    );
    assert_eq!(
        bad(json!({"rules": [{"name": "x", "effect": "allow"}, {"name": "x", "effect": "deny"}]})),
        "policy.rules[1].name"
    );
    let unknown = serde_json::from_value::<PolicyConfig>(
        json!({"rules": [{"effect": "allow", "tool": ["a:b"]}]}),
    );
    assert!(
        unknown
            .unwrap_err()
            .to_string()
            .contains("unknown field `tool`")
    );
}

#[test]
fn resource_rules_see_through_dot_segments_escapes_and_case() {
    let p = policy(json!({"rules": [
        {"name": "public", "effect": "allow", "resources": ["file:///srv/public/*"]},
        {"name": "keys", "effect": "deny", "resources": ["file:///srv/public/keys/*"]},
    ]}));
    let decide = |uri: &str| {
        let d = p.decide(
            None,
            &Target::Resource {
                namespace: "fs",
                uri,
            },
        );
        (d.allowed(), d.rule_name().to_owned())
    };
    assert_eq!(decide("file:///srv/public/a.txt"), (true, "public".into()));
    for sneaky in [
        "file:///srv/public/../secret/key",
        "file:///srv/public/%2e%2e/secret/key",
        "file:///srv/public%2F..%2Fsecret",
    ] {
        assert_eq!(decide(sneaky), (false, "default".into()), "{sneaky}");
    }
    for sneaky in [
        "file:///srv/public//keys/id_rsa",
        "file:///srv/public/%6beys/id_rsa",
        "FILE:///srv/public/./keys/id_rsa",
        "file:///srv/public/x/../keys/id_rsa",
    ] {
        assert_eq!(decide(sneaky), (false, "keys".into()), "{sneaky}");
    }
}

#[test]
fn rules_indexed_by_namespace_decide_as_the_others() {
    let p = policy(json!({"default": "allow", "rules": [
        {"name": "glob-ns", "effect": "deny", "tools": ["m*:div"]},
        {"name": "math-div", "effect": "deny", "tools": ["math:div", "math:mod"]},
        {"name": "mixed", "effect": "deny", "tools": ["text:x", "*:wipe"]},
        {"name": "ns", "effect": "deny", "namespaces": ["fs"], "tokens": ["*"]},
        {"name": "gh-review", "effect": "deny", "prompts": ["gh:review"]},
    ]}));
    let decide = |id: &str| {
        let t = tool(id);
        let d = p.decide(Some(&token("ci")), &Target::Tool(&t));
        (d.allowed(), d.rule_name().to_owned())
    };
    assert_eq!(decide("math:div"), (false, "glob-ns".into()));
    assert_eq!(decide("math:mod"), (false, "math-div".into()));
    assert_eq!(decide("math:add"), (true, "default".into()));
    assert_eq!(decide("other:wipe"), (false, "mixed".into()));
    assert_eq!(decide("fs:read"), (false, "ns".into()));
    let review = Target::Prompt {
        namespace: "gh",
        name: "review",
    };
    assert_eq!(allowed(&p, None, review), (false, "gh-review".into()));
}

//! The policy as written: [`PolicyConfig`] and its [`RuleConfig`]s, as a
//! configuration file holds them (TOML `[policy]`, or JSON).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a rule, or the policy's default, does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// The caller may run (see, read) the target.
    Allow,
    /// The caller may not. A matching `deny` rule wins over every `allow`.
    #[default]
    Deny,
}

impl Effect {
    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
        }
    }
}

/// A policy: rules, and what happens when none matches.
///
/// ```
/// use toolexec::policy::{Policy, PolicyConfig};
/// let config: PolicyConfig = serde_json::from_value(serde_json::json!({
///     "default": "deny",
///     "rules": [
///         {"name": "ci-reads", "effect": "allow", "tokens": ["ci"], "annotations": {"readOnlyHint": true}},
///         {"name": "admins", "effect": "allow", "claims": {"groups": "admin"}},
///         {"name": "no-shell", "effect": "deny", "namespaces": ["shell"]}
///     ]
/// })).unwrap();
/// let policy = Policy::new(&config).unwrap();
/// assert_eq!(policy.len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// The decision when no rule matches. Default `deny`: a policy lists
    /// what is allowed.
    #[serde(default)]
    pub default: Effect,
    /// The rules, in no significant order: any matching `deny` wins, else
    /// any matching `allow`, else [`PolicyConfig::default`].
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// One rule: an effect, whom it is about, and what.
///
/// **Who** (every criterion given must hold; none: every caller):
/// `tokens` and `subjects` name the principal (either list may match),
/// `scopes` must all be granted, and each of `claims` must equal the
/// caller's claim or be an element of it when the claim is an array.
///
/// **What** (every criterion given must hold; none: everything): `tools`
/// (ids or globs, matched against `namespace:name` and the id as written),
/// `prompts` (`namespace:name`), `resources` (URI globs), `namespaces`
/// (tools, prompts and resources of those namespaces, that is upstream
/// servers), and `annotations` (MCP tool hints, compared with the
/// protocol's defaults for hints a tool leaves unset: `readOnlyHint`
/// false, `destructiveHint` true unless read-only, `idempotentHint`
/// false, `openWorldHint` true). A rule names at most one of `tools`,
/// `prompts` and `resources`; `tools` or `annotations` make it a rule
/// about tools only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Named in decisions, refusals and logs; `rules[i]` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Allow or deny.
    pub effect: Effect,
    /// Static bearer tokens, by name (globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tokens: Vec<String>,
    /// Access-token subjects (`sub`, globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subjects: Vec<String>,
    /// Scopes the caller must all hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Claims the caller must carry: a string, number or boolean each.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub claims: BTreeMap<String, Value>,
    /// Tool ids or globs (`github:*`, `*:delete_*`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// Prompts as `namespace:name` (globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts: Vec<String>,
    /// Resource URIs (globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Namespaces (globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// MCP tool annotation hints by their protocol names
    /// (`destructiveHint = true`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, bool>,
}

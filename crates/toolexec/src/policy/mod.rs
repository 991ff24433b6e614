//! Who may run what: a [`Policy`] of allow and deny rules over callers
//! ([`Caller`]) and targets (tools, prompts, resources), decided in one
//! place. An [`Exec`](crate::Exec) built with a policy
//! ([`ExecBuilder::policy`](crate::ExecBuilder::policy)) asks it before
//! every call its pipeline runs (direct calls, chain steps, the tool calls
//! of scripts and sandboxed units, which all reach the pipeline for the
//! caller that started them) and hides denied tools from its search and
//! descriptions; the MCP gateway asks it for lists, prompts and resources.
//!
//! Semantics: any matching `deny` rule wins, else any matching `allow`,
//! else the policy's default (`deny` unless configured). Rules are
//! indexed by the exact principal they name, so a decision looks only at
//! the rules about its caller and those about everyone.

mod config;
mod pattern;
mod uri;

use std::collections::HashMap;

use serde_json::Value;

pub use config::{Effect, PolicyConfig, RuleConfig};

use crate::error::Error;
use crate::telemetry::{Caller, PrincipalKind};
use crate::tool::Tool;
use pattern::Pattern;

/// What a decision is about.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// A catalog tool.
    Tool(&'a Tool),
    /// An upstream server's prompt.
    Prompt {
        /// The server's namespace.
        namespace: &'a str,
        /// The prompt's name on that server.
        name: &'a str,
    },
    /// An upstream server's resource (or resource template).
    Resource {
        /// The server's namespace.
        namespace: &'a str,
        /// The URI (or URI template) as the server wrote it.
        uri: &'a str,
    },
}

impl Target<'_> {
    fn namespace(&self) -> &str {
        match self {
            Target::Tool(t) => t.id.namespace(),
            Target::Prompt { namespace, .. } | Target::Resource { namespace, .. } => namespace,
        }
    }

    /// How refusals and logs name the target: the tool id, `ns:prompt`, or
    /// the URI.
    pub fn label(&self) -> String {
        match self {
            Target::Tool(t) => t.id.to_string(),
            Target::Prompt { namespace, name } => format!("{namespace}:{name}"),
            Target::Resource { uri, .. } => (*uri).to_owned(),
        }
    }
}

/// The outcome of [`Policy::decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision<'p> {
    /// Allow or deny.
    pub effect: Effect,
    /// The deciding rule's name; `None` when no rule matched and the
    /// default decided.
    pub rule: Option<&'p str>,
}

impl Decision<'_> {
    /// True when the effect is `allow`.
    pub fn allowed(&self) -> bool {
        self.effect == Effect::Allow
    }

    /// The deciding rule's name, or `default` when none matched.
    pub fn rule_name(&self) -> &str {
        self.rule.unwrap_or("default")
    }

    /// `Ok` when allowed, else [`Error::Denied`] naming `target` and the
    /// rule.
    pub fn check(&self, target: &Target<'_>) -> Result<(), Error> {
        if self.allowed() {
            return Ok(());
        }
        Err(Error::Denied {
            target: target.label(),
            rule: self.rule_name().to_owned(),
        })
    }
}

/// A compiled policy. Cheap to decide with; build once
/// ([`Policy::new`]).
#[derive(Debug, Clone)]
pub struct Policy {
    default: Effect,
    rules: Vec<Rule>,
    /// Rules naming exact principals, by kind and principal.
    by_principal: HashMap<PrincipalKind, HashMap<Box<str>, Vec<u32>>>,
    /// Rules about any principal (or naming principals by glob) that only
    /// match targets of given namespaces, by namespace.
    open_by_namespace: HashMap<Box<str>, Vec<u32>>,
    /// The other rules about any principal.
    open: Vec<u32>,
}

impl Policy {
    /// Compiles `config`: `invalid_request` naming the first bad field
    /// (`policy.rules[2].annotations.fooHint`).
    pub fn new(config: &PolicyConfig) -> Result<Self, Error> {
        let mut rules = Vec::with_capacity(config.rules.len());
        let mut by_principal: HashMap<PrincipalKind, HashMap<Box<str>, Vec<u32>>> = HashMap::new();
        let mut open = Vec::new();
        let mut open_by_namespace: HashMap<Box<str>, Vec<u32>> = HashMap::new();
        let mut names = HashMap::new();
        for (i, rc) in config.rules.iter().enumerate() {
            let rule = Rule::new(i, rc)?;
            if let Some(prev) = names.insert(rule.name.clone(), i) {
                return Err(Error::invalid_request(
                    format!("policy.rules[{i}].name"),
                    format!("{:?} is also the name of rules[{prev}]", rule.name),
                ));
            }
            let index = u32::try_from(i).map_err(|_| {
                Error::invalid_request("policy.rules", "more than 4294967295 rules")
            })?;
            match rule.who.exact_principals() {
                Some(keys) => {
                    for (kind, name) in keys {
                        let named = by_principal.entry(kind).or_default();
                        named.entry(name).or_default().push(index);
                    }
                }
                None => match rule.what.literal_namespaces() {
                    Some(namespaces) => {
                        for ns in namespaces {
                            let rules = open_by_namespace.entry(ns.into()).or_default();
                            if rules.last() != Some(&index) {
                                rules.push(index);
                            }
                        }
                    }
                    None => open.push(index),
                },
            }
            rules.push(rule);
        }
        Ok(Policy {
            default: config.default,
            rules,
            by_principal,
            open_by_namespace,
            open,
        })
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when the policy has no rules (its default decides everything).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Decides whether `caller` (anonymous when `None`) may use `target`.
    pub fn decide(&self, caller: Option<&Caller>, target: &Target<'_>) -> Decision<'_> {
        let anonymous = Caller::default();
        let caller = caller.unwrap_or(&anonymous);
        let named: &[u32] = match &caller.principal {
            Some(p) => self
                .by_principal
                .get(&caller.kind)
                .and_then(|named| named.get(p.as_str()))
                .map_or(&[], Vec::as_slice),
            None => &[],
        };
        let by_namespace: &[u32] = self
            .open_by_namespace
            .get(target.namespace())
            .map_or(&[], Vec::as_slice);
        let keys = Keys::of(target);
        let mut allow: Option<u32> = None;
        let mut deny: Option<u32> = None;
        for &i in named.iter().chain(by_namespace).chain(&self.open) {
            let rule = &self.rules[i as usize];
            let best = match rule.effect {
                Effect::Allow => &mut allow,
                Effect::Deny => &mut deny,
            };
            // The first rule (in file order) of an effect is the one named.
            if best.is_some_and(|b| b < i) {
                continue;
            }
            if rule.who.matches(caller) && rule.what.matches(target, &keys) {
                *best = Some(i);
            }
        }
        let (effect, rule) = match (deny, allow) {
            (Some(i), _) => (Effect::Deny, Some(i)),
            (None, Some(i)) => (Effect::Allow, Some(i)),
            (None, None) => (self.default, None),
        };
        Decision {
            effect,
            rule: rule.map(|i| self.rules[i as usize].name.as_str()),
        }
    }
}

/// One compiled rule.
#[derive(Debug, Clone)]
struct Rule {
    name: String,
    effect: Effect,
    who: Who,
    what: What,
}

impl Rule {
    fn new(i: usize, rc: &RuleConfig) -> Result<Self, Error> {
        let at = |field: &str| format!("policy.rules[{i}].{field}");
        let name = match &rc.name {
            Some(n) if n.trim().is_empty() => {
                return Err(Error::invalid_request(at("name"), "must not be empty"));
            }
            Some(n) => n.clone(),
            None => format!("rules[{i}]"),
        };
        let patterns = |field: &str, list: &[String]| -> Result<Vec<Pattern>, Error> {
            match list.iter().position(|p| p.trim().is_empty()) {
                Some(j) => Err(Error::invalid_request(
                    at(&format!("{field}[{j}]")),
                    "must not be empty",
                )),
                None => Ok(list.iter().map(|p| Pattern::new(p)).collect()),
            }
        };
        let mut claims = Vec::with_capacity(rc.claims.len());
        for (k, v) in &rc.claims {
            if !(v.is_string() || v.is_number() || v.is_boolean()) {
                return Err(Error::invalid_request(
                    at(&format!("claims.{k}")),
                    "must be a string, a number or a boolean",
                ));
            }
            claims.push((k.clone(), v.clone()));
        }
        let mut annotations = Vec::with_capacity(rc.annotations.len());
        for (k, v) in &rc.annotations {
            let hint = Hint::parse(k).ok_or_else(|| {
                Error::invalid_request(
                    at(&format!("annotations.{k}")),
                    "expected readOnlyHint, destructiveHint, idempotentHint or openWorldHint",
                )
            })?;
            annotations.push((hint, *v));
        }
        let kinds = [&rc.tools, &rc.prompts, &rc.resources]
            .iter()
            .filter(|l| !l.is_empty())
            .count();
        if kinds > 1 {
            return Err(Error::invalid_request(
                at("tools"),
                "a rule names at most one of tools, prompts and resources",
            ));
        }
        let about_tools = !annotations.is_empty();
        if about_tools && (!rc.prompts.is_empty() || !rc.resources.is_empty()) {
            return Err(Error::invalid_request(
                at("annotations"),
                "annotations are tool hints: not with prompts or resources",
            ));
        }
        Ok(Rule {
            name,
            effect: rc.effect,
            who: Who {
                tokens: patterns("tokens", &rc.tokens)?,
                subjects: patterns("subjects", &rc.subjects)?,
                scopes: rc.scopes.clone(),
                claims,
            },
            what: What {
                tools: patterns("tools", &rc.tools)?,
                prompts: patterns("prompts", &rc.prompts)?,
                resources: patterns("resources", &rc.resources)?,
                namespaces: patterns("namespaces", &rc.namespaces)?,
                annotations,
            },
        })
    }
}

/// Whom a rule is about.
#[derive(Debug, Clone)]
struct Who {
    tokens: Vec<Pattern>,
    subjects: Vec<Pattern>,
    scopes: Vec<String>,
    claims: Vec<(String, Value)>,
}

impl Who {
    /// The exact principals the rule names, when it names only exact ones.
    fn exact_principals(&self) -> Option<Vec<(PrincipalKind, Box<str>)>> {
        if self.tokens.is_empty() && self.subjects.is_empty() {
            return None;
        }
        let tokens = self.tokens.iter().map(|t| (PrincipalKind::Token, t));
        let subjects = self.subjects.iter().map(|s| (PrincipalKind::Subject, s));
        tokens
            .chain(subjects)
            .map(|(k, p)| p.exact().map(|p| (k, Box::from(p))))
            .collect()
    }

    fn matches(&self, caller: &Caller) -> bool {
        if !(self.tokens.is_empty() && self.subjects.is_empty()) {
            let names = match caller.kind {
                PrincipalKind::Token => &self.tokens,
                PrincipalKind::Subject => &self.subjects,
                _ => return false,
            };
            let Some(principal) = &caller.principal else {
                return false;
            };
            if !names.iter().any(|n| n.matches(principal)) {
                return false;
            }
        }
        self.scopes.iter().all(|s| caller.scopes.contains(s))
            && self
                .claims
                .iter()
                .all(|(k, want)| match caller.claims.get(k) {
                    Some(Value::Array(items)) => items.contains(want),
                    Some(have) => have == want,
                    None => false,
                })
    }
}

/// What a rule is about.
#[derive(Debug, Clone)]
struct What {
    tools: Vec<Pattern>,
    prompts: Vec<Pattern>,
    resources: Vec<Pattern>,
    namespaces: Vec<Pattern>,
    annotations: Vec<(Hint, bool)>,
}

impl What {
    /// The namespaces outside which the rule matches nothing, when they
    /// are all written without globs (the rule can then be indexed).
    fn literal_namespaces(&self) -> Option<Vec<&str>> {
        fn literal(parts: Vec<&str>) -> Option<Vec<&str>> {
            (!parts.is_empty() && parts.iter().all(|p| !is_glob(p))).then_some(parts)
        }
        fn before_colon(list: &[Pattern]) -> Vec<&str> {
            list.iter()
                .map(|p| p.glob().split(':').next().unwrap_or(p.glob()))
                .collect()
        }
        literal(self.namespaces.iter().map(Pattern::glob).collect())
            .or_else(|| literal(before_colon(&self.tools)))
            .or_else(|| literal(before_colon(&self.prompts)))
    }

    fn matches(&self, target: &Target<'_>, keys: &Keys) -> bool {
        let kind_ok = match target {
            Target::Tool(tool) => {
                self.prompts.is_empty()
                    && self.resources.is_empty()
                    && (self.tools.is_empty()
                        || self.tools.iter().any(|p| {
                            p.matches(&keys.key) || keys.id.as_ref().is_some_and(|id| p.matches(id))
                        }))
                    && self
                        .annotations
                        .iter()
                        .all(|(hint, want)| hint.of(tool) == *want)
            }
            Target::Prompt { .. } => {
                self.tools.is_empty()
                    && self.resources.is_empty()
                    && self.annotations.is_empty()
                    && (self.prompts.is_empty()
                        || self.prompts.iter().any(|p| p.matches(&keys.key)))
            }
            Target::Resource { .. } => {
                self.tools.is_empty()
                    && self.prompts.is_empty()
                    && self.annotations.is_empty()
                    && (self.resources.is_empty()
                        || self.resources.iter().any(|p| p.matches(&keys.key)))
            }
        };
        kind_ok
            && (self.namespaces.is_empty()
                || self
                    .namespaces
                    .iter()
                    .any(|p| p.matches(target.namespace())))
    }
}

/// A target's names, made once per decision: `namespace:name` (a tool's
/// or prompt's), a resource's canonical URI ([`uri::canonical`]), and a
/// versioned tool's full id.
struct Keys {
    key: String,
    id: Option<String>,
}

impl Keys {
    fn of(target: &Target<'_>) -> Self {
        match target {
            Target::Tool(tool) => Keys {
                key: format!("{}:{}", tool.id.namespace(), tool.id.name()),
                id: tool.id.version().map(|_| tool.id.to_string()),
            },
            Target::Prompt { namespace, name } => Keys {
                key: format!("{namespace}:{name}"),
                id: None,
            },
            Target::Resource { uri, .. } => Keys {
                key: uri::canonical(uri),
                id: None,
            },
        }
    }
}

/// An MCP tool annotation hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    ReadOnly,
    Destructive,
    Idempotent,
    OpenWorld,
}

impl Hint {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "readOnlyHint" => Hint::ReadOnly,
            "destructiveHint" => Hint::Destructive,
            "idempotentHint" => Hint::Idempotent,
            "openWorldHint" => Hint::OpenWorld,
            _ => return None,
        })
    }

    /// The tool's hint, or the protocol's default for an unset one.
    fn of(self, tool: &Tool) -> bool {
        let a = tool.annotations.as_ref();
        let read_only = a.and_then(|a| a.read_only_hint).unwrap_or(false);
        match self {
            Hint::ReadOnly => read_only,
            Hint::Destructive => !read_only && a.and_then(|a| a.destructive_hint).unwrap_or(true),
            Hint::Idempotent => a.and_then(|a| a.idempotent_hint).unwrap_or(false),
            Hint::OpenWorld => a.and_then(|a| a.open_world_hint).unwrap_or(true),
        }
    }
}

fn is_glob(p: &str) -> bool {
    p.contains(['*', '?'])
}

#[cfg(test)]
mod tests;

//! The pipeline's admission of a call: the [`Policy`] decides for the
//! current caller ([`current_caller`]), then the [`Quotas`] take their
//! share. Also answers "may the current caller see this?" for search,
//! descriptions and the gateway's lists. Decisions to refuse are logged at
//! `info` (target `toolexec::policy`), decisions to allow at `debug`.

use std::sync::Arc;

use crate::error::Error;
use crate::policy::{Decision, Policy, Target};
use crate::quota::{Admission, Quotas};
use crate::telemetry::{Caller, current_caller};
use crate::tool::Tool;

/// The policy and quotas of one executor; empty by default.
#[derive(Debug, Clone, Default)]
pub(crate) struct Gate {
    pub(crate) policy: Option<Arc<Policy>>,
    pub(crate) quotas: Option<Arc<Quotas>>,
}

impl Gate {
    /// Admits a call of `tool` for the current caller: `Denied` or
    /// `Throttled`, else the quotas' hold (none without quotas).
    pub(crate) fn admit(&self, tool: &Tool) -> Result<Option<Admission>, Error> {
        if self.policy.is_none() && self.quotas.is_none() {
            return Ok(None);
        }
        let caller = current_caller();
        if let Some(policy) = &self.policy {
            let target = Target::Tool(tool);
            let decision = policy.decide(caller.as_deref(), &target);
            log(caller.as_deref(), &target, &decision);
            decision.check(&target)?;
        }
        match &self.quotas {
            Some(quotas) => quotas.admit(caller.as_deref(), &tool.id.key()).map(Some),
            None => Ok(None),
        }
    }

    /// `Denied` (logged) unless the current caller may use `target`.
    pub(crate) fn check(&self, target: &Target<'_>) -> Result<(), Error> {
        let Some(policy) = &self.policy else {
            return Ok(());
        };
        let caller = current_caller();
        let decision = policy.decide(caller.as_deref(), target);
        log(caller.as_deref(), target, &decision);
        decision.check(target)
    }

    /// True when the current caller may use `target` (not logged: lists
    /// ask this once per item).
    pub(crate) fn allows(&self, target: &Target<'_>) -> bool {
        match &self.policy {
            Some(policy) => policy.decide(current_caller().as_deref(), target).allowed(),
            None => true,
        }
    }
}

fn log(caller: Option<&Caller>, target: &Target<'_>, decision: &Decision<'_>) {
    let principal = caller.and_then(|c| c.principal.as_deref()).unwrap_or("");
    let kind = caller.map_or("anonymous", |c| c.kind.as_str());
    if decision.allowed() {
        tracing::debug!(
            target: "toolexec::policy",
            principal, kind, target = %target.label(), rule = decision.rule_name(),
            "policy allows"
        );
    } else {
        tracing::info!(
            target: "toolexec::policy",
            principal, kind, target = %target.label(), rule = decision.rule_name(),
            "policy denies"
        );
    }
}

//! Sampling a trace that arrived from elsewhere when its sender's decision
//! is not trusted (`trust_remote_sampling = false`).

use std::hash::BuildHasher;

use opentelemetry::trace::{SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SamplingDecision, SamplingResult, ShouldSample};

/// Samples `ratio` of the traces it is asked about, deciding from a keyed
/// hash of the trace id. The sender chose the id: the SDK's ratio sampler
/// reads the id's own low bits, so a sender could pick ids that are always
/// (or never) sampled. The key is drawn per process.
#[derive(Debug, Clone)]
pub(crate) struct KeyedRatio {
    ratio: f64,
    key: std::collections::hash_map::RandomState,
}

impl KeyedRatio {
    pub(crate) fn new(ratio: f64) -> Self {
        KeyedRatio {
            ratio,
            key: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Whether the trace `trace_id` is sampled.
    pub(crate) fn sampled(&self, trace_id: TraceId) -> bool {
        if self.ratio >= 1.0 {
            return true;
        }
        if self.ratio <= 0.0 {
            return false;
        }
        let hash = self.key.hash_one(trace_id.to_bytes());
        (hash as f64) < self.ratio * u64::MAX as f64
    }
}

impl ShouldSample for KeyedRatio {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[opentelemetry::trace::Link],
    ) -> SamplingResult {
        SamplingResult {
            decision: if self.sampled(trace_id) {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            },
            attributes: Vec::new(),
            trace_state: parent_context
                .map(|cx| cx.span().span_context().trace_state().clone())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry_sdk::trace::Sampler;

    use super::*;

    /// Trace ids whose low 64 bits are zero: the SDK's ratio sampler
    /// samples every one of them, whatever the ratio; the keyed one about
    /// the ratio of them.
    #[test]
    fn a_sender_cannot_choose_the_decision() {
        let ids: Vec<TraceId> = (1..=2000u128)
            .map(|high| TraceId::from(high << 64))
            .collect();
        let sdk = Sampler::TraceIdRatioBased(0.25);
        let sdk_sampled = ids
            .iter()
            .filter(|&&id| {
                sdk.should_sample(None, id, "x", &SpanKind::Internal, &[], &[])
                    .decision
                    == SamplingDecision::RecordAndSample
            })
            .count();
        assert_eq!(
            sdk_sampled,
            ids.len(),
            "the SDK sampler reads the id's low bits"
        );
        let keyed = KeyedRatio::new(0.25);
        let sampled = ids.iter().filter(|&&id| keyed.sampled(id)).count();
        assert!((350..=650).contains(&sampled), "{sampled} of 2000 at 0.25");
        assert!(ids.iter().all(|&id| KeyedRatio::new(1.0).sampled(id)));
        assert!(!ids.iter().any(|&id| KeyedRatio::new(0.0).sampled(id)));
    }
}

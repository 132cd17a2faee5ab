//! Rule about one request that can never fit: larger than the whole device, or the whole host.
//!
//! The field's classic is a sequence length taken from `max_position_embeddings` (one 64 GiB
//! attention buffer), a size read from the wrong config field, a wrong dtype or a missing
//! dimension that broadcasts. No batch size, accumulation or checkpointing helps: the shape is
//! wrong. Saying "halve the batch" there sends the user the wrong way, so this finding is ranked
//! before every other of its severity and the OOM findings point to it instead of advising.

use super::rule::{Diagnose, RuleContext, critical_if};
use crate::finding::{Detail, Evidence, EvidenceKey as K, FindingKind, Severity, TooLargeRequest};
use crate::oom::OomContext;
use oomscope_format::OomKind;

/// `impossible-request`: one allocation asked for more than the device or host has in all.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImpossibleRequest;

/// The memory `oom` could ever have had, and whether the request exceeds it.
pub fn impossible(oom: &OomContext) -> Option<(u64, u64)> {
    let requested = oom.event.requested_bytes?;
    let limit = match oom.kind {
        OomKind::Gpu => oom.event.device_total_bytes?,
        OomKind::Host => oom.host_rss_bytes?.checked_add(oom.host_available_bytes?)?,
    };
    (requested > limit).then_some((requested, limit))
}

impl Diagnose for ImpossibleRequest {
    const KIND: FindingKind = FindingKind::ImpossibleRequest;
    type Diagnosis = TooLargeRequest;

    /// Detection: the first OOM (the fatal one first) whose requested size exceeds the device's
    /// total memory (GPU) or the host's resident plus available memory at that moment (host).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<TooLargeRequest> {
        let ooms = &ctx.analysis.ooms;
        ooms.iter()
            .filter(|o| o.fatal)
            .chain(ooms.iter().filter(|o| !o.fatal))
            .find_map(|oom| {
                let (requested_bytes, limit_bytes) = impossible(oom)?;
                Some(TooLargeRequest {
                    oom: oom.clone(),
                    requested_bytes,
                    limit_bytes,
                })
            })
    }

    /// Critical when the run died of it.
    fn severity(&self, d: &TooLargeRequest) -> Severity {
        critical_if(d.oom.fatal)
    }

    fn evidence(&self, d: &TooLargeRequest) -> Vec<Evidence> {
        let mut evidence = vec![
            Evidence::bytes(K::RequestedBytes, d.requested_bytes as f64),
            Evidence::bytes(K::LimitBytes, d.limit_bytes as f64),
            Evidence::number(K::TimesTheLimit, d.times_the_limit()),
        ];
        evidence.extend(d.oom.event.step.map(|s| Evidence::count(K::Step, s as f64)));
        evidence
    }

    fn detail(d: TooLargeRequest) -> Detail {
        Detail::ImpossibleRequest(d)
    }
}

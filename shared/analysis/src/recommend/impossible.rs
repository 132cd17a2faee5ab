//! Rule about one request that can never fit: larger than the whole device, or the whole host.
//!
//! The field's classic is a sequence length taken from `max_position_embeddings` (one 64 GiB
//! attention buffer), a size read from the wrong config field, a wrong dtype or a missing
//! dimension that broadcasts. No batch size, accumulation or checkpointing helps: the shape is
//! wrong. Saying "halve the batch" there sends the user the wrong way, so this finding is ranked
//! before every other of its severity and the OOM findings point to it instead of advising.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::oom::OomContext;
use oomscope_format::OomKind;
use oomscope_format::units::{format_bytes, format_count};

/// `impossible-request`: one allocation asked for more than the device or host has in all.
#[derive(Debug, Clone, Copy, Default)]
pub struct ImpossibleRequest;

/// What [`ImpossibleRequest`] detected.
#[derive(Debug, Clone, Copy)]
pub struct TooLargeRequest<'a> {
    /// The OOM whose request exceeds everything.
    pub oom: &'a OomContext,
    /// What it asked for.
    pub requested_bytes: u64,
    /// All of the memory it could have had: the device's total, or the host's (resident plus
    /// available when it failed).
    pub limit_bytes: u64,
}

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
    type Diagnosis<'a> = TooLargeRequest<'a>;

    /// Detection: the first OOM (the fatal one first) whose requested size exceeds the device's
    /// total memory (GPU) or the host's resident plus available memory at that moment (host).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let ooms = &ctx.analysis.ooms;
        ooms.iter()
            .filter(|o| o.fatal)
            .chain(ooms.iter().filter(|o| !o.fatal))
            .find_map(|oom| {
                let (requested_bytes, limit_bytes) = impossible(oom)?;
                Some(TooLargeRequest {
                    oom,
                    requested_bytes,
                    limit_bytes,
                })
            })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let (memory, whole) = match d.oom.kind {
            OomKind::Gpu => (
                d.oom
                    .event
                    .device
                    .map_or_else(|| "the GPU".to_owned(), |i| format!("GPU {i}")),
                "total memory",
            ),
            OomKind::Host => ("the host".to_owned(), "memory (resident + available)"),
        };
        let mut explanation = format!(
            "one allocation asked for {} but {memory} has {} of {whole} in all: it cannot fit at \
             any batch size",
            format_bytes(d.requested_bytes),
            format_bytes(d.limit_bytes),
        );
        if let Some(stage) = &d.oom.event.stage {
            explanation.push_str(&format!("; it failed after {stage}"));
            if let Some(step) = d.oom.event.step {
                explanation.push_str(&format!(" of step {}", format_count(step)));
            }
        }
        let times = d.requested_bytes as f64 / d.limit_bytes.max(1) as f64;
        let mut evidence = vec![
            Evidence::bytes("requested_bytes", d.requested_bytes as f64),
            Evidence::bytes("limit_bytes", d.limit_bytes as f64),
            Evidence::number("times_the_limit", times),
        ];
        evidence.extend(d.oom.event.step.map(|s| Evidence::count("step", s as f64)));
        let severity = if d.oom.fatal {
            Severity::Critical
        } else {
            Severity::Warning
        };
        finding(
            self,
            severity,
            format!(
                "One request of {} can never fit ({} {memory}'s memory)",
                format_bytes(d.requested_bytes),
                times_text(times)
            ),
            explanation,
            "this is a shape or configuration bug, not a batch-size problem: check the sizes \
             that reach the failing allocation (a sequence length taken from \
             max_position_embeddings, a size read from the wrong config field, a wrong dtype, a \
             missing dimension that broadcasts)"
                .to_owned(),
            evidence,
        )
    }
}

/// `1.5×`, `12×`, `16384×`.
fn times_text(times: f64) -> String {
    if times < 10.0 {
        format!("{times:.1}×")
    } else {
        format!("{times:.0}×")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recommend::test_support::{evidence, findings_of};
    use oomscope_format::units::GIB;
    use oomscope_testkit::run::Run;

    #[test]
    fn a_request_larger_than_the_gpu_is_a_shape_bug_ranked_first() {
        let trace = Run {
            steps: 5,
            oom_at_step: Some(4),
            oom_requested_bytes: 16 << 40,
            ..Run::default()
        }
        .build();
        let findings = findings_of(&trace);
        let first = &findings[0];
        assert_eq!(first.kind, FindingKind::ImpossibleRequest, "{findings:#?}");
        assert_eq!(first.severity, Severity::Critical);
        assert_eq!(evidence(first, "requested_bytes"), (16u64 << 40) as f64);
        assert_eq!(evidence(first, "limit_bytes"), (80 * GIB) as f64);
        assert_eq!(evidence(first, "step"), 4.0);
        assert!(first.change.contains("not a batch-size problem"));
        // The OOM finding no longer tells the user to change the batch.
        let oom = findings
            .iter()
            .find(|f| f.kind == FindingKind::Oom)
            .unwrap();
        assert!(!oom.change.contains("accumulation"), "{}", oom.change);
        assert!(oom.change.contains("impossible-request"), "{}", oom.change);
    }

    #[test]
    fn a_request_that_could_fit_is_not_impossible() {
        let trace = Run {
            steps: 5,
            oom_at_step: Some(4),
            oom_requested_bytes: 2 * GIB,
            ..Run::default()
        }
        .build();
        let findings = findings_of(&trace);
        assert!(
            findings
                .iter()
                .all(|f| f.kind != FindingKind::ImpossibleRequest),
            "{findings:#?}"
        );
        let oom = findings
            .iter()
            .find(|f| f.kind == FindingKind::Oom)
            .unwrap();
        assert!(oom.change.contains("accumulation"), "{}", oom.change);
    }
}

//! The words of `impossible-request`: one request larger than the whole device or host.

use super::finding_text::FindingText;
use oomscope_analysis::finding::TooLargeRequest;
use oomscope_format::OomKind;
use oomscope_format::units::{format_bytes, format_count};

/// `impossible-request`.
pub(super) fn impossible(d: &TooLargeRequest) -> FindingText {
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
        "one allocation asked for {} but {memory} has {} of {whole} in all: it cannot fit at any \
         batch size",
        format_bytes(d.requested_bytes),
        format_bytes(d.limit_bytes),
    );
    if let Some(stage) = &d.oom.event.stage {
        explanation.push_str(&format!("; it failed after {stage}"));
        if let Some(step) = d.oom.event.step {
            explanation.push_str(&format!(" of step {}", format_count(step)));
        }
    }
    FindingText::new(
        format!(
            "One request of {} can never fit ({} {memory}'s memory)",
            format_bytes(d.requested_bytes),
            times_text(d.times_the_limit())
        ),
        explanation,
        vec![
            "this is a shape or configuration bug, not a batch-size problem: check the sizes that \
             reach the failing allocation (a sequence length taken from \
             max_position_embeddings, a size read from the wrong config field, a wrong dtype, a \
             missing dimension that broadcasts)"
                .to_owned(),
        ],
    )
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
    use super::super::worded::test_support::{evidence, findings_of};
    use oomscope_analysis::finding::{FindingKind, Severity};
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

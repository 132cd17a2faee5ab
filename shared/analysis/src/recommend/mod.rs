//! Findings: what the measurements mean.
//!
//! Numbers alone leave the reader to do the diagnosis. Each [`Rule`] looks at the analysis for
//! one specific pattern (the run died of OOM, activations dominate the peak, the allocator is
//! fragmented, memory leaks per step, ...) and, only when the trace shows it, returns a
//! [`Finding`]: a typed diagnosis with every number its words will quote, how urgent it is, and
//! the evidence a script reads. Thresholds are named constants next to their rule, with the
//! reasoning behind them. Rules never guess: no evidence in the trace, no finding.
//!
//! Each rule is steps (as tokio-console's warnings are): `detect` decides, from the analysis,
//! whether the pattern is there and returns the diagnosis (unit tests assert its numbers); its
//! severity and evidence follow from the diagnosis alone. What a finding says is the words
//! crate's (`oomscope-words`), from the same diagnosis.

mod allocator;
mod copies;
mod cycles;
mod eval;
mod explained;
mod growth;
mod host;
mod impossible;
mod inputs;
mod memory;
mod numerics;
mod ranks;
mod rule;

pub use crate::finding::{Finding, Severity};
pub use rule::{Diagnose, Rule, RuleContext};

pub use allocator::{
    FRAGMENTATION_MIN_GAP_BYTES, FRAGMENTATION_MIN_GAP_FRACTION, Fragmentation,
    OUTSIDE_ALLOCATOR_MIN_BYTES, OutsideAllocatorRule, fragmentation_min_gap_bytes,
};
pub use copies::{COPIES_MIN_SHARE, ModelCopies};
pub use cycles::{CYCLES_MIN_FREED_BYTES, ReferenceCycles};
pub use eval::{
    EVAL_PEAK_MIN_BYTES, EVAL_PEAK_MIN_FRACTION, EVAL_RETAIN_MIN_BYTES,
    EVAL_RETAIN_MIN_FRACTION_OF_JUMP, EVAL_STAIRCASE_MIN_BYTES, EVAL_STAIRCASE_REPEATS, EvalPeak,
    EvalRetainsMemory, eval_autograd,
};
pub use explained::{EXPLAINED_SHARE, MODELS_KEPT_MIN_RISES, PARAMETERS_STILL_SHARE};
pub use growth::{CRITICAL_RUNWAY_FACTOR, Leak, RISING_MIN_SHARE_OF_LEVEL, RISING_MIN_STAIRS};
pub use host::{HOST_AVAILABLE_MIN_FRACTION, HostMemoryPressure, ShmPressure, WorkerPrivateGrowth};
pub use impossible::ImpossibleRequest;
pub use inputs::{INPUT_CAP_SHARE, InputPeakRule};
pub use memory::{
    ACTIVATIONS_MIN_SHARE, ActivationsDominate, BatchSize, NEAR_FULL_FRACTION, OPTIMIZER_MIN_SHARE,
    Oom, OptimizerStateHeavy,
};
pub use numerics::{NonFiniteGradients, NonFiniteTensors, SPORADIC_INF_MAX_FRACTION};
pub use ranks::{FirstRankFailure, NodeHostSpikeRule, RankImbalance};

/// Every rule, in no particular order (findings are sorted afterwards).
pub fn rules() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(Oom),
        Box::new(ActivationsDominate),
        Box::new(Fragmentation),
        Box::new(OptimizerStateHeavy),
        Box::new(ModelCopies),
        Box::new(InputPeakRule),
        Box::new(Leak),
        Box::new(ReferenceCycles),
        Box::new(EvalRetainsMemory),
        Box::new(EvalPeak),
        Box::new(OutsideAllocatorRule),
        Box::new(NonFiniteGradients),
        Box::new(NonFiniteTensors),
        Box::new(HostMemoryPressure),
        Box::new(BatchSize),
        Box::new(ImpossibleRequest),
        Box::new(WorkerPrivateGrowth),
        Box::new(ShmPressure),
        Box::new(RankImbalance),
        Box::new(FirstRankFailure),
        Box::new(NodeHostSpikeRule),
    ]
}

/// Runs every rule; findings most severe first, then by [`crate::finding::FindingKind::rank`], then by id.
pub fn findings(ctx: &RuleContext<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = rules().iter().filter_map(|r| r.check(ctx)).collect();
    crate::sort::sort_by(&mut out, |a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.kind().rank().cmp(&b.kind().rank()))
            .then_with(|| a.kind().id().cmp(b.kind().id()))
    });
    out
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Runs the rules on test traces.

    use super::*;
    use crate::analysis::AnalysisOptions;
    use crate::analyze;
    use oomscope_format::Trace;

    /// The findings of `trace` with default options.
    pub(crate) fn findings_of(trace: &Trace) -> Vec<Finding> {
        analyze(trace, &AnalysisOptions::default()).findings
    }

    /// Runs `f` with the rule context of `trace` (default options): detection tests read a
    /// rule's typed diagnosis through it.
    pub(crate) fn with_context<R>(trace: &Trace, f: impl FnOnce(&RuleContext<'_>) -> R) -> R {
        let options = AnalysisOptions::default();
        let analysis = analyze(trace, &options);
        f(&RuleContext {
            trace,
            analysis: &analysis,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::findings_of;
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn rule_ids_are_unique_and_kebab_case() {
        let ids: Vec<&str> = rules().iter().map(|r| r.kind().id()).collect();
        for (rule, id) in rules().iter().zip(&ids) {
            assert!(
                id.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{id}"
            );
            // `summary --json` writes the kind through serde: the same id.
            assert_eq!(serde_json::to_value(rule.kind()).unwrap(), *id);
        }
        let mut unique = ids.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ids.len());
    }

    #[test]
    fn healthy_run_has_no_findings() {
        let findings = findings_of(&Run::default().build());
        assert!(findings.is_empty(), "{findings:#?}");
    }

    #[test]
    fn findings_are_sorted_most_severe_first_then_by_rank_and_id() {
        let run = Run {
            steps: 100,
            oom_at_step: Some(99),
            leak_bytes_per_step: 40 * MIB,
            fragmentation_bytes: 12 * GIB,
            ..Run::default()
        };
        let findings = findings_of(&run.build());
        assert!(findings.len() >= 3, "{findings:#?}");
        for pair in findings.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                a.severity > b.severity
                    || (a.severity == b.severity
                        && (a.kind().rank(), a.kind().id()) < (b.kind().rank(), b.kind().id()))
            );
        }
        assert_eq!(findings[0].severity, Severity::Critical);
    }

    #[test]
    fn severity_orders_and_serializes_in_snake_case() {
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Critical);
        assert_eq!(Severity::Critical.label(), "critical");
    }
}

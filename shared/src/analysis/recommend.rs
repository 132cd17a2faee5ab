//! Findings: what the measurements mean and what to change.
//!
//! Numbers alone leave the reader to do the diagnosis. Each [`Rule`] looks at the analysis for
//! one specific pattern (the run died of OOM, activations dominate the peak, the allocator is
//! fragmented, memory leaks per step, ...) and, only when the trace shows it, returns a
//! [`Finding`] whose explanation quotes the measured numbers and whose change is concrete enough
//! to try. Thresholds are named constants next to their rule, with the reasoning behind them.
//! Rules never guess: no evidence in the trace, no finding.

mod allocator;
mod growth;
mod host;
mod memory;
mod numerics;

use serde::Serialize;

use crate::analysis::{Analysis, AnalysisOptions};
use crate::model::Trace;

pub use allocator::{
    FRAGMENTATION_MIN_GAP_BYTES, FRAGMENTATION_MIN_GAP_FRACTION, Fragmentation,
    OUTSIDE_ALLOCATOR_MIN_BYTES, OutsideAllocatorRule,
};
pub use growth::{
    CRITICAL_RUNWAY_FACTOR, EVAL_RETAIN_MIN_BYTES, EVAL_RETAIN_MIN_FRACTION_OF_JUMP,
    EvalRetainsMemory, Leak,
};
pub use host::{HOST_AVAILABLE_MIN_FRACTION, HostMemoryPressure};
pub use memory::{
    ACTIVATIONS_MIN_SHARE, ActivationsDominate, BatchSize, NEAR_FULL_FRACTION, OPTIMIZER_MIN_SHARE,
    Oom, OptimizerStateHeavy,
};
pub use numerics::{NonFiniteGradients, NonFiniteTensors, SPORADIC_INF_MAX_FRACTION};

/// How urgent a finding is. Ordered: `Info < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Costs memory or time, or will become a problem.
    Warning,
    /// The run failed or will fail.
    Critical,
}

impl Severity {
    /// `info`, `warning` or `critical`.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// A machine-readable number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// What it is, with its unit (`shortfall_bytes`, `r_squared`, `step`).
    pub label: String,
    /// The value.
    pub value: f64,
}

/// One diagnosis with its numbers and the change to make.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Stable kebab-case id of the rule (`oom`, `leak`, ...).
    pub id: String,
    /// How urgent.
    pub severity: Severity,
    /// One line.
    pub title: String,
    /// What was measured and what it means, quoting the numbers.
    pub explanation: String,
    /// The concrete change to try.
    pub change: String,
    /// The numbers, machine-readable.
    pub evidence: Vec<Evidence>,
}

/// Everything a rule may look at.
#[derive(Debug, Clone, Copy)]
pub struct RuleContext<'a> {
    /// The trace.
    pub trace: &'a Trace,
    /// The analysis (its `findings` are not filled in yet).
    pub analysis: &'a Analysis,
    /// The options the analysis ran with.
    pub options: &'a AnalysisOptions,
}

/// A diagnosis: looks for one pattern and explains it when the trace shows it.
pub trait Rule {
    /// Stable kebab-case id.
    fn id(&self) -> &'static str;
    /// The finding, when the evidence is in the trace.
    fn check(&self, ctx: &RuleContext<'_>) -> Option<Finding>;
}

/// Every rule, in no particular order (findings are sorted afterwards).
pub fn rules() -> Vec<Box<dyn Rule>> {
    vec![
        Box::new(Oom),
        Box::new(ActivationsDominate),
        Box::new(Fragmentation),
        Box::new(OptimizerStateHeavy),
        Box::new(Leak),
        Box::new(EvalRetainsMemory),
        Box::new(OutsideAllocatorRule),
        Box::new(NonFiniteGradients),
        Box::new(NonFiniteTensors),
        Box::new(HostMemoryPressure),
        Box::new(BatchSize),
    ]
}

/// Runs every rule; findings most severe first, then by id.
pub fn findings(ctx: &RuleContext<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = rules().iter().filter_map(|r| r.check(ctx)).collect();
    out.sort_by(|a, b| b.severity.cmp(&a.severity).then_with(|| a.id.cmp(&b.id)));
    out
}

/// Builds a finding; `evidence` pairs a label with its value.
pub(crate) fn finding(
    rule: &dyn Rule,
    severity: Severity,
    title: String,
    explanation: String,
    change: String,
    evidence: &[(&str, f64)],
) -> Finding {
    Finding {
        id: rule.id().to_owned(),
        severity,
        title,
        explanation,
        change,
        evidence: evidence
            .iter()
            .map(|(label, value)| Evidence {
                label: (*label).to_owned(),
                value: *value,
            })
            .collect(),
    }
}

/// What part of the training loop a stage name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoopPart {
    /// The forward pass (activations are being built).
    Forward,
    /// The backward pass (activations are consumed, gradients built).
    Backward,
    /// The optimizer step (state is read and, on the first step, allocated).
    Optimizer,
    /// Anything else: data loading, logging, between steps, or unknown.
    Other,
}

impl LoopPart {
    /// Classifies a stage name by the words in it.
    pub(crate) fn of_stage(name: &str) -> LoopPart {
        let name = name.to_ascii_lowercase();
        if name.contains("backward") {
            LoopPart::Backward
        } else if name.contains("optim") {
            LoopPart::Optimizer
        } else if name.contains("forward") {
            LoopPart::Forward
        } else {
            LoopPart::Other
        }
    }

    /// The part of the loop running between a mark `stage` and the next one, `next`: heading to
    /// `post_X` means X is running; right after `pre_X`, X is running; otherwise unknown.
    pub(crate) fn running(stage: Option<&str>, next: Option<&str>) -> LoopPart {
        let starts_pre = |s: &str| s.to_ascii_lowercase().starts_with("pre");
        if let Some(next) = next
            && !starts_pre(next)
        {
            return LoopPart::of_stage(next);
        }
        match stage {
            Some(stage) if starts_pre(stage) => LoopPart::of_stage(stage),
            _ => LoopPart::Other,
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Runs the rules on test traces.

    use super::*;
    use crate::analysis::analyze;

    /// The findings of `trace` with default options.
    pub(crate) fn findings_of(trace: &Trace) -> Vec<Finding> {
        analyze(trace, &AnalysisOptions::default()).findings
    }

    /// The finding with `id`, if it fired.
    pub(crate) fn find(trace: &Trace, id: &str) -> Option<Finding> {
        findings_of(trace).into_iter().find(|f| f.id == id)
    }

    /// The evidence value labelled `label`.
    pub(crate) fn evidence(finding: &Finding, label: &str) -> f64 {
        finding
            .evidence
            .iter()
            .find(|e| e.label == label)
            .unwrap_or_else(|| panic!("no evidence {label} in {finding:?}"))
            .value
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::findings_of;
    use super::*;
    use crate::analysis::testkit::{GIB, MIB, Run};

    #[test]
    fn rule_ids_are_unique_and_kebab_case() {
        let ids: Vec<&str> = rules().iter().map(|r| r.id()).collect();
        for id in &ids {
            assert!(
                id.chars().all(|c| c.is_ascii_lowercase() || c == '-'),
                "{id}"
            );
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
    fn findings_are_sorted_most_severe_first_then_by_id() {
        let run = Run {
            steps: 100,
            oom_at_step: Some(99),
            leak_bytes_per_step: 40 * MIB,
            reserved_gap_bytes: 12 * GIB,
            ..Run::default()
        };
        let findings = findings_of(&run.build());
        assert!(findings.len() >= 3, "{findings:#?}");
        for pair in findings.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(a.severity > b.severity || (a.severity == b.severity && a.id < b.id));
        }
        assert_eq!(findings[0].severity, Severity::Critical);
    }

    #[test]
    fn severity_orders_and_serializes_in_snake_case() {
        assert!(Severity::Info < Severity::Warning && Severity::Warning < Severity::Critical);
        assert_eq!(Severity::Critical.label(), "critical");
    }

    #[test]
    fn loop_part_of_the_code_between_marks() {
        use LoopPart::*;
        assert_eq!(
            LoopPart::running(Some("pre_forward"), Some("post_forward")),
            Forward
        );
        assert_eq!(
            LoopPart::running(Some("post_forward"), Some("post_backward")),
            Backward
        );
        assert_eq!(
            LoopPart::running(Some("post_backward"), Some("post_optimizer_step")),
            Optimizer
        );
        assert_eq!(
            LoopPart::running(Some("post_optimizer_step"), Some("pre_forward")),
            Other
        );
        assert_eq!(LoopPart::running(Some("pre_forward"), None), Forward);
        assert_eq!(LoopPart::running(Some("post_forward"), None), Other);
        assert_eq!(LoopPart::running(None, None), Other);
    }
}

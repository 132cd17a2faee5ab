//! Findings: what the measurements mean and what to change.
//!
//! Numbers alone leave the reader to do the diagnosis. Each [`Rule`] looks at the analysis for
//! one specific pattern (the run died of OOM, activations dominate the peak, the allocator is
//! fragmented, memory leaks per step, ...) and, only when the trace shows it, returns a
//! [`Finding`] whose explanation quotes the measured numbers and whose change is concrete enough
//! to try. Thresholds are named constants next to their rule, with the reasoning behind them.
//! Rules never guess: no evidence in the trace, no finding.
//!
//! Each rule is two steps (as tokio-console's warnings are): `detect` decides, from the
//! analysis, whether the pattern is there and returns a typed diagnosis with the numbers
//! (unit tests assert them); `explain` turns a diagnosis into the finding's words and evidence,
//! the one place a rule's wording lives (the whole summary text of a set of traces is
//! snapshot-tested in `tests/summary_text.rs`, so a wording change is a reviewed diff).

mod allocator;
mod copies;
mod cycles;
mod eval;
mod growth;
mod host;
mod impossible;
mod inputs;
mod memory;
mod numerics;
mod ranks;

use serde::{Deserialize, Serialize};

use crate::{Analysis, AnalysisOptions};
use oomscope_format::Trace;

pub use allocator::{
    EXPANDABLE_SEGMENTS_CHANGE, FRAGMENTATION_MIN_GAP_BYTES, FRAGMENTATION_MIN_GAP_FRACTION,
    Fragmentation, OUTSIDE_ALLOCATOR_MIN_BYTES, OutsideAllocatorRule,
};
pub use copies::{COPIES_MIN_SHARE, ModelCopies};
pub use cycles::{CYCLES_MIN_FREED_BYTES, ReferenceCycles};
pub use eval::{
    EVAL_PEAK_MIN_BYTES, EVAL_PEAK_MIN_FRACTION, EVAL_RETAIN_MIN_BYTES,
    EVAL_RETAIN_MIN_FRACTION_OF_JUMP, EvalPeak, EvalRetainsMemory, eval_autograd,
};
pub use growth::{CRITICAL_RUNWAY_FACTOR, Leak};
pub use host::{HOST_AVAILABLE_MIN_FRACTION, HostMemoryPressure, WorkerPrivateGrowth};
pub use impossible::{ImpossibleRequest, impossible};
pub use inputs::{INPUT_CAP_SHARE, InputPeakRule};
pub use memory::{
    ACTIVATIONS_MIN_SHARE, ActivationsDominate, BatchSize, NEAR_FULL_FRACTION, OPTIMIZER_MIN_SHARE,
    Oom, OptimizerStateHeavy,
};
pub use numerics::{NonFiniteGradients, NonFiniteTensors, SPORADIC_INF_MAX_FRACTION};
pub use ranks::{FirstRankFailure, NodeHostSpikeRule, RankImbalance};

/// How urgent a finding is. Ordered: `Info < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

    /// The severity [`Severity::label`] names.
    pub fn from_label(label: &str) -> Option<Severity> {
        [Severity::Info, Severity::Warning, Severity::Critical]
            .into_iter()
            .find(|s| s.label() == label)
    }
}

/// What a finding is about: one kind per rule. Its id (`oom`, `leak`, …, kebab-case) is what
/// `collector summary --json` writes and the text shows after a finding's title.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// The run died of an out-of-memory error.
    Oom,
    /// Activations dominate the peak.
    ActivationsDominate,
    /// The caching allocator holds much more than the tensors use.
    Fragmentation,
    /// The optimizer's state is a large share of the model's memory.
    OptimizerStateHeavy,
    /// Models that are not trained (an EMA copy, a frozen encoder) hold a large share.
    ModelCopies,
    /// The peak step had a much larger input than a median step, and memory follows the input.
    InputPeak,
    /// Memory grows step after step.
    Leak,
    /// Reference cycles hold memory until the garbage collector runs.
    ReferenceCycles,
    /// Evaluation leaves memory behind.
    EvalRetainsMemory,
    /// Evaluation needs more memory than training.
    EvalPeak,
    /// The process holds device memory outside the caching allocator.
    OutsideAllocator,
    /// Gradients turned NaN or infinite.
    NonFiniteGradients,
    /// Recorded tensors hold NaN or infinite elements.
    NonFiniteTensors,
    /// The host ran short of memory.
    HostMemoryPressure,
    /// What batch size fits.
    BatchSize,
    /// One request larger than the whole device or host: a shape or configuration bug.
    ImpossibleRequest,
    /// The program's workers copy their parent's memory page by page (copy-on-write).
    WorkerPrivateGrowth,
    /// One rank holds much more than the others at some stage.
    RankImbalance,
    /// A rank failed first; the others followed.
    FirstRankFailure,
    /// A node's host memory spiked far above its level in the loop (every rank loading or
    /// saving at once).
    NodeHostSpike,
}

impl FindingKind {
    /// The stable kebab-case id.
    pub fn id(self) -> &'static str {
        match self {
            FindingKind::Oom => "oom",
            FindingKind::ActivationsDominate => "activations-dominate",
            FindingKind::Fragmentation => "fragmentation",
            FindingKind::OptimizerStateHeavy => "optimizer-state-heavy",
            FindingKind::ModelCopies => "model-copies",
            FindingKind::InputPeak => "input-peak",
            FindingKind::Leak => "leak",
            FindingKind::ReferenceCycles => "reference-cycles",
            FindingKind::EvalRetainsMemory => "eval-retains-memory",
            FindingKind::EvalPeak => "eval-peak",
            FindingKind::OutsideAllocator => "outside-allocator",
            FindingKind::NonFiniteGradients => "non-finite-gradients",
            FindingKind::NonFiniteTensors => "non-finite-tensors",
            FindingKind::HostMemoryPressure => "host-memory-pressure",
            FindingKind::BatchSize => "batch-size",
            FindingKind::ImpossibleRequest => "impossible-request",
            FindingKind::WorkerPrivateGrowth => "worker-private-growth",
            FindingKind::RankImbalance => "rank-imbalance",
            FindingKind::FirstRankFailure => "first-rank-failure",
            FindingKind::NodeHostSpike => "node-host-spike",
        }
    }

    /// A few words naming what was found, for sentences such as "leak gone" (a comparison's
    /// headline).
    pub fn noun(self) -> &'static str {
        match self {
            FindingKind::Oom => "out-of-memory error",
            FindingKind::ActivationsDominate => "activation-heavy peak",
            FindingKind::Fragmentation => "fragmentation",
            FindingKind::OptimizerStateHeavy => "heavy optimizer state",
            FindingKind::ModelCopies => "untrained model copies",
            FindingKind::InputPeak => "input-driven peak",
            FindingKind::Leak => "leak",
            FindingKind::ReferenceCycles => "memory held by reference cycles",
            FindingKind::EvalRetainsMemory => "memory kept by eval",
            FindingKind::EvalPeak => "eval peak above training",
            FindingKind::OutsideAllocator => "memory outside the allocator",
            FindingKind::NonFiniteGradients => "non-finite gradients",
            FindingKind::NonFiniteTensors => "non-finite tensors",
            FindingKind::HostMemoryPressure => "host memory pressure",
            FindingKind::BatchSize => "batch-size estimate",
            FindingKind::ImpossibleRequest => "impossible request",
            FindingKind::WorkerPrivateGrowth => "workers' copy-on-write growth",
            FindingKind::RankImbalance => "rank imbalance",
            FindingKind::FirstRankFailure => "first-rank failure",
            FindingKind::NodeHostSpike => "node host-memory spike",
        }
    }

    /// Order among findings of one severity: lower first. A request that can never fit is the
    /// cause whatever else the run shows, so it leads; the rest go by id.
    pub fn rank(self) -> u8 {
        match self {
            FindingKind::ImpossibleRequest => 0,
            // Which rank failed first frames every other finding of a failed job.
            FindingKind::FirstRankFailure => 1,
            // The step and the input that set the peak come before what the peak is made of
            // (on the H200 the input-driven peak read second, after "Activations are 99%").
            FindingKind::InputPeak => 2,
            _ => 3,
        }
    }
}

/// The unit of an evidence value, so every layer formats it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bytes (negative for a shrink).
    Bytes,
    /// A count of things (steps, records, elements, a batch size, a step number).
    Count,
    /// A share of a whole, 0–1.
    Share,
    /// A duration in microseconds.
    Micros,
    /// A plain number (a fit's R²).
    Number,
}

impl Unit {
    /// `bytes`, `count`, `share`, `micros`, `number` (as serialised).
    pub fn label(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Count => "count",
            Unit::Share => "share",
            Unit::Micros => "micros",
            Unit::Number => "number",
        }
    }
}

/// A machine-readable number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What it is (`shortfall_bytes`, `r_squared`, `step`).
    pub label: String,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: Unit,
}

impl Evidence {
    /// Bytes.
    pub fn bytes(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Bytes)
    }

    /// A count.
    pub fn count(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Count)
    }

    /// A share of a whole (0–1).
    pub fn share(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Share)
    }

    /// A duration in microseconds.
    pub fn micros(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Micros)
    }

    /// A plain number.
    pub fn number(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Number)
    }

    fn new(label: &str, value: f64, unit: Unit) -> Evidence {
        Evidence {
            label: label.to_owned(),
            value,
            unit,
        }
    }

    /// The value for a reader: bytes as `1.5 GiB`, durations as `3m 20s`, shares as `37.5%`.
    pub fn text(&self) -> String {
        match self.unit {
            Unit::Bytes => oomscope_format::units::format_bytes_f64(self.value),
            Unit::Micros => oomscope_format::units::format_duration_us(self.value.max(0.0) as u64),
            Unit::Share => format!("{:.1}%", self.value * 100.0),
            Unit::Count if self.value.fract() == 0.0 && self.value.abs() < 1e15 => {
                format!("{:.0}", self.value)
            }
            Unit::Count | Unit::Number => format!("{:.3}", self.value),
        }
    }
}

/// One diagnosis with its numbers and the change to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What it is about (serialised as its kebab-case id, e.g. `"id": "oom"`).
    #[serde(rename = "id")]
    pub kind: FindingKind,
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

/// A diagnosis: looks for one pattern and explains it when the trace shows it. Every rule is a
/// [`Diagnose`]; this object-safe face lets [`rules`] list them together.
pub trait Rule {
    /// What its findings are about.
    fn kind(&self) -> FindingKind;
    /// The finding, when the evidence is in the trace.
    fn check(&self, ctx: &RuleContext<'_>) -> Option<Finding>;
}

/// A rule in two steps: detection decides and measures, explanation words.
pub trait Diagnose {
    /// What its findings are about.
    const KIND: FindingKind;
    /// What detection found, with the numbers (tested as numbers).
    type Diagnosis<'a>;
    /// Detection: the diagnosis when the pattern is in the analysis; `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>>;
    /// Wording: the finding's title, explanation, change and evidence for a diagnosis (the one
    /// place the rule's words live).
    fn explain(&self, diagnosis: &Self::Diagnosis<'_>) -> Finding;
}

impl<T: Diagnose> Rule for T {
    fn kind(&self) -> FindingKind {
        T::KIND
    }

    fn check(&self, ctx: &RuleContext<'_>) -> Option<Finding> {
        self.detect(ctx).map(|d| self.explain(&d))
    }
}

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
        Box::new(RankImbalance),
        Box::new(FirstRankFailure),
        Box::new(NodeHostSpikeRule),
    ]
}

/// Runs every rule; findings most severe first, then by [`FindingKind::rank`], then by id.
pub fn findings(ctx: &RuleContext<'_>) -> Vec<Finding> {
    let mut out: Vec<Finding> = rules().iter().filter_map(|r| r.check(ctx)).collect();
    out.sort_by(|a, b| {
        b.severity
            .cmp(&a.severity)
            .then_with(|| a.kind.rank().cmp(&b.kind.rank()))
            .then_with(|| a.kind.id().cmp(b.kind.id()))
    });
    out
}

/// Builds a finding.
pub(crate) fn finding(
    rule: &dyn Rule,
    severity: Severity,
    title: String,
    explanation: String,
    change: String,
    evidence: Vec<Evidence>,
) -> Finding {
    Finding {
        kind: rule.kind(),
        severity,
        title,
        explanation,
        change,
        evidence,
    }
}

/// What part of the training loop a stage name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopPart {
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
    pub fn of_stage(name: &str) -> LoopPart {
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
    pub fn running(stage: Option<&str>, next: Option<&str>) -> LoopPart {
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
    use crate::analyze;

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
            options: &options,
        })
    }

    /// The finding of `kind`, if it fired.
    pub(crate) fn find(trace: &Trace, kind: FindingKind) -> Option<Finding> {
        findings_of(trace).into_iter().find(|f| f.kind == kind)
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
                        && (a.kind.rank(), a.kind.id()) < (b.kind.rank(), b.kind.id()))
            );
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

#[cfg(test)]
mod evidence_tests {
    use super::Evidence;

    #[test]
    fn evidence_is_written_in_its_unit() {
        assert_eq!(
            Evidence::bytes("x", 1.5 * 1024.0 * 1024.0 * 1024.0).text(),
            "1.50 GiB"
        );
        assert_eq!(Evidence::share("x", 0.375).text(), "37.5%");
        assert_eq!(Evidence::count("x", 12.0).text(), "12");
        assert_eq!(Evidence::number("x", 0.98765).text(), "0.988");
        assert_eq!(Evidence::micros("x", 2_500_000.0).text(), "2.50 s");
    }
}

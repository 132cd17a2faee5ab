//! A finding's words looked up by its diagnosis ([`text`]), and a finding as `summary --json`
//! writes it and the page shows it ([`Worded`]).

use oomscope_analysis::finding::{Detail, Evidence, Finding, FindingKind, Severity};
use oomscope_analysis::snapshot::analysis::SnapshotDetail;
use serde::Serialize;

use super::finding_text::FindingText;
use super::{
    allocator, copies, cycles, eval, growth, host, impossible, inputs, memory, numerics, ranks,
    snapshot,
};

/// The words of a trace's finding.
pub fn text(f: &Finding) -> FindingText {
    match &f.detail {
        Detail::Oom(d) => memory::oom(d),
        Detail::ActivationsDominate(d) => memory::activations(d),
        Detail::Fragmentation(d) => allocator::fragmentation(d),
        Detail::OptimizerStateHeavy(d) => memory::optimizer(d),
        Detail::ModelCopies(d) => copies::model_copies(d),
        Detail::InputPeak(d) => inputs::input_peak(d),
        Detail::Leak(d) => growth::leak(d),
        Detail::ReferenceCycles(d) => cycles::reference_cycles(d),
        Detail::EvalRetainsMemory(d) => eval::eval_retains(d),
        Detail::EvalPeak(d) => eval::eval_peak(d),
        Detail::OutsideAllocator(d) => allocator::outside(d),
        Detail::NonFiniteGradients(d) => numerics::gradients(d),
        Detail::NonFiniteTensors(d) => numerics::tensors(d),
        Detail::HostMemoryPressure(d) => host::host_pressure(d),
        Detail::BatchSize(d) => memory::batch_size(d),
        Detail::ImpossibleRequest(d) => impossible::impossible(d),
        Detail::WorkerPrivateGrowth(d) => host::workers(d),
        Detail::ShmPressure(d) => host::shm(d),
        Detail::RankImbalance(d) => ranks::imbalance(d),
        Detail::FirstRankFailure(d) => ranks::first_failure(d),
        Detail::NodeHostSpike(d) => ranks::node_spike(d),
    }
}

/// The words of a memory snapshot's finding.
pub fn snapshot_text(f: &Finding<SnapshotDetail>) -> FindingText {
    snapshot::text(&f.detail)
}

/// A finding as `summary --json` writes it and the page shows it: its id, severity, words and
/// numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Worded {
    /// What it is about (serialised as its kebab-case id, e.g. `"id": "oom"`).
    #[serde(rename = "id")]
    pub kind: FindingKind,
    /// How urgent.
    pub severity: Severity,
    /// One line.
    pub title: String,
    /// What was measured and what it means, quoting the numbers.
    pub explanation: String,
    /// The changes to try, in one line (`changes` joined by "; ").
    pub change: String,
    /// The changes to try, the first first.
    pub changes: Vec<String>,
    /// The numbers, machine-readable.
    pub evidence: Vec<Evidence>,
}

impl Worded {
    fn of(kind: FindingKind, severity: Severity, evidence: &[Evidence], t: FindingText) -> Worded {
        Worded {
            kind,
            severity,
            change: t.change(),
            title: t.title,
            explanation: t.explanation,
            changes: t.changes,
            evidence: evidence.to_vec(),
        }
    }
}

/// A trace's finding in words.
pub fn worded(f: &Finding) -> Worded {
    Worded::of(f.kind(), f.severity, &f.evidence, text(f))
}

/// A memory snapshot's finding in words.
pub fn worded_snapshot(f: &Finding<SnapshotDetail>) -> Worded {
    Worded::of(f.kind(), f.severity, &f.evidence, snapshot_text(f))
}

/// An evidence value for a reader: bytes as `1.5 GiB`, durations as `3m 20s`, shares as
/// `37.5%`, counts whole, other numbers to three places.
pub fn evidence_text(e: &Evidence) -> String {
    use oomscope_analysis::finding::Unit;
    use oomscope_format::units::{format_bytes_f64, format_duration_us};
    match e.unit {
        Unit::Bytes => format_bytes_f64(e.value),
        Unit::Micros => format_duration_us(e.value.max(0.0) as u64),
        Unit::Share => format!("{:.1}%", e.value * 100.0),
        Unit::Count if e.value.fract() == 0.0 && e.value.abs() < 1e15 => {
            format!("{:.0}", e.value)
        }
        Unit::Count | Unit::Number => format!("{:.3}", e.value),
    }
}

#[cfg(test)]
mod evidence_tests {
    use super::evidence_text;
    use oomscope_analysis::finding::{Evidence, EvidenceKey as K};

    #[test]
    fn evidence_is_written_in_its_unit() {
        let text = |e: Evidence| evidence_text(&e);
        assert_eq!(
            text(Evidence::bytes(K::Bytes, 1.5 * 1024.0 * 1024.0 * 1024.0)),
            "1.50 GiB"
        );
        assert_eq!(text(Evidence::share(K::Margin, 0.375)), "37.5%");
        assert_eq!(text(Evidence::count(K::Step, 12.0)), "12");
        assert_eq!(text(Evidence::number(K::RSquared, 0.98765)), "0.988");
        assert_eq!(text(Evidence::micros(K::TUs, 2_500_000.0)), "2.50 s");
    }
}

/// A finding's words read off the finding itself (`f.title()`), for code that shows one finding
/// at a time.
pub trait FindingWords {
    /// Its title.
    fn title(&self) -> String;
    /// What was measured and what it means.
    fn explanation(&self) -> String;
    /// The changes in one line.
    fn change(&self) -> String;
}

impl FindingWords for Finding {
    fn title(&self) -> String {
        text(self).title
    }

    fn explanation(&self) -> String {
        text(self).explanation
    }

    fn change(&self) -> String {
        text(self).change()
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Runs the analysis on test traces and reads its findings in words.

    use super::{Worded, worded};
    use oomscope_analysis::finding::FindingKind;
    use oomscope_analysis::{AnalysisOptions, analyze};
    use oomscope_format::Trace;

    /// The findings of `trace` with default options, in words.
    pub(crate) fn findings_of(trace: &Trace) -> Vec<Worded> {
        analyze(trace, &AnalysisOptions::default())
            .findings
            .iter()
            .map(worded)
            .collect()
    }

    /// The finding of `kind`, if it fired.
    pub(crate) fn find(trace: &Trace, kind: FindingKind) -> Option<Worded> {
        findings_of(trace).into_iter().find(|f| f.kind == kind)
    }

    /// The evidence value labelled `label`.
    pub(crate) fn evidence(finding: &Worded, label: &str) -> f64 {
        finding
            .evidence
            .iter()
            .find(|e| e.key.label() == label)
            .unwrap_or_else(|| panic!("no evidence {label} in {finding:?}"))
            .value
    }
}

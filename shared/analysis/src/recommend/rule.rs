//! What a rule is: a [`Diagnose`] looks at the [`RuleContext`] (the trace and its analysis) for
//! one pattern and, when the trace shows it, measures it into a typed diagnosis, decides how
//! urgent it is and which numbers back it. The words of a finding are the words crate's.

use crate::analysis::Analysis;
use crate::finding::{Detail, Evidence, Finding, FindingKind, Severity};
use oomscope_format::Trace;

/// Everything a rule may look at.
#[derive(Debug, Clone, Copy)]
pub struct RuleContext<'a> {
    /// The trace.
    pub trace: &'a Trace,
    /// The analysis (its `findings` are not filled in yet).
    pub analysis: &'a Analysis,
}

/// A diagnosis: looks for one pattern and makes a finding when the trace shows it. Every rule is
/// a [`Diagnose`]; this object-safe face lets [`super::rules`] list them together.
pub trait Rule {
    /// What its findings are about (the tests list the rules' kinds).
    #[cfg(test)]
    fn kind(&self) -> FindingKind;
    /// The finding, when the evidence is in the trace.
    fn check(&self, ctx: &RuleContext<'_>) -> Option<Finding>;
}

/// A rule in steps: detection measures (a typed diagnosis, tested as numbers), then how urgent
/// it is and the numbers a script reads are decided from that diagnosis alone.
pub trait Diagnose {
    /// What its findings are about.
    const KIND: FindingKind;
    /// What detection found, with the numbers.
    type Diagnosis;
    /// Detection: the diagnosis when the pattern is in the analysis; `None` otherwise.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<Self::Diagnosis>;
    /// How urgent the diagnosis is.
    fn severity(&self, d: &Self::Diagnosis) -> Severity;
    /// The numbers behind it, machine-readable.
    fn evidence(&self, d: &Self::Diagnosis) -> Vec<Evidence>;
    /// The diagnosis as a finding's detail.
    fn detail(d: Self::Diagnosis) -> Detail;
}

impl<T: Diagnose> Rule for T {
    #[cfg(test)]
    fn kind(&self) -> FindingKind {
        T::KIND
    }

    fn check(&self, ctx: &RuleContext<'_>) -> Option<Finding> {
        let d = self.detect(ctx)?;
        let finding = Finding {
            severity: self.severity(&d),
            evidence: self.evidence(&d),
            detail: T::detail(d),
        };
        // A rule's diagnosis is of its own kind (the kind is the detail's variant).
        debug_assert_eq!(finding.kind(), T::KIND);
        Some(finding)
    }
}

/// `Warning` when `pressed`, else `Info`: the severity of a finding that matters only when
/// memory is short.
pub(crate) fn warning_if(pressed: bool) -> Severity {
    if pressed {
        Severity::Warning
    } else {
        Severity::Info
    }
}

/// `Critical` when `critical`, else `Warning`.
pub(crate) fn critical_if(critical: bool) -> Severity {
    if critical {
        Severity::Critical
    } else {
        Severity::Warning
    }
}

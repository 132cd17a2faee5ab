//! What a rule is: a [`Diagnose`] looks at the [`RuleContext`] (the trace and its analysis) for
//! one pattern; detection measures, explanation words. Beside them, what rules share: the
//! [`finding`] they build and the [`LoopPart`] a stage belongs to.

use crate::analysis::{Analysis, AnalysisOptions};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use oomscope_format::Trace;

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

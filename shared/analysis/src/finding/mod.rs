//! A finding, as every layer reads it: what it is about and how urgent ([`FindingKind`],
//! [`Severity`]), the numbers behind it ([`Evidence`], each keyed by an [`EvidenceKey`]), and
//! what the rule found ([`Detail`], a typed diagnosis per rule).
//!
//! Only typed values: a finding has no sentence. The rules (`recommend/`) make findings, the
//! analyses that carry them hold them, and the words crate (`oomscope-words`) says them; this
//! folder, the vocabulary they share, imports none of them.

mod diagnosis;
mod evidence;
mod kind;

pub use diagnosis::*;
pub use evidence::{Evidence, EvidenceKey, Unit};
pub use kind::{FindingKind, Severity};

/// What a finding's diagnosis is about: [`Detail`] for a trace's rules, a snapshot's own
/// details for a memory snapshot's.
pub trait Diagnosed {
    /// The kind of finding it makes.
    fn kind(&self) -> FindingKind;
}

impl Diagnosed for Detail {
    fn kind(&self) -> FindingKind {
        Detail::kind(self)
    }
}

/// One diagnosis: how urgent, the numbers behind it, and what was found (its kind follows from
/// what was found).
#[derive(Debug, Clone, PartialEq)]
pub struct Finding<D = Detail> {
    /// How urgent.
    pub severity: Severity,
    /// The numbers, machine-readable.
    pub evidence: Vec<Evidence>,
    /// What was found, with every number its words quote.
    pub detail: D,
}

impl<D: Diagnosed> Finding<D> {
    /// What it is about.
    pub fn kind(&self) -> FindingKind {
        self.detail.kind()
    }

    /// The evidence under `key`, when there is one.
    pub fn evidence(&self, key: EvidenceKey) -> Option<f64> {
        self.evidence.iter().find(|e| e.key == key).map(|e| e.value)
    }
}

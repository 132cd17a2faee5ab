//! The words of every finding: its title, what was measured and what it means, and the changes
//! to make, from the typed diagnosis alone (`oomscope_analysis::finding::Detail`). One module
//! per family of rules, as the analysis's `recommend/` has them; a finding's words live nowhere
//! else.

mod allocator;
mod copies;
mod cycles;
mod eval;
mod finding_text;
mod growth;
mod host;
mod impossible;
mod inputs;
mod memory;
mod numerics;
mod ranks;
pub(crate) mod run_up;
mod snapshot;
mod worded;

pub use finding_text::FindingText;
pub use worded::{
    FindingWords, Worded, evidence_text, snapshot_text, text, worded, worded_snapshot,
};

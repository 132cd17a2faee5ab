//! The words above the analysis: the terminal summary, a job's and a comparison's text, the
//! sentences a trace opens with, the report's verdict, and a snapshot's summary. Everything here
//! reads an [`crate::Analysis`] (or a snapshot's) and formats it; nothing computes a number the
//! analysis has not, and no analysis module imports this one (`tests/layers.rs` holds the rule).

pub mod breakdown;
pub mod compare;
pub mod estimate;
pub mod headline;
pub mod job;
pub mod ranks;
pub mod snapshot;
pub mod stage_table;
pub mod summary;
pub mod verdict;
pub mod wrap;

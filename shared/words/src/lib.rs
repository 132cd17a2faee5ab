//! # oomscope-words
//!
//! Every sentence a user reads, made from the analysis's typed values: a finding's title,
//! explanation and changes ([`findings`]), the terminal summary ([`summary`]), the report's
//! verdict ([`verdict`]), the live view's line and alerts ([`live`]), a comparison's, a job's,
//! an estimate's and a snapshot's text, and the words `summary --json` carries ([`json`]).
//!
//! It depends on `oomscope-analysis` and the analysis never on it (the compiler checks it: the
//! manifests hold the arrow), so a wording change rebuilds this crate, not the analysis; and no
//! other crate makes a sentence of the analysis's (`tests/layers.rs`).

pub mod breakdown;
pub mod compare;
pub mod estimate;
pub mod findings;
pub mod headline;
pub mod job;
pub mod json;
pub mod live;
pub mod phrases;
pub mod ranks;
pub mod snapshot;
pub mod stage_table;
pub mod summary;
pub mod symptom;
pub mod verdict;
pub mod wrap;

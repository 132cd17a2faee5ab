//! # oomscope-report
//!
//! What the collector and the viewer make from a trace to hand on, so that both make the same
//! bytes: how a report page carries its traces and snapshots ([`page`]: packed, read back), a
//! trace re-encoded and thinned to fit a report ([`reduce`]), and the exports to other tools
//! ([`export`]: a trace as CSV and Chrome/Perfetto JSON; [`snapshot_export`]: a memory
//! snapshot's timeline the same two ways).
//!
//! It reads traces and the analysis (a thinned trace keeps the rows the analysis reads) and makes
//! no sentence: the words are `oomscope-words`'.

pub mod export;
pub mod page;
pub mod reduce;
pub mod snapshot_export;

//! # oomscope-analysis
//!
//! Everything oomscope computes from a trace or a memory snapshot, in one call, as typed facts:
//! the numbers, the findings and the evidence behind them. It makes no sentence: the words are
//! `oomscope-words'`, from these values.
//!
//! [`analyze`] is the single entry point the terminal summary and the viewer share, so they can
//! never disagree. It evaluates every memory metric at every stage mark once and hands that to
//! each analysis; each module answers one question (where is the peak, which stage costs what, is
//! there a leak, what did eval keep, what was going on at the OOM) and the `recommend` rules turn
//! the answers into findings: a typed diagnosis each ([`finding::Detail`]).
//!
//! Every output type is `Serialize`: field names are the JSON contract (snake_case, units in the
//! names), string ids are resolved, and outputs never refer back into the trace.

mod analysis;
mod analyze;
mod batch_fit;
mod clocks;
mod column_scan;
mod fit;
mod fit_marks;
mod fold;
mod host;
mod inputs;
mod leaks;
mod mark_steps;
mod marks;
mod metrics;
mod node;
mod oom;
mod overhead;
mod peaks;
mod phases;
mod prepared;
mod pressure;
mod rank_facts;
mod rank_views;
mod ranks;
mod recommend;
mod run_up;
mod shm;
mod sort;
mod spotlight;
mod stage_breakdown;
mod stages;
mod trend;
mod workers;

// The facade: what the other crates read.
pub mod compare;
pub mod estimate;
pub mod facts;
pub mod finding;
pub mod job;
pub mod live;
pub mod oom_text;
pub mod snapshot;
pub mod symptom;
pub mod thresholds;

pub use analysis::{
    Analysis, AnalysisOptions, CounterPeak, DroppedSummary, ExitSummary, GpuSummary, MarksSampled,
    Overview,
};
pub use analyze::{analyze, analyze_prepared, rank_own};
pub use prepared::Prepared;
pub use sort::sort_by;

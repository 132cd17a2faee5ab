//! # oomscope-analysis
//!
//! Everything oomscope computes from a trace, in one call, and the words above it.
//!
//! [`analyze`] is the single entry point the terminal summary and the viewer share, so they can
//! never disagree. It evaluates every memory metric at every stage mark once ([`MarkValues`]) and
//! hands that to each analysis; each submodule answers one question (where is the peak, which
//! stage costs what, is there a leak, what did eval keep, what was going on at the OOM) and the
//! [`recommend`] rules turn the answers into findings that quote the numbers.
//!
//! Every output type is `Serialize`: field names are the JSON contract (snake_case, units in the
//! names), string ids are resolved, and outputs never refer back into the trace.

mod analysis;
mod analyze;
pub mod batch_fit;
pub mod clocks;
pub mod column_scan;
pub mod compare;
pub mod estimate;
pub mod fit;
pub mod fit_marks;
pub mod host;
pub mod inputs;
pub mod job;
pub mod leaks;
pub mod live;
pub mod marks;
pub mod metrics;
pub mod node;
pub mod oom;
pub mod oom_text;
pub mod overhead;
pub mod peaks;
pub mod phases;
pub mod prepared;
pub mod pressure;
pub mod rank_views;
pub mod ranks;
pub mod recommend;
pub mod run_up;
pub mod series;
pub mod shm;
pub mod sort;
pub mod stage_breakdown;
pub mod stages;
pub mod trend;
pub mod workers;

pub mod finding;

pub mod export;
pub mod reduce;
pub mod report_page;
pub mod snapshot;

pub mod words;

pub mod render;

pub use analysis::{
    Analysis, AnalysisOptions, CounterPeak, DroppedSummary, ExitSummary, GpuSummary, MarksSampled,
    Overview,
};
pub use analyze::{analyze, analyze_prepared, rank_own};
pub use prepared::Prepared;

//! The typed facts an [`crate::Analysis`] holds, named for the crates that read them (the words,
//! the report, the collector, the viewer), and the few computations over a trace the views make
//! themselves (a chart's peaks, a stage's rows, a clock's positions). One list, so that what the
//! analysis shows outside is what is written here: its modules are its own.

pub use crate::batch_fit::{BatchFit, BatchFitMethod, TrialFit, fit_trials};
pub use crate::clocks::{Clock, clock_rows};
pub use crate::host::{HostMemory, host_memory};
pub use crate::inputs::InputPeak;
pub use crate::leaks::{
    FullProjection, GrowthFit, LeakEvidence, LeakVerdict, LimitBasis, NotALeak, limit_of,
};
pub use crate::marks::{StageAt, is_train, mark_at_or_before};
pub use crate::metrics::{
    MetricKey, counter_has_data, counter_with_data, host_in_use, primary_metric,
};
pub use crate::node::{NodeHostSpike, SpikeWhen};
pub use crate::oom::{OomContext, distinct_ooms};
pub use crate::peaks::{
    ActivationsBasis, OutsideMarks, Peak, breakdown_peak, measured, memory_peak,
};
pub use crate::rank_facts::{FirstFailure, RankFate, RankOom, StageImbalance};
pub use crate::rank_views::ranks_of;
pub use crate::ranks::{CurveScale, RankAnalysis, RankCurve, RankSummary, summarize};
pub use crate::recommend::eval_autograd;
pub use crate::run_up::RunUp;
pub use crate::spotlight::{Spotlight, slow_growth, spotlight};
pub use crate::stages::{Growth, StageTable, StepRow, stage_names, step_rows};
pub use crate::trend::BUCKETS;

/// The sample rows the analysis reads one by one (the over-time trends' floors, each repeat's
/// floor and peak), which a thinned copy of the trace keeps so that it reads the same.
pub fn rows_read(trace: &oomscope_format::Trace) -> Vec<usize> {
    let mut rows = crate::trend::rows_read(trace);
    rows.extend(crate::symptom::rows_read(trace));
    rows
}

//! The report's views, one per file: the verdict strip it opens with, overview, findings, OOM details and
//! what was alive at an OOM, ranks side by side, stage and step tables, memory per step, growth and leak fits, the
//! allocator, evals, breakdown at the peak, gradient and tensor statistics, batch-size trials, comparison, exports.
//!
//! Every recorded string reaches the page as a text node or a DOM property, never as markup:
//! traces come attached to tickets and are untrusted. Exact byte values ride along in `data-`
//! attributes next to the formatted text, for tests and for copying.

mod alive_at_oom;
mod allocator;
mod allocator_map;
mod batch_trials;
mod breakdown;
mod compare;
mod compare_chart;
mod counter_peaks;
mod evals;
mod exports;
mod findings;
mod growth;
mod live_panel;
mod ooms;
mod overview;
mod parts;
mod rank_multiples;
mod ranks;
mod snapshot;
mod stage_table;
mod statistics;
mod step_chart;
mod step_table;
mod verdict;

pub use alive_at_oom::AliveAtOom;
pub use allocator::Allocator;
pub use batch_trials::BatchTrials;
pub use breakdown::Breakdown;
pub use compare::Compare;
pub use counter_peaks::CounterPeaks;
pub use evals::Evals;
pub use exports::Exports;
pub use findings::Findings;
pub use growth::Growth;
pub use live_panel::LivePanel;
pub use ooms::AttachedSnapshots;
pub use ooms::Ooms;
pub use overview::Overview;
pub use ranks::Ranks;
pub use snapshot::SnapshotReport;
pub use stage_table::StageTable;
pub use statistics::Statistics;
pub use step_chart::StepChart;
pub use step_table::StepTable;
pub use verdict::Verdict;

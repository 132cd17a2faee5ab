//! What the analyses read at every mark, found once for all of them ([`Prepared`]): each
//! metric's value there ([`MarkValues`]), each mark's stage ([`StageIndex`]), its place on the
//! fits' clock ([`ClockMarks`]) and the stage table's sums ([`StageSums`]). Why it is a value of
//! its own: a live view keeps it from one analysis of a trace still being written to the next
//! (`crate::analyze_prepared`) and extends it with the marks and samples appended, so an analysis
//! does not read every mark of a day again each time (these took 170 ms of a day's 600 ms
//! analysis); each part equals the one made anew of the same trace, which
//! `shared/analysis/tests/live_analysis.rs` checks piece by piece.

use crate::clocks::ClockMarks;
use crate::marks::StageIndex;
use crate::metrics::MarkValues;
use crate::stages::{StageSums, StageTable};
use oomscope_format::Trace;

/// What the analyses read at every mark, found once for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    values: MarkValues,
    stages: StageIndex,
    clock_marks: ClockMarks,
    /// The stage table's sums over the marks whose values are settled.
    stage_sums: StageSums,
}

impl Prepared {
    /// What the analyses read at the marks of `trace`.
    pub fn new(trace: &Trace) -> Prepared {
        let values = MarkValues::new(trace);
        let stages = StageIndex::new(trace);
        let mut stage_sums = StageSums::new(&values, vec![None; values.keys().len()]);
        stage_sums.add(trace, &values, &stages, values.settled_marks());
        Prepared {
            clock_marks: ClockMarks::new(trace, &stages),
            stage_sums,
            values,
            stages,
        }
    }

    /// Brought up to `trace`, the trace this was prepared from grown since (marks and samples
    /// appended, nothing before them changed): equal to [`Prepared::new`] of `trace`.
    pub fn update(&mut self, trace: &Trace) {
        let changed = self.values.extend(trace).min(self.stages.extend(trace));
        self.clock_marks.extend(trace, &self.stages);
        if changed == 0 || changed < self.stage_sums.marks() {
            let keys = self.values.keys().len();
            self.stage_sums = StageSums::new(&self.values, vec![None; keys]);
        }
        let settled = self.values.settled_marks();
        self.stage_sums
            .add(trace, &self.values, &self.stages, settled);
    }

    /// Each metric's values at the marks.
    pub fn values(&self) -> &MarkValues {
        &self.values
    }

    /// Each mark's stage.
    pub fn stages(&self) -> &StageIndex {
        &self.stages
    }

    /// The stage table (without a baseline mark) of `trace`, the trace this was brought up to:
    /// the kept sums and those of the marks not settled yet.
    pub fn stage_table(&self, trace: &Trace) -> StageTable {
        let mut sums = self.stage_sums.clone();
        sums.add(trace, &self.values, &self.stages, trace.marks.len());
        sums.table(&self.values, &self.stages, None)
    }

    /// The marks on the fits' clock.
    pub fn clock_marks(&self) -> &ClockMarks {
        &self.clock_marks
    }
}

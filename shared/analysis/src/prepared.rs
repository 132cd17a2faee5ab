//! What the analyses read at every mark, found once for all of them ([`Prepared`]): each
//! metric's value there ([`MarkValues`]), each mark's stage ([`StageIndex`]), its place on the
//! fits' clock ([`ClockMarks`]), the marks' distinct steps ([`MarkSteps`]), ranks
//! ([`MarkRanks`]) and senders ([`MarkingPids`]), the stage table's sums ([`StageSums`]), the
//! memory outside the allocator ([`OutsideScan`]), each metric's highest value and largest rise
//! ([`ColumnScan`]), the evals and training's peak ([`PhaseScan`]), and
//! the passes over every sample row kept as folds ([`HostScan`], [`PressureScan`]). Why it is a
//! value of its own: a live view keeps it from one analysis of a trace still being written to
//! the next (`crate::analyze_prepared`) and extends it with the marks and samples appended, so
//! an analysis does not read every mark and row of a day again each time (these took 250 ms of
//! a day's 600 ms analysis); each part equals the one made anew of the same trace, which
//! `shared/analysis/tests/live_analysis.rs` checks piece by piece.

use crate::clocks::ClockMarks;
use crate::column_scan::ColumnScan;
use crate::host::{HostMemory, HostScan};
use crate::marks::{MarkSteps, StageIndex};
use crate::metrics::MarkValues;
use crate::overhead::{OutsideAllocator, OutsideScan};
use crate::phases::{PhaseScan, PhaseTransition, TrainingPeak};
use crate::pressure::{PressureReport, PressureScan};
use crate::rank_views::{MarkRanks, RankProcess};
use crate::stages::{StageSums, StageTable};
use crate::workers::MarkingPids;
use oomscope_format::Trace;

/// What the analyses read at every mark, found once for all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    values: MarkValues,
    stages: StageIndex,
    /// The marks' distinct steps.
    steps: MarkSteps,
    /// The ranks the marks named.
    ranks: MarkRanks,
    /// The processes that sent marks.
    marking_pids: MarkingPids,
    clock_marks: ClockMarks,
    /// The stage table's sums over the marks whose values are settled.
    stage_sums: StageSums,
    /// The memory outside the allocator over the marks whose values are settled.
    outside: OutsideScan,
    /// Each metric's highest value and largest rise over the marks whose values are settled.
    columns: ColumnScan,
    /// The evals measured for good and training's highest reading.
    phases: PhaseScan,
    /// The host's tightest moment, over the rows read.
    host: HostScan,
    /// The allocator's pressure, over the marks and rows read.
    pressure: PressureScan,
}

impl Prepared {
    /// What the analyses read at the marks of `trace`.
    pub fn new(trace: &Trace) -> Prepared {
        let values = MarkValues::new(trace);
        let stages = StageIndex::new(trace);
        let mut stage_sums = StageSums::new(&values, vec![None; values.keys().len()]);
        stage_sums.add(trace, &values, &stages, values.settled_marks());
        let mut outside = OutsideScan::default();
        outside.add(trace, &values, values.settled_marks());
        let mut columns = ColumnScan::default();
        columns.add(&values, values.settled_marks());
        let mut phases = PhaseScan::default();
        phases.add(trace, &values, values.settled_marks());
        let (mut host, mut pressure) = (HostScan::default(), PressureScan::default());
        host.extend(trace);
        pressure.extend(trace);
        Prepared {
            clock_marks: ClockMarks::new(trace, &stages),
            stage_sums,
            outside,
            columns,
            phases,
            host,
            pressure,
            steps: MarkSteps::new(trace),
            ranks: MarkRanks::new(trace),
            marking_pids: MarkingPids::new(trace),
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
        if changed == 0 || changed < self.outside.marks() {
            self.outside = OutsideScan::default();
        }
        if changed == 0 || changed < self.columns.marks() {
            self.columns = ColumnScan::default();
        }
        if changed == 0 || changed < self.phases.marks() {
            self.phases = PhaseScan::default();
        }
        let settled = self.values.settled_marks();
        self.stage_sums
            .add(trace, &self.values, &self.stages, settled);
        self.outside.add(trace, &self.values, settled);
        self.columns.add(&self.values, settled);
        self.phases.add(trace, &self.values, settled);
        self.host.extend(trace);
        self.pressure.extend(trace);
        self.steps.extend(trace);
        self.ranks.extend(trace);
        self.marking_pids.extend(trace);
    }

    /// Each metric's values at the marks.
    pub fn values(&self) -> &MarkValues {
        &self.values
    }

    /// The marks' distinct steps.
    pub fn steps(&self) -> &MarkSteps {
        &self.steps
    }

    /// [`crate::rank_views::ranks_of`] `trace`, the trace this was brought up to.
    pub fn ranks(&self, trace: &Trace) -> Vec<RankProcess> {
        crate::rank_views::ranks_with(trace, &self.ranks)
    }

    /// The processes that sent marks.
    pub fn marking_pids(&self) -> &MarkingPids {
        &self.marking_pids
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

    /// [`crate::overhead::outside_allocator`] of `trace`, the trace this was brought up to.
    pub fn outside_allocator(&self, trace: &Trace) -> Option<OutsideAllocator> {
        self.outside.report(trace, &self.values)
    }

    /// Each metric's highest value and largest rise at the marks of `trace`, the trace this was
    /// brought up to.
    pub fn columns(&self, trace: &Trace) -> ColumnScan {
        self.columns.completed(trace, &self.values)
    }

    /// [`crate::phases::phase_transitions`] and [`crate::phases::training_peak`] of `trace`, the
    /// trace this was brought up to.
    pub fn phases(&self, trace: &Trace) -> (Vec<PhaseTransition>, Option<TrainingPeak>) {
        self.phases.report(trace, &self.values)
    }

    /// [`crate::host::host_memory`] of `trace`, the trace this was brought up to.
    pub fn host_memory(&self, trace: &Trace) -> Option<HostMemory> {
        self.host.host_memory(trace)
    }

    /// [`crate::pressure::pressure`] of `trace`, the trace this was brought up to.
    pub fn pressure(&self, trace: &Trace) -> Option<PressureReport> {
        self.pressure.report(trace)
    }

    /// The marks on the fits' clock.
    pub fn clock_marks(&self) -> &ClockMarks {
        &self.clock_marks
    }
}

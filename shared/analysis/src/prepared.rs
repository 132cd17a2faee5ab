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
//! `shared/analysis/tests/live_analysis.rs` checks piece by piece. A trace of several ranks keeps
//! one more of each rank's view and of the whole run's marks ([`RankPrepared`]), brought up by the
//! analysis that makes those views.

use crate::clocks::ClockMarks;
use crate::column_scan::ColumnScan;
use crate::fold::{FoldInput, bring_up};
use crate::host::{HostMemory, HostScan};
use crate::mark_steps::MarkSteps;
use crate::marks::StageIndex;
use crate::metrics::MarkValues;
use crate::overhead::{OutsideAllocator, OutsideScan};
use crate::phases::{PhaseScan, PhaseTransition, TrainingPeak};
use crate::pressure::{PressureReport, PressureScan};
use crate::rank_views::{MarkRanks, RankProcess};
use crate::stages::{StageSums, StageTable};
use crate::workers::MarkingPids;
use oomscope_format::Trace;

/// Every fold a [`Prepared`] keeps, named once: the update brings them all up in one loop, and
/// the property test compares them all (`$then` is a macro taking the names).
macro_rules! every_fold {
    ($then:ident) => {
        $then!(
            clock_marks,
            stage_sums,
            outside,
            columns,
            phases,
            host,
            pressure,
            steps,
            ranks,
            marking_pids
        )
    };
}

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
    /// A trace of several ranks: what was read of each rank's view and of the whole run's.
    per_rank: RankPrepared,
}

/// What the analysis of a trace of several ranks read of the traces it makes of it: each rank's
/// view ([`crate::rank_views::rank_view`]) and the whole run's marks (the lowest rank's), each
/// kept by the rank and the process that sent its marks (another process is another view: a
/// restarted rank, a lower rank appearing), and brought up to the view the analysis made
/// ([`Prepared::update`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RankPrepared {
    /// The whole run's (the lowest rank's marks), by that rank and its sender.
    whole: Option<(RankKey, Box<Prepared>)>,
    /// Each rank's own view's, by rank.
    ranks: Vec<(RankKey, Prepared)>,
}

/// A rank and the process that sent its marks.
type RankKey = (u32, Option<u32>);

impl RankPrepared {
    /// The preparation of the whole run's trace `whole` (of the lowest rank `lowest`), brought
    /// up to it.
    pub(crate) fn whole(&mut self, lowest: &RankProcess, whole: &Trace) -> &Prepared {
        let key = (lowest.rank, lowest.pid);
        match &mut self.whole {
            Some((k, p)) if *k == key => p.update(whole),
            kept => *kept = Some((key, Box::new(Prepared::new(whole)))),
        }
        &self.whole.as_ref().expect("just kept").1
    }

    /// The preparation of `rank`'s view `view`, brought up to it.
    pub(crate) fn rank(&mut self, rank: &RankProcess, view: &Trace) -> &Prepared {
        let key = (rank.rank, rank.pid);
        let at = match self.ranks.binary_search_by_key(&key.0, |(k, _)| k.0) {
            Ok(i) if self.ranks[i].0 == key => {
                self.ranks[i].1.update(view);
                i
            }
            Ok(i) => {
                self.ranks[i] = (key, Prepared::new(view));
                i
            }
            Err(i) => {
                self.ranks.insert(i, (key, Prepared::new(view)));
                i
            }
        };
        &self.ranks[at].1
    }
}

impl Prepared {
    /// What the analyses read at the marks of `trace`.
    pub fn new(trace: &Trace) -> Prepared {
        let values = MarkValues::new(trace);
        let stages = StageIndex::new(trace);
        let mut prepared = Prepared {
            stage_sums: StageSums::new(&values, vec![None; values.keys().len()]),
            outside: OutsideScan::default(),
            columns: ColumnScan::default(),
            phases: PhaseScan::default(),
            host: HostScan::default(),
            pressure: PressureScan::default(),
            steps: MarkSteps::default(),
            ranks: MarkRanks::default(),
            marking_pids: MarkingPids::default(),
            clock_marks: ClockMarks::new(&Trace::default(), &StageIndex::default()),
            per_rank: RankPrepared::default(),
            values,
            stages,
        };
        prepared.fold(trace, trace.marks.len());
        prepared
    }

    /// Brought up to `trace`, the trace this was prepared from grown since (marks and samples
    /// appended, nothing before them changed): equal to [`Prepared::new`] of `trace`.
    pub fn update(&mut self, trace: &Trace) {
        let changed = self.values.extend(trace).min(self.stages.extend(trace));
        self.fold(trace, changed);
    }

    /// Every fold brought up to `trace`, those that read marks' values from `changed` on begun
    /// again ([`crate::fold::bring_up`]).
    fn fold(&mut self, trace: &Trace, changed: usize) {
        let input = FoldInput {
            trace,
            values: &self.values,
            stages: &self.stages,
            settled: self.values.settled_marks(),
        };
        macro_rules! bring_all {
            ($($fold:ident),*) => {
                bring_up(&mut [$(&mut self.$fold),*], &input, changed)
            };
        }
        every_fold!(bring_all);
    }

    /// The folds that differ from `other`'s, by name (the protocol's property test).
    #[cfg(test)]
    fn differing_folds(&self, other: &Prepared) -> Vec<&'static str> {
        let mut differ = Vec::new();
        macro_rules! compare {
            ($($fold:ident),*) => {
                $(if self.$fold != other.$fold {
                    differ.push(stringify!($fold));
                })*
            };
        }
        every_fold!(compare);
        differ
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

    /// What the analysis of a trace of several ranks read of its views (taken while it reads
    /// them, then given back: [`crate::analyze_prepared`]).
    pub(crate) fn per_rank_mut(&mut self) -> &mut RankPrepared {
        &mut self.per_rank
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{Follower, decode};
    use oomscope_testkit::synth::TrainingRun;
    use proptest::prelude::*;

    /// A run with every kind of record the folds read: evals, a leak, allocator statistics,
    /// fragmentation, host memory, a batch search.
    fn bytes() -> &'static [u8] {
        static BYTES: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        BYTES.get_or_init(|| {
            TrainingRun {
                steps: 60,
                leak_bytes_per_step: 32 << 20,
                eval_every: Some(20),
                eval_steps: 3,
                ..TrainingRun::default()
            }
            .to_bytes()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Every fold, cut anywhere: folded over the trace up to the cut and then extended with
        /// the rest, it is the fold of the whole trace made anew.
        #[test]
        fn every_fold_cut_anywhere_equals_the_whole(cut in 0.0f64..1.0, second in 0.0f64..1.0) {
            let bytes = bytes();
            let whole = decode(bytes).unwrap().trace;
            let at = (bytes.len() as f64 * cut) as usize;
            let at2 = at + ((bytes.len() - at) as f64 * second) as usize;
            let mut follower = Follower::default();
            let mut kept: Option<Prepared> = None;
            for piece in [&bytes[..at], &bytes[at..at2], &bytes[at2..]] {
                follower.push(piece).unwrap();
                if let Some(t) = follower.trace() {
                    match kept.as_mut() {
                        Some(p) => p.update(t),
                        None => kept = Some(Prepared::new(t)),
                    }
                }
            }
            let kept = kept.expect("the whole trace was read");
            let anew = Prepared::new(&whole);
            let differ = kept.differing_folds(&anew);
            prop_assert!(differ.is_empty(), "{:?} after cuts at {} and {}", differ, at, at2);
            prop_assert_eq!(kept, anew);
        }
    }
}

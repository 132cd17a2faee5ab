//! The run's clocks: what memory kept "per" something is counted in. A training loop's clock is
//! its optimizer steps; a serving loop that never trains counts its forwards (requests); memory
//! flat within epochs that rises at their ends counts epochs. The leak fits, the findings' words
//! and the viewer's chart of memory along the clock all place a mark on a clock here, so that a
//! fit's `*_step` fields, its line and its chart are in one unit.

use serde::Serialize;

use crate::fit_marks::FitMarks;
use crate::marks::{StageIndex, is_train};
use crate::metrics::{MarkValues, MetricKey};
use oomscope_format::Trace;

/// What a fit counts along its x axis: a [`crate::leaks::GrowthFit`]'s `*_step` fields are in its units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Clock {
    /// Training steps (the marks' step numbers).
    Step,
    /// Outermost forwards of a run that never trains: the forward's ordinal, counted from 1 at
    /// each `pre_forward` mark (a request, in a serving loop).
    Forward,
    /// Epochs (the marks' epoch numbers: the program's, or the hooks' count of its training
    /// DataLoader begun again): memory flat within epochs that rises at their ends.
    Epoch,
}

impl Clock {
    /// The clock's unit in words: `step`, `forward`.
    pub fn unit(self) -> &'static str {
        match self {
            Clock::Step => "step",
            Clock::Forward => "forward",
            Clock::Epoch => "epoch",
        }
    }

    /// The clock of a trace's fits: [`Clock::Forward`] when its marks are all eval ones (a run
    /// that never trains), else [`Clock::Step`].
    pub fn of(trace: &Trace) -> Clock {
        let mut eval = false;
        for m in &trace.marks {
            if is_train(m.phase) {
                return Clock::Step;
            }
            eval = true;
        }
        if eval { Clock::Forward } else { Clock::Step }
    }
}

impl Clock {
    /// Each mark's position on the clock: its step, the ordinal of the forward it is in
    /// (counted from 1 at each `pre_forward` mark; 0 before the first), or its epoch.
    pub fn positions(self, trace: &Trace) -> Vec<u64> {
        let mut forwards = 0u64;
        trace
            .marks
            .iter()
            .map(|m| match self {
                Clock::Step => m.step,
                Clock::Epoch => u64::from(m.epoch),
                Clock::Forward => {
                    forwards += u64::from(&*m.name == "pre_forward");
                    forwards
                }
            })
            .collect()
    }

    /// Whether a mark of `phase` is on the clock: training marks for steps and epochs, every
    /// mark of a run that never trains for forwards.
    pub fn counts(self, phase: oomscope_format::Phase) -> bool {
        self == Clock::Forward || is_train(phase)
    }
}

/// The marks a fit of the trace's clock ([`Clock::of`]) reads, found once for every fit: each
/// mark's position on the clock, the marks off it before each (an eval between two training
/// points), and each stage's marks on it (thinned past [`crate::fit_marks::FIT_MARKS_MAX`]). A live view keeps them from one analysis to the next
/// (`crate::Prepared`) and numbers only the marks appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockMarks {
    clock: Clock,
    /// On the forward clock, each mark's forward ordinal (empty on the step clock, where a
    /// mark's position is its step).
    forwards: Vec<u64>,
    /// Marks off the step clock (not training's) before each mark: one more entry than marks.
    outside_train: Vec<u32>,
    /// Each stage's marks on the clock as its fits read them, by stage number.
    on_clock: Vec<FitMarks>,
    /// The highest position of each block of [`POSITION_BLOCK_MARKS`] marks, in order: a chart of
    /// the last positions passes over the blocks below them without reading their marks.
    block_highest: Vec<u64>,
}

/// Marks in one block of [`ClockMarks`]'s highest positions.
pub const POSITION_BLOCK_MARKS: usize = 4096;

impl ClockMarks {
    /// The marks of `trace` (numbered by `stages`) on its clock.
    pub fn new(trace: &Trace, stages: &StageIndex) -> ClockMarks {
        let mut marks = ClockMarks::empty();
        marks.extend(trace, stages);
        marks
    }

    fn empty() -> ClockMarks {
        ClockMarks {
            clock: Clock::Step,
            forwards: Vec::new(),
            outside_train: vec![0],
            on_clock: Vec::new(),
            block_highest: Vec::new(),
        }
    }

    /// Brought up to `trace`, the trace these were found in grown since (marks appended; all
    /// found again when the clock changed: a run's first training mark after evals only, or
    /// should the trace have fewer marks). Equal to [`ClockMarks::new`] of `trace`.
    pub fn extend(&mut self, trace: &Trace, stages: &StageIndex) {
        let from = self.outside_train.len() - 1;
        if trace.marks.len() < from {
            *self = ClockMarks::new(trace, stages);
            return;
        }
        let added = &trace.marks[from..];
        // Marks read on the step clock: a training mark was among them (the clock is
        // [`Clock::Step`] from then on).
        let trained = from > 0 && self.clock == Clock::Step;
        let trains = trained || added.iter().any(|m| is_train(m.phase));
        let clock = if trains || trace.marks.is_empty() {
            Clock::Step
        } else {
            Clock::Forward
        };
        if clock != self.clock && from > 0 {
            *self = ClockMarks::empty();
            self.extend(trace, stages);
            return;
        }
        self.clock = clock;
        let mut forwards = self.forwards.last().copied().unwrap_or(0);
        for (i, mark) in added.iter().enumerate() {
            let i = from + i;
            let last = self.outside_train[i];
            self.outside_train
                .push(last + u32::from(clock == Clock::Step && !is_train(mark.phase)));
            if clock == Clock::Forward {
                forwards += u64::from(&*mark.name == "pre_forward");
                self.forwards.push(forwards);
            }
            let position = match clock {
                Clock::Forward => forwards,
                _ => mark.step,
            };
            match self.block_highest.get_mut(i / POSITION_BLOCK_MARKS) {
                Some(highest) => *highest = (*highest).max(position),
                None => self.block_highest.push(position),
            }
            if clock.counts(mark.phase) {
                let stage = stages.of_mark(i);
                if self.on_clock.len() <= stage {
                    self.on_clock.resize_with(stage + 1, FitMarks::default);
                }
                self.on_clock[stage].push(i as u32, position);
            }
        }
    }

    /// The clock.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Mark `mark`'s position on the clock (its step, or its forward's ordinal).
    pub fn position(&self, trace: &Trace, mark: usize) -> u64 {
        match self.clock {
            Clock::Forward => self.forwards[mark],
            _ => trace.marks[mark].step,
        }
    }

    /// Marks off the step clock before each mark (and after the last): two training points with
    /// a different count between them have an eval between them.
    pub fn outside_train(&self) -> &[u32] {
        &self.outside_train
    }

    /// The highest position of each block of [`POSITION_BLOCK_MARKS`] marks, in order.
    pub fn block_highest(&self) -> &[u64] {
        &self.block_highest
    }

    /// Stage number `stage`'s marks on the clock as its fits read them; `None` without any.
    pub fn of_stage(&self, stage: usize) -> Option<&FitMarks> {
        self.on_clock.get(stage)
    }
}

/// One metric at one position of a clock: each stage's value there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockRow {
    /// The position (a step, a forward's ordinal, an epoch).
    pub at: u64,
    /// One value per stage, in [`StageIndex`] order: a step's or a forward's last reading at the
    /// stage; an epoch's lowest (what the epoch kept, under everything its steps add and free:
    /// the floor an epoch fit is drawn through).
    pub values: Vec<Option<u64>>,
}

/// `metric` along `clock`: one row per position the clock's marks reach, in order.
pub fn clock_rows(trace: &Trace, metric: MetricKey, clock: Clock) -> Vec<ClockRow> {
    clock_rows_last(trace, metric, clock, usize::MAX)
}

/// The last `count` rows of [`clock_rows`] (the highest positions), without making the others:
/// a live chart of a day's run needs 400 of its 240 000 steps, and all of them as rows would
/// take 30 MB.
pub fn clock_rows_last(
    trace: &Trace,
    metric: MetricKey,
    clock: Clock,
    count: usize,
) -> Vec<ClockRow> {
    if count == 0 {
        return Vec::new();
    }
    let values = MarkValues::for_metrics(trace, vec![metric]);
    clock_rows_last_of(
        trace,
        &StageIndex::new(trace),
        None,
        values.column(0),
        clock,
        count,
    )
}

/// [`clock_rows_last`] of a metric's `values` at the marks, with the marks' `stages` and, when
/// `clock` is theirs, their places on it (`kept`; a live view keeps all three from one refresh
/// to the next: `crate::Prepared`; else each mark's place is found here, 10 MB for a day).
pub fn clock_rows_last_of(
    trace: &Trace,
    stages: &StageIndex,
    kept: Option<&ClockMarks>,
    values: crate::metrics::MarkColumn<'_>,
    clock: Clock,
    count: usize,
) -> Vec<ClockRow> {
    if count == 0 {
        return Vec::new();
    }
    let columns = stages.names().len();
    let kept = kept.filter(|k| k.clock() == clock);
    let positions = match kept {
        Some(_) => Vec::new(),
        None => clock.positions(trace),
    };
    let position = |i: usize| kept.map_or_else(|| positions[i], |k| k.position(trace, i));
    // The marks of `range` that make a row: on the clock, with a value.
    let counted = |range: std::ops::Range<usize>| {
        trace.marks[range.clone()]
            .iter()
            .zip(values.range(range.clone()).iter())
            .zip(range)
            .filter_map(move |((mark, value), i)| {
                let at = position(i);
                let on_clock = clock.counts(mark.phase) && !(clock == Clock::Forward && at == 0);
                Some((i, at, value.filter(|_| on_clock)?))
            })
    };
    let marks = trace.marks.len().min(values.len());
    // The lowest position kept: the `count`-th highest distinct one. With the clock's marks kept,
    // read back from the last block of marks, and no further than the first block before which
    // no mark reaches it: rows of a day's last 400 steps read its last few blocks, not all 1.2 M
    // marks (the blocks' highest positions say so, whatever order the positions come in).
    let (mut lowest, mut start) = (0, 0);
    if count != usize::MAX {
        let mut highest = std::collections::BTreeSet::new();
        let insert = |highest: &mut std::collections::BTreeSet<u64>, at: u64| {
            if highest.len() == count && highest.first().is_some_and(|low| at <= *low) {
                return;
            }
            if highest.insert(at) && highest.len() > count {
                highest.pop_first();
            }
        };
        // Without the clock's marks kept, one block of every mark.
        let (before, block_marks): (Vec<u64>, usize) = match kept {
            Some(k) => {
                let highest_before = k.block_highest().iter().scan(0, |most, &h| {
                    *most = h.max(*most);
                    Some(*most)
                });
                (highest_before.collect(), POSITION_BLOCK_MARKS)
            }
            None => (Vec::new(), marks.max(1)),
        };
        start = marks;
        for block in (0..marks.div_ceil(block_marks)).rev() {
            let below = |low: &u64| before.get(block).is_some_and(|most| most < low);
            if highest.len() == count && highest.first().is_some_and(below) {
                break;
            }
            let first = block * block_marks;
            for (_, at, _) in counted(first..start) {
                insert(&mut highest, at);
            }
            start = first;
        }
        lowest = highest.first().copied().unwrap_or(0);
    }
    // Positions come in order but for a step number a program counts again (kept sorted).
    let mut rows: Vec<ClockRow> = Vec::new();
    for (i, at, value) in counted(start..marks).filter(|(_, at, _)| *at >= lowest) {
        let row = match rows.binary_search_by_key(&at, |r| r.at) {
            Ok(row) => row,
            Err(row) => {
                let values = vec![None; columns];
                rows.insert(row, ClockRow { at, values });
                row
            }
        };
        let cell = &mut rows[row].values[stages.of_mark(i)];
        *cell = Some(match (clock, *cell) {
            (Clock::Epoch, Some(lowest)) => lowest.min(value),
            _ => value,
        });
    }
    rows
}

impl crate::fold::Fold for ClockMarks {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = ClockMarks::empty();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        ClockMarks::extend(self, input.trace, input.stages);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricKey;
    use oomscope_format::Phase;
    use oomscope_format::units::GIB;
    use oomscope_testkit::run::Run;

    #[test]
    fn each_stage_s_marks_on_the_clock_in_mark_order_and_a_serving_run_s_forwards() {
        let mark = |name: &str, step: u64, phase: Phase| oomscope_format::StageMark {
            t_us: step,
            name: name.into(),
            step,
            phase,
            ..Default::default()
        };
        let mut trace = Trace::default();
        for (i, name) in [
            "pre_forward",
            "post_forward",
            "pre_forward",
            "x",
            "post_forward",
        ]
        .iter()
        .enumerate()
        {
            trace.marks.push(mark(name, i as u64, Phase::Eval));
        }
        // Evals only: forwards, every mark on the clock, counted at each `pre_forward`.
        let marks = ClockMarks::new(&trace, &StageIndex::new(&trace));
        assert_eq!(marks.clock(), Clock::Forward);
        let of_stage =
            |marks: &ClockMarks, stage| marks.of_stage(stage).map(|m| m.marks().to_vec());
        assert_eq!(
            (of_stage(&marks, 0), of_stage(&marks, 1)),
            (Some(vec![0, 2]), Some(vec![1, 4]))
        );
        let positions: Vec<u64> = (0..5).map(|i| marks.position(&trace, i)).collect();
        assert_eq!(positions, [1, 1, 2, 2, 2]);
        assert_eq!(positions, Clock::Forward.positions(&trace));
        // A training mark: steps, the evals off the clock and counted before each mark.
        trace.marks.push(mark("post_forward", 9, Phase::Train));
        let stages = StageIndex::new(&trace);
        let mut kept = marks.clone();
        kept.extend(&trace, &stages);
        let marks = ClockMarks::new(&trace, &stages);
        assert_eq!(kept, marks);
        assert_eq!(marks.clock(), Clock::Step);
        assert_eq!(
            (of_stage(&marks, 0), of_stage(&marks, 1)),
            (Some(vec![]), Some(vec![5]))
        );
        assert_eq!(marks.outside_train(), [0, 1, 2, 3, 4, 5, 5]);
        assert_eq!(marks.position(&trace, 5), 9);
    }

    #[test]
    fn the_last_rows_read_back_from_the_last_blocks_are_those_of_every_mark() {
        // 3 000 steps of four marks (three blocks of marks); the first 1 000 steps counted from
        // 5 000 (a step count that started again after them): the highest rows are the first
        // marks', far behind the last blocks.
        for restart in [false, true] {
            let mut trace = Run {
                steps: 3_000,
                leak_bytes_per_step: 1 << 20,
                ..Run::default()
            }
            .build();
            if restart {
                trace.marks.edit(|m| {
                    if m.step < 1_000 {
                        m.step += 5_000;
                    }
                });
            }
            let stages = StageIndex::new(&trace);
            let kept = ClockMarks::new(&trace, &stages);
            assert!(kept.block_highest().len() >= 3);
            let values = MarkValues::new(&trace);
            let column = values.column(values.index_of(MetricKey::ALLOCATED).unwrap());
            for count in [1, 400, 2_000, 5_000] {
                let read =
                    |kept| clock_rows_last_of(&trace, &stages, kept, column, Clock::Step, count);
                let rows = read(Some(&kept));
                assert_eq!(rows, read(None), "restart {restart}, {count} rows");
                assert_eq!(rows.len(), count.min(3_000));
                let last = if restart { 5_999 } else { 2_999 };
                assert_eq!(rows.last().map(|r| r.at), Some(last));
            }
        }
    }

    #[test]
    fn a_row_per_step_per_forward_and_per_epoch_at_each_epoch_s_floor() {
        // Six epochs of ten steps; 2 GiB kept at each epoch's end.
        let mut trace = Run {
            steps: 60,
            ..Run::default()
        }
        .build();
        oomscope_testkit::run::keep_at_epoch_ends(&mut trace, 10, 2 * GIB);
        let allocated = MetricKey::ALLOCATED;
        let steps = clock_rows(&trace, allocated, Clock::Step);
        assert_eq!(steps.len(), 60);
        assert_eq!((steps[0].at, steps[59].at), (0, 59));
        let epochs = clock_rows(&trace, allocated, Clock::Epoch);
        let at: Vec<u64> = epochs.iter().map(|r| r.at).collect();
        assert_eq!(at, [0, 1, 2, 3, 4, 5]);
        for (column, _) in StageIndex::new(&trace).names().iter().enumerate() {
            let floor = |e: u64| {
                steps[(e * 10) as usize..(e * 10 + 10) as usize]
                    .iter()
                    .filter_map(|r| r.values[column])
                    .min()
            };
            for e in &epochs {
                assert_eq!(e.values[column], floor(e.at));
            }
            assert_eq!(
                epochs[5].values[column].unwrap() - epochs[0].values[column].unwrap(),
                10 * GIB
            );
        }
        // The last rows alone are the same rows, also when the step count starts again.
        for count in [1, 7, 60, 61] {
            let last = clock_rows_last(&trace, allocated, Clock::Step, count);
            assert_eq!(last, steps[steps.len().saturating_sub(count)..], "{count}");
        }
        let mut again = trace.clone();
        let half = again.marks.len() / 2;
        for m in again.marks.iter_mut().skip(half) {
            m.step -= 30;
        }
        let all = clock_rows(&again, allocated, Clock::Step);
        assert_eq!(all.len(), 30);
        assert_eq!(
            clock_rows_last(&again, allocated, Clock::Step, 5),
            all[25..]
        );
        // A run that never trains counts its forwards from 1.
        for m in &mut trace.marks {
            m.phase = Phase::Eval;
        }
        assert_eq!(Clock::of(&trace), Clock::Forward);
        let forwards = clock_rows(&trace, allocated, Clock::Forward);
        assert_eq!(forwards.len(), 60);
        assert_eq!(forwards[0].at, 1);
        assert!(clock_rows(&trace, allocated, Clock::Step).is_empty());
        // The last rows alone are the same rows.
        let all = clock_rows(&trace, allocated, Clock::Forward);
        for count in [0, 1, 7, 60, 61] {
            let last = clock_rows_last(&trace, allocated, Clock::Forward, count);
            assert_eq!(last, all[all.len().saturating_sub(count)..], "{count}");
        }
    }
}

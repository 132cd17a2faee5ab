//! The distinct steps of a trace's marks, kept as a fold ([`MarkSteps`]): the overview's step
//! count, first and last step, without sorting a day's marks again at each live refresh. Its own
//! module so that the marks' leaf helpers (`marks.rs`) need not know the fold protocol.

use oomscope_format::Trace;

use crate::fold::{Fold, FoldInput};

/// The distinct steps of the marks (the overview's steps: how many, the first and the last),
/// kept as a fold a live view extends with the marks appended: a day's 1.2 million marks are
/// not sorted again each refresh. The steps are held as runs of consecutive ones (a run's
/// steps all marked: one run in most traces, however long), so a replayed step is found
/// without keeping each; steps out of order add runs that are sorted and merged once per
/// extension (n log n for steps in any order). Equal to [`MarkSteps::new`] of the same marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkSteps {
    /// The marks read.
    marks: usize,
    /// Runs of consecutive steps as (first, last), sorted, apart by at least one step.
    runs: Vec<(u64, u64)>,
    /// Distinct steps in all.
    count: usize,
}

impl MarkSteps {
    /// The distinct steps of the marks of `trace`.
    pub fn new(trace: &Trace) -> MarkSteps {
        let mut steps = MarkSteps::default();
        steps.extend(trace);
        steps
    }

    /// Takes in the marks `trace` has beyond those read (all again should it have fewer).
    pub fn extend(&mut self, trace: &Trace) {
        if trace.marks.len() < self.marks {
            *self = MarkSteps::default();
        }
        let mut sorted = true;
        for mark in &trace.marks[self.marks..] {
            let step = mark.step;
            match self.runs.last_mut() {
                // Steps rise in a normal run: the last run holds the step or the step extends it.
                Some(last) if last.0 <= step && step <= last.1.saturating_add(1) => {
                    if step > last.1 {
                        last.1 = step;
                        self.count += 1;
                    }
                }
                Some(last) if step < last.0 => {
                    sorted = false;
                    self.runs.push((step, step));
                }
                _ => {
                    self.runs.push((step, step));
                    self.count += 1;
                }
            }
        }
        self.marks = trace.marks.len();
        if !sorted {
            self.merge();
        }
    }

    /// Sorts the runs and merges those that touch or overlap, counting the steps again.
    fn merge(&mut self) {
        self.runs.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(self.runs.len());
        for &(first, last) in &self.runs {
            match merged.last_mut() {
                Some(m) if first <= m.1.saturating_add(1) => m.1 = m.1.max(last),
                _ => merged.push((first, last)),
            }
        }
        self.count = merged
            .iter()
            .map(|&(first, last)| (last - first).saturating_add(1) as usize)
            .fold(0, usize::saturating_add);
        self.runs = merged;
    }

    /// How many distinct steps the marks name.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The lowest step marked.
    pub fn first(&self) -> Option<u64> {
        self.runs.first().map(|r| r.0)
    }

    /// The highest step marked.
    pub fn last(&self) -> Option<u64> {
        self.runs.last().map(|r| r.1)
    }
}

impl Fold for MarkSteps {
    fn clear(&mut self, _: &FoldInput<'_>) {
        *self = MarkSteps::default();
    }

    fn extend(&mut self, input: &FoldInput<'_>) {
        MarkSteps::extend(self, input.trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{Phase, StageMark};

    fn mark(trace: &mut Trace, t_us: u64, name: &str, step: u64) {
        trace.marks.push(StageMark {
            t_us,
            name: name.into(),
            step,
            phase: Phase::Train,
            ..StageMark::default()
        });
    }

    #[test]
    fn mark_steps_extended_mark_by_mark_are_the_distinct_steps() {
        // Rising, repeated within a step, a restart that replays steps 2 and 3, a gap filled
        // later from either side and joining two runs, one step before all others, the last
        // step a counter can hold.
        let steps = [
            0,
            0,
            1,
            2,
            2,
            3,
            2,
            3,
            4,
            8,
            6,
            9,
            7,
            5,
            12,
            10,
            0,
            u64::MAX,
            11,
        ];
        let mut trace = Trace::default();
        let mut kept = MarkSteps::default();
        for (i, &step) in steps.iter().enumerate() {
            mark(&mut trace, i as u64, "s", step);
            kept.extend(&trace);
            let mut expected = steps[..=i].to_vec();
            expected.sort_unstable();
            expected.dedup();
            let found = (kept.count(), kept.first(), kept.last());
            let wanted = (
                expected.len(),
                expected.first().copied(),
                expected.last().copied(),
            );
            assert_eq!(found, wanted, "after mark {i}");
        }
        assert_eq!(MarkSteps::new(&trace).runs, [(0, 12), (u64::MAX, u64::MAX)]);
    }

    #[test]
    fn mark_steps_in_any_order_are_the_distinct_steps() {
        // 5 000 marks of steps drawn from 0..3 000 (a fixed LCG), read in pieces of 7.
        let mut trace = Trace::default();
        let mut kept = MarkSteps::default();
        let mut seed = 12_345u64;
        let mut drawn = Vec::new();
        for i in 0..5_000u64 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let step = (seed >> 33) % 3_000;
            drawn.push(step);
            mark(&mut trace, i, "s", step);
            if i % 7 == 6 {
                kept.extend(&trace);
            }
        }
        kept.extend(&trace);
        drawn.sort_unstable();
        drawn.dedup();
        let found = (kept.count(), kept.first(), kept.last());
        assert_eq!(
            found,
            (drawn.len(), drawn.first().copied(), drawn.last().copied())
        );
        // Each run is a stretch of consecutive drawn steps, and they are all of them.
        let in_runs: Vec<u64> = kept.runs.iter().flat_map(|&(a, b)| a..=b).collect();
        assert_eq!(in_runs, drawn);
        assert!(
            kept.runs.len() > 100,
            "{} runs: gaps were drawn",
            kept.runs.len()
        );
    }
}

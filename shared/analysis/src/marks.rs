//! Which stage a moment belongs to, and which stage names a trace has.
//!
//! Many answers are "where in the training loop was this?": the peak, an OOM, the first
//! allocator retry. They all use [`mark_at_or_before`] and [`StageAt`] so they name the stage the
//! same way. [`StageIndex`] numbers stage names once (in first-appearance order, the order a
//! reader expects the table rows in) so the per-stage passes index arrays instead of hashing
//! strings 50 000 times.

use std::collections::HashMap;

use serde::Serialize;

use oomscope_format::{Phase, Trace};

/// Where in the training loop something happened: the last stage mark at or before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageAt {
    /// Index of the mark in [`Trace::marks`].
    pub mark_index: usize,
    /// Stage name.
    pub stage: String,
    /// Step of the mark.
    pub step: u64,
    /// Phase of the mark.
    pub phase: Phase,
    /// Time of the mark.
    pub t_us: u64,
}

impl StageAt {
    /// Describes mark `index`; `None` when there is no such mark.
    pub fn of_mark(trace: &Trace, index: usize) -> Option<StageAt> {
        let mark = trace.marks.get(index)?;
        Some(StageAt {
            mark_index: index,
            stage: mark.name.as_ref().to_owned(),
            step: mark.step,
            phase: mark.phase,
            t_us: mark.t_us,
        })
    }

    /// The stage active at `t_us` (the last mark at or before it), if any mark precedes it.
    pub fn at(trace: &Trace, t_us: u64) -> Option<StageAt> {
        StageAt::of_mark(trace, mark_at_or_before(trace, t_us)?)
    }
}

/// Index of the last mark at or before `t_us` (marks are in time order).
pub fn mark_at_or_before(trace: &Trace, t_us: u64) -> Option<usize> {
    trace
        .marks
        .partition_point(|m| m.t_us <= t_us)
        .checked_sub(1)
}

/// How the zero-code hooks thinned out their marks in a fast loop (the trace's MARK_SAMPLING
/// records): one iteration in `every` (the most they went to), from `from_step` on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MarksSampled {
    /// The first step marked one in several.
    pub from_step: u64,
    /// One iteration in this many at most.
    pub every: u32,
    /// The loop's iteration time then.
    pub iteration_us: u64,
    /// The last step the loop reached, as the hooks said when the process exited.
    pub last_step: Option<u64>,
}

/// How the hooks thinned out their marks, when they did.
pub fn marks_sampled(trace: &Trace) -> Option<MarksSampled> {
    let thinned = trace.mark_sampling.iter().filter(|s| s.every > 1);
    let first = thinned.clone().next()?;
    Some(MarksSampled {
        from_step: first.from_step,
        every: thinned.map(|s| s.every).max().unwrap_or(first.every),
        iteration_us: first.iteration_us,
        last_step: trace.mark_sampling.iter().filter_map(|s| s.last_step).max(),
    })
}

/// True for marks that belong to training proper: `Train`, or `Unknown` when the program did not
/// say (then every mark is assumed to be training).
pub fn is_train(phase: Phase) -> bool {
    matches!(phase, Phase::Train | Phase::Unknown)
}

/// Stage names numbered in first-appearance order, and each mark's number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageIndex {
    names: Vec<String>,
    of_mark: Vec<u32>,
    /// Each name's number.
    numbers: HashMap<String, u32>,
}

impl StageIndex {
    /// Numbers the stage names of `trace` (names are compared by text).
    pub fn new(trace: &Trace) -> StageIndex {
        let mut index = StageIndex::default();
        index.extend(trace);
        index
    }

    /// Numbers the marks `trace` has beyond those already numbered (a trace still being
    /// written); all again should it have fewer. Equal to [`StageIndex::new`] of `trace`.
    /// Returns the first mark numbered now.
    pub fn extend(&mut self, trace: &Trace) -> usize {
        if trace.marks.len() < self.of_mark.len() {
            *self = StageIndex::default();
        }
        let from = self.of_mark.len();
        self.of_mark.reserve(trace.marks.len() - from);
        for mark in &trace.marks[from..] {
            let index = match self.numbers.get(&*mark.name) {
                Some(index) => *index,
                None => {
                    let index = self.names.len() as u32;
                    self.names.push(mark.name.to_string());
                    self.numbers.insert(mark.name.to_string(), index);
                    index
                }
            };
            self.of_mark.push(index);
        }
        from
    }

    /// Stage names, first appearance first.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The stage number of mark `mark_index`.
    pub fn of_mark(&self, mark_index: usize) -> usize {
        self.of_mark[mark_index] as usize
    }

    /// Stage numbers of every mark, in mark order.
    pub fn per_mark(&self) -> &[u32] {
        &self.of_mark
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::StageMark;

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
    fn stage_at_is_the_last_mark_at_or_before() {
        let mut trace = Trace::default();
        mark(&mut trace, 100, "pre_forward", 1);
        mark(&mut trace, 200, "post_forward", 1);
        assert!(StageAt::at(&trace, 99).is_none());
        assert_eq!(StageAt::at(&trace, 100).unwrap().stage, "pre_forward");
        assert_eq!(StageAt::at(&trace, 199).unwrap().stage, "pre_forward");
        let at = StageAt::at(&trace, 5_000).unwrap();
        assert_eq!(
            (at.stage.as_str(), at.step, at.mark_index),
            ("post_forward", 1, 1)
        );
    }

    #[test]
    fn stage_index_numbers_names_in_first_appearance_order() {
        let mut trace = Trace::default();
        mark(&mut trace, 1, "b", 0);
        mark(&mut trace, 2, "a", 0);
        mark(&mut trace, 3, "b", 1);
        mark(&mut trace, 4, "a", 1);
        let index = StageIndex::new(&trace);
        assert_eq!(index.names(), ["b", "a"]);
        assert_eq!(index.per_mark(), [0, 1, 0, 1]);
    }
}

//! The marks a stage's leak fit reads ([`FitMarks`]): all of the stage's marks on the clock while
//! there are at most [`FIT_MARKS_MAX`], and past that the first one and the last of each block of
//! 2^k positions (k the smallest that keeps them under the bound).
//!
//! Why: a day's run at a step a second has 86 400 steps a stage, and fitting every one of them
//! again at each refresh of a live view was most of its analysis (the robust line takes medians
//! of all residuals, which no sum over what was appended updates). A line through points spread
//! evenly over the run has the same slope and R² in expectation as one through all of them (the
//! noise of each point is the same; a block's last point is a reading like any other, never an
//! average that would smooth it), evals and epoch ends between two kept points are still seen
//! (the marks off the clock are counted between any two marks), and a point kept for a block
//! never changes once the run has passed it: the live view adds only the marks appended, and the
//! fit costs the same at any length. `collector summary` reads the same points (one fold over the
//! marks, whatever the chunks they came in), so the terminal, the page and the summary agree. Runs
//! of up to [`FIT_MARKS_MAX`] marks a stage (every program of the zoo, every recorded trace) are
//! fitted on all of them, as before.

/// Marks of one stage a fit reads at most (past it, a block's last one stands for the block).
pub const FIT_MARKS_MAX: usize = 4096;

/// Distinct values of a sequence that is non-decreasing in a normal run, counted as they come:
/// the values that exceed everything before them, which is exact for non-decreasing sequences and
/// for restarts that replay earlier steps, and never over-counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DistinctSteps {
    highest_step: Option<u64>,
    distinct_steps: usize,
}

impl DistinctSteps {
    /// `step` counted.
    pub fn see(&mut self, step: u64) {
        if self.highest_step.is_none_or(|h| step > h) {
            self.highest_step = Some(step);
            self.distinct_steps += 1;
        }
    }

    /// The distinct steps seen.
    pub fn count(&self) -> usize {
        self.distinct_steps
    }
}

/// One stage's marks on the clock as its fit reads them, kept as marks arrive.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FitMarks {
    /// The marks kept, in mark order: the stage's first, then all the others or, once thinned,
    /// the last of each run of marks in one block.
    marks: Vec<u32>,
    /// Each kept mark's position on the clock.
    positions: Vec<u64>,
    /// `None` while every mark is kept; else the blocks' size, as a power of two.
    level: Option<u32>,
    /// The distinct positions of every mark.
    distinct_positions: DistinctSteps,
}

impl FitMarks {
    /// Mark number `mark`, at `position` on the clock, appended.
    pub fn push(&mut self, mark: u32, position: u64) {
        self.distinct_positions.see(position);
        let first = self.positions.first().copied().unwrap_or(0);
        if let Some(level) = self.level
            && self.marks.len() > 1
            && let (Some(last_mark), Some(last_position)) =
                (self.marks.last_mut(), self.positions.last_mut())
            && block(first, *last_position, level) == block(first, position, level)
        {
            // Still in the last kept mark's block: this one is the block's last so far.
            (*last_mark, *last_position) = (mark, position);
            return;
        }
        self.marks.push(mark);
        self.positions.push(position);
        // Level 64 is one block of every position (a corrupt trace's steps 2^63 apart): the
        // first mark and the last.
        while self.marks.len() > FIT_MARKS_MAX && self.level.is_none_or(|l| l < u64::BITS) {
            self.thin(self.level.map_or(0, |l| l + 1));
        }
    }

    /// Every kept mark after the first replaced, in each run of them in one block of `level`, by
    /// the run's last: what pushing the same marks at `level` would have kept (a run at a level
    /// lies within one run of the level below).
    fn thin(&mut self, level: u32) {
        let mut kept = 1;
        let first = self.positions.first().copied().unwrap_or(0);
        for i in 1..self.marks.len() {
            let (mark, position) = (self.marks[i], self.positions[i]);
            let last = self.positions[kept - 1];
            if kept > 1 && block(first, last, level) == block(first, position, level) {
                kept -= 1;
            }
            self.marks[kept] = mark;
            self.positions[kept] = position;
            kept += 1;
        }
        self.marks.truncate(kept);
        self.positions.truncate(kept);
        self.level = Some(level);
    }

    /// The marks a fit reads, in mark order.
    pub fn marks(&self) -> &[u32] {
        &self.marks
    }

    /// Whether marks were left out (there were more than [`FIT_MARKS_MAX`]).
    pub fn thinned(&self) -> bool {
        self.level.is_some()
    }

    /// How many positions one kept mark stands for: 1 while every mark is kept or each
    /// position's last stands for it (several marks a step), else its block's size.
    pub fn positions_per_point(&self) -> u64 {
        self.level
            .map_or(1, |l| 1u64.checked_shl(l).unwrap_or(u64::MAX))
    }

    /// Distinct positions of all the stage's marks on the clock, kept or not.
    pub fn distinct_positions(&self) -> usize {
        self.distinct_positions.count()
    }
}

/// The block of `position` at `level`: blocks of 2^level positions from `first`, the first
/// mark's (one block of every position at level 64).
fn block(first: u64, position: u64, level: u32) -> u64 {
    position
        .saturating_sub(first)
        .checked_shr(level)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The marks kept of `positions` pushed one by one.
    fn kept(positions: &[u64]) -> FitMarks {
        let mut marks = FitMarks::default();
        for (i, &p) in positions.iter().enumerate() {
            marks.push(i as u32, p);
        }
        marks
    }

    #[test]
    fn every_mark_up_to_the_bound_then_the_first_and_each_block_s_last() {
        // Two marks a step: all of them while they fit.
        let steps: Vec<u64> = (0..FIT_MARKS_MAX as u64).map(|i| 100 + i / 2).collect();
        let all = kept(&steps);
        assert_eq!(all.marks().len(), FIT_MARKS_MAX);
        assert_eq!(all.positions_per_point(), 1);
        assert_eq!(all.distinct_positions(), FIT_MARKS_MAX / 2);
        // One more: a step's last mark each (blocks of one step), the first mark kept.
        let mut more = steps.clone();
        more.push(100 + FIT_MARKS_MAX as u64 / 2);
        let thinned = kept(&more);
        assert_eq!(thinned.positions_per_point(), 1);
        assert_eq!(thinned.marks()[..3], [0, 1, 3]);
        assert_eq!(thinned.marks().len(), FIT_MARKS_MAX / 2 + 2);
        // Nearly eight times as many steps, one mark each: blocks of eight steps, each block's
        // last, the first mark its own (so that a block more, the blocks are of 16).
        let steps = 8 * FIT_MARKS_MAX as u64 - 8;
        let long: Vec<u64> = (0..steps).collect();
        let thinned = kept(&long);
        assert_eq!(thinned.positions_per_point(), 8);
        assert_eq!(thinned.marks()[..4], [0, 7, 15, 23]);
        assert_eq!(u64::from(*thinned.marks().last().unwrap()), steps - 1);
        assert_eq!(thinned.distinct_positions() as u64, steps);
        assert_eq!(thinned.marks().len(), FIT_MARKS_MAX);
        let longer: Vec<u64> = (0..steps + 1).collect();
        assert_eq!(kept(&longer).positions_per_point(), 16);
    }

    #[test]
    fn a_step_counted_again_keeps_its_marks_apart() {
        // A restart replays steps 4 096 to 8 191 after 12 287: its marks are their own runs.
        let mut positions: Vec<u64> = (0..3 * FIT_MARKS_MAX as u64).collect();
        positions.extend(FIT_MARKS_MAX as u64..2 * FIT_MARKS_MAX as u64);
        let thinned = kept(&positions);
        assert!(thinned.marks().len() <= FIT_MARKS_MAX);
        assert_eq!(thinned.distinct_positions(), 3 * FIT_MARKS_MAX);
        let last = thinned.marks().len() - 1;
        assert_eq!(thinned.marks()[last] as usize, positions.len() - 1);
        // The replayed steps' marks are blocks of their own after those of steps 8 192 on, not
        // merged into the earlier blocks of the same steps.
        let replayed = thinned
            .marks()
            .iter()
            .filter(|&&m| m as usize >= 3 * FIT_MARKS_MAX)
            .count();
        assert_eq!(
            replayed as u64,
            FIT_MARKS_MAX as u64 / thinned.positions_per_point()
        );
    }

    #[test]
    fn steps_2_63_apart_are_one_block() {
        // A corrupt trace's steps alternating across 2^63: at level 64, the first and the last.
        let positions: Vec<u64> = (0..3 * FIT_MARKS_MAX as u64)
            .map(|i| if i % 2 == 0 { i } else { u64::MAX - i })
            .collect();
        let thinned = kept(&positions);
        assert_eq!(thinned.marks(), [0, 3 * FIT_MARKS_MAX as u32 - 1]);
        assert_eq!(thinned.positions_per_point(), u64::MAX);
    }

    proptest! {
        /// The fold's marks are the same whatever the level they were thinned through: pushed
        /// one by one, they equal those of the same positions thinned at once to its level.
        #[test]
        fn thinning_in_steps_is_thinning_at_once(
            gaps in proptest::collection::vec(0u64..4, FIT_MARKS_MAX..3 * FIT_MARKS_MAX),
            back in proptest::option::of(0usize..3 * FIT_MARKS_MAX),
        ) {
            let mut positions: Vec<u64> = gaps
                .iter()
                .scan(7u64, |p, g| {
                    *p += g;
                    Some(*p)
                })
                .collect();
            if let Some(at) = back.filter(|b| *b < positions.len()) {
                let restart = positions[at] / 2;
                positions.iter_mut().skip(at).for_each(|p| *p -= restart);
            }
            let folded = kept(&positions);
            prop_assert!(folded.marks().len() <= FIT_MARKS_MAX);
            if let Some(level) = folded.level {
                let mut at_once = FitMarks {
                    marks: (0..positions.len() as u32).collect(),
                    positions: positions.clone(),
                    ..FitMarks::default()
                };
                at_once.thin(level);
                prop_assert_eq!(&folded.marks, &at_once.marks);
                prop_assert_eq!(&folded.positions, &at_once.positions);
                // The smallest level that keeps them under the bound: one less keeps more.
                let mut below = FitMarks {
                    marks: (0..positions.len() as u32).collect(),
                    positions: positions.clone(),
                    ..FitMarks::default()
                };
                if level > 0 {
                    below.thin(level - 1);
                }
                prop_assert!(below.marks.len() > FIT_MARKS_MAX);
            } else {
                prop_assert_eq!(folded.marks().len(), positions.len());
            }
        }
    }
}

//! One protocol for every pass over a trace's marks or rows that a live view keeps from one
//! analysis to the next ([`Fold`]): folded over what the trace holds, and extended with what was
//! appended, it equals the fold made anew of the grown trace. [`crate::Prepared`] keeps one of
//! each and brings them all up to a grown trace in one loop ([`bring_up`]); a property test
//! (`prepared.rs`) cuts synthetic traces anywhere and holds every fold extended from the cut to
//! the one made whole.

use std::fmt::Debug;

use crate::marks::StageIndex;
use crate::metrics::MarkValues;
use oomscope_format::Trace;

/// What every fold reads: the trace as it stands, each metric's value at its marks and each
/// mark's stage (found once for all folds), and how many marks have values that will not change
/// (a mark ahead of its readings gets its values when they arrive).
#[derive(Debug, Clone, Copy)]
pub struct FoldInput<'a> {
    /// The trace.
    pub trace: &'a Trace,
    /// Each metric's value at the marks.
    pub values: &'a MarkValues,
    /// Each mark's stage.
    pub stages: &'a StageIndex,
    /// The marks whose values are settled.
    pub settled: usize,
}

/// A pass over a trace kept as the trace grows.
pub trait Fold: Debug {
    /// Begins again: the fold of nothing yet, for `input`'s trace (its metrics, its stages).
    fn clear(&mut self, input: &FoldInput<'_>);
    /// Folds in what `input` holds beyond what was folded (a fold that reads something the
    /// trace no longer has, fewer marks or rows, or other counters, begins again itself).
    fn extend(&mut self, input: &FoldInput<'_>);
    /// Whether what was folded is stale once the marks' values changed from mark `changed` on
    /// (0: the metrics themselves changed, a counter's first readings): a fold that read those
    /// values begins again. Never, for a fold that reads no mark's values.
    fn stale(&self, changed: usize) -> bool {
        let _ = changed;
        false
    }
}

/// [`Fold::stale`] of a fold that has read the values of its first `marks_read` marks.
pub fn values_changed(marks_read: usize, changed: usize) -> bool {
    changed == 0 || changed < marks_read
}

/// Brings every fold up to `input`: those that read values of marks from `changed` on (the
/// first mark whose values changed since the last time) begin again, then each folds in what
/// it has not read.
pub fn bring_up(folds: &mut [&mut dyn Fold], input: &FoldInput<'_>, changed: usize) {
    for fold in folds.iter_mut() {
        if fold.stale(changed) {
            fold.clear(input);
        }
        fold.extend(input);
    }
}

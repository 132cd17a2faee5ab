//! What the fits of a stage share: a mark's contribution ([`Point`]), what every fit of one
//! metric is judged against ([`FitContext`]), and the order statistics they read.

use super::growth_fit::LimitBasis;

/// One mark's contribution to a fit.
#[derive(Debug, Clone, Copy)]
pub(super) struct Point {
    pub(super) mark: usize,
    pub(super) step: u64,
    pub(super) value: u64,
    pub(super) t_us: u64,
    /// Its mark's epoch: an epoch's end between two points is a transition, as an eval is.
    pub(super) epoch: u32,
}

/// What every fit of one metric shares.
pub(super) struct FitContext<'a> {
    pub(super) limit: Option<(u64, LimitBasis)>,
    pub(super) min_steps: usize,
    pub(super) died_of_oom: bool,
    pub(super) outside_train: &'a [u32],
    /// The tree's file-backed pages, for a host metric whose trace records them.
    pub(super) file_pages: Option<oomscope_format::CounterId>,
    /// The metric is host memory.
    pub(super) host: bool,
    /// The hooks counted live tensors growing somewhere in the run (HELD records).
    pub(super) tensors_counted_growing: bool,
    /// What the hooks' counts at epoch starts found kept once an epoch (HELD rows of kind
    /// `objects` that gained fewer items than steps: the median bytes of one), 0 without.
    pub(super) kept_an_epoch_bytes: f64,
    /// The workers whose private memory grew (see [`crate::workers::growing_workers`]).
    pub(super) workers: &'a [crate::workers::WorkerGrowth],
}

/// The value at `len / 2` of `values` sorted (the upper of two middles), found without sorting
/// them all (a day's fit has 240 000); `None` when empty.
pub(super) fn upper_median(values: &mut [f64]) -> Option<f64> {
    let middle = values.len() / 2;
    (!values.is_empty()).then(|| *values.select_nth_unstable_by(middle, f64::total_cmp).1)
}

/// Distinct values of `steps` ([`crate::fit_marks::DistinctSteps`]).
pub(super) fn distinct_steps(steps: impl Iterator<Item = u64>) -> usize {
    let mut distinct = crate::fit_marks::DistinctSteps::default();
    steps.for_each(|step| distinct.see(step));
    distinct.count()
}

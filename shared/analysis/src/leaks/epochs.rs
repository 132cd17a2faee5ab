//! Memory kept once an epoch: a stage's memory fitted on the epochs' clock (each epoch's floor,
//! a line through them), flat within epochs and rising at their ends.

use super::growth_fit::{GrowthFit, LeakEvidence, LeakVerdict, NotALeak};
use super::points::{FitContext, Point, upper_median};
use super::projection::{highest_in_step, project};
use super::verdict::{MIN_GROWTH_BYTES, SHORT_MIN_GROWTH_FRACTION_OF_LIMIT};
use crate::clocks::Clock;
use crate::metrics::MarkValues;
use oomscope_format::Trace;

/// Epochs a fit on the epoch clock needs.
pub const EPOCH_MIN: usize = 4;

/// R² the epochs' line needs: what an epoch keeps is the same each time.
pub const EPOCH_R_SQUARED: f64 = 0.9;

/// Share of an epoch's growth that must come at its end, not within it (the medians over the
/// epochs of each).
pub const EPOCH_END_SHARE: f64 = 0.75;

/// What the hooks' counts at epoch starts found kept an epoch, as a share of the epochs' line,
/// that places the rise at the epochs' ends whatever the readings within them do.
pub const EPOCH_COUNTED_SHARE: f64 = 0.5;

/// The median bytes of the HELD rows the hooks' counts at epoch starts sent (on the epochs'
/// clock), 0 without.
pub(super) fn kept_an_epoch_bytes(trace: &Trace) -> f64 {
    let mut bytes: Vec<u64> = trace
        .held
        .iter()
        .filter(|h| h.clock == oomscope_format::HeldClock::Epoch)
        .map(|h| h.bytes)
        .collect();
    bytes.sort_unstable();
    bytes.get(bytes.len() / 2).map_or(0.0, |b| *b as f64)
}

/// The fit of one stage's memory on the epoch clock: each epoch's median at the stage, a line
/// through them. A leak when there are [`EPOCH_MIN`] epochs or more, the line is straight
/// ([`EPOCH_R_SQUARED`]), with no eval between two epochs (what evals keep is theirs), rising by
/// the short run's growth floor
/// ([`SHORT_MIN_GROWTH_FRACTION_OF_LIMIT`] of the limit, at least [`MIN_GROWTH_BYTES`]), and
/// what an epoch's end adds is at least [`EPOCH_END_SHARE`] of what the epoch adds in all (the
/// medians of the rise across an end and within an epoch), or the hooks counted at epoch starts
/// at least [`EPOCH_COUNTED_SHARE`] of the line's slope kept an epoch. `None` without epochs in the marks.
pub(super) fn fit_epochs(
    trace: &Trace,
    values: &MarkValues,
    stage: &str,
    index: usize,
    points: &[Point],
    context: &FitContext<'_>,
) -> Option<GrowthFit> {
    // The points of each epoch, in order.
    let mut epochs: Vec<(u32, Vec<&Point>)> = Vec::new();
    for p in points {
        let epoch = p.epoch;
        match epochs.last_mut() {
            Some((e, list)) if *e == epoch => list.push(p),
            _ => epochs.push((epoch, vec![p])),
        }
    }
    if epochs.len() < EPOCH_MIN || epochs.windows(2).any(|w| w[1].0 <= w[0].0) {
        return None;
    }
    // An eval between two epochs (a validation at each epoch's end, Lightning's and the
    // Trainer's default): what rises there is what the evals keep, `eval-retains-memory`'s story.
    let outside = context.outside_train;
    if epochs.windows(2).any(|w| {
        let (a, b) = (w[0].1[w[0].1.len() - 1], w[1].1[0]);
        outside[b.mark] != outside[a.mark + 1]
    }) {
        return None;
    }
    // Each epoch's floor: what it kept stays under everything its steps add and free (host
    // memory at a stage moves by whole buffers from step to step: 32 MiB up and down in an MLP
    // of 32 MiB of weights, as much as an epoch keeps).
    let floor_of = |list: &[&Point]| list.iter().map(|p| p.value).min().unwrap_or(0);
    let medians: Vec<Point> = epochs
        .iter()
        .map(|(epoch, list)| {
            let last = list[list.len() - 1];
            Point {
                mark: last.mark,
                step: u64::from(*epoch),
                value: floor_of(list),
                t_us: last.t_us,
                epoch: *epoch,
            }
        })
        .collect();
    let xy: Vec<(f64, f64)> = medians
        .iter()
        .map(|p| (p.step as f64, p.value as f64))
        .collect();
    let line = crate::fit::least_squares(&xy)?;
    let (first, last) = (medians.first()?, medians.last()?);
    let span = (last.step - first.step) as f64;
    let growth = line.slope * span;
    // What came within epochs (the floor of each epoch's second half against its first half's)
    // and at their ends (an epoch's first half's floor against the second half's of the one
    // before): medians, so that one noisy epoch of a host metric does not decide.
    let halves = |list: &[&Point]| {
        let mid = list.len().div_ceil(2);
        (floor_of(&list[..mid]) as f64, floor_of(&list[mid..]) as f64)
    };
    let within_each: Vec<f64> = epochs
        .iter()
        .filter(|(_, list)| list.len() >= 2)
        .map(|(_, list)| {
            let (first, second) = halves(list);
            second - first
        })
        .collect();
    let between_each: Vec<f64> = epochs
        .windows(2)
        .filter(|w| w[0].1.len() >= 2 && w[1].1.len() >= 2)
        .map(|w| halves(&w[1].1).0 - halves(&w[0].1).1)
        .collect();
    if within_each.is_empty() || between_each.is_empty() {
        return None;
    }
    let median = |v: &[f64]| upper_median(&mut v.to_vec()).unwrap_or(0.0);
    let within: f64 = within_each.iter().sum();
    let at_ends = median(&between_each);
    let floor = match context.limit {
        Some((l, _)) => {
            MIN_GROWTH_BYTES.max((l as f64 * SHORT_MIN_GROWTH_FRACTION_OF_LIMIT) as u64)
        }
        None => MIN_GROWTH_BYTES,
    };
    // The rise comes at the epochs' ends: by the readings, or (host memory whose heap moves by
    // whole buffers within an epoch) by what the hooks counted kept at each epoch start.
    let at_the_ends = (at_ends > 0.0
        && median(&within_each).max(0.0) * EPOCH_END_SHARE <= (1.0 - EPOCH_END_SHARE) * at_ends)
        || context.kept_an_epoch_bytes >= EPOCH_COUNTED_SHARE * line.slope;
    let is_leak = line.slope > 0.0
        && line.r_squared >= EPOCH_R_SQUARED
        && growth >= floor as f64
        && at_the_ends;
    let projection = is_leak
        .then(|| {
            context.limit.map(|(limit_bytes, limit_basis)| {
                let current = highest_in_step(trace, values, index, last.mark);
                project(limit_bytes, limit_basis, current, line.slope, first, last)
            })
        })
        .flatten();
    let growth_bytes = growth.clamp(i64::MIN as f64, i64::MAX as f64) as i64;
    Some(GrowthFit {
        stage: stage.to_owned(),
        metric: values.key(index),
        clock: Clock::Epoch,
        host_memory: values.key(index).is_host(),
        slope_bytes_per_step: line.slope,
        intercept_bytes: line.intercept,
        r_squared: line.r_squared,
        train_r_squared: line.r_squared,
        points: medians.len(),
        points_dropped: 0,
        steps: medians.len(),
        steps_per_point: 1,
        first_step: first.step,
        last_step: last.step,
        growth_bytes,
        min_leak_growth_bytes: floor,
        train_slope_bytes_per_step: 0.0,
        train_growth_bytes: within.clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        transition_growth_bytes: growth_bytes,
        transition_excess_bytes: growth_bytes,
        transitions: medians.len() - 1,
        pauses: 0,
        epoch_ends: medians.len() - 1,
        sustained: true,
        verdict: if is_leak {
            LeakVerdict::Leak(LeakEvidence::Short)
        } else if line.slope > 0.0 {
            LeakVerdict::Not(NotALeak::TooLittleEvidence)
        } else {
            LeakVerdict::Not(NotALeak::NotRising)
        },
        staircase_creep: false,
        copied_by_workers: false,
        workers_copied_bytes: 0,
        projection,
        file_backed_growth_bytes: None,
    })
}

//! The growth of a stage's points split into what the training steps kept and what the
//! transitions between them kept (evals, epoch ends, pauses such as a checkpoint save): memory
//! that rises only at the transitions is a staircase, not a per-step leak.

use super::points::{FitContext, Point, upper_median};

/// Growth continues when the second half of the points rises at least this share of the whole
/// fit's slope (a warm-up rises, then stays flat: its second half does not).
pub const SUSTAINED_SHARE: f64 = 0.5;

/// Two consecutive training points further apart in time than this many times the median time
/// per step have a pause between them (a checkpoint save, an eval that did not mark): growth
/// across it belongs to the transition, not to the steps.
pub const PAUSE_FACTOR: f64 = 3.0;

/// A pause is a transition only when memory grew across it by more than this many times what a
/// training step adds (plus [`PAUSE_KEPT_MIN_BYTES`]): growth at the steps' own rate is theirs.
pub const PAUSE_KEPT_FACTOR: f64 = 2.0;

/// See [`PAUSE_KEPT_FACTOR`]: the noise a pause may add and still be a step like the others.
pub const PAUSE_KEPT_MIN_BYTES: f64 = (1 << 20) as f64;

/// At most this many steps after an eval or a pause count as its settling (see `split_growth`).
pub const SETTLE_STEPS: u64 = 3;

/// Growth of consecutive fitted points, split into what the training steps kept and what the
/// transitions between them kept.
pub(super) struct GrowthSplit {
    /// Growth per step between points with no transition between them (0 without such pairs).
    pub(super) train_slope: f64,
    /// Growth between those points, in all.
    pub(super) train_growth: f64,
    /// Steps counted with the transitions (across them and settling after them).
    pub(super) transition_steps: u64,
    /// Growth across transitions.
    pub(super) transition_growth: f64,
    /// Transitions crossed.
    pub(super) transitions: usize,
    /// Of them, pauses (no other phase between the points, no epoch change).
    pub(super) pauses: usize,
    /// Of them, epoch ends with no eval between the points.
    pub(super) epoch_ends: usize,
    /// The points as `(step, value)` with the growth of every transition before each taken
    /// out: the training steps' own series, a staircase flattened.
    pub(super) within_train: Vec<(f64, f64)>,
}

/// Walks consecutive points (in step order): a pair with a non-training mark between them, or
/// a pause longer than [`PAUSE_FACTOR`] × the median time per step across which memory grew
/// more than the steps' own rate ([`PAUSE_KEPT_FACTOR`]), is a transition; the pair after it
/// (the first step back in training) is counted with it.
pub(super) fn split_growth(points: &[&Point], outside_train: &[u32]) -> GrowthSplit {
    let mut per_step_us: Vec<f64> = points
        .windows(2)
        .filter(|w| w[1].step > w[0].step)
        .map(|w| w[1].t_us.saturating_sub(w[0].t_us) as f64 / (w[1].step - w[0].step) as f64)
        .collect();
    let median_us = upper_median(&mut per_step_us);
    let is_paused = |a: &Point, b: &Point| {
        let steps = b.step.saturating_sub(a.step);
        steps > 0
            && median_us.is_some_and(|m| {
                b.t_us.saturating_sub(a.t_us) as f64 / steps as f64 > PAUSE_FACTOR * m.max(1.0)
            })
    };
    // What a training step itself adds (the median over unpaused pairs): a pause that grew no
    // more than that kept nothing of its own (the hooks counting tensors, a garbage collection
    // in the middle of a step) and is a step like the others.
    let mut step_deltas: Vec<f64> = points
        .windows(2)
        .filter(|w| w[1].step > w[0].step && !is_paused(w[0], w[1]))
        .filter(|w| {
            outside_train[w[1].mark] == outside_train[w[0].mark + 1] && w[0].epoch == w[1].epoch
        })
        .map(|w| (w[1].value as f64 - w[0].value as f64) / (w[1].step - w[0].step) as f64)
        .collect();
    let step_delta = upper_median(&mut step_deltas).unwrap_or(0.0).max(0.0);
    let (mut train_growth, mut train_steps) = (0.0, 0u64);
    let (mut transition_growth, mut transitions, mut transition_steps) = (0.0, 0, 0u64);
    let (mut pauses, mut epoch_ends) = (0, 0);
    let mut after_transition = false;
    let mut settle_steps = 0u64;
    let mut offset = 0.0;
    let mut within_train = Vec::with_capacity(points.len());
    within_train.extend(points.first().map(|p| (p.step as f64, p.value as f64)));
    for w in points.windows(2) {
        let (a, b) = (w[0], w[1]);
        let delta = b.value as f64 - a.value as f64;
        let steps = b.step.saturating_sub(a.step);
        let other_phase = outside_train[b.mark] != outside_train[a.mark + 1] || a.epoch != b.epoch;
        let paused = is_paused(a, b)
            && delta > PAUSE_KEPT_FACTOR * step_delta * steps as f64 + PAUSE_KEPT_MIN_BYTES;
        if other_phase || paused {
            transition_growth += delta;
            transitions += 1;
            let eval_between = outside_train[b.mark] != outside_train[a.mark + 1];
            if !other_phase {
                pauses += 1;
            } else if !eval_between {
                epoch_ends += 1;
            }
            transition_steps += steps;
            after_transition = true;
            settle_steps = 0;
            offset += delta;
        } else if after_transition
            && settle_steps < SETTLE_STEPS
            && (delta > 0.0 || settle_steps == 0)
        {
            // The steps right after a transition settle it: what the transition kept shows in
            // the allocator's reserved bytes once training next reaches its high point, and in
            // RSS over the next steps or two as the C allocator's heap takes in what an eval
            // left; the settling ends at the first step that does not grow.
            transition_growth += delta;
            transition_steps += steps;
            offset += delta;
            settle_steps += steps.max(1);
        } else {
            after_transition = false;
            train_growth += delta;
            train_steps += steps;
        }
        within_train.push((b.step as f64, b.value as f64 - offset));
    }
    GrowthSplit {
        train_growth,
        transition_steps,
        train_slope: if train_steps > 0 {
            train_growth / train_steps as f64
        } else {
            0.0
        },
        transition_growth,
        transitions,
        pauses,
        epoch_ends,
        within_train,
    }
}

/// Whether host memory's growth inside the training steps is the creep that follows what the
/// transitions kept, not a leak of its own: the training steps' rate, over all `span_steps`,
/// adds less than the evals or pauses kept beyond that rate (the steps counted with a transition
/// grow at the training rate too: a leak loses them to the transitions), and the hooks counted no
/// live tensors growing.
///
/// Why: what an eval keeps on the host (outputs appended to a list) sits in the C allocator's
/// heap between the blocks training frees and allocates again, so after each eval the RSS creeps
/// up over the training steps with no object kept, more when threads contend for glibc's arenas.
/// Measured on the Lightning program that never clears `validation_step_outputs`, under a busy
/// test suite: 2.2–3.4 MiB/step inside the training steps against 690–860 MiB kept at five
/// evals, R² 0.81–0.87 for the training steps' own series, which read as "Memory leak: +8.41
/// MiB/step" beside the eval finding. A leak of its own grows the training steps at least as
/// much as the transitions (or the hooks count its tensors); when the evals are fixed, what is
/// left shows as one.
pub(super) fn staircase_creep(
    split: &GrowthSplit,
    span_steps: f64,
    context: &FitContext<'_>,
) -> bool {
    let kept_beyond_the_rate =
        split.transition_growth - split.train_slope.max(0.0) * split.transition_steps as f64;
    context.host
        && split.transitions > 0
        && split.train_slope * span_steps < kept_beyond_the_rate
        && !context.tensors_counted_growing
}

/// Whether the second half of the points (by step) still rises at [`SUSTAINED_SHARE`] of the
/// whole fit's slope.
pub(super) fn sustained(points: &[&Point], slope: f64) -> bool {
    let xy: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.step as f64, p.value as f64))
        .collect();
    sustained_xy(&xy, slope)
}

/// [`sustained`] of `(step, value)` pairs.
pub(super) fn sustained_xy(xy: &[(f64, f64)], slope: f64) -> bool {
    crate::fit::least_squares(&xy[xy.len() / 2..])
        .is_some_and(|l| l.slope >= SUSTAINED_SHARE * slope)
}

//! Memory that grows step after step: leaks, and when they will kill the run.
//!
//! A healthy training loop returns to the same memory at the same point of every step. A loop
//! that keeps something per step (a loss tensor appended to a list without `.item()`, a growing
//! cache, a hook that stores outputs) climbs a little each step and dies hours later. Comparing
//! the same stage across steps removes the within-step sawtooth, and a robust line fit
//! ([`robust_line`]) ignores the odd step that ran eval or flushed the cache. A fit is called a
//! leak only when it is long, straight, rising and large: see [`leak_fits`].
//!
//! Only training marks (`Train`, or `Unknown` when the program did not say) are fitted; eval
//! marks restart their own pattern and are analysed by the phase transitions. A run that never
//! trains (a serving or inference loop: every forward under `eval()`, `no_grad` or
//! `inference_mode`, no optimizer) has no steps; its clock is the forward ([`Clock`]): each
//! outermost forward counts one, and memory kept per request shows per forward.

use serde::Serialize;

pub use crate::clocks::Clock;
use crate::fit::robust_line;
use crate::fit_marks::FitMarks;
use crate::marks::is_train;
use crate::metrics::{
    MarkValues, MetricKey, counter_with_data, host_in_use, primary_metric, reserved_metric,
};
use crate::prepared::Prepared;
use oomscope_format::{CounterKind, Trace};

/// Default for the least number of distinct steps a fit needs before it can be called a leak.
pub const DEFAULT_MIN_STEPS: usize = 20;

/// A fit must explain at least this share of the variance to be called a leak: growth must be
/// steady, not a few jumps.
pub const MIN_R_SQUARED: f64 = 0.8;

/// Growth below this over the fitted span is never called a leak (allocator rounding, small
/// caches warming up).
///
/// This floor and its variants (a fit's `min_leak_growth_bytes`) were set on this module's
/// simulated runs and `train.py --leak list` (python_hooks.rs); checked on the zoo: its seven
/// leaking programs grow 1.4–9.5 times their floor, and the steady fits of its clean programs at
/// most 0.37 times it (`gnn_clean.py`; `scripts/zoo_thresholds.py`).
pub const MIN_GROWTH_BYTES: u64 = 64 << 20;

/// Growth below this share of the memory limit (device total, or host memory) is not a leak...
pub const MIN_GROWTH_FRACTION_OF_LIMIT: f64 = 0.01;

/// ...unless the growth is this steady (R²) over at least [`STEADY_MIN_STEPS`] distinct steps
/// and still rising in its second half (sustained): 4 MiB kept every step for 30 steps is a leak
/// on any machine, even though 120 MiB is under 1% of a 24 GiB host. Then only
/// [`MIN_GROWTH_BYTES`] applies.
pub const STEADY_R_SQUARED: f64 = 0.98;

/// See [`STEADY_R_SQUARED`]. Steps the fit kept: the robust fit drops a warm-up step or two, so
/// at 30 a real 30-step PyTorch loop keeping 4 MiB a step (R² 0.999, +116 MiB over 28 kept
/// steps, under both floors on a 24 GiB host) read "no leak across steps". 20 steps stay too
/// short to call steady.
pub const STEADY_MIN_STEPS: usize = 25;

/// A short run can show a leak too: most OOM runs die early. With at least this many distinct
/// steps, a fit with R² ≥ [`SHORT_R_SQUARED`] whose growth continues into its second half
/// ("sustained": not a warm-up that levelled off) and reaches [`SHORT_MIN_GROWTH_FRACTION_OF_LIMIT`]
/// of the limit (and [`MIN_GROWTH_BYTES`]) is a leak.
pub const SHORT_MIN_STEPS: usize = 8;

/// See [`SHORT_MIN_STEPS`].
pub const SHORT_R_SQUARED: f64 = 0.95;

/// See [`SHORT_MIN_STEPS`].
pub const SHORT_MIN_GROWTH_FRACTION_OF_LIMIT: f64 = 0.005;

/// A run that died of an out-of-memory error of the same memory (GPU for device metrics, host
/// for RSS) after sustained growth needs only this many steps, with R² ≥ [`MIN_R_SQUARED`] and
/// the short-run growth floor: the OOM is the evidence the growth mattered.
pub const BEFORE_OOM_MIN_STEPS: usize = 5;

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

/// Which evidence made a fit a leak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakEvidence {
    /// At least the configured number of steps (default [`DEFAULT_MIN_STEPS`]).
    Long,
    /// A short, very straight, sustained fit ([`SHORT_MIN_STEPS`]).
    Short,
    /// Sustained growth that ended in an out-of-memory error ([`BEFORE_OOM_MIN_STEPS`]).
    BeforeOom,
}

/// Which limit a projection runs into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitBasis {
    /// The GPU's total memory.
    DeviceTotal,
    /// Host memory: the last `MemAvailable` plus the RSS at that time.
    HostMemory,
}

/// When a leak fills memory, extrapolating the fitted line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FullProjection {
    /// The limit.
    pub limit_bytes: u64,
    /// What the limit is.
    pub limit_basis: LimitBasis,
    /// Highest value of the metric at any training mark of the last fitted step: the leaked
    /// bytes add to every stage, so the stage that is highest fills memory first.
    pub current_bytes: u64,
    /// Steps until the limit at the fitted slope (0 when already there).
    pub steps_remaining: u64,
    /// The step at which memory is full.
    pub full_at_step: u64,
    /// Mean wall time per step over the fitted marks.
    pub us_per_step: Option<f64>,
    /// Wall time until memory is full.
    pub time_to_full_us: Option<u64>,
}

/// A line fitted to one metric at one stage across steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GrowthFit {
    /// Stage name.
    pub stage: String,
    /// Metric label.
    pub metric: MetricKey,
    /// What the `*_step` fields count: training steps, or forwards of a run that never trains.
    pub clock: Clock,
    /// True when the metric is host memory (RSS) rather than GPU memory.
    pub host_memory: bool,
    /// Fitted growth per step.
    pub slope_bytes_per_step: f64,
    /// Fitted value at step 0.
    pub intercept_bytes: f64,
    /// R² of the final fit.
    pub r_squared: f64,
    /// R² of the training steps' own series (the transitions' growth taken out; equal to
    /// `r_squared` without transitions): what decides a leak.
    pub train_r_squared: f64,
    /// Marks the final fit used.
    pub points: usize,
    /// Marks dropped as outliers.
    pub points_dropped: usize,
    /// Distinct steps among the marks used; of a stage thinned for its fit (see
    /// [`crate::fit_marks`]), the steps they stand for (`steps_per_point` each, no more than the
    /// stage's steps).
    pub steps: usize,
    /// How many steps one point stands for: 1, unless the stage had more marks than
    /// [`crate::fit_marks::FIT_MARKS_MAX`] over more steps and was fitted on the last of each
    /// block of this many steps.
    pub steps_per_point: u64,
    /// First step used.
    pub first_step: u64,
    /// Last step used.
    pub last_step: u64,
    /// Fitted growth from the first to the last step.
    pub growth_bytes: i64,
    /// Growth needed to call it a leak.
    pub min_leak_growth_bytes: u64,
    /// Growth between training points with nothing else between them, per step: what the steps
    /// themselves keep. Equal to the slope when there are no transitions.
    pub train_slope_bytes_per_step: f64,
    /// Growth between training points with nothing else between them, in all.
    pub train_growth_bytes: i64,
    /// Growth across transitions (an eval, or a pause such as a checkpoint save, between two
    /// consecutive training points): what the transitions keep.
    pub transition_growth_bytes: i64,
    /// Transitions between the fitted points.
    pub transitions: usize,
    /// Of them, pauses: a step that took [`PAUSE_FACTOR`] times the median and grew (a
    /// checkpoint, a collection, the hooks' count); the rest are evals and epoch ends.
    pub pauses: usize,
    /// Of them, epoch ends (the epoch changed between the two points, no eval between).
    pub epoch_ends: usize,
    /// The second half of the points still rises (see [`SUSTAINED_SHARE`]).
    pub sustained: bool,
    /// Long, straight, rising and large enough, with the growth inside training steps: see
    /// [`leak_fits`].
    pub is_leak: bool,
    /// Which evidence made it a leak.
    pub evidence: Option<LeakEvidence>,
    /// Host memory that grew within the training steps less than at the evals or pauses between
    /// them, with no live tensors counted growing: the creep of a C allocator heap that what the
    /// transitions keep has fragmented, not a leak of its own (see [`staircase_creep`]); the
    /// eval finding states it.
    pub staircase_creep: bool,
    /// Host memory whose growth the growing workers' private copies made while it grew account
    /// for (at least [`crate::workers::WORKERS_EXPLAIN_FRACTION`] of it): the copy-on-write
    /// workers' finding tells it; never a leak of its own.
    pub copied_by_workers: bool,
    /// For host memory: what the growing workers copied of their parent's pages within the fit's
    /// span (each worker's rise over the share of its readings inside it), the bytes
    /// `copied_by_workers` holds against `growth_bytes`; 0 without growing workers.
    pub workers_copied_bytes: u64,
    /// When memory is full (leaks with a known limit only).
    pub projection: Option<FullProjection>,
    /// For host memory, when the trace records the tree's file-backed pages (`host.rss_file`):
    /// how much of `growth_bytes`' span they grew. At least [`FILE_BACKED_MIN_SHARE`] of the
    /// growth is pages of memory-mapped files, which the kernel drops at will: never a leak.
    pub file_backed_growth_bytes: Option<i64>,
}

/// See [`GrowthFit::file_backed_growth_bytes`].
pub const FILE_BACKED_MIN_SHARE: f64 = 0.5;

/// One mark's contribution to a fit.
#[derive(Debug, Clone, Copy)]
struct Point {
    mark: usize,
    step: u64,
    value: u64,
    t_us: u64,
    /// Its mark's epoch: an epoch's end between two points is a transition, as an eval is.
    epoch: u32,
}

/// The metrics fitted: the primary metric, the allocator's reserved bytes, and the host RSS.
fn fitted_metrics(trace: &Trace) -> Vec<MetricKey> {
    let mut metrics: Vec<MetricKey> = Vec::new();
    let candidates = [
        primary_metric(trace),
        reserved_metric(trace),
        host_in_use(trace).map(|id| MetricKey::of_counter(trace, id)),
    ];
    for metric in candidates.into_iter().flatten() {
        if !metrics.contains(&metric) {
            metrics.push(metric);
        }
    }
    metrics
}

/// Fits every (stage, metric) pair of training marks that spans at least
/// [`BEFORE_OOM_MIN_STEPS`] distinct steps, stage by stage in first-appearance order.
///
/// The evidence a leak needs scales with its strength. A fit with a positive slope is a leak
/// when the growth inside training steps (`train_slope × span`, so that memory kept only at
/// eval or at pauses is the transitions' and not a per-step leak) reaches the growth floor, and
/// one of:
/// - **long**: ≥ `min_steps` distinct steps, R² ≥ [`MIN_R_SQUARED`], growth ≥ max([`MIN_GROWTH_BYTES`],
///   [`MIN_GROWTH_FRACTION_OF_LIMIT`] × limit), or only [`MIN_GROWTH_BYTES`] when steady
///   ([`STEADY_R_SQUARED`] over [`STEADY_MIN_STEPS`] steps);
/// - **short**: ≥ [`SHORT_MIN_STEPS`], R² ≥ [`SHORT_R_SQUARED`], sustained, growth ≥
///   max([`MIN_GROWTH_BYTES`], [`SHORT_MIN_GROWTH_FRACTION_OF_LIMIT`] × limit);
/// - **before an OOM**: ≥ [`BEFORE_OOM_MIN_STEPS`], R² ≥ [`MIN_R_SQUARED`], sustained, the short
///   growth floor, and the run died of an OOM of that memory.
///
/// `workers` are the trace's [`crate::workers::growing_workers`]: host memory their copies
/// account for is theirs, not a leak. Leaks get a [`FullProjection`] when the limit is known.
/// Linear in the number of marks.
pub fn leak_fits(
    trace: &Trace,
    prepared: &Prepared,
    workers: &[crate::workers::WorkerGrowth],
    min_steps: usize,
) -> Vec<GrowthFit> {
    let (values, stages) = (prepared.values(), prepared.stages());
    let metrics: Vec<(MetricKey, usize)> = fitted_metrics(trace)
        .into_iter()
        .filter_map(|m| values.index_of(m).map(|i| (m, i)))
        .collect();
    // The marks on the clock, each's position, and the marks off it before each: two training
    // points with a different count between them have an eval (or another phase) between them.
    // (Two points of different epochs have an epoch's end between them: `Point::epoch`.)
    let clock_marks = prepared.clock_marks();
    let clock = clock_marks.clock();
    let outside_train = clock_marks.outside_train();
    let (gpu_oom, host_oom) = died_of_oom(trace);
    // Each metric's context.
    let contexts: Vec<FitContext<'_>> = metrics
        .iter()
        .map(|&(metric, _)| {
            let host = metric.is_host();
            FitContext {
                limit: limit_of(trace, metric),
                min_steps,
                died_of_oom: if host { host_oom } else { gpu_oom },
                outside_train,
                file_pages: host
                    .then(|| counter_with_data(trace, CounterKind::HostRssFile))
                    .flatten(),
                host,
                // Counted growing across steps (or a serving program's forwards): an eval's or
                // an epoch's rows are theirs.
                tensors_counted_growing: trace.held.iter().any(|h| {
                    matches!(
                        h.clock,
                        oomscope_format::HeldClock::Step | oomscope_format::HeldClock::Forward
                    )
                }),
                kept_an_epoch_bytes: kept_an_epoch_bytes(trace),
                workers,
            }
        })
        .collect();
    // A stage's points at a time (all of a day's marks as points would take 48 MB), their marks
    // read once for every metric: a stage's marks lie far apart in a day's 67 MB of marks, and
    // reading them again per metric was most of the fits' time.
    let mut base: Vec<Point> = Vec::new();
    let mut points: Vec<Point> = Vec::new();
    let mut out = Vec::new();
    for (stage, name) in stages.names().iter().enumerate() {
        let Some(series) = clock_marks.of_stage(stage) else {
            continue;
        };
        base.clear();
        base.extend(series.marks().iter().map(|&i| {
            let i = i as usize;
            let mark = &trace.marks[i];
            Point {
                mark: i,
                step: clock_marks.position(trace, i),
                value: 0,
                t_us: mark.t_us,
                epoch: mark.epoch,
            }
        }));
        if base.is_empty() {
            continue;
        }
        for (&(_, index), context) in metrics.iter().zip(&contexts) {
            let column = values.column(index);
            points.clear();
            points.extend(base.iter().filter_map(|p| {
                Some(Point {
                    value: column.get(p.mark)?,
                    ..*p
                })
            }));
            if points.is_empty() {
                continue;
            }
            if let Some(mut fit) = fit_stage(trace, values, name, index, &points, series, context) {
                fit.clock = clock;
                let by_epoch = (clock == Clock::Step && !fit.is_leak)
                    .then(|| fit_epochs(trace, values, name, index, &points, context))
                    .flatten();
                out.push(fit);
                out.extend(by_epoch);
            }
        }
    }
    // Stage order first, then metric order.
    out
}

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
fn kept_an_epoch_bytes(trace: &Trace) -> f64 {
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
fn fit_epochs(
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
        transitions: medians.len() - 1,
        pauses: 0,
        epoch_ends: medians.len() - 1,
        sustained: true,
        is_leak,
        evidence: is_leak.then_some(LeakEvidence::Short),
        staircase_creep: false,
        copied_by_workers: false,
        workers_copied_bytes: 0,
        projection,
        file_backed_growth_bytes: None,
    })
}

/// The leak to headline: the primary metric before the others (it is the number the rest of the
/// report uses), then the one that fills memory first, then the steepest, then the straightest,
/// then the later stage in the step (end-of-step memory is where nothing of the step should
/// remain). `fits` are in stage order, metrics in priority order within a stage.
pub fn headline_leak(fits: &[GrowthFit], primary: Option<MetricKey>) -> Option<&GrowthFit> {
    let rank = |f: &GrowthFit| {
        let remaining = f
            .projection
            .as_ref()
            .map_or(u64::MAX, |p| p.steps_remaining);
        (primary != Some(f.metric), remaining)
    };
    fits.iter().filter(|f| f.is_leak).reduce(|best, f| {
        let better = rank(f).cmp(&rank(best)).then_with(|| {
            best.slope_bytes_per_step
                .total_cmp(&f.slope_bytes_per_step)
                .then(best.r_squared.total_cmp(&f.r_squared))
        });
        // Ties go to the later fit, i.e. the later stage.
        if better.is_le() { f } else { best }
    })
}

/// The memory limit a metric runs into, if known.
pub fn limit_of(trace: &Trace, metric: MetricKey) -> Option<(u64, LimitBasis)> {
    limit_with_host(trace, metric, || host_in_use(trace))
}

/// [`limit_of`], with the host's memory in use given by `in_use` (a live view keeps it from its
/// last analysis: telling PSS from RSS reads every row).
pub fn limit_with_host(
    trace: &Trace,
    metric: MetricKey,
    in_use: impl FnOnce() -> Option<oomscope_format::CounterId>,
) -> Option<(u64, LimitBasis)> {
    if metric.is_host() {
        return Some((host_limit(trace, in_use()?)?, LimitBasis::HostMemory));
    }
    let total = metric
        .device()
        .and_then(|d| trace.gpu_total_bytes(Some(d)))
        .or_else(|| trace.gpu_total_bytes(None))?;
    Some((total, LimitBasis::DeviceTotal))
}

/// What the host's memory in use (`in_use`) runs into: the last `MemAvailable` reading plus the
/// memory in use then.
fn host_limit(trace: &Trace, in_use: oomscope_format::CounterId) -> Option<u64> {
    let available = counter_with_data(trace, CounterKind::HostAvailable)?;
    let (t_us, available_bytes) = trace.samples.last_point(available)?;
    let in_use_bytes = trace.samples.value_at(in_use, t_us)?;
    Some(available_bytes.saturating_add(in_use_bytes))
}

/// Whether the run died of an out-of-memory error of the GPU, and of the host: it failed (a
/// non-zero exit, a signal, or no recorded end) and recorded such an OOM (or a probable kill).
fn died_of_oom(trace: &Trace) -> (bool, bool) {
    let failed = trace.failed();
    if !failed {
        return (false, false);
    }
    let host = trace.ooms.iter().any(|o| o.source.is_host())
        || trace.exit.is_some_and(|e| e.probable_host_oom);
    let gpu = trace.ooms.iter().any(|o| !o.source.is_host());
    (gpu, host)
}

/// What every fit of one metric shares.
struct FitContext<'a> {
    limit: Option<(u64, LimitBasis)>,
    min_steps: usize,
    died_of_oom: bool,
    outside_train: &'a [u32],
    /// The tree's file-backed pages, for a host metric whose trace records them.
    file_pages: Option<oomscope_format::CounterId>,
    /// The metric is host memory.
    host: bool,
    /// The hooks counted live tensors growing somewhere in the run (HELD records).
    tensors_counted_growing: bool,
    /// What the hooks' counts at epoch starts found kept once an epoch (HELD rows of kind
    /// `objects` that gained fewer items than steps: the median bytes of one), 0 without.
    kept_an_epoch_bytes: f64,
    /// The workers whose private memory grew (see [`crate::workers::growing_workers`]).
    workers: &'a [crate::workers::WorkerGrowth],
}

/// Fits the points of metric number `index` at one stage; `None` when they span fewer than
/// [`BEFORE_OOM_MIN_STEPS`] distinct steps (or fewer than `min_steps` when that is smaller).
fn fit_stage(
    trace: &Trace,
    values: &MarkValues,
    stage: &str,
    index: usize,
    points: &[Point],
    series: &FitMarks,
    context: &FitContext<'_>,
) -> Option<GrowthFit> {
    let &FitContext {
        limit, min_steps, ..
    } = context;
    let fewest = BEFORE_OOM_MIN_STEPS.min(min_steps).max(2);
    if distinct_steps(points.iter().map(|p| p.step)) < fewest {
        return None;
    }
    let xy: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.step as f64, p.value as f64))
        .collect();
    let robust = robust_line(&xy)?;
    let used = || {
        points
            .iter()
            .zip(&robust.kept)
            .filter(|(_, k)| **k)
            .map(|(p, _)| p)
    };
    // Of a thinned stage, the steps the points used stand for (each its block's), no more than
    // the stage has.
    let steps_per_point = series.positions_per_point();
    let steps = match series.thinned() {
        false => distinct_steps(used().map(|p| p.step)),
        true => (distinct_steps(used().map(|p| p.step)) as u64)
            .saturating_mul(steps_per_point)
            .min(series.distinct_positions() as u64) as usize,
    };
    let first = used().min_by_key(|p| (p.step, p.t_us))?;
    let last = used().max_by_key(|p| (p.step, p.t_us))?;
    let line = robust.line;
    let span_steps = (last.step - first.step) as f64;
    let growth = line.slope * span_steps;
    let kept: Vec<&Point> = used().collect();
    let split = split_growth(&kept, context.outside_train);
    // With evals or pauses between the points, the steps' own series decides: memory that rises
    // only at the transitions is a staircase (eval retention), straight as its line may look.
    let (r_squared, sustained) = if split.transitions > 0 {
        let within = crate::fit::least_squares(&split.within_train);
        (
            within.map_or(0.0, |l| l.r_squared),
            within.is_some_and(|l| sustained_xy(&split.within_train, l.slope)),
        )
    } else {
        (line.r_squared, sustained(&kept, line.slope))
    };
    let train_growth = split.train_slope * span_steps;
    let fraction = |share: f64| match limit {
        Some((l, _)) => MIN_GROWTH_BYTES.max((l as f64 * share) as u64),
        None => MIN_GROWTH_BYTES,
    };
    let steady = r_squared >= STEADY_R_SQUARED && steps >= STEADY_MIN_STEPS && sustained;
    let long_floor = if steady {
        MIN_GROWTH_BYTES
    } else {
        fraction(MIN_GROWTH_FRACTION_OF_LIMIT)
    };
    let short_floor = fraction(SHORT_MIN_GROWTH_FRACTION_OF_LIMIT);
    let grows = |floor: u64| growth >= floor as f64 && train_growth >= floor as f64;
    // Host memory that grows as resident pages of memory-mapped files is the kernel's to drop.
    // A part of the growth, never more than it (the file pages can rise while the rest falls).
    let file_backed_growth_bytes = context.file_pages.and_then(|id| {
        let at = |p: &Point| trace.samples.value_at(id, p.t_us);
        let file = crate::stages::signed_delta(at(last)?, at(first)?);
        Some(file.min(growth.max(0.0) as i64))
    });
    let file_backed =
        file_backed_growth_bytes.is_some_and(|f| f as f64 >= FILE_BACKED_MIN_SHARE * growth);
    let creep = staircase_creep(&split, span_steps, context);
    // Host memory that grows no more than the workers copied of their parent's pages while it
    // grew is their copies (each worker counted over its readings within the fit's span: a
    // DataLoader without persistent workers starts new ones each epoch).
    let copied_during: f64 = context
        .workers
        .iter()
        .map(|w| {
            // Its growth in the share of its readings' span inside the fit's (a copy that
            // levelled off grew faster early than its line says: its whole rise counts).
            let from = w.from_us.max(first.t_us);
            let to = w.to_us.min(last.t_us);
            let total = w.last_private_bytes.saturating_sub(w.first_private_bytes) as f64;
            let span = w.to_us.saturating_sub(w.from_us).max(1) as f64;
            total * to.saturating_sub(from) as f64 / span
        })
        .sum();
    let copied_by_workers = context.host
        && growth > 0.0
        && copied_during >= crate::workers::WORKERS_EXPLAIN_FRACTION * growth;
    let rising =
        line.slope > 0.0 && split.train_slope > 0.0 && !file_backed && !creep && !copied_by_workers;
    let evidence = if !rising {
        None
    } else if steps >= min_steps && r_squared >= MIN_R_SQUARED && grows(long_floor) {
        Some(LeakEvidence::Long)
    } else if steps >= SHORT_MIN_STEPS
        && r_squared >= SHORT_R_SQUARED
        && sustained
        && grows(short_floor)
    {
        Some(LeakEvidence::Short)
    } else if context.died_of_oom
        && steps >= BEFORE_OOM_MIN_STEPS
        && r_squared >= MIN_R_SQUARED
        && sustained
        && grows(short_floor)
    {
        Some(LeakEvidence::BeforeOom)
    } else {
        None
    };
    let is_leak = evidence.is_some();
    let min_leak_growth_bytes = match evidence {
        Some(LeakEvidence::Short | LeakEvidence::BeforeOom) => short_floor,
        _ => long_floor,
    };
    let projection = if is_leak {
        limit.map(|(limit_bytes, limit_basis)| {
            let current = highest_in_step(trace, values, index, last.mark);
            project(limit_bytes, limit_basis, current, line.slope, first, last)
        })
    } else {
        None
    };
    Some(GrowthFit {
        stage: stage.to_owned(),
        metric: values.key(index),
        clock: Clock::Step,
        host_memory: values.key(index).is_host(),
        slope_bytes_per_step: line.slope,
        intercept_bytes: line.intercept,
        r_squared: line.r_squared,
        train_r_squared: r_squared,
        points: line.points,
        points_dropped: robust.dropped,
        steps,
        steps_per_point,
        first_step: first.step,
        last_step: last.step,
        growth_bytes: growth.clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        min_leak_growth_bytes,
        train_slope_bytes_per_step: split.train_slope,
        train_growth_bytes: split.train_growth.clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        transition_growth_bytes: split
            .transition_growth
            .clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        transitions: split.transitions,
        pauses: split.pauses,
        epoch_ends: split.epoch_ends,
        sustained,
        is_leak,
        evidence,
        staircase_creep: creep,
        copied_by_workers,
        workers_copied_bytes: if context.host {
            copied_during as u64
        } else {
            0
        },
        projection,
        file_backed_growth_bytes,
    })
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
fn staircase_creep(split: &GrowthSplit, span_steps: f64, context: &FitContext<'_>) -> bool {
    let kept_beyond_the_rate =
        split.transition_growth - split.train_slope.max(0.0) * split.transition_steps as f64;
    context.host
        && split.transitions > 0
        && split.train_slope * span_steps < kept_beyond_the_rate
        && !context.tensors_counted_growing
}

/// At most this many steps after an eval or a pause count as its settling (see `split_growth`).
pub const SETTLE_STEPS: u64 = 3;

/// Growth of consecutive fitted points, split into what the training steps kept and what the
/// transitions between them kept.
struct GrowthSplit {
    /// Growth per step between points with no transition between them (0 without such pairs).
    train_slope: f64,
    /// Growth between those points, in all.
    train_growth: f64,
    /// Steps counted with the transitions (across them and settling after them).
    transition_steps: u64,
    /// Growth across transitions.
    transition_growth: f64,
    /// Transitions crossed.
    transitions: usize,
    /// Of them, pauses (no other phase between the points, no epoch change).
    pauses: usize,
    /// Of them, epoch ends with no eval between the points.
    epoch_ends: usize,
    /// The points as `(step, value)` with the growth of every transition before each taken
    /// out: the training steps' own series, a staircase flattened.
    within_train: Vec<(f64, f64)>,
}

/// Walks consecutive points (in step order): a pair with a non-training mark between them, or
/// a pause longer than [`PAUSE_FACTOR`] × the median time per step across which memory grew
/// more than the steps' own rate ([`PAUSE_KEPT_FACTOR`]), is a transition; the pair after it
/// (the first step back in training) is counted with it.
fn split_growth(points: &[&Point], outside_train: &[u32]) -> GrowthSplit {
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

/// Whether the second half of the points (by step) still rises at [`SUSTAINED_SHARE`] of the
/// whole fit's slope.
fn sustained(points: &[&Point], slope: f64) -> bool {
    let xy: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.step as f64, p.value as f64))
        .collect();
    sustained_xy(&xy, slope)
}

/// [`sustained`] of `(step, value)` pairs.
fn sustained_xy(xy: &[(f64, f64)], slope: f64) -> bool {
    crate::fit::least_squares(&xy[xy.len() / 2..])
        .is_some_and(|l| l.slope >= SUSTAINED_SHARE * slope)
}

/// The value at `len / 2` of `values` sorted (the upper of two middles), found without sorting
/// them all (a day's fit has 240 000); `None` when empty.
fn upper_median(values: &mut [f64]) -> Option<f64> {
    let middle = values.len() / 2;
    (!values.is_empty()).then(|| *values.select_nth_unstable_by(middle, f64::total_cmp).1)
}

/// Distinct values of `steps` ([`crate::fit_marks::DistinctSteps`]).
fn distinct_steps(steps: impl Iterator<Item = u64>) -> usize {
    let mut distinct = crate::fit_marks::DistinctSteps::default();
    steps.for_each(|step| distinct.see(step));
    distinct.count()
}

/// The highest value of metric `index` at the training marks of the step of mark `mark`.
fn highest_in_step(trace: &Trace, values: &MarkValues, index: usize, mark: usize) -> u64 {
    let step = trace.marks[mark].step;
    let same_step = |i: &usize| trace.marks[*i].step == step;
    let before = (0..mark).rev().take_while(same_step);
    let after = (mark..trace.marks.len()).take_while(same_step);
    before
        .chain(after)
        .filter(|i| is_train(trace.marks[*i].phase))
        .filter_map(|i| values.get(i, index))
        .max()
        .unwrap_or(0)
}

/// Extrapolates the line to the limit.
fn project(
    limit_bytes: u64,
    limit_basis: LimitBasis,
    current_bytes: u64,
    slope: f64,
    first: &Point,
    last: &Point,
) -> FullProjection {
    let headroom = limit_bytes.saturating_sub(current_bytes);
    let steps_remaining = (headroom as f64 / slope).ceil() as u64;
    let us_per_step = (last.step > first.step)
        .then(|| last.t_us.saturating_sub(first.t_us) as f64 / (last.step - first.step) as f64);
    FullProjection {
        limit_bytes,
        limit_basis,
        current_bytes,
        steps_remaining,
        full_at_step: last.step.saturating_add(steps_remaining),
        us_per_step,
        time_to_full_us: us_per_step.map(|us| (us * steps_remaining as f64).round() as u64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    fn fits_of(trace: &Trace) -> Vec<GrowthFit> {
        let workers = crate::workers::growing_workers(trace);
        leak_fits(trace, &Prepared::new(trace), &workers, DEFAULT_MIN_STEPS)
    }

    fn fits(run: &Run) -> Vec<GrowthFit> {
        let trace = run.build();
        fits_of(&trace)
    }

    fn leaks(run: &Run) -> Vec<GrowthFit> {
        fits(run).into_iter().filter(|f| f.is_leak).collect()
    }

    #[test]
    fn healthy_run_has_flat_fits_and_no_leak() {
        let fits = fits(&Run::default());
        // 4 stages × (allocated, reserved, host_rss).
        assert_eq!(fits.len(), 12);
        assert_eq!(fits[0].stage, "pre_forward");
        assert_eq!(fits[0].metric.label(), "allocated");
        assert!(fits.iter().all(|f| !f.is_leak && f.projection.is_none()));
        assert!(fits.iter().all(|f| f.slope_bytes_per_step.abs() < 1.0));
    }

    #[test]
    fn planted_leak_is_found_and_projected() {
        let run = Run {
            steps: 100,
            leak_bytes_per_step: 12 * MIB,
            ..Run::default()
        };
        let leaks = leaks(&run);
        let post_opt = leaks
            .iter()
            .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
            .unwrap();
        assert!((post_opt.slope_bytes_per_step - (12 * MIB) as f64).abs() < 1.0);
        assert!(post_opt.r_squared > 0.999);
        assert_eq!(
            (post_opt.first_step, post_opt.last_step, post_opt.steps),
            (0, 99, 100)
        );
        assert_eq!(post_opt.growth_bytes, (99 * 12 * MIB) as i64);
        // Perfectly steady over 100 steps: only the absolute floor applies.
        assert_eq!(post_opt.min_leak_growth_bytes, MIN_GROWTH_BYTES);
        let p = post_opt.projection.as_ref().unwrap();
        assert_eq!(p.limit_basis, LimitBasis::DeviceTotal);
        // The highest stage at step 99 is post_forward: 28 GiB + 99 × 12 MiB.
        let current = 28 * GIB + 99 * 12 * MIB;
        assert_eq!(p.current_bytes, current);
        let remaining = (80 * GIB - current).div_ceil(12 * MIB);
        assert_eq!(p.steps_remaining, remaining);
        assert_eq!(p.full_at_step, 99 + remaining);
        assert_eq!(p.us_per_step, Some(250_000.0));
        assert_eq!(p.time_to_full_us, Some(remaining * 250_000));
        // Reserved grows with it; RSS does not.
        assert!(leaks.iter().any(|f| f.metric.label() == "reserved"));
        assert!(leaks.iter().all(|f| f.metric.label() != "host.rss"));
    }

    #[test]
    fn a_long_run_is_fitted_on_each_block_s_last_step_with_its_rate_and_projection() {
        // 10 000 steps, a mark a stage each: more than a fit reads one by one.
        let leak = 2 * MIB;
        let run = Run {
            steps: 10_000,
            leak_bytes_per_step: leak,
            ..Run::default()
        };
        let fit = leaks(&run)
            .into_iter()
            .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
            .unwrap();
        // Blocks of four steps: the first step and each block's last (step 3, 7, … 9 999).
        assert_eq!(fit.steps_per_point, 4);
        assert_eq!((fit.points, fit.steps), (2_501, 10_000));
        assert!(fit.is_leak);
        assert_eq!((fit.first_step, fit.last_step), (0, 9_999));
        assert!((fit.slope_bytes_per_step - leak as f64).abs() < 1.0);
        assert_eq!(fit.growth_bytes, (9_999 * leak) as i64);
        let p = fit.projection.unwrap();
        assert_eq!(p.current_bytes, 28 * GIB + 9_999 * leak);
        assert_eq!(p.us_per_step, Some(250_000.0));
        // The same run without the leak: flat, thinned the same way.
        let clean = fits(&Run {
            steps: 10_000,
            ..Run::default()
        });
        assert!(clean.iter().all(|f| !f.is_leak && f.steps_per_point == 4));
    }

    #[test]
    fn a_run_that_never_trains_is_fitted_per_forward() {
        // A serving loop: every mark an eval one, the step number never moving.
        let mut trace = Run {
            steps: 100,
            stages: vec!["pre_forward", "post_forward"],
            leak_bytes_per_step: 12 * MIB,
            ..Run::default()
        }
        .build();
        for m in &mut trace.marks {
            m.phase = oomscope_format::Phase::Eval;
            m.step = 0;
        }
        assert_eq!(Clock::of(&trace), Clock::Forward);
        let fits = fits_of(&trace);
        let pre = fits
            .iter()
            .find(|f| f.stage == "pre_forward" && f.metric.label() == "allocated" && f.is_leak)
            .expect("a leak per forward");
        assert_eq!(pre.clock, Clock::Forward);
        assert!((pre.slope_bytes_per_step - (12 * MIB) as f64).abs() < 1.0);
        assert_eq!((pre.first_step, pre.last_step), (1, 100));
    }

    #[test]
    fn memory_kept_at_epoch_ends_is_fitted_per_epoch_not_per_step() {
        // Six epochs of ten steps; at each epoch's end the program keeps 2 GiB (a copy of the
        // weights): flat within epochs.
        let mut trace = Run {
            steps: 60,
            ..Run::default()
        }
        .build();
        oomscope_testkit::run::keep_at_epoch_ends(&mut trace, 10, 2 * GIB);
        let fits = fits_of(&trace);
        let allocated = |clock| {
            fits.iter()
                .find(|f| {
                    f.stage == "pre_forward" && f.metric.label() == "allocated" && f.clock == clock
                })
                .unwrap()
        };
        let per_step = allocated(Clock::Step);
        assert!(!per_step.is_leak, "{per_step:#?}");
        let per_epoch = allocated(Clock::Epoch);
        assert!(per_epoch.is_leak, "{per_epoch:#?}");
        assert!((per_epoch.slope_bytes_per_step - (2 * GIB) as f64).abs() < 1.0);
        assert_eq!(
            (
                per_epoch.first_step,
                per_epoch.last_step,
                per_epoch.transitions
            ),
            (0, 5, 5)
        );
        // Without epochs in the marks the same staircase has no epoch fit.
        for m in &mut trace.marks {
            m.epoch = 0;
        }
        let fits = fits_of(&trace);
        assert!(fits.iter().all(|f| f.clock == Clock::Step));
    }

    #[test]
    fn near_misses_are_not_leaks() {
        // Too small: 100 steps × 0.5 MiB = 50 MiB, below 1% of 80 GiB.
        assert!(
            leaks(&Run {
                steps: 100,
                leak_bytes_per_step: MIB / 2,
                ..Run::default()
            })
            .is_empty()
        );
        // Too short: 7 steps, even perfectly straight, without an OOM at the end.
        assert!(
            leaks(&Run {
                steps: 7,
                leak_bytes_per_step: 100 * MIB,
                ..Run::default()
            })
            .is_empty()
        );
        // One jump is not steady growth: eval at step 29 keeps 4 GiB, a step function whose
        // line fit explains only 75% of the variance.
        let jump = Run {
            steps: 60,
            eval_every: Some(30),
            eval_retained_bytes: 4 * GIB,
            ..Run::default()
        };
        let fits = fits(&jump);
        let post_opt = fits
            .iter()
            .find(|f| f.stage == "post_optimizer_step")
            .unwrap();
        assert!(post_opt.r_squared < MIN_R_SQUARED, "{}", post_opt.r_squared);
        assert!(fits.iter().all(|f| !f.is_leak));
    }

    #[test]
    fn a_small_steady_leak_on_a_large_device_is_a_leak() {
        // 4 MiB per step for 60 steps: 236 MiB, under 1% of 80 GiB, but perfectly steady.
        let run = Run {
            steps: 60,
            leak_bytes_per_step: 4 * MIB,
            ..Run::default()
        };
        let found = leaks(&run);
        assert!(!found.is_empty());
        assert!(
            found
                .iter()
                .all(|f| (f.slope_bytes_per_step - (4 * MIB) as f64).abs() < 1.0)
        );
        // The same rate over 20 steps (80 MiB) is too short to call steady: 1% of 80 GiB applies.
        let short = Run {
            steps: 20,
            leak_bytes_per_step: 4 * MIB,
            ..Run::default()
        };
        assert!(leaks(&short).is_empty());
        // Steady but tiny: 1 MiB per step for 60 steps stays under the 64 MiB floor.
        let tiny = Run {
            steps: 60,
            leak_bytes_per_step: MIB,
            ..Run::default()
        };
        assert!(leaks(&tiny).is_empty());
    }

    #[test]
    fn steps_from_eval_are_not_fitted() {
        // Eval jumps 20 GiB every 5 steps; eval marks are excluded, so no train fit sees them.
        let run = Run {
            steps: 60,
            eval_every: Some(5),
            eval_jump_bytes: 20 * GIB,
            ..Run::default()
        };
        let fits = fits(&run);
        assert!(fits.iter().all(|f| f.stage != "eval_forward"));
        assert!(fits.iter().all(|f| !f.is_leak));
    }

    #[test]
    fn host_rss_growth_projects_against_host_memory() {
        let run = Run {
            steps: 50,
            host_rss_growth_per_step: 200 * MIB,
            ..Run::default()
        };
        let leaks = leaks(&run);
        let rss = leaks
            .iter()
            .find(|f| f.metric.label() == "host.rss")
            .unwrap();
        assert!(rss.host_memory);
        let p = rss.projection.as_ref().unwrap();
        assert_eq!(p.limit_basis, LimitBasis::HostMemory);
        assert_eq!(p.limit_bytes, 256 * GIB);
        assert!(leaks.iter().all(|f| f.metric.label() == "host.rss"));
    }

    #[test]
    fn a_short_straight_leak_is_found_without_waiting_for_twenty_steps() {
        // +64 MiB kept every step for 12 steps (+704 MiB fitted): the example.
        let found = leaks(&Run {
            steps: 12,
            leak_bytes_per_step: 64 * MIB,
            ..Run::default()
        });
        let post_opt = found
            .iter()
            .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
            .unwrap();
        assert_eq!(post_opt.evidence, Some(LeakEvidence::Short));
        assert!((post_opt.slope_bytes_per_step - (64 * MIB) as f64).abs() < 1.0);
        assert!(post_opt.sustained);
        // Half a percent of 80 GiB.
        assert_eq!(
            post_opt.min_leak_growth_bytes,
            ((80 * GIB) as f64 * SHORT_MIN_GROWTH_FRACTION_OF_LIMIT) as u64
        );
    }

    /// A run whose allocated memory rises `warmup` per step for the first `warm_steps` steps and
    /// then stays flat (a cache filling, lazily built buffers), with `noise` added to every mark
    /// alternately up and down.
    fn warmup_run(steps: u64, warm_steps: u64, warmup: u64, noise: u64) -> Trace {
        let mut trace = Run {
            steps,
            ..Run::default()
        }
        .build();
        trace.marks.edit_indexed(|i, mark| {
            let extra = warmup * mark.step.min(warm_steps) + if i % 2 == 0 { noise } else { 0 };
            if let Some(s) = mark.allocator.as_mut() {
                s.allocated_bytes += extra;
                s.peak_allocated_bytes += extra;
                s.reserved_bytes += extra;
            }
        });
        trace
    }

    #[test]
    fn warm_up_and_noise_in_a_short_run_are_not_leaks() {
        let of = |trace: &Trace| -> Vec<GrowthFit> {
            fits_of(trace).into_iter().filter(|f| f.is_leak).collect()
        };
        // 300 MiB per step for 4 steps, then flat for 8: a warm-up that levelled off.
        let warm = warmup_run(12, 4, 300 * MIB, 0);
        assert!(of(&warm).is_empty(), "{:#?}", of(&warm));
        // The same levelled-off shape, over 25 steps, is no leak either.
        assert!(of(&warmup_run(25, 4, 300 * MIB, 0)).is_empty());
        // ±500 MiB of noise around a flat line.
        assert!(of(&warmup_run(12, 0, 0, 500 * MIB)).is_empty());
    }

    #[test]
    fn growth_that_ends_in_an_oom_is_a_leak_after_a_few_steps() {
        // 2 GiB kept per step, OOM in the forward pass of step 5: five steps of evidence.
        let oom = Run {
            steps: 6,
            leak_bytes_per_step: 2 * GIB,
            oom_at_step: Some(5),
            ..Run::default()
        };
        let found = leaks(&oom);
        assert!(
            found
                .iter()
                .any(|f| f.evidence == Some(LeakEvidence::BeforeOom)),
            "{found:#?}"
        );
        // The same growth in a run that finished cleanly is too short to tell.
        let clean = Run {
            oom_at_step: None,
            ..oom
        };
        assert!(leaks(&clean).is_empty());
    }

    #[test]
    fn memory_kept_at_every_eval_is_not_a_per_step_leak() {
        // Flat training steps; each eval (every 10 steps) keeps 200 MiB: a staircase whose line
        // fit is straight enough to pass for a leak.
        let staircase = Run {
            steps: 100,
            eval_every: Some(10),
            eval_jump_bytes: GIB,
            eval_retained_bytes: 200 * MIB,
            ..Run::default()
        };
        let fits = fits(&staircase);
        let post_opt = fits
            .iter()
            .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
            .unwrap();
        assert!(post_opt.r_squared > MIN_R_SQUARED, "{}", post_opt.r_squared);
        assert_eq!(post_opt.transitions, 9);
        assert_eq!(post_opt.transition_growth_bytes, 9 * 200 * MIB as i64);
        assert!(post_opt.train_slope_bytes_per_step.abs() < 1.0);
        assert!(fits.iter().all(|f| !f.is_leak), "{fits:#?}");
        // A real leak that also has evals is still a leak, at its per-step rate.
        let both = Run {
            leak_bytes_per_step: 20 * MIB,
            ..staircase
        };
        let found = leaks(&both);
        let post_opt = found
            .iter()
            .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
            .unwrap();
        assert!(
            (post_opt.train_slope_bytes_per_step - (20 * MIB) as f64).abs() < 1.0,
            "{}",
            post_opt.train_slope_bytes_per_step
        );
        // Each transition carries its eval's 200 MiB plus the steps' own growth over it.
        assert!(post_opt.transition_growth_bytes >= 9 * 220 * MIB as i64);
    }

    #[test]
    fn memory_kept_at_pauses_such_as_checkpoint_saves_is_not_a_per_step_leak() {
        // 100 flat training steps; every 10 steps a 5 s pause without marks (a checkpoint save)
        // after which 300 MiB more stay allocated: a staircase no eval mark explains.
        let mut trace = Run {
            steps: 100,
            ..Run::default()
        }
        .build();
        trace.marks.edit(|mark| {
            let saves = mark.step / 10;
            mark.t_us += saves * 5_000_000;
            if let Some(s) = mark.allocator.as_mut() {
                s.allocated_bytes += saves * 300 * MIB;
                s.peak_allocated_bytes += saves * 300 * MIB;
            }
        });
        let fits = fits_of(&trace);
        let post_opt = fits
            .iter()
            .find(|f| f.stage == "post_optimizer_step" && f.metric.label() == "allocated")
            .unwrap();
        assert!(post_opt.r_squared > MIN_R_SQUARED, "{}", post_opt.r_squared);
        assert_eq!(post_opt.transitions, 9);
        assert_eq!(post_opt.transition_growth_bytes, 9 * 300 * MIB as i64);
        assert!(!post_opt.is_leak, "{post_opt:#?}");
    }

    /// A host-memory staircase: every eval keeps 200 MiB of RSS, and the training steps grow
    /// `creep` a step besides.
    fn host_staircase(creep: u64) -> Trace {
        let mut trace = Run {
            steps: 100,
            eval_every: Some(10),
            host_rss_growth_per_step: creep,
            ..Run::default()
        }
        .build();
        let mut starts = Vec::new();
        let mut in_eval = false;
        for m in &trace.marks {
            let eval = !is_train(m.phase);
            if eval && !in_eval {
                starts.push(m.t_us);
            }
            in_eval = eval;
        }
        let rss = trace.counter(CounterKind::HostRss, None).unwrap();
        let times = trace.samples.times_us().to_vec();
        trace.samples.edit_column(rss, |column| {
            for (v, t) in column.iter_mut().zip(&times) {
                let evals = starts.iter().filter(|s| *s <= t).count() as u64;
                if *v != oomscope_format::MISSING {
                    *v += evals * 200 * MIB;
                }
            }
        });
        trace
    }

    fn host_fit(trace: &Trace) -> GrowthFit {
        fits_of(trace)
            .into_iter()
            .find(|f| f.stage == "post_optimizer_step" && f.host_memory)
            .unwrap()
    }

    #[test]
    fn host_memory_creeping_up_after_the_evals_is_the_staircases_not_a_leak() {
        // 2 MiB a step inside the training steps (the C allocator's heap after what the evals
        // keep), 1.8 GiB at nine evals: the eval finding's, not a leak.
        let creep = host_fit(&host_staircase(2 * MIB));
        assert_eq!(creep.transitions, 9, "{creep:#?}");
        assert!(creep.train_growth_bytes > 64 * MIB as i64, "{creep:#?}");
        assert!(creep.train_growth_bytes < creep.transition_growth_bytes);
        assert!(creep.staircase_creep && !creep.is_leak, "{creep:#?}");
        // The same with live tensors counted growing: a leak of its own.
        let mut counted = host_staircase(2 * MIB);
        counted.held.push(oomscope_format::HeldTensors {
            t_us: 1,
            from_step: 20,
            to_step: 28,
            device: "cpu".into(),
            dtype: "float32".into(),
            shape: "1024".into(),
            grad_fn: "".into(),
            count: 8,
            bytes: 16 * MIB,
            holder: "list `losses`".into(),
            items: Some(28),
            ..oomscope_format::HeldTensors::default()
        });
        let fit = host_fit(&counted);
        assert!(!fit.staircase_creep && fit.is_leak, "{fit:#?}");
        // Training steps whose rate adds more than the evals kept (30 MiB a step, 3 GiB over the
        // run, against 1.8 GiB): a leak of its own, though the steps around each eval, counted
        // with it, leave the training steps less growth than the transitions.
        let leak = host_fit(&host_staircase(30 * MIB));
        assert!(
            leak.train_growth_bytes < leak.transition_growth_bytes,
            "{leak:#?}"
        );
        assert!(!leak.staircase_creep && leak.is_leak, "{leak:#?}");
    }

    #[test]
    fn host_memory_the_workers_copied_while_it_grew_is_theirs_not_a_leak() {
        // 30 MiB a step of host memory over 100 steps; a worker whose private memory grew as
        // fast over the same time explains it; one that grew before the steps began does not.
        let trace = Run {
            steps: 100,
            host_rss_growth_per_step: 30 * MIB,
            ..Run::default()
        }
        .build();
        let (from, to) = (trace.marks[0].t_us, trace.marks.last().unwrap().t_us);
        let with_worker = |from_us: u64, to_us: u64| {
            let mut t = trace.clone();
            for i in 0..=10u64 {
                t.process_memory.push(oomscope_format::ProcessMemory {
                    t_us: from_us + (to_us - from_us) * i / 10,
                    pid: 4242,
                    private_bytes: 10 * MIB + i * 300 * MIB,
                    pss_bytes: 0,
                });
            }
            assert_eq!(
                crate::workers::growing_workers(&t).len(),
                1,
                "a growing worker"
            );
            host_fit(&t)
        };
        let leak = host_fit(&trace);
        assert!(leak.is_leak && !leak.copied_by_workers, "{leak:#?}");
        let copied = with_worker(from, to);
        assert!(copied.copied_by_workers && !copied.is_leak, "{copied:#?}");
        // A worker of another epoch, after the steps fitted.
        let after = with_worker(to + 1, to + 1 + (to - from));
        assert!(after.is_leak && !after.copied_by_workers, "{after:#?}");
    }

    #[test]
    fn distinct_steps_counts_new_highs() {
        assert_eq!(distinct_steps([0, 0, 1, 2, 2, 3].into_iter()), 4);
        assert_eq!(distinct_steps([0, 1, 2, 0, 1, 2, 3].into_iter()), 4);
        assert_eq!(distinct_steps(std::iter::empty()), 0);
    }
}

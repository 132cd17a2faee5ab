//! The fits: every (stage, metric) pair of training marks a line on the run's clock, measured
//! (the line, the steps' own growth, what else grew with it) and judged (`verdict`); and the
//! leak a finding headlines.

use super::epochs::{fit_epochs, kept_an_epoch_bytes};
use super::growth_fit::GrowthFit;
use super::points::{FitContext, Point, distinct_steps};
use super::projection::{highest_in_step, limit_of, project};
use super::split::{split_growth, staircase_creep, sustained, sustained_xy};
use super::verdict::*;
use crate::clocks::Clock;
use crate::fit::robust_line;
use crate::fit_marks::FitMarks;
use crate::metrics::{
    MarkValues, MetricKey, counter_with_data, host_in_use, primary_metric, reserved_metric,
};
use crate::prepared::Prepared;
use oomscope_format::{CounterKind, Trace};

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
                let by_epoch = (clock == Clock::Step && !fit.is_leak())
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
    fits.iter().filter(|f| f.is_leak()).reduce(|best, f| {
        let better = rank(f).cmp(&rank(best)).then_with(|| {
            best.slope_bytes_per_step
                .total_cmp(&f.slope_bytes_per_step)
                .then(best.r_squared.total_cmp(&f.r_squared))
        });
        // Ties go to the later fit, i.e. the later stage.
        if better.is_le() { f } else { best }
    })
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

/// The growth a long fit needs and the growth a short or cut-short fit needs, against memory's
/// `limit` when known: a steady fit's long floor is the bare [`MIN_GROWTH_BYTES`].
fn growth_floors(limit_bytes: Option<u64>, steady: bool) -> (u64, u64) {
    let fraction = |share: f64| match limit_bytes {
        Some(l) => MIN_GROWTH_BYTES.max((l as f64 * share) as u64),
        None => MIN_GROWTH_BYTES,
    };
    let long = if steady {
        MIN_GROWTH_BYTES
    } else {
        fraction(MIN_GROWTH_FRACTION_OF_LIMIT)
    };
    (long, fraction(SHORT_MIN_GROWTH_FRACTION_OF_LIMIT))
}

/// What the growing workers copied of their parent's pages between `from_us` and `to_us`: each
/// worker counted over its readings within that span (a DataLoader without persistent workers
/// starts new ones each epoch), its whole rise in the share of its readings' span inside it (a
/// copy that levelled off grew faster early than its line says).
fn copied_within(workers: &[crate::workers::WorkerGrowth], from_us: u64, to_us: u64) -> f64 {
    workers
        .iter()
        .map(|w| {
            let from = w.from_us.max(from_us);
            let to = w.to_us.min(to_us);
            let total = w.last_private_bytes.saturating_sub(w.first_private_bytes) as f64;
            let span = w.to_us.saturating_sub(w.from_us).max(1) as f64;
            total * to.saturating_sub(from) as f64 / span
        })
        .sum()
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
    let steady = r_squared >= STEADY_R_SQUARED && steps >= STEADY_MIN_STEPS && sustained;
    let (long_floor, short_floor) = growth_floors(limit.map(|(l, _)| l), steady);
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
    // grew is their copies.
    let copied_during = copied_within(context.workers, first.t_us, last.t_us);
    let copied_by_workers = context.host
        && growth > 0.0
        && copied_during >= crate::workers::WORKERS_EXPLAIN_FRACTION * growth;
    let measured = Measured {
        rising: line.slope > 0.0 && split.train_slope > 0.0,
        file_backed,
        creep,
        copied_by_workers,
        steps,
        min_steps,
        r_squared,
        sustained,
        growth_bytes: growth,
        train_growth_bytes: train_growth,
        long_floor_bytes: long_floor,
        short_floor_bytes: short_floor,
        died_of_oom: context.died_of_oom,
    };
    let verdict = judge(&measured);
    let projection = if verdict.is_leak() {
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
        min_leak_growth_bytes: floor_used(verdict, &measured),
        train_slope_bytes_per_step: split.train_slope,
        train_growth_bytes: split.train_growth.clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        transition_growth_bytes: split
            .transition_growth
            .clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        transition_excess_bytes: (split.transition_growth
            - split.train_slope * split.transition_steps as f64)
            .clamp(i64::MIN as f64, i64::MAX as f64) as i64,
        transitions: split.transitions,
        pauses: split.pauses,
        epoch_ends: split.epoch_ends,
        sustained,
        verdict,
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

//! When a leak fills memory: the limit a metric runs into (the device's total, or the host's
//! available memory plus what is in use) and the fitted line extrapolated to it.

use super::growth_fit::{FullProjection, LimitBasis};
use super::points::Point;
use crate::marks::is_train;
use crate::metrics::{MarkValues, MetricKey, counter_with_data, host_in_use};
use oomscope_format::{CounterKind, Trace};

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

/// The highest value of metric `index` at the training marks of the step of mark `mark`.
pub(super) fn highest_in_step(
    trace: &Trace,
    values: &MarkValues,
    index: usize,
    mark: usize,
) -> u64 {
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
pub(super) fn project(
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

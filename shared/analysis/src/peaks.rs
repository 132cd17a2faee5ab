//! The highest memory each counter reached, where in the loop, and what it was made of.
//!
//! "How close did we get, and when?" is the first thing to know about an OOM or a near miss. A
//! peak alone does not say what to change, so each device peak carries the stage active at that
//! moment and the nearest component breakdown: what part of the peak is the model's own state
//! (parameters, gradients, optimizer, registered extras) and what part is activations. The
//! activations are the remainder, which is only meaningful against the allocator's `allocated`
//! bytes; when the trace has no allocator data at all, the process's (or device's) GPU memory is
//! used instead and the `activations_basis` field says so (the remainder then also includes the
//! allocator cache and the CUDA context).

use serde::Serialize;

use crate::marks::StageAt;
use crate::metrics::{MarkValues, MetricKey, counter_with_data, has_allocator_stats};
use oomscope_format::AllocatorQuantity;
use oomscope_format::{ComponentBreakdown, CounterId, CounterKind, MISSING, NamedBytes, Trace};

/// Where a peak was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSource {
    /// A sampled counter.
    Counter,
    /// The allocator's statistics the stage marks carry (`snapshot` in JSON, the word it has
    /// always had there).
    #[serde(rename = "snapshot")]
    Marks,
}

/// The words a peak's measure is serialised as (`allocated`, `device_used`, `host_rss`): what
/// `summary --json` has always said.
fn measure_words<S: serde::Serializer>(
    measure: &MetricKey,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    let words = match *measure {
        MetricKey::Allocator(quantity) => quantity.label(),
        MetricKey::Counter { kind, .. } => match kind {
            CounterKind::GpuUsed => "device_used",
            CounterKind::GpuReserved => "device_reserved",
            other => other.label(),
        },
    };
    serializer.serialize_str(words)
}

/// A measure of the device's or host's memory as a counter's kind, whatever the device.
pub const fn measured(kind: CounterKind) -> MetricKey {
    MetricKey::Counter { kind, device: None }
}

/// Which memory the activations were computed against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActivationsBasis {
    /// The allocator's allocated bytes: activations are exactly what tensors held beyond the
    /// model's state.
    AllocatorAllocated,
    /// The process's GPU memory (no allocator data): includes the allocator cache and the CUDA
    /// context, so the activations are an upper bound.
    ProcessGpu,
    /// The device's used memory (no allocator or process data): includes everything on the GPU.
    DeviceUsed,
}

/// The counter of the GPU memory of the process whose allocator mark `mark` describes: with one
/// rank (or none) the tree's per-process counter, when there is one GPU; with several ranks the
/// sending rank's own counter (the poller records one per rank and GPU), when it has exactly one.
/// (`several_ranks`: the trace holds two or more.)
fn process_gpu_of_mark(trace: &Trace, mark: usize, several_ranks: bool) -> Option<CounterId> {
    let only = |kind: CounterKind, pid: Option<u32>| {
        let mut ids = trace
            .counters
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind == kind && (pid.is_none() || c.pid == pid))
            .map(|(i, _)| CounterId(i as u32));
        ids.next().filter(|_| ids.next().is_none())
    };
    if !several_ranks {
        only(CounterKind::ProcessGpu, None)
    } else {
        only(CounterKind::PidGpu, Some(trace.marks.get(mark)?.pid?))
    }
}

/// The component breakdown nearest to a peak, and the activations it implies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PeakComponents {
    /// The breakdown (its fields appear inline in JSON).
    #[serde(flatten)]
    pub breakdown: ComponentBreakdown,
    /// Sum of all components.
    pub total_bytes: u64,
    /// Peak minus the components (saturating), when the peak's measure allows it.
    pub activations_bytes: Option<u64>,
    /// What the activations were computed against.
    pub activations_basis: Option<ActivationsBasis>,
    /// Beside an allocator peak on the GPU: what the caching allocator held without tensors
    /// (reserved at the peak's mark − the peak).
    pub cached_bytes: Option<u64>,
    /// ...and the device memory of the program's processes outside the allocator then (NVML's
    /// per-process figure − reserved): the CUDA context, NCCL's buffers, other libraries.
    pub outside_allocator_bytes: Option<u64>,
    /// For a host peak (no allocator tells activations apart): how much a training forward
    /// raises the peak's metric, the median over steps of `post_forward − pre_forward` — the
    /// activations it keeps for backward, as far as the process's memory shows them (glibc may
    /// reuse memory the last step freed, so it can be less, never more).
    pub forward_rise_bytes: Option<u64>,
}

impl PeakComponents {
    /// The components of `breakdown`, with activations `peak − total` against `basis`.
    pub fn new(
        breakdown: &ComponentBreakdown,
        peak_bytes: u64,
        basis: Option<ActivationsBasis>,
    ) -> PeakComponents {
        let total_bytes = breakdown.total_bytes();
        PeakComponents {
            breakdown: breakdown.clone(),
            total_bytes,
            activations_bytes: basis.map(|_| peak_bytes.saturating_sub(total_bytes)),
            activations_basis: basis,
            cached_bytes: None,
            outside_allocator_bytes: None,
            forward_rise_bytes: None,
        }
    }

    /// The largest single component (parameters, buffers, gradients, optimizer state or an
    /// extra), if any is non-zero.
    pub fn largest(&self) -> Option<NamedBytes> {
        let b = &self.breakdown;
        [
            ("parameters", b.parameters_bytes),
            ("buffers", b.buffers_bytes),
            ("gradients", b.gradients_bytes),
            ("optimizer_state", b.optimizer_state_bytes),
        ]
        .into_iter()
        .map(|(name, bytes)| NamedBytes {
            name: name.into(),
            bytes,
        })
        .chain(b.extras.iter().cloned())
        .filter(|c| c.bytes > 0)
        .reduce(|best, c| if c.bytes > best.bytes { c } else { best })
    }
}

/// The highest value of one memory quantity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Peak {
    /// Metric label (`peak_allocated`, `gpu0.used`, `host_rss`, ...).
    pub metric: MetricKey,
    /// Where it was read.
    pub source: PeakSource,
    /// What it measures, whatever it was read from and on which device
    /// ([`MetricKey::measure`]).
    #[serde(serialize_with = "measure_words")]
    pub measure: MetricKey,
    /// GPU, for device counters.
    pub device: Option<u32>,
    /// The peak.
    pub bytes: u64,
    /// When it was first reached (read at marks: the mark that reported it).
    pub t_us: u64,
    /// The stage active then; `None` when the peak came before the first mark or after the
    /// last one (see `outside_marks`).
    pub stage: Option<StageAt>,
    /// Set when the peak came before the first mark (setup, loading) or after the last one
    /// (teardown, saving): no stage was running then.
    pub outside_marks: Option<OutsideMarks>,
    /// The nearest component breakdown: on device peaks, or on the host's when the tensors
    /// live in host memory (see [`tensors_on_host`]).
    pub components: Option<PeakComponents>,
    /// A higher reading after the program's own code ended (the interpreter's shutdown,
    /// `atexit` handlers): shown as such, never the peak ([`program_end_us`]).
    pub after_program_end: Option<AfterProgramEnd>,
}

/// The highest reading of a counter after the program's own code ended, when it is above the
/// peak before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AfterProgramEnd {
    /// The reading.
    pub bytes: u64,
    /// How long after the program's end it was read.
    pub after_us: u64,
}

/// When the program's own code ended (`PROGRAM_END`): the one the collector started when it
/// said so, else the latest any process said (a launcher's ranks end before it). `None` for a
/// trace without one (not Python, a writer before v1.12, a program killed before its end).
pub fn program_end_us(trace: &Trace) -> Option<u64> {
    let own = trace
        .program_ends
        .iter()
        .filter(|e| e.pid == Some(trace.metadata.pid))
        .map(|e| e.t_us)
        .min();
    own.or_else(|| trace.program_ends.iter().map(|e| e.t_us).max())
}

/// A moment outside the marked loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "when")]
pub enum OutsideMarks {
    /// Before the first mark: imports, data loading, model construction.
    BeforeFirstMark {
        /// How long before the first mark.
        before_us: u64,
    },
    /// After the last mark, in a run that then ended without an OOM: teardown, saving,
    /// evaluation code that does not mark.
    AfterLastMark {
        /// The last mark.
        last: StageAt,
        /// How long after it.
        after_us: u64,
    },
}

/// Where `t_us` lies against the marks: the stage running then, or outside the marked loop.
///
/// After the last mark counts as outside only when the run then ended (an exit was recorded)
/// with no OOM after the last mark and was not killed by a signal: a run that dies in a stage
/// peaks in that stage after its last mark (a sampled peak may even come a moment after the
/// error, as per-process readings lag). Nor is a moment in a thinned loop's unmarked last steps
/// ([`unmarked_loop_end_us`]) outside the marks.
fn place_of(trace: &Trace, t_us: u64) -> (Option<StageAt>, Option<OutsideMarks>) {
    let (Some(first), Some(last)) = (trace.marks.first(), trace.marks.last()) else {
        return (None, None);
    };
    if t_us < first.t_us {
        let before_us = first.t_us - t_us;
        return (None, Some(OutsideMarks::BeforeFirstMark { before_us }));
    }
    let stage = StageAt::at(trace, t_us);
    let died_there = trace.ooms.iter().any(|o| o.t_us >= last.t_us)
        || trace.exit.is_none_or(|e| {
            matches!(e.status, oomscope_format::ExitStatus::Signal(_)) || e.probable_host_oom
        });
    if t_us > last.t_us && !died_there && t_us > unmarked_loop_end_us(trace, last) {
        let last = StageAt::of_mark(trace, trace.marks.len() - 1);
        if let Some(last) = last {
            let after_us = t_us - last.t_us;
            return (None, Some(OutsideMarks::AfterLastMark { last, after_us }));
        }
    }
    (stage, None)
}

/// Until when a moment after the last mark still belongs to the marked loop, told by the last
/// mark as every unmarked moment is: one sampling interval after it (a reading describes the
/// interval before it), or, in a loop whose marks were thinned (one iteration in several), the
/// steps it ran past its last mark (the hooks said at exit which step it reached; they lasted
/// about that many iterations, never past the program's end).
fn unmarked_loop_end_us(trace: &Trace, last: &oomscope_format::Mark) -> u64 {
    let last_us = last.t_us.saturating_add(trace.metadata.sample_interval_us);
    let Some(sampled) = crate::marks::marks_sampled(trace) else {
        return last_us;
    };
    let steps = sampled.last_step.unwrap_or(0).saturating_sub(last.step);
    let end = last
        .t_us
        .saturating_add(steps.saturating_mul(sampled.iteration_us));
    program_end_us(trace)
        .map_or(end, |program_end| end.min(program_end))
        .max(last_us)
}

/// Latest component breakdown sent before the first mark after `t_us` (the hooks send one
/// right after the mark it describes), else the first one after that.
pub fn breakdown_near(trace: &Trace, t_us: u64) -> Option<&ComponentBreakdown> {
    let next_mark = trace.marks.partition_point(|m| m.t_us <= t_us);
    let until_us = trace
        .marks
        .get(next_mark)
        .map_or(t_us.saturating_add(1), |m| m.t_us);
    let before = trace
        .components
        .iter()
        .filter(|c| c.t_us < until_us)
        .max_by_key(|c| c.t_us);
    before.or_else(|| {
        trace
            .components
            .iter()
            .filter(|c| c.t_us >= until_us)
            .min_by_key(|c| c.t_us)
    })
}

/// True when the program's tensors live in host memory: no allocator data (the hooks attach the
/// CUDA allocator's statistics to every mark once the program uses CUDA) and no GPU memory of the
/// program's own processes. A CPU run on a GPU host still records the device's `used`, which
/// is other programs' memory, not this one's model.
pub fn tensors_on_host(trace: &Trace) -> bool {
    let process_gpu = trace
        .counters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == CounterKind::ProcessGpu)
        .filter_map(|(i, _)| trace.samples.column(CounterId(i as u32)))
        .any(|column| column.iter().any(|v| v != MISSING && v > 0));
    !has_allocator_data(trace) && !process_gpu
}

/// True when the trace has any allocator data (statistics at marks, or allocator counters with
/// data).
pub fn has_allocator_data(trace: &Trace) -> bool {
    has_allocator_stats(trace)
        || [
            CounterKind::Allocator(AllocatorQuantity::Allocated),
            CounterKind::Allocator(AllocatorQuantity::Reserved),
            CounterKind::Allocator(AllocatorQuantity::Active),
            CounterKind::Allocator(AllocatorQuantity::PeakAllocated),
            CounterKind::Allocator(AllocatorQuantity::PeakReserved),
        ]
        .into_iter()
        .any(|kind| counter_with_data(trace, kind).is_some())
}

/// Every peak: the allocator's (`peak_allocated`, `allocated`, `reserved`) when marks carry its
/// statistics, then each memory-in-use counter with data, in declaration order. `several_ranks`:
/// the trace holds two ranks or more ([`crate::rank_views::ranks_of`]).
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn peaks(trace: &Trace, values: &MarkValues, several_ranks: bool) -> Vec<Peak> {
    let columns = crate::column_scan::ColumnScan::new(trace, values);
    peaks_with(trace, values, several_ranks, &columns)
}

/// [`peaks`] with the marks' values' highest already found (`columns`, of every mark).
pub fn peaks_with(
    trace: &Trace,
    values: &MarkValues,
    several_ranks: bool,
    columns: &crate::column_scan::ColumnScan,
) -> Vec<Peak> {
    let allocator = has_allocator_data(trace);
    let has_process = counter_with_data(trace, CounterKind::ProcessGpu).is_some();
    let on_host = tensors_on_host(trace);
    let basis_for = |measure: MetricKey| match measure {
        MetricKey::ALLOCATED => Some(ActivationsBasis::AllocatorAllocated),
        m if m == measured(CounterKind::ProcessGpu) && !allocator => {
            Some(ActivationsBasis::ProcessGpu)
        }
        m if m == measured(CounterKind::GpuUsed) && !allocator && !has_process => {
            Some(ActivationsBasis::DeviceUsed)
        }
        _ => None,
    };
    let finish = |metric: MetricKey, source, measure: MetricKey, device, bytes, t_us| {
        let components = (measure.is_host() == on_host)
            .then(|| breakdown_near(trace, t_us))
            .flatten()
            .map(|b| PeakComponents::new(b, bytes, basis_for(measure)));
        let (stage, outside_marks) = place_of(trace, t_us);
        Peak {
            metric,
            source,
            measure,
            device,
            bytes,
            t_us,
            stage,
            outside_marks,
            components,
            after_program_end: None,
        }
    };

    let mut out = Vec::new();
    let finish = |metric: MetricKey, source, measure: MetricKey, device, bytes, t_us| {
        let mut peak = finish(metric, source, measure, device, bytes, t_us);
        if measure.is_host()
            && let Some(c) = peak.components.as_mut()
        {
            c.forward_rise_bytes = forward_rise(trace, values, metric);
        }
        peak
    };
    for metric in [
        MetricKey::Allocator(AllocatorQuantity::PeakAllocated),
        MetricKey::ALLOCATED,
        MetricKey::RESERVED,
    ] {
        let Some(index) = values.index_of(metric) else {
            continue;
        };
        let Some(measure) = metric.measure() else {
            continue;
        };
        if let Some((mark, bytes)) = columns.first_max(index) {
            let t_us = trace.marks[mark].t_us;
            let label = values.key(index);
            let mut peak = finish(label, PeakSource::Marks, measure, None, bytes, t_us);
            // The mark that reported it, even when another mark shares its timestamp.
            peak.stage = StageAt::of_mark(trace, mark);
            peak.outside_marks = None;
            if measure == MetricKey::ALLOCATED
                && let Some(c) = peak.components.as_mut()
            {
                let reserved_index = values.index_of(MetricKey::RESERVED);
                let reserved = reserved_index
                    .and_then(|r| values.get(mark, r))
                    .filter(|r| *r >= bytes);
                c.cached_bytes = reserved.map(|r| r - bytes);
                let process = process_gpu_of_mark(trace, mark, several_ranks);
                // The per-process figure is the poller's: one below the allocator's reserved
                // bytes is older than the allocator's growth, and says nothing.
                c.outside_allocator_bytes =
                    reserved
                        .zip(process)
                        .zip(reserved_index)
                        .and_then(|((r, process), index)| {
                            let used = crate::overhead::process_gpu_at_mark(
                                trace, values, process, index, mark, r,
                            )?;
                            used.checked_sub(r)
                        });
            }
            out.push(peak);
        }
    }
    let times = trace.samples.times_us();
    // Readings after the program's end are the interpreter's shutdown, never the run's peak.
    let in_run =
        program_end_us(trace).map_or(times.len(), |end| times.partition_point(|t| t <= end));
    let pss_is_rss = crate::metrics::pss_is_rss(trace);
    for (i, counter) in trace.counters.iter().enumerate() {
        let metric = MetricKey::of_counter(trace, CounterId(i as u32));
        let Some(measure) = metric.measure() else {
            continue;
        };
        // One process: its PSS is its RSS, a second line would say nothing.
        if measure == measured(CounterKind::HostPss) && pss_is_rss {
            continue;
        }
        let id = CounterId(i as u32);
        if let Some((row, bytes)) = trace.samples.first_max(id, 0..in_run) {
            let mut peak = finish(
                metric,
                PeakSource::Counter,
                measure,
                counter.device,
                bytes,
                times.at(row),
            );
            peak.after_program_end = trace
                .samples
                .first_max(id, in_run..times.len())
                .filter(|(_, after)| *after > bytes)
                .zip(program_end_us(trace))
                .map(|((r, bytes), end)| AfterProgramEnd {
                    bytes,
                    after_us: times.at(r).saturating_sub(end),
                });
            out.push(peak);
        }
    }
    out
}

/// Training steps with both forward marks it takes to speak of a median forward.
const FORWARD_RISE_MIN_STEPS: usize = 3;

/// The median over training steps of `post_forward − pre_forward` of `metric` (0 for a forward
/// that lowered it), when the marks carry it for at least [`FORWARD_RISE_MIN_STEPS`] steps.
fn forward_rise(trace: &Trace, values: &MarkValues, metric: MetricKey) -> Option<u64> {
    let column = values.column(values.keys().iter().position(|k| *k == metric)?);
    let mut before: Option<(u64, u64)> = None;
    let mut rises = Vec::new();
    for (mark, value) in trace.marks.iter().zip(column.iter()) {
        if !crate::marks::is_train(mark.phase) {
            continue;
        }
        match (mark.name.as_ref(), value) {
            ("pre_forward", Some(v)) => before = Some((mark.step, v)),
            ("post_forward", Some(v)) => {
                if let Some((step, b)) = before.take()
                    && step == mark.step
                {
                    rises.push(v.saturating_sub(b));
                }
            }
            _ => {}
        }
    }
    if rises.len() < FORWARD_RISE_MIN_STEPS {
        return None;
    }
    rises.sort_unstable();
    Some(rises[rises.len() / 2])
}

/// The peak whose make-up the summary and the viewer show: the memory peak ([`memory_peak`]) when
/// the analysis attached components to it; for a run whose tensors live in host memory, the
/// host peak in use (PSS where it is the memory in use, else RSS) with its breakdown; else the
/// memory peak as it is.
pub fn breakdown_peak(peaks: &[Peak]) -> Option<&Peak> {
    let device = memory_peak(peaks);
    if let Some(p) = device.filter(|p| p.components.is_some()) {
        return Some(p);
    }
    let host = [
        measured(CounterKind::HostPss),
        measured(CounterKind::HostRss),
    ]
    .into_iter()
    .find_map(|m| {
        peaks
            .iter()
            .filter(|p| p.measure == m && p.components.is_some())
            .max_by_key(|p| p.bytes)
    });
    host.or(device)
}

impl Peak {
    /// Its make-up as named parts, in chart order: parameters (with buffers), gradients,
    /// optimizer state, each extra, activations when known, and `other` (the rest of the peak).
    /// Empty without components.
    pub fn parts(&self) -> Vec<NamedBytes> {
        let Some(c) = &self.components else {
            return Vec::new();
        };
        let named = |name: &str, bytes: u64| NamedBytes {
            name: name.into(),
            bytes,
        };
        let b = &c.breakdown;
        let mut parts = vec![
            named("parameters", b.parameters_bytes + b.buffers_bytes),
            named("gradients", b.gradients_bytes),
            named("optimizer state", b.optimizer_state_bytes),
        ];
        parts.extend(b.extras.iter().cloned());
        parts.extend(c.activations_bytes.map(|a| named("activations", a)));
        let accounted: u64 = parts.iter().map(|p| p.bytes).sum();
        parts.push(named("other", self.bytes.saturating_sub(accounted)));
        parts
    }
}

/// The peak that best answers "how much memory did the program's tensors need?": the highest
/// allocator `allocated` peak; without allocator data, the process's GPU memory; else the
/// device's used memory.
pub fn memory_peak(peaks: &[Peak]) -> Option<&Peak> {
    [
        MetricKey::ALLOCATED,
        measured(CounterKind::ProcessGpu),
        measured(CounterKind::GpuUsed),
    ]
    .into_iter()
    .find_map(|measure| {
        peaks
            .iter()
            .filter(|p| p.measure == measure)
            .reduce(|best, p| if p.bytes > best.bytes { p } else { best })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_format::{NamedBytes, Phase};
    use oomscope_testkit::run::Run;

    fn peaks_of(trace: &Trace) -> Vec<Peak> {
        let several_ranks = crate::rank_views::ranks_of(trace).len() >= 2;
        peaks(trace, &MarkValues::new(trace), several_ranks)
    }

    /// A healthy run whose host RSS (`host.rss`) peaks `offset_us` after the last mark (or
    /// before the first when negative), then exits with `status`.
    fn host_peak_outside(offset_us: i64, status: oomscope_format::ExitStatus) -> Trace {
        let mut trace = Run {
            steps: 4,
            ..Run::default()
        }
        .build();
        let rss = trace.counter(CounterKind::HostRss, None).unwrap();
        let t_us = if offset_us >= 0 {
            trace.marks.last().unwrap().t_us + offset_us as u64
        } else {
            trace.marks[0].t_us - offset_us.unsigned_abs()
        };
        let mut samples = std::mem::take(&mut trace.samples);
        let mut rows: Vec<(u64, Vec<(CounterId, u64)>)> = (0..samples.len())
            .map(|row| {
                let t = samples.time_us(row);
                let values = (0..trace.counters.len() as u32)
                    .filter_map(|c| Some((CounterId(c), samples.value(CounterId(c), row)?)))
                    .collect();
                (t, values)
            })
            .collect();
        rows.push((t_us, vec![(rss, 100 * GIB)]));
        rows.sort_by_key(|(t, _)| *t);
        samples = oomscope_format::Samples::with_counters(trace.counters.len());
        for (t, values) in rows {
            samples.push_row(t, &values);
        }
        trace.samples = samples;
        let exit_t_us = trace.marks.last().unwrap().t_us + offset_us.unsigned_abs() + 1000;
        trace.exit = Some(oomscope_format::ProcessExit {
            t_us: exit_t_us,
            status,
            probable_host_oom: false,
        });
        trace
    }

    fn host_peak(trace: &Trace) -> Peak {
        let values = MarkValues::new(trace);
        peaks(
            trace,
            &values,
            crate::rank_views::ranks_of(trace).len() >= 2,
        )
        .into_iter()
        .find(|p| p.measure == measured(CounterKind::HostRss))
        .unwrap()
    }

    #[test]
    fn a_peak_after_the_last_mark_is_teardown_not_the_last_stage() {
        use oomscope_format::ExitStatus;
        let trace = host_peak_outside(222_000, ExitStatus::Code(0));
        let peak = host_peak(&trace);
        assert_eq!(peak.bytes, 100 * GIB);
        assert!(peak.stage.is_none());
        let Some(OutsideMarks::AfterLastMark { last, after_us }) = &peak.outside_marks else {
            panic!("{peak:?}");
        };
        assert_eq!(
            (last.stage.as_str(), last.step, *after_us),
            ("post_optimizer_step", 3, 222_000)
        );
        // Before the first mark: setup.
        let trace = host_peak_outside(-40_000, ExitStatus::Code(0));
        let peak = host_peak(&trace);
        assert_eq!(
            peak.outside_marks,
            Some(OutsideMarks::BeforeFirstMark { before_us: 40_000 })
        );
        // Read within one sampling interval of the last mark: the last stage's reading.
        let mut trace = host_peak_outside(382, ExitStatus::Code(0));
        trace.metadata.sample_interval_us = 10_000;
        let peak = host_peak(&trace);
        assert_eq!(peak.outside_marks, None);
        assert_eq!(
            peak.stage.as_ref().map(|s| (s.stage.as_str(), s.step)),
            Some(("post_optimizer_step", 3))
        );
        // A run killed after its last mark died in that stage: the stage keeps the peak.
        let trace = host_peak_outside(222_000, ExitStatus::Signal(9));
        let peak = host_peak(&trace);
        assert_eq!(peak.outside_marks, None);
        assert_eq!(peak.stage.unwrap().stage, "post_optimizer_step");
    }

    #[test]
    fn a_peak_in_a_thinned_loop_s_unmarked_last_steps_is_in_the_loop() {
        use oomscope_format::{ExitStatus, MarkSampling};
        // One iteration in 4 marked, 10 ms each; the loop reached 3 steps past its last mark
        // (about 30 ms of them).
        let thinned = |offset_us| {
            let mut trace = host_peak_outside(offset_us, ExitStatus::Code(0));
            let last_step = trace.marks.last().unwrap().step + 3;
            for last_step in [None, Some(last_step)] {
                trace.mark_sampling.push(MarkSampling {
                    every: 4,
                    iteration_us: 10_000,
                    last_step,
                    ..MarkSampling::default()
                });
            }
            host_peak(&trace)
        };
        let peak = thinned(8_650);
        assert_eq!(peak.outside_marks, None);
        assert_eq!(peak.stage.unwrap().stage, "post_optimizer_step");
        // Past them: the teardown, as before.
        let peak = thinned(222_000);
        assert!(
            matches!(peak.outside_marks, Some(OutsideMarks::AfterLastMark { .. })),
            "{peak:?}"
        );
    }

    #[test]
    fn a_process_reading_older_than_the_peak_gives_way_to_the_next_one() {
        // The poller's readings up to the peak predate the allocator's growth (below reserved):
        // the first one after it, with the allocator unchanged, says what is outside it.
        let mut trace = Run::default().build();
        let id = trace.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
        let peak_us = memory_peak(&peaks_of(&trace)).unwrap().t_us;
        let times = trace.samples.times_us().to_vec();
        trace.samples.edit_column(id, |column| {
            for (v, t) in column.iter_mut().zip(&times) {
                if *t <= peak_us {
                    *v = GIB;
                }
            }
        });
        let peaks = peaks_of(&trace);
        let c = memory_peak(&peaks).unwrap().components.clone().unwrap();
        assert_eq!(c.outside_allocator_bytes, Some(600 * MIB));
        // Every reading stale: nothing is said rather than a negative or made-up figure.
        trace.samples.edit_column(id, |column| column.fill(GIB));
        let peaks = peaks_of(&trace);
        let c = memory_peak(&peaks).unwrap().components.clone().unwrap();
        assert_eq!(c.outside_allocator_bytes, None);
    }

    #[test]
    fn with_ranks_the_peak_s_rank_has_its_own_memory_outside_the_allocator() {
        // Two ranks; the marks (and the peak) are rank 0's. The tree's counter holds both ranks'
        // memory, so only rank 0's own counter (its allocator's reserved + 600 MiB) says what is
        // outside rank 0's allocator.
        let mut trace = Run::default().build();
        let tree = trace.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
        let (pid0, pid1) = (101, 102);
        for (pid, rank) in [(pid0, 0), (pid1, 1)] {
            trace.processes.push(oomscope_format::ProcessInfo {
                t_us: 0,
                pid,
                parent_pid: Some(100),
                name: "python".into(),
                role: oomscope_format::ProcessRole::Rank,
                rank_from: oomscope_format::RankSource::Environment,
                rank: Some(rank),
                local_rank: Some(rank),
                world_size: Some(2),
                restart: Some(0),
                group: None,
                start: oomscope_format::StartMethod::Unknown,
            });
        }
        for m in &mut trace.marks {
            m.pid = Some(pid0);
            m.rank = Some(0);
        }
        let own = trace.declare_process_counter(CounterKind::PidGpu, Some(0), pid0);
        let other = trace.declare_process_counter(CounterKind::PidGpu, Some(0), pid1);
        let column = trace.samples.column(tree).unwrap().to_vec();
        trace
            .samples
            .edit_column(own, |c| c.copy_from_slice(&column));
        trace.samples.edit_column(other, |c| {
            for (v, tree_v) in c.iter_mut().zip(&column) {
                *v = if *tree_v == MISSING { MISSING } else { 3 * GIB };
            }
        });
        trace.samples.edit_column(tree, |c| {
            for v in c.iter_mut().filter(|v| **v != MISSING) {
                *v += 3 * GIB;
            }
        });
        let peaks = peaks_of(&trace);
        let c = memory_peak(&peaks).unwrap().components.clone().unwrap();
        assert_eq!(c.outside_allocator_bytes, Some(600 * MIB));
    }

    #[test]
    fn a_peak_read_at_marks_is_split_into_components_and_activations() {
        let trace = Run::default().build();
        let peaks = peaks_of(&trace);
        let labels: Vec<String> = peaks.iter().map(|p| p.metric.label()).collect();
        assert_eq!(
            labels,
            [
                "peak_allocated",
                "allocated",
                "reserved",
                "gpu0.used",
                "gpu0.process",
                "host.rss"
            ]
        );
        let peak = memory_peak(&peaks).unwrap();
        assert_eq!(peak.metric.label(), "peak_allocated");
        assert_eq!(peak.bytes, 28 * GIB);
        let stage = peak.stage.as_ref().unwrap();
        assert_eq!(
            (stage.stage.as_str(), stage.step, stage.phase),
            ("post_forward", 0, Phase::Train)
        );
        let c = peak.components.as_ref().unwrap();
        assert_eq!(c.total_bytes, 16 * GIB);
        assert_eq!(c.activations_bytes, Some(12 * GIB));
        assert_eq!(
            c.activations_basis,
            Some(ActivationsBasis::AllocatorAllocated)
        );
        assert_eq!(c.largest().unwrap().name.as_ref(), "optimizer_state");
        // Beside it: the allocator's 512 MiB cache and the 600 MiB CUDA context, exactly.
        assert_eq!(c.cached_bytes, Some(512 * MIB));
        assert_eq!(c.outside_allocator_bytes, Some(600 * MIB));

        // Reserved and NVML peaks carry components but no activations; the host peak neither.
        let reserved = peaks
            .iter()
            .find(|p| p.metric.label() == "reserved")
            .unwrap();
        assert_eq!(reserved.bytes, 28 * GIB + 512 * MIB);
        assert!(
            reserved
                .components
                .as_ref()
                .unwrap()
                .activations_bytes
                .is_none()
        );
        let host = peaks
            .iter()
            .find(|p| p.metric.label() == "host.rss")
            .unwrap();
        assert!(host.components.is_none());
        assert_eq!(host.measure, measured(CounterKind::HostRss));
    }

    #[test]
    fn without_allocator_data_the_process_memory_is_the_basis() {
        let trace = Run {
            allocator_stats: false,
            ..Run::default()
        }
        .build();
        let peaks = peaks_of(&trace);
        let peak = memory_peak(&peaks).unwrap();
        assert_eq!(peak.measure, measured(CounterKind::ProcessGpu));
        let c = peak.components.as_ref().unwrap();
        assert_eq!(c.activations_basis, Some(ActivationsBasis::ProcessGpu));
        assert_eq!(c.activations_bytes, Some(12 * GIB + 512 * MIB + 600 * MIB));
        // NVML used is not a basis when the process counter exists.
        let used = peaks
            .iter()
            .find(|p| p.measure == measured(CounterKind::GpuUsed))
            .unwrap();
        assert!(
            used.components
                .as_ref()
                .unwrap()
                .activations_bytes
                .is_none()
        );
    }

    #[test]
    fn breakdown_nearest_before_else_after() {
        let mut trace = Trace::default();
        for t in [100, 300] {
            trace.components.push(ComponentBreakdown {
                t_us: t,
                step: t,
                ..ComponentBreakdown::default()
            });
        }
        assert_eq!(breakdown_near(&trace, 50).unwrap().t_us, 100);
        assert_eq!(breakdown_near(&trace, 299).unwrap().t_us, 100);
        assert_eq!(breakdown_near(&trace, 1_000).unwrap().t_us, 300);
        assert!(breakdown_near(&Trace::default(), 0).is_none());
        // With marks: what the hooks sent after the mark the peak is at, before the next one,
        // is what was true at it.
        for t in [200, 400] {
            trace.marks.push(oomscope_format::StageMark {
                t_us: t,
                ..oomscope_format::StageMark::default()
            });
        }
        trace.components[1].t_us = 250;
        assert_eq!(breakdown_near(&trace, 200).unwrap().t_us, 250);
        assert_eq!(breakdown_near(&trace, 150).unwrap().t_us, 100);
    }

    #[test]
    fn activations_saturate_and_extras_count() {
        let breakdown = ComponentBreakdown {
            parameters_bytes: 10,
            extras: vec![NamedBytes {
                name: "ema".into(),
                bytes: 30,
            }],
            ..ComponentBreakdown::default()
        };
        let c = PeakComponents::new(&breakdown, 25, Some(ActivationsBasis::AllocatorAllocated));
        assert_eq!(c.total_bytes, 40);
        assert_eq!(c.activations_bytes, Some(0));
        assert_eq!(
            c.largest().unwrap(),
            NamedBytes {
                name: "ema".into(),
                bytes: 30
            }
        );
    }

    #[test]
    fn empty_trace_has_no_peaks() {
        let trace = Trace::default();
        assert!(peaks_of(&trace).is_empty());
        assert!(memory_peak(&[]).is_none());
    }

    #[test]
    fn a_cpu_run_gets_its_breakdown_at_the_host_peak() {
        let mut trace = Trace::default();
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        trace.samples.push_row(1_000, &[(rss, 100)]);
        trace.samples.push_row(2_000, &[(rss, 900)]);
        trace.components.push(ComponentBreakdown {
            t_us: 500,
            step: 0,
            batch_size: None,
            parameters_bytes: 200,
            buffers_bytes: 10,
            gradients_bytes: 200,
            optimizer_state_bytes: 400,
            extras: Vec::new(),
            optimizers: Vec::new(),
            parameter_count: None,
            trainable_parameter_count: None,
        });
        let values = MarkValues::new(&trace);
        let all = peaks(&trace, &values, false);
        let p = breakdown_peak(&all).expect("a host peak");
        assert_eq!((p.measure, p.bytes), (measured(CounterKind::HostRss), 900));
        let parts: Vec<(String, u64)> = p
            .parts()
            .into_iter()
            .map(|n| (n.name.to_string(), n.bytes))
            .collect();
        assert_eq!(
            parts,
            vec![
                ("parameters".to_owned(), 210),
                ("gradients".to_owned(), 200),
                ("optimizer state".to_owned(), 400),
                ("other".to_owned(), 90),
            ]
        );
        assert_eq!(p.components.as_ref().unwrap().forward_rise_bytes, None);
    }

    #[test]
    fn a_cpu_run_s_breakdown_says_what_a_training_forward_adds() {
        let mut trace = Trace::default();
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        // Forwards that add 30, 50 and 40 MiB; an eval forward's 500 MiB does not count.
        let mut t = 0;
        for (step, rise, phase) in [
            (0, 30, Phase::Train),
            (1, 50, Phase::Train),
            (2, 40, Phase::Train),
            (3, 500, Phase::Eval),
        ] {
            for (stage, bytes) in [("pre_forward", 700), ("post_forward", 700 + rise)] {
                t += 1_000;
                trace.samples.push_row(t, &[(rss, bytes * MIB)]);
                trace.marks.push(oomscope_format::StageMark {
                    t_us: t,
                    name: stage.into(),
                    step,
                    phase,
                    ..Default::default()
                });
            }
        }
        trace.components.push(ComponentBreakdown {
            t_us: 500,
            parameters_bytes: 10 * MIB,
            ..Default::default()
        });
        let values = MarkValues::new(&trace);
        let all = peaks(&trace, &values, false);
        let p = breakdown_peak(&all).expect("a host peak");
        let c = p.components.as_ref().unwrap();
        assert_eq!(c.forward_rise_bytes, Some(40 * MIB));
    }
}

//! The symptom, measured from memory alone before anything is classified: for the host's memory
//! in use and each device's, its floor along the run's unit (`units`), whether and how that floor
//! rose (`shape`: steadily, in stairs, up to a bound, with the input), and the peaks above it.
//! The findings explain a symptom; an eval, a pause or a phase can never make one disappear: a
//! rise the rules do not explain is said, as a rise nothing explains.

mod parts;
mod shape;
mod units;

pub use parts::{Part, PartKind};
pub use shape::{
    INPUT_CORRELATION, INPUT_SPREAD, LATE_RATE_SHARE, LATE_SHARE, LEVEL_SHARE, Levels, MAX_STAIRS,
    MIN_POINTS, MIN_RISE_BYTES, MIN_RISE_SHARE, NOISE_FACTOR, PEAK_FACTOR, PEAK_MIN_BYTES,
    STAIR_MIN_BYTES, STAIR_NOISE_FACTOR, STAIRS_SHARE, Shape, Stair, WARM_UP_SHARE,
};
pub use units::{
    MAX_POINTS, TIME_WINDOWS, Unit, UnitPoint, block_len, unit_series, unit_series_of_marks,
};

use oomscope_format::{CounterId, CounterKind, Trace};
use serde::Serialize;

use crate::metrics::{MetricKey, host_in_use};

/// What one memory did along the run's unit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Symptom {
    /// The memory.
    pub metric: MetricKey,
    /// The unit it is read on (`step`, `forward`, `second`).
    pub unit: Unit,
    /// Repeats of the unit read (after the warm-up; blocks of them past
    /// [`units::MAX_POINTS`]).
    pub points: usize,
    /// A repeat's typical length (the median), microseconds.
    pub unit_us: u64,
    /// The first and last position read.
    pub first_at: u64,
    /// See `first_at`.
    pub last_at: u64,
    /// The floor's levels and noise.
    #[serde(flatten)]
    pub levels: Levels,
    /// What the floor did.
    #[serde(flatten)]
    pub shape: Shape,
    /// The span read (run clock), the warm-up left out.
    pub from_us: u64,
    /// See `from_us`.
    pub to_us: u64,
    /// What the rise is made of, by kind, over that span.
    pub parts: Vec<Part>,
    /// The rise the parts leave unexplained (the rise itself without parts).
    pub unexplained_bytes: i64,
}

impl Symptom {
    /// The rate of its rise, per unit.
    pub fn rate_bytes_per_unit(&self) -> Option<f64> {
        self.shape.rate_bytes_per_unit()
    }

    /// Whether it is host memory.
    pub fn host(&self) -> bool {
        self.metric.is_host()
    }
}

/// The symptom of host memory (`host`) or of the devices' memory in `symptoms`.
pub fn of_memory(symptoms: &[Symptom], host: bool) -> Option<&Symptom> {
    symptoms.iter().find(|s| s.host() == host)
}

/// The symptoms of `trace`: the host's memory in use (the tree's PSS, else its RSS), then each
/// device's memory the run used (the allocator's, else the process's, else the device's).
pub fn symptoms(trace: &Trace) -> Vec<Symptom> {
    let (devices, from_marks) = device_counters(trace);
    let model_on_host = !from_marks && devices.is_empty();
    let mut out: Vec<Symptom> = host_in_use(trace)
        .into_iter()
        .chain(devices)
        .filter_map(|id| {
            let (unit, points) = unit_series(trace, id)?;
            let c = &trace.counters[id.0 as usize];
            let metric = MetricKey::Counter {
                kind: c.kind,
                device: c.device,
            };
            let here = metric.is_host() == model_on_host;
            symptom_of(trace, metric, unit, &points, here)
        })
        .collect();
    if from_marks && let Some((unit, points)) = unit_series_of_marks(trace) {
        out.extend(symptom_of(trace, MetricKey::ALLOCATED, unit, &points, true));
    }
    out
}

/// Whether the model's state lives in host memory: the trace reads no device's memory (the
/// allocator's statistics at the marks, or a device's counter). The rules that compare model
/// state with a memory's rise ask this one question.
pub(crate) fn model_on_host(trace: &Trace) -> bool {
    let (devices, from_marks) = device_counters(trace);
    !from_marks && devices.is_empty()
}

/// The sample rows the symptoms read (each repeat's floor and peak), for a thinned copy of the
/// trace to keep.
pub fn rows_read(trace: &Trace) -> Vec<usize> {
    host_in_use(trace)
        .into_iter()
        .chain(device_counters(trace).0)
        .filter_map(|id| unit_series(trace, id))
        .flat_map(|(_, points)| points.into_iter().filter_map(|p| p.rows))
        .flat_map(|(floor, peak)| [floor, peak])
        .collect()
}

/// The devices' counters the symptoms read from the samples (beside the host's memory in use),
/// and whether the marks carry the allocator's statistics (a device's memory then read from
/// them). Cheap: no column is scanned, unlike the host's choice of PSS or RSS.
fn device_counters(trace: &Trace) -> (Vec<CounterId>, bool) {
    let mut counters: Vec<CounterId> = Vec::new();
    let devices: std::collections::BTreeSet<u32> =
        trace.counters.iter().filter_map(|c| c.device).collect();
    // Marks that carry the allocator's statistics read a device's memory in use themselves.
    let from_marks = trace.marks.has_allocator();
    for device in devices.into_iter().filter(|_| !from_marks) {
        let on = |kind: CounterKind| {
            trace
                .counters
                .iter()
                .position(|c| c.kind == kind && c.device == Some(device))
                .map(|i| CounterId(i as u32))
                .filter(|id| trace.samples.column(*id).is_some_and(|c| !c.is_empty()))
        };
        if let Some(id) = on(CounterKind::Allocator(
            oomscope_format::AllocatorQuantity::Allocated,
        ))
        .or_else(|| on(CounterKind::ProcessGpu))
        .or_else(|| on(CounterKind::GpuUsed))
        {
            counters.push(id);
        }
    }
    (counters, from_marks)
}

/// The symptom of one memory's `points`; `model_here`: the model's state lives in it.
fn symptom_of(
    trace: &Trace,
    metric: MetricKey,
    unit: Unit,
    points: &[UnitPoint],
    model_here: bool,
) -> Option<Symptom> {
    let points = points.to_vec();
    let inputs = inputs_at(trace, &points);
    let (shape, levels) = shape::read_shape(&points, &inputs)?;
    let read = &points[shape::warm_up(points.len())..];
    let (from_us, to_us) = (read.first()?.from_us, read.last()?.to_us);
    let host = metric.is_host();
    let parts = parts::parts(trace, host, model_here, from_us, to_us);
    let unexplained_bytes = levels.rise_bytes - parts.iter().map(|p| p.bytes.max(0)).sum::<i64>();
    Some(Symptom {
        metric,
        from_us,
        to_us,
        parts,
        unexplained_bytes,
        unit,
        points: points.len(),
        unit_us: typical_us(&points),
        first_at: points.first()?.at,
        last_at: points.last()?.at,
        levels,
        shape,
    })
}

/// A repeat's median length.
fn typical_us(points: &[UnitPoint]) -> u64 {
    let mut lengths: Vec<u64> = points.iter().map(|p| p.to_us - p.from_us).collect();
    lengths.sort_unstable();
    lengths.get(lengths.len() / 2).copied().unwrap_or(0)
}

/// Each point's input size: the largest the hooks recorded at or before its end.
fn inputs_at(trace: &Trace, points: &[UnitPoint]) -> Vec<Option<u64>> {
    if trace.inputs.is_empty() {
        return Vec::new();
    }
    let mut next = 0;
    let mut current = None;
    points
        .iter()
        .map(|p| {
            while next < trace.inputs.len() && trace.inputs[next].t_us < p.to_us {
                current = Some(trace.inputs[next].elements);
                next += 1;
            }
            current
        })
        .collect()
}

/// The symptom the summary leads with: a rise before a bounded one before a peak, the largest of
/// each (a device's allocator before the host at a tie).
pub fn headline(symptoms: &[Symptom]) -> Option<&Symptom> {
    let rank = |s: &Symptom| match s.shape {
        Shape::LinearGrowth { .. } | Shape::Staircase { .. } => 4,
        Shape::FollowsInput { .. } => 3,
        Shape::Bounded { .. } => 2,
        Shape::TransientPeak { .. } => 1,
        Shape::None => 0,
    };
    symptoms
        .iter()
        .max_by_key(|s| (rank(s), s.levels.rise_bytes.max(0)))
}

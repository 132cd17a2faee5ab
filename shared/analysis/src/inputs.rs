//! Peaks a step's input explains. Batches of variable length (text padded per batch, images of
//! varied size) make a rare long batch the run's peak: memory rises with its elements, is gone
//! the step after, and the run looks fine until the longest batch comes. The zero-code hooks
//! send each training forward's input size when it changes (INPUT records); here each training
//! step gets its input (carried forward from the last one sent), its highest value of the primary
//! metric at its marks, and a line through (elements, peak) over the steps says what an input
//! element costs. A peak step whose input is well above a median step's, and whose excess the
//! line explains, is an input-driven peak — never a leak, and never "nothing to change".
//!
//! A program that never trains (a serving loop, a batch inference over images of many sizes) is
//! read the same way on its forwards: each forward's highest reading, from the samples between
//! its marks (its activations peak inside it), against the input the hooks sent for it.

use crate::fit::least_squares;
use crate::leaks::{LimitBasis, limit_of};
use crate::marks::{StageIndex, is_train};
use crate::metrics::{MarkValues, MetricKey, host_in_use};
use crate::peaks::tensors_on_host;
use crate::symptom::{Unit, block_len, unit_series, unit_series_of_marks};
use oomscope_format::Trace;
use serde::Serialize;
use std::collections::BTreeMap;

/// A peak step's input must be at least this many times a median step's.
pub const INPUT_PEAK_MIN_RATIO: f64 = 2.0;

/// ...its peak above a median step's peak by at least this share of it...
pub const INPUT_PEAK_MIN_RISE: f64 = 0.05;

/// ...and at least these bytes (a rise the RSS's noise cannot make).
pub const INPUT_PEAK_MIN_BYTES: u64 = 8 << 20;

/// ...and the line through every step must explain at least this share of the rise.
const EXPLAINED_SHARE: f64 = 0.5;

/// Training steps with an input and a value it takes to speak of a "median step".
const MIN_STEPS: usize = 8;

/// How far below a later step's peak a long step's may be and still be its cause, when memory
/// stayed up between them: this share of the later peak, or [`INPUT_PEAK_MIN_BYTES`] if more.
const HELD_MARGIN: f64 = 0.02;

/// A step whose peak its input explains.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InputPeak {
    /// The metric whose per-step peak it is.
    pub metric: MetricKey,
    /// The step.
    pub step: u64,
    /// The stage of its highest mark.
    pub stage: String,
    /// Its highest value at a mark.
    pub peak_bytes: u64,
    /// Its input's element count and shape.
    pub elements: u64,
    /// Shape as the hooks wrote it (`8x4096`).
    pub shape: String,
    /// A median training step's peak.
    pub median_peak_bytes: u64,
    /// A median training step's input elements, and a shape that had them.
    pub median_elements: u64,
    /// Shape of a median step's input.
    pub median_shape: String,
    /// The per-step peak's rise per input element (the line's slope).
    pub bytes_per_element: f64,
    /// The line's value at zero elements.
    pub intercept_bytes: f64,
    /// Training steps the line was fitted on.
    pub steps: usize,
    /// The steps whose input was at least [`INPUT_PEAK_MIN_RATIO`] times a median step's.
    pub long_steps: Vec<LongInput>,
    /// The memory the metric runs into, when known, and what it is.
    pub limit: Option<(u64, LimitBasis)>,
    /// The clock `step`, `steps` and `long_steps` count: training steps, or the forwards of a
    /// program that never trains (a serving or inference loop, each forward's peak read from
    /// the samples in it).
    pub unit: Unit,
    /// The repeats of the unit each point is: 1, or the forwards of a block when a loop made
    /// more than [`crate::symptom::MAX_POINTS`] (each block its highest reading against its
    /// largest input).
    pub per_point: u64,
}

impl InputPeak {
    /// The input's size over a median step's.
    pub fn ratio(&self) -> f64 {
        self.elements as f64 / self.median_elements.max(1) as f64
    }

    /// The step's long input, if `step` had one.
    pub fn long_input(&self, step: u64) -> Option<&LongInput> {
        self.long_steps.iter().find(|l| l.step == step)
    }

    /// The largest input, in elements, whose fitted peak stays under `share` of the limit.
    pub fn elements_within(&self, share: f64) -> Option<u64> {
        let (limit, _) = self.limit?;
        let room = share * limit as f64 - self.intercept_bytes;
        (self.bytes_per_element > 0.0 && room > 0.0).then(|| (room / self.bytes_per_element) as u64)
    }
}

/// A training step with a long input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LongInput {
    /// The step.
    pub step: u64,
    /// Its input's element count.
    pub elements: u64,
    /// Its input's shape.
    pub shape: String,
}

/// Each training step's highest value of the primary metric at its marks, with that mark's
/// stage, and the input it was given.
struct StepPoint {
    step: u64,
    peak_bytes: u64,
    stage: usize,
    elements: u64,
    shape: String,
}

/// The step whose memory the step at `at` still holds, `at` itself if none: a step with a long
/// input ([`INPUT_PEAK_MIN_RATIO`] times the median) before it whose peak is within
/// [`HELD_MARGIN`] of its own, with every step between them within it too. The C allocator keeps
/// what a long batch's activations took for some steps after it (glibc returns the top of its
/// heap only once nothing above is in use), so a short step can read a few KiB above the long
/// one that raised it.
fn held_from_long_step(points: &[StepPoint], at: usize, median_elements: u64) -> usize {
    let long = |p: &StepPoint| p.elements as f64 >= INPUT_PEAK_MIN_RATIO * median_elements as f64;
    if long(&points[at]) {
        return at;
    }
    let peak = points[at].peak_bytes;
    let floor =
        peak.saturating_sub((HELD_MARGIN * peak as f64).max(INPUT_PEAK_MIN_BYTES as f64) as u64);
    for i in (0..at).rev() {
        if points[i].peak_bytes < floor {
            return at;
        }
        if long(&points[i]) {
            return i;
        }
    }
    at
}

/// The input-driven peak, if the run has one.
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn input_peak(trace: &Trace, values: &MarkValues) -> Option<InputPeak> {
    input_peak_with(trace, values, &StageIndex::new(trace))
}

/// [`input_peak`] with the marks' stages already numbered (`stages`, of every mark).
pub fn input_peak_with(
    trace: &Trace,
    values: &MarkValues,
    stages: &StageIndex,
) -> Option<InputPeak> {
    if trace.inputs.is_empty() {
        return None;
    }
    if !trace.marks.iter().any(|m| is_train(m.phase)) {
        return forward_peak(trace, values, stages);
    }
    // The memory the program's tensors are in: a CPU run on a GPU host reads the host's, not the
    // device's (other programs' memory).
    let metric = if tensors_on_host(trace) {
        values.index_of(MetricKey::of_counter(trace, host_in_use(trace)?))?
    } else {
        values.primary()?
    };
    let column = values.column(metric);
    // The input each step of each sender was given (the hooks send a step's largest input at its
    // end when it differs from the last one sent): the last one sent at or before it.
    let mut sent: BTreeMap<(Option<u32>, u64), (u64, &str)> = BTreeMap::new();
    for input in &trace.inputs {
        let entry = sent.entry((input.pid, input.step)).or_insert((0, ""));
        if input.elements >= entry.0 {
            *entry = (input.elements, input.shape.as_ref());
        }
    }
    let mut points: Vec<StepPoint> = Vec::new();
    for (i, mark) in trace.marks.iter().enumerate() {
        if !is_train(mark.phase) {
            continue;
        }
        let Some(value) = column.get(i) else {
            continue;
        };
        // The mark's sender's inputs (a trace of several ranks), else any.
        let sender = if sent.keys().any(|(pid, _)| *pid == mark.pid) {
            mark.pid
        } else {
            sent.keys().next().and_then(|(pid, _)| *pid)
        };
        let Some((_, &(elements, shape))) =
            sent.range((sender, 0)..=(sender, mark.step)).next_back()
        else {
            continue;
        };
        // Marks come in time order: a step's marks follow one another.
        match points.last_mut().filter(|p| p.step == mark.step) {
            Some(p) if value > p.peak_bytes => (p.peak_bytes, p.stage) = (value, stages.of_mark(i)),
            Some(_) => {}
            None => points.push(StepPoint {
                step: mark.step,
                peak_bytes: value,
                stage: stages.of_mark(i),
                elements,
                shape: shape.to_owned(),
            }),
        }
    }
    judged(trace, values.key(metric), Unit::Step, &points, stages)
}

/// The input-driven peak of a program that never trains: each forward's highest reading (its
/// repeat on the forward clock, `symptom::unit_series`: a forward's activations peak inside it,
/// between its marks) against the input it was given (the last one sent before it ended; the
/// hooks send an inference forward's input after it when it differs from the last one).
fn forward_peak(trace: &Trace, values: &MarkValues, stages: &StageIndex) -> Option<InputPeak> {
    let (metric, (unit, repeats)) = if tensors_on_host(trace) {
        let id = host_in_use(trace)?;
        (MetricKey::of_counter(trace, id), unit_series(trace, id)?)
    } else {
        (values.key(values.primary()?), unit_series_of_marks(trace)?)
    };
    if unit != Unit::Forward {
        return None;
    }
    let stage = stages
        .names()
        .iter()
        .position(|n| n == "pre_forward")
        .unwrap_or(0);
    // A point is a block of forwards past `MAX_POINTS`: its highest reading against the largest
    // input it was given (the one in effect as it began, or one sent inside it).
    let forwards = trace
        .marks
        .iter()
        .filter(|m| &*m.name == "pre_forward")
        .count();
    let per_point = block_len(forwards) as u64;
    let mut next = 0;
    let mut current: Option<(u64, &str)> = None;
    let mut points = Vec::with_capacity(repeats.len());
    for p in &repeats {
        let mut largest = current;
        while next < trace.inputs.len() && trace.inputs[next].t_us < p.to_us {
            let i = &trace.inputs[next];
            current = Some((i.elements, i.shape.as_ref()));
            if i.t_us >= p.from_us && largest.is_none_or(|(e, _)| i.elements > e) {
                largest = current;
            }
            next += 1;
        }
        // One forward's own input is the last one sent before it ended (sent after it).
        let given = if per_point > 1 { largest } else { current };
        if let Some((elements, shape)) = given.or(current) {
            points.push(StepPoint {
                step: p.at,
                peak_bytes: p.peak_bytes,
                stage,
                elements,
                shape: shape.to_owned(),
            });
        }
    }
    let mut peak = judged(trace, metric, Unit::Forward, &points, stages)?;
    peak.per_point = per_point;
    Some(peak)
}

/// The input-driven peak among `points` (one per step or forward), if there is one: the highest
/// (or the long one whose memory it still holds) with an input [`INPUT_PEAK_MIN_RATIO`] times a
/// median one's, a rise the line through every point explains.
fn judged(
    trace: &Trace,
    metric: MetricKey,
    unit: Unit,
    points: &[StepPoint],
    stages: &StageIndex,
) -> Option<InputPeak> {
    if points.len() < MIN_STEPS {
        return None;
    }
    let median_of = |mut v: Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let median_elements = median_of(points.iter().map(|p| p.elements).collect());
    let median_peak = median_of(points.iter().map(|p| p.peak_bytes).collect());
    // The highest, then the longest input, then the first...
    let (highest, _) = points
        .iter()
        .enumerate()
        .max_by_key(|(_, p)| (p.peak_bytes, p.elements, std::cmp::Reverse(p.step)))?;
    // ...or the long step whose memory it still holds.
    let top = &points[held_from_long_step(points, highest, median_elements)];
    let rise = top.peak_bytes.saturating_sub(median_peak);
    let ratio = top.elements as f64 / median_elements.max(1) as f64;
    if ratio < INPUT_PEAK_MIN_RATIO
        || rise < INPUT_PEAK_MIN_BYTES
        || (rise as f64) < INPUT_PEAK_MIN_RISE * median_peak as f64
    {
        return None;
    }
    let xy: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.elements as f64, p.peak_bytes as f64))
        .collect();
    let line = least_squares(&xy)?;
    let explained = line.slope * (top.elements - median_elements) as f64;
    if line.slope <= 0.0 || explained < EXPLAINED_SHARE * rise as f64 {
        return None;
    }
    let median_shape = points
        .iter()
        .find(|p| p.elements == median_elements)
        .map(|p| p.shape.clone())
        .unwrap_or_default();
    let long_steps = points
        .iter()
        .filter(|p| p.elements as f64 >= INPUT_PEAK_MIN_RATIO * median_elements as f64)
        .map(|p| LongInput {
            step: p.step,
            elements: p.elements,
            shape: p.shape.clone(),
        })
        .collect();
    Some(InputPeak {
        metric,
        step: top.step,
        stage: stages.names()[top.stage].clone(),
        peak_bytes: top.peak_bytes,
        elements: top.elements,
        shape: top.shape.clone(),
        median_peak_bytes: median_peak,
        median_elements,
        median_shape,
        bytes_per_element: line.slope,
        intercept_bytes: line.intercept,
        steps: points.len(),
        long_steps,
        limit: limit_of(trace, metric),
        unit,
        per_point: 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::StepInput;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    /// A run whose activations scale with each step's input: step 36 gets 8x the tokens.
    fn variable_run(long_step: u64) -> Trace {
        let run = Run {
            steps: 60,
            ..Run::default()
        };
        let mut trace = run.build();
        let per_token = 2 * MIB;
        let tokens = |step: u64| if step == long_step { 8 * 512 } else { 512 };
        let sizes: Vec<(u64, u64)> = trace
            .marks
            .iter()
            .map(|m| (m.step, m.t_us))
            .collect::<Vec<_>>();
        for (step, t_us) in sizes.iter().copied() {
            if trace.inputs.last().is_none_or(|i| i.step != step) {
                let n = tokens(step);
                trace.inputs.push(StepInput {
                    t_us,
                    step,
                    elements: n,
                    shape: format!("8x{}", n / 8).into(),
                    pid: None,
                });
            }
        }
        // The activations at post_forward grow with the step's tokens.
        trace.marks.edit(|m| {
            if m.name.as_ref() == "post_forward"
                && let Some(s) = m.allocator.as_mut()
            {
                s.allocated_bytes += tokens(m.step).saturating_sub(512) * per_token;
            }
        });
        trace
    }

    #[test]
    fn a_rare_long_batch_is_the_peak_and_its_cost_per_element_is_fitted() {
        let trace = variable_run(36);
        let values = MarkValues::new(&trace);
        let p = input_peak(&trace, &values).expect("an input-driven peak");
        assert_eq!(p.step, 36);
        assert_eq!(p.stage, "post_forward");
        assert_eq!((p.elements, p.median_elements), (4096, 512));
        assert_eq!(
            (p.shape.as_str(), p.median_shape.as_str()),
            ("8x512", "8x64")
        );
        assert_eq!(p.ratio(), 8.0);
        assert_eq!(
            p.long_steps,
            [LongInput {
                step: 36,
                elements: 4096,
                shape: "8x512".into()
            }]
        );
        assert_eq!(p.peak_bytes - p.median_peak_bytes, 3584 * 2 * MIB);
        assert!((p.bytes_per_element - (2 * MIB) as f64).abs() < 1.0);
        assert!(p.limit.is_some());
        let within = p.elements_within(0.9).unwrap();
        let at = p.intercept_bytes + p.bytes_per_element * within as f64;
        assert!((at - 0.9 * p.limit.unwrap().0 as f64).abs() < 4.0 * MIB as f64);
        let _ = GIB;
    }

    #[test]
    fn an_inference_loop_s_largest_input_is_its_peak_on_the_forward_clock() {
        // A loop that never trains: every mark an eval one, the step never moving; forward 37
        // gets 8x the pixels, and its activations (at post_forward) grow with them. The hooks
        // send each forward's input after it, when it differs from the last one sent.
        let mut trace = Run {
            steps: 60,
            stages: vec!["pre_forward", "post_forward"],
            ..Run::default()
        }
        .build();
        let per_pixel = 2 * MIB;
        let pixels = |forward: u64| -> u64 { if forward == 37 { 8 * 512 } else { 512 } };
        let mut sent: Vec<StepInput> = Vec::new();
        trace.marks.edit(|m| {
            let forward = m.step + 1;
            if m.name.as_ref() == "post_forward" {
                if let Some(s) = m.allocator.as_mut() {
                    s.allocated_bytes += pixels(forward).saturating_sub(512) * per_pixel;
                }
                if sent.last().is_none_or(|i| i.elements != pixels(forward)) {
                    sent.push(StepInput {
                        t_us: m.t_us + 1,
                        step: 0,
                        elements: pixels(forward),
                        shape: format!("1x{}", pixels(forward)).into(),
                        pid: None,
                    });
                }
            }
            m.phase = oomscope_format::Phase::Eval;
            m.step = 0;
        });
        trace.inputs = sent;
        let values = MarkValues::new(&trace);
        let p = input_peak(&trace, &values).expect("an input-driven peak");
        assert_eq!((p.unit, p.step), (Unit::Forward, 37));
        assert_eq!((p.elements, p.median_elements), (4096, 512));
        assert_eq!(p.steps, 60);
        assert_eq!(p.peak_bytes - p.median_peak_bytes, 3584 * 2 * MIB);
        assert!((p.bytes_per_element - (2 * MIB) as f64).abs() < 1.0);
        // The same loop given one size throughout has none.
        trace.inputs.truncate(1);
        assert_eq!(input_peak(&trace, &MarkValues::new(&trace)), None);
    }

    #[test]
    fn a_short_step_holding_the_long_steps_memory_names_the_long_step() {
        // glibc keeps the long batch's memory for the steps after it: step 37 reads 4 KiB above
        // step 36, with its own input the median's.
        let mut trace = variable_run(36);
        let peak_36 = trace
            .marks
            .iter_recorded()
            .filter(|m| m.step == 36)
            .filter_map(|m| m.allocator.map(|s| s.allocated_bytes))
            .max()
            .unwrap();
        trace.marks.edit(|m| {
            if (37..=38).contains(&m.step)
                && let Some(s) = m.allocator.as_mut()
            {
                s.allocated_bytes = peak_36 + 4096;
            }
        });
        let p = input_peak(&trace, &MarkValues::new(&trace)).expect("the long step's peak");
        assert_eq!((p.step, p.elements), (36, 4096));
        assert_eq!(p.peak_bytes, peak_36);
        // A step that rose on its own (memory fell back in between) is not the long step's.
        trace.marks.edit(|m| {
            if m.step == 37
                && let Some(s) = m.allocator.as_mut()
            {
                s.allocated_bytes = 0;
            }
        });
        assert!(input_peak(&trace, &MarkValues::new(&trace)).is_none());
    }

    #[test]
    fn each_sender_reads_its_own_inputs() {
        // Another process (a second rank) sent long inputs at other steps: the marks' sender's
        // own inputs are the ones read.
        let mut trace = variable_run(36);
        for m in &mut trace.marks {
            m.pid = Some(7);
        }
        for i in &mut trace.inputs {
            i.pid = Some(7);
        }
        let other = trace.inputs.iter().map(|i| StepInput {
            elements: 8 * 4096,
            shape: "8x4096".into(),
            pid: Some(8),
            ..i.clone()
        });
        let other: Vec<StepInput> = other.collect();
        trace.inputs.extend(other);
        let p = input_peak(&trace, &MarkValues::new(&trace)).expect("rank 7's own peak");
        assert_eq!((p.step, p.elements, p.median_elements), (36, 4096, 512));
    }

    #[test]
    fn fixed_size_batches_and_a_peak_the_input_does_not_explain_are_not_input_peaks() {
        let mut trace = variable_run(36);
        let values = MarkValues::new(&trace);
        assert!(input_peak(&trace, &values).is_some());
        // Same sizes everywhere: one INPUT record.
        let fixed = Trace {
            inputs: trace.inputs[..1].to_vec(),
            ..trace.clone()
        };
        assert!(input_peak(&fixed, &MarkValues::new(&fixed)).is_none());
        // The long input at another step than the peak: the line explains nothing.
        for i in &mut trace.inputs {
            i.elements = if i.step == 12 { 4096 } else { 512 };
        }
        assert!(input_peak(&trace, &MarkValues::new(&trace)).is_none());
        // No input records at all.
        trace.inputs.clear();
        assert!(input_peak(&trace, &MarkValues::new(&trace)).is_none());
    }
}

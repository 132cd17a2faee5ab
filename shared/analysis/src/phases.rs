//! What evaluation does to training memory.
//!
//! Eval runs inside the training process, often with different shapes, sometimes with autograd
//! still on, and often collects outputs. Two things go wrong: eval needs more memory than a
//! training step (the run dies at the first eval, hours in), or eval leaves memory behind that
//! training never gets back (each eval ratchets the baseline up). For every switch from training
//! to eval and back this module compares the primary metric before, during and after, at the
//! same point of the training step, so the training sawtooth does not masquerade as retention.
//! It also tells growth *within* an eval (outputs kept batch by batch: the `torch.cat(all_logits)`
//! pattern, measured at the same stage of the eval's first and last batch) from memory kept
//! *after* it, and lists evals that come before the first training mark (an eval at iteration 0,
//! Lightning's sanity check) with no "before" to compare.

use serde::Serialize;

use crate::marks::is_train;
use crate::metrics::{MarkColumn, MarkValues, MetricKey};
use crate::stages::signed_delta;
use oomscope_format::{Marks, Phase, Trace};

/// One stretch of eval between training marks (or before the first).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PhaseTransition {
    /// Metric label.
    pub metric: MetricKey,
    /// Stage of the last training mark before eval; `None` for an eval before any training.
    pub before_stage: Option<String>,
    /// Step of the last training mark before eval.
    pub before_step: Option<u64>,
    /// The metric at the last training mark before eval.
    pub before_bytes: Option<u64>,
    /// The floor training stood on before eval: the lowest value at `before_stage` over the
    /// last quarter (at least [`FLOOR_MARKS`]) of those marks in the training stretch before
    /// it, counted as if at its last mark (less `training_slope_bytes` a step from it). What
    /// eval kept is measured from here, floor to floor, so that one high or low reading on
    /// either side (the C allocator's heap moves by tens of MiB from step to step) is not read
    /// as kept or as given back.
    pub floor_before_bytes: Option<u64>,
    /// Step of the mark that floor was read at.
    pub floor_before_step: Option<u64>,
    /// Step of the first eval mark.
    pub entry_step: u64,
    /// Time of the first eval mark.
    pub entry_t_us: u64,
    /// Eval marks in the stretch.
    pub eval_marks: usize,
    /// Highest value during eval: at its marks, and for a sampled counter at every sample from
    /// its first mark to the first training mark after it (a `torch.cat(all_logits)` after the
    /// last eval batch happens between marks).
    pub eval_peak_bytes: Option<u64>,
    /// The stage the eval's growth is measured at: its first mark's, seen again at its last batch.
    pub within_stage: Option<String>,
    /// Times the eval passed that stage (its batches).
    pub eval_batches: usize,
    /// The metric at that stage in the eval's first batch minus in its last: what the eval
    /// accumulated batch by batch (`None` with fewer than two batches).
    pub within_growth_bytes: Option<i64>,
    /// Stage of the training mark compared after eval: of the marks at `before_stage` in the
    /// next training stretch, the floor (memory kept stays; memory the allocator hands back
    /// later does not); else that stretch's first mark.
    pub after_stage: Option<String>,
    /// Step of that mark.
    pub after_step: Option<u64>,
    /// Time of the first training mark after eval (the exit from eval).
    pub exit_t_us: Option<u64>,
    /// The metric at the compared training mark; `None` when the trace ended in eval.
    pub after_bytes: Option<u64>,
    /// `eval_peak − before`.
    pub jump_bytes: Option<i64>,
    /// Training's own growth per step at `before_stage` around the eval (the median
    /// step-to-step change on both sides, never below zero), taken out of `retained_bytes`.
    pub training_slope_bytes: Option<i64>,
    /// What eval left behind: the floor after (`after_bytes`) minus `floor_before_bytes`, each
    /// counted as if at the eval's edge (less `training_slope_bytes` a step from it).
    pub retained_bytes: Option<i64>,
}

/// The fewest training marks the floor before an eval is read over.
pub const FLOOR_MARKS: usize = 3;

/// Every train→eval→train transition, measured with the primary metric. Linear in the marks.
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn phase_transitions(trace: &Trace, values: &MarkValues) -> Vec<PhaseTransition> {
    PhaseScan::default().report(trace, values).0
}

/// Whether mark `i` is an eval's first: an eval mark after a training one, or before the first
/// training mark (`first_train`).
fn starts_eval(marks: &Marks, i: usize, first_train: usize) -> bool {
    marks[i].phase == Phase::Eval && (i < first_train || is_train(marks[i - 1].phase))
}

/// The eval whose first mark is `i`: the mark after it and the next eval's first (the number of
/// marks where there is none).
fn eval_bounds(marks: &Marks, i: usize) -> (usize, usize) {
    let eval_end = (i..marks.len())
        .find(|&j| marks[j].phase != Phase::Eval)
        .unwrap_or(marks.len());
    let train_end = (eval_end..marks.len())
        .find(|&j| marks[j].phase == Phase::Eval)
        .unwrap_or(marks.len());
    (eval_end, train_end)
}

/// The eval whose first mark is `i` and whose bounds are `(eval_end, train_end)`
/// ([`eval_bounds`]), measured with metric number `primary` (`leading`: before any training).
fn transition_at(
    trace: &Trace,
    values: &MarkValues,
    primary: usize,
    i: usize,
    (eval_end, train_end): (usize, usize),
    leading: bool,
) -> PhaseTransition {
    let column = values.column(primary);
    let marks = &trace.marks;
    let before = (!leading).then(|| i - 1);
    let sampled_until = marks.get(eval_end).map_or(u64::MAX, |m| m.t_us);
    let eval_peak = column
        .range(i..eval_end)
        .iter()
        .flatten()
        .chain(sampled_peak(
            trace,
            values,
            primary,
            marks[i].t_us,
            sampled_until,
        ))
        .max();
    let within_stage = marks[i].name.as_ref();
    let batches: Vec<usize> = (i..eval_end)
        .filter(|&j| marks[j].name.as_ref() == within_stage)
        .collect();
    let within_growth = match (batches.first(), batches.last()) {
        (Some(&a), Some(&b)) if batches.len() >= 2 => column
            .get(a)
            .zip(column.get(b))
            .map(|(a, b)| signed_delta(b, a)),
        _ => None,
    };
    // The next training stretch: up to the next eval mark.
    let exit = (eval_end < train_end).then_some(eval_end);
    let before_bytes = before.and_then(|b| column.get(b));
    // What an eval keeps is read floor to floor: the training stretch's floor before it
    // against the one after it, at the before-stage.
    let kept = before.and_then(|before| {
        let stage = marks[before].name.as_ref();
        let start = marks[..before]
            .iter()
            .rposition(|m| m.phase == Phase::Eval)
            .map_or(0, |p| p + 1);
        let readings = |range: std::ops::Range<usize>| -> Vec<(usize, u64, u64)> {
            range
                .filter(|&j| marks[j].name.as_ref() == stage)
                .filter_map(|j| column.get(j).map(|v| (j, marks[j].step, v)))
                .collect()
        };
        kept_floor_to_floor(&readings(start..before + 1), &readings(eval_end..train_end))
    });
    let after = match before {
        Some(_) => kept.map(|k| k.after).or(exit),
        None => exit,
    };
    // After an eval before any training there is nothing to compare with.
    let after_bytes = before.and(after).and_then(|j| column.get(j));
    PhaseTransition {
        metric: values.key(primary),
        before_stage: before.map(|b| marks[b].name.as_ref().to_owned()),
        before_step: before.map(|b| marks[b].step),
        before_bytes,
        entry_step: marks[i].step,
        entry_t_us: marks[i].t_us,
        eval_marks: eval_end - i,
        eval_peak_bytes: eval_peak,
        within_stage: (batches.len() >= 2).then(|| within_stage.to_owned()),
        eval_batches: batches.len(),
        within_growth_bytes: within_growth,
        after_stage: after.map(|j| marks[j].name.as_ref().to_owned()),
        after_step: after.map(|j| marks[j].step),
        exit_t_us: exit.map(|j| marks[j].t_us),
        after_bytes,
        jump_bytes: before_bytes.zip(eval_peak).map(|(b, p)| signed_delta(p, b)),
        floor_before_bytes: kept.map(|k| k.floor_before_bytes),
        floor_before_step: kept.map(|k| k.floor_before_step),
        training_slope_bytes: kept.map(|k| k.slope_bytes),
        retained_bytes: kept.map(|k| k.retained_bytes),
    }
}

/// [`phase_transitions`] and [`training_peak`] as a fold over the marks: `crate::Prepared` keeps
/// it from one analysis of a trace still being written to the next. An eval is measured for good
/// once the next one has begun and every mark before that is settled (what it reads ends there);
/// the walk to the next eval and training's highest reading go on from where they got to, so an
/// analysis reads the marks since the last eval measured for good, not all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhaseScan {
    /// The primary metric the evals were measured with.
    primary: Option<MetricKey>,
    /// The first training mark, once read; before, the marks read up to `searched` hold none (0
    /// once it is found).
    first_train: Option<usize>,
    searched: usize,
    /// The evals measured for good, in order.
    done: Vec<PhaseTransition>,
    /// The marks before this one are those the evals measured for good read.
    read_until: usize,
    /// The mark the walk goes on from: the first eval not measured for good, or the first mark
    /// not walked.
    from: usize,
    /// Training's highest reading so far.
    peak: PeakCount,
}

/// Training's highest reading, counted up to a mark, with the evals' tails left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct PeakCount {
    /// The highest reading at a training mark counted, outside the evals' tails.
    peak_bytes: Option<u64>,
    tail: Option<EvalTail>,
    /// The marks before this one are counted.
    counted: usize,
}

impl PeakCount {
    /// The training marks from `counted` up to mark `until` counted.
    fn count_until(&mut self, column: MarkColumn<'_>, marks: &Marks, until: usize) {
        if until <= self.counted {
            return;
        }
        let values = column.range(self.counted..until).iter();
        for (mark, value) in marks[self.counted..until].iter().zip(values) {
            if is_train(mark.phase) {
                self.peak_bytes = self.peak_bytes.max(value);
            }
        }
        self.counted = until;
    }

    /// The eval `t`, whose first mark is `entry` and whose exit (the first mark after it) is
    /// `exit`, counted: the training marks before it, its tail left out (see [`EvalTail`]).
    fn count_eval(
        &mut self,
        column: MarkColumn<'_>,
        marks: &Marks,
        t: &PhaseTransition,
        entry: usize,
        exit: usize,
    ) {
        self.count_until(column, marks, entry);
        // An eval before any training has no training before it to leave a tail above (its
        // training marks may be counted already, up to the next eval: `PhaseScan::walk`).
        let (Some(_), Some(before), false) =
            (t.exit_t_us, self.peak_bytes, t.before_step.is_none())
        else {
            return;
        };
        let exit = exit.max(self.counted);
        self.counted = exit;
        let stretch_end = (exit..marks.len())
            .find(|&k| marks[k].phase == Phase::Eval)
            .unwrap_or(marks.len());
        let Some((back, steps, highest)) = tail_end(column, marks, exit, stretch_end, before)
        else {
            return;
        };
        // Memory handed back late is memory the eval took: the tail rises above training no
        // more than the eval rose above the training mark before it (the next step's own
        // memory can stack on it: GPU tensors referenced until the next collection).
        let eval_rise = t
            .eval_peak_bytes
            .zip(t.before_bytes)
            .map(|(p, b)| p.saturating_sub(b));
        if highest > before && eval_rise.is_none_or(|rise| highest - before <= rise) {
            if self.tail.is_none_or(|old| highest > old.bytes) {
                self.tail = Some(EvalTail {
                    bytes: highest,
                    entry_step: t.entry_step,
                    steps,
                });
            }
            self.counted = back;
        }
    }
}

impl PhaseScan {
    /// The marks of `trace` (its values `values`) read: the evals measured for good whose next
    /// eval began before mark `settled` (the marks whose values are settled), training's highest
    /// reading counted up to the next eval or `settled`.
    pub fn add(&mut self, trace: &Trace, values: &MarkValues, settled: usize) {
        self.walk(trace, values, Some(settled));
    }

    /// The marks whose values what was kept read: a change of theirs needs a new scan.
    pub fn marks(&self) -> usize {
        self.peak.counted.max(self.read_until)
    }

    /// The evals from `from` on measured, for good (those before `settled`, see [`Self::add`])
    /// or, without `settled`, all of them (and training's every mark counted).
    fn walk(&mut self, trace: &Trace, values: &MarkValues, settled: Option<usize>) {
        let primary = values.primary();
        let key = primary.map(|p| values.key(p));
        if key != self.primary {
            *self = PhaseScan {
                primary: key,
                ..PhaseScan::default()
            };
        }
        let (Some(primary), Some(first_train)) = (primary, self.first_train(trace)) else {
            return;
        };
        let column = values.column(primary);
        let marks = &trace.marks;
        let mut i = self.from;
        while i < marks.len() {
            if !starts_eval(marks, i, first_train) {
                i += 1;
                continue;
            }
            let (eval_end, train_end) = eval_bounds(marks, i);
            let leading = i < first_train;
            if let Some(settled) = settled {
                if train_end >= marks.len() || train_end > settled {
                    // Not for good yet. Before any training, an eval leaves training's peak as
                    // it is: its marks are counted up to the next eval.
                    if leading {
                        self.peak.count_until(column, marks, train_end.min(settled));
                    }
                    break;
                }
                self.read_until = train_end;
            }
            let t = transition_at(trace, values, primary, i, (eval_end, train_end), leading);
            self.peak.count_eval(column, marks, &t, i, eval_end);
            self.done.push(t);
            i = eval_end.max(i + 1);
        }
        self.from = i;
        // Training's marks before the next eval: no later eval begins before them.
        self.peak
            .count_until(column, marks, settled.map_or(i, |settled| i.min(settled)));
    }

    /// The first training mark of `trace`, looked for in the marks not read yet.
    fn first_train(&mut self, trace: &Trace) -> Option<usize> {
        if self.first_train.is_none() {
            let rest = &trace.marks[self.searched.min(trace.marks.len())..];
            self.first_train = rest
                .iter()
                .position(|m| is_train(m.phase))
                .map(|k| self.searched + k);
            self.searched = match self.first_train {
                Some(_) => 0,
                None => trace.marks.len(),
            };
        }
        self.first_train
    }

    /// [`phase_transitions`] and [`training_peak`] of `trace`, the trace these marks were read
    /// from: the evals measured for good and the others measured now.
    pub fn report(
        &self,
        trace: &Trace,
        values: &MarkValues,
    ) -> (Vec<PhaseTransition>, Option<TrainingPeak>) {
        let mut all = self.clone();
        all.walk(trace, values, None);
        let peak = all.peak.peak_bytes.map(|bytes| TrainingPeak {
            bytes,
            tail: all.peak.tail.filter(|t| t.bytes > bytes),
        });
        (all.done, peak)
    }
}

/// The most memory training itself held: the primary metric's highest value at a training mark,
/// with each eval's tail left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrainingPeak {
    /// The highest value at a training mark outside the evals' tails.
    pub bytes: u64,
    /// The highest tail left out, when it read above `bytes`.
    pub tail: Option<EvalTail>,
}

/// A fall smaller than this does not end an eval's tail unless it is all the way back (see
/// [`tail_end`]): memory worth saying was handed back late is growth worth stating (the leak
/// rule's floor, 64 MiB, as a number of its own).
pub const TAIL_MIN_FALL_BYTES: u64 = 64 << 20;

/// The training marks right after an eval that read above every training mark before it, by no
/// more than the eval rose, and come back down before the next eval: all the way, or at least
/// halfway from the tail's highest and by [`TAIL_MIN_FALL_BYTES`] or more ([`tail_end`]). The
/// eval's freed memory handed back a few steps late (the C allocator returns a freed heap to the
/// system when it next trims), not training's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct EvalTail {
    /// Its highest value.
    pub bytes: u64,
    /// The step the eval came at (its first mark's).
    pub entry_step: u64,
    /// How many training steps (with readings) it lasted.
    pub steps: usize,
}

/// The most memory training itself held, leaving out each eval's tail ([`EvalTail`]): counted as
/// training's, an eval that needs more than training would be measured against its own memory.
/// `None` without a primary metric or a value at any training mark.
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn training_peak(trace: &Trace, values: &MarkValues) -> Option<TrainingPeak> {
    PhaseScan::default().report(trace, values).1
}

/// Where an eval's tail ends, read step by step from the eval's exit (`exit`, the first mark
/// after it) to the next eval (`stretch_end`), `before` being training's highest reading before
/// the eval: the first mark of the step that ends it, the tail's steps with readings and its
/// highest reading; `None` when no step ends it.
///
/// A step's highest reading (its marks rise and fall along it) back at or below `before` ends
/// the tail, and so does one that fell at least halfway back to it from the tail's highest, by
/// [`TAIL_MIN_FALL_BYTES`] or more, unless the step after falls by as much again (memory handed
/// back in stages, one arena at a time: that step was the tail's too). Halfway, not all the way:
/// an eval that also keeps a few MiB (the allocator's, a metric's list) leaves training a little
/// above where it was, and its late-handed-back memory is no more training's for that
/// (`eval_concat_fits.py` under load, `v1_13_eval_late_arena.oomt`).
fn tail_end(
    column: MarkColumn<'_>,
    marks: &Marks,
    exit: usize,
    stretch_end: usize,
    before: u64,
) -> Option<(usize, usize, u64)> {
    let (mut steps, mut highest) = (0, before);
    // A step that fell halfway back: its first mark and its highest reading.
    let mut halfway: Option<(usize, u64)> = None;
    let mut k = exit;
    while k < stretch_end {
        let step_end = (k..stretch_end)
            .find(|&e| marks[e].step != marks[k].step)
            .unwrap_or(stretch_end);
        let step = k;
        k = step_end;
        let Some(v) = column.range(step..step_end).iter().flatten().max() else {
            continue;
        };
        match halfway.take() {
            Some((at, last)) if v.saturating_add(TAIL_MIN_FALL_BYTES) > last => {
                return Some((at, steps, highest));
            }
            Some(_) => steps += 1,
            None => {}
        }
        if v <= before {
            return Some((step, steps, highest));
        }
        if v <= before + (highest - before) / 2 && highest - v >= TAIL_MIN_FALL_BYTES {
            halfway = Some((step, v));
        } else {
            highest = highest.max(v);
            steps += 1;
        }
    }
    halfway.map(|(at, _)| (at, steps, highest))
}

/// What an eval kept, read from the training readings `(mark, step, value)` at one stage on
/// either side of it.
#[derive(Debug, Clone, Copy)]
struct Kept {
    floor_before_bytes: u64,
    floor_before_step: u64,
    slope_bytes: i64,
    /// The mark of the floor after.
    after: usize,
    retained_bytes: i64,
}

/// The floor after (the lowest reading of the stretch after: memory kept stays there, what the
/// C allocator hands back some steps later does not) minus the floor before (the lowest of the
/// last quarter of the stretch before, at least [`FLOOR_MARKS`]: one high or low reading at
/// the edge is the heap's step-to-step wobble, tens of MiB on the host). Training's own growth
/// per step (the median step-to-step change on both sides, never below zero) is taken out, each
/// reading counted as if at the eval's edge, so that a per-step leak is not read as kept.
/// `None` without a reading after.
fn kept_floor_to_floor(before: &[(usize, u64, u64)], after: &[(usize, u64, u64)]) -> Option<Kept> {
    let &(_, edge_before, _) = before.last()?;
    let &(_, edge_after, _) = after.first()?;
    // Each delta as a u64 in the order of its value (its sign bit flipped): the viewer's WASM
    // holds one compiled sort of u64s already, a sort of its own for i128s would cost 1.5 KB of
    // the 600 KB budget. A step's delta of bytes is within ±2^63.
    const SIGN: u64 = 1 << 63;
    let mut deltas: Vec<u64> = [before, after]
        .iter()
        .flat_map(|side| side.windows(2))
        .filter(|w| w[1].1 > w[0].1)
        .map(|w| {
            let steps = i64::try_from(w[1].1 - w[0].1).unwrap_or(i64::MAX);
            let delta = signed_delta(w[1].2, w[0].2) / steps;
            delta as u64 ^ SIGN
        })
        .collect();
    deltas.sort_unstable();
    let slope = deltas
        .get(deltas.len().saturating_sub(1) / 2)
        .map_or(0, |d| i128::from((d ^ SIGN) as i64))
        .max(0);
    let at_edge = |step: u64, value: u64, edge: u64| {
        i128::from(value) + slope * (i128::from(edge) - i128::from(step))
    };
    let tail = (before.len() / 4).max(FLOOR_MARKS);
    let (floor_before, floor_before_step) = before
        .iter()
        .rev()
        .take(tail)
        .map(|&(_, step, v)| (at_edge(step, v, edge_before), step))
        .min_by_key(|&(v, _)| v)?; // the latest of equals
    let (floor_after, after_mark) = after
        .iter()
        .map(|&(j, step, v)| (at_edge(step, v, edge_after), j))
        .min_by_key(|&(v, _)| v)?; // the earliest of equals
    let clamp = |x: i128| i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX });
    Some(Kept {
        floor_before_bytes: u64::try_from(floor_before.max(0)).unwrap_or(u64::MAX),
        floor_before_step,
        slope_bytes: clamp(slope),
        after: after_mark,
        retained_bytes: clamp(floor_after - floor_before),
    })
}

/// The highest sample of metric `index` (when it is a sampled counter) in `[from_us, until_us)`.
fn sampled_peak(
    trace: &Trace,
    values: &MarkValues,
    index: usize,
    from_us: u64,
    until_us: u64,
) -> Option<u64> {
    let id = crate::metrics::counter_of(trace, values.key(index))?;
    let times = trace.samples.times_us();
    let start = times.partition_point(|t| t < from_us);
    let end = times.partition_point(|t| t < until_us);
    trace.samples.first_max(id, start..end).map(|(_, v)| v)
}

impl crate::fold::Fold for PhaseScan {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = PhaseScan::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        self.add(input.trace, input.values, input.settled);
    }

    fn stale(&self, changed: usize) -> bool {
        crate::fold::values_changed(self.marks(), changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    fn transitions(run: &Run) -> Vec<PhaseTransition> {
        let trace = run.build();
        phase_transitions(&trace, &MarkValues::new(&trace))
    }

    #[test]
    fn evals_are_measured_for_good_once_the_next_began_and_the_rest_read_again() {
        let run = Run {
            steps: 60,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB,
            eval_retained_bytes: GIB,
            ..Run::default()
        };
        let trace = run.build();
        let values = MarkValues::new(&trace);
        let whole = PhaseScan::default().report(&trace, &values);
        assert_eq!(whole.0.len(), 6);
        let mut scan = PhaseScan::default();
        for to in (0..=trace.marks.len()).step_by(37) {
            scan.add(&trace, &values, to);
            // Every eval whose next began before `to` is kept, none after.
            let next_began = whole.0[1..]
                .iter()
                .filter(|t| trace.marks.partition_point(|m| m.t_us < t.entry_t_us) <= to)
                .count();
            assert_eq!(scan.done.len(), next_began, "after {to} marks");
            assert_eq!(scan.done[..], whole.0[..next_began]);
        }
        scan.add(&trace, &values, trace.marks.len());
        assert_eq!(scan.report(&trace, &values), whole);
        assert_eq!(scan.done.len(), 5);
        // The walk and training's peak wait at the last eval, the one the run ends in.
        let last_eval = trace
            .marks
            .partition_point(|m| m.t_us < whole.0[5].entry_t_us);
        assert_eq!((scan.from, scan.peak.counted), (last_eval, last_eval));
    }

    #[test]
    fn eval_that_keeps_memory() {
        let run = Run {
            steps: 30,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB,
            eval_retained_bytes: 2 * GIB,
            ..Run::default()
        };
        let t = transitions(&run);
        assert_eq!(t.len(), 3);
        let first = &t[0];
        assert_eq!(first.metric.label(), "allocated");
        assert_eq!(
            (first.before_stage.as_deref(), first.before_step),
            (Some("post_optimizer_step"), Some(9))
        );
        assert_eq!(first.before_bytes, Some(16 * GIB));
        assert_eq!(first.eval_marks, 3);
        assert_eq!(first.eval_peak_bytes, Some(19 * GIB));
        assert_eq!(first.jump_bytes, Some((3 * GIB) as i64));
        // Compared at post_optimizer_step of step 10, not at its pre_forward.
        assert_eq!(first.after_stage.as_deref(), Some("post_optimizer_step"));
        assert_eq!(first.after_step, Some(10));
        assert_eq!(first.retained_bytes, Some((2 * GIB) as i64));
        assert!(first.exit_t_us.unwrap() > first.entry_t_us);
        // The run ends in eval: nothing after.
        let last = &t[2];
        assert_eq!(last.after_bytes, None);
        assert_eq!(last.retained_bytes, None);
        assert_eq!(last.exit_t_us, None);
    }

    #[test]
    fn an_eval_s_tail_is_not_training_s_peak() {
        let run = Run {
            steps: 30,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB,
            ..Run::default()
        };
        let lift = |trace: &mut Trace, steps: std::ops::RangeInclusive<u64>| {
            trace.marks.edit(|m| {
                if steps.contains(&m.step) && is_train(m.phase) {
                    m.allocator.as_mut().unwrap().allocated_bytes += 2 * GIB;
                }
            });
        };
        let peak_of = |trace: &Trace| {
            let values = MarkValues::new(trace);
            training_peak(trace, &values).unwrap()
        };
        let plain = peak_of(&run.build());
        assert_eq!(plain.tail, None);

        // The first eval's memory is handed back three steps after it: left out, and said.
        let mut trace = run.build();
        lift(&mut trace, 10..=12);
        let first_eval = transitions(&run)[0].entry_step;
        let peak = peak_of(&trace);
        assert_eq!(peak.bytes, plain.bytes);
        assert_eq!(
            peak.tail,
            Some(EvalTail {
                bytes: plain.bytes + 2 * GIB,
                entry_step: first_eval,
                steps: 3,
            })
        );

        // An eval that also keeps 64 MiB: training never comes all the way back, but its late
        // 2 GiB is still the eval's, and the 64 MiB training's.
        let mut trace = run.build();
        lift(&mut trace, 10..=12);
        trace.marks.edit(|m| {
            if m.step >= 10 && is_train(m.phase) {
                m.allocator.as_mut().unwrap().allocated_bytes += 64 << 20;
            }
        });
        let peak = peak_of(&trace);
        assert_eq!(peak.bytes, plain.bytes + (64 << 20));
        assert_eq!(
            peak.tail,
            Some(EvalTail {
                bytes: plain.bytes + 2 * GIB + (64 << 20),
                entry_step: first_eval,
                steps: 3,
            })
        );

        // Handed back in stages (2 GiB, then 1 GiB, then all of it): both steps are the tail.
        let mut trace = run.build();
        lift(&mut trace, 10..=10);
        trace.marks.edit(|m| {
            if m.step == 11 && is_train(m.phase) {
                m.allocator.as_mut().unwrap().allocated_bytes += GIB;
            }
        });
        let peak = peak_of(&trace);
        assert_eq!(peak.bytes, plain.bytes);
        assert_eq!(peak.tail.map(|t| t.steps), Some(2));

        // ...and so with 64 MiB kept: the 1 GiB step fell halfway, the next fell again.
        trace.marks.edit(|m| {
            if m.step >= 10 && is_train(m.phase) {
                m.allocator.as_mut().unwrap().allocated_bytes += 64 << 20;
            }
        });
        let peak = peak_of(&trace);
        assert_eq!(peak.bytes, plain.bytes + (64 << 20));
        assert_eq!(peak.tail.map(|t| t.steps), Some(2));

        // A fall short of halfway, or smaller than TAIL_MIN_FALL_BYTES, ends nothing: a 2 GiB
        // step that settles 1.5 GiB up, a 40 MiB one that settles 8 MiB up, are training's.
        for (first, then) in [(2 * GIB, 3 * GIB / 2), (40 << 20, 8 << 20)] {
            let mut trace = run.build();
            trace.marks.edit(|m| {
                if m.step >= 10 && is_train(m.phase) {
                    m.allocator.as_mut().unwrap().allocated_bytes +=
                        if m.step == 10 { first } else { then };
                }
            });
            assert_eq!(
                peak_of(&trace),
                TrainingPeak {
                    bytes: plain.bytes + first,
                    tail: None
                },
                "{first} then {then}"
            );
        }

        // More than the eval rose (3 GiB) was never the eval's memory.
        let mut trace = run.build();
        lift(&mut trace, 10..=12);
        lift(&mut trace, 10..=12);
        let peak = peak_of(&trace);
        assert_eq!((peak.bytes, peak.tail), (plain.bytes + 4 * GIB, None));

        // Memory that stays until the next eval is training's own.
        let mut trace = run.build();
        lift(&mut trace, 10..=19);
        assert_eq!(
            peak_of(&trace),
            TrainingPeak {
                bytes: plain.bytes + 2 * GIB,
                tail: None
            }
        );
    }

    #[test]
    fn memory_given_back_some_steps_after_an_eval_was_not_kept() {
        let run = Run {
            steps: 30,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB,
            eval_retained_bytes: 2 * GIB,
            ..Run::default()
        };
        let mut trace = run.build();
        // The first eval's 2 GiB stays until step 13 only: what the C allocator handed back
        // once training's frees reached its top, not what the program kept.
        trace.marks.edit(|m| {
            if m.step >= 13
                && let Some(s) = m.allocator.as_mut()
            {
                s.allocated_bytes -= 2 * GIB;
            }
        });
        let t = phase_transitions(&trace, &MarkValues::new(&trace));
        assert_eq!(t[0].after_step, Some(13));
        assert_eq!(t[0].retained_bytes, Some(0));
        // The second eval's memory stays through the training after it.
        assert_eq!(t[1].after_step, Some(20));
        assert_eq!(t[1].retained_bytes, Some((2 * GIB) as i64));
    }

    #[test]
    fn what_an_eval_kept_is_read_floor_to_floor() {
        let run = Run {
            steps: 30,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB,
            eval_retained_bytes: 2 * GIB,
            ..Run::default()
        };
        let mut trace = run.build();
        // The heap stood 1 GiB higher at the last training mark before the first eval than
        // the training's floor: the eval still kept 2 GiB, not 1.
        let last = trace
            .marks
            .iter()
            .rposition(|m| m.step == 9 && m.name.as_ref() == "post_optimizer_step")
            .unwrap();
        trace.marks.edit_indexed(|i, m| {
            if i == last {
                m.allocator.as_mut().unwrap().allocated_bytes += GIB;
            }
        });
        let t = phase_transitions(&trace, &MarkValues::new(&trace));
        assert_eq!(t[0].before_bytes, Some(17 * GIB));
        assert_eq!(t[0].floor_before_bytes, Some(16 * GIB));
        assert_eq!(t[0].retained_bytes, Some((2 * GIB) as i64));
        // The same reading after the eval is still the floor training returns to there.
        assert_eq!(t[1].floor_before_bytes, Some(18 * GIB));
    }

    #[test]
    fn clean_eval_returns_to_the_same_memory() {
        let run = Run {
            steps: 25,
            eval_every: Some(10),
            eval_jump_bytes: 512 * MIB,
            ..Run::default()
        };
        let t = transitions(&run);
        assert_eq!(t.len(), 2);
        assert!(t.iter().all(|x| x.retained_bytes == Some(0)));
        assert!(t.iter().all(|x| x.jump_bytes == Some((512 * MIB) as i64)));
    }

    #[test]
    fn no_eval_no_transitions() {
        assert!(transitions(&Run::default()).is_empty());
    }

    #[test]
    fn falls_back_to_the_first_train_mark_when_the_stage_does_not_recur() {
        let run = Run {
            steps: 2,
            stages: vec!["a"],
            eval_every: Some(1),
            ..Run::default()
        };
        let mut trace = run.build();
        // Rename the second training mark so the stage before eval does not recur.
        let second_train = trace.marks.iter().position(|m| m.step == 1).unwrap();
        trace.marks[second_train].name = "b".into();
        let t = phase_transitions(&trace, &MarkValues::new(&trace));
        assert_eq!(t[0].after_stage.as_deref(), Some("b"));
    }
}

//! The per-stage table: memory at each point of the training loop, and what each stage added.
//!
//! A training step is a cycle (`pre_forward → post_forward → post_backward →
//! post_optimizer_step`), and the first question about memory is which part of that cycle costs
//! what. The value at a mark says how much is held there; the delta from the previous mark (of
//! any stage) says what the stretch of code since then allocated: the `post_forward` row's delta
//! is the activations the forward pass kept for backward. Averaging over thousands of steps
//! removes noise, the maximum shows the worst step.
//!
//! The table, [`largest_growth`] and [`step_rows`] all read [`MarkValues`], the same numbers the
//! leak and phase analyses use.

use std::collections::HashMap;

use serde::Serialize;

use crate::marks::{StageAt, StageIndex};
use crate::metrics::{MarkValues, MetricKey};
use oomscope_format::{Phase, Trace};

/// Options of the stage table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StageTableOptions {
    /// When set, every row also reports its values relative to the value at this mark (e.g. the
    /// first `pre_forward`, to see everything relative to "model loaded").
    pub baseline_mark: Option<usize>,
}

/// The per-stage table.
#[derive(Debug, Clone, Serialize)]
pub struct StageTable {
    /// Labels of the metrics, in the order each row's `metrics` lists them.
    pub metrics: Vec<MetricKey>,
    /// Label of the primary metric, if any.
    pub primary_metric: Option<MetricKey>,
    /// The baseline mark, when one was asked for and exists.
    pub baseline: Option<StageAt>,
    /// One row per (stage name, phase), in first-appearance order.
    pub rows: Vec<StageRow>,
}

impl StageTable {
    /// Column number of a metric.
    pub fn metric_index(&self, metric: MetricKey) -> Option<usize> {
        self.metrics.iter().position(|m| *m == metric)
    }
}

/// One stage of the table.
#[derive(Debug, Clone, Serialize)]
pub struct StageRow {
    /// Stage name.
    pub stage: String,
    /// Phase of the marks in this row.
    pub phase: Phase,
    /// Marks of this stage.
    pub count: usize,
    /// Statistics per metric, in [`StageTable::metrics`] order.
    pub metrics: Vec<StageMetric>,
}

/// Statistics of one metric at one stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageMetric {
    /// Metric label.
    pub metric: MetricKey,
    /// Marks where the metric had a value.
    pub values: usize,
    /// Mean value at the mark.
    pub mean_bytes: Option<f64>,
    /// Largest value at the mark.
    pub max_bytes: Option<u64>,
    /// Marks with a delta (a value here and at the previous mark).
    pub deltas: usize,
    /// Mean change since the previous mark of any stage.
    pub mean_delta_bytes: Option<f64>,
    /// Largest change since the previous mark of any stage.
    pub max_delta_bytes: Option<i64>,
    /// Mean change relative to the baseline mark.
    pub mean_vs_baseline_bytes: Option<f64>,
    /// Largest change relative to the baseline mark.
    pub max_vs_baseline_bytes: Option<i64>,
}

/// The single largest increase of the primary metric between two consecutive marks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Growth {
    /// Metric label.
    pub metric: MetricKey,
    /// Stage of the earlier mark.
    pub from_stage: String,
    /// Step of the earlier mark.
    pub from_step: u64,
    /// Stage of the later mark.
    pub to_stage: String,
    /// Step of the later mark.
    pub step: u64,
    /// Phase of the later mark.
    pub phase: Phase,
    /// The increase.
    pub bytes: u64,
    /// Time of the later mark.
    pub t_us: u64,
}

/// One row of the per-step table: a step's value of one metric at each stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepRow {
    /// Step.
    pub step: u64,
    /// Phase (a step number can appear in train and in eval).
    pub phase: Phase,
    /// Value at each stage, in [`stage_names`] order; the last mark of a stage in the step wins.
    pub values: Vec<Option<u64>>,
    /// Change at each stage since the previous mark (of any stage), as the stage table's delta.
    pub deltas: Vec<Option<i64>>,
}

/// Running sums of one metric at one stage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Accumulator {
    values: usize,
    sum: u128,
    max: Option<u64>,
    deltas: usize,
    delta_sum: i128,
    delta_max: Option<i64>,
    baselines: usize,
    baseline_sum: i128,
    baseline_max: Option<i64>,
}

impl Accumulator {
    fn finish(&self, metric: MetricKey) -> StageMetric {
        let mean = |sum: f64, n: usize| (n > 0).then(|| sum / n as f64);
        StageMetric {
            metric,
            values: self.values,
            mean_bytes: mean(self.sum as f64, self.values),
            max_bytes: self.max,
            deltas: self.deltas,
            mean_delta_bytes: mean(self.delta_sum as f64, self.deltas),
            max_delta_bytes: self.delta_max,
            mean_vs_baseline_bytes: mean(self.baseline_sum as f64, self.baselines),
            max_vs_baseline_bytes: self.baseline_max,
        }
    }
}

/// Signed difference `later − earlier`, saturating at the ends of `i64`.
pub(crate) fn signed_delta(later: u64, earlier: u64) -> i64 {
    let d = i128::from(later) - i128::from(earlier);
    d.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// Builds the per-stage table from the values at marks.
pub fn stage_table(
    trace: &Trace,
    values: &MarkValues,
    stages: &StageIndex,
    options: &StageTableOptions,
) -> StageTable {
    let baseline = options
        .baseline_mark
        .and_then(|i| StageAt::of_mark(trace, i));
    let baseline_values: Vec<Option<u64>> = (0..values.keys().len())
        .map(|m| baseline.as_ref().and_then(|b| values.get(b.mark_index, m)))
        .collect();
    let mut sums = StageSums::new(values, baseline_values);
    sums.add(trace, values, stages, trace.marks.len());
    sums.table(values, stages, baseline)
}

/// The stage table's sums over the marks so far, each (stage, phase) row's and metric's: a fold
/// over the marks in order, so a live view (`crate::Prepared`) keeps them over the marks whose
/// values are settled and adds only what was appended; [`StageSums::table`] of a copy with the
/// last few marks added is the table [`stage_table`] makes of the whole trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSums {
    /// Marks added.
    marks: usize,
    /// The metrics' values at the baseline mark (all `None` without one).
    baseline_values: Vec<Option<u64>>,
    /// Rows keyed by (stage number, phase), numbered in first-appearance order.
    row_of: HashMap<(u32, Phase), usize>,
    row_keys: Vec<(u32, Phase)>,
    counts: Vec<usize>,
    /// Row by row, a metric's sums after another's.
    acc: Vec<Accumulator>,
    /// Each metric's value at the last mark added.
    previous: Vec<Option<u64>>,
    last_key: Option<((u32, Phase), usize)>,
}

impl StageSums {
    /// Sums of no mark yet, for the metrics of `values`.
    pub fn new(values: &MarkValues, baseline_values: Vec<Option<u64>>) -> StageSums {
        StageSums {
            marks: 0,
            baseline_values,
            row_of: HashMap::new(),
            row_keys: Vec::new(),
            counts: Vec::new(),
            acc: Vec::new(),
            previous: vec![None; values.keys().len()],
            last_key: None,
        }
    }

    /// Marks added so far.
    pub fn marks(&self) -> usize {
        self.marks
    }

    /// Adds the marks from the last added up to (not including) mark `to`.
    pub fn add(&mut self, trace: &Trace, values: &MarkValues, stages: &StageIndex, to: usize) {
        let from = self.marks;
        if to <= from {
            return;
        }
        let metric_count = self.previous.len();
        let mut row_per_mark = Vec::with_capacity(to - from);
        for (mark, &stage) in trace.marks[from..to]
            .iter()
            .zip(&stages.per_mark()[from..to])
        {
            let key = (stage, mark.phase);
            let row = match self.last_key {
                Some((k, r)) if k == key => r,
                _ => *self.row_of.entry(key).or_insert_with(|| {
                    self.row_keys.push(key);
                    self.counts.push(0);
                    self.acc
                        .resize(self.row_keys.len() * metric_count, Accumulator::default());
                    self.row_keys.len() - 1
                }),
            };
            self.last_key = Some((key, row));
            self.counts[row] += 1;
            row_per_mark.push(row);
        }
        // One pass per metric over its column: values, deltas and baseline deltas per row.
        for (m, baseline_value) in self.baseline_values.iter().enumerate() {
            let column = values.column(m).range(from..to);
            let mut previous = self.previous[m];
            for (value, &row) in column.iter().zip(&row_per_mark) {
                let a = &mut self.acc[row * metric_count + m];
                if let Some(v) = value {
                    a.values += 1;
                    a.sum += u128::from(v);
                    a.max = Some(a.max.map_or(v, |x| x.max(v)));
                    if let Some(p) = previous {
                        let d = signed_delta(v, p);
                        a.deltas += 1;
                        a.delta_sum += i128::from(d);
                        a.delta_max = Some(a.delta_max.map_or(d, |x| x.max(d)));
                    }
                    if let Some(b) = *baseline_value {
                        let d = signed_delta(v, b);
                        a.baselines += 1;
                        a.baseline_sum += i128::from(d);
                        a.baseline_max = Some(a.baseline_max.map_or(d, |x| x.max(d)));
                    }
                }
                previous = value;
            }
            self.previous[m] = previous;
        }
        self.marks = to;
    }

    /// The table of the marks added.
    pub fn table(
        &self,
        values: &MarkValues,
        stages: &StageIndex,
        baseline: Option<StageAt>,
    ) -> StageTable {
        let metric_count = self.previous.len();
        let rows = self
            .row_keys
            .iter()
            .enumerate()
            .map(|(r, &(stage, phase))| StageRow {
                stage: stages.names()[stage as usize].clone(),
                phase,
                count: self.counts[r],
                metrics: (0..metric_count)
                    .map(|m| self.acc[r * metric_count + m].finish(values.key(m)))
                    .collect(),
            })
            .collect();
        StageTable {
            metrics: values.keys().to_vec(),
            primary_metric: values.primary().map(|p| values.key(p)),
            baseline,
            rows,
        }
    }
}

/// The largest increase of the primary metric between any two consecutive marks.
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn largest_growth(trace: &Trace, values: &MarkValues) -> Option<Growth> {
    largest_growth_with(
        trace,
        values,
        &crate::column_scan::ColumnScan::new(trace, values),
    )
}

/// [`largest_growth`] with the marks' values' rises already found (`columns`, of every mark).
pub fn largest_growth_with(
    trace: &Trace,
    values: &MarkValues,
    columns: &crate::column_scan::ColumnScan,
) -> Option<Growth> {
    let primary = values.primary()?;
    let (to, bytes) = columns.largest_rise(primary)?;
    let (from_mark, to_mark) = (&trace.marks[to - 1], &trace.marks[to]);
    Some(Growth {
        metric: values.key(primary),
        from_stage: from_mark.name.as_ref().to_owned(),
        from_step: from_mark.step,
        to_stage: to_mark.name.as_ref().to_owned(),
        step: to_mark.step,
        phase: to_mark.phase,
        bytes,
        t_us: to_mark.t_us,
    })
}

/// Stage names in first-appearance order: the columns of [`step_rows`].
pub fn stage_names(trace: &Trace) -> Vec<String> {
    StageIndex::new(trace).names().to_vec()
}

/// The per-step table of one metric: one row per (step, phase) in first-appearance order, one
/// value and one delta per stage name in [`stage_names`] order. The delta means what the stage
/// table's does: the change since the previous mark, of any stage, so the `post_forward` cell
/// says what that step's forward allocated and a row's deltas add up along the step.
pub fn step_rows(trace: &Trace, metric: MetricKey) -> Vec<StepRow> {
    let stages = StageIndex::new(trace);
    let columns = stages.names().len();
    let mut row_of: HashMap<(u64, Phase), usize> = HashMap::new();
    let mut rows: Vec<StepRow> = Vec::new();
    let mut previous: Option<u64> = None;
    let values = MarkValues::of_metric(trace, metric);
    for (i, mark) in trace.marks.iter().enumerate() {
        let key = (mark.step, mark.phase);
        let row = *row_of.entry(key).or_insert_with(|| {
            rows.push(StepRow {
                step: mark.step,
                phase: mark.phase,
                values: vec![None; columns],
                deltas: vec![None; columns],
            });
            rows.len() - 1
        });
        let value = values[i];
        if let Some(v) = value {
            let column = stages.of_mark(i);
            rows[row].values[column] = Some(v);
            rows[row].deltas[column] = previous.map(|p| signed_delta(v, p));
        }
        previous = value;
    }
    rows
}

impl crate::fold::Fold for StageSums {
    fn clear(&mut self, input: &crate::fold::FoldInput<'_>) {
        *self = StageSums::new(input.values, vec![None; input.values.keys().len()]);
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        self.add(input.trace, input.values, input.stages, input.settled);
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

    fn build_table(run: &Run, options: StageTableOptions) -> (Trace, StageTable) {
        let trace = run.build();
        let values = MarkValues::new(&trace);
        let table = stage_table(&trace, &values, &StageIndex::new(&trace), &options);
        (trace, table)
    }

    #[test]
    fn classic_training_step_table() {
        let (_, table) = build_table(&Run::default(), StageTableOptions::default());
        let names: Vec<&str> = table.rows.iter().map(|r| r.stage.as_str()).collect();
        assert_eq!(
            names,
            [
                "pre_forward",
                "post_forward",
                "post_backward",
                "post_optimizer_step"
            ]
        );
        assert_eq!(
            table.primary_metric.map(MetricKey::label).as_deref(),
            Some("allocated")
        );
        let alloc = table.metric_index(MetricKey::ALLOCATED).unwrap();
        let fwd = &table.rows[1].metrics[alloc];
        assert_eq!(table.rows[1].count, 60);
        assert_eq!(fwd.max_bytes, Some(28 * GIB));
        assert_eq!(fwd.mean_bytes, Some((28 * GIB) as f64));
        // The forward pass adds the activations; backward frees them.
        assert_eq!(fwd.mean_delta_bytes, Some((12 * GIB) as f64));
        assert_eq!(fwd.max_delta_bytes, Some((12 * GIB) as i64));
        let bwd = &table.rows[2].metrics[alloc];
        assert_eq!(bwd.max_delta_bytes, Some(-((12 * GIB) as i64)));
        // The very first mark has no previous mark.
        let pre = &table.rows[0].metrics[alloc];
        assert_eq!((pre.values, pre.deltas), (60, 59));
        assert_eq!(pre.mean_vs_baseline_bytes, None);
    }

    #[test]
    fn baseline_deltas() {
        let run = Run {
            leak_bytes_per_step: 10 * MIB,
            steps: 11,
            ..Run::default()
        };
        let (_, table) = build_table(
            &run,
            StageTableOptions {
                baseline_mark: Some(0),
            },
        );
        let baseline = table.baseline.as_ref().unwrap();
        assert_eq!((baseline.stage.as_str(), baseline.step), ("pre_forward", 0));
        let alloc = table.metric_index(MetricKey::ALLOCATED).unwrap();
        let post_opt = &table.rows[3].metrics[alloc];
        // Steps 0..=10 leak 0..=100 MiB relative to step 0's pre_forward.
        assert_eq!(post_opt.max_vs_baseline_bytes, Some((100 * MIB) as i64));
        assert_eq!(post_opt.mean_vs_baseline_bytes, Some((50 * MIB) as f64));
        let out_of_range = StageTableOptions {
            baseline_mark: Some(1_000_000),
        };
        let (_, no_baseline) = build_table(&Run::default(), out_of_range);
        assert!(no_baseline.baseline.is_none());
        assert!(
            no_baseline.rows[0].metrics[alloc]
                .max_vs_baseline_bytes
                .is_none()
        );
    }

    #[test]
    fn eval_marks_get_their_own_rows() {
        let run = Run {
            eval_every: Some(10),
            eval_jump_bytes: GIB,
            ..Run::default()
        };
        let (_, table) = build_table(&run, StageTableOptions::default());
        let eval = table.rows.iter().find(|r| r.phase == Phase::Eval).unwrap();
        assert_eq!(eval.stage, "eval_forward");
        assert_eq!(eval.count, 6 * 3);
    }

    #[test]
    fn largest_growth_is_the_biggest_rise_between_consecutive_marks() {
        let trace = Run {
            eval_every: Some(20),
            eval_jump_bytes: 13 * GIB,
            ..Run::default()
        }
        .build();
        let values = MarkValues::new(&trace);
        // Eval (13 GiB) outgrows the forward pass (12 GiB).
        let growth = largest_growth(&trace, &values).unwrap();
        assert_eq!(growth.bytes, 13 * GIB);
        assert_eq!(growth.from_stage, "post_optimizer_step");
        assert_eq!(growth.to_stage, "eval_forward");
        assert_eq!(growth.step, 19);

        let flat = Run {
            activations_bytes: 0,
            ..Run::default()
        }
        .build();
        assert!(largest_growth(&flat, &MarkValues::new(&flat)).is_none());
    }

    #[test]
    fn step_table_has_one_column_per_stage() {
        let trace = Run {
            steps: 3,
            eval_every: Some(2),
            ..Run::default()
        }
        .build();
        let names = stage_names(&trace);
        assert_eq!(names.len(), 5);
        let rows = step_rows(&trace, MetricKey::ALLOCATED);
        assert_eq!(rows.len(), 4, "steps 0, 1, 1 (eval), 2");
        assert_eq!(rows[0].values[1], Some(28 * GIB));
        assert_eq!(rows[0].values[4], None);
        assert_eq!((rows[2].step, rows[2].phase), (1, Phase::Eval));
        assert_eq!(rows[2].values[4], Some(16 * GIB));
        assert_eq!(rows[2].values[0], None);
    }

    #[test]
    fn step_deltas_mean_what_the_stage_table_deltas_mean() {
        let (trace, table) = build_table(&Run::default(), StageTableOptions::default());
        let metric = crate::metrics::primary_metric(&trace).unwrap();
        let rows = step_rows(&trace, metric);
        let names = stage_names(&trace);
        // Every stage's largest step delta is the stage table's max delta.
        for (s, name) in names.iter().enumerate() {
            let row = table.rows.iter().find(|r| &r.stage == name).unwrap();
            let mi = table.metric_index(table.primary_metric.unwrap()).unwrap();
            let best = rows.iter().filter_map(|r| r.deltas[s]).max();
            assert_eq!(best, row.metrics[mi].max_delta_bytes, "{name}");
        }
        // The first mark of the run has no delta; a row's deltas add up to its change.
        assert_eq!(rows[0].deltas[0], None);
        let r = &rows[1];
        let sum: i64 = r.deltas.iter().flatten().sum();
        let last = *r.values.iter().flatten().last().unwrap() as i64;
        let before = *rows[0].values.iter().flatten().last().unwrap() as i64;
        assert_eq!(sum, last - before);
    }
}

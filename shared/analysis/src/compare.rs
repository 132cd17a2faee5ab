//! Two traces side by side — before and after a fix: what became of each finding, the memory
//! peak, each metric's peak, each stage's max and mean delta, and memory per step of both runs
//! aligned by step. `collector summary A --compare B` and the viewer's comparison show these;
//! they live here so that every number oomscope shows comes from `shared`.

use crate::Analysis;
use crate::metrics::{MarkValues, MetricKey, metrics_at_marks, primary_metric};
use crate::peaks::{measured, memory_peak};
use crate::recommend::{Finding, Severity};
use crate::stages::StageRow;
use oomscope_format::{CounterKind, Phase, Trace};

/// One metric's peak in two traces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeakComparison {
    /// Metric label.
    pub metric: MetricKey,
    /// Peak in the first trace.
    pub a_bytes: Option<u64>,
    /// Peak in the second.
    pub b_bytes: Option<u64>,
}

impl PeakComparison {
    /// `b - a`, when both exist.
    pub fn change_bytes(&self) -> Option<i64> {
        Some(self.b_bytes? as i64 - self.a_bytes? as i64)
    }
}

/// Peaks of every metric either trace has, first-seen order.
pub fn compare_peaks(a: &Analysis, b: &Analysis) -> Vec<PeakComparison> {
    let mut metrics: Vec<MetricKey> = Vec::new();
    for p in a.peaks.iter().chain(&b.peaks) {
        if !metrics.contains(&p.metric) {
            metrics.push(p.metric);
        }
    }
    let peak = |x: &Analysis, m: MetricKey| {
        x.peaks
            .iter()
            .filter(|p| p.metric == m)
            .map(|p| p.bytes)
            .max()
    };
    metrics
        .into_iter()
        .map(|m| PeakComparison {
            a_bytes: peak(a, m),
            b_bytes: peak(b, m),
            metric: m,
        })
        .collect()
}

/// One stage in two traces: its max and mean delta of one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct StageComparison {
    /// Stage name (eval stages carry " (eval)").
    pub stage: String,
    /// Max in the first trace.
    pub a_max_bytes: Option<u64>,
    /// Max in the second.
    pub b_max_bytes: Option<u64>,
    /// Mean change since the previous mark, first trace.
    pub a_mean_delta_bytes: Option<f64>,
    /// Same, second trace.
    pub b_mean_delta_bytes: Option<f64>,
}

/// Compares the stage tables on the first trace's primary metric (the metric both were
/// recorded with; `None` when the second trace lacks it).
pub fn compare_stages(a: &Analysis, b: &Analysis) -> Option<(MetricKey, Vec<StageComparison>)> {
    let metric = a.stage_table.primary_metric?;
    let ma = a.stage_table.metric_index(metric)?;
    let mb = b.stage_table.metric_index(metric)?;
    let key = |r: &StageRow| format!("{}{}", r.stage, r.phase.suffix());
    let mut rows: Vec<StageComparison> = Vec::new();
    for r in &a.stage_table.rows {
        rows.push(StageComparison {
            stage: key(r),
            a_max_bytes: r.metrics[ma].max_bytes,
            b_max_bytes: None,
            a_mean_delta_bytes: r.metrics[ma].mean_delta_bytes,
            b_mean_delta_bytes: None,
        });
    }
    for r in &b.stage_table.rows {
        let k = key(r);
        let row = match rows.iter().position(|x| x.stage == k) {
            Some(i) => &mut rows[i],
            None => {
                rows.push(StageComparison {
                    stage: k,
                    a_max_bytes: None,
                    b_max_bytes: None,
                    a_mean_delta_bytes: None,
                    b_mean_delta_bytes: None,
                });
                rows.last_mut().expect("just pushed")
            }
        };
        row.b_max_bytes = r.metrics[mb].max_bytes;
        row.b_mean_delta_bytes = r.metrics[mb].mean_delta_bytes;
    }
    Some((metric, rows))
}

/// What became of one finding between the first run (A, before) and the second (B, after).
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // a comparison holds a few dozen: boxing buys nothing
pub enum FindingChange {
    /// Found in A only: the change between the runs removed it.
    Gone(Finding),
    /// Found in B only.
    New(Finding),
    /// Found in both (paired by kind, in order).
    Still {
        /// A's finding.
        a: Finding,
        /// B's finding.
        b: Finding,
    },
}

/// The findings of two runs paired by kind: gone first (what the fix achieved), then new, then
/// those still there. Informational findings (`info`: batch-size estimates and the like) say
/// nothing about a fix and are left out.
pub fn diff_findings(a: &Analysis, b: &Analysis) -> Vec<FindingChange> {
    let problems = |x: &Analysis| -> Vec<Finding> {
        x.findings
            .iter()
            .filter(|f| f.severity > Severity::Info)
            .cloned()
            .collect()
    };
    let (a, mut b) = (problems(a), problems(b));
    let (mut gone, mut still) = (Vec::new(), Vec::new());
    for f in a {
        match b.iter().position(|g| g.kind() == f.kind()) {
            Some(i) => still.push(FindingChange::Still {
                a: f,
                b: b.remove(i),
            }),
            None => gone.push(FindingChange::Gone(f)),
        }
    }
    gone.extend(b.into_iter().map(FindingChange::New));
    gone.extend(still);
    gone
}

/// The peak that says how much memory each run needed ([`memory_peak`]: the allocator's
/// `allocated`, else the process's GPU memory, else the device's), or the host's resident
/// memory when neither run recorded a GPU; `None` when the runs share no such metric.
pub fn memory_peaks(a: &Analysis, b: &Analysis) -> Option<PeakComparison> {
    let metric = memory_peak(&a.peaks)
        .or_else(|| memory_peak(&b.peaks))
        .map(|p| p.metric)
        .or_else(|| {
            a.peaks
                .iter()
                .find(|p| p.measure == measured(CounterKind::HostRss))
                .map(|p| p.metric)
        })?;
    compare_peaks(a, b)
        .into_iter()
        .find(|p| p.metric == metric && p.a_bytes.is_some() && p.b_bytes.is_some())
}

/// Memory per step of two runs on one metric, aligned by step: at each training step the highest
/// value any of its marks read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOverlay {
    /// The metric (A's primary metric, which B must have too).
    pub metric: MetricKey,
    /// A's (step, bytes), in step order.
    pub a: Vec<(u64, u64)>,
    /// B's (step, bytes), in step order.
    pub b: Vec<(u64, u64)>,
}

/// Both runs' memory per training step, or `None` when they share no metric at marks or either
/// has fewer than two training steps.
pub fn step_overlay(a: &Trace, b: &Trace) -> Option<StepOverlay> {
    let metric_a = primary_metric(a)?;
    let metric_b = metrics_at_marks(b).into_iter().find(|m| *m == metric_a)?;
    let per_step = |t: &Trace, metric| {
        let mut points: Vec<(u64, u64)> = Vec::new();
        let values = MarkValues::of_metric(t, metric);
        for (i, mark) in t.marks.iter().enumerate() {
            let Some(v) = values[i].filter(|_| mark.phase == Phase::Train) else {
                continue;
            };
            match points.iter_mut().rev().find(|(s, _)| *s == mark.step) {
                Some((_, best)) => *best = (*best).max(v),
                None => points.push((mark.step, v)),
            }
        }
        crate::sort::sort_by_key(&mut points, |(s, _)| *s);
        (points.len() >= 2).then_some(points)
    };
    Some(StepOverlay {
        metric: metric_a,
        a: per_step(a, metric_a)?,
        b: per_step(b, metric_b)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AnalysisOptions, analyze};
    use oomscope_format::Trace;
    use oomscope_format::decode;
    use oomscope_testkit::synth::TrainingRun;

    fn run(leak: u64) -> Trace {
        let r = TrainingRun {
            steps: 50,
            leak_bytes_per_step: leak,
            eval_every: Some(20),
            eval_steps: 2,
            ..TrainingRun::default()
        };
        decode(&r.to_bytes()).unwrap().trace
    }

    #[test]
    fn comparison_shows_the_fix() {
        let leaky = run(64 << 20);
        let fixed = run(0);
        let a = analyze(&leaky, &AnalysisOptions::default());
        let b = analyze(&fixed, &AnalysisOptions::default());
        let peaks = compare_peaks(&a, &b);
        assert!(!peaks.is_empty());
        assert!(
            peaks
                .iter()
                .any(|p| p.change_bytes().is_some_and(|c| c < 0)),
            "the fix lowers a peak: {peaks:?}"
        );
        let (metric, stages) = compare_stages(&a, &b).unwrap();
        assert_eq!(Some(metric), a.stage_table.primary_metric);
        assert_eq!(stages.len(), a.stage_table.rows.len());
        let leaking: f64 = stages.iter().filter_map(|s| s.a_mean_delta_bytes).sum();
        let after: f64 = stages.iter().filter_map(|s| s.b_mean_delta_bytes).sum();
        assert!(
            leaking > after + f64::from(32 << 20),
            "{leaking} vs {after}"
        );

        // The leak is gone, named first; nothing is new; the memory peak went down.
        let diff = diff_findings(&a, &b);
        assert!(
            matches!(&diff[0], FindingChange::Gone(f) if f.kind() == crate::finding::FindingKind::Leak),
            "{diff:?}"
        );
        assert!(
            !diff.iter().any(|c| matches!(c, FindingChange::New(_))),
            "{diff:?}"
        );
        let peak = memory_peaks(&a, &b).unwrap();
        assert!(peak.change_bytes().unwrap() < -(1 << 30), "{peak:?}");

        // Per step, aligned by step: the leaky run ends 49 steps × 64 MiB above the fixed one.
        let overlay = step_overlay(&leaky, &fixed).unwrap();
        assert_eq!(overlay.a.len(), 50);
        assert_eq!(overlay.b.len(), 50);
        assert_eq!(overlay.a[0].0, overlay.b[0].0);
        let (a_last, b_last) = (overlay.a[49].1, overlay.b[49].1);
        let growth = (a_last - overlay.a[0].1) as i64 - (b_last as i64 - overlay.b[0].1 as i64);
        assert_eq!(growth, 49 * (64 << 20), "{overlay:?}");
    }

    #[test]
    fn a_run_compared_with_itself_changes_nothing() {
        let a = analyze(&run(64 << 20), &AnalysisOptions::default());
        let diff = diff_findings(&a, &a);
        assert!(!diff.is_empty());
        assert!(
            diff.iter()
                .all(|c| matches!(c, FindingChange::Still { .. })),
            "{diff:?}"
        );
        let peak = memory_peaks(&a, &a).unwrap();
        assert_eq!(peak.change_bytes(), Some(0));
    }
}

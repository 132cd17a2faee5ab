//! Two traces side by side — before and after a fix: each metric's peak and each stage's max and
//! mean delta. The viewer's comparison shows these numbers; they live here so that every number
//! oomscope shows comes from `shared`.

use crate::analysis::Analysis;
use crate::analysis::metrics::MetricKey;
use crate::analysis::stages::StageRow;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{AnalysisOptions, analyze};
    use crate::decode;
    use crate::model::Trace;
    use crate::synth::TrainingRun;

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
        let fixed: f64 = stages.iter().filter_map(|s| s.b_mean_delta_bytes).sum();
        assert!(
            leaking > fixed + f64::from(32 << 20),
            "{leaking} vs {fixed}"
        );
    }
}

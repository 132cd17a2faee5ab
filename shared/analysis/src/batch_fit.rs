//! Which batch size fits on the device.
//!
//! Most of what a training step allocates beyond the model's own state is activations, and
//! activations grow linearly with the batch. So memory at the peak is `fixed + batch × per_sample`,
//! and the largest batch that fits follows from two numbers. They come from one of two places:
//! a batch-size search (several trials that fit, each with its peak: a least-squares line through
//! them), or one measured peak split by a component breakdown that states the batch size. Several
//! findings use the result (`oom`, `activations-dominate`, `batch-size`), so it is computed once.

use serde::Serialize;

use crate::fit::least_squares;
use crate::peaks::{ActivationsBasis, Peak, memory_peak};
use oomscope_format::{BatchTrial, Trace, TrialOutcome};

/// Default share of device memory kept free when choosing a batch (allocator cache, CUDA
/// context, shape variation between batches).
pub const DEFAULT_BATCH_MARGIN: f64 = 0.10;

/// Where the per-sample cost came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchFitMethod {
    /// A line through the peaks of batch trials that fit.
    Trials,
    /// The activations of the memory peak divided by the batch size of the breakdown.
    Breakdown,
}

/// The memory model `peak = fixed + batch × per_sample` and the batch it allows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BatchFit {
    /// Where the numbers came from.
    pub method: BatchFitMethod,
    /// What the memory was measured as (for [`BatchFitMethod::Breakdown`]).
    pub basis: Option<ActivationsBasis>,
    /// Bytes one more sample costs at the peak.
    pub per_sample_bytes: f64,
    /// Bytes at the peak independent of the batch.
    pub fixed_bytes: f64,
    /// R² of the trial fit (for [`BatchFitMethod::Trials`]).
    pub r_squared: Option<f64>,
    /// Trials used in the fit.
    pub trials_used: usize,
    /// Total device memory.
    pub device_total_bytes: u64,
    /// Share of device memory kept free.
    pub margin: f64,
    /// `(1 − margin) × total`.
    pub budget_bytes: u64,
    /// The batch size the run used, when the breakdown says.
    pub current_batch: Option<u64>,
    /// Predicted peak at the current batch.
    pub current_peak_bytes: Option<u64>,
    /// The largest batch with `fixed + batch × per_sample ≤ budget` (0 when none fits).
    pub max_batch: u64,
    /// `ceil(current / max)` when the largest fitting batch is smaller than the current one:
    /// gradient accumulation steps that keep the effective batch.
    pub accumulation_steps: Option<u64>,
}

impl BatchFit {
    /// When the current batch does not fit: the current batch and the gradient accumulation
    /// steps that keep it as the effective batch (a smaller batch is then the advice).
    pub fn accumulation(&self) -> Option<(u64, u64)> {
        Some((self.current_batch?, self.accumulation_steps?))
    }
}

/// The outcome of a batch-size search.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrialSummary {
    /// Trials run.
    pub trials: usize,
    /// The largest batch that fit.
    pub largest_fit_batch: Option<u64>,
    /// Its peak allocated bytes.
    pub largest_fit_peak_bytes: Option<u64>,
    /// The smallest batch that ran out of memory.
    pub smallest_oom_batch: Option<u64>,
    /// Trials that failed for another reason.
    pub errors: usize,
}

/// Summarises the batch trials; `None` when there were none.
pub fn trial_summary(trace: &Trace) -> Option<TrialSummary> {
    if trace.batch_trials.is_empty() {
        return None;
    }
    let largest_fit = trace
        .batch_trials
        .iter()
        .filter(|t| t.outcome == TrialOutcome::Fit)
        .max_by_key(|t| (t.batch_size, t.peak_bytes));
    Some(TrialSummary {
        trials: trace.batch_trials.len(),
        largest_fit_batch: largest_fit.map(|t| t.batch_size),
        largest_fit_peak_bytes: largest_fit.and_then(|t| t.peak_bytes),
        smallest_oom_batch: trace
            .batch_trials
            .iter()
            .filter(|t| t.outcome == TrialOutcome::Oom)
            .map(|t| t.batch_size)
            .min(),
        errors: trace
            .batch_trials
            .iter()
            .filter(|t| t.outcome == TrialOutcome::Error)
            .count(),
    })
}

/// The line `peak = fixed + batch × per_sample` through the trials that fit, and the largest batch
/// within `(1 − margin) × limit_bytes`. `None` without two fitting trials at different batches.
/// Used by the analysis of a trace and, live, by the batch-size search of the tch session.
pub fn fit_trials(trials: &[BatchTrial], limit_bytes: u64, margin: f64) -> Option<TrialFit> {
    let points: Vec<(f64, f64)> = trials
        .iter()
        .filter(|t| t.outcome == TrialOutcome::Fit)
        .filter_map(|t| Some((t.batch_size as f64, t.peak_bytes? as f64)))
        .collect();
    let line = least_squares(&points).filter(|line| line.slope > 0.0)?;
    let margin = margin.clamp(0.0, 0.99);
    let budget = (1.0 - margin) * limit_bytes as f64;
    let fixed = line.intercept.max(0.0);
    Some(TrialFit {
        per_sample_bytes: line.slope,
        fixed_bytes: fixed,
        r_squared: line.r_squared,
        trials_used: points.len(),
        budget_bytes: budget as u64,
        max_batch: max_batch_within(budget, fixed, line.slope),
    })
}

/// A line through batch trials and the batch it allows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TrialFit {
    /// Bytes each sample adds to the peak.
    pub per_sample_bytes: f64,
    /// The peak at batch 0 (model state, workspace).
    pub fixed_bytes: f64,
    /// Fit quality.
    pub r_squared: f64,
    /// Trials on the line.
    pub trials_used: usize,
    /// `(1 − margin) × limit`.
    pub budget_bytes: u64,
    /// The largest batch within the budget.
    pub max_batch: u64,
}

/// The largest batch with `fixed + batch × per_sample ≤ budget`.
fn max_batch_within(budget: f64, fixed: f64, per_sample: f64) -> u64 {
    if budget > fixed && per_sample > 0.0 {
        // A millionth of a sample absorbs the rounding of a fitted slope (111.9999 is 112).
        ((budget - fixed) / per_sample + 1e-6).floor() as u64
    } else {
        0
    }
}

/// Fits the memory model and finds the largest batch within `(1 − margin)` of the device.
/// Prefers batch trials (two or more fitting trials of different sizes with a rising line), else
/// the memory peak's breakdown with a batch size. `None` without the device's total memory or
/// without either source.
pub fn batch_fit(trace: &Trace, peaks: &[Peak], margin: f64) -> Option<BatchFit> {
    let device_total_bytes = trace.gpu_total_bytes(None)?;
    let margin = margin.clamp(0.0, 0.99);
    let budget = (1.0 - margin) * device_total_bytes as f64;
    let peak = memory_peak(peaks);
    let components = peak.and_then(|p| p.components.as_ref());
    let current_batch = components
        .and_then(|c| c.breakdown.batch_size)
        .or_else(|| trace.components.iter().rev().find_map(|c| c.batch_size))
        .filter(|b| *b > 0);

    let from_trials = fit_trials(&trace.batch_trials, device_total_bytes, margin);
    let (method, basis, per_sample, fixed, r_squared, trials_used) = match from_trials {
        Some(fit) => (
            BatchFitMethod::Trials,
            None,
            fit.per_sample_bytes,
            fit.fixed_bytes,
            Some(fit.r_squared),
            fit.trials_used,
        ),
        None => {
            let components = components?;
            let activations = components.activations_bytes? as f64;
            let batch = components.breakdown.batch_size.filter(|b| *b > 0)?;
            if activations <= 0.0 {
                return None;
            }
            (
                BatchFitMethod::Breakdown,
                components.activations_basis,
                activations / batch as f64,
                components.total_bytes as f64,
                None,
                0,
            )
        }
    };
    let max_batch = max_batch_within(budget, fixed, per_sample);
    let accumulation_steps = current_batch
        .filter(|c| max_batch >= 1 && max_batch < *c)
        .map(|c| c.div_ceil(max_batch));
    Some(BatchFit {
        method,
        basis,
        per_sample_bytes: per_sample,
        fixed_bytes: fixed,
        r_squared,
        trials_used,
        device_total_bytes,
        margin,
        budget_bytes: budget as u64,
        current_batch,
        current_peak_bytes: current_batch.map(|b| (fixed + per_sample * b as f64).round() as u64),
        max_batch,
        accumulation_steps,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MarkValues;
    use crate::peaks::peaks;
    use oomscope_format::BatchTrial;
    use oomscope_format::units::GIB;
    use oomscope_testkit::run::Run;

    fn fit(trace: &Trace) -> Option<BatchFit> {
        batch_fit(
            trace,
            &peaks(trace, &MarkValues::new(trace), false),
            DEFAULT_BATCH_MARGIN,
        )
    }

    #[test]
    fn breakdown_gives_per_sample_cost_and_max_batch() {
        // 16 GiB fixed + 48 GiB of activations at batch 32 (1.5 GiB per sample) on 80 GiB:
        // (72 − 16) / 1.5 = 37.3 → 37.
        let trace = Run {
            activations_bytes: 48 * GIB,
            ..Run::default()
        }
        .build();
        let f = fit(&trace).unwrap();
        assert_eq!(f.method, BatchFitMethod::Breakdown);
        assert_eq!(f.basis, Some(ActivationsBasis::AllocatorAllocated));
        assert_eq!(f.per_sample_bytes, 1.5 * GIB as f64);
        assert_eq!(f.fixed_bytes, (16 * GIB) as f64);
        assert_eq!(f.max_batch, 37);
        assert_eq!(f.current_batch, Some(32));
        assert_eq!(f.current_peak_bytes, Some(64 * GIB));
        assert_eq!(f.accumulation_steps, None);
    }

    #[test]
    fn too_big_batch_gets_an_accumulation_factor() {
        // 16 GiB fixed + 24 GiB at batch 64 (0.375 GiB per sample) on a 40 GiB GPU that is
        // full: (36 − 16) / 0.375 = 53.3 → 53 fits, accumulate ceil(64 / 53) = 2.
        let trace = Run {
            gpu_total_bytes: 40 * GIB,
            activations_bytes: 24 * GIB,
            batch_size: Some(64),
            ..Run::default()
        }
        .build();
        let f = fit(&trace).unwrap();
        assert_eq!(f.max_batch, 53);
        assert_eq!(f.accumulation_steps, Some(2));
    }

    #[test]
    fn trials_win_over_the_breakdown() {
        let mut trace = Run::default().build();
        for (batch, peak) in [(8, 20 * GIB), (16, 24 * GIB), (32, 32 * GIB)] {
            trace.batch_trials.push(BatchTrial {
                t_us: 0,
                batch_size: batch,
                outcome: TrialOutcome::Fit,
                peak_bytes: Some(peak),
            });
        }
        trace.batch_trials.push(BatchTrial {
            t_us: 0,
            batch_size: 256,
            outcome: TrialOutcome::Oom,
            peak_bytes: None,
        });
        let f = fit(&trace).unwrap();
        assert_eq!(f.method, BatchFitMethod::Trials);
        assert_eq!(f.trials_used, 3);
        assert!((f.per_sample_bytes - 0.5 * GIB as f64).abs() < 1.0);
        assert!((f.fixed_bytes - (16 * GIB) as f64).abs() < 16.0);
        // (72 − 16) / 0.5 = 112.
        assert_eq!(f.max_batch, 112);
        let summary = trial_summary(&trace).unwrap();
        assert_eq!(summary.largest_fit_batch, Some(32));
        assert_eq!(summary.smallest_oom_batch, Some(256));
        assert_eq!(summary.trials, 4);
    }

    #[test]
    fn no_source_no_fit() {
        let trace = Run {
            components: false,
            ..Run::default()
        }
        .build();
        assert!(fit(&trace).is_none());
        assert!(trial_summary(&trace).is_none());
        let no_batch = Run {
            batch_size: None,
            ..Run::default()
        }
        .build();
        assert!(fit(&no_batch).is_none());
    }
}

//! Rules about NaN and Inf in gradients and tensors.
//!
//! Not memory, but the same trace shows it, and a run that produces NaN wastes its GPU hours as
//! surely as one that runs out of memory.

use super::rule::{Diagnose, RuleContext, critical_if};
use crate::finding::{
    Detail, Evidence, EvidenceKey as K, FindingKind, NonFiniteGradientSteps,
    NonFiniteTensorRecords, Severity,
};
use oomscope_format::{GradientSummary, TensorStats};

/// Inf-only gradients in at most this share of the summaries, with the last one finite, are the
/// fp16 loss scaler at work (it skips the step and lowers the scale): a warning, not critical.
pub const SPORADIC_INF_MAX_FRACTION: f64 = 0.05;

/// `non-finite-gradients`: gradients contained NaN or Inf.
#[derive(Debug, Clone, Copy, Default)]
pub struct NonFiniteGradients;

fn non_finite(g: &GradientSummary) -> bool {
    g.nan_count > 0 || g.inf_count > 0 || !g.global_norm.is_finite()
}

impl Diagnose for NonFiniteGradients {
    const KIND: FindingKind = FindingKind::NonFiniteGradients;
    type Diagnosis = NonFiniteGradientSteps;

    /// Detection: the summaries with NaN or Inf; `None` when every one is finite.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<NonFiniteGradientSteps> {
        let gradients = &ctx.trace.gradients;
        let bad: Vec<&GradientSummary> = gradients.iter().filter(|g| non_finite(g)).collect();
        let first = *bad.iter().min_by_key(|g| (g.step, g.t_us))?;
        let last = gradients.iter().max_by_key(|g| (g.step, g.t_us))?;
        let nan_elements: u64 = bad.iter().map(|g| g.nan_count).sum();
        let inf_elements: u64 = bad.iter().map(|g| g.inf_count).sum();
        let fraction = bad.len() as f64 / gradients.len() as f64;
        // A NaN norm with no counts comes from a summary that did not count (oomscope's
        // asynchronous CUDA path): it still means NaN.
        let any_nan = nan_elements > 0 || bad.iter().any(|g| g.global_norm.is_nan());
        Some(NonFiniteGradientSteps {
            first: first.clone(),
            last: last.clone(),
            last_non_finite: non_finite(last),
            non_finite_steps: bad.len(),
            recorded_steps: gradients.len(),
            nan_elements,
            inf_elements,
            sporadic_inf: !any_nan && fraction <= SPORADIC_INF_MAX_FRACTION && !non_finite(last),
        })
    }

    /// A warning for the fp16 loss scaler's sporadic Inf, else critical.
    fn severity(&self, d: &NonFiniteGradientSteps) -> Severity {
        critical_if(!d.sporadic_inf)
    }

    fn evidence(&self, d: &NonFiniteGradientSteps) -> Vec<Evidence> {
        vec![
            Evidence::count(K::FirstStep, d.first.step as f64),
            Evidence::count(K::NonFiniteSteps, d.non_finite_steps as f64),
            Evidence::count(K::RecordedSteps, d.recorded_steps as f64),
            Evidence::count(K::NanElements, d.nan_elements as f64),
            Evidence::count(K::InfElements, d.inf_elements as f64),
        ]
    }

    fn detail(d: NonFiniteGradientSteps) -> Detail {
        Detail::NonFiniteGradients(d)
    }
}

/// `non-finite-tensors`: watched tensors contained NaN or Inf.
#[derive(Debug, Clone, Copy, Default)]
pub struct NonFiniteTensors;

impl Diagnose for NonFiniteTensors {
    const KIND: FindingKind = FindingKind::NonFiniteTensors;
    type Diagnosis = NonFiniteTensorRecords;

    /// Detection: the tensor records with NaN or Inf; `None` when every one is finite.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<NonFiniteTensorRecords> {
        let bad: Vec<&TensorStats> = ctx
            .trace
            .tensors
            .iter()
            .filter(|t| t.nan_count > 0 || t.inf_count > 0)
            .collect();
        let first = *bad.iter().min_by_key(|t| (t.step, t.t_us))?;
        let mut tensors: Vec<String> = bad.iter().map(|t| t.name.to_string()).collect();
        tensors.sort_unstable();
        tensors.dedup();
        Some(NonFiniteTensorRecords {
            first: first.clone(),
            records: bad.len(),
            tensors,
            nan_elements: bad.iter().map(|t| t.nan_count).sum(),
            inf_elements: bad.iter().map(|t| t.inf_count).sum(),
        })
    }

    /// Critical with NaN (it propagates); Inf alone can be intended.
    fn severity(&self, d: &NonFiniteTensorRecords) -> Severity {
        critical_if(d.nan_elements > 0)
    }

    fn evidence(&self, d: &NonFiniteTensorRecords) -> Vec<Evidence> {
        vec![
            Evidence::count(K::FirstStep, d.first.step as f64),
            Evidence::count(K::Records, d.records as f64),
            Evidence::count(K::Tensors, d.tensors.len() as f64),
            Evidence::count(K::NanElements, d.nan_elements as f64),
            Evidence::count(K::InfElements, d.inf_elements as f64),
        ]
    }

    fn detail(d: NonFiniteTensorRecords) -> Detail {
        Detail::NonFiniteTensors(d)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::with_context;
    use super::*;
    use oomscope_testkit::run::Run;

    #[test]
    fn nan_gradients_are_counted() {
        let mut trace = Run::default().build();
        trace.gradients = (0..60)
            .map(|step| {
                let (nan_count, inf_count) = match step {
                    31 => (4, 0),
                    32 => (10, 2),
                    _ => (0, 0),
                };
                GradientSummary {
                    t_us: step * 1_000,
                    step,
                    params_with_grad: 100,
                    gradient_bytes: 1 << 30,
                    global_norm: if nan_count > 0 { f64::NAN } else { 1.5 },
                    nan_count,
                    inf_count,
                }
            })
            .collect();
        let counts = with_context(&trace, |ctx| {
            let d = NonFiniteGradients.detect(ctx).unwrap();
            (
                d.first.step,
                d.non_finite_steps,
                d.nan_elements,
                d.inf_elements,
                d.sporadic_inf,
            )
        });
        assert_eq!(counts, (31, 2, 14, 2, false));
    }
}

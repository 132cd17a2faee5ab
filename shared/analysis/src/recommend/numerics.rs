//! Rules about NaN and Inf in gradients and tensors.
//!
//! Not memory, but the same trace shows it, and a run that produces NaN wastes its GPU hours as
//! surely as one that runs out of memory.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use oomscope_format::units::format_count;
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

/// What [`NonFiniteGradients`] detected.
#[derive(Debug, Clone, Copy)]
pub struct NonFiniteGradientSteps<'a> {
    /// The first non-finite summary.
    pub first: &'a GradientSummary,
    /// The last summary recorded (finite or not).
    pub last: &'a GradientSummary,
    /// Summaries with NaN or Inf.
    pub non_finite_steps: usize,
    /// Summaries recorded.
    pub recorded_steps: usize,
    /// NaN elements counted over them.
    pub nan_elements: u64,
    /// Inf elements counted over them.
    pub inf_elements: u64,
    /// Inf only, in at most [`SPORADIC_INF_MAX_FRACTION`] of the steps, and the last finite: the
    /// fp16 loss scaler at work.
    pub sporadic_inf: bool,
}

impl Diagnose for NonFiniteGradients {
    const KIND: FindingKind = FindingKind::NonFiniteGradients;
    type Diagnosis<'a> = NonFiniteGradientSteps<'a>;

    /// Detection: the summaries with NaN or Inf; `None` when every one is finite.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
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
            first,
            last,
            non_finite_steps: bad.len(),
            recorded_steps: gradients.len(),
            nan_elements,
            inf_elements,
            sporadic_inf: !any_nan && fraction <= SPORADIC_INF_MAX_FRACTION && !non_finite(last),
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let (first, last) = (d.first, d.last);
        let persisting = if non_finite(last) {
            format!(
                "; the last summary (step {}) is still non-finite",
                format_count(last.step)
            )
        } else {
            format!(
                "; the last summary (step {}) is finite",
                format_count(last.step)
            )
        };
        let then = if first.nan_count == 0 && first.inf_count == 0 {
            format!(
                "global norm {} then, elements not counted at that step",
                first.global_norm
            )
        } else {
            format!(
                "{} NaN and {} Inf elements then",
                format_count(first.nan_count),
                format_count(first.inf_count)
            )
        };
        let explanation = format!(
            "gradients were non-finite at {} of {} recorded steps, first at step {} ({then}; {} \
             NaN and {} Inf elements counted in all){persisting}",
            format_count(d.non_finite_steps as u64),
            format_count(d.recorded_steps as u64),
            format_count(first.step),
            format_count(d.nan_elements),
            format_count(d.inf_elements),
        );
        let (severity, change) = if d.sporadic_inf {
            (
                Severity::Warning,
                "occasional Inf-only gradients are what fp16 loss scaling produces (GradScaler \
                 skips those steps); if they become frequent, switch to bf16 or lower the \
                 learning rate",
            )
        } else {
            (
                Severity::Critical,
                "find the first operation producing NaN/Inf (torch.autograd.set_detect_anomaly(True) \
                 on a short run from a checkpoint before the step); then lower the learning rate, \
                 clip gradients (torch.nn.utils.clip_grad_norm_), and with fp16 use GradScaler or \
                 switch to bf16",
            )
        };
        finding(
            self,
            severity,
            format!(
                "Non-finite gradients from step {}",
                format_count(first.step)
            ),
            explanation,
            change.to_owned(),
            vec![
                Evidence::count("first_step", first.step as f64),
                Evidence::count("non_finite_steps", d.non_finite_steps as f64),
                Evidence::count("recorded_steps", d.recorded_steps as f64),
                Evidence::count("nan_elements", d.nan_elements as f64),
                Evidence::count("inf_elements", d.inf_elements as f64),
            ],
        )
    }
}

/// `non-finite-tensors`: watched tensors contained NaN or Inf.
#[derive(Debug, Clone, Copy, Default)]
pub struct NonFiniteTensors;

/// What [`NonFiniteTensors`] detected.
#[derive(Debug, Clone)]
pub struct NonFiniteTensorRecords<'a> {
    /// The first record with NaN or Inf.
    pub first: &'a TensorStats,
    /// Records with NaN or Inf.
    pub records: usize,
    /// The distinct tensors among them, by name.
    pub tensors: Vec<&'a str>,
    /// NaN elements counted over them.
    pub nan_elements: u64,
    /// Inf elements counted over them.
    pub inf_elements: u64,
}

impl Diagnose for NonFiniteTensors {
    const KIND: FindingKind = FindingKind::NonFiniteTensors;
    type Diagnosis<'a> = NonFiniteTensorRecords<'a>;

    /// Detection: the tensor records with NaN or Inf; `None` when every one is finite.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let bad: Vec<&TensorStats> = ctx
            .trace
            .tensors
            .iter()
            .filter(|t| t.nan_count > 0 || t.inf_count > 0)
            .collect();
        let first = *bad.iter().min_by_key(|t| (t.step, t.t_us))?;
        let mut tensors: Vec<&str> = bad.iter().map(|t| t.name.as_ref()).collect();
        tensors.sort_unstable();
        tensors.dedup();
        Some(NonFiniteTensorRecords {
            first,
            records: bad.len(),
            tensors,
            nan_elements: bad.iter().map(|t| t.nan_count).sum(),
            inf_elements: bad.iter().map(|t| t.inf_count).sum(),
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let first = d.first;
        let explanation = format!(
            "tensor {} had {} NaN and {} Inf elements at step {} ({} record{} of {} tensor{} \
             affected: {})",
            first.name.as_ref(),
            format_count(first.nan_count),
            format_count(first.inf_count),
            format_count(first.step),
            d.records,
            if d.records == 1 { "" } else { "s" },
            d.tensors.len(),
            if d.tensors.len() == 1 { "" } else { "s" },
            d.tensors.join(", "),
        );
        let (severity, change) = if d.nan_elements > 0 {
            (
                Severity::Critical,
                "NaN propagates through everything downstream: check the first tensor's inputs \
                 at that step (division by zero, log of 0, overflow in fp16), and run with \
                 torch.autograd.set_detect_anomaly(True) on a short repro",
            )
        } else {
            (
                Severity::Warning,
                "Inf alone can be intended (-inf attention masks); if not, look for overflow in \
                 fp16 (use bf16 or scale down) in the first tensor's producer",
            )
        };
        finding(
            self,
            severity,
            format!("Non-finite values in tensor {}", first.name.as_ref()),
            explanation,
            change.to_owned(),
            vec![
                Evidence::count("first_step", first.step as f64),
                Evidence::count("records", d.records as f64),
                Evidence::count("tensors", d.tensors.len() as f64),
                Evidence::count("nan_elements", d.nan_elements as f64),
                Evidence::count("inf_elements", d.inf_elements as f64),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{evidence, find, with_context};
    use super::*;
    use oomscope_format::Trace;
    use oomscope_testkit::run::Run;

    fn with_gradients(bad: &[(u64, u64, u64)], steps: u64) -> Trace {
        let mut trace = Run::default().build();
        for step in 0..steps {
            let (nan, inf) = bad
                .iter()
                .find(|b| b.0 == step)
                .map_or((0, 0), |b| (b.1, b.2));
            trace.gradients.push(GradientSummary {
                t_us: step * 1_000,
                step,
                params_with_grad: 100,
                gradient_bytes: 1 << 30,
                global_norm: if nan > 0 { f64::NAN } else { 1.5 },
                nan_count: nan,
                inf_count: inf,
            });
        }
        trace
    }

    #[test]
    fn nan_gradients_are_critical() {
        let trace = with_gradients(&[(31, 4, 0), (32, 10, 2)], 60);
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
        let f = find(&trace, FindingKind::NonFiniteGradients).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.title, "Non-finite gradients from step 31");
        assert_eq!(
            f.explanation,
            "gradients were non-finite at 2 of 60 recorded steps, first at step 31 (4 NaN and 0 \
             Inf elements then; 14 NaN and 2 Inf elements counted in all); the last summary \
             (step 59) is finite"
        );
        assert_eq!(evidence(&f, "nan_elements"), 14.0);
    }

    #[test]
    fn an_uncounted_nan_norm_is_still_nan_and_says_so() {
        // The asynchronous CUDA path records the norm without counting elements.
        let mut trace = with_gradients(&[], 60);
        let g = trace.gradients.iter_mut().find(|g| g.step == 10).unwrap();
        g.global_norm = f64::NAN;
        let f = find(&trace, FindingKind::NonFiniteGradients).unwrap();
        assert_eq!(
            f.severity,
            Severity::Critical,
            "NaN is not the loss scaler's Inf"
        );
        assert!(
            f.explanation.contains(
                "first at step 10 (global norm NaN then, elements not counted at that step; 0 NaN"
            ),
            "{}",
            f.explanation
        );
    }

    #[test]
    fn sporadic_inf_is_the_loss_scaler() {
        let trace = with_gradients(&[(10, 0, 3)], 60);
        let f = find(&trace, FindingKind::NonFiniteGradients).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.change.contains("GradScaler"));
        // Still Inf at the end: critical.
        let trace = with_gradients(&[(59, 0, 3)], 60);
        assert_eq!(
            find(&trace, FindingKind::NonFiniteGradients)
                .unwrap()
                .severity,
            Severity::Critical
        );
    }

    #[test]
    fn finite_gradients_do_not_fire() {
        assert!(find(&with_gradients(&[], 60), FindingKind::NonFiniteGradients).is_none());
        assert!(find(&Run::default().build(), FindingKind::NonFiniteGradients).is_none());
    }

    fn tensor(trace: &mut Trace, name: &str, step: u64, nan: u64, inf: u64) {
        trace.tensors.push(TensorStats {
            t_us: step,
            step,
            name: name.into(),
            shape: vec![32, 1024],
            dtype: "f32".into(),
            bytes: 32 * 1024 * 4,
            min: -1.0,
            max: 1.0,
            mean: 0.0,
            std: 0.5,
            nan_count: nan,
            inf_count: inf,
        });
    }

    #[test]
    fn non_finite_tensors() {
        let mut trace = Run::default().build();
        tensor(&mut trace, "block3.out", 5, 0, 0);
        tensor(&mut trace, "block3.out", 12, 1_024, 0);
        tensor(&mut trace, "logits", 13, 5, 1);
        let f = find(&trace, FindingKind::NonFiniteTensors).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(
            f.explanation,
            "tensor block3.out had 1 024 NaN and 0 Inf elements at step 12 (2 records of 2 \
             tensors affected: block3.out, logits)"
        );

        let mut inf_only = Run::default().build();
        tensor(&mut inf_only, "attn.mask", 3, 0, 4_096);
        let f = find(&inf_only, FindingKind::NonFiniteTensors).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.change.contains("attention masks"));

        let mut clean = Run::default().build();
        tensor(&mut clean, "block3.out", 5, 0, 0);
        assert!(find(&clean, FindingKind::NonFiniteTensors).is_none());
    }
}

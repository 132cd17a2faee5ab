//! The words of the rules about NaN and Inf in gradients and tensors.

use super::finding_text::FindingText;
use oomscope_analysis::finding::{NonFiniteGradientSteps, NonFiniteTensorRecords};
use oomscope_format::units::format_count;

/// `non-finite-gradients`.
pub(super) fn gradients(d: &NonFiniteGradientSteps) -> FindingText {
    let (first, last) = (&d.first, &d.last);
    let persisting = format!(
        "; the last summary (step {}) is {}",
        format_count(last.step),
        if d.last_non_finite {
            "still non-finite"
        } else {
            "finite"
        }
    );
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
        "gradients were non-finite at {} of {} recorded steps, first at step {} ({then}; {} NaN \
         and {} Inf elements counted in all){persisting}",
        format_count(d.non_finite_steps as u64),
        format_count(d.recorded_steps as u64),
        format_count(first.step),
        format_count(d.nan_elements),
        format_count(d.inf_elements),
    );
    let changes: &[&str] = if d.sporadic_inf {
        &[
            "occasional Inf-only gradients are what fp16 loss scaling produces (GradScaler skips \
             those steps)",
            "if they become frequent, switch to bf16 or lower the learning rate",
        ]
    } else {
        &[
            "find the first operation producing NaN/Inf (torch.autograd.set_detect_anomaly(True) \
             on a short run from a checkpoint before the step)",
            "then lower the learning rate, clip gradients (torch.nn.utils.clip_grad_norm_), and \
             with fp16 use GradScaler or switch to bf16",
        ]
    };
    FindingText::new(
        format!(
            "Non-finite gradients from step {}",
            format_count(first.step)
        ),
        explanation,
        changes.iter().map(|c| (*c).to_owned()).collect(),
    )
}

/// `non-finite-tensors`.
pub(super) fn tensors(d: &NonFiniteTensorRecords) -> FindingText {
    let first = &d.first;
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
    let change = if d.nan_elements > 0 {
        "NaN propagates through everything downstream: check the first tensor's inputs at that \
         step (division by zero, log of 0, overflow in fp16), and run with \
         torch.autograd.set_detect_anomaly(True) on a short repro"
    } else {
        "Inf alone can be intended (-inf attention masks); if not, look for overflow in fp16 (use \
         bf16 or scale down) in the first tensor's producer"
    };
    FindingText::new(
        format!("Non-finite values in tensor {}", first.name.as_ref()),
        explanation,
        vec![change.to_owned()],
    )
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::{evidence, find};
    use oomscope_analysis::finding::{FindingKind, Severity};
    use oomscope_format::Trace;
    use oomscope_format::{GradientSummary, TensorStats};
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

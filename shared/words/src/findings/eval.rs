//! The words of the rules about evaluation: memory an eval keeps after it and an eval that needs
//! more memory than training. Their advice follows the evidence: "use torch.no_grad()" only when
//! the hooks saw eval forwards run with autograd on, "move it to the CPU" only for device memory,
//! and outputs collected batch by batch named when the eval grew inside itself.

use super::finding_text::FindingText;
use super::run_up;
use oomscope_analysis::finding::{EvalAboveTraining, EvalRetention};
use oomscope_format::units::{format_bytes, format_count};

/// `eval-peak`.
pub(super) fn eval_peak(d: &EvalAboveTraining) -> FindingText {
    let excess = d.excess_bytes();
    let when = if d.eval.before_stage.is_some() {
        format!("the eval at step {}", format_count(d.eval.entry_step))
    } else {
        "the eval before the first step".to_owned()
    };
    let mut explanation = format!(
        "{} peaks at {} during {when}, {} above the training peak ({})",
        d.eval.metric,
        format_bytes(d.eval_peak_bytes),
        format_bytes(excess),
        format_bytes(d.training_peak_bytes),
    );
    if let Some(tail) = d.tail {
        let steps = match tail.steps {
            1 => "training step".to_owned(),
            n => format!("{} training steps", format_count(n as u64)),
        };
        explanation.push_str(&format!(
            " (the {} read in the {steps} right after the eval at step {} is that eval's memory, \
             handed back late)",
            format_bytes(tail.bytes),
            format_count(tail.entry_step),
        ));
    }
    if let Some((g, growth)) = d
        .grower
        .as_ref()
        .and_then(|g| Some((g, g.within_growth_bytes?)))
    {
        let batches = g.eval_batches.saturating_sub(1).max(1) as u64;
        let inside = if d.grower_is_the_peak() {
            "inside it".to_owned()
        } else {
            format!("inside the eval at step {}", format_count(g.entry_step))
        };
        explanation.push_str(&format!(
            "; {inside} memory grew {} over {} batches ({}/batch): the eval collects its outputs \
             batch by batch (the torch.cat(all_logits) pattern)",
            format_bytes(growth.unsigned_abs()),
            format_count(g.eval_batches as u64),
            format_bytes(growth.unsigned_abs() / batches),
        ));
    }
    match d.autograd {
        Some(true) => explanation.push_str("; its forwards ran with autograd on"),
        Some(false) => {
            explanation.push_str("; its forwards ran without autograd (no_grad or inference_mode)");
        }
        None => {}
    }
    if d.also_retains {
        explanation.push_str("; evals also keep memory after they end (see below)");
    }
    explanation.push_str(
        ": the eval, not training, decides what fits, and it will fail first as data or batch \
         sizes grow",
    );
    let host = d.eval.metric.is_host();
    let changes = if d.grower.is_some() {
        let off_device = if host {
            ""
        } else {
            ", or move each batch's outputs off the device as they come (.detach().cpu(); Hugging \
             Face Trainer: eval_accumulation_steps)"
        };
        let mut changes = Vec::new();
        if d.autograd == Some(true) {
            changes.push(
                "run eval under torch.no_grad() (its forwards keep autograd graphs)".to_owned(),
            );
        }
        changes.push(format!(
            "compute the metric batch by batch (a running count of correct predictions, a running \
             sum of the loss) instead of collecting every batch's outputs and concatenating \
             them{off_device}"
        ));
        changes
    } else if d.autograd == Some(true) {
        vec![
            "run eval under torch.no_grad() (or torch.inference_mode()): its forwards run with \
             autograd on and keep their graphs"
                .to_owned(),
        ]
    } else {
        vec![
            "lower the eval batch size (Hugging Face Trainer: per_device_eval_batch_size; \
             Lightning: the val DataLoader's batch_size), or cap the eval's sequence length"
                .to_owned(),
        ]
    };
    FindingText::new(
        format!(
            "Eval needs {} more than training (peak {})",
            format_bytes(excess),
            format_bytes(d.eval_peak_bytes)
        ),
        explanation,
        changes,
    )
}

/// What an eval's memory is, in the words of its advice: autograd graphs when its forwards ran
/// with autograd on, else what it collects; the device's memory can be moved to the CPU, the
/// host's only dropped or reduced.
fn eval_change(autograd: Option<bool>, host: bool) -> Vec<String> {
    let keep = if host {
        "reduce each batch's outputs to numbers (.item(), a running sum) as they are collected"
    } else {
        "reduce each batch's outputs to numbers (.item()) or move them off the device \
         (.detach().cpu()) as they are collected"
    };
    let clear = "clear what the eval collects when it ends (lists of outputs or predictions: \
                 Lightning's validation_step_outputs, .clear() it in on_validation_epoch_end; \
                 what a Trainer's compute_metrics stores; metric states: .reset())";
    match autograd {
        Some(true) => vec![
            "run eval under torch.no_grad() (or torch.inference_mode()): its forwards run with \
             autograd on and keep their graphs"
                .to_owned(),
            format!("{clear}, and {keep}"),
        ],
        Some(false) => vec![format!("{clear}, and {keep}")],
        None => vec![
            format!("{clear}, and {keep}"),
            "if eval runs with autograd on, run it under torch.no_grad()".to_owned(),
        ],
    }
}

/// `eval-retains-memory`.
pub(super) fn eval_retains(d: &EvalRetention) -> FindingText {
    let worst = &d.worst;
    let jump = worst.jump_bytes.unwrap_or(0).unsigned_abs();
    let retained = worst.retained_bytes.unwrap_or(0).unsigned_abs();
    let total = d.total_retained_bytes;
    // A retaining eval always has training marks on both sides.
    let mut compared = format!(
        "{} at its lowest in the training after it, step {}, and before it, step {}",
        worst.before_stage.as_deref().unwrap_or_default(),
        format_count(worst.after_step.unwrap_or_default()),
        format_count(worst.floor_before_step.unwrap_or_default())
    );
    if let Some(slope) = worst.training_slope_bytes.filter(|&s| s > 0) {
        compared.push_str(&format!(
            "; training's own {}/step taken out",
            format_bytes(slope.unsigned_abs())
        ));
    }
    let mut explanation = format!(
        "{} is {} higher after the eval at step {} than before it ({compared}); during the eval \
         it rose {}",
        worst.metric,
        format_bytes(retained),
        format_count(worst.entry_step),
        format_bytes(jump),
    );
    if d.retaining_evals > 1 {
        explanation.push_str(&format!(
            " ({} of {} evals kept memory, {} in all)",
            d.retaining_evals,
            d.evals,
            format_bytes(total.max(0).unsigned_abs())
        ));
    }
    if d.accumulates {
        let growth = d.within_growth_bytes.unsigned_abs();
        let them = if d.retaining_evals > 1 {
            "the evals that kept memory"
        } else {
            "that eval"
        };
        explanation.push_str(&format!(
            "; inside {them} it grew {} batch by batch ({}/batch): what the eval collects batch \
             by batch is what stays",
            format_bytes(growth),
            format_bytes(growth / d.within_batches.max(1) as u64),
        ));
    }
    if d.autograd == Some(false) {
        explanation.push_str(
            "; its forwards ran without autograd (no_grad or inference_mode), so this is not \
             autograd graphs but outputs or state the program keeps",
        );
    }
    if let Some(p) = &d.projection {
        let when = p.steps_between_evals.map_or_else(String::new, |k| {
            format!(
                ", about {} training steps from now",
                format_count(p.evals_remaining.saturating_add(1).saturating_mul(k))
            )
        });
        let kind = if d.also_leaks {
            "besides the per-step leak, memory is kept at each eval; at that alone"
        } else if d.creep.is_some() {
            "memory is kept at each eval; at"
        } else {
            "this is memory kept at each eval, not a per-step leak; at"
        };
        explanation.push_str(&format!(
            ": {kind} {} per eval, {} more eval(s) fit under the limit of {}{when}",
            format_bytes(p.per_eval_bytes),
            format_count(p.evals_remaining),
            format_bytes(p.limit_bytes),
        ));
    }
    if let Some(c) = &d.creep {
        let counted = if d.autograd.is_some() {
            "; the hooks counted no tensors growing"
        } else {
            ""
        };
        explanation.push_str(&format!(
            "; the training steps between the evals added {} more ({}/step of {} at {}), less \
             than the evals kept: on host memory what the evals keep fragments the C allocator's \
             heap, and the RSS can creep up after each eval without the program keeping \
             anything more{counted}, so this is not called a leak; once the eval keeps nothing, \
             growth left in the training steps is one",
            format_bytes(c.train_growth_bytes.unsigned_abs()),
            format_bytes(c.train_slope_bytes_per_step.max(0.0) as u64),
            c.metric.label(),
            c.stage,
        ));
    }
    let mut changes = eval_change(d.autograd, worst.metric.is_host());
    if let Some(h) = &d.holder {
        changes.push(format!("first the one counted: {}", run_up::kept_in(h)));
    }
    FindingText::new(
        format!(
            "Eval keeps {} after returning to training",
            format_bytes(retained)
        ),
        explanation,
        changes,
    )
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::{evidence, find};
    use oomscope_analysis::finding::{FindingKind, Severity};
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn eval_that_keeps_memory() {
        let run = Run {
            steps: 40,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB + GIB / 5,
            eval_retained_bytes: 2 * GIB,
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::EvalRetainsMemory).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.title, "Eval keeps 2.00 GiB after returning to training");
        assert!(
            f.explanation.starts_with(
                "allocated is 2.00 GiB higher after the eval at step 9 than before it \
                 (post_optimizer_step at its lowest in the training after it, step 10, and \
                 before it, step 9); during \
                 the eval it rose 3.20 GiB (3 of 4 evals kept memory, 6.00 GiB in all)"
            ),
            "{}",
            f.explanation
        );
        assert_eq!(evidence(&f, "retaining_evals"), 3.0);
    }

    #[test]
    fn eval_that_gives_memory_back() {
        let clean = Run {
            steps: 40,
            eval_every: Some(10),
            eval_jump_bytes: 3 * GIB,
            ..Run::default()
        };
        assert!(find(&clean.build(), FindingKind::EvalRetainsMemory).is_none());
        // Near miss: keeps 280 MiB of a 3 GiB jump (over 256 MiB, but under a tenth of the jump).
        let partial = Run {
            eval_retained_bytes: 280 * MIB,
            ..clean.clone()
        };
        assert!(find(&partial.build(), FindingKind::EvalRetainsMemory).is_none());
        // Keeping a third of the jump after every eval is reported.
        let third = Run {
            eval_retained_bytes: GIB,
            ..clean.clone()
        };
        assert!(find(&third.build(), FindingKind::EvalRetainsMemory).is_some());
        // Near miss: one eval keeps all of a 200 MiB jump (under 256 MiB).
        let small = Run {
            steps: 15,
            eval_jump_bytes: 200 * MIB,
            eval_retained_bytes: 200 * MIB,
            ..clean
        };
        assert!(find(&small.build(), FindingKind::EvalRetainsMemory).is_none());
    }

    #[test]
    fn small_retention_at_every_eval_is_a_staircase_to_an_oom_not_a_leak() {
        // The story: flat training, +200 MiB kept at each of 9 evals (every 10 steps).
        let run = Run {
            steps: 100,
            eval_every: Some(10),
            eval_jump_bytes: GIB,
            eval_retained_bytes: 200 * MIB,
            ..Run::default()
        };
        let trace = run.build();
        assert!(find(&trace, FindingKind::Leak).is_none());
        let f = find(&trace, FindingKind::EvalRetainsMemory).unwrap();
        assert_eq!(f.title, "Eval keeps 200 MiB after returning to training");
        assert_eq!(evidence(&f, "retaining_evals"), 9.0);
        assert_eq!(evidence(&f, "per_eval_bytes"), (200 * MIB) as f64);
        // The high point is the last step's forward pass, 28 GiB + 9 × 200 MiB: (80 GiB − that)
        // / 200 MiB = 257 more evals fit.
        assert_eq!(evidence(&f, "evals_remaining"), 257.0);
        assert!(
            f.explanation.contains(
                "this is memory kept at each eval, not a per-step leak; at 200 MiB per eval"
            ),
            "{}",
            f.explanation
        );
    }
}

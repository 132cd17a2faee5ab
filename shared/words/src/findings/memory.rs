//! The words of the rules about what fills GPU memory: the OOM itself, activations, optimizer
//! state, batch size.

use super::finding_text::FindingText;
use super::run_up;
use oomscope_analysis::facts::OomContext;
use oomscope_analysis::facts::{BatchFit, BatchFitMethod};
use oomscope_analysis::finding::{
    ActivationShare, BatchSearchResult, FollowsInput, LoopPart, OptimizerShare, OutOfGpuMemory,
};
use oomscope_format::Phase;
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_percent};

use crate::phrases::{peak_place, source_line, tensor_count};

/// "batch 24 fits with a 10% margin; to keep the effective batch of 32, run 2 accumulation steps
/// of batch 16", or `None` when the current batch already fits.
fn smaller_batch_advice(fit: &BatchFit) -> Option<String> {
    let (current, steps) = fit.accumulation()?;
    let micro = current.div_ceil(steps);
    let effective = if micro * steps == current {
        format!("to keep the effective batch of {current}")
    } else {
        format!(
            "for an effective batch of {} (now {current})",
            micro * steps
        )
    };
    Some(format!(
        "batch {} fits with a {} margin; {effective}, run {steps} gradient accumulation steps of \
         batch {micro}",
        fit.max_batch,
        format_percent(fit.margin),
    ))
}

/// `oom`.
pub(super) fn oom(d: &OutOfGpuMemory) -> FindingText {
    let first = &d.first;
    let mut explanation = oom_explanation(first);
    if d.events > 1 {
        explanation.push_str(&format!(" ({} OOM events in all)", d.events));
    }
    if let Some(r) = &d.run_up {
        explanation.push_str("; ");
        explanation.push_str(&run_up::fact(r));
    }
    let mut title = match first.event.step {
        Some(step) => format!("Out of GPU memory at step {}", format_count(step)),
        None => "Out of GPU memory".to_owned(),
    };
    if first.fatal {
        return FindingText::new(title, explanation, oom_change(d));
    }
    // Every OOM was survived: the program caught them (a cuDNN workspace fallback, a batch-size
    // finder, a retry) and went on. Worth knowing, not the cause of a failure.
    title.push_str(", caught by the program");
    explanation.push_str(
        "; the program caught it and went on (the run did not die of it): each caught OOM costs \
         a cache flush and a retry",
    );
    let changes = if d.oom_trials > 0 {
        vec![format!(
            "nothing: these are the batch search's {} trial(s) that did not fit, probing the \
             limit on purpose (see the batch-size finding)",
            d.oom_trials
        )]
    } else {
        oom_change(d)
    };
    FindingText::new(title, explanation, changes)
}

/// Where the OOM happened, what was asked for and free, and what held the memory.
fn oom_explanation(oom: &OomContext) -> String {
    let mut where_ = match (&oom.event.stage, &oom.next_stage) {
        (Some(stage), Some(next)) => format!(" between {stage} and {next}"),
        (Some(stage), None) => format!(" after {stage}"),
        _ => String::new(),
    };
    if let Some(step) = oom.event.step {
        where_.push_str(&format!(" of step {}", format_count(step)));
    }
    if oom.phase == Some(Phase::Eval) {
        where_.push_str(" (eval)");
    }
    let mut facts: Vec<String> = Vec::new();
    match (oom.event.requested_bytes, oom.event.device_free_bytes) {
        (Some(r), Some(f)) => {
            let total = oom
                .event
                .device_total_bytes
                .map_or_else(String::new, |t| format!(" of {}", format_bytes(t)));
            let short = match oom.shortfall_bytes {
                Some(s) if s > 0 => format!(", {} short", format_bytes(s.unsigned_abs())),
                _ => ", at least what was asked for: the free memory was fragmented or taken by \
                      another process"
                    .to_owned(),
            };
            facts.push(format!(
                "it asked for {} with {} free{total}{short}",
                format_bytes(r),
                format_bytes(f)
            ));
        }
        (Some(r), None) => facts.push(format!("it asked for {}", format_bytes(r))),
        _ => {}
    }
    match (
        oom.allocated_bytes,
        oom.reserved_bytes,
        oom.process_gpu_bytes,
    ) {
        (Some(a), Some(r), _) => facts.push(format!(
            "{} tensors held {} and the allocator {} reserved",
            oom.allocator_mark_stage
                .as_ref()
                .map_or_else(|| "when it failed,".to_owned(), |s| format!("at {s},")),
            format_bytes(a),
            format_bytes(r)
        )),
        (_, _, Some(p)) => facts.push(format!("the process held {} on the GPU", format_bytes(p))),
        _ => {}
    }
    if let Some(top) = oom.alive.first() {
        facts.push(format!(
            "of what was alive, most came from {}: {} in {}",
            source_line(top),
            format_bytes(top.bytes),
            tensor_count(top.count)
        ));
    }
    if let Some(c) = &oom.largest_component {
        facts.push(format!(
            "the largest model component is {} ({})",
            c.name.replace('_', " "),
            format_bytes(c.bytes)
        ));
    }
    let mut explanation = format!("the run ran out of GPU memory{where_}");
    if !facts.is_empty() {
        explanation.push_str(": ");
        explanation.push_str(&facts.join("; "));
    }
    explanation
}

/// What to change, by the part of the loop that ran out: eval, the optimizer step, or the
/// forward/backward pass (the batch that fits, when the memory model knows it).
fn oom_change(d: &OutOfGpuMemory) -> Vec<String> {
    if d.impossible {
        return vec![
            "no batch size fits one request larger than the GPU: fix the shape that reaches it \
             (see impossible-request)"
                .to_owned(),
        ];
    }
    if let Some(change) = d.run_up.as_ref().and_then(run_up::change) {
        return change;
    }
    if d.first.phase == Some(Phase::Eval) {
        // Autograd known off in the eval: no advice to turn it off.
        let no_grad = if d.run_up.as_ref().and_then(|r| r.autograd) == Some(false) {
            ""
        } else {
            "evaluate under torch.no_grad() (or torch.inference_mode()) with model.eval(), "
        };
        return vec![format!(
            "{no_grad}use a smaller eval batch, and move collected outputs to the CPU"
        )];
    }
    let fit_advice = d.fit.as_ref().and_then(smaller_batch_advice);
    match d.part {
        LoopPart::Optimizer => {
            let opt = d.optimizer_state_bytes.map_or_else(String::new, |b| {
                format!(" (optimizer state is {})", format_bytes(b))
            });
            vec![format!(
                "the optimizer step ran out of memory{opt}: use an 8-bit or factored optimizer, \
                 or shard its state across ranks (ZeRO / FSDP)"
            )]
        }
        LoopPart::Forward | LoopPart::Backward => match fit_advice {
            Some(advice) => vec![advice, "or enable activation checkpointing".to_owned()],
            None => vec![
                "halve the batch size and use 2 gradient accumulation steps to keep the \
                 effective batch, or enable activation checkpointing (torch.utils.checkpoint) on \
                 the largest blocks"
                    .to_owned(),
            ],
        },
        LoopPart::Other => match fit_advice {
            Some(advice) => vec![
                advice,
                "see the other findings for what fills memory".to_owned(),
            ],
            None => vec![
                "reduce the batch size (keeping the effective batch with gradient accumulation)"
                    .to_owned(),
                "see the other findings for what fills memory".to_owned(),
            ],
        },
    }
}

/// `activations-dominate`.
pub(super) fn activations(d: &ActivationShare) -> FindingText {
    if let Some(f) = &d.follows_input {
        return following_the_input(d, f);
    }
    let (peak, share, fit) = (&d.peak, d.share, d.fit.as_ref());
    let per_sample = fit.map_or_else(String::new, |f| {
        let source = match f.method {
            BatchFitMethod::Trials => " from the batch trials".to_owned(),
            BatchFitMethod::Breakdown => f
                .current_batch
                .map_or_else(String::new, |b| format!(" at batch {b}")),
        };
        format!(
            ", {} per sample{source}",
            format_bytes_f64(f.per_sample_bytes)
        )
    });
    let mut explanation = format!(
        "activations are {} of the peak ({} of {}{}{per_sample})",
        format_percent(share),
        format_bytes(d.activations_bytes),
        format_bytes(peak.bytes),
        peak_place(peak),
    );
    let advice = fit.and_then(smaller_batch_advice);
    match (fit, &advice) {
        (_, Some(advice)) => explanation.push_str(&format!(": {advice}")),
        (Some(f), None) => explanation.push_str(&format!(
            ": up to batch {} fits with a {} margin",
            f.max_batch,
            format_percent(f.margin)
        )),
        (None, None) => {}
    }
    let changes = match advice {
        Some(advice) => vec![
            advice,
            "activation checkpointing (torch.utils.checkpoint) or bf16 autocast shrink \
             activations without changing the batch"
                .to_owned(),
        ],
        None => vec![
            "activations are the lever: activation checkpointing (torch.utils.checkpoint) on the \
             largest blocks, bf16 autocast, or a smaller batch with gradient accumulation"
                .to_owned(),
        ],
    };
    FindingText::new(
        format!("Activations are {} of peak memory", format_percent(share)),
        explanation,
        changes,
    )
}

/// `optimizer-state-heavy`.
pub(super) fn optimizer(d: &OptimizerShare) -> FindingText {
    let optimizer = d.optimizer_state_bytes;
    let vs_params = if d.parameters_bytes > 0 {
        format!(
            ", {:.1}× the parameters ({})",
            optimizer as f64 / d.parameters_bytes as f64,
            format_bytes(d.parameters_bytes)
        )
    } else {
        String::new()
    };
    let mut explanation = format!(
        "optimizer state is {} of the peak ({} of {}{vs_params})",
        format_percent(d.share),
        format_bytes(optimizer),
        format_bytes(d.peak_bytes),
    );
    if let Some(g) = &d.grew {
        explanation.push_str(&format!(
            "; it grew by {} during the run, {} of the rise of {} ({}): parameters were added to \
             the optimizer as it ran (parameter groups, unfrozen layers) or its history filled — \
             memory that stays while they are trained, not a leak",
            format_bytes(g.grew_bytes),
            format_percent(g.grew_bytes as f64 / g.rise_bytes.max(1) as f64),
            g.metric,
            format_bytes(g.rise_bytes)
        ));
    }
    let mut changes = vec![
        format!(
            "an 8-bit optimizer (e.g. bitsandbytes AdamW8bit) stores fp32 moments in a quarter of \
             the space (saves about {})",
            format_bytes(d.estimated_saving_bytes)
        ),
        "a factored optimizer (Adafactor) keeps even less".to_owned(),
    ];
    if let Some(world) = d.ranks {
        changes.push(format!(
            "sharding the state across the {world} ranks (ZeRO-1 / FSDP) divides it by {world}"
        ));
    }
    let title = match &d.grew {
        Some(g) => format!(
            "Optimizer state grew {} during the run ({} of its memory's rise)",
            format_bytes(g.grew_bytes),
            format_percent(g.grew_bytes as f64 / g.rise_bytes.max(1) as f64)
        ),
        None => format!(
            "Optimizer state is {} of peak memory",
            format_percent(d.share)
        ),
    };
    FindingText::new(title, explanation, changes)
}

/// Memory that followed the input's size: the activations, with the numbers that show it.
fn following_the_input(d: &ActivationShare, f: &FollowsInput) -> FindingText {
    let explanation = format!(
        "{} followed the size of the input, {} per input element (correlation {:.2}): the \
         model's state does not grow with the input, its activations do, so the largest inputs \
         set the peak ({}{}); the floor rose {} with them, memory the allocator kept from the \
         larger inputs' activations, not a leak",
        f.metric,
        format_bytes_f64(f.bytes_per_element),
        f.correlation,
        format_bytes(d.peak.bytes),
        peak_place(&d.peak),
        format_bytes(d.activations_bytes),
    );
    FindingText::new(
        format!(
            "Activations follow the input: {} per input element",
            format_bytes_f64(f.bytes_per_element)
        ),
        explanation,
        vec![
            "to lower the peak, cap the largest input (a smaller largest image or sequence, \
             buckets of similar lengths) or shrink the activations there: activation \
             checkpointing (torch.utils.checkpoint), bf16 autocast, a smaller batch for the \
             largest inputs"
                .to_owned(),
        ],
    )
}

/// `batch-size`.
pub(super) fn batch_size(d: &BatchSearchResult) -> FindingText {
    let trials = &d.trials;
    let mut facts = vec![format!("the batch search ran {} trials", trials.trials)];
    if let Some(b) = trials.largest_fit_batch {
        let peak = trials
            .largest_fit_peak_bytes
            .map_or_else(String::new, |p| format!(" (peak {})", format_bytes(p)));
        facts.push(format!("batch {b} fit{peak}"));
    }
    if let Some(b) = trials.smallest_oom_batch {
        facts.push(format!("batch {b} ran out of memory"));
    }
    let mut explanation = facts.join(", ");
    let changes = match &d.fit {
        Some(f) => {
            explanation.push_str(&format!(
                "; the fitted cost is {} per sample on top of {}, so batch {} fits with a {} \
                 margin of the {} device",
                format_bytes_f64(f.per_sample_bytes),
                format_bytes_f64(f.fixed_bytes),
                f.max_batch,
                format_percent(f.margin),
                format_bytes(f.device_total_bytes),
            ));
            let margin = format_percent(f.margin);
            match trials.largest_fit_batch {
                Some(m) if f.max_batch > m => vec![format!(
                    "use batch {} (predicted; batch {m} is the largest measured to fit) and keep \
                     the {margin} margin for longer inputs and the allocator cache",
                    f.max_batch
                )],
                Some(m) if f.max_batch < m => vec![format!(
                    "use batch {}: batch {m} fit in the search but leaves less than the {margin} \
                     margin, which longer inputs or a fuller cache can use up",
                    f.max_batch
                )],
                _ => vec![
                    format!("use batch {}", f.max_batch),
                    "for a larger effective batch, add gradient accumulation".to_owned(),
                ],
            }
        }
        None => match trials.largest_fit_batch {
            Some(b) => vec![
                format!("use batch {b} or less (the largest measured to fit)"),
                "for a larger effective batch, add gradient accumulation".to_owned(),
            ],
            None => vec![
                "no batch size fit: reduce memory first (activation checkpointing, bf16, an 8-bit \
                 optimizer) and search again"
                    .to_owned(),
            ],
        },
    };
    let title = match trials.largest_fit_batch {
        Some(b) => format!("Batch search: {b} is the largest batch that fit"),
        None => "Batch search: no batch size fit".to_owned(),
    };
    FindingText::new(title, explanation, changes)
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::{evidence, find};
    use super::*;
    use oomscope_analysis::finding::{FindingKind, Severity};
    use oomscope_format::units::{GIB, MIB};
    use oomscope_format::{BatchTrial, ExitStatus, ProcessExit, Trace, TrialOutcome};
    use oomscope_testkit::run::Run;

    /// 8 GiB of model state and 16 GiB of activations at batch 32 on a 25 GiB GPU: the peak is
    /// 96% of the device (24.5 GiB with cache and context) and batch 29 is the most that fits
    /// with a 10% margin.
    fn tight() -> Run {
        Run {
            parameters_bytes: 2 * GIB,
            grads_bytes: 2 * GIB,
            optimizer_bytes: 4 * GIB,
            activations_bytes: 16 * GIB,
            gpu_total_bytes: 25 * GIB,
            fragmentation_bytes: 256 * MIB,
            context_bytes: 256 * MIB,
            ..Run::default()
        }
    }

    #[test]
    fn oom_in_the_forward_pass() {
        let trace = Run {
            oom_at_step: Some(30),
            ..Run::default()
        }
        .build();
        let f = find(&trace, FindingKind::Oom).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.title, "Out of GPU memory at step 30");
        assert!(
            f.explanation.starts_with(
                "the run ran out of GPU memory between pre_forward and post_forward of step 30: \
                 it asked for 2.00 GiB with 50.9 GiB free of 80.0 GiB, at least what was asked for"
            ),
            "{}",
            f.explanation
        );
        assert!(
            f.explanation.contains(
                "at pre_forward, tensors held 16.0 GiB and the allocator 28.5 GiB reserved"
            )
        );
        assert!(
            f.explanation
                .contains("the largest model component is optimizer state (8.00 GiB)")
        );
        // The current batch fits the model, so the advice is the generic one.
        assert!(f.change.starts_with("halve the batch size"), "{}", f.change);
        assert_eq!(evidence(&f, "requested_bytes"), (2 * GIB) as f64);
        assert_eq!(evidence(&f, "step"), 30.0);
        assert!(evidence(&f, "shortfall_bytes") < 0.0);
    }

    #[test]
    fn oom_names_the_batch_that_fits() {
        let trace = Run {
            oom_at_step: Some(30),
            oom_requested_bytes: 2 * GIB + GIB / 2,
            ..tight()
        }
        .build();
        let f = find(&trace, FindingKind::Oom).unwrap();
        assert!(
            f.explanation.contains("2.00 GiB short"),
            "{}",
            f.explanation
        );
        assert!(
            f.change.starts_with(
                "batch 29 fits with a 10% margin; to keep the effective batch of 32, run 2 \
                 gradient accumulation steps of batch 16"
            ),
            "{}",
            f.change
        );
    }

    #[test]
    fn oom_in_the_optimizer_step_and_in_eval() {
        let mut trace = Run {
            oom_at_step: Some(30),
            oom_knows_stage: true,
            ..Run::default()
        }
        .build();
        trace.ooms[0].stage = Some("post_backward".into());
        let f = find(&trace, FindingKind::Oom).unwrap();
        assert!(
            f.explanation
                .contains("between post_backward and post_optimizer_step of step 30")
        );
        assert!(
            f.change
                .contains("optimizer step ran out of memory (optimizer state is 8.00 GiB)")
        );

        let mut trace = Run {
            oom_at_step: Some(30),
            eval_every: Some(10),
            ..Run::default()
        }
        .build();
        let eval_mark = trace.marks.iter().find(|m| m.phase == Phase::Eval).unwrap();
        trace.ooms[0].t_us = eval_mark.t_us + 1;
        let f = find(&trace, FindingKind::Oom).unwrap();
        assert!(f.explanation.contains("(eval)"), "{}", f.explanation);
        assert!(f.change.contains("torch.no_grad()"));
    }

    #[test]
    fn an_oom_in_an_eval_is_explained_by_what_the_eval_kept() {
        let mut trace = Run {
            oom_at_step: Some(30),
            eval_every: Some(10),
            ..Run::default()
        }
        .build();
        let entry_us = trace
            .marks
            .iter()
            .find(|m| m.phase == Phase::Eval)
            .unwrap()
            .t_us;
        trace.ooms[0].t_us = entry_us + 1;
        trace.held.push(oomscope_format::HeldTensors {
            t_us: entry_us,
            clock: oomscope_format::HeldClock::Eval,
            from_step: 5,
            to_step: 13,
            device: "cuda:0".into(),
            dtype: "float32".into(),
            shape: "64x32768".into(),
            count: 8,
            bytes: 8 << 23,
            holder: "list `all_logits`".into(),
            items: Some(12),
            ..oomscope_format::HeldTensors::default()
        });
        trace.eval_autograd.push(oomscope_format::EvalAutograd {
            t_us: entry_us,
            enabled: false,
            pid: None,
        });
        let f = find(&trace, FindingKind::Oom).unwrap();
        assert!(
            f.explanation.contains(
                "it died in the eval at step 9 (1 batch(es) in); counted at its batches 5 and 13, \
                 list `all_logits` (12 items) gained 8 float32[64x32768] (8.00 MiB a batch)"
            ),
            "{}",
            f.explanation
        );
        assert!(
            f.change
                .starts_with("the eval keeps every batch's results in list `all_logits`"),
            "{}",
            f.change
        );
        // Autograd was off in the eval, and the GPU ran out: no no_grad advice; the CPU is
        // somewhere else to keep them.
        assert!(!f.change.contains("no_grad") && f.change.contains(".cpu()"));
        // A row on the steps' clock is not the eval's.
        trace.held[0].clock = oomscope_format::HeldClock::Step;
        let f = find(&trace, FindingKind::Oom).unwrap();
        assert!(!f.explanation.contains("all_logits"), "{}", f.explanation);
        assert!(!f.change.contains("no_grad") && !f.change.contains("all_logits"));
    }

    #[test]
    fn no_oom_finding_without_a_gpu_oom() {
        assert!(find(&Run::default().build(), FindingKind::Oom).is_none());
        let host_kill = Run {
            exit: Some(ProcessExit {
                t_us: 1_000,
                status: ExitStatus::Signal(9),
                probable_host_oom: true,
            }),
            ..Run::default()
        }
        .build();
        assert!(find(&host_kill, FindingKind::Oom).is_none());
    }

    #[test]
    fn activations_dominate_with_room_to_spare() {
        let trace = Run {
            activations_bytes: 48 * GIB,
            ..Run::default()
        }
        .build();
        let f = find(&trace, FindingKind::ActivationsDominate).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(
            f.explanation,
            "activations are 75% of the peak (48.0 GiB of 64.0 GiB at post_forward of step 0, \
             1.50 GiB per sample at batch 32): up to batch 37 fits with a 10% margin"
        );
        assert_eq!(evidence(&f, "max_batch"), 37.0);
    }

    #[test]
    fn activations_dominate_and_the_batch_is_too_big() {
        let f = find(&tight().build(), FindingKind::ActivationsDominate).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.explanation.ends_with(
                ": batch 29 fits with a 10% margin; to keep the effective batch of 32, run 2 \
                 gradient accumulation steps of batch 16"
            ),
            "{}",
            f.explanation
        );
        assert_eq!(evidence(&f, "accumulation_steps"), 2.0);
        assert!((evidence(&f, "activations_share") - 16.0 / 24.0).abs() < 1e-9);
    }

    #[test]
    fn leaked_memory_is_not_called_activations() {
        // Leaked memory makes "peak − model state" 63% of the peak; the leak explains it.
        let run = Run {
            steps: 200,
            leak_bytes_per_step: 80 * MIB,
            ..Run::default()
        };
        let analysis = oomscope_analysis::analyze(&run.build(), &Default::default());
        assert!(
            analysis
                .findings
                .iter()
                .any(|f| f.kind() == FindingKind::Leak)
        );
        assert!(
            analysis
                .findings
                .iter()
                .all(|f| f.kind() != FindingKind::ActivationsDominate)
        );
        assert!(analysis.batch_fit.is_none());
    }

    #[test]
    fn activations_below_half_or_without_allocator_data_do_not_fire() {
        // 12 of 28 GiB (43%).
        assert!(find(&Run::default().build(), FindingKind::ActivationsDominate).is_none());
        // Near miss: 15.5 of 31.5 GiB (49%).
        let near = Run {
            activations_bytes: 15 * GIB + GIB / 2,
            ..Run::default()
        };
        assert!(find(&near.build(), FindingKind::ActivationsDominate).is_none());
        // Process memory only: the remainder includes cache and context, so no claim is made.
        let no_allocator = Run {
            allocator_stats: false,
            activations_bytes: 48 * GIB,
            ..Run::default()
        };
        assert!(find(&no_allocator.build(), FindingKind::ActivationsDominate).is_none());
    }

    #[test]
    fn optimizer_state_heavy() {
        let mut trace = Run {
            activations_bytes: 6 * GIB,
            ..Run::default()
        }
        .build();
        trace.metadata.world_size = Some(8);
        let f = find(&trace, FindingKind::OptimizerStateHeavy).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(
            f.explanation,
            "optimizer state is 36% of the peak (8.00 GiB of 22.0 GiB, 2.0× the parameters \
             (4.00 GiB))"
        );
        assert!(f.change.contains("saves about 6.00 GiB"));
        assert!(f.change.contains("across the 8 ranks"));
        // 8 of 28 GiB (29%) is below the threshold; no breakdown, no finding.
        assert!(find(&Run::default().build(), FindingKind::OptimizerStateHeavy).is_none());
        let no_components = Run {
            activations_bytes: 6 * GIB,
            components: false,
            ..Run::default()
        };
        assert!(find(&no_components.build(), FindingKind::OptimizerStateHeavy).is_none());
    }

    fn with_trials(trials: &[(u64, TrialOutcome, Option<u64>)]) -> Trace {
        let mut trace = Run::default().build();
        for (batch_size, outcome, peak_bytes) in trials {
            trace.batch_trials.push(BatchTrial {
                t_us: 0,
                batch_size: *batch_size,
                outcome: *outcome,
                peak_bytes: *peak_bytes,
            });
        }
        trace
    }

    #[test]
    fn batch_search_results() {
        let trace = with_trials(&[
            (32, TrialOutcome::Fit, Some(32 * GIB)),
            (64, TrialOutcome::Fit, Some(48 * GIB)),
            (96, TrialOutcome::Fit, Some(64 * GIB)),
            (128, TrialOutcome::Oom, None),
        ]);
        let f = find(&trace, FindingKind::BatchSize).unwrap();
        assert_eq!(f.severity, Severity::Info);
        assert_eq!(f.title, "Batch search: 96 is the largest batch that fit");
        assert_eq!(
            f.explanation,
            "the batch search ran 4 trials, batch 96 fit (peak 64.0 GiB), batch 128 ran out of \
             memory; the fitted cost is 512 MiB per sample on top of 16.0 GiB, so batch 112 fits \
             with a 10% margin of the 80.0 GiB device"
        );
        assert!(f.change.starts_with("use batch 112 (predicted; batch 96"));
        assert_eq!(evidence(&f, "smallest_oom_batch"), 128.0);
    }

    #[test]
    fn batch_search_where_nothing_fit() {
        let trace = with_trials(&[(8, TrialOutcome::Oom, None), (4, TrialOutcome::Oom, None)]);
        let f = find(&trace, FindingKind::BatchSize).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.explanation.contains("batch 4 ran out of memory"));
        assert!(f.change.starts_with("no batch size fit"));
        assert!(find(&Run::default().build(), FindingKind::BatchSize).is_none());
    }
}

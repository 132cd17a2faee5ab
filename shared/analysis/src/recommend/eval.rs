//! Rules about evaluation: memory an eval keeps after it (a staircase that ends in an OOM, never
//! a per-step leak) and an eval that needs more memory than training. Their advice follows the
//! evidence: "use torch.no_grad()" only when the hooks saw eval forwards run with autograd on,
//! "move it to the CPU" only for device memory, and outputs collected batch by batch named when
//! the eval grew inside itself.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::leaks::GrowthFit;
use crate::phases::{EvalTail, PhaseTransition};
use oomscope_format::units::{format_bytes, format_count};

/// Eval retention below this is noise (allocator rounding, lazily built eval buffers)...
pub const EVAL_RETAIN_MIN_BYTES: i64 = 256 << 20;

/// Training steps' growth after the evals (the heap's creep, see [`EvalRetention::creep`]) worth
/// stating: the leak rule's own floor.
pub const CREEP_MIN_BYTES: i64 = crate::leaks::MIN_GROWTH_BYTES as i64;

/// ...unless at least [`EVAL_RETAIN_REPEATS`] evals each keep this much: memory kept again and
/// again at every eval is a staircase that ends in an OOM, however small each stair.
pub const EVAL_RETAIN_REPEATED_MIN_BYTES: i64 = 64 << 20;

/// See [`EVAL_RETAIN_REPEATED_MIN_BYTES`].
pub const EVAL_RETAIN_REPEATS: usize = 2;

/// ...or at least [`EVAL_STAIRCASE_REPEATS`] evals each keep this much and together
/// [`EVAL_STAIRCASE_MIN_TOTAL_BYTES`]: a long staircase of small stairs (a list of validation
/// outputs never cleared, 30–50 MiB an epoch) is the same bug, caught later.
///
/// Set on Lightning's uncleared validation outputs recorded under load (frameworks.rs,
/// `v1_10_lightning_eval_creep.oomt`); checked on the zoo: `lightning_val_outputs.py` keeps 2.4–2.8
/// times it an eval, and the evals of six programs that keep nothing keep at most 0.64 times it
/// (`scripts/zoo_thresholds.py`).
pub const EVAL_STAIRCASE_MIN_BYTES: i64 = 16 << 20;

/// See [`EVAL_STAIRCASE_MIN_BYTES`].
pub const EVAL_STAIRCASE_REPEATS: usize = 4;

/// See [`EVAL_STAIRCASE_MIN_BYTES`].
pub const EVAL_STAIRCASE_MIN_TOTAL_BYTES: i64 = 128 << 20;

/// Retention must also be at least this share of the jump on entering eval, so that allocator
/// rounding on a huge eval jump is not reported. Kept low on purpose: eval that keeps 1.5 GiB of
/// a 12 GiB jump after every evaluation is exactly the bug to report (outputs or a graph held on
/// the device), even though most of the jump did come back.
pub const EVAL_RETAIN_MIN_FRACTION_OF_JUMP: f64 = 0.1;

/// An eval peak this far above the training peak is a finding of its own...
pub const EVAL_PEAK_MIN_BYTES: u64 = 256 << 20;

/// ...when it is also this share of the training peak above it (an eval that needs a quarter
/// more than training is what decides the batch sizes that fit).
pub const EVAL_PEAK_MIN_FRACTION: f64 = 0.25;

/// `eval-peak`: an eval needs more memory than training does.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvalPeak;

/// What [`EvalPeak`] detected.
#[derive(Debug, Clone, Copy)]
pub struct EvalAboveTraining<'a> {
    /// The eval with the highest peak (the earliest of equals).
    pub eval: &'a PhaseTransition,
    /// Its peak.
    pub eval_peak_bytes: u64,
    /// The highest value at any training mark outside the evals' tails.
    pub training_peak_bytes: u64,
    /// An eval's tail, left out of the training peak, that read above it.
    pub tail: Option<EvalTail>,
    /// See [`EvalRetention::autograd`].
    pub autograd: Option<bool>,
    /// An eval that grew inside itself by at least a third of its rise above the memory before
    /// it (the outputs collected batch by batch, then as much again for `torch.cat(all_logits)`):
    /// the peak's own, else the one that grew most (the same code runs at every eval, but one
    /// that grows into heap a previous eval left untrimmed shows less of its growth).
    pub grower: Option<&'a PhaseTransition>,
    /// Memory was also kept after evals (an `eval-retains-memory` finding says so).
    pub also_retains: bool,
}

impl Diagnose for EvalPeak {
    const KIND: FindingKind = FindingKind::EvalPeak;
    type Diagnosis<'a> = EvalAboveTraining<'a>;

    /// Detection: the highest eval peak is at least [`EVAL_PEAK_MIN_BYTES`] and
    /// [`EVAL_PEAK_MIN_FRACTION`] of the training peak above the training peak (both of the
    /// primary metric, at marks).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let primary = ctx.analysis.stage_table.primary_metric?;
        let training = ctx.analysis.training_peak.as_ref()?;
        let training_peak_bytes = training.bytes;
        let (eval, eval_peak_bytes) = ctx
            .analysis
            .phase_transitions
            .iter()
            .filter(|t| t.metric == primary)
            .filter_map(|t| t.eval_peak_bytes.map(|p| (t, p)))
            .reduce(|best, t| if t.1 > best.1 { t } else { best })?;
        let excess = eval_peak_bytes.checked_sub(training_peak_bytes)?;
        let floor =
            EVAL_PEAK_MIN_BYTES.max((EVAL_PEAK_MIN_FRACTION * training_peak_bytes as f64) as u64);
        if excess < floor {
            return None;
        }
        let accumulates = |t: &PhaseTransition| {
            let rise = match (t.before_bytes, t.eval_peak_bytes) {
                (Some(b), Some(p)) => p.saturating_sub(b),
                _ => 0,
            };
            t.within_growth_bytes
                .is_some_and(|g| g > 0 && g.unsigned_abs().saturating_mul(3) >= rise)
        };
        let grower = Some(eval).filter(|t| accumulates(t)).or_else(|| {
            ctx.analysis
                .phase_transitions
                .iter()
                .filter(|t| t.metric == eval.metric && accumulates(t))
                .max_by_key(|t| t.within_growth_bytes)
        });
        Some(EvalAboveTraining {
            eval,
            eval_peak_bytes,
            training_peak_bytes,
            tail: training.tail,
            autograd: eval_autograd(ctx.trace),
            grower,
            also_retains: EvalRetainsMemory.detect(ctx).is_some(),
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let excess = d.eval_peak_bytes - d.training_peak_bytes;
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
                " (the {} read in the {steps} right after the eval at step {} is that eval's \
                 memory, handed back late)",
                format_bytes(tail.bytes),
                format_count(tail.entry_step),
            ));
        }
        if let Some((g, growth)) = d.grower.and_then(|g| Some((g, g.within_growth_bytes?))) {
            let batches = g.eval_batches.saturating_sub(1).max(1) as u64;
            let inside = if std::ptr::eq(g, d.eval) {
                "inside it".to_owned()
            } else {
                format!("inside the eval at step {}", format_count(g.entry_step))
            };
            explanation.push_str(&format!(
                "; {inside} memory grew {} over {} batches ({}/batch): the eval collects its \
                 outputs batch by batch (the torch.cat(all_logits) pattern)",
                format_bytes(growth.unsigned_abs()),
                format_count(g.eval_batches as u64),
                format_bytes(growth.unsigned_abs() / batches),
            ));
        }
        match d.autograd {
            Some(true) => explanation.push_str("; its forwards ran with autograd on"),
            Some(false) => explanation
                .push_str("; its forwards ran without autograd (no_grad or inference_mode)"),
            None => {}
        }
        if d.also_retains {
            explanation.push_str("; evals also keep memory after they end (see below)");
        }
        explanation.push_str(
            ": the eval, not training, decides what fits, and it will fail first as data or \
             batch sizes grow",
        );
        let host = d.eval.metric.is_host();
        let change = if d.grower.is_some() {
            let off_device = if host {
                ""
            } else {
                ", or move each batch's outputs off the device as they come (.detach().cpu(); \
                 Hugging Face Trainer: eval_accumulation_steps)"
            };
            let no_grad = if d.autograd == Some(true) {
                "run eval under torch.no_grad() (its forwards keep autograd graphs); "
            } else {
                ""
            };
            format!(
                "{no_grad}compute the metric batch by batch (a running count of correct \
                 predictions, a running sum of the loss) instead of collecting every batch's \
                 outputs and concatenating them{off_device}"
            )
        } else if d.autograd == Some(true) {
            "run eval under torch.no_grad() (or torch.inference_mode()): its forwards run with \
             autograd on and keep their graphs"
                .to_owned()
        } else {
            "lower the eval batch size (Hugging Face Trainer: per_device_eval_batch_size; \
             Lightning: the val DataLoader's batch_size), or cap the eval's sequence length"
                .to_owned()
        };
        let mut evidence = vec![
            Evidence::bytes("eval_peak_bytes", d.eval_peak_bytes as f64),
            Evidence::bytes("training_peak_bytes", d.training_peak_bytes as f64),
            Evidence::bytes("excess_bytes", excess as f64),
            Evidence::count("entry_step", d.eval.entry_step as f64),
        ];
        if let Some(g) = d.eval.within_growth_bytes {
            evidence.push(Evidence::bytes("within_eval_growth_bytes", g as f64));
        }
        finding(
            self,
            Severity::Warning,
            format!(
                "Eval needs {} more than training (peak {})",
                format_bytes(excess),
                format_bytes(d.eval_peak_bytes)
            ),
            explanation,
            change,
            evidence,
        )
    }
}

/// How many more evals like the retaining ones fit under the primary metric's limit.
fn eval_projection(
    ctx: &RuleContext<'_>,
    transitions: &[PhaseTransition],
    retaining: &[&PhaseTransition],
    total_retained_bytes: i64,
) -> Option<EvalProjection> {
    let metric = crate::metrics::primary_metric(ctx.trace)?;
    let (limit_bytes, _) = crate::leaks::limit_of(ctx.trace, metric)?;
    let per_eval_bytes = u64::try_from(total_retained_bytes / retaining.len() as i64).ok()?;
    if per_eval_bytes == 0 {
        return None;
    }
    // The run's high point so far (the memory peak, or the last eval's if higher): the next
    // eval adds to everything after it.
    let last = transitions.last()?;
    let current_bytes = crate::peaks::memory_peak(&ctx.analysis.peaks)
        .map(|p| p.bytes)
        .into_iter()
        .chain(last.eval_peak_bytes)
        .max()?;
    let evals_remaining = limit_bytes.saturating_sub(current_bytes) / per_eval_bytes;
    let mut gaps: Vec<u64> = transitions
        .windows(2)
        .map(|w| w[1].entry_step.saturating_sub(w[0].entry_step))
        .collect();
    gaps.sort_unstable();
    Some(EvalProjection {
        limit_bytes,
        current_bytes,
        per_eval_bytes,
        evals_remaining,
        steps_between_evals: gaps.get(gaps.len() / 2).copied(),
    })
}

/// `eval-retains-memory`: memory rises on entering eval and does not come back.
#[derive(Debug, Clone, Copy, Default)]
pub struct EvalRetainsMemory;

/// True when a transition kept memory: retention of at least max(`floor`,
/// [`EVAL_RETAIN_MIN_FRACTION_OF_JUMP`] × the jump on entering eval). The jump may be nothing:
/// what an eval keeps is often made after its last forward (Trainer's `compute_metrics`,
/// Lightning's `on_validation_epoch_end`).
/// Whether the C allocator kept what this eval freed and the next eval took it again: the next
/// eval's jump is smaller by at least half of what this one kept. Memory the program keeps makes
/// the next eval jump as high again (its outputs are new memory); memory the allocator kept
/// (glibc's heap, not trimmed) is what the next eval grows into.
fn reused_by_next(t: &PhaseTransition, all: &[PhaseTransition]) -> bool {
    let (Some(kept), Some(jump)) = (t.retained_bytes, t.jump_bytes) else {
        return false;
    };
    all.iter()
        .filter(|n| n.metric == t.metric && n.entry_t_us > t.entry_t_us)
        .min_by_key(|n| n.entry_t_us)
        .and_then(|n| n.jump_bytes)
        .is_some_and(|next_jump| kept > 0 && jump - next_jump >= kept / 2)
}

fn retains(t: &PhaseTransition, floor: i64) -> bool {
    t.retained_bytes.is_some_and(|retained| {
        let jump = t.jump_bytes.unwrap_or(0).max(0);
        retained >= floor.max((EVAL_RETAIN_MIN_FRACTION_OF_JUMP * jump as f64) as i64)
    })
}

/// What [`EvalRetainsMemory`] detected.
#[derive(Debug, Clone, Copy)]
pub struct EvalRetention<'a> {
    /// The eval that kept the most (the earliest of equals).
    pub worst: &'a PhaseTransition,
    /// Evals that kept memory.
    pub retaining_evals: usize,
    /// Evals recorded.
    pub evals: usize,
    /// Memory kept by all of them.
    pub total_retained_bytes: i64,
    /// When the evals fill memory at this rate, if the limit is known.
    pub projection: Option<EvalProjection>,
    /// Memory also leaks within training steps (a `leak` finding explains that part).
    pub also_leaks: bool,
    /// Host memory that grew inside the training steps after the evals, less than the evals
    /// kept and with no tensors counted growing: the heap's creep (see
    /// [`crate::leaks::GrowthFit::staircase_creep`]), stated here since it is no leak finding.
    pub creep: Option<&'a GrowthFit>,
    /// Whether eval forwards ran with autograd on (the zero-code hooks' note); `None` when the
    /// trace does not say (marks by hand, or no hooks).
    pub autograd: Option<bool>,
    /// The retaining evals grew inside themselves, batch by batch, by at least a third of what
    /// they kept (summed: the C allocator's reuse of freed memory moves single evals, and the
    /// RSS takes in part of what an eval kept only over the steps after it): their outputs are
    /// collected and kept.
    pub accumulates: bool,
    /// Growth inside the retaining evals, summed, and the batches it came over.
    pub within_growth_bytes: i64,
    /// See `within_growth_bytes`.
    pub within_batches: usize,
    /// What the hooks counted growing over an eval's batches, the largest a program names.
    pub holder: Option<&'a oomscope_format::HeldTensors>,
}

/// Whether the trace's eval forwards ran with autograd on: `Some(true)` when any did (the
/// zero-code hooks say so once), `Some(false)` when they all ran without, `None` unknown.
pub fn eval_autograd(trace: &oomscope_format::Trace) -> Option<bool> {
    let said = &trace.eval_autograd;
    if said.iter().any(|e| e.enabled) {
        Some(true)
    } else if said.is_empty() {
        None
    } else {
        Some(false)
    }
}

/// What an eval's memory is, in the words of its advice: autograd graphs when its forwards ran
/// with autograd on, else what it collects; the device's memory can be moved to the CPU, the
/// host's only dropped or reduced.
fn eval_change(autograd: Option<bool>, host: bool) -> String {
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
        Some(true) => format!(
            "run eval under torch.no_grad() (or torch.inference_mode()): its forwards run with \
             autograd on and keep their graphs; {clear}, and {keep}"
        ),
        Some(false) => format!("{clear}, and {keep}"),
        None => format!(
            "{clear}, and {keep}; if eval runs with autograd on, run it under torch.no_grad()"
        ),
    }
}

/// Where repeated eval retention leads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalProjection {
    /// The memory limit (device total, or host memory).
    pub limit_bytes: u64,
    /// The run's high point so far: the memory peak, or the last eval's peak when higher (each
    /// eval lifts everything after it).
    pub current_bytes: u64,
    /// Mean memory kept per retaining eval.
    pub per_eval_bytes: u64,
    /// More evals like these until an eval no longer fits (0: the next one does not).
    pub evals_remaining: u64,
    /// Training steps between evals (the median), when more than one eval ran.
    pub steps_between_evals: Option<u64>,
}

impl Diagnose for EvalRetainsMemory {
    const KIND: FindingKind = FindingKind::EvalRetainsMemory;
    type Diagnosis<'a> = EvalRetention<'a>;

    /// Detection: an eval whose memory did not come back (see `retains`: at least
    /// [`EVAL_RETAIN_MIN_BYTES`] once, or [`EVAL_RETAIN_REPEATED_MIN_BYTES`] at
    /// [`EVAL_RETAIN_REPEATS`] evals or more, or a staircase of [`EVAL_STAIRCASE_REPEATS`] evals
    /// keeping [`EVAL_STAIRCASE_MIN_BYTES`] each); `None` without one. With the limit known, how many
    /// more such evals fit.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let transitions = &ctx.analysis.phase_transitions;
        let kept =
            |t: &&PhaseTransition, floor| retains(t, floor) && !reused_by_next(t, transitions);
        let mut retaining: Vec<&PhaseTransition> = transitions
            .iter()
            .filter(|t| kept(t, EVAL_RETAIN_MIN_BYTES))
            .collect();
        if retaining.is_empty() {
            retaining = transitions
                .iter()
                .filter(|t| kept(t, EVAL_RETAIN_REPEATED_MIN_BYTES))
                .collect();
            if retaining.len() < EVAL_RETAIN_REPEATS {
                retaining = transitions
                    .iter()
                    .filter(|t| kept(t, EVAL_STAIRCASE_MIN_BYTES))
                    .collect();
                let total: i64 = retaining.iter().filter_map(|t| t.retained_bytes).sum();
                if retaining.len() < EVAL_STAIRCASE_REPEATS
                    || total < EVAL_STAIRCASE_MIN_TOTAL_BYTES
                {
                    return None;
                }
            }
        }
        let worst = *retaining.iter().max_by(|a, b| {
            a.retained_bytes
                .cmp(&b.retained_bytes)
                .then(b.entry_t_us.cmp(&a.entry_t_us))
        })?;
        let total_retained_bytes: i64 = retaining.iter().filter_map(|t| t.retained_bytes).sum();
        let projection = eval_projection(ctx, transitions, &retaining, total_retained_bytes);
        let within_growth_bytes: i64 = retaining
            .iter()
            .filter_map(|t| t.within_growth_bytes)
            .filter(|g| *g > 0)
            .sum();
        let within_batches: usize = retaining
            .iter()
            .filter(|t| t.within_growth_bytes.is_some())
            .map(|t| t.eval_batches.saturating_sub(1))
            .sum();
        let accumulates = within_growth_bytes > 0
            && within_growth_bytes.saturating_mul(3) >= total_retained_bytes;
        Some(EvalRetention {
            worst,
            retaining_evals: retaining.len(),
            evals: transitions.len(),
            total_retained_bytes,
            projection,
            also_leaks: ctx.analysis.leaks().next().is_some(),
            creep: ctx
                .analysis
                .leak_fits
                .iter()
                .filter(|f| f.staircase_creep && f.train_growth_bytes >= CREEP_MIN_BYTES)
                .max_by_key(|f| f.train_growth_bytes),
            autograd: eval_autograd(ctx.trace),
            holder: super::run_up::eval_holder(&ctx.analysis.held),
            accumulates,
            within_growth_bytes,
            within_batches,
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let worst = d.worst;
        let jump = worst.jump_bytes.unwrap_or(0).unsigned_abs();
        let retained = worst.retained_bytes.unwrap_or(0).unsigned_abs();
        let total = d.total_retained_bytes;
        // A retaining eval always has training marks on both sides (see `retains`).
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
            "{} is {} higher after the eval at step {} than before it ({compared}); during the \
             eval it rose {}",
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
                "; inside {them} it grew {} batch by batch ({}/batch): what the eval collects \
                 batch by batch is what stays",
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
        if let Some(c) = d.creep {
            let counted = if d.autograd.is_some() {
                "; the hooks counted no tensors growing"
            } else {
                ""
            };
            explanation.push_str(&format!(
                "; the training steps between the evals added {} more ({}/step of {} at {}), \
                 less than the evals kept: on host memory what the evals keep fragments the C \
                 allocator's heap, and the RSS can creep up after each eval without the program \
                 keeping anything more{counted}, so this is not called a leak; once the eval \
                 keeps nothing, growth left in the training steps is one",
                format_bytes(c.train_growth_bytes.unsigned_abs()),
                format_bytes(c.train_slope_bytes_per_step.max(0.0) as u64),
                c.metric.label(),
                c.stage,
            ));
        }
        let mut evidence = vec![
            Evidence::bytes("jump_bytes", jump as f64),
            Evidence::bytes("retained_bytes", retained as f64),
            Evidence::count("entry_step", worst.entry_step as f64),
            Evidence::count("retaining_evals", d.retaining_evals as f64),
            Evidence::count("evals", d.evals as f64),
            Evidence::bytes("total_retained_bytes", total as f64),
        ];
        if let Some(g) = worst.within_growth_bytes {
            evidence.push(Evidence::bytes("within_eval_growth_bytes", g as f64));
        }
        if let Some(c) = d.creep {
            evidence.push(Evidence::bytes(
                "training_steps_growth_bytes",
                c.train_growth_bytes as f64,
            ));
        }
        if let Some(p) = &d.projection {
            evidence.push(Evidence::bytes("per_eval_bytes", p.per_eval_bytes as f64));
            evidence.push(Evidence::bytes("limit_bytes", p.limit_bytes as f64));
            evidence.push(Evidence::count("evals_remaining", p.evals_remaining as f64));
        }
        finding(
            self,
            Severity::Warning,
            format!(
                "Eval keeps {} after returning to training",
                format_bytes(retained)
            ),
            explanation,
            match d.holder {
                Some(h) => format!(
                    "{}; first the one counted: {}",
                    eval_change(d.autograd, worst.metric.is_host()),
                    super::run_up::kept_in(h)
                ),
                None => eval_change(d.autograd, worst.metric.is_host()),
            },
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{evidence, find};
    use super::*;
    use crate::metrics::MetricKey;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn what_the_next_eval_grows_into_was_the_allocator_s_not_the_program_s() {
        let eval = |t_us: u64, jump: i64, kept: i64| PhaseTransition {
            metric: MetricKey::ALLOCATED,
            before_stage: None,
            before_step: None,
            before_bytes: None,
            floor_before_bytes: None,
            floor_before_step: None,
            training_slope_bytes: None,
            entry_step: 0,
            entry_t_us: t_us,
            eval_marks: 60,
            eval_peak_bytes: None,
            within_stage: None,
            eval_batches: 30,
            within_growth_bytes: None,
            after_stage: None,
            after_step: None,
            exit_t_us: None,
            after_bytes: None,
            jump_bytes: Some(jump),
            retained_bytes: Some(kept),
        };
        let mib = MIB as i64;
        // A heap glibc did not trim: 464 MiB stay after the second eval, the third jumps only
        // 496 MiB where the others jumped ~950.
        let heap = [
            eval(1, 961 * mib, 0),
            eval(2, 944 * mib, 464 * mib),
            eval(3, 496 * mib, 0),
        ];
        assert!(reused_by_next(&heap[1], &heap));
        // Outputs kept at each eval: every eval jumps as high.
        let kept = [eval(1, 900 * mib, 300 * mib), eval(2, 900 * mib, 300 * mib)];
        assert!(!reused_by_next(&kept[0], &kept));
        // The last eval has no next one to tell.
        assert!(!reused_by_next(&kept[1], &kept));
    }

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

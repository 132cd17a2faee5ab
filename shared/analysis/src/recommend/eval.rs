//! Rules about evaluation: memory an eval keeps after it (a staircase that ends in an OOM, never
//! a per-step leak) and an eval that needs more memory than training. Their advice follows the
//! evidence: "use torch.no_grad()" only when the hooks saw eval forwards run with autograd on,
//! "move it to the CPU" only for device memory, and outputs collected batch by batch named when
//! the eval grew inside itself.

use super::explained::model_state_explains;
use super::rule::{Diagnose, RuleContext};
use crate::finding::{
    Detail, EvalAboveTraining, EvalProjection, EvalRetention, Evidence, EvidenceKey as K,
    FindingKind, Severity,
};
use crate::phases::PhaseTransition;

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

impl Diagnose for EvalPeak {
    const KIND: FindingKind = FindingKind::EvalPeak;
    type Diagnosis = EvalAboveTraining;

    /// Detection: the highest eval peak is at least [`EVAL_PEAK_MIN_BYTES`] and
    /// [`EVAL_PEAK_MIN_FRACTION`] of the training peak above the training peak (both of the
    /// primary metric, at marks).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<EvalAboveTraining> {
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
        // An eval that grew inside itself by at least a third of its rise above the memory
        // before it (the outputs collected batch by batch, then as much again for
        // `torch.cat(all_logits)`): the peak's own, else the one that grew most (the same code
        // runs at every eval, but one that grows into heap a previous eval left untrimmed shows
        // less of its growth).
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
            eval: eval.clone(),
            eval_peak_bytes,
            training_peak_bytes,
            tail: training.tail,
            autograd: eval_autograd(ctx.trace),
            grower: grower.cloned(),
            also_retains: EvalRetainsMemory.detect(ctx).is_some(),
        })
    }

    fn severity(&self, _: &EvalAboveTraining) -> Severity {
        Severity::Warning
    }

    fn evidence(&self, d: &EvalAboveTraining) -> Vec<Evidence> {
        let mut evidence = vec![
            Evidence::bytes(K::EvalPeakBytes, d.eval_peak_bytes as f64),
            Evidence::bytes(K::TrainingPeakBytes, d.training_peak_bytes as f64),
            Evidence::bytes(K::ExcessBytes, d.excess_bytes() as f64),
            Evidence::count(K::EntryStep, d.eval.entry_step as f64),
        ];
        if let Some(g) = d.eval.within_growth_bytes {
            evidence.push(Evidence::bytes(K::WithinEvalGrowthBytes, g as f64));
        }
        evidence
    }

    fn detail(d: EvalAboveTraining) -> Detail {
        Detail::EvalPeak(d)
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

impl Diagnose for EvalRetainsMemory {
    const KIND: FindingKind = FindingKind::EvalRetainsMemory;
    type Diagnosis = EvalRetention;

    /// Detection: an eval whose memory did not come back (see `retains`: at least
    /// [`EVAL_RETAIN_MIN_BYTES`] once, or [`EVAL_RETAIN_REPEATED_MIN_BYTES`] at
    /// [`EVAL_RETAIN_REPEATS`] evals or more, or a staircase of [`EVAL_STAIRCASE_REPEATS`] evals
    /// keeping [`EVAL_STAIRCASE_MIN_BYTES`] each); `None` without one. With the limit known, how many
    /// more such evals fit.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<EvalRetention> {
        let transitions = &ctx.analysis.phase_transitions;
        let kept = |t: &&PhaseTransition, floor| {
            retains(t, floor)
                && !reused_by_next(t, transitions)
                && !model_state_explains(ctx.trace, t)
        };
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
        let worst = (*retaining.iter().max_by(|a, b| {
            a.retained_bytes
                .cmp(&b.retained_bytes)
                .then(b.entry_t_us.cmp(&a.entry_t_us))
        })?)
        .clone();
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
                .max_by_key(|f| f.train_growth_bytes)
                .cloned(),
            autograd: eval_autograd(ctx.trace),
            holder: crate::run_up::eval_holder(&ctx.analysis.held).cloned(),
            accumulates,
            within_growth_bytes,
            within_batches,
        })
    }

    fn severity(&self, _: &EvalRetention) -> Severity {
        Severity::Warning
    }

    fn evidence(&self, d: &EvalRetention) -> Vec<Evidence> {
        let worst = &d.worst;
        let mut evidence = vec![
            Evidence::bytes(
                K::JumpBytes,
                worst.jump_bytes.unwrap_or(0).unsigned_abs() as f64,
            ),
            Evidence::bytes(
                K::RetainedBytes,
                worst.retained_bytes.unwrap_or(0).unsigned_abs() as f64,
            ),
            Evidence::count(K::EntryStep, worst.entry_step as f64),
            Evidence::count(K::RetainingEvals, d.retaining_evals as f64),
            Evidence::count(K::Evals, d.evals as f64),
            Evidence::bytes(K::TotalRetainedBytes, d.total_retained_bytes as f64),
        ];
        if let Some(g) = worst.within_growth_bytes {
            evidence.push(Evidence::bytes(K::WithinEvalGrowthBytes, g as f64));
        }
        if let Some(c) = &d.creep {
            evidence.push(Evidence::bytes(
                K::TrainingStepsGrowthBytes,
                c.train_growth_bytes as f64,
            ));
        }
        if let Some(p) = &d.projection {
            evidence.push(Evidence::bytes(K::PerEvalBytes, p.per_eval_bytes as f64));
            evidence.push(Evidence::bytes(K::LimitBytes, p.limit_bytes as f64));
            evidence.push(Evidence::count(K::EvalsRemaining, p.evals_remaining as f64));
        }
        evidence
    }

    fn detail(d: EvalRetention) -> Detail {
        Detail::EvalRetainsMemory(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::MetricKey;
    use oomscope_format::units::MIB;

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
}

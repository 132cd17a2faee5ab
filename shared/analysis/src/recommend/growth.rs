//! Rules about memory that does not come back: per-step leaks and eval retention.

use super::{Diagnose, Evidence, Finding, FindingKind, RuleContext, Severity, finding};
use crate::leaks::{GrowthFit, LeakEvidence};
use crate::metrics::MetricKey;
use crate::phases::PhaseTransition;
use crate::trend::TimeTrend;
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_duration_us};

/// A leak that fills memory within this many times the steps already observed is critical: the
/// run will not finish (or barely will) at the current rate.
pub const CRITICAL_RUNWAY_FACTOR: f64 = 2.0;

/// Eval retention below this is noise (allocator rounding, lazily built eval buffers)...
pub const EVAL_RETAIN_MIN_BYTES: i64 = 256 << 20;

/// ...unless at least [`EVAL_RETAIN_REPEATS`] evals each keep this much: memory kept again and
/// again at every eval is a staircase that ends in an OOM, however small each stair.
pub const EVAL_RETAIN_REPEATED_MIN_BYTES: i64 = 64 << 20;

/// See [`EVAL_RETAIN_REPEATED_MIN_BYTES`].
pub const EVAL_RETAIN_REPEATS: usize = 2;

/// Retention must also be at least this share of the jump on entering eval, so that allocator
/// rounding on a huge eval jump is not reported. Kept low on purpose: eval that keeps 1.5 GiB of
/// a 12 GiB jump after every evaluation is exactly the bug to report (outputs or a graph held on
/// the device), even though most of the jump did come back.
pub const EVAL_RETAIN_MIN_FRACTION_OF_JUMP: f64 = 0.1;

/// `leak`: memory at a stage grows steadily with the step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Leak;

/// The leak to headline: the primary metric before the others (it is the number the rest of the
/// report uses), then the one that fills memory first, then the steepest, then the straightest,
/// then the later stage in the step (end-of-step memory is where nothing of the step should
/// remain). `fits` are in stage order, metrics in priority order within a stage.
fn headline_leak(fits: &[GrowthFit], primary: Option<MetricKey>) -> Option<&GrowthFit> {
    let rank = |f: &GrowthFit| {
        let remaining = f
            .projection
            .as_ref()
            .map_or(u64::MAX, |p| p.steps_remaining);
        (primary != Some(f.metric), remaining)
    };
    fits.iter().filter(|f| f.is_leak).reduce(|best, f| {
        let better = rank(f).cmp(&rank(best)).then_with(|| {
            best.slope_bytes_per_step
                .total_cmp(&f.slope_bytes_per_step)
                .then(best.r_squared.total_cmp(&f.r_squared))
        });
        // Ties go to the later fit, i.e. the later stage.
        if better.is_le() { f } else { best }
    })
}

/// What [`Leak`] detected: a per-stage leak, or, in a run without step marks, growth over time.
#[derive(Debug, Clone, Copy)]
pub enum LeakDiagnosis<'a> {
    /// Memory at a stage grows step after step.
    PerStep(GrowingMemory<'a>),
    /// A counter grows for the whole of a run that has no step marks.
    OverTime(&'a TimeTrend),
}

/// A per-step leak.
#[derive(Debug, Clone, Copy)]
pub struct GrowingMemory<'a> {
    /// The leak to headline (see `headline_leak`).
    pub headline: &'a GrowthFit,
    /// Stage/metric fits that grow.
    pub leaking_fits: usize,
    /// At this rate memory fills within [`CRITICAL_RUNWAY_FACTOR`] × the steps observed.
    pub critical: bool,
}

impl Diagnose for Leak {
    const KIND: FindingKind = FindingKind::Leak;
    type Diagnosis<'a> = LeakDiagnosis<'a>;

    /// Detection: a stage whose memory grows steadily with the step; without step marks, a
    /// counter that grows for the whole run (the one that fills first); `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let primary = ctx.analysis.stage_table.primary_metric;
        let Some(headline) = headline_leak(&ctx.analysis.leak_fits, primary) else {
            return ctx
                .analysis
                .time_trends
                .iter()
                .filter(|t| t.is_leak)
                .min_by_key(|t| t.time_to_full_us.unwrap_or(u64::MAX))
                .map(LeakDiagnosis::OverTime);
        };
        let steps_run = (headline.last_step - headline.first_step) as f64;
        let critical = headline
            .projection
            .as_ref()
            .is_some_and(|p| p.steps_remaining as f64 <= CRITICAL_RUNWAY_FACTOR * steps_run);
        Some(LeakDiagnosis::PerStep(GrowingMemory {
            headline,
            leaking_fits: ctx.analysis.leaks().count(),
            critical,
        }))
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        match d {
            LeakDiagnosis::PerStep(d) => self.explain_per_step(d),
            LeakDiagnosis::OverTime(t) => self.explain_over_time(t),
        }
    }
}

/// What to look for, by memory.
fn leak_change(host: bool) -> &'static str {
    if host {
        "look for host objects kept across steps: growing lists or dicts of metrics, caches \
         keyed by sample, tensors moved to the CPU and kept; DataLoader workers that touch \
         Python objects copy them (copy-on-write), so keep datasets in numpy arrays or \
         memory-mapped files"
    } else {
        "look for tensors kept across steps: a loss or metric accumulated without .item() or \
         .detach(), lists of outputs, caches keyed by step, hooks that store activations; \
         compare torch.cuda.memory_snapshot() at the same stage of two steps to find them"
    }
}

impl Leak {
    /// Wording of a growth over time in a run without step marks.
    fn explain_over_time(&self, t: &TimeTrend) -> Finding {
        let per_minute = t.slope_bytes_per_s * 60.0;
        let mut explanation = format!(
            "{} grows {}/min (R² {:.2}) from {} to {} of the run (+{}), measured on the lowest \
             reading of each moment so the steps' own rise and fall does not count",
            t.metric,
            format_bytes_f64(per_minute),
            t.r_squared,
            format_duration_us(t.from_us),
            format_duration_us(t.to_us),
            format_bytes(t.growth_bytes.max(0).unsigned_abs()),
        );
        if let (Some(us), Some(limit)) = (t.time_to_full_us, t.limit_bytes) {
            explanation.push_str(&format!(
                ": at this rate {} is full ({}) in about {}",
                if t.host_memory {
                    "host memory"
                } else {
                    "the device"
                },
                format_bytes(limit),
                format_duration_us(us)
            ));
        }
        explanation.push_str(
            "; the run has no step marks, so the stage that keeps it is unknown (run Python \
             programs with the zero-code hooks, or mark stages with oomscope_probe)",
        );
        let mut evidence = vec![
            Evidence::bytes("slope_bytes_per_s", t.slope_bytes_per_s),
            Evidence::number("r_squared", t.r_squared),
            Evidence::bytes("growth_bytes", t.growth_bytes as f64),
            Evidence::micros("from_us", t.from_us as f64),
            Evidence::micros("to_us", t.to_us as f64),
        ];
        evidence.extend(
            t.limit_bytes
                .map(|l| Evidence::bytes("limit_bytes", l as f64)),
        );
        evidence.extend(
            t.time_to_full_us
                .map(|us| Evidence::micros("time_to_full_us", us as f64)),
        );
        let elapsed = t.to_us.saturating_sub(t.from_us) as f64;
        let critical = t
            .time_to_full_us
            .is_some_and(|us| us as f64 <= CRITICAL_RUNWAY_FACTOR * elapsed);
        finding(
            self,
            if critical {
                Severity::Critical
            } else {
                Severity::Warning
            },
            format!(
                "Memory grows +{}/min for the whole run ({})",
                format_bytes_f64(per_minute),
                t.metric
            ),
            explanation,
            leak_change(t.host_memory).to_owned(),
            evidence,
        )
    }

    /// Wording of a per-step leak.
    fn explain_per_step(&self, d: &GrowingMemory<'_>) -> Finding {
        let leak = d.headline;
        let host = leak.host_memory;
        let what = if host { "host memory" } else { "the device" };
        let mut explanation = format!(
            "memory at {} ({}) grows {}/step (R² {:.2}) from step {} to {} (+{})",
            leak.stage,
            leak.metric,
            format_bytes_f64(leak.slope_bytes_per_step),
            leak.r_squared,
            format_count(leak.first_step),
            format_count(leak.last_step),
            format_bytes(leak.growth_bytes.max(0).unsigned_abs()),
        );
        match leak.evidence {
            Some(LeakEvidence::Short) => explanation.push_str(&format!(
                " (a short run, {} steps, but the growth is straight and does not level off)",
                leak.steps
            )),
            Some(LeakEvidence::BeforeOom) => explanation.push_str(&format!(
                " (only {} steps, but the growth did not level off and the run then ran out of \
                 memory)",
                leak.steps
            )),
            _ => {}
        }
        if let Some(p) = &leak.projection {
            if p.steps_remaining == 0 {
                explanation.push_str(&format!(": {what} is already full"));
            } else {
                let when = p.time_to_full_us.map_or_else(String::new, |us| {
                    format!(", in about {}", format_duration_us(us))
                });
                explanation.push_str(&format!(
                    ": at this rate {what} is full at step {}{when}",
                    format_count(p.full_at_step)
                ));
            }
        }
        if leak.transitions > 0 && leak.transition_growth_bytes > 0 {
            explanation.push_str(&format!(
                "; within training steps it grows {}/step, and {} more came at {} eval or pause \
                 transition(s)",
                format_bytes_f64(leak.train_slope_bytes_per_step),
                format_bytes(leak.transition_growth_bytes.unsigned_abs()),
                leak.transitions
            ));
        }
        let leaking = d.leaking_fits;
        if leaking > 1 {
            explanation.push_str(&format!(" ({leaking} stage/metric fits grow)"));
        }
        let change = leak_change(host);
        let mut evidence = vec![
            Evidence::bytes("slope_bytes_per_step", leak.slope_bytes_per_step),
            Evidence::number("r_squared", leak.r_squared),
            Evidence::count("first_step", leak.first_step as f64),
            Evidence::count("last_step", leak.last_step as f64),
            Evidence::bytes("growth_bytes", leak.growth_bytes as f64),
            Evidence::count("leaking_fits", leaking as f64),
        ];
        if let Some(p) = &leak.projection {
            evidence.push(Evidence::bytes("limit_bytes", p.limit_bytes as f64));
            evidence.push(Evidence::bytes("current_bytes", p.current_bytes as f64));
            evidence.push(Evidence::count("full_at_step", p.full_at_step as f64));
            if let Some(us) = p.time_to_full_us {
                evidence.push(Evidence::micros("time_to_full_us", us as f64));
            }
        }
        let severity = if d.critical {
            Severity::Critical
        } else {
            Severity::Warning
        };
        finding(
            self,
            severity,
            format!(
                "Memory leak: +{}/step at {}",
                format_bytes_f64(leak.slope_bytes_per_step),
                leak.stage
            ),
            explanation,
            change.to_owned(),
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

/// True when a transition kept memory: a positive jump, and retention of at least
/// max(`floor`, [`EVAL_RETAIN_MIN_FRACTION_OF_JUMP`] × jump).
fn retains(t: &PhaseTransition, floor: i64) -> bool {
    match (t.jump_bytes, t.retained_bytes) {
        (Some(jump), Some(retained)) if jump > 0 => {
            let min = floor.max((EVAL_RETAIN_MIN_FRACTION_OF_JUMP * jump as f64) as i64);
            retained >= min
        }
        _ => false,
    }
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
    /// [`EVAL_RETAIN_REPEATS`] evals or more); `None` without one. With the limit known, how many
    /// more such evals fit.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let transitions = &ctx.analysis.phase_transitions;
        let mut retaining: Vec<&PhaseTransition> = transitions
            .iter()
            .filter(|t| retains(t, EVAL_RETAIN_MIN_BYTES))
            .collect();
        if retaining.is_empty() {
            retaining = transitions
                .iter()
                .filter(|t| retains(t, EVAL_RETAIN_REPEATED_MIN_BYTES))
                .collect();
            if retaining.len() < EVAL_RETAIN_REPEATS {
                return None;
            }
        }
        let worst = *retaining.iter().max_by(|a, b| {
            a.retained_bytes
                .cmp(&b.retained_bytes)
                .then(b.entry_t_us.cmp(&a.entry_t_us))
        })?;
        let total_retained_bytes: i64 = retaining.iter().filter_map(|t| t.retained_bytes).sum();
        let projection = eval_projection(ctx, transitions, &retaining, total_retained_bytes);
        Some(EvalRetention {
            worst,
            retaining_evals: retaining.len(),
            evals: transitions.len(),
            total_retained_bytes,
            projection,
            also_leaks: ctx.analysis.leaks().next().is_some(),
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let worst = d.worst;
        let jump = worst.jump_bytes.unwrap_or(0).unsigned_abs();
        let retained = worst.retained_bytes.unwrap_or(0).unsigned_abs();
        let total = d.total_retained_bytes;
        let after = match (&worst.after_stage, worst.after_step) {
            (Some(stage), Some(step)) => format!(" at {stage} of step {}", format_count(step)),
            _ => String::new(),
        };
        let mut explanation = format!(
            "{} rises {} on entering eval at step {} and does not come back: {} of it is still \
             held{after}, compared with {} of step {}",
            worst.metric,
            format_bytes(jump),
            format_count(worst.entry_step),
            format_bytes(retained),
            worst.before_stage,
            format_count(worst.before_step),
        );
        if d.retaining_evals > 1 {
            explanation.push_str(&format!(
                " ({} of {} evals kept memory, {} in all)",
                d.retaining_evals,
                d.evals,
                format_bytes(total.max(0).unsigned_abs())
            ));
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
        let mut evidence = vec![
            Evidence::bytes("jump_bytes", jump as f64),
            Evidence::bytes("retained_bytes", retained as f64),
            Evidence::count("entry_step", worst.entry_step as f64),
            Evidence::count("retaining_evals", d.retaining_evals as f64),
            Evidence::count("evals", d.evals as f64),
            Evidence::bytes("total_retained_bytes", total as f64),
        ];
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
            "run eval under torch.no_grad() (or torch.inference_mode()) after model.eval(); move \
             collected predictions to the CPU (.cpu()) or reduce them to numbers (.item()), and \
             drop references to eval batches and outputs before training resumes"
                .to_owned(),
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{evidence, find, with_context};
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn leak_that_fills_the_device_soon_is_critical() {
        let run = Run {
            steps: 1_000,
            leak_bytes_per_step: 40 * MIB,
            ..Run::default()
        };
        let trace = run.build();
        let (slope, full_at, critical) = with_context(&trace, |ctx| {
            let Some(LeakDiagnosis::PerStep(d)) = Leak.detect(ctx) else {
                panic!("no per-step leak");
            };
            let full_at = d.headline.projection.as_ref().map(|p| p.full_at_step);
            (d.headline.slope_bytes_per_step, full_at, d.critical)
        });
        assert!((slope - (40 * MIB) as f64).abs() < 1.0, "{slope}");
        assert_eq!((full_at, critical), (Some(1_332), true));
        let f = find(&trace, FindingKind::Leak).unwrap();
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(
            f.title,
            "Memory leak: +40.0 MiB/step at post_optimizer_step"
        );
        // The highest stage at step 999 is post_forward: 28 GiB + 999 × 40 MiB = 67.0 GiB, so
        // 12.98 GiB are left: 333 more steps of 250 ms.
        assert!(
            f.explanation.starts_with(
                "memory at post_optimizer_step (allocated) grows 40.0 MiB/step (R² 1.00) from \
                 step 0 to 999 (+39.0 GiB): at this rate the device is full at step 1 332, in \
                 about 1 min 23 s"
            ),
            "{}",
            f.explanation
        );
        assert_eq!(evidence(&f, "full_at_step"), 1_332.0);
        assert!(f.change.contains(".item()"));
    }

    #[test]
    fn slow_leak_is_a_warning() {
        let run = Run {
            steps: 100,
            leak_bytes_per_step: 12 * MIB,
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::Leak).unwrap();
        assert_eq!(f.severity, Severity::Warning);
        // (80 GiB − 28 GiB − 99 × 12 MiB) / 12 MiB = 4 338.3 → 4 339 steps after step 99.
        assert!(
            f.explanation
                .contains("full at step 4 438, in about 18 min 05 s"),
            "{}",
            f.explanation
        );
    }

    #[test]
    fn host_leak_talks_about_host_memory() {
        let run = Run {
            steps: 50,
            host_rss_growth_per_step: 200 * MIB,
            ..Run::default()
        };
        let f = find(&run.build(), FindingKind::Leak).unwrap();
        assert!(
            f.explanation
                .starts_with("memory at post_optimizer_step (host.rss) grows 200 MiB/step"),
            "{}",
            f.explanation
        );
        assert!(f.explanation.contains("host memory is full"));
        assert!(f.change.contains("copy-on-write"));
    }

    #[test]
    fn no_leak_no_finding() {
        assert!(find(&Run::default().build(), FindingKind::Leak).is_none());
        // Near miss: 50 MiB over 100 steps is under 1% of the device.
        let small = Run {
            steps: 100,
            leak_bytes_per_step: MIB / 2,
            ..Run::default()
        };
        assert!(find(&small.build(), FindingKind::Leak).is_none());
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
                "allocated rises 3.20 GiB on entering eval at step 9 and does not come back: \
                 2.00 GiB of it is still held at post_optimizer_step of step 10, compared with \
                 post_optimizer_step of step 9 (3 of 4 evals kept memory, 6.00 GiB in all)"
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

//! Rules about memory that does not come back step after step: per-step leaks (memory kept at
//! evals is `eval.rs`'s).

use super::{Diagnose, Evidence, Finding, FindingKind, RuleContext, Severity, finding};
use crate::leaks::{GrowthFit, LeakEvidence};
use crate::metrics::MetricKey;
use crate::trend::TimeTrend;
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_duration_us};

/// A leak that fills memory within this many times the steps already observed is critical: the
/// run will not finish (or barely will) at the current rate.
pub const CRITICAL_RUNWAY_FACTOR: f64 = 2.0;

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
    OverTime(&'a TimeTrend, Program),
}

/// What the advice may assume of the program: where its tensors live and whether it has worker
/// processes, so that a CPU run whose leak is tensors is not told about copy-on-write workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// No device memory was recorded: the tensors live in host memory.
    pub cpu_only: bool,
    /// Processes other than the program were seen in its tree (DataLoader workers, ranks).
    pub workers: bool,
}

impl Program {
    fn of(ctx: &RuleContext<'_>) -> Program {
        let t = ctx.trace;
        Program {
            cpu_only: ctx
                .analysis
                .stage_table
                .primary_metric
                .is_none_or(MetricKey::is_host),
            workers: !t.process_memory.is_empty()
                || t.processes
                    .iter()
                    .any(|p| p.role == oomscope_format::ProcessRole::Worker),
        }
    }
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
    /// What the advice may assume.
    pub program: Program,
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
                .map(|t| LeakDiagnosis::OverTime(t, Program::of(ctx)));
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
            program: Program::of(ctx),
        }))
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        match d {
            LeakDiagnosis::PerStep(d) => self.explain_per_step(d),
            LeakDiagnosis::OverTime(t, program) => self.explain_over_time(t, *program),
        }
    }
}

/// What to look for, by the memory that grows and the program it grows in.
fn leak_change(host: bool, program: Program) -> String {
    const TENSORS: &str = "a loss or metric accumulated without .item() or .detach() (it keeps \
                           each step's autograd graph), lists of outputs, caches keyed by step, \
                           hooks that store activations";
    let mut change = if !host {
        format!(
            "look for tensors kept across steps: {TENSORS}; compare \
             torch.cuda.memory_snapshot() at the same stage of two steps to find them"
        )
    } else if program.cpu_only {
        format!(
            "look for what is kept across steps — on the CPU tensors live in host memory: \
             {TENSORS}; and Python objects: growing lists or dicts of metrics, caches keyed by \
             sample"
        )
    } else {
        "look for host objects kept across steps: growing lists or dicts of metrics, caches \
         keyed by sample, tensors moved to the CPU and kept"
            .to_owned()
    };
    if host && program.workers {
        change.push_str(
            "; DataLoader workers that touch Python objects copy them (copy-on-write), so keep \
             datasets in numpy arrays or memory-mapped files",
        );
    }
    change
}

impl Leak {
    /// Wording of a growth over time in a run without step marks.
    fn explain_over_time(&self, t: &TimeTrend, program: Program) -> Finding {
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
            leak_change(t.host_memory, program),
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
        let change = leak_change(host, d.program);
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
            change,
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{evidence, find, with_context};
    use super::*;
    use oomscope_format::units::MIB;
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
        // A GPU run with no worker process: host objects, and nothing of workers.
        assert!(
            f.change
                .starts_with("look for host objects kept across steps")
        );
        assert!(!f.change.contains("copy-on-write"), "{}", f.change);
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
}

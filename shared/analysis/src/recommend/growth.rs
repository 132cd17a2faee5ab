//! The rule about memory that does not come back step after step: per-step leaks (memory kept
//! at evals is `eval.rs`'s).

use super::explained::{
    EXPLAINED_SHARE, model_state_explains, models_kept, state_of_the_same_model,
};
use super::rule::{Diagnose, RuleContext, critical_if};
use crate::finding::{
    Detail, Evidence, EvidenceKey as K, FindingKind, FloorFull, GrowingMemory, LeakDiagnosis,
    OverTime, Program, RisingFloor, Severity,
};
use crate::leaks::Clock;
use crate::metrics::MetricKey;
use crate::symptom::{self, Shape};
use crate::trend::TimeTrend;
use oomscope_format::{HeldClock, HeldKind, HeldTensors};

/// A leak that fills memory within this many times the steps already observed is critical: the
/// run will not finish (or barely will) at the current rate.
pub const CRITICAL_RUNWAY_FACTOR: f64 = 2.0;

/// `leak`: memory at a stage grows steadily with the step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Leak;

/// A group of live tensors the hooks counted growing that is a leak on its own evidence: at
/// least this many bytes between the two counts (with at least one tensor a step).
pub const HELD_MIN_BYTES: u64 = 1 << 20;

/// Whether the growing workers' private memory accounts for a host trend's growth
/// ([`crate::workers::WORKERS_EXPLAIN_FRACTION`]): then one finding tells it, the workers'.
fn workers_explain(ctx: &RuleContext<'_>, trend: &TimeTrend) -> bool {
    let workers: f64 = ctx
        .analysis
        .growing_workers
        .iter()
        .map(|w| w.slope_bytes_per_s)
        .sum();
    trend.host_memory
        && trend.slope_bytes_per_s > 0.0
        && workers >= crate::workers::WORKERS_EXPLAIN_FRACTION * trend.slope_bytes_per_s
}

/// Whether the hooks' group `h` lives in host memory (the CPU's tensors, Python objects), as the
/// run's memory at marks is read.
fn held_on_host(h: &HeldTensors, ctx: &RuleContext<'_>) -> bool {
    h.device.is_empty()
        || h.device.starts_with("cpu")
        || ctx
            .analysis
            .stage_table
            .primary_metric
            .is_none_or(MetricKey::is_host)
}

/// A rising floor that nothing measured explains is a `leak` only when its rise is at least this
/// share of the floor's level at the start (see [`rising_floor`]). 0.1 until a clean Lightning run
/// on PyTorch 2.15, in CI's loaded suite, drifted 100 MiB (11%) over its 80 steps (5% alone).
pub const RISING_MIN_SHARE_OF_LEVEL: f64 = 0.2;

/// A rising floor read as stairs is a `leak` nothing else explains only with this many stairs.
pub const RISING_MIN_STAIRS: usize = 3;

/// A floor that rises without bound ([`Shape::unbounded`]) that nothing measured accounts for
/// ([`EXPLAINED_SHARE`] of it): not its parts by kind (the model's state, file pages, shared
/// memory, the tree's other processes), not the evals' retention, not the workers' copies, not
/// what a garbage collection freed (reference cycles). The rise, said as measured.
fn rising_floor(ctx: &RuleContext<'_>, evals: &[u64]) -> Option<RisingFloor> {
    let a = ctx.analysis;
    let s = symptom::headline(&a.symptoms).filter(|s| s.shape.unbounded())?;
    // Two stairs say memory rose twice, not that it goes on rising (DataLoader workers begun
    // again at an epoch, pages touched once).
    if let Shape::Staircase { stairs, .. } = &s.shape
        && stairs.len() < RISING_MIN_STAIRS
    {
        return None;
    }
    let rise = s.levels.rise_bytes.max(0) as f64;
    let freed = a.gc.iter().map(|g| g.freed_bytes).max().unwrap_or(0);
    let kept_models = models_kept(ctx.trace, s);
    if ((s.unexplained_bytes as f64) < EXPLAINED_SHARE * rise && !kept_models)
        || freed as f64 >= EXPLAINED_SHARE * rise
    {
        return None;
    }
    // What nothing measured explains is a finding only once it is more than the allocator's own
    // drift (caches filled by a larger eval batch, a heap it does not trim, pages faulted back
    // in under memory pressure): "What memory did" says a smaller rise, unexplained, either way.
    if !kept_models && rise < RISING_MIN_SHARE_OF_LEVEL * s.levels.start_bytes as f64 {
        return None;
    }
    let retained: u64 = a
        .phase_transitions
        .iter()
        .filter(|t| !model_state_explains(ctx.trace, t))
        .filter_map(|t| t.retained_bytes)
        .map(|b| b.max(0) as u64)
        .sum();
    let copied: u64 = a
        .growing_workers
        .iter()
        .map(|w| w.last_private_bytes.saturating_sub(w.first_private_bytes))
        .sum();
    if retained as f64 >= EXPLAINED_SHARE * rise
        || (s.host() && copied as f64 >= EXPLAINED_SHARE * rise)
    {
        return None;
    }
    let rate = s.rate_bytes_per_unit().filter(|r| *r > 0.0)?;
    let full = crate::leaks::limit_of(ctx.trace, s.metric).map(|(limit, basis)| {
        let room = limit.saturating_sub(s.levels.end_bytes) as f64;
        let units = (room / rate).ceil() as u64;
        FloorFull {
            limit_bytes: limit,
            limit_basis: basis,
            full_at: s.last_at.saturating_add(units),
            time_to_full_us: (s.unit_us > 0).then(|| units.saturating_mul(s.unit_us)),
        }
    });
    Some(RisingFloor {
        symptom: s.clone(),
        steady: steady(&a.held, evals).into_iter().cloned().collect(),
        program: program_of(ctx),
        full,
        models_kept: kept_models,
    })
}

/// What the advice may assume of the program: where its tensors live and whether it has worker
/// processes.
pub(super) fn program_of(ctx: &RuleContext<'_>) -> Program {
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
        marked: !t.marks.is_empty(),
    }
}

impl Diagnose for Leak {
    const KIND: FindingKind = FindingKind::Leak;
    type Diagnosis = LeakDiagnosis;

    /// Detection: a stage whose memory grows steadily with the step; without step marks, a
    /// counter that grows for the whole run (the one that fills first) unless it is host memory
    /// the growing workers' copies account for (see `workers_explain`); else tensors the hooks
    /// counted accumulating step after step; `None` otherwise.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<LeakDiagnosis> {
        let primary = ctx.analysis.stage_table.primary_metric;
        let evals = eval_steps(ctx);
        // What the memory did decides first: a floor that rose to a bound and stayed, or that
        // follows the input's size, is no leak of that memory, however straight a stage's line.
        // A bound is the floor's, read from the resident bytes: a container the hooks counted
        // gaining past it (each epoch's copy appended while the C allocator reuses what it
        // freed) says the program's growth did not stop there.
        // Rows on the symptom's own clock (steps, which epochs' rows count in too; forwards),
        // counted wholly past the bound; on the time clock (seconds from the run's start), rows
        // whose second count came after it. An eval's rows tell what the eval kept.
        let grew_past = |host: bool, unit: symptom::Unit, at: u64| {
            ctx.analysis.held.iter().any(|h| {
                let past = match unit {
                    symptom::Unit::Step => {
                        matches!(h.clock, HeldClock::Step | HeldClock::Epoch) && h.from_step >= at
                    }
                    symptom::Unit::Forward => h.clock == HeldClock::Forward && h.from_step >= at,
                    symptom::Unit::Second => {
                        h.clock != HeldClock::Eval && h.t_us >= at.saturating_mul(1_000_000)
                    }
                };
                let sized = matches!(h.kind, HeldKind::Tensors | HeldKind::Objects)
                    && h.bytes >= HELD_MIN_BYTES;
                // Tensors kept one or more every step of a pair, or the autograd graph behind a
                // named tensor gaining nodes every step, wherever the pair was: the census saw
                // the program keep them; the resident floor's bound is the allocator reusing
                // what it freed (held_leaks.py --kind total: a graph's 768 KiB a step under a
                // floor that stayed flat for the last 8 of 30 steps on PyTorch 2.15).
                let kept_each_step = (h.kind == HeldKind::Tensors && sized || h.is_graph())
                    && h.clock == HeldClock::Step
                    && h.per_step() >= 1
                    && unit == symptom::Unit::Step;
                (past && sized || kept_each_step) && held_on_host(h, ctx) == host
            })
        };
        let no_leak = |host: bool| {
            symptom::of_memory(&ctx.analysis.symptoms, host).is_some_and(|s| {
                let bounded = match s.shape {
                    Shape::Bounded { reached_at, .. } => !grew_past(host, s.unit, reached_at),
                    Shape::FollowsInput { .. } => true,
                    _ => false,
                };
                bounded || state_of_the_same_model(s)
            })
        };
        let leaks: Vec<crate::leaks::GrowthFit> = ctx
            .analysis
            .leak_fits
            .iter()
            .filter(|f| !no_leak(f.host_memory))
            .cloned()
            .collect();
        let Some(headline) = crate::leaks::headline_leak(&leaks, primary) else {
            return ctx
                .analysis
                .time_trends
                .iter()
                .filter(|t| t.is_leak && !workers_explain(ctx, t) && !no_leak(t.host_memory))
                .min_by_key(|t| t.time_to_full_us.unwrap_or(u64::MAX))
                .map(|t| LeakDiagnosis::OverTime(over_time(t, program_of(ctx))))
                .or_else(|| {
                    let held: Vec<HeldTensors> = steady(&ctx.analysis.held, &evals)
                        .into_iter()
                        .filter(|h| h.is_graph() || h.bytes >= HELD_MIN_BYTES)
                        .filter(|h| !no_leak(held_on_host(h, ctx)))
                        .cloned()
                        .collect();
                    (!held.is_empty()).then_some(LeakDiagnosis::Accumulating(held))
                })
                .or_else(|| rising_floor(ctx, &evals).map(LeakDiagnosis::Rising));
        };
        let steps_run = (headline.last_step - headline.first_step) as f64;
        let critical = headline
            .projection
            .as_ref()
            .is_some_and(|p| p.steps_remaining as f64 <= CRITICAL_RUNWAY_FACTOR * steps_run);
        let steady: Vec<HeldTensors> = steady(&ctx.analysis.held, &evals)
            .into_iter()
            .cloned()
            .collect();
        let counted = counted_bytes_per_step(&steady, headline.host_memory);
        Some(LeakDiagnosis::PerStep(GrowingMemory {
            leaking_fits: ctx.analysis.leaks().count(),
            critical,
            program: program_of(ctx),
            counted_bytes_per_step: counted,
            counted_is_part: counted
                .is_some_and(|c| c < COUNTED_SHARE * headline.slope_bytes_per_step),
            epoch_rows: epoch_rows(&ctx.analysis.held),
            steady,
            headline: headline.clone(),
        }))
    }

    fn severity(&self, d: &LeakDiagnosis) -> Severity {
        match d {
            LeakDiagnosis::PerStep(d) => critical_if(d.critical),
            LeakDiagnosis::OverTime(t) => critical_if(t.critical),
            LeakDiagnosis::Accumulating(_) => Severity::Warning,
            LeakDiagnosis::Rising(r) => {
                let run = r.symptom.last_at.saturating_sub(r.symptom.first_at) as f64;
                critical_if(r.full.is_some_and(|f| {
                    f.full_at.saturating_sub(r.symptom.last_at) as f64
                        <= CRITICAL_RUNWAY_FACTOR * run
                }))
            }
        }
    }

    fn evidence(&self, d: &LeakDiagnosis) -> Vec<Evidence> {
        match d {
            LeakDiagnosis::PerStep(d) => per_step_evidence(d),
            LeakDiagnosis::OverTime(t) => {
                let t = &t.trend;
                let mut evidence = vec![
                    Evidence::bytes(K::SlopeBytesPerS, t.slope_bytes_per_s),
                    Evidence::number(K::RSquared, t.r_squared),
                    Evidence::bytes(K::GrowthBytes, t.growth_bytes as f64),
                    Evidence::micros(K::FromUs, t.from_us as f64),
                    Evidence::micros(K::ToUs, t.to_us as f64),
                ];
                evidence.extend(
                    t.limit_bytes
                        .map(|l| Evidence::bytes(K::LimitBytes, l as f64)),
                );
                evidence.extend(
                    t.time_to_full_us
                        .map(|us| Evidence::micros(K::TimeToFullUs, us as f64)),
                );
                evidence
            }
            LeakDiagnosis::Accumulating(held) => {
                let top = &held[0];
                vec![
                    Evidence::count(K::Tensors, top.count as f64),
                    Evidence::bytes(K::Bytes, top.bytes as f64),
                    Evidence::count(K::FromStep, top.from_step as f64),
                    Evidence::count(K::ToStep, top.to_step as f64),
                ]
            }
            LeakDiagnosis::Rising(r) => rising_evidence(r),
        }
    }

    fn detail(d: LeakDiagnosis) -> Detail {
        Detail::Leak(d)
    }
}

/// A rising floor's numbers: its rate on its unit (per second for a run without marks), its
/// rise and span, and where memory is full.
fn rising_evidence(r: &RisingFloor) -> Vec<Evidence> {
    let s = &r.symptom;
    let clock = match s.unit {
        symptom::Unit::Step => Some(Clock::Step),
        symptom::Unit::Forward => Some(Clock::Forward),
        symptom::Unit::Second => None,
    };
    let rate = s.rate_bytes_per_unit().unwrap_or(0.0);
    let mut evidence = vec![
        match clock {
            Some(c) => Evidence::bytes(K::SlopePer(c), rate),
            None => Evidence::bytes(K::SlopeBytesPerS, rate),
        },
        Evidence::bytes(K::GrowthBytes, s.levels.rise_bytes as f64),
    ];
    // Where it was read: steps (or forwards) by their numbers, a run without marks by time.
    match clock {
        Some(_) => evidence.extend([
            Evidence::count(K::FirstStep, s.first_at as f64),
            Evidence::count(K::LastStep, s.last_at as f64),
        ]),
        None => evidence.extend([
            Evidence::micros(K::FromUs, s.from_us as f64),
            Evidence::micros(K::ToUs, s.to_us as f64),
        ]),
    }
    if let Some(f) = &r.full {
        evidence.push(Evidence::bytes(K::LimitBytes, f.limit_bytes as f64));
        if let Some(c) = clock {
            evidence.push(Evidence::count(K::FullAt(c), f.full_at as f64));
        }
        if let Some(us) = f.time_to_full_us {
            evidence.push(Evidence::micros(K::TimeToFullUs, us as f64));
        }
    }
    evidence
}

/// A run without step marks whose counter grows: critical when it fills memory within
/// [`CRITICAL_RUNWAY_FACTOR`] times the time observed.
fn over_time(trend: &TimeTrend, program: Program) -> OverTime {
    let elapsed = trend.to_us.saturating_sub(trend.from_us) as f64;
    OverTime {
        critical: trend
            .time_to_full_us
            .is_some_and(|us| us as f64 <= CRITICAL_RUNWAY_FACTOR * elapsed),
        trend: trend.clone(),
        program,
    }
}

/// The numbers of a per-step leak.
fn per_step_evidence(d: &GrowingMemory) -> Vec<Evidence> {
    let leak = &d.headline;
    let clock = leak.clock;
    let mut evidence = vec![
        Evidence::bytes(K::SlopePer(clock), leak.slope_bytes_per_step),
        Evidence::number(K::RSquared, leak.r_squared),
        Evidence::count(K::FirstStep, leak.first_step as f64),
        Evidence::count(K::LastStep, leak.last_step as f64),
        Evidence::bytes(K::GrowthBytes, leak.growth_bytes as f64),
        Evidence::count(K::LeakingFits, d.leaking_fits as f64),
    ];
    if let Some(c) = d.counted_bytes_per_step.filter(|_| clock != Clock::Epoch) {
        evidence.push(Evidence::bytes(K::HeldPer(clock), c));
    }
    if let Some(p) = &leak.projection {
        evidence.push(Evidence::bytes(K::LimitBytes, p.limit_bytes as f64));
        evidence.push(Evidence::bytes(K::CurrentBytes, p.current_bytes as f64));
        evidence.push(Evidence::count(K::FullAt(clock), p.full_at_step as f64));
        if let Some(us) = p.time_to_full_us {
            evidence.push(Evidence::micros(K::TimeToFullUs, us as f64));
        }
    }
    evidence
}

/// On the epochs' clock: the containers the hooks counted at epoch starts that gained items,
/// each holder once (its latest count).
fn epoch_rows(held: &[HeldTensors]) -> Vec<HeldTensors> {
    let mut rows: Vec<&HeldTensors> = Vec::new();
    for h in held.iter().filter(|h| h.clock == HeldClock::Epoch) {
        match rows.iter_mut().find(|r| r.holder == h.holder) {
            Some(r) if h.to_step > r.to_step => *r = h,
            Some(_) => {}
            None => rows.push(h),
        }
    }
    rows.into_iter().cloned().collect()
}

/// The steps at which evals began: a pair of counts with an eval between them measured what the
/// eval kept (`eval-retains-memory`'s story), not what each step keeps.
fn eval_steps(ctx: &RuleContext<'_>) -> Vec<u64> {
    ctx.analysis
        .phase_transitions
        .iter()
        .map(|t| t.entry_step)
        .collect()
}

/// The groups that grew at least one a step with no eval between their counts, each once (the
/// latest pair of counts that found it: the hooks count again after a cool-down), in the order
/// given.
pub(crate) fn steady<'a>(held: &'a [HeldTensors], evals: &[u64]) -> Vec<&'a HeldTensors> {
    let mut out: Vec<&HeldTensors> = Vec::new();
    // What only a reference cycle holds is freed at the next collection: `reference-cycles`.
    // The same group of tensors found in a cycle by another pair of counts is the cycles' too
    // (a count the collector ran into, freeing the cycle's objects before the tensors' holders
    // were looked for, finds them held by no container).
    let tensors_key = |h: &HeldTensors| {
        (
            h.device.clone(),
            h.dtype.clone(),
            h.shape.clone(),
            h.grad_fn.clone(),
        )
    };
    let in_cycles: Vec<_> = held
        .iter()
        .filter(|h| h.is_cycle())
        .map(tensors_key)
        .collect();
    let cycles_own =
        |h: &HeldTensors| h.kind == HeldKind::Uncontained && in_cycles.contains(&tensors_key(h));
    let across_eval = |h: &HeldTensors| evals.iter().any(|s| (h.from_step..h.to_step).contains(s));
    // Rows counted on the steps' or a serving program's forwards' clock (an epoch's or an eval's
    // rows tell their own stories).
    let steady_clock = |h: &HeldTensors| matches!(h.clock, HeldClock::Step | HeldClock::Forward);
    // A container of Python objects counts by what it retains: an item every few steps that
    // keeps a megabyte (a profiler's window of events, a snapshot queued) as one a step does.
    let often = |h: &HeldTensors| {
        h.per_step() >= 1 || (h.kind == HeldKind::Objects && h.bytes >= HELD_MIN_BYTES)
    };
    for h in held.iter().filter(|h| {
        steady_clock(h) && often(h) && !h.is_cycle() && !cycles_own(h) && !across_eval(h)
    }) {
        // The same group again (its item count moves between pairs of counts).
        match out.iter_mut().find(|o| o.same_group(h)) {
            Some(o) if h.to_step > o.to_step => *o = h,
            Some(_) => {}
            None => out.push(h),
        }
    }
    out
}

/// Below this share of a leak's rate, what the program's containers were counted gaining is said
/// to be only part of it (a list gaining 1 MiB a forward while resident memory grows 2 MiB: the
/// C allocator kept the freed intermediates' pages).
const COUNTED_SHARE: f64 = 0.6;

/// The bytes a step that the program's containers ([`HeldKind::Tensors`] with a holder, and
/// [`HeldKind::Objects`]) were counted gaining on the leak's side (host or device), `None` when
/// none was, or when what grows keeps autograd graphs (a loss kept with its graph counts the
/// scalar's 4 bytes; the graph's saved tensors are the rest, and the advice says so).
fn counted_bytes_per_step(steady: &[HeldTensors], host: bool) -> Option<f64> {
    let side = |h: &&HeldTensors| (h.device.is_empty() || &*h.device == "cpu") == host;
    if steady
        .iter()
        .filter(side)
        .any(|h| h.is_graph() || !h.grad_fn.is_empty())
    {
        return None;
    }
    let contained = |h: &&HeldTensors| {
        h.kind == HeldKind::Objects || (h.kind == HeldKind::Tensors && !h.holder.is_empty())
    };
    let rows: Vec<_> = steady.iter().filter(side).filter(contained).collect();
    (!rows.is_empty()).then(|| rows.iter().map(|h| h.bytes as f64 / h.steps() as f64).sum())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::with_context;
    use super::*;
    use oomscope_format::units::MIB;
    use oomscope_testkit::run::Run;

    #[test]
    fn leak_that_fills_the_device_soon_is_critical() {
        let trace = Run {
            steps: 1_000,
            leak_bytes_per_step: 40 * MIB,
            ..Run::default()
        }
        .build();
        let (slope, full_at, critical) = with_context(&trace, |ctx| {
            let Some(LeakDiagnosis::PerStep(d)) = Leak.detect(ctx) else {
                panic!("no per-step leak");
            };
            let full_at = d.headline.projection.as_ref().map(|p| p.full_at_step);
            (d.headline.slope_bytes_per_step, full_at, d.critical)
        });
        assert!((slope - (40 * MIB) as f64).abs() < 1.0, "{slope}");
        assert_eq!((full_at, critical), (Some(1_332), true));
    }
}

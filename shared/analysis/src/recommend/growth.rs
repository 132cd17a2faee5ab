//! Rules about memory that does not come back step after step: per-step leaks (memory kept at
//! evals is `eval.rs`'s).

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::leaks::{Clock, GrowthFit, LeakEvidence};
use crate::metrics::MetricKey;
use crate::trend::TimeTrend;
use crate::words;
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_signed_bytes,
};
use oomscope_format::{HeldClock, HeldKind, HeldTensors};

/// A leak that fills memory within this many times the steps already observed is critical: the
/// run will not finish (or barely will) at the current rate.
pub const CRITICAL_RUNWAY_FACTOR: f64 = 2.0;

/// `leak`: memory at a stage grows steadily with the step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Leak;

/// What [`Leak`] detected: a per-stage leak, or, in a run without step marks, growth over time,
/// or tensors the hooks counted accumulating.
#[derive(Debug, Clone)]
pub enum LeakDiagnosis<'a> {
    /// Memory at a stage grows step after step.
    PerStep(GrowingMemory<'a>),
    /// A counter grows for the whole of a run that has no step marks.
    OverTime(&'a TimeTrend, Program),
    /// No stage's memory fits a steady rise (the growth is small next to the process's
    /// memory, or noisy), but the hooks' counts found tensors that accumulate step after step:
    /// the groups that grew at least one a step, at least [`HELD_MIN_BYTES`] in all or an
    /// autograd graph.
    Accumulating(Vec<&'a HeldTensors>),
}

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

/// What the advice may assume of the program: where its tensors live and whether it has worker
/// processes, so that a CPU run whose leak is tensors is not told about copy-on-write workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// No device memory was recorded: the tensors live in host memory.
    pub cpu_only: bool,
    /// Processes other than the program were seen in its tree (DataLoader workers, ranks).
    pub workers: bool,
    /// The run has stage marks (from the hooks or the program).
    pub marked: bool,
}

impl Program {
    pub(super) fn of(ctx: &RuleContext<'_>) -> Program {
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
}

/// A per-step leak.
#[derive(Debug, Clone)]
pub struct GrowingMemory<'a> {
    /// The leak to headline (see `crate::leaks::headline_leak`).
    pub headline: &'a GrowthFit,
    /// Stage/metric fits that grow.
    pub leaking_fits: usize,
    /// At this rate memory fills within [`CRITICAL_RUNWAY_FACTOR`] × the steps observed.
    pub critical: bool,
    /// What the advice may assume.
    pub program: Program,
    /// The live tensors the hooks counted growing across steps, largest first.
    pub held: &'a [HeldTensors],
    /// The steps at which evals began (see [`steady`]).
    pub eval_steps: Vec<u64>,
}

impl Diagnose for Leak {
    const KIND: FindingKind = FindingKind::Leak;
    type Diagnosis<'a> = LeakDiagnosis<'a>;

    /// Detection: a stage whose memory grows steadily with the step; without step marks, a
    /// counter that grows for the whole run (the one that fills first) unless it is host memory
    /// the growing workers' copies account for (see `workers_explain`); `None` otherwise.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let primary = ctx.analysis.stage_table.primary_metric;
        let Some(headline) = crate::leaks::headline_leak(&ctx.analysis.leak_fits, primary) else {
            return ctx
                .analysis
                .time_trends
                .iter()
                .filter(|t| t.is_leak && !workers_explain(ctx, t))
                .min_by_key(|t| t.time_to_full_us.unwrap_or(u64::MAX))
                .map(|t| LeakDiagnosis::OverTime(t, Program::of(ctx)))
                .or_else(|| {
                    let held: Vec<&HeldTensors> = steady(&ctx.analysis.held, &eval_steps(ctx))
                        .into_iter()
                        .filter(|h| h.is_graph() || h.bytes >= HELD_MIN_BYTES)
                        .collect();
                    (!held.is_empty()).then_some(LeakDiagnosis::Accumulating(held))
                });
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
            held: &ctx.analysis.held,
            eval_steps: eval_steps(ctx),
        }))
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        match d {
            LeakDiagnosis::PerStep(d) => self.explain_per_step(d),
            LeakDiagnosis::OverTime(t, program) => self.explain_over_time(t, *program),
            LeakDiagnosis::Accumulating(held) => self.explain_accumulating(held),
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

/// The change for memory kept per forward by a run that never trains: no autograd graph is
/// kept under `no_grad`/`inference_mode`, so what grows is something the program keeps of each
/// request.
fn serving_change(host: bool) -> String {
    let kept = if host {
        "outputs, key/value caches or inputs appended to a list or stored in a dict per \
         request, results moved to the CPU and kept, caches keyed by request"
    } else {
        "outputs or key/value caches appended to a list or stored in a dict per request, \
         caches keyed by request"
    };
    format!(
        "look for what the program keeps of each request: {kept}; bound such caches (an LRU of \
         fixed size) or drop a request's tensors once it is answered"
    )
}

/// The change for memory kept at each epoch's end: the containers the hooks counted at epoch
/// starts that gained items (`held` rows on the epochs' clock), else what programs keep once an
/// epoch.
fn epoch_change(held: &[HeldTensors]) -> String {
    let mut rows: Vec<&HeldTensors> = Vec::new();
    for h in held.iter().filter(|h| h.clock == HeldClock::Epoch) {
        match rows.iter_mut().find(|r| r.holder == h.holder) {
            Some(r) if h.to_step > r.to_step => *r = h,
            Some(_) => {}
            None => rows.push(h),
        }
    }
    if rows.is_empty() {
        return "look for what the program keeps once an epoch: a copy of the weights or \
                state_dict appended to a list (copy.deepcopy), an epoch's predictions or \
                metrics kept whole, a checkpoint held in memory; keep only the latest or the \
                best, or save it to disk and drop it"
            .to_owned();
    }
    let parts: Vec<String> = rows
        .iter()
        .map(|h| {
            format!(
                "{} gains {} {} an epoch ({} an epoch)",
                words::holder(h),
                format_count(h.count),
                if h.dtype.is_empty() {
                    "items".to_owned()
                } else {
                    format!("`{}`", h.dtype)
                },
                format_bytes(h.bytes)
            )
        })
        .collect();
    format!(
        "what grows, as counted in the program at each epoch's start: {}; keep only the latest \
         or the best (or save it to disk and drop it)",
        parts.join("; ")
    )
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
fn steady<'a>(held: &'a [HeldTensors], evals: &[u64]) -> Vec<&'a HeldTensors> {
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
    for h in held.iter().filter(|h| {
        steady_clock(h) && h.per_step() >= 1 && !h.is_cycle() && !cycles_own(h) && !across_eval(h)
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
fn counted_bytes_per_step(steady: &[&HeldTensors], host: bool) -> Option<f64> {
    let side = |h: &&&HeldTensors| (h.device.is_empty() || &*h.device == "cpu") == host;
    if steady
        .iter()
        .filter(side)
        .any(|h| h.is_graph() || !h.grad_fn.is_empty())
    {
        return None;
    }
    let contained = |h: &&&HeldTensors| {
        h.kind == HeldKind::Objects || (h.kind == HeldKind::Tensors && !h.holder.is_empty())
    };
    let rows: Vec<_> = steady.iter().filter(side).filter(contained).collect();
    (!rows.is_empty()).then(|| rows.iter().map(|h| h.bytes as f64 / h.steps() as f64).sum())
}

/// What to change, from what the hooks' counts of live tensors and containers found growing (see
/// `HeldTensors`): a running total's graph, a container of the program's that gains tensors each
/// step (with their autograd graphs, or detached) or Python objects, or tensors only autograd
/// graphs keep, of groups already [`steady`]. `None` without a group that grew by at least one a step.
fn held_change(steady: &[&HeldTensors], unit: &str) -> Option<String> {
    let mut parts = Vec::new();
    for h in steady.iter().filter(|h| h.is_graph()) {
        parts.push(format!(
            "`{}` is summed without .item(): the autograd graph behind it grows {} nodes a {unit}, \
             keeping every step's graph and the activations it saved; add .item() (or \
             .detach()) where it is summed",
            h.holder,
            format_count(h.per_step())
        ));
    }
    let python = |h: &&&HeldTensors| h.kind == HeldKind::Tensors && !h.holder.is_empty();
    for h in steady.iter().filter(python) {
        let tensors = format!(
            "{} {}[{}] a {unit} ({}/{unit})",
            format_count(h.per_step()),
            h.dtype,
            h.shape,
            format_bytes(h.bytes / h.steps())
        );
        parts.push(if h.grad_fn.is_empty() {
            format!(
                "{} gains {tensors} and is never emptied: clear it once used{}",
                words::holder(h),
                if unit == "step" {
                    " (a metric's state: reset it after compute())"
                } else {
                    ""
                }
            )
        } else {
            format!(
                "{} gains {tensors}, each with its autograd graph ({}) and the activations the \
                 graph saved: keep .item() (or .detach()) instead of the tensor",
                words::holder(h),
                h.grad_fn
            )
        });
    }
    for h in steady.iter().filter(|h| h.kind == HeldKind::Objects) {
        parts.push(format!(
            "{} gains {} items a {unit} ({}/{unit} of Python objects, not tensors) and is never \
             emptied: bound it (an LRU of fixed size, functools.lru_cache(maxsize=…)) or clear it \
             once used",
            words::holder(h),
            format_count(h.per_step()),
            format_bytes(h.bytes / h.steps())
        ));
    }
    if parts.is_empty()
        && let Some(h) = steady
            .iter()
            .find(|h| !h.is_graph() && !h.grad_fn.is_empty())
    {
        parts.push(format!(
            "tensors made with autograd on ({}), {} {}[{}] a {unit}, are kept by no Python \
             container, only by autograd graphs that never ran backward: a loss or output \
             computed with autograd on and kept, or summed; keep .item() (or .detach()) of it",
            h.grad_fn,
            format_count(h.per_step()),
            h.dtype,
            h.shape
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "what grows, as counted in the program: {}",
            parts.join("; ")
        )
    })
}

impl Leak {
    /// Wording of tensors that accumulate while no stage's memory fits a steady rise.
    fn explain_accumulating(&self, held: &[&HeldTensors]) -> Finding {
        let top = held[0];
        let what = if top.is_graph() {
            format!(
                "the autograd graph behind `{}` gained {} nodes",
                top.holder,
                format_count(top.count)
            )
        } else {
            format!(
                "{} gained {} {}[{}] tensors ({})",
                match words::holder(top) {
                    holder if holder.is_empty() => "the program".to_owned(),
                    holder => holder,
                },
                format_count(top.count),
                top.dtype,
                top.shape,
                format_bytes(top.bytes)
            )
        };
        let explanation = format!(
            "counted twice while memory rose, {what} between steps {} and {}, one or more every \
             step; the memory at the stages does not rise steadily enough yet to fit a leak (the \
             growth is small next to the rest, or the allocator hides it), but nothing freed \
             them between the two counts, so at this rate they grow as long as the run does",
            format_count(top.from_step),
            format_count(top.to_step)
        );
        let per_step_bytes = top.bytes / top.steps();
        finding(
            self,
            Severity::Warning,
            if top.is_graph() {
                format!("An autograd graph grows every step (`{}`)", top.holder)
            } else {
                format!("Tensors accumulate: +{}/step", format_bytes(per_step_bytes))
            },
            explanation,
            held_change(held, "step").unwrap_or_else(|| {
                "look for what keeps them outside Python's containers: a C++ extension or a \
                 tensor hook that stores them, an autograd graph kept alive through a tensor \
                 the program holds; torch.cuda.memory._record_memory_history() records where \
                 each was allocated"
                    .to_owned()
            }),
            vec![
                Evidence::count("tensors", top.count as f64),
                Evidence::bytes("bytes", top.bytes as f64),
                Evidence::count("from_step", top.from_step as f64),
                Evidence::count("to_step", top.to_step as f64),
            ],
        )
    }

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
        explanation.push_str(if program.marked {
            "; at no stage does it grow steadily from one step or forward to the next, so the \
             stage that keeps it is unknown"
        } else {
            "; the run has no step marks, so the stage that keeps it is unknown (run Python \
             programs with the zero-code hooks, or mark stages with oomscope_probe)"
        });
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
        let unit = leak.clock.unit();
        let mut explanation = format!(
            "memory at {} ({}) grows {}/{unit} (R² {:.2}) from {unit} {} to {} (+{})",
            leak.stage,
            leak.metric,
            format_bytes_f64(leak.slope_bytes_per_step),
            leak.r_squared,
            format_count(leak.first_step),
            format_count(leak.last_step),
            format_bytes(leak.growth_bytes.max(0).unsigned_abs()),
        );
        if leak.clock == Clock::Epoch {
            explanation.push_str(&format!(
                "; flat within epochs, it rises at their ends ({} times, {} within them in \
                 all): something is kept once an epoch",
                leak.transitions,
                format_signed_bytes(leak.train_growth_bytes)
            ));
        }
        if leak.clock == Clock::Forward {
            explanation.push_str(
                "; the run never trains (every forward in eval mode, under no_grad or \
                 inference_mode, no optimizer step), so its clock is the forward: a request, or \
                 one decoding step of one",
            );
        }
        match leak.evidence {
            Some(LeakEvidence::Short) => explanation.push_str(&format!(
                " (a short run, {} {unit}s, but the growth is straight and does not level off)",
                leak.steps
            )),
            Some(LeakEvidence::BeforeOom) => explanation.push_str(&format!(
                " (only {} {unit}s, but the growth did not level off and the run then ran out \
                 of memory)",
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
                    ": at this rate {what} is full at {unit} {}{when}",
                    format_count(p.full_at_step)
                ));
            }
        }
        if leak.transitions > 0 && leak.transition_growth_bytes > 0 && leak.clock == Clock::Forward
        {
            explanation.push_str(&format!(
                "; from one forward to the next it grows {}/forward, and {} more came at {}",
                format_bytes_f64(leak.train_slope_bytes_per_step),
                format_bytes(leak.transition_growth_bytes.unsigned_abs()),
                words::transitions(leak, "forward")
            ));
        } else if leak.transitions > 0
            && leak.transition_growth_bytes > 0
            && leak.clock == Clock::Step
        {
            explanation.push_str(&format!(
                "; within training steps it grows {}/step, and {} more came at {}",
                format_bytes_f64(leak.train_slope_bytes_per_step),
                format_bytes(leak.transition_growth_bytes.unsigned_abs()),
                words::transitions(leak, "step")
            ));
        }
        let leaking = d.leaking_fits;
        if leaking > 1 {
            explanation.push_str(&format!(" ({leaking} stage/metric fits grow)"));
        }
        let steady_rows = steady(d.held, &d.eval_steps);
        let counted = counted_bytes_per_step(&steady_rows, host);
        let change = match leak.clock {
            Clock::Step | Clock::Forward => match held_change(&steady_rows, unit) {
                Some(mut change) => {
                    if let Some(c) =
                        counted.filter(|c| *c < COUNTED_SHARE * leak.slope_bytes_per_step)
                    {
                        change.push_str(&format!(
                            "; these hold {}/{unit} of the {}/{unit}: the rest is in nothing the \
                             hooks counted ({})",
                            format_bytes_f64(c),
                            format_bytes_f64(leak.slope_bytes_per_step),
                            if host {
                                "freed memory the C allocator keeps, or memory held from C++"
                            } else {
                                "tensors held from C++, such as an autograd graph's"
                            }
                        ));
                    }
                    change
                }
                None if leak.clock == Clock::Step => leak_change(host, d.program),
                None => serving_change(host),
            },
            Clock::Epoch => epoch_change(d.held),
        };
        let mut evidence = vec![
            Evidence::bytes(
                &format!("slope_bytes_per_{unit}"),
                leak.slope_bytes_per_step,
            ),
            Evidence::number("r_squared", leak.r_squared),
            Evidence::count("first_step", leak.first_step as f64),
            Evidence::count("last_step", leak.last_step as f64),
            Evidence::bytes("growth_bytes", leak.growth_bytes as f64),
            Evidence::count("leaking_fits", leaking as f64),
        ];
        if let Some(c) = counted.filter(|_| leak.clock != Clock::Epoch) {
            evidence.push(Evidence::bytes(&format!("held_bytes_per_{unit}"), c));
        }
        if let Some(p) = &leak.projection {
            evidence.push(Evidence::bytes("limit_bytes", p.limit_bytes as f64));
            evidence.push(Evidence::bytes("current_bytes", p.current_bytes as f64));
            evidence.push(Evidence::count(
                &format!("full_at_{unit}"),
                p.full_at_step as f64,
            ));
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
            if leak.clock == Clock::Epoch {
                format!(
                    "Memory leak: +{} kept at each epoch end ({} times, at {})",
                    format_bytes_f64(leak.slope_bytes_per_step),
                    leak.transitions,
                    leak.stage
                )
            } else {
                format!(
                    "Memory leak: +{}/{unit} at {}",
                    format_bytes_f64(leak.slope_bytes_per_step),
                    leak.stage
                )
            },
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
    fn the_advice_names_what_the_hooks_counted_growing() {
        let mut trace = Run {
            steps: 100,
            leak_bytes_per_step: 12 * MIB,
            ..Run::default()
        }
        .build();
        let row = |kind, shape: &str, grad_fn: &str, count: u64, holder: &str, items| HeldTensors {
            from_step: 10,
            to_step: 18,
            kind,
            device: "cuda:0".into(),
            dtype: "float32".into(),
            shape: shape.into(),
            grad_fn: grad_fn.into(),
            count,
            bytes: if kind == HeldKind::Graph {
                0
            } else {
                count * 12 * MIB
            },
            holder: holder.into(),
            items,
            ..HeldTensors::default()
        };
        let tensors = HeldKind::Tensors;
        // A list of losses with their graphs, a metric's list of detached outputs, a running
        // total; a group that grew less than one a step says nothing.
        trace.held = vec![
            row(
                tensors,
                "scalar",
                "MseLossBackward0",
                8,
                "list `losses`",
                Some(18),
            ),
            row(
                tensors,
                "64x1024",
                "",
                8,
                "list `preds` of the `Accuracy` object",
                Some(18),
            ),
            row(
                HeldKind::Graph,
                "scalar",
                "AddBackward0",
                48,
                "total_loss",
                None,
            ),
            row(tensors, "3", "", 2, "dict `cache`", Some(2)),
        ];
        let f = find(&trace, FindingKind::Leak).unwrap();
        assert_eq!(
            f.change,
            "what grows, as counted in the program: `total_loss` is summed without .item(): the \
             autograd graph behind it grows 6 nodes a step, keeping every step's graph and the \
             activations it saved; add .item() (or .detach()) where it is summed; list `losses` \
             (18 items) gains 1 float32[scalar] a step (12.0 MiB/step), each with its autograd \
             graph (MseLossBackward0) and the activations the graph saved: keep .item() (or \
             .detach()) instead of the tensor; list `preds` of the `Accuracy` object (18 items) \
             gains 1 float32[64x1024] a step (12.0 MiB/step) and is never emptied: clear it once \
             used (a metric's state: reset it after compute())"
        );
        // Only autograd keeps them: the graphs that never ran backward are named.
        trace.held = vec![row(
            HeldKind::Uncontained,
            "64x1024",
            "ReluBackward0",
            8,
            "",
            None,
        )];
        let f = find(&trace, FindingKind::Leak).unwrap();
        assert!(
            f.change.starts_with(
                "what grows, as counted in the program: tensors made with autograd on \
                 (ReluBackward0), 1 float32[64x1024] a step, are kept by no Python container"
            ),
            "{}",
            f.change
        );
    }

    #[test]
    fn holders_that_explain_part_of_a_leak_are_said_to() {
        let mut trace = Run {
            steps: 100,
            leak_bytes_per_step: 12 * MIB,
            ..Run::default()
        }
        .build();
        let preds = HeldTensors {
            from_step: 10,
            to_step: 18,
            device: "cuda:0".into(),
            dtype: "float32".into(),
            shape: "1024x1024".into(),
            count: 8,
            bytes: 32 * MIB,
            holder: "list `preds`".into(),
            items: Some(18),
            ..HeldTensors::default()
        };
        // The host's own list says nothing of the device's growth.
        let on_host = HeldTensors {
            device: "cpu".into(),
            holder: "list `logs`".into(),
            ..preds.clone()
        };
        trace.held = vec![preds.clone(), on_host];
        let f = find(&trace, FindingKind::Leak).unwrap();
        assert_eq!(evidence(&f, "held_bytes_per_step"), 4.0 * MIB as f64);
        assert!(
            f.change.ends_with(
                "these hold 4.00 MiB/step of the 12.0 MiB/step: the rest is in nothing the hooks \
                 counted (tensors held from C++, such as an autograd graph's)"
            ),
            "{}",
            f.change
        );
        // All of it counted: nothing more said.
        trace.held = vec![HeldTensors {
            bytes: 96 * MIB,
            ..preds
        }];
        let f = find(&trace, FindingKind::Leak).unwrap();
        assert_eq!(evidence(&f, "held_bytes_per_step"), 12.0 * MIB as f64);
        assert!(!f.change.contains("these hold"), "{}", f.change);
    }

    #[test]
    fn tensors_counted_accumulating_are_a_leak_even_when_no_stage_fits_one() {
        let mut trace = Run::default().build();
        assert!(find(&trace, FindingKind::Leak).is_none());
        let preds = HeldTensors {
            from_step: 4,
            to_step: 12,
            device: "cpu".into(),
            dtype: "float32".into(),
            shape: "64x1024".into(),
            count: 8,
            bytes: 8 << 18,
            holder: "list `preds`".into(),
            items: Some(12),
            ..HeldTensors::default()
        };
        // The same group counted again later: said once, from the later counts.
        let later = HeldTensors {
            from_step: 86,
            to_step: 94,
            items: Some(94),
            ..preds.clone()
        };
        trace.held = vec![preds.clone(), later];
        let f = find(&trace, FindingKind::Leak).expect("accumulating tensors");
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(f.title, "Tensors accumulate: +256 KiB/step");
        assert!(
            f.explanation.starts_with(
                "counted twice while memory rose, list `preds` (94 items) gained 8 \
                 float32[64x1024] tensors (2.00 MiB) between steps 86 and 94, one or more every \
                 step"
            ),
            "{}",
            f.explanation
        );
        assert_eq!(
            f.change.matches("is never emptied").count(),
            1,
            "{}",
            f.change
        );
        // Below a mebibyte, or less than one a step: not evidence enough.
        trace.held = vec![HeldTensors {
            bytes: 512 << 10,
            ..preds.clone()
        }];
        assert!(find(&trace, FindingKind::Leak).is_none());
        trace.held = vec![HeldTensors { count: 7, ..preds }];
        assert!(find(&trace, FindingKind::Leak).is_none());
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

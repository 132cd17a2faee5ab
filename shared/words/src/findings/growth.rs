//! The words of `leak`: memory that does not come back step after step, and what to look for.

use super::finding_text::FindingText;
use oomscope_analysis::facts::{Clock, LeakEvidence};
use oomscope_analysis::finding::{GrowingMemory, LeakDiagnosis, OverTime, Program, RisingFloor};
use oomscope_analysis::symptom::Shape;
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_signed_bytes,
};
use oomscope_format::{HeldKind, HeldTensors};

use crate::phrases::{holder, transitions};

/// `leak`.
pub(super) fn leak(d: &LeakDiagnosis) -> FindingText {
    match d {
        LeakDiagnosis::PerStep(d) => per_step(d),
        LeakDiagnosis::OverTime(t) => over_time(t),
        LeakDiagnosis::Accumulating(held) => accumulating(held),
        LeakDiagnosis::Rising(r) => rising(r),
    }
}

/// What programs keep across steps that holds tensors.
const TENSORS: &str = "a loss or metric accumulated without .item() or .detach() (it keeps each \
                       step's autograd graph), lists of outputs, caches keyed by step, hooks \
                       that store activations";

/// What to look for, by the memory that grows and the program it grows in.
fn leak_change(host: bool, program: Program) -> Vec<String> {
    let mut changes = if !host {
        vec![
            format!("look for tensors kept across steps: {TENSORS}"),
            "compare torch.cuda.memory_snapshot() at the same stage of two steps to find them"
                .to_owned(),
        ]
    } else if program.cpu_only {
        vec![
            format!(
                "look for what is kept across steps — on the CPU tensors live in host memory: \
                 {TENSORS}"
            ),
            "and Python objects: growing lists or dicts of metrics, caches keyed by sample"
                .to_owned(),
        ]
    } else {
        vec![
            "look for host objects kept across steps: growing lists or dicts of metrics, caches \
             keyed by sample, tensors moved to the CPU and kept"
                .to_owned(),
        ]
    };
    if host && program.workers {
        changes.push(
            "DataLoader workers that touch Python objects copy them (copy-on-write), so keep \
             datasets in numpy arrays or memory-mapped files"
                .to_owned(),
        );
    }
    changes
}

/// The change for memory kept per forward by a run that never trains: no autograd graph is
/// kept under `no_grad`/`inference_mode`, so what grows is something the program keeps of each
/// request.
fn serving_change(host: bool) -> Vec<String> {
    let kept = if host {
        "outputs, key/value caches or inputs appended to a list or stored in a dict per request, \
         results moved to the CPU and kept, caches keyed by request"
    } else {
        "outputs or key/value caches appended to a list or stored in a dict per request, caches \
         keyed by request"
    };
    vec![
        format!("look for what the program keeps of each request: {kept}"),
        "bound such caches (an LRU of fixed size) or drop a request's tensors once it is answered"
            .to_owned(),
    ]
}

/// The change for memory kept at each epoch's end: the containers the hooks counted at epoch
/// starts that gained items, else what programs keep once an epoch.
fn epoch_change(rows: &[HeldTensors]) -> Vec<String> {
    if rows.is_empty() {
        return vec![
            "look for what the program keeps once an epoch: a copy of the weights or state_dict \
             appended to a list (copy.deepcopy), an epoch's predictions or metrics kept whole, a \
             checkpoint held in memory"
                .to_owned(),
            "keep only the latest or the best, or save it to disk and drop it".to_owned(),
        ];
    }
    let mut changes: Vec<String> = rows
        .iter()
        .map(|h| {
            format!(
                "{} gains {} {} an epoch ({} an epoch)",
                holder(h),
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
    changes[0] = format!(
        "what grows, as counted in the program at each epoch's start: {}",
        changes[0]
    );
    changes.push("keep only the latest or the best (or save it to disk and drop it)".to_owned());
    changes
}

/// What to change, from what the hooks' counts of live tensors and containers found growing: a
/// running total's graph, a container of the program's that gains tensors each step (with their
/// autograd graphs, or detached) or Python objects, or tensors only autograd graphs keep, of the
/// groups that grew steadily. Empty without a group that grew by at least one a step.
fn held_change(steady: &[HeldTensors], unit: &str) -> Vec<String> {
    let mut parts = Vec::new();
    for h in steady.iter().filter(|h| h.is_graph()) {
        parts.push(format!(
            "`{}` is summed without .item(): the autograd graph behind it grows {} nodes a {unit}, \
             keeping every step's graph and the activations it saved",
            h.holder,
            format_count(h.per_step())
        ));
        parts.push("add .item() (or .detach()) where it is summed".to_owned());
    }
    let python = |h: &&HeldTensors| h.kind == HeldKind::Tensors && !h.holder.is_empty();
    let described = |h: &HeldTensors| {
        format!(
            "{} {}[{}] a {unit} ({}/{unit})",
            format_count(h.per_step()),
            h.dtype,
            h.shape,
            format_bytes(h.bytes / h.steps())
        )
    };
    // One holder's detached groups (a dict of conversations, each its own shape) said once,
    // from its latest pair of counts.
    let mut said: Vec<&str> = Vec::new();
    for h in steady.iter().filter(python) {
        if h.grad_fn.is_empty() && said.contains(&&*h.holder) {
            continue;
        }
        let (tensors, h) = if h.grad_fn.is_empty() {
            said.push(&h.holder);
            let detached = |o: &&HeldTensors| o.holder == h.holder && o.grad_fn.is_empty();
            let latest = steady
                .iter()
                .filter(python)
                .filter(detached)
                .map(|o| (o.to_step, o.from_step))
                .max();
            let same: Vec<&HeldTensors> = steady
                .iter()
                .filter(python)
                .filter(detached)
                .filter(|o| Some((o.to_step, o.from_step)) == latest)
                .collect();
            let h = same.first().copied().unwrap_or(h);
            let tensors = match same.len() {
                1 => described(h),
                n => format!(
                    "{} a {unit} in {n} shapes ({}{})",
                    format_bytes(same.iter().map(|o| o.bytes / o.steps()).sum::<u64>()),
                    same.iter()
                        .take(2)
                        .map(|o| described(o))
                        .collect::<Vec<_>>()
                        .join(", "),
                    if n > 2 {
                        format!(" and {} more", n - 2)
                    } else {
                        String::new()
                    }
                ),
            };
            (tensors, h)
        } else {
            (described(h), h)
        };
        parts.push(if h.grad_fn.is_empty() {
            format!(
                "{} gains {tensors} and is never emptied: clear it once used{}",
                holder(h),
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
                holder(h),
                h.grad_fn
            )
        });
    }
    for h in steady.iter().filter(|h| h.kind == HeldKind::Objects) {
        let how_often = match h.per_step() {
            0 => format!(
                "{} {} in {} {unit}s",
                format_count(h.count),
                if h.count == 1 { "item" } else { "items" },
                format_count(h.steps())
            ),
            n => format!("{} items a {unit}", format_count(n)),
        };
        parts.push(format!(
            "{} gains {how_often} ({}/{unit} of Python objects, not tensors) and is never \
             emptied: bound it (an LRU of fixed size, functools.lru_cache(maxsize=…), a \
             queue's maxsize, a deque's maxlen) or clear it once used",
            holder(h),
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
             computed with autograd on and kept, or summed",
            h.grad_fn,
            format_count(h.per_step()),
            h.dtype,
            h.shape
        ));
        parts.push("keep .item() (or .detach()) of it".to_owned());
    }
    if let Some(first) = parts.first_mut() {
        *first = format!("what grows, as counted in the program: {first}");
    }
    parts
}

/// Tensors that accumulate while no stage's memory fits a steady rise.
fn accumulating(held: &[HeldTensors]) -> FindingText {
    let top = &held[0];
    let what = if top.is_graph() {
        format!(
            "the autograd graph behind `{}` gained {} nodes",
            top.holder,
            format_count(top.count)
        )
    } else {
        format!(
            "{} gained {} {}[{}] tensors ({})",
            match holder(top) {
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
        "counted twice while memory rose, {what} between steps {} and {}, one or more every step; \
         the memory at the stages does not rise steadily enough yet to fit a leak (the growth is \
         small next to the rest, or the allocator hides it), but nothing freed them between the \
         two counts, so at this rate they grow as long as the run does",
        format_count(top.from_step),
        format_count(top.to_step)
    );
    let mut changes = held_change(held, "step");
    if changes.is_empty() {
        changes = vec![
            "look for what keeps them outside Python's containers: a C++ extension or a tensor \
             hook that stores them, an autograd graph kept alive through a tensor the program \
             holds"
                .to_owned(),
            "torch.cuda.memory._record_memory_history() records where each was allocated"
                .to_owned(),
        ];
    }
    FindingText::new(
        if top.is_graph() {
            format!("An autograd graph grows every step (`{}`)", top.holder)
        } else {
            format!(
                "Tensors accumulate: +{}/step",
                format_bytes(top.bytes / top.steps())
            )
        },
        explanation,
        changes,
    )
}

/// A growth over time in a run without step marks.
fn over_time(d: &OverTime) -> FindingText {
    let t = &d.trend;
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
    explanation.push_str(if d.program.marked {
        "; at no stage does it grow steadily from one step or forward to the next, so the stage \
         that keeps it is unknown"
    } else {
        "; the run has no step marks, so the stage that keeps it is unknown (run Python programs \
         with the zero-code hooks, or mark stages with oomscope_probe)"
    });
    FindingText::new(
        format!(
            "Memory grows +{}/min for the whole run ({})",
            format_bytes_f64(per_minute),
            t.metric
        ),
        explanation,
        leak_change(t.host_memory, d.program),
    )
}

/// A floor that rises without bound, nothing else measured accounting for it.
fn rising(r: &RisingFloor) -> FindingText {
    let s = &r.symptom;
    let unit = s.unit.word();
    let rate = s.rate_bytes_per_unit().unwrap_or(0.0);
    let from = match &s.shape {
        Shape::LinearGrowth { from, .. } => *from,
        Shape::Staircase { stairs, .. } => stairs.first().map_or(s.first_at, |st| st.at),
        _ => s.first_at,
    };
    let how = match &s.shape {
        Shape::LinearGrowth {
            stairs_every: Some(every),
            ..
        } => format!(", in stairs every {} {unit}s", format_count(*every)),
        Shape::Staircase { stairs, .. } => format!(", in {} stairs", stairs.len()),
        _ => ", steadily".to_owned(),
    };
    let mut explanation = format!(
        "the lowest {} of each {unit} rose from {} to {} between {unit} {} and {unit} {}{how}; no \
         stage's steady rise, eval, worker or reference cycle accounts for it",
        s.metric,
        format_bytes(s.levels.start_bytes),
        format_bytes(s.levels.end_bytes),
        format_count(from),
        format_count(s.last_at),
    );
    if let Some(f) = &r.full {
        explanation.push_str(&match f.time_to_full_us {
            Some(us) if f.full_at > s.last_at => format!(
                ": at this rate memory ({}) is full at {unit} {}, in {}",
                format_bytes(f.limit_bytes),
                format_count(f.full_at),
                format_duration_us(us)
            ),
            _ => format!(
                ": at this rate memory ({}) was full by {unit} {}",
                format_bytes(f.limit_bytes),
                format_count(f.full_at)
            ),
        });
    }
    let mut changes = held_change(&r.steady, unit);
    if r.models_kept {
        explanation.push_str(
            "; most of it is models' own state, their parameters with it (parameters, gradients, optimizer \
             state: \"What memory did\" above): models and their optimizers kept as the run goes",
        );
        changes.push(
            "keep only what is needed of each model once it is done (its metrics, its \
             state_dict copied to the CPU or saved), and drop the model and its optimizer (del \
             them, or keep them out of the lists and dicts that outlive it)"
                .to_owned(),
        );
    } else if changes.is_empty() {
        explanation.push_str(
            "; what holds it was not counted (no group of live tensors or Python containers the \
             hooks count grew with it): memory outside them, such as native buffers or a \
             library's own records",
        );
        changes = leak_change(s.host(), r.program);
    }
    FindingText::new(
        format!(
            "Memory grows: +{}/{unit} ({}, from {unit} {})",
            format_bytes_f64(rate),
            s.metric,
            format_count(from)
        ),
        explanation,
        changes,
    )
}

/// A per-step leak.
fn per_step(d: &GrowingMemory) -> FindingText {
    let leak = &d.headline;
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
            "; flat within epochs, it rises at their ends ({} times, {} within them in all): \
             something is kept once an epoch",
            leak.transitions,
            format_signed_bytes(leak.train_growth_bytes)
        ));
    }
    if leak.clock == Clock::Forward {
        explanation.push_str(
            "; the run never trains (every forward in eval mode, under no_grad or \
             inference_mode, and no step taken), so its clock is the forward: a request, or one \
             decoding step of one",
        );
    }
    match leak.verdict.evidence() {
        Some(LeakEvidence::Short) => explanation.push_str(&format!(
            " (a short run, {} {unit}s, but the growth is straight and does not level off)",
            leak.steps
        )),
        Some(LeakEvidence::BeforeOom) => explanation.push_str(&format!(
            " (only {} {unit}s, but the growth did not level off and the run then ran out of \
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
                ": at this rate {what} is full at {unit} {}{when}",
                format_count(p.full_at_step)
            ));
        }
    }
    // What the transitions kept beyond the steps' own rate, when it is more than one step's
    // growth: a steady leak grows across an eval as across any step, and nothing "more" came.
    let more_at_transitions = leak.transitions > 0
        && leak.transition_excess_bytes > 0
        && leak.transition_excess_bytes as f64 > leak.train_slope_bytes_per_step;
    if more_at_transitions && leak.clock == Clock::Forward {
        explanation.push_str(&format!(
            "; from one forward to the next it grows {}/forward, and {} more came at {}",
            format_bytes_f64(leak.train_slope_bytes_per_step),
            format_bytes(leak.transition_excess_bytes.unsigned_abs()),
            transitions(leak, "forward")
        ));
    } else if more_at_transitions && leak.clock == Clock::Step {
        explanation.push_str(&format!(
            "; within training steps it grows {}/step, and {} more came at {}",
            format_bytes_f64(leak.train_slope_bytes_per_step),
            format_bytes(leak.transition_excess_bytes.unsigned_abs()),
            transitions(leak, "step")
        ));
    }
    if d.leaking_fits > 1 {
        explanation.push_str(&format!(" ({} stage/metric fits grow)", d.leaking_fits));
    }
    let changes = match leak.clock {
        Clock::Step | Clock::Forward => {
            let mut changes = held_change(&d.steady, unit);
            if changes.is_empty() {
                changes = match leak.clock {
                    Clock::Step => leak_change(host, d.program),
                    _ => serving_change(host),
                };
            } else if let Some(c) = d.counted_bytes_per_step.filter(|_| d.counted_is_part) {
                changes.push(format!(
                    "these hold {}/{unit} of the {}/{unit}: the rest is in nothing the hooks \
                     counted ({})",
                    format_bytes_f64(c),
                    format_bytes_f64(leak.slope_bytes_per_step),
                    if host {
                        "freed memory the C allocator keeps, or memory held from C++"
                    } else {
                        "tensors held from C++, such as an autograd graph's"
                    }
                ));
            }
            changes
        }
        Clock::Epoch => epoch_change(&d.epoch_rows),
    };
    FindingText::new(
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
        changes,
    )
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::{evidence, find};
    use super::*;
    use oomscope_analysis::finding::{FindingKind, Severity};
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
        // One holder's groups of several shapes (a dict of conversations, each of its own
        // length): said once, with its shapes.
        trace.held = vec![
            row(tensors, "1x4x281x64", "", 8, "dict `sessions`", Some(40)),
            row(tensors, "1x4x148x64", "", 8, "dict `sessions`", Some(40)),
        ];
        let f = find(&trace, FindingKind::Leak).unwrap();
        assert_eq!(
            f.change,
            "what grows, as counted in the program: dict `sessions` (40 items) gains 24.0 MiB a \
             step in 2 shapes (1 float32[1x4x281x64] a step (12.0 MiB/step), 1 \
             float32[1x4x148x64] a step (12.0 MiB/step)) and is never emptied: clear it once used \
             (a metric's state: reset it after compute())"
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

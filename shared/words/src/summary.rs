//! The terminal summary: an [`Analysis`] as plain text.
//!
//! `collector run` prints this when the watched program ends, often in a CI log or over SSH, so it
//! is plain text without colour, at most 100 columns wide, with the most useful facts first:
//! what ran, how high memory went, what each stage costs, and what to change. Every number comes
//! from the [`Analysis`] (nothing is recomputed here), formatted by [`oomscope_format::units`].

use crate::breakdown::breakdown_line;
use crate::findings::{Worded, worded};
use crate::headline;
use crate::phrases::{counted, peak_place, source_line, tensor_count};
use crate::ranks::ranks;
use crate::stage_table::{stage_table, stage_tables};
use crate::wrap::{WIDTH, line, section, shorten, wrap};
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::OomContext;
use oomscope_analysis::facts::{breakdown_peak, measured};
use oomscope_format::Trace;
use oomscope_format::units::{
    MIB, format_bytes, format_count, format_duration_us, format_percent, format_signed_bytes,
    format_signed_bytes_f64,
};
use oomscope_format::{CounterKind, HeldClock, HeldKind, HeldTensors, OomKind};

/// At most this many eval transitions are listed (the rest are counted).
const MAX_TRANSITIONS: usize = 5;

/// Renders the terminal summary.
pub fn render(trace: &Trace, analysis: &Analysis) -> String {
    let mut out = String::new();
    overview(&mut out, trace, analysis);
    peaks(&mut out, analysis);
    crate::symptom::render(&mut out, analysis);
    if let Some(r) = &analysis.ranks {
        ranks(&mut out, r, true);
    }
    stage_tables(&mut out, analysis);
    super::stage_table::stage_breakdown_table(&mut out, analysis);
    growth_and_leaks(&mut out, analysis);
    allocator(&mut out, analysis);
    transitions(&mut out, analysis);
    ooms(&mut out, analysis);
    findings(&mut out, analysis);
    if let Some(a) = &analysis.against_estimate {
        out.push_str(&super::estimate::render_against_estimate(a));
    }
    out
}

/// Most findings the brief summary lists (the full summary lists all).
const BRIEF_FINDINGS: usize = 3;

/// The short summary `collector run` prints when the program exits: the overview, peaks, the
/// primary stage table, OOM context, and the most severe findings with their changes.
/// `collector summary` prints the whole of [`render`].
pub fn render_brief(trace: &Trace, analysis: &Analysis) -> String {
    let mut out = String::new();
    overview(&mut out, trace, analysis);
    match &analysis.ranks {
        Some(r) => ranks(&mut out, r, false),
        None => {
            peaks(&mut out, analysis);
            if let Some(primary) = analysis.stage_table.primary_metric {
                stage_table(&mut out, &analysis.stage_table, primary);
            }
        }
    }
    ooms(&mut out, analysis);
    section(&mut out, "Findings");
    if analysis.findings.is_empty() {
        line(
            &mut out,
            "  nothing to change: no rule found evidence of a memory problem",
        );
        slow_growth(&mut out, analysis);
    }
    for f in analysis.findings.iter().take(BRIEF_FINDINGS).map(worded) {
        let tag = format!("[{}]", f.severity.label().to_ascii_uppercase());
        wrap(
            &mut out,
            &format!("{tag} {} ({})", f.title, f.kind.id()),
            2,
            4,
        );
        wrap(&mut out, &format!("→ {}", f.change), 4, 6);
    }
    if analysis.findings.len() > BRIEF_FINDINGS {
        let more = analysis.findings.len() - BRIEF_FINDINGS;
        line(
            &mut out,
            &format!("  … {more} more: see `collector summary`"),
        );
    }
    out
}

fn overview(out: &mut String, trace: &Trace, analysis: &Analysis) {
    let o = &analysis.overview;
    let command = if o.command.is_empty() {
        "(unknown command)"
    } else {
        &o.command
    };
    line(out, &shorten(&format!("oomscope: {command}"), WIDTH));
    let mut who = Vec::new();
    if !o.host.is_empty() {
        who.push(format!("host {}", o.host));
    }
    if o.pid != 0 {
        who.push(format!("pid {}", o.pid));
    }
    match (o.rank, o.world_size) {
        (Some(r), Some(w)) => who.push(format!("rank {r} of {w}")),
        (Some(r), None) => who.push(format!("rank {r}")),
        _ => {}
    }
    if !who.is_empty() {
        line(out, &format!("  {}", who.join(", ")));
    }
    for gpu in &o.gpus {
        line(
            out,
            &format!(
                "  GPU {}: {}, {}",
                gpu.index,
                gpu.name,
                format_bytes(gpu.total_memory_bytes)
            ),
        );
    }
    let steps = match (o.first_step, o.last_step) {
        (Some(a), Some(b)) if a != b => format!(" ({}-{})", format_count(a), format_count(b)),
        _ => String::new(),
    };
    line(
        out,
        &format!(
            "  {} recorded: {}, {}, {}{steps}",
            format_duration_us(o.duration_us),
            counted(o.samples as u64, "sample"),
            counted(o.marks as u64, "mark"),
            counted(o.steps as u64, "step"),
        ),
    );
    if let Some(m) = &o.marks_sampled {
        wrap(
            out,
            &format!(
                "a fast loop ({} an iteration): every iteration marked up to step {}, then one \
                 in {} at most ({} marked steps), and every eval, checkpoint and long input",
                format_duration_us(m.iteration_us),
                format_count(m.from_step.saturating_sub(1)),
                m.every,
                format_count(o.marked_steps as u64)
            ),
            2,
            4,
        );
    }
    wrap(out, &headline::ending(trace), 2, 4);
    if let Some(oom) = headline::first_oom(trace) {
        wrap(out, &oom, 2, 4);
    }
    if o.dropped_total > 0 {
        let tags: Vec<String> = o
            .dropped
            .iter()
            .map(|d| format!("tag {}: {}", d.record_tag, format_count(d.count)))
            .collect();
        line(
            out,
            &format!(
                "  the recorder dropped {} records ({}): numbers may miss events",
                format_count(o.dropped_total),
                tags.join(", ")
            ),
        );
    }
    if let Some(primary) = o
        .primary_metric
        .as_ref()
        .filter(|_| !trace.marks.is_empty())
    {
        line(out, &format!("  memory at marks is read as `{primary}`"));
    } else if trace.marks.is_empty() && trace.attached().is_some() {
        wrap(out, ATTACHED_HINT, 2, 4);
    } else if trace.marks.is_empty() {
        wrap(out, &format!("no stage marks: {NO_MARKS_HINT}"), 2, 4);
    }
    if let Some(shm) = analysis
        .shared_memory
        .filter(|s| s.run_bytes() >= MIB || s.peak_fraction() >= 0.5)
    {
        // Host memory outside the processes: what DataLoader workers hand over.
        wrap(
            out,
            &format!(
                "shared memory (/dev/shm): at most {} of its {} ({}), {} of it the run's",
                format_bytes(shm.peak_bytes),
                format_bytes(shm.size_bytes),
                format_percent(shm.peak_fraction()),
                format_bytes(shm.run_bytes())
            ),
            2,
            4,
        );
    }
}

/// How to get stages into a trace that has none: the terminal and the viewer say the same.
pub const NO_MARKS_HINT: &str = "for stages and steps, run a Python program under `collector \
run` with the zero-code hooks (on unless --no-python-hooks), or mark stages yourself with \
oomscope_probe.mark() or the Rust Probe; without marks, growth is judged over time";

/// What a trace recorded from outside a running process can and cannot say.
pub const ATTACHED_HINT: &str = "recorded from outside, with no stage marks: growth is judged \
over time, and what memory did before the attach is not in the trace; for stages and steps, \
run the program under `collector run`";

fn peaks(out: &mut String, analysis: &Analysis) {
    if analysis.peaks.is_empty() {
        return;
    }
    section(out, "Peaks");
    let width = analysis
        .peaks
        .iter()
        .map(|p| p.metric.label().len())
        .max()
        .unwrap_or(0)
        .min(24);
    for p in &analysis.peaks {
        let at = match peak_place(p) {
            place if place.is_empty() => place,
            place => format!(" {place}"),
        };
        line(
            out,
            &shorten(
                &format!(
                    "  {:<width$}  {:>9}{at}",
                    shorten(&p.metric.label(), width),
                    format_bytes(p.bytes)
                ),
                WIDTH,
            ),
        );
        if let Some(after) = &p.after_program_end {
            wrap(
                out,
                &format!(
                    "then {} {} after the program's last line, in the interpreter's shutdown \
                     (atexit handlers, objects freed): not the run's",
                    format_bytes(after.bytes),
                    format_duration_us(after.after_us)
                ),
                4,
                4,
            );
        }
    }
    let host_peak = |kind| analysis.peaks.iter().find(|p| p.measure == measured(kind));
    if let (Some(rss), Some(pss)) = (
        host_peak(CounterKind::HostRss),
        host_peak(CounterKind::HostPss),
    ) && let Some(shared) = shared_share(rss.bytes, pss.bytes)
    {
        wrap(
            out,
            &format!(
                "host.rss counts pages the program's processes share once per process; host.pss \
                 counts them once: {} of the RSS peak is shared (forked workers, shared \
                 libraries), and host.pss is the memory in use",
                format_percent(shared)
            ),
            4,
            4,
        );
    }
    if let Some(text) = breakdown_peak(&analysis.peaks).and_then(breakdown_line) {
        wrap(out, &text, 4, 4);
    }
}

/// Section titles the terminal prints and the viewer shows over the same lines.
pub mod titles {
    /// Over [`super::largest_growth_line`].
    pub const LARGEST_GROWTH: &str = "Largest growth between two marks";
    /// Over [`super::time_trend_lines`].
    pub const TIME_TRENDS: &str =
        "Growth over time (no step marks; the floor of each moment, after warm-up)";
    /// Over [`super::leak_lines`].
    pub const LEAKS: &str = "Leaks (memory at the same stage, across steps)";
    /// Over [`super::held_line`].
    pub const HELD: &str =
        "What grew (live tensors and the program's containers counted twice, apart)";
    /// Over [`super::allocator_lines`].
    pub const ALLOCATOR: &str = "Allocator";
    /// Over [`super::transition_lines`].
    pub const EVAL: &str = "Eval (memory before, during and after each eval)";
    /// Over [`super::oom_line`].
    pub const OOMS: &str = "Out of memory";
    /// Over [`super::compare_lines`].
    pub const COMPARE_FINDINGS: &str = "Findings, A → B";
}

fn growth_and_leaks(out: &mut String, analysis: &Analysis) {
    if let Some(g) = &analysis.largest_growth {
        section(out, titles::LARGEST_GROWTH);
        wrap(
            out,
            &largest_growth_line(g, analysis.input_peak.as_ref()),
            2,
            4,
        );
    }
    let trends = time_trend_lines(analysis);
    if !trends.is_empty() {
        section(out, titles::TIME_TRENDS);
        for text in &trends {
            wrap(out, text, 2, 4);
        }
    }
    let leaks = leak_lines(analysis);
    if !leaks.is_empty() {
        section(out, titles::LEAKS);
        for text in &leaks {
            wrap(out, text, 2, 4);
        }
    }
    if !analysis.held.is_empty() {
        section(out, titles::HELD);
        for (h, times) in held_groups(&analysis.held) {
            let mut line = held_line(h);
            if times > 1 {
                // The same group found again by later pairs of counts (each eval, after each
                // cool-down): said once, the latest, with how often.
                line.push_str(&format!(
                    " (found by {times} pairs of counts; the latest shown)"
                ));
            }
            wrap(out, &line, 2, 4);
        }
    }
}

/// The rows of the same group (what, on which clock, held by what) once each, the latest pair's,
/// with how many pairs of counts found it; in the order of their first row.
fn held_groups(held: &[HeldTensors]) -> Vec<(&HeldTensors, usize)> {
    let mut out: Vec<(&HeldTensors, usize)> = Vec::new();
    for h in held {
        match out.iter_mut().find(|(o, _)| o.same_group(h)) {
            Some((o, n)) => {
                *n += 1;
                if h.t_us > o.t_us {
                    *o = h;
                }
            }
            None => out.push((h, 1)),
        }
    }
    out
}

/// One group of live tensors that grew, and what holds it: "+8 float32[64x1024]
/// (AddmmBackward0) on cpu, +2.00 MiB over steps 10-18: list `val_losses` (22 items)".
pub fn held_line(h: &HeldTensors) -> String {
    let (from, to) = (format_count(h.from_step), format_count(h.to_step));
    // The span and its unit on the clock the counts were taken on.
    let (span, unit) = match h.clock {
        HeldClock::Step => (format!("over steps {from}-{to}"), "step"),
        HeldClock::Forward => (format!("over forwards {from}-{to}"), "forward"),
        HeldClock::Epoch => (
            format!("between the epoch starts at steps {from} and {to}"),
            "epoch",
        ),
        HeldClock::Eval => (format!("over batches {from}-{to} of an eval"), "batch"),
    };
    if h.is_graph() {
        return format!(
            "+{} autograd nodes {span} behind `{}`, one {}{} tensor on {}: each step's graph \
             stays attached to it",
            format_count(h.count),
            h.holder,
            h.dtype,
            if h.grad_fn.is_empty() {
                String::new()
            } else {
                format!(" ({})", h.grad_fn)
            },
            h.device
        );
    }
    let per_step = if h.clock != HeldClock::Epoch && h.to_step > h.from_step && h.per_step() >= 1 {
        format!(" ({} a {unit})", format_count(h.per_step()))
    } else {
        String::new()
    };
    let what = if h.kind == HeldKind::Objects {
        // Items a container gained: `dtype` says what they are.
        format!(
            "+{} {}, +{} {span}{per_step}",
            format_count(h.count),
            if h.dtype.is_empty() {
                "items"
            } else {
                &h.dtype
            },
            format_bytes(h.bytes)
        )
    } else {
        format!(
            "+{} {}[{}]{} on {}, +{} {span}{per_step}",
            format_count(h.count),
            h.dtype,
            h.shape,
            if h.grad_fn.is_empty() {
                String::new()
            } else {
                format!(" ({})", h.grad_fn)
            },
            h.device,
            format_bytes(h.bytes)
        )
    };
    let holder = crate::phrases::holder(h);
    if holder.is_empty() {
        what
    } else {
        format!("{what}: {holder}")
    }
}

/// The largest rise between two consecutive marks, in words, with the step's input when that
/// step is the input-driven peak.
pub fn largest_growth_line(
    g: &oomscope_analysis::facts::Growth,
    input: Option<&oomscope_analysis::facts::InputPeak>,
) -> String {
    let why = input
        .filter(|_| oomscope_analysis::facts::is_train(g.phase))
        .and_then(|p| Some((p, p.long_input(g.step)?)))
        .map(|(p, long)| {
            format!(
                "; that step's input was {:.1}× a median step's ({} against {})",
                long.elements as f64 / p.median_elements.max(1) as f64,
                long.shape,
                p.median_shape
            )
        })
        .unwrap_or_default();
    format!(
        "+{} of {} from {} (step {}) to {} (step {}){}{why}",
        format_bytes(g.bytes),
        g.metric,
        g.from_stage,
        format_count(g.from_step),
        g.to_stage,
        format_count(g.step),
        g.phase.suffix(),
    )
}

/// One line per time trend (traces without step marks): rate, fit, span and where it leads.
pub fn time_trend_lines(analysis: &Analysis) -> Vec<String> {
    analysis
        .time_trends
        .iter()
        .map(|t| {
            let mut text = format!(
                "{}: {}/min, R² {:.2}, {} to {}, {}",
                t.metric,
                format_signed_bytes_f64(t.slope_bytes_per_s * 60.0),
                t.r_squared,
                format_duration_us(t.from_us),
                format_duration_us(t.to_us),
                format_signed_bytes(t.growth_bytes),
            );
            match (t.is_leak, t.sustained) {
                (true, _) => text.push_str("; grows steadily"),
                (false, false) => text.push_str("; levels off"),
                // A straight rise that added less than a leak must: say so, not "no growth".
                (false, true) if t.straight() && t.growth_bytes > 0 => text.push_str(&format!(
                    "; rises steadily, by less than the {} a leak is told at",
                    format_bytes(t.min_leak_growth_bytes)
                )),
                (false, true) => text.push_str("; no steady growth"),
            }
            if let Some(us) = t.time_to_full_us {
                text.push_str(&format!("; full in about {}", format_duration_us(us)));
            }
            text
        })
        .collect()
}

/// One line per leaking stage: its first leaking metric (primary first) with the rate, the fit,
/// the steps, the growth and where it fills memory, naming the stage's other leaking metrics.
pub fn leak_lines(analysis: &Analysis) -> Vec<String> {
    let leaks: Vec<_> = analysis.leaks().collect();
    let mut lines = Vec::new();
    let mut i = 0;
    while i < leaks.len() {
        let f = leaks[i];
        let others: Vec<String> = leaks[i + 1..]
            .iter()
            .take_while(|g| g.stage == f.stage)
            .map(|g| g.metric.label())
            .collect();
        i += 1 + others.len();
        let unit = f.clock.unit();
        let mut text = format!(
            "{} ({}): {}/{unit}, R² {:.2}, {unit}s {}-{}, +{}",
            f.stage,
            f.metric,
            format_signed_bytes_f64(f.slope_bytes_per_step),
            f.r_squared,
            format_count(f.first_step),
            format_count(f.last_step),
            format_bytes(f.growth_bytes.max(0).unsigned_abs()),
        );
        if let Some(p) = &f.projection {
            if p.steps_remaining == 0 {
                text.push_str("; already full");
            } else {
                text.push_str(&format!(
                    "; full at {unit} {}",
                    format_count(p.full_at_step)
                ));
                if let Some(us) = p.time_to_full_us {
                    text.push_str(&format!(" (in about {})", format_duration_us(us)));
                }
            }
        }
        if !others.is_empty() {
            text.push_str(&format!("; {} grows too", others.join(", ")));
        }
        lines.push(text);
    }
    lines
}

fn allocator(out: &mut String, analysis: &Analysis) {
    let lines = allocator_lines(analysis);
    if lines.is_empty() {
        return;
    }
    section(out, titles::ALLOCATOR);
    for text in &lines {
        wrap(out, text, 2, 4);
    }
}

/// The allocator's state: reserved never used at once, retries, split blocks, and memory
/// outside the allocator. Empty without allocator statistics.
pub fn allocator_lines(analysis: &Analysis) -> Vec<String> {
    let Some(p) = &analysis.pressure else {
        return Vec::new();
    };
    let g = &p.peak_gap;
    let mut text = format!(
        "peak reserved {} vs peak allocated {}: {} ({}) never used at once",
        format_bytes(g.reserved_bytes),
        format_bytes(g.allocated_bytes),
        format_bytes(g.bytes),
        format_percent(g.fraction_of_reserved),
    );
    if let Some(r) = p.alloc_retries {
        text.push_str(&format!("; {} retries", format_count(r)));
    }
    if let Some(s) = p.max_inactive_split_bytes {
        text.push_str(&format!("; up to {} in split blocks", format_bytes(s)));
    }
    let mut lines = vec![text];
    if let Some(o) = &analysis.outside_allocator {
        lines.push(format!(
            "outside the allocator (CUDA context, libraries): {} median",
            format_signed_bytes(o.median_bytes)
        ));
    }
    lines
}

fn transitions(out: &mut String, analysis: &Analysis) {
    let all = &analysis.phase_transitions;
    if all.is_empty() {
        return;
    }
    section(out, titles::EVAL);
    for text in transition_lines(analysis).iter().take(MAX_TRANSITIONS) {
        line(out, &format!("  {text}"));
    }
    if all.len() > MAX_TRANSITIONS {
        line(
            out,
            &format!("  ... and {} more", all.len() - MAX_TRANSITIONS),
        );
    }
}

/// One line per eval: where it started, its marks, the jump on entering and what it kept.
pub fn transition_lines(analysis: &Analysis) -> Vec<String> {
    let opt_bytes = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), format_signed_bytes);
    analysis
        .phase_transitions
        .iter()
        .map(|t| {
            // Growth inside the eval, batch by batch, when there is some.
            let within = t
                .within_growth_bytes
                .filter(|g| *g > 0)
                .map_or_else(String::new, |g| {
                    format!(
                        ", {} over its {} batches",
                        format_signed_bytes(g),
                        format_count(t.eval_batches as u64)
                    )
                });
            if t.before_stage.is_none() {
                return format!(
                    "eval before the first step: {} marks{within}",
                    format_count(t.eval_marks as u64),
                );
            }
            let kept = match t.retained_bytes {
                Some(_) => format!("kept {}", opt_bytes(t.retained_bytes)),
                None => "no training after it".to_owned(),
            };
            format!(
                "eval at step {}: {} marks, jump {}{within}, {kept}",
                format_count(t.entry_step),
                format_count(t.eval_marks as u64),
                opt_bytes(t.jump_bytes),
            )
        })
        .collect()
}

fn ooms(out: &mut String, analysis: &Analysis) {
    if analysis.ooms.is_empty() {
        return;
    }
    section(out, titles::OOMS);
    for o in &analysis.ooms {
        wrap(out, &oom_line(o), 2, 4);
        if let Some(first) = error_line(o) {
            line(out, &shorten(&format!("    \"{first}\""), WIDTH));
        }
        alive(out, o);
    }
}

/// Rows of "alive at the OOM, by source line" printed under an OOM.
const MAX_ALIVE_ROWS: usize = 8;

fn alive(out: &mut String, o: &OomContext) {
    if o.alive.is_empty() {
        return;
    }
    line(out, "    alive at the OOM, by source line:");
    for a in o.alive.iter().take(MAX_ALIVE_ROWS) {
        line(
            out,
            &shorten(
                &format!(
                    "    {:>10}  {:>12}  {}",
                    format_bytes(a.bytes),
                    tensor_count(a.count),
                    source_line(a)
                ),
                WIDTH,
            ),
        );
    }
    if o.alive.len() > MAX_ALIVE_ROWS {
        let rest = &o.alive[MAX_ALIVE_ROWS..];
        line(
            out,
            &format!(
                "    {:>10}  {:>12}  {} more lines",
                format_bytes(rest.iter().map(|a| a.bytes).sum()),
                tensor_count(rest.iter().map(|a| a.count).sum()),
                rest.len()
            ),
        );
    }
}

/// The first line of what an OOM said (the error the program printed, the kernel's account of a
/// kill, or what the collector inferred from a SIGKILL), if anything.
pub fn error_line(o: &OomContext) -> Option<String> {
    let message = crate::phrases::oom_message(o);
    message
        .lines()
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
}

/// An OOM in one line: kind, time, whether it was caught, step, stage, and the memory facts.
pub fn oom_line(o: &OomContext) -> String {
    let mut text = match o.kind {
        OomKind::Gpu => "GPU".to_owned(),
        OomKind::Host => "host".to_owned(),
    };
    text.push_str(&format!(" OOM at {}", format_duration_us(o.event.t_us)));
    if !o.fatal {
        text.push_str(" (caught)");
    }
    if let Some(step) = o.event.step {
        text.push_str(&format!(", step {}", format_count(step)));
    }
    match (&o.event.stage, &o.next_stage) {
        (Some(s), Some(n)) => text.push_str(&format!(", between {s} and {n}")),
        (Some(s), None) => text.push_str(&format!(", after {s}")),
        _ => {}
    }
    let mut facts = Vec::new();
    if let Some(r) = o.event.requested_bytes {
        facts.push(format!("requested {}", format_bytes(r)));
    }
    match (o.event.device_free_bytes, o.event.device_total_bytes) {
        (Some(f), Some(t)) => {
            facts.push(format!("free {} of {}", format_bytes(f), format_bytes(t)));
        }
        (Some(f), None) => facts.push(format!("free {}", format_bytes(f))),
        _ => {}
    }
    if let Some(a) = o.allocated_bytes {
        facts.push(format!("allocated {}", format_bytes(a)));
    }
    if let Some(r) = o.reserved_bytes {
        facts.push(format!("reserved {}", format_bytes(r)));
    }
    // A launcher's kill happened in its task's cgroup, perhaps on another node: this host's
    // figures are not about it.
    if o.kind == OomKind::Host && o.event.source != oomscope_format::OomSource::LauncherKill {
        if let Some(r) = o.host_rss_bytes {
            facts.push(format!("in use {}", format_bytes(r)));
        }
        if let Some(a) = o.host_available_bytes {
            facts.push(format!("available {}", format_bytes(a)));
        }
    }
    if !facts.is_empty() {
        text.push_str(": ");
        text.push_str(&facts.join(", "));
    }
    text
}

fn findings(out: &mut String, analysis: &Analysis) {
    let findings: Vec<Worded> = analysis.findings.iter().map(worded).collect();
    findings_of(out, &findings);
    if analysis.findings.is_empty() {
        slow_growth(out, analysis);
    }
}

/// Under "nothing to change", a steady rise too small to be a leak (the clean verdict says it
/// too).
fn slow_growth(out: &mut String, analysis: &Analysis) {
    if let Some(f) = oomscope_analysis::facts::slow_growth(analysis) {
        let words = crate::verdict::slow_growth_words(f);
        wrap(out, &format!("but {words}"), 2, 4);
    }
}

/// The findings section of any analysis (a trace's, a snapshot's), in words.
pub fn findings_of(out: &mut String, findings: &[Worded]) {
    section(out, "Findings");
    if findings.is_empty() {
        line(
            out,
            "  nothing to change: no rule found evidence of a memory problem",
        );
        return;
    }
    for f in findings {
        let tag = format!("[{}]", f.severity.label().to_ascii_uppercase());
        wrap(out, &format!("{tag} {} ({})", f.title, f.kind.id()), 2, 4);
        wrap(out, &f.explanation, 4, 4);
        wrap(out, &format!("→ {}", f.change), 4, 6);
    }
}

/// The share of an RSS figure that is shared pages, from the PSS beside it; `None` when it is
/// under 10% (nothing worth a line).
fn shared_share(rss_bytes: u64, pss_bytes: u64) -> Option<f64> {
    let share = 1.0 - pss_bytes as f64 / rss_bytes.max(1) as f64;
    (share >= 0.1).then_some(share)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_analysis::{AnalysisOptions, analyze};
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    fn summary(trace: &Trace) -> String {
        render(trace, &analyze(trace, &AnalysisOptions::default()))
    }

    fn assert_fits(text: &str) {
        for l in text.lines() {
            assert!(
                l.chars().count() <= WIDTH,
                "too wide ({}): {l}",
                l.chars().count()
            );
        }
    }

    #[test]
    fn healthy_run_summary() {
        let text = summary(&Run::default().build());
        assert_fits(&text);
        assert!(text.starts_with("oomscope: python train.py\n  host gpu-node-7, pid 4242\n"));
        assert!(text.contains("  GPU 0: NVIDIA H100 80GB HBM3, 80.0 GiB\n"));
        assert!(text.contains("60 steps (0-59)"));
        assert!(text.contains("exited with code 0; the trace ended cleanly"));
        assert!(
            text.contains("  peak_allocated   28.0 GiB  at post_forward of step 0\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "    peak_allocated 28.0 GiB = weights 4.00 GiB + gradients 4.00 GiB + optimizer \
                 state 8.00 GiB +\n    activations 12.0 GiB; beside it on the GPU: the allocator's \
                 cache 512 MiB + outside the\n    allocator 600 MiB (CUDA context, NCCL, other \
                 libraries)\n"
            ),
            "{text}"
        );
        assert!(text.contains("Stages (allocated,"));
        assert!(text.contains("Stages (reserved,"));
        assert!(text.contains(
            "  post_forward                      60   28.0 GiB   28.0 GiB   +12.0 GiB   +12.0 GiB\n"
        ), "{text}");
        assert!(text.contains(
            "  pre_forward                       60   16.0 GiB   16.0 GiB         0 B         0 B\n"
        ), "{text}");
        assert!(
            text.contains(
                "+12.0 GiB of allocated from pre_forward (step 0) to post_forward (step 0)"
            )
        );
        assert!(!text.contains("Leaks"));
        assert!(!text.contains("Out of memory"));
        assert!(text.contains("nothing to change"));
    }

    #[test]
    fn a_steady_rise_under_the_leak_floor_is_said_under_nothing_to_change() {
        // 1 MiB per step over 60 steps: straight, but 59 MiB is under the 64 MiB floor.
        let trace = Run {
            leak_bytes_per_step: MIB,
            ..Run::default()
        }
        .build();
        let analysis = analyze(&trace, &AnalysisOptions::default());
        assert!(analysis.findings.is_empty(), "{:?}", analysis.findings);
        for text in [render(&trace, &analysis), render_brief(&trace, &analysis)] {
            assert_fits(&text);
            let findings = text.split("Findings\n").nth(1).unwrap();
            assert!(
                findings.starts_with(
                    "  nothing to change: no rule found evidence of a memory problem\n  but memory at "
                ),
                "{text}"
            );
            assert!(
                findings.contains("rises steadily by 1.00 MiB/step"),
                "{text}"
            );
        }
        // A run that does not grow says nothing more.
        let flat = summary(&Run::default().build());
        assert!(!flat.contains("rises steadily"), "{flat}");
    }

    #[test]
    fn troubled_run_summary() {
        let run = Run {
            steps: 200,
            leak_bytes_per_step: 64 * MIB,
            fragmentation_bytes: 20 * GIB,
            oom_at_step: Some(199),
            eval_every: Some(50),
            eval_jump_bytes: 2 * GIB,
            eval_retained_bytes: GIB,
            ..Run::default()
        };
        let mut trace = run.build();
        trace.end_us = None;
        trace.metadata.command = vec!["python".to_owned(), "x".repeat(300)];
        let text = summary(&trace);
        assert_fits(&text);
        assert!(text.contains("the trace did not end cleanly"));
        assert!(text.contains("Leaks (memory at the same stage, across steps)"));
        assert!(
            text.contains(
                "  post_optimizer_step (allocated): +83.3 MiB/step, R² 1.00, steps 0-198"
            )
        );
        assert!(text.contains("; reserved grows too"));
        assert!(text.contains("GPU OOM at"));
        assert!(
            text.contains("step 199, between pre_forward and post_forward: requested 2.00 GiB")
        );
        assert!(text.contains("\"torch.OutOfMemoryError: CUDA out of memory.\""));
        assert!(
            text.contains("eval at step 49: 3 marks, jump +2.00 GiB, kept +1.06 GiB"),
            "{text}"
        );
        assert!(text.contains("[CRITICAL] Out of GPU memory at step 199 (oom)"));
        assert!(text.contains("(fragmentation)"));
        assert!(text.contains("    → set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
        // Critical findings come before warnings.
        let critical = text.find("[CRITICAL]").unwrap();
        let warning = text.find("[WARNING]").unwrap();
        assert!(critical < warning);
    }

    #[test]
    fn empty_trace_still_renders() {
        let trace = Trace::default();
        let text = summary(&trace);
        assert!(text.starts_with("oomscope: (unknown command)\n"));
        assert!(text.contains("no stage marks"));
        assert!(text.contains("nothing to change"));
    }
}

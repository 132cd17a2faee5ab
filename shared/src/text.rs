//! The terminal summary: an [`Analysis`] as plain text.
//!
//! `collector run` prints this when the watched program ends, often in a CI log or over SSH, so it
//! is plain text without colour, at most 100 columns wide, with the most useful facts first:
//! what ran, how high memory went, what each stage costs, and what to change. Every number comes
//! from the [`Analysis`] (nothing is recomputed here), formatted by [`crate::units`].

use crate::analysis::Analysis;
use crate::analysis::metrics::MetricKey;
use crate::analysis::oom::{OomContext, OomKind};
use crate::analysis::peaks::{Measure, memory_peak};
use crate::analysis::ranks::RankAnalysis;
use crate::analysis::stages::StageTable;
use crate::headline;
use crate::model::{AliveSite, Trace};
use crate::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_percent,
    format_signed_bytes, format_signed_bytes_f64,
};

/// Width the summary fits in.
pub const WIDTH: usize = 100;

/// Widest stage name shown in the stage table before it is shortened.
const STAGE_COLUMN: usize = 28;

/// At most this many eval transitions are listed (the rest are counted).
const MAX_TRANSITIONS: usize = 5;

/// Renders the terminal summary.
pub fn render(trace: &Trace, analysis: &Analysis) -> String {
    let mut out = String::new();
    overview(&mut out, trace, analysis);
    peaks(&mut out, analysis);
    if let Some(r) = &analysis.ranks {
        ranks(&mut out, r, true);
    }
    stage_tables(&mut out, analysis);
    growth_and_leaks(&mut out, analysis);
    allocator(&mut out, analysis);
    transitions(&mut out, analysis);
    ooms(&mut out, analysis);
    findings(&mut out, analysis);
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
    for f in analysis.findings.iter().take(BRIEF_FINDINGS) {
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

/// The `collector estimate` table.
pub fn render_estimate(e: &crate::estimate::Estimate, what: &str) -> String {
    use crate::units::format_bytes;
    let mut out = String::new();
    wrap(&mut out, &format!("Training memory estimate: {what}"), 0, 2);
    let row = |out: &mut String, label: &str, bytes: u64, note: &str| {
        line(
            out,
            format!("  {label:<22} {:>10}  {note}", format_bytes(bytes)).trim_end(),
        );
    };
    let frozen = e.parameters - e.trainable_parameters;
    let weights_note = if frozen > 0 {
        format!("{} of them frozen", format_count(frozen))
    } else {
        String::new()
    };
    row(&mut out, "weights", e.weights_bytes, &weights_note);
    row(&mut out, "gradients", e.gradients_bytes, "");
    if e.master_weights_bytes > 0 {
        row(&mut out, "fp32 master weights", e.master_weights_bytes, "");
    }
    row(&mut out, "optimizer state", e.optimizer_bytes, "");
    line(
        &mut out,
        &format!(
            "  (model state: {} bytes per trainable parameter before sharding)",
            e.bytes_per_trainable_parameter
        ),
    );
    match e.activations_bytes {
        Some(a) => {
            let note = e
                .logits_bytes
                .map(|l| format!("of which logits for the loss {}", format_bytes(l)))
                .unwrap_or_default();
            row(&mut out, "activations", a, &note);
        }
        None => line(&mut out, "  activations                   ?  (unknown)"),
    }
    row(&mut out, "CUDA context", e.cuda_context_bytes, "");
    row(
        &mut out,
        "allocator overhead",
        e.allocator_overhead_bytes,
        "caching allocator rounding and fragmentation",
    );
    let share = match (e.fraction_of_gpu, e.gpu_memory_bytes) {
        (Some(f), Some(g)) => format!("{:.0}% of the GPU's {}", f * 100.0, format_bytes(g)),
        _ => String::new(),
    };
    row(&mut out, "total per GPU", e.total_bytes, &share);
    if let Some(batch) = e.max_batch_within_90_percent {
        line(
            &mut out,
            &format!("  largest batch within 90% of the GPU: {batch}"),
        );
    }
    for w in &e.warnings {
        wrap(&mut out, &format!("warning: {w}"), 0, 2);
    }
    out
}

/// Appends a line.
pub(crate) fn line(out: &mut String, text: &str) {
    out.push_str(text);
    out.push('\n');
}

pub(crate) fn section(out: &mut String, title: &str) {
    out.push('\n');
    line(out, title);
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
    } else if trace.marks.is_empty() {
        wrap(out, &format!("no stage marks: {NO_MARKS_HINT}"), 2, 4);
    }
}

/// How to get stages into a trace that has none: the terminal and the viewer say the same.
pub const NO_MARKS_HINT: &str = "for stages and steps, run a Python program under `collector \
run` with the zero-code hooks (on unless --no-python-hooks), or mark stages yourself with \
oomscope_probe.mark() or the Rust Probe; without marks, growth is judged over time";

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
        let at = match p.place() {
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
    }
    let host_peak = |m: Measure| analysis.peaks.iter().find(|p| p.measure == m);
    if let (Some(rss), Some(pss)) = (host_peak(Measure::HostRss), host_peak(Measure::HostPss))
        && let Some(shared) = shared_share(rss.bytes, pss.bytes)
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
    let Some(c) = memory_peak(&analysis.peaks).and_then(|p| p.components.as_ref()) else {
        return;
    };
    let mut parts = vec![
        format!("parameters {}", format_bytes(c.breakdown.parameters_bytes)),
        format!("gradients {}", format_bytes(c.breakdown.gradients_bytes)),
        format!(
            "optimizer {}",
            format_bytes(c.breakdown.optimizer_state_bytes)
        ),
    ];
    if c.breakdown.buffers_bytes > 0 {
        parts.push(format!(
            "buffers {}",
            format_bytes(c.breakdown.buffers_bytes)
        ));
    }
    parts.extend(
        c.breakdown
            .extras
            .iter()
            .map(|e| format!("{} {}", e.name, format_bytes(e.bytes))),
    );
    let mut text = format!(
        "model state {} ({})",
        format_bytes(c.total_bytes),
        parts.join(", ")
    );
    if let Some(a) = c.activations_bytes {
        text.push_str(&format!(
            "; activations {} (peak minus model state)",
            format_bytes(a)
        ));
    }
    wrap(out, &text, 4, 4);
}

/// The summary of a job's traces analysed together (`collector summary DIR`): the traces, the
/// ranks side by side with each one's stage table, and the findings.
pub fn render_job(sources: &[(String, String)], r: &RankAnalysis) -> String {
    let mut out = String::new();
    line(
        &mut out,
        &format!(
            "oomscope: {} traces, {} ranks",
            sources.len(),
            r.ranks.len()
        ),
    );
    for (source, about) in sources {
        line(&mut out, &format!("  {source}: {about}"));
    }
    ranks(&mut out, r, true);
    let findings = crate::analysis::recommend::job_findings(r);
    section(&mut out, "Findings");
    if findings.is_empty() {
        line(
            &mut out,
            "  nothing to change: no rule found evidence of a memory problem on any rank",
        );
    }
    for f in &findings {
        let tag = format!("[{}]", f.severity.label().to_ascii_uppercase());
        wrap(
            &mut out,
            &format!("{tag} {} ({})", f.title, f.kind.id()),
            2,
            4,
        );
        wrap(&mut out, &f.explanation, 4, 4);
        wrap(&mut out, &format!("→ {}", f.change), 4, 6);
    }
    out
}

/// One trace of a job in a line: where it ran and how it ended (`host node-1, exited with code 0
/// after 12.0 s`).
pub fn trace_about(trace: &Trace) -> String {
    format!("host {}, {}", trace.metadata.host, headline::ending(trace))
}

/// The ranks side by side: the worst rank and the spread first, a row per rank, imbalance, and
/// (in the full summary) each rank's stage table.
pub fn ranks(out: &mut String, r: &RankAnalysis, each_stage_table: bool) {
    section(out, &format!("Ranks ({})", r.ranks.len()));
    if let Some(highest) = rank_highest(r) {
        wrap(out, &highest, 2, 4);
    }
    let header = format!(
        "  {:>5} {:>8} {:<14} {:>6} {:>6} {:>10} {:>10}  {}",
        "rank", "pid", "node", "marks", "step", "host peak", "dev peak", "ended"
    );
    line(out, header.trim_end());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for rank in &r.ranks {
        line(
            out,
            format!(
                "  {:>5} {:>8} {:<14} {:>6} {:>6} {:>10} {:>10}  {}",
                rank.rank,
                opt(rank.pid.map(|p| p.to_string())),
                shorten(&node_of(rank), 14),
                format_count(rank.marks as u64),
                opt(rank.last_step.map(format_count)),
                opt(rank.peak_host_bytes.map(format_bytes)),
                opt(rank.peak_device_bytes.map(format_bytes)),
                rank_ended(rank)
            )
            .trim_end(),
        );
    }
    if let Some(imbalance) = rank_imbalance(r) {
        wrap(out, &imbalance, 2, 4);
    }
    if each_stage_table {
        for rank in &r.ranks {
            if let Some(primary) = rank.stage_table.primary_metric {
                line(out, "");
                line(out, &format!("  rank {}:", rank.rank));
                stage_table(out, &rank.stage_table, primary);
            }
        }
    }
}

/// The ranks' headline: the rank with the most memory and the spread between the highest and
/// the lowest (`highest: rank 1 with 900 MiB of host memory; spread between ranks 300 MiB`).
pub fn rank_highest(r: &RankAnalysis) -> Option<String> {
    let (worst, spread, device) = r.worst()?;
    let peak = if device {
        worst.peak_device_bytes
    } else {
        worst.peak_host_bytes
    };
    Some(format!(
        "highest: rank {} with {} of {} memory; spread between ranks {}",
        worst.rank,
        peak.map(format_bytes).unwrap_or_default(),
        if device { "device" } else { "host" },
        format_bytes(spread)
    ))
}

/// How a rank ended: its OOM (`OOM (host) at 3.2 s`), else its launcher's word, else `-`.
pub fn rank_ended(rank: &crate::analysis::ranks::RankSummary) -> String {
    match (&rank.oom, rank.exit) {
        (Some(o), _) => format!(
            "OOM ({}) at {}",
            if o.host { "host" } else { "device" },
            format_duration_us(o.t_us)
        ),
        (None, Some(status)) => crate::analysis::ranks::status_words(status),
        (None, None) => "-".to_owned(),
    }
}

/// The largest imbalance between ranks, when there is one (`imbalance at post_forward: rank 1
/// 900 MiB vs median 600 MiB (host.rss, +300 MiB)`).
pub fn rank_imbalance(r: &RankAnalysis) -> Option<String> {
    let i = r.imbalance.first()?;
    let more = r.imbalance.iter().filter(|j| j.rank == i.rank).count() - 1;
    Some(format!(
        "imbalance at {}: rank {} {} vs median{} {} ({}, +{}){}",
        i.stage,
        i.rank,
        format_bytes(i.max_bytes),
        i.group
            .as_ref()
            .map_or_else(String::new, |g| format!(" of group {g}")),
        format_bytes(i.median_bytes),
        i.metric,
        format_bytes(i.excess_bytes()),
        if more > 0 {
            format!("; rank {} leads at {more} more stage(s)", i.rank)
        } else {
            String::new()
        }
    ))
}

/// Where a rank ran: its trace's file name in a job (one file per node), else the host.
pub fn node_of(rank: &crate::analysis::ranks::RankSummary) -> String {
    std::path::Path::new(&rank.source)
        .file_stem()
        .map_or_else(|| rank.host.clone(), |s| s.to_string_lossy().into_owned())
}

fn stage_tables(out: &mut String, analysis: &Analysis) {
    let table = &analysis.stage_table;
    if table.rows.is_empty() {
        return;
    }
    let mut shown: Vec<MetricKey> = Vec::new();
    shown.extend(table.primary_metric);
    if table.metric_index(MetricKey::RESERVED).is_some() && !shown.contains(&MetricKey::RESERVED) {
        shown.push(MetricKey::RESERVED);
    }
    for metric in shown {
        stage_table(out, table, metric);
    }
}

fn stage_table(out: &mut String, table: &StageTable, metric: MetricKey) {
    let Some(m) = table.metric_index(metric) else {
        return;
    };
    section(
        out,
        &format!("Stages ({metric}, delta = change since the previous mark)"),
    );
    let header = format!(
        "  {:<STAGE_COLUMN$} {:>7} {:>10} {:>10} {:>11} {:>11}",
        "stage", "count", "mean", "max", "mean delta", "max delta"
    );
    line(out, header.trim_end());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for row in &table.rows {
        let s = &row.metrics[m];
        let name = format!("{}{}", row.stage, row.phase.suffix());
        line(
            out,
            &format!(
                "  {:<STAGE_COLUMN$} {:>7} {:>10} {:>10} {:>11} {:>11}",
                shorten(&name, STAGE_COLUMN),
                format_count(row.count as u64),
                opt(s.mean_bytes.map(format_bytes_f64)),
                opt(s.max_bytes.map(format_bytes)),
                opt(s.mean_delta_bytes.map(format_signed_bytes_f64)),
                opt(s.max_delta_bytes.map(format_signed_bytes)),
            ),
        );
    }
    if let Some(b) = &table.baseline {
        let vs: Vec<String> = table
            .rows
            .iter()
            .filter_map(|r| {
                let v = r.metrics[m].max_vs_baseline_bytes?;
                Some(format!("{} {}", r.stage, format_signed_bytes(v)))
            })
            .collect();
        wrap(
            out,
            &format!(
                "max vs {} of step {}: {}",
                b.stage,
                format_count(b.step),
                vs.join(", ")
            ),
            4,
            4,
        );
    }
}

/// `collector summary A --compare B`: what became of A's findings in B, the memory peak, every
/// metric's peak and the stage table side by side.
pub fn render_compare(a_name: &str, a: &Analysis, b_name: &str, b: &Analysis) -> String {
    use crate::analysis::compare::{compare_peaks, compare_stages};
    let mut out = String::new();
    line(&mut out, &format!("Comparison: A {a_name} · B {b_name}"));
    wrap(&mut out, &compare_headline(a, b), 2, 4);
    let changes = compare_lines(a, b);
    if !changes.is_empty() {
        section(&mut out, titles::COMPARE_FINDINGS);
        for text in &changes {
            wrap(&mut out, text, 2, 4);
        }
    }
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    let peaks = compare_peaks(a, b);
    if !peaks.is_empty() {
        section(&mut out, "Peaks");
        line(
            &mut out,
            &format!("  {:<24} {:>10} {:>10} {:>11}", "metric", "A", "B", "B - A"),
        );
        for p in &peaks {
            line(
                &mut out,
                &format!(
                    "  {:<24} {:>10} {:>10} {:>11}",
                    shorten(&p.metric.label(), 24),
                    opt(p.a_bytes.map(format_bytes)),
                    opt(p.b_bytes.map(format_bytes)),
                    opt(p.change_bytes().map(format_signed_bytes)),
                ),
            );
        }
    }
    if let Some((metric, rows)) = compare_stages(a, b) {
        section(&mut out, &format!("Stages ({metric})"));
        line(
            &mut out,
            &format!(
                "  {:<STAGE_COLUMN$} {:>10} {:>10} {:>12} {:>12}",
                "stage", "max A", "max B", "mean delta A", "mean delta B"
            ),
        );
        for r in &rows {
            line(
                &mut out,
                &format!(
                    "  {:<STAGE_COLUMN$} {:>10} {:>10} {:>12} {:>12}",
                    shorten(&r.stage, STAGE_COLUMN),
                    opt(r.a_max_bytes.map(format_bytes)),
                    opt(r.b_max_bytes.map(format_bytes)),
                    opt(r.a_mean_delta_bytes.map(format_signed_bytes_f64)),
                    opt(r.b_mean_delta_bytes.map(format_signed_bytes_f64)),
                ),
            );
        }
    }
    out
}

/// The comparison in one sentence, e.g. "Leak gone; out-of-memory error gone; peak_allocated
/// -1.10 GiB (3.20 GiB → 2.10 GiB)." — what the fix removed, what it brought, what stayed, and
/// how the memory peak moved.
pub fn compare_headline(a: &Analysis, b: &Analysis) -> String {
    use crate::analysis::compare::{FindingChange, diff_findings, memory_peaks};
    let mut parts: Vec<String> = diff_findings(a, b)
        .iter()
        .map(|c| match c {
            FindingChange::Gone(f) => format!("{} gone", f.kind.noun()),
            FindingChange::New(f) => format!("new: {}", f.kind.noun()),
            FindingChange::Still { b, .. } => format!("{} still there", b.kind.noun()),
        })
        .collect();
    if parts.is_empty() {
        parts.push("no problem found in either run".to_owned());
    }
    let peak = memory_peaks(a, b).and_then(|p| Some((p.metric, p.a_bytes?, p.b_bytes?)));
    if let Some((metric, before, after)) = peak {
        let label = metric.label();
        let name = match label.starts_with("peak") {
            true => label,
            false => format!("peak {label}"),
        };
        parts.push(format!(
            "{name} {} ({} → {})",
            format_signed_bytes(after as i64 - before as i64),
            format_bytes(before),
            format_bytes(after)
        ));
    }
    let mut text = parts.join("; ");
    if let Some(first) = text.get(..1) {
        text = first.to_uppercase() + &text[1..];
    }
    text + "."
}

/// One line per finding of either run: "Gone: …" with A's title, "New: …" and "Still there: …"
/// with B's.
pub fn compare_lines(a: &Analysis, b: &Analysis) -> Vec<String> {
    use crate::analysis::compare::{FindingChange, diff_findings};
    diff_findings(a, b)
        .iter()
        .map(|c| match c {
            FindingChange::Gone(f) => format!("Gone: {}", f.title),
            FindingChange::New(f) => format!("New: {}", f.title),
            FindingChange::Still { b, .. } => format!("Still there: {}", b.title),
        })
        .collect()
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
        wrap(out, &largest_growth_line(g), 2, 4);
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
}

/// The largest rise between two consecutive marks, in words.
pub fn largest_growth_line(g: &crate::analysis::stages::Growth) -> String {
    format!(
        "+{} of {} from {} (step {}) to {} (step {}){}",
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
            text.push_str(match (t.is_leak, t.sustained) {
                (true, _) => "; grows steadily",
                (false, false) => "; levels off",
                (false, true) => "; no steady growth",
            });
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
        let mut text = format!(
            "{} ({}): {}/step, R² {:.2}, steps {}-{}, +{}",
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
                text.push_str(&format!("; full at step {}", format_count(p.full_at_step)));
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
            let kept = match t.retained_bytes {
                Some(_) => format!("kept {}", opt_bytes(t.retained_bytes)),
                None => "the trace ended in eval".to_owned(),
            };
            format!(
                "eval at step {}: {} marks, jump {}, {kept}",
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

/// `train.py:42 (forward)`: a source line as the terminal and the viewer show it.
pub fn source_line(a: &AliveSite) -> String {
    let file = a.file.rsplit('/').next().unwrap_or(&a.file);
    match (a.line, a.function.as_ref()) {
        (0, _) => file.to_owned(),
        (line, "" | "?") => format!("{file}:{line}"),
        (line, function) => format!("{file}:{line} ({function})"),
    }
}

/// `1 tensor`, `3 tensors`.
pub fn tensor_count(count: u64) -> String {
    if count == 1 {
        "1 tensor".to_owned()
    } else {
        format!("{} tensors", format_count(count))
    }
}

/// The first line of the error the program printed at an OOM, if it printed one.
pub fn error_line(o: &OomContext) -> Option<&str> {
    o.event.message.lines().next().filter(|l| !l.is_empty())
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
    if o.kind == OomKind::Host && o.event.source != crate::model::OomSource::LauncherKill {
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
    findings_of(out, &analysis.findings);
    if analysis.findings.is_empty() {
        slow_growth(out, analysis);
    }
}

/// Under "nothing to change", a steady rise too small to be a leak (the clean verdict says it
/// too).
fn slow_growth(out: &mut String, analysis: &Analysis) {
    if let Some(f) = crate::verdict::slow_growth(analysis) {
        let words = crate::verdict::slow_growth_words(f);
        wrap(out, &format!("but {words}"), 2, 4);
    }
}

/// The findings section of any analysis (a trace's, a snapshot's).
pub(crate) fn findings_of(out: &mut String, findings: &[crate::analysis::recommend::Finding]) {
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

/// Cuts `text` to `width` characters, marking the cut with `~`.
pub(crate) fn shorten(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('~');
    cut
}

/// Unit words that stay on the line of the number before them.
const UNITS: [&str; 13] = [
    "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "us", "ms", "s", "min", "h", "steps",
];

/// Splits `text` into words for wrapping, keeping a number and its unit together ("24.0 GiB"),
/// and the digit groups of a count ("1 840").
fn wrap_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        let bare = word.trim_end_matches(|c: char| c.is_ascii_punctuation());
        let after_number = words
            .last()
            .is_some_and(|w| w.ends_with(|c: char| c.is_ascii_digit()));
        let digit_group = bare.len() == 3 && bare.chars().all(|c| c.is_ascii_digit());
        match words.last_mut() {
            Some(last) if after_number && (UNITS.contains(&bare) || digit_group) => {
                last.push(' ');
                last.push_str(word);
            }
            _ => words.push(word.to_owned()),
        }
    }
    words
}

/// Appends `text` word-wrapped to [`WIDTH`], the first line indented by `first` spaces and the
/// rest by `rest`. Words longer than a line are cut.
/// `1 mark`, `2 marks`, `12 345 marks`.
fn counted(n: u64, thing: &str) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("{} {thing}{s}", format_count(n))
}

pub(crate) fn wrap(out: &mut String, text: &str, first: usize, rest: usize) {
    let mut current = " ".repeat(first);
    let mut empty = true;
    for word in wrap_words(text) {
        let len = current.chars().count();
        if !empty && len + 1 + word.chars().count() > WIDTH {
            line(out, &current);
            current = " ".repeat(rest);
            empty = true;
        }
        if !empty {
            current.push(' ');
        }
        let room = WIDTH.saturating_sub(current.chars().count());
        current.push_str(&shorten(&word, room.max(1)));
        empty = false;
    }
    if !empty {
        line(out, &current);
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
    use crate::analysis::testkit::{GIB, MIB, Run};
    use crate::analysis::{AnalysisOptions, analyze};

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
        assert!(text.contains(
            "    model state 16.0 GiB (parameters 4.00 GiB, gradients 4.00 GiB, optimizer 8.00 GiB);"
        ));
        assert!(text.contains("12.0 GiB (peak minus model state)\n"));
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
            reserved_gap_bytes: 20 * GIB,
            oom_at_step: Some(199),
            eval_every: Some(50),
            eval_jump_bytes: 2 * GIB,
            eval_retain_bytes: GIB,
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
        assert!(text.contains("eval at step 49: 3 marks, jump +2.00 GiB, kept +1.06 GiB"));
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

    #[test]
    fn wrapping_and_shortening() {
        let mut out = String::new();
        wrap(&mut out, &"word ".repeat(60), 2, 4);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines.len() >= 3);
        assert!(lines[0].starts_with("  word") && lines[1].starts_with("    word"));
        assert!(lines.iter().all(|l| l.len() <= WIDTH));
        assert_eq!(
            wrap_words("free 24.0 GiB, of 1 840 steps; 3 s."),
            ["free", "24.0 GiB,", "of", "1 840 steps;", "3 s."]
        );
        assert_eq!(shorten("abcdef", 4), "abc~");
        assert_eq!(shorten("abc", 4), "abc");
    }
}

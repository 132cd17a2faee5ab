//! `collector summary A --compare B` in words: what became of A's findings in B, the peaks side
//! by side, and the comparison in one sentence (the viewer's compare overlay says the same).

use oomscope_analysis::Analysis;
use oomscope_analysis::finding::FindingKind;

use crate::findings::text;
use crate::stage_table::STAGE_COLUMN;
use crate::summary::titles;
use crate::wrap::{line, section, shorten, wrap};
use oomscope_format::units::{format_bytes, format_signed_bytes, format_signed_bytes_f64};

/// `collector summary A --compare B`: what became of A's findings in B, the memory peak, every
/// metric's peak and the stage table side by side.
pub fn render_compare(a_name: &str, a: &Analysis, b_name: &str, b: &Analysis) -> String {
    use oomscope_analysis::compare::{compare_peaks, compare_stages};
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

/// A few words naming what a finding found, for sentences such as "leak gone".
pub fn noun(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::Oom => "out-of-memory error",
        FindingKind::ActivationsDominate => "activation-heavy peak",
        FindingKind::Fragmentation => "fragmentation",
        FindingKind::OptimizerStateHeavy => "heavy optimizer state",
        FindingKind::ModelCopies => "untrained model copies",
        FindingKind::InputPeak => "input-driven peak",
        FindingKind::Leak => "leak",
        FindingKind::ReferenceCycles => "memory held by reference cycles",
        FindingKind::EvalRetainsMemory => "memory kept by eval",
        FindingKind::EvalPeak => "eval peak above training",
        FindingKind::OutsideAllocator => "memory outside the allocator",
        FindingKind::NonFiniteGradients => "non-finite gradients",
        FindingKind::NonFiniteTensors => "non-finite tensors",
        FindingKind::HostMemoryPressure => "host memory pressure",
        FindingKind::BatchSize => "batch-size estimate",
        FindingKind::ImpossibleRequest => "impossible request",
        FindingKind::WorkerPrivateGrowth => "workers' copy-on-write growth",
        FindingKind::ShmPressure => "a full /dev/shm",
        FindingKind::RankImbalance => "rank imbalance",
        FindingKind::FirstRankFailure => "first-rank failure",
        FindingKind::NodeHostSpike => "node host-memory spike",
    }
}

/// The comparison in one sentence, e.g. "Leak gone; out-of-memory error gone; peak_allocated
/// -1.10 GiB (3.20 GiB → 2.10 GiB)." — what the fix removed, what it brought, what stayed, and
/// how the memory peak moved.
pub fn compare_headline(a: &Analysis, b: &Analysis) -> String {
    use oomscope_analysis::compare::{FindingChange, diff_findings, memory_peaks};
    let mut parts: Vec<String> = diff_findings(a, b)
        .iter()
        .map(|c| match c {
            FindingChange::Gone(f) => format!("{} gone", noun(f.kind())),
            FindingChange::New(f) => format!("new: {}", noun(f.kind())),
            FindingChange::Still { b, .. } => format!("{} still there", noun(b.kind())),
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
    use oomscope_analysis::compare::{FindingChange, diff_findings};
    diff_findings(a, b)
        .iter()
        .map(|c| match c {
            FindingChange::Gone(f) => format!("Gone: {}", text(f).title),
            FindingChange::New(f) => format!("New: {}", text(f).title),
            FindingChange::Still { b, .. } => format!("Still there: {}", text(b).title),
        })
        .collect()
}

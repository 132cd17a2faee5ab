//! `collector summary A --compare B` in words: what became of A's findings in B, the peaks side
//! by side, and the comparison in one sentence (the viewer's compare overlay says the same).

use crate::Analysis;
use crate::render::stage_table::STAGE_COLUMN;
use crate::render::summary::titles;
use crate::render::wrap::{line, section, shorten, wrap};
use oomscope_format::units::{format_bytes, format_signed_bytes, format_signed_bytes_f64};

/// `collector summary A --compare B`: what became of A's findings in B, the memory peak, every
/// metric's peak and the stage table side by side.
pub fn render_compare(a_name: &str, a: &Analysis, b_name: &str, b: &Analysis) -> String {
    use crate::compare::{compare_peaks, compare_stages};
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
    use crate::compare::{FindingChange, diff_findings, memory_peaks};
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
    use crate::compare::{FindingChange, diff_findings};
    diff_findings(a, b)
        .iter()
        .map(|c| match c {
            FindingChange::Gone(f) => format!("Gone: {}", f.title),
            FindingChange::New(f) => format!("New: {}", f.title),
            FindingChange::Still { b, .. } => format!("Still there: {}", b.title),
        })
        .collect()
}

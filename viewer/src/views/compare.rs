//! Two traces side by side, before and after a fix: what became of each finding in one sentence
//! and a line per finding (`oomscope_words::compare`'s words, as
//! `collector summary A --compare B` prints them), both runs' memory per step overlaid, then
//! peaks and stages compared.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::compare::{
    FindingChange, compare_peaks, compare_stages, diff_findings, step_overlay,
};
use oomscope_format::Trace;
use oomscope_format::units::format_signed_bytes_f64;
use oomscope_words::compare::{compare_headline, compare_lines};
use oomscope_words::summary::titles;

use crate::view_model::{bytes_text, change_text};

use super::compare_chart::CompareChart;
use super::parts::{opt_num, opt_text};

/// Two traces side by side: peaks and per-stage figures, before vs after a fix.
#[component]
pub fn Compare(
    a_name: String,
    a_trace: Arc<Trace>,
    a: Arc<Analysis>,
    b_name: String,
    b_trace: Arc<Trace>,
    b: Arc<Analysis>,
) -> impl IntoView {
    let headline = compare_headline(&a, &b);
    let kinds = diff_findings(&a, &b).into_iter().map(|c| match c {
        FindingChange::Gone(f) => ("gone", f.kind().id()),
        FindingChange::New(f) => ("new", f.kind().id()),
        FindingChange::Still { b, .. } => ("still", b.kind().id()),
    });
    let changes = compare_lines(&a, &b)
        .into_iter()
        .zip(kinds)
        .map(|(text, (fate, id))| view! { <li class=fate data-fate=fate data-finding=id>{text}</li> })
        .collect_view();
    let overlay = step_overlay(&a_trace, &b_trace).map(|o| {
        view! { <CompareChart overlay=Arc::new(o) a_name=a_name.clone() b_name=b_name.clone()/> }
    });
    let peaks = compare_peaks(&a, &b)
        .into_iter()
        .map(|p| {
            let change = p.change_bytes();
            view! {
                <tr data-metric=p.metric.label() data-a-bytes=opt_num(p.a_bytes)
                    data-b-bytes=opt_num(p.b_bytes) class:better=change.is_some_and(|c| c < 0)
                    class:worse=change.is_some_and(|c| c > 0)>
                    <td>{p.metric.label()}</td><td class="num">{bytes_text(p.a_bytes)}</td>
                    <td class="num">{bytes_text(p.b_bytes)}</td>
                    <td class="num">{change_text(p.a_bytes, p.b_bytes)}</td>
                </tr>
            }
        })
        .collect_view();
    let stages = compare_stages(&a, &b).map(|(metric, rows)| {
        let rows = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr data-stage=r.stage.clone()>
                        <td>{r.stage.clone()}</td>
                        <td class="num">{bytes_text(r.a_max_bytes)}</td>
                        <td class="num">{bytes_text(r.b_max_bytes)}</td>
                        <td class="num">{opt_text(r.a_mean_delta_bytes.map(format_signed_bytes_f64))}</td>
                        <td class="num">{opt_text(r.b_mean_delta_bytes.map(format_signed_bytes_f64))}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>{format!("Stages ({metric})")}</h3>
            <table id="compare-stages"><thead><tr><th>"stage"</th><th>"max A"</th><th>"max B"</th>
                <th>"mean delta A"</th><th>"mean delta B"</th></tr></thead><tbody>{rows}</tbody></table>
        }
    });
    view! {
        <section id="compare" class="compare">
            <h2>"Comparison"</h2>
            <p>"A: "<strong>{a_name}</strong>" · B: "<strong>{b_name}</strong></p>
            <p id="compare-headline" class="highlight-text">{headline}</p>
            <h3>{titles::COMPARE_FINDINGS}</h3>
            <ul id="compare-findings" class="lines">{changes}</ul>
            {overlay}
            <h3>"Peaks"</h3>
            <table id="compare-peaks"><thead><tr><th>"metric"</th><th>"A"</th><th>"B"</th><th>"B − A"</th></tr></thead>
                <tbody>{peaks}</tbody></table>
            {stages}
        </section>
    }
}

//! The step table: memory per step at each stage, and its change.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_trace::Trace;
use oomscope_trace::analysis::Analysis;
use oomscope_trace::analysis::metrics::primary_metric;
use oomscope_trace::analysis::stages::{step_lines, step_rows};
use oomscope_trace::units::format_signed_bytes;

use crate::view_model::bytes_text;

use super::{opt_num, opt_text};

/// Rows per page of the step table.
const STEPS_PER_PAGE: usize = 25;

/// The per-step table of the primary metric: value and delta per stage, paged.
#[component]
pub fn StepTable(trace: Arc<Trace>, analysis: Arc<Analysis>) -> impl IntoView {
    let Some(metric) = primary_metric(&trace) else {
        return ().into_any();
    };
    let stages = oomscope_trace::analysis::stages::stage_names(&trace);
    let lines = Arc::new(step_lines(&step_rows(&trace, metric)));
    if lines.is_empty() {
        return ().into_any();
    }
    let label = metric.label(&trace);
    let pages = lines.len().div_ceil(STEPS_PER_PAGE);
    let growth = analysis.largest_growth.clone();
    // Open on the page with the largest growth: that is where the reader wants to look.
    let start_page = growth
        .as_ref()
        .and_then(|g| {
            lines
                .iter()
                .position(|l| l.step == g.step && l.phase == g.phase)
        })
        .map_or(0, |i| i / STEPS_PER_PAGE);
    let page = RwSignal::new(start_page);
    let header = stages
        .iter()
        .map(|s| view! { <th colspan="2">{s.clone()}</th> })
        .collect_view();
    let rows_lines = lines.clone();
    let rows = move || {
        let p = page.get();
        rows_lines
            .iter()
            .skip(p * STEPS_PER_PAGE)
            .take(STEPS_PER_PAGE)
            .map(|l| {
                let cells = l
                    .values
                    .iter()
                    .zip(&l.deltas)
                    .zip(&stages)
                    .map(|((v, d), stage)| {
                        let hot = growth.as_ref().is_some_and(|g| {
                            g.step == l.step && g.phase == l.phase && &g.to_stage == stage
                        });
                        view! {
                            <td class="num" data-bytes=opt_num(*v)>{bytes_text(*v)}</td>
                            <td class="num delta" class:largest-growth=hot>{opt_text(d.map(format_signed_bytes))}</td>
                        }
                    })
                    .collect_view();
                let eval = l.phase.suffix();
                view! { <tr><td>{format!("{}{eval}", l.step)}</td>{cells}</tr> }
            })
            .collect_view()
    };
    view! {
        <section id="steps">
            <h2>{format!("Steps ({label})")}</h2>
            <div class="toolbar">
                <button on:click=move |_| page.update(|p| *p = p.saturating_sub(1))>"previous"</button>
                <span>{move || format!(" page {} of {pages} ", page.get() + 1)}</span>
                <button on:click=move |_| page.update(|p| *p = (*p + 1).min(pages - 1))>"next"</button>
            </div>
            <div class="scroll">
                <table id="step-table" class="steps">
                    <thead><tr><th>"step"</th>{header}</tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        </section>
    }
    .into_any()
}

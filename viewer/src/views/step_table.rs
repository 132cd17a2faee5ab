//! The step table: memory per step at each stage, and its change since the previous mark (the
//! stage table's delta), paged, with a jump to any step. It opens where the evidence is: the
//! OOM's step, the eval that kept memory, or the largest rise when that is not warm-up.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::Spotlight;
use oomscope_analysis::facts::primary_metric;
use oomscope_analysis::facts::{StepRow, step_rows};
use oomscope_format::units::format_signed_bytes;
use oomscope_format::{Phase, Trace};

use crate::print::Printing;
use crate::view_model::bytes_text;

use super::parts::{opt_num, opt_text};

/// Rows per page of the step table.
const STEPS_PER_PAGE: usize = 25;

/// Most rows a printout holds (the whole table of any run up to this many steps).
const MAX_PRINTED_STEPS: usize = 2_000;

/// The row the table opens on: the evidence first, never the warm-up.
fn opening_row(rows: &[StepRow], spotlight: &Spotlight, analysis: &Analysis) -> Option<usize> {
    let at = |step: u64, phase: Phase| rows.iter().position(|r| r.step == step && r.phase == phase);
    let oom = spotlight
        .oom_steps
        .first()
        .and_then(|s| at(*s, Phase::Train).or_else(|| at(*s, Phase::Eval)));
    let eval = spotlight
        .retaining_eval_step
        .and_then(|s| at(s, Phase::Eval));
    let growth = analysis
        .largest_growth
        .as_ref()
        .filter(|_| !spotlight.growth_is_warm_up)
        .and_then(|g| at(g.step, g.phase));
    oom.or(eval).or(growth)
}

/// The per-step table of the primary metric: value and delta per stage, paged.
#[component]
pub fn StepTable(
    trace: Arc<Trace>,
    analysis: Arc<Analysis>,
    spotlight: Spotlight,
) -> impl IntoView {
    let Some(metric) = primary_metric(&trace) else {
        return ().into_any();
    };
    let stages = oomscope_analysis::facts::stage_names(&trace);
    let rows = Arc::new(step_rows(&trace, metric));
    if rows.is_empty() {
        return ().into_any();
    }
    let label = metric.label();
    let pages = rows.len().div_ceil(STEPS_PER_PAGE);
    let growth = analysis.largest_growth.clone();
    let opening = opening_row(&rows, &spotlight, &analysis);
    let page = RwSignal::new(opening.map_or(0, |i| i / STEPS_PER_PAGE));
    // The row a jump landed on (or the opening evidence), outlined.
    let focused = RwSignal::new(opening);
    let header = stages
        .iter()
        .map(|s| {
            let leaking = spotlight.leak_stages.contains(s);
            view! { <th colspan="2" class:evidence=leaking>{s.clone()}</th> }
        })
        .collect_view();
    let jump_rows = rows.clone();
    let jump_error = RwSignal::new(None::<String>);
    let jump = move |text: String| {
        let wanted = text.trim().replace([' ', ','], "");
        match wanted.parse::<u64>() {
            Ok(step) => match jump_rows.iter().position(|r| r.step >= step) {
                Some(i) => {
                    page.set(i / STEPS_PER_PAGE);
                    focused.set(Some(i));
                    jump_error.set(None);
                }
                None => jump_error.set(Some(format!("no step {step} or later in this trace"))),
            },
            Err(_) => jump_error.set(Some(format!("“{}” is not a step number", text.trim()))),
        }
    };
    let spot = spotlight.clone();
    let body_rows = rows.clone();
    let body = move || {
        let focus = focused.get();
        // A printout holds the whole table (up to a limit), not the page on screen.
        let (skip, take) = if Printing::now() {
            (0, MAX_PRINTED_STEPS)
        } else {
            (page.get() * STEPS_PER_PAGE, STEPS_PER_PAGE)
        };
        body_rows
            .iter()
            .enumerate()
            .skip(skip)
            .take(take)
            .map(|(i, r)| {
                let cells = r
                    .values
                    .iter()
                    .zip(&r.deltas)
                    .zip(&stages)
                    .map(|((v, d), stage)| {
                        let rise = growth.as_ref().is_some_and(|g| {
                            g.step == r.step && g.phase == r.phase && &g.to_stage == stage
                        });
                        view! {
                            <td class="num" data-bytes=opt_num(*v)>{bytes_text(*v)}</td>
                            <td class="num delta" class:largest-growth=rise
                                data-delta-bytes=opt_num(*d)>{opt_text(d.map(format_signed_bytes))}</td>
                        }
                    })
                    .collect_view();
                let oom = r.phase == Phase::Train && spot.oom_steps.contains(&r.step);
                let retained =
                    r.phase == Phase::Eval && spot.retaining_eval_step == Some(r.step);
                let eval = r.phase.suffix();
                view! {
                    <tr data-step=r.step.to_string() class:oom-step=oom class:evidence=retained
                        class:focused=focus == Some(i)>
                        <td>{format!("{}{eval}", r.step)}
                            {oom.then(|| view! { " " <span class="badge critical">"OOM"</span> })}
                            {retained.then(|| view! { " " <span class="badge warning">"kept memory"</span> })}
                        </td>
                        {cells}
                    </tr>
                }
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
                <label>" jump to step "
                    <input id="step-jump" type="text" inputmode="numeric" size="8"
                        on:change=move |ev| jump(event_target_value(&ev))/>
                </label>
                <span class="hint" id="step-jump-error">{move || jump_error.get()}</span>
                <span class="hint">" delta = change since the previous mark, as in the stage table"</span>
            </div>
            <div class="scroll">
                <table id="step-table" class="steps">
                    <thead><tr><th>"step"</th>{header}</tr></thead>
                    <tbody>{body}</tbody>
                </table>
            </div>
        </section>
    }
    .into_any()
}

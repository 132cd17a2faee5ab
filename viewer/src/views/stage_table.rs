//! The stage table: memory at each stage mark, per stage, for the shown metric.

use leptos::prelude::*;
use oomscope_analysis::facts::{Growth, StageTable as Table};
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_signed_bytes, format_signed_bytes_f64,
};

use oomscope_analysis::facts::Spotlight;

use super::parts::{opt_num, opt_text};

/// The stage table of one metric, the numbers `collector summary` prints: the whole run's
/// (`prefix` `stage`: `#stages`, `#stage-table`, `#stage-metric`) or one rank's (`rank-stage`).
/// The stages a `leak` finding rests on are highlighted (`tr.evidence`); the largest rise
/// between two marks is marked as a fact only, and named warm-up when it is the first step's.
#[component]
pub fn StageTable(
    table: Table,
    growth: Option<Growth>,
    prefix: &'static str,
    #[prop(optional)] spotlight: Spotlight,
) -> impl IntoView {
    let (section_id, table_id, select_id) = (
        format!("{prefix}s"),
        format!("{prefix}-table"),
        format!("{prefix}-metric"),
    );
    if table.rows.is_empty() {
        return view! {
            <section id=section_id><h2>"Stages"</h2>
            <p class="empty">{format!("No stage marks in this trace: {}.", oomscope_words::summary::NO_MARKS_HINT)}</p></section>
        }
        .into_any();
    }
    let Some(initial) = table.primary_metric.or(table.metrics.first().copied()) else {
        // Marks, but nothing measured at them (no samples, no allocator statistics).
        return view! {
            <section id=section_id><h2>"Stages"</h2>
            <p class="empty">"This trace has stage marks but no memory readings at them (no samples and no allocator statistics), so there is no stage table."</p></section>
        }
        .into_any();
    };
    let metric = RwSignal::new(initial);
    let options = table
        .metrics
        .iter()
        .map(|m| view! { <option value=m.label()>{m.label()}</option> })
        .collect_view();
    // The select speaks labels; the table is indexed by metric.
    let metrics = table.metrics.clone();
    let choose = move |label: String| {
        if let Some(m) = metrics.iter().find(|m| m.label() == label) {
            metric.set(*m);
        }
    };
    let warm_up = spotlight.growth_is_warm_up;
    let growth_text = growth.as_ref().map(|g| {
        let mut text = format!(
            "Largest rise between two marks: {} {} from {} (step {}) to {} (step {})",
            g.metric,
            format_signed_bytes(g.bytes as i64),
            g.from_stage,
            g.from_step,
            g.to_stage,
            g.step
        );
        if warm_up {
            text.push_str(": the first step, warm-up (weights, optimizer state, first blocks)");
        }
        view! { <p id="largest-growth" class="hint" class:warm-up=warm_up>{text}</p> }
    });
    let leak_stages = spotlight.leak_stages;
    let body_table = table.clone();
    let body = move || {
        let shown = metric.get();
        let Some(mi) = body_table.metric_index(shown) else {
            return Vec::new();
        };
        body_table
            .rows
            .iter()
            .map(|row| {
                let s = &row.metrics[mi];
                let eval = row.phase.suffix();
                let largest = growth.as_ref().is_some_and(|g| {
                    g.metric == shown && g.to_stage == row.stage && g.phase == row.phase
                });
                let leaking = row.phase == oomscope_format::Phase::Train
                    && leak_stages.contains(&row.stage);
                view! {
                    <tr class:largest-growth=largest class:evidence=leaking
                        data-stage=row.stage.clone()
                        data-phase=row.phase.label()
                        data-count=row.count.to_string()
                        data-mean-bytes=opt_num(s.mean_bytes)
                        data-max-bytes=opt_num(s.max_bytes)
                        data-mean-delta-bytes=opt_num(s.mean_delta_bytes)
                        data-max-delta-bytes=opt_num(s.max_delta_bytes)>
                        <td>{format!("{}{eval}", row.stage)}
                            {leaking.then(|| view! { " " <span class="badge warning">"leaks"</span> })}</td>
                        <td class="num">{format_count(row.count as u64)}</td>
                        <td class="num">{opt_text(s.mean_bytes.map(format_bytes_f64))}</td>
                        <td class="num">{opt_text(s.max_bytes.map(format_bytes))}</td>
                        <td class="num">{opt_text(s.mean_delta_bytes.map(format_signed_bytes_f64))}</td>
                        <td class="num">{opt_text(s.max_delta_bytes.map(format_signed_bytes))}</td>
                        <td class="num">{opt_text(s.max_vs_baseline_bytes.map(format_signed_bytes))}</td>
                    </tr>
                }
            })
            .collect::<Vec<_>>()
    };
    view! {
        <section id=section_id>
            <h2>"Stages"</h2>
            <label>"metric "
                <select id=select_id prop:value=move || metric.get().label()
                    on:change=move |ev| choose(event_target_value(&ev))>{options}</select>
            </label>
            <span class="hint">" delta = change since the previous mark"</span>
            {growth_text}
            <table id=table_id class="stages">
                <thead><tr><th>"stage"</th><th>"count"</th><th>"mean"</th><th>"max"</th>
                <th>"mean delta"</th><th>"max delta"</th><th>"max vs baseline"</th></tr></thead>
                <tbody>{body}</tbody>
            </table>
        </section>
    }
    .into_any()
}

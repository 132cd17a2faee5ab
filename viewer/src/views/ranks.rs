//! Ranks side by side (torchrun's workers under one collector, or a job's traces): the highest
//! rank and the spread, a small chart per rank on one scale, a row per rank, the largest imbalance, and one rank's own stage table and
//! findings, chosen with a selector. The sentences are `oomscope_words::ranks`'s, so
//! the page and `collector summary` say the same.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::facts::RankAnalysis;
use oomscope_format::units::{format_bytes, format_count};
use oomscope_words::ranks::{node_of, rank_ended, rank_highest, rank_imbalance};

use super::findings::Findings;
use super::parts::{opt_num, opt_text};
use super::rank_multiples::RankMultiples;
use super::stage_table::StageTable;

/// The ranks of a trace (`prefix` empty: `#ranks`, `#rank-table`, `#rank-select`, …) or of a
/// job (`job-`: `#job-ranks`, `#job-rank-table`, …), so both can be on one page.
#[component]
pub fn Ranks(ranks: Arc<RankAnalysis>, prefix: &'static str) -> impl IntoView {
    let id = |name: &str| format!("{prefix}{name}");
    let rows = ranks
        .ranks
        .iter()
        .map(|r| {
            view! {
                <tr data-rank=r.rank.to_string()
                    data-marks=r.marks.to_string()
                    data-last-step=opt_num(r.last_step)
                    data-peak-host-bytes=opt_num(r.peak_host_bytes)
                    data-peak-device-bytes=opt_num(r.peak_device_bytes)>
                    <td class="num">{r.rank.to_string()}</td>
                    <td class="num">{opt_text(r.pid.map(|p| p.to_string()))}</td>
                    <td>{node_of(r)}</td>
                    <td class="num">{format_count(r.marks as u64)}</td>
                    <td class="num">{opt_text(r.last_step.map(format_count))}</td>
                    <td class="num">{opt_text(r.peak_host_bytes.map(format_bytes))}</td>
                    <td class="num">{opt_text(r.peak_device_bytes.map(format_bytes))}</td>
                    <td>{rank_ended(r)}</td>
                </tr>
            }
        })
        .collect_view();
    // The drill-down opens on the rank with the most memory: the one to look at first.
    let first = ranks
        .worst()
        .map(|(w, _, _)| w.rank)
        .or_else(|| ranks.ranks.first().map(|r| r.rank));
    let selected = RwSignal::new(first);
    let options = ranks
        .ranks
        .iter()
        .map(|r| view! { <option value=r.rank.to_string()>{format!("rank {}", r.rank)}</option> })
        .collect_view();
    let shown = ranks.clone();
    let drill_down = move || {
        let rank = selected.get()?;
        let r = shown.ranks.iter().find(|r| r.rank == rank)?;
        let (stages, findings) = if prefix.is_empty() {
            ("rank-stage", "rank-findings")
        } else {
            ("job-rank-stage", "job-rank-findings")
        };
        Some(view! {
            <StageTable table=r.stage_table.clone() growth=None prefix=stages/>
            <Findings findings=r.findings.iter().map(oomscope_words::findings::worded).collect() id=findings
                empty="Nothing to change on this rank: no rule found a problem in its own records."/>
        })
    };
    view! {
        <section id=id("ranks")>
            <h2>{format!("Ranks ({})", ranks.ranks.len())}</h2>
            <p id=id("rank-highest") class="highlight-text">{rank_highest(&ranks)}</p>
            <RankMultiples ranks=ranks.clone() prefix=prefix selected=selected/>
            <table id=id("rank-table")>
                <thead><tr><th>"rank"</th><th>"pid"</th><th>"node"</th><th>"marks"</th><th>"step"</th>
                <th>"host peak"</th><th>"dev peak"</th><th>"ended"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
            <p id=id("rank-imbalance")>{rank_imbalance(&ranks)}</p>
            <div class="rank-drill-down">
                <label>"one rank: "
                    <select id=id("rank-select")
                        prop:value=move || selected.get().map(|r| r.to_string()).unwrap_or_default()
                        on:change=move |ev| selected.set(event_target_value(&ev).parse().ok())>
                        {options}
                    </select>
                </label>
                {drill_down}
            </div>
        </section>
    }
}

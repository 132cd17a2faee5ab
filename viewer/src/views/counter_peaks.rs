//! The peak of every sampled counter.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_format::units::format_bytes;

/// Peak of every sampled counter.
#[component]
pub fn CounterPeaks(analysis: Arc<Analysis>) -> impl IntoView {
    let rows = analysis
        .overview
        .counter_peaks
        .iter()
        .map(|p| {
            view! {
                <tr data-metric=p.label.label() data-bytes=p.bytes.to_string()>
                    <td>{p.label.label()}</td>
                    <td class="num">{format_bytes(p.bytes)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section id="peaks">
            <h2>"Peaks"</h2>
            <table class="peaks"><thead><tr><th>"counter"</th><th>"peak"</th></tr></thead>
            <tbody>{rows}</tbody></table>
        </section>
    }
}

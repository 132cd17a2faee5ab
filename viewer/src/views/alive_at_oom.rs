//! What was alive at each OOM, by source line (`collector run --oom-snapshot`): the rows the
//! zero-code hooks sent, worded by the same `oomscope_words` helpers the terminal uses.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_words::phrases::{source_line, tensor_count};

/// One table per OOM that has rows; nothing when none has.
#[component]
pub fn AliveAtOom(analysis: Arc<Analysis>) -> impl IntoView {
    let tables = analysis
        .ooms
        .iter()
        .filter(|o| !o.alive.is_empty())
        .map(|o| {
            let mut when = format!("OOM at {}", format_duration_us(o.event.t_us));
            if let Some(step) = o.event.step {
                when.push_str(&format!(", step {}", format_count(step)));
            }
            let rows = o
                .alive
                .iter()
                .map(|a| {
                    view! {
                        <tr data-bytes=a.bytes.to_string() data-file=a.file.to_string()
                            data-line=a.line.to_string()>
                            <td class="num">{format_bytes(a.bytes)}</td>
                            <td class="num">{tensor_count(a.count)}</td>
                            <td title=a.file.to_string()>{source_line(a)}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <h3>{when}</h3>
                <table class="alive">
                    <thead><tr><th>"alive"</th><th>"blocks"</th><th>"source line"</th></tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            }
        })
        .collect::<Vec<_>>();
    if tables.is_empty() {
        return ().into_any();
    }
    view! { <section id="alive-at-oom"><h2>"Alive at the OOM, by source line"</h2>{tables}</section> }
        .into_any()
}

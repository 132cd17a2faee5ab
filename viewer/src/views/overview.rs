//! The overview: command, host, GPUs, duration, how the run ended (collapsed under one line: the
//! verdict comes first), the first OOM, notes, and the reader's warnings.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_words::headline;

use crate::load::Loaded;

/// Most notes listed in the overview.
const MAX_NOTES: usize = 50;

/// Command, host, GPUs, duration, notes, warnings, and the OOM banner.
#[component]
pub fn Overview(loaded: Arc<Loaded>) -> impl IntoView {
    let warnings = loaded.warnings.clone();
    let partial = loaded.is_partial().then(|| {
        view! {
            <div class="banner warn" id="partial-banner">
                <strong>"Partly readable trace. "</strong>
                "What follows is the part that decoded; the reader reported:"
                <ul>{warnings.into_iter().map(|w| view! { <li>{w}</li> }).collect_view()}</ul>
            </div>
        }
    });
    let notice = loaded
        .notice
        .clone()
        .map(|n| view! { <div class="banner info" id="thinned-notice">{n}</div> });
    let Some(trace) = loaded.trace.clone() else {
        return view! {
            <section class="overview">
                <div class="banner error" id="load-error">
                    <strong>{loaded.name.clone()}": "</strong>
                    {loaded.error.clone().unwrap_or_default()}
                </div>
            </section>
        }
        .into_any();
    };
    let m = &trace.metadata;
    let command = if m.command.is_empty() {
        "(not recorded)".to_owned()
    } else {
        m.command.join(" ")
    };
    let gpus = if m.gpus.is_empty() {
        "none recorded".to_owned()
    } else {
        m.gpus
            .iter()
            .map(|g| {
                format!(
                    "GPU {}: {} ({})",
                    g.index,
                    g.name,
                    format_bytes(g.total_memory_bytes)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let exit = headline::ending(&trace);
    let oom = headline::first_oom(&trace)
        .map(|text| view! { <div class="banner error" id="oom-banner">{text}</div> });
    let notes = (!trace.notes.is_empty()).then(|| {
        let shown = trace.notes.iter().take(MAX_NOTES).map(|n| {
            view! { <li><span class="hint">{format_duration_us(n.t_us)}" "</span>{n.text.clone()}</li> }
        });
        let more = trace.notes.len().saturating_sub(MAX_NOTES);
        view! {
            <details id="notes" open=trace.notes.len() <= 5>
                <summary>{format!("{} notes", trace.notes.len())}</summary>
                <ul>{shown.collect_view()}</ul>
                {(more > 0).then(|| view! { <p class="hint">{format!("and {more} more")}</p> })}
            </details>
        }
    });
    // Collapsed under one line: the verdict above answers the question, the details are a click away.
    let summary = format!(
        "{} · {} · {} · {}",
        loaded.name,
        m.host,
        format_duration_us(trace.duration_us()),
        exit
    );
    view! {
        <section class="overview" id="overview">
            {oom}
            {partial}
            {notice}
            <details id="run-details">
            <summary id="run-summary">{summary}</summary>
            <dl>
                <dt>"file"</dt><dd id="trace-name">{loaded.name.clone()}" ("{format_bytes(loaded.size_bytes as u64)}")"</dd>
                <dt>"command"</dt><dd id="command"><code>{command}</code></dd>
                <dt>"host"</dt><dd id="host">{format!("{} (pid {})", m.host, m.pid)}</dd>
                <dt>"GPUs"</dt><dd id="gpus">{gpus}</dd>
                <dt>"duration"</dt><dd id="duration">{format_duration_us(trace.duration_us())}</dd>
                <dt>"recorded"</dt>
                <dd>{format!("{} samples, {} stage marks, format {}.{}, collector {}",
                    format_count(trace.samples.len() as u64), format_count(trace.marks.len() as u64),
                    trace.format_version.0, trace.format_version.1, m.collector_version)}</dd>
                <dt>"end"</dt><dd id="exit">{exit}</dd>
            </dl>
            </details>
            {notes}
        </section>
    }
    .into_any()
}

//! CSV and Chrome-trace exports, generated in the page.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_format::Trace;
use oomscope_report::export;

use crate::browser;

/// CSV and Chrome-trace downloads, generated in the page by the same code as `collector export`.
#[component]
pub fn Exports(name: String, trace: Arc<Trace>) -> impl IntoView {
    let stem = name.trim_end_matches(".oomt").to_owned();
    let (t1, s1) = (trace.clone(), stem.clone());
    let csv = move |_| browser::download(&format!("{s1}.csv"), "text/csv", &export::to_csv(&t1));
    let chrome = move |_| {
        browser::download(
            &format!("{stem}.json"),
            "application/json",
            &export::to_chrome_json(&trace),
        );
    };
    view! {
        <section id="exports">
            <h2>"Export"</h2>
            <button id="export-csv" on:click=csv>"CSV"</button>" "
            <button id="export-chrome" on:click=chrome>"Chrome trace (JSON)"</button>
            <span class="hint">" generated here in the browser: chrome://tracing or ui.perfetto.dev open the JSON"</span>
        </section>
    }
}

//! A job's traces together (`collector report DIR`, or several files opened as a job): every
//! rank of every node on the job's clock, as `collector summary DIR` shows them (the same
//! `analyze_job` and the same findings), then any one trace's own report.

use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use oomscope_analysis::AnalysisOptions;
use oomscope_analysis::facts::RankAnalysis;
use oomscope_analysis::job::job_findings;
use oomscope_analysis::job::{JobTrace, analyze_job};
use oomscope_words::job::trace_about;

use crate::load::Loaded;
use crate::report::{Opened, Report};
use crate::views::{Findings, Ranks};

/// The job's ranks and findings, and one of its traces in full.
#[component]
pub fn JobReport(traces: Vec<Arc<Loaded>>) -> impl IntoView {
    let ranks = RwSignal::new(None::<Arc<RankAnalysis>>);
    // Like a trace's analysis: after the page has drawn, in a task of its own.
    let job = traces.clone();
    set_timeout(
        move || {
            let readable: Vec<JobTrace<'_>> = job
                .iter()
                .filter_map(|l| {
                    l.trace.as_deref().map(|trace| JobTrace {
                        source: &l.name,
                        trace,
                    })
                })
                .collect();
            ranks.set(Some(Arc::new(analyze_job(
                &readable,
                &AnalysisOptions::default(),
            ))));
        },
        Duration::ZERO,
    );
    let sources = traces
        .iter()
        .map(|l| {
            let about = match (&l.trace, &l.error) {
                (Some(t), _) => trace_about(t),
                (None, Some(e)) => e.clone(),
                (None, None) => String::new(),
            };
            view! { <li data-name=l.name.clone()>{format!("{}: {about}", l.name)}</li> }
        })
        .collect_view();
    let analysed = move || match ranks.get() {
        None => view! { <p id="job-analysing" class="hint">"analysing the job…"</p> }.into_any(),
        Some(r) => {
            let findings = oomscope_words::json::job_findings_worded(&job_findings(&r));
            view! {
                <Ranks ranks=r prefix="job-"/>
                <Findings findings=findings id="job-findings"
                    empty="Nothing to change: no rule found evidence of a memory problem on any rank."/>
            }
            .into_any()
        }
    };
    let chosen = RwSignal::new(0usize);
    let options = traces
        .iter()
        .enumerate()
        .map(|(i, l)| view! { <option value=i.to_string()>{l.name.clone()}</option> })
        .collect_view();
    let count = traces.len();
    let one = move || {
        let loaded = traces.get(chosen.get())?.clone();
        Some(view! { <Report opened=Opened::new(loaded) compare=RwSignal::new(None)/> })
    };
    view! {
        <section id="job">
            <h2>{format!("A job of {count} traces")}</h2>
            <ul id="job-traces">{sources}</ul>
        </section>
        {analysed}
        <section id="job-trace">
            <h2>"One trace"</h2>
            <label>"trace: "
                <select id="trace-select" prop:value=move || chosen.get().to_string()
                    on:change=move |ev| chosen.set(event_target_value(&ev).parse().unwrap_or(0))>
                    {options}
                </select>
            </label>
        </section>
        {one}
    }
}

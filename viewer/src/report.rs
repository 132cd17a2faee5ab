//! One trace's report: the trace opened and, once computed, its analysis ([`Opened`]), laid out
//! section by section, with the comparison when a second trace is open. The page ([`crate::app`])
//! and a job's report ([`crate::job`]) both show it.

use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::Spotlight;
use oomscope_format::Trace;

use crate::browser;
use crate::load::{Loaded, analyse};
use crate::timeline::Timeline;
use crate::views::{
    AliveAtOom, Allocator, BatchTrials, Breakdown, Compare, CounterPeaks, Evals, Exports, Findings,
    Growth, Ooms, Overview, Ranks, SnapshotReport, StageTable, Statistics, StepChart, StepTable,
    Verdict,
};

/// When the analysis starts if no animation frame came first.
const ANALYSIS_FALLBACK: Duration = Duration::from_millis(100);

/// An open trace and, once computed, its analysis.
#[derive(Debug, Clone)]
pub struct Opened {
    /// What was decoded.
    pub loaded: Arc<Loaded>,
    /// Filled in a task after the first chart is drawn; the verdict, findings, OOMs, ranks and
    /// the per-step chart show as soon as it is.
    pub analysis: RwSignal<Option<Arc<Analysis>>>,
    /// Set a frame after the analysis: the remaining sections (tables, allocator, statistics)
    /// are built then, so they never delay the verdict.
    pub tables: RwSignal<bool>,
}

impl Opened {
    /// Starts the analysis in a task after the next animation frame, in which the timeline
    /// draws: the chart comes first, the verdict a moment later, the tables after it. A plain
    /// timer backs each frame up, because browsers pause animation frames in hidden tabs and
    /// some headless modes. Printing waits for nothing: everything is built at once.
    pub fn new(loaded: impl Into<Arc<Loaded>>) -> Opened {
        let loaded: Arc<Loaded> = loaded.into();
        let analysis = RwSignal::new(None);
        let tables = RwSignal::new(false);
        if let Some(trace) = loaded.trace.clone() {
            let show_tables = move || {
                // A trace closed before its timer fired: do nothing.
                if tables.try_get_untracked() == Some(false) {
                    tables.set(true);
                    browser::record_time("data-tables-ms");
                }
            };
            let run = move |all_at_once: bool| {
                // The `beforeprint` listener outlives a trace that was closed: then do nothing.
                if analysis.try_with_untracked(Option::is_none) == Some(true) {
                    analysis.set(Some(Arc::new(analyse(&trace))));
                    browser::record_time("data-analysis-ms");
                }
                if all_at_once {
                    show_tables();
                } else {
                    request_animation_frame(move || set_timeout(show_tables, Duration::ZERO));
                    set_timeout(show_tables, ANALYSIS_FALLBACK);
                }
            };
            // Printing cannot wait for a frame or a timer: the printout would say "analysing…".
            if browser::printing() {
                run(true);
            } else {
                let before_print = run.clone();
                browser::on_window_event("beforeprint", move || before_print(true));
                let started = StoredValue::new(false);
                let once = move || {
                    if started.try_get_value() == Some(false) {
                        started.set_value(true);
                        run(false);
                    }
                };
                let first = once.clone();
                request_animation_frame(move || set_timeout(first, Duration::ZERO));
                set_timeout(once, ANALYSIS_FALLBACK);
            }
        }
        Opened {
            loaded,
            analysis,
            tables,
        }
    }
}

impl Opened {
    /// `loaded` analysed here and now, every section built at once: a live page's refresh,
    /// which must not say "analysing…" between two states of the same run (nor register the
    /// print hooks [`Opened::new`] does, once per refresh).
    pub fn analysed(loaded: Loaded) -> Opened {
        let analysis = loaded
            .analysis
            .clone()
            .or_else(|| loaded.trace.as_deref().map(|t| Arc::new(analyse(t))));
        Opened {
            loaded: Arc::new(loaded),
            analysis: RwSignal::new(analysis),
            tables: RwSignal::new(true),
        }
    }
}

/// One trace's report, with the comparison section when a second trace is open.
#[component]
pub fn Report(opened: Opened, compare: RwSignal<Option<Opened>>) -> impl IntoView {
    let loaded = opened.loaded.clone();
    if let Some(snap) = loaded.snapshot.clone() {
        return view! { <SnapshotReport name=loaded.name.clone() snap=snap/> }.into_any();
    }
    let Some(trace) = loaded.trace.clone() else {
        return view! { <Overview loaded=loaded/> }.into_any();
    };
    let analysis = opened.analysis;
    let tables = opened.tables;
    let a_name = loaded.name.clone();
    let a_trace = trace.clone();
    let comparison = move || {
        let b = compare.get()?;
        let view = match b.loaded.trace.clone() {
            None => view! { <section id="compare"><Overview loaded=b.loaded.clone()/></section> }.into_any(),
            Some(b_trace) => match (analysis.get(), b.analysis.get()) {
                (Some(x), Some(y)) => view! {
                    <Compare a_name=a_name.clone() a_trace=a_trace.clone() a=x
                        b_name=b.loaded.name.clone() b_trace=b_trace.clone() b=y/>
                    <details class="other-overview"><summary>"B: overview"</summary><Overview loaded=b.loaded.clone()/></details>
                }
                .into_any(),
                _ => view! { <section id="compare"><p>"analysing…"</p></section> }.into_any(),
            },
        };
        Some(view)
    };
    let analysed_trace = trace.clone();
    let analysed = move || {
        match analysis.get() {
        None => view! { <p id="analysing" class="hint">"analysing…"</p> }.into_any(),
        Some(a) => {
            let spotlight = oomscope_analysis::facts::spotlight(&analysed_trace, &a);
            view! {
                <Findings findings=a.findings.iter().map(oomscope_words::findings::worded).collect() id="findings"
                    empty="Nothing to change: no rule found a problem in this trace."/>
                <Ooms analysis=a.clone()/>
                <AliveAtOom analysis=a.clone()/>
                {a.ranks.clone().map(|r| view! { <Ranks ranks=Arc::new(r) prefix=""/> })}
                <StepChart trace=analysed_trace.clone() analysis=a.clone()/>
                <Growth analysis=a.clone()/>
                <Evals analysis=a.clone() spotlight=spotlight.clone()/>
                {
                    let (trace, a) = (analysed_trace.clone(), a.clone());
                    move || tables.get().then(|| view! {
                        <Tables trace=trace.clone() analysis=a.clone() spotlight=spotlight.clone()/>
                    })
                }
            }
        }
        .into_any(),
    }
    };
    let verdict_trace = trace.clone();
    let early = loaded.verdict.clone();
    let verdict = move || {
        view! { <Verdict trace=verdict_trace.clone() analysis=analysis.get() early=early.clone()/> }
    };
    view! {
        {verdict}
        <Overview loaded=loaded.clone()/>
        {comparison}
        <Timeline trace=trace.clone()/>
        {analysed}
        <Exports name=loaded.name.clone() trace=trace/>
    }
    .into_any()
}

/// The sections built a frame after the verdict: the stage and step tables, peaks of every
/// counter, the allocator, the breakdown at the peak, statistics and batch-size trials.
#[component]
fn Tables(trace: Arc<Trace>, analysis: Arc<Analysis>, spotlight: Spotlight) -> impl IntoView {
    let a = analysis;
    view! {
        <StageTable table=a.stage_table.clone() growth=a.largest_growth.clone() prefix="stage"
            spotlight=spotlight.clone()/>
        <StepTable trace=trace.clone() analysis=a.clone() spotlight=spotlight/>
        <CounterPeaks analysis=a.clone()/>
        <Allocator analysis=a.clone()/>
        <Breakdown analysis=a.clone()/>
        <Statistics trace=trace.clone()/>
        <BatchTrials trace=trace analysis=a/>
    }
}

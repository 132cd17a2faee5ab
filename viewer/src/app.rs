//! The page: opening traces (picker, drag and drop, or those a report embeds), and laying out
//! one trace's report, plus the comparison when a second trace is open; a job's traces go to
//! [`crate::job`].

use std::sync::Arc;
use std::time::Duration;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::render::verdict::Spotlight;
use oomscope_format::Trace;

use crate::browser;
use crate::job::JobReport;
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

/// Whether the page is being printed: paged views then show everything (provided by [`App`]).
#[derive(Debug, Clone, Copy)]
pub struct Printing(pub RwSignal<bool>);

impl Printing {
    /// True while printing (false outside an [`App`]).
    pub fn now() -> bool {
        use_context::<Printing>().is_some_and(|p| p.0.get())
    }
}

/// Where newly read files go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// Replace what is open (a second file becomes the comparison).
    Open,
    /// Keep the open trace, compare with the new one.
    Compare,
    /// A job's traces, analysed together.
    Job,
}

/// Files opened together that make a job rather than a comparison: three or more.
const JOB_FILES: usize = 3;

/// The whole viewer. `initial` holds the traces a report embeds: one trace, or a job's;
/// `snapshot` the large memory snapshot a report embeds instead, which is read once the page is
/// up.
#[component]
pub fn App(
    initial: Vec<Loaded>,
    #[prop(default = None)] snapshot: Option<browser::EmbeddedSnapshot>,
) -> impl IntoView {
    let job = RwSignal::new(None::<Vec<Arc<Loaded>>>);
    let primary = RwSignal::new(None::<Opened>);
    if initial.len() > 1 {
        job.set(Some(initial.into_iter().map(Arc::new).collect()));
    } else {
        primary.set(initial.into_iter().next().map(Opened::new));
    }
    let compare = RwSignal::new(None::<Opened>);
    let reading = RwSignal::new(false);
    // How far a large file has been read (a memory snapshot is read in slices).
    let progress = RwSignal::new(None::<String>);
    if let Some(snapshot) = snapshot {
        let pending: browser::Pending = std::rc::Rc::new(std::cell::RefCell::new(Some(snapshot)));
        reading.set(true);
        let show = move |loaded: Loaded| {
            // A file the user opened meanwhile stays.
            if primary.with_untracked(Option::is_none) && job.with_untracked(Option::is_none) {
                primary.set(Some(Opened::new(loaded)));
                reading.set(false);
                progress.set(None);
            }
        };
        // A printout cannot wait for the worker: what it has not handed over is read here.
        let for_print = pending.clone();
        browser::on_window_event("beforeprint", move || {
            if let Some(loaded) = browser::read_pending_now(&for_print) {
                show(loaded);
            }
        });
        leptos::task::spawn_local(async move {
            if let Some(loaded) = browser::read_embedded_snapshot(pending, progress).await {
                show(loaded);
            }
        });
    }

    let open_files = move |files: Vec<web_sys::File>, target: Target| {
        if files.is_empty() {
            return;
        }
        reading.set(true);
        leptos::task::spawn_local(async move {
            let target = match target {
                Target::Open if files.len() >= JOB_FILES => Target::Job,
                t => t,
            };
            let mut loaded = Vec::new();
            for f in files {
                loaded.push(browser::read_file(f, progress).await);
            }
            let mut loaded = loaded.into_iter();
            match target {
                Target::Open => {
                    job.set(None);
                    primary.set(loaded.next().map(Opened::new));
                    compare.set(loaded.next().map(Opened::new));
                }
                Target::Compare => compare.set(loaded.next().map(Opened::new)),
                Target::Job => {
                    primary.set(None);
                    compare.set(None);
                    job.set(Some(loaded.map(Arc::new).collect()));
                }
            }
            reading.set(false);
            progress.set(None);
        });
    };
    let on_open = move |ev: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        open_files(browser::files(input.files()), Target::Open);
        input.set_value("");
    };
    let on_job = move |ev: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        open_files(browser::files(input.files()), Target::Job);
        input.set_value("");
    };
    let on_compare = move |ev: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        open_files(browser::files(input.files()), Target::Compare);
        input.set_value("");
    };
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        let files = browser::files(ev.data_transfer().and_then(|d| d.files()));
        let target = if files.len() == 1 && primary.with_untracked(Option::is_some) {
            Target::Compare
        } else {
            Target::Open
        };
        open_files(files, target);
    };

    // A printout holds what the screen folds away or pages.
    let printing = RwSignal::new(browser::printing());
    provide_context(Printing(printing));
    browser::on_window_event("beforeprint", move || {
        printing.set(true);
        browser::open_all_details();
    });
    browser::on_window_event("afterprint", move || printing.set(false));

    Effect::new(move |_| {
        let title = match job.with(|j| j.as_ref().map(Vec::len)) {
            Some(n) => format!("oomscope: a job of {n} traces"),
            None => match primary.get() {
                None => "oomscope viewer".to_owned(),
                Some(o) => {
                    // The verdict in the tab, once the analysis is there.
                    let short =
                        o.analysis
                            .get()
                            .zip(o.loaded.trace.clone())
                            .map(|(a, t)| oomscope_analysis::render::verdict::verdict(&t, &a).short)
                            // The report's own verdict until then.
                            .or_else(|| o.loaded.verdict.as_ref().map(|v| v.short.clone()))
                            .or_else(|| {
                                // A memory snapshot: its most severe finding.
                                let s = o.loaded.snapshot.as_ref()?;
                                Some(s.analysis.findings.first().map_or_else(
                                    || "no problem found".to_owned(),
                                    |f| f.title.clone(),
                                ))
                            });
                    match short {
                        Some(s) => format!("{s} · {} · oomscope", o.loaded.name),
                        None => format!("oomscope: {}", o.loaded.name),
                    }
                }
            },
        };
        browser::set_title(&title);
    });

    view! {
        <div class="app" on:dragover=|ev: leptos::ev::DragEvent| ev.prevent_default() on:drop=on_drop>
            <header>
                <h1>"oomscope"</h1>
                <label class="file">"Open trace(s)…"
                    <input id="open-input" type="file" multiple accept=".oomt,.html,.pickle,.pkl,application/octet-stream,text/html" on:change=on_open/>
                </label>
                <label class="file">"Open a job's traces…"
                    <input id="job-input" type="file" multiple accept=".oomt,.html,application/octet-stream,text/html" on:change=on_job/>
                </label>
                <Show when=move || primary.with(Option::is_some)>
                    <label class="file">"Compare with…"
                        <input id="compare-input" type="file" accept=".oomt,.html,application/octet-stream,text/html" on:change=on_compare/>
                    </label>
                </Show>
                <Show when=move || compare.with(Option::is_some)>
                    <button id="close-compare" on:click=move |_| compare.set(None)>"close comparison"</button>
                </Show>
                <span id="status">{move || match (reading.get(), progress.get()) {
                    (true, Some(p)) => p,
                    (true, None) => "reading…".to_owned(),
                    _ => String::new(),
                }}</span>
            </header>
            {move || match (job.get(), primary.get()) {
                (Some(traces), _) => view! { <JobReport traces=traces/> }.into_any(),
                (None, None) => view! {
                    <div class="dropzone" id="dropzone">
                        <p>"Drop one trace (.oomt, or a report .html) here to inspect it, two to compare them, or a job's traces (three or more; or the job button) to see its ranks together."</p>
                        <p class="hint">"Everything happens in this page: nothing is uploaded."</p>
                    </div>
                }.into_any(),
                (None, Some(a)) => view! { <Report opened=a compare=compare/> }.into_any(),
            }}
        </div>
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
    let analysed = move || match analysis.get() {
        None => view! { <p id="analysing" class="hint">"analysing…"</p> }.into_any(),
        Some(a) => {
            let spotlight = oomscope_analysis::render::verdict::spotlight(&analysed_trace, &a);
            view! {
                <Findings findings=a.findings.clone() id="findings"
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
        <Breakdown trace=trace.clone() analysis=a.clone()/>
        <Statistics trace=trace.clone()/>
        <BatchTrials trace=trace analysis=a/>
    }
}

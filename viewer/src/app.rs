//! The page: opening traces (picker, drag and drop, or those a report embeds) and choosing what to
//! show: one trace's report and the comparison when a second trace is open ([`crate::report`]), or
//! a job's traces together ([`crate::job`]).

use std::sync::Arc;

use leptos::prelude::*;

use crate::browser;
use crate::job::JobReport;
use crate::load::Loaded;
use crate::open;
use crate::print::Printing;
use crate::report::{Opened, Report};
use crate::views::LivePanel;

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
/// up; `live` the traces `collector serve` streams to the page as their runs write them.
#[component]
pub fn App(
    initial: Vec<Loaded>,
    #[prop(default = None)] snapshot: Option<open::EmbeddedSnapshot>,
    #[prop(default = Vec::new())] live: Vec<crate::live::Source>,
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
        let pending: open::Pending = std::rc::Rc::new(std::cell::RefCell::new(Some(snapshot)));
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
            if let Some(loaded) = open::read_pending_now(&for_print) {
                show(loaded);
            }
        });
        leptos::task::spawn_local(async move {
            if let Some(loaded) = open::read_embedded_snapshot(pending, progress).await {
                show(loaded);
            }
        });
    }

    // What the page says of the traces it follows: how the following goes, and where the run is
    // (its last mark; the verdict, the charts and the tables say the rest).
    let live_note = RwSignal::new(String::new());
    let live_state = RwSignal::new(None);
    let following = !live.is_empty();
    // A file the user opened on a live page stays shown: the run is still followed (its note
    // goes on), but no longer replaces what the user chose to look at.
    let user_opened = RwSignal::new(false);
    if following {
        let wanted = move || !user_opened.get_untracked();
        crate::live::follow(
            live,
            live_note,
            live_state,
            wanted,
            move |mut traces: Vec<Loaded>| {
                if traces.len() > 1 {
                    job.set(Some(traces.into_iter().map(Arc::new).collect()));
                } else if let Some(loaded) = traces.pop() {
                    primary.set(Some(Opened::analysed(loaded)));
                }
            },
        );
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
                loaded.push(open::read_file(f, progress).await);
            }
            let mut loaded = loaded.into_iter();
            if following && target != Target::Compare {
                user_opened.set(true);
            }
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
                    let short = o
                        .analysis
                        .get()
                        .zip(o.loaded.trace.clone())
                        .map(|(a, t)| oomscope_words::verdict::verdict(&t, &a).short)
                        // The report's own verdict until then.
                        .or_else(|| o.loaded.verdict.as_ref().map(|v| v.short.clone()))
                        .or_else(|| {
                            // A memory snapshot: its most severe finding.
                            let s = o.loaded.snapshot.as_ref()?;
                            Some(s.analysis.findings().first().map_or_else(
                                || "no problem found".to_owned(),
                                |f| oomscope_words::findings::snapshot_text(f).title,
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
                {following.then(|| view! {
                    <span id="live-note">
                        {move || live_note.get()}
                        {move || user_opened.get().then_some(
                            " (showing the file you opened; reload the page to show the run again)",
                        )}
                    </span>
                })}
                <span id="status">{move || match (reading.get(), progress.get()) {
                    (true, Some(p)) => p,
                    (true, None) => "reading…".to_owned(),
                    _ => String::new(),
                }}</span>
            </header>
            {following.then(|| view! { <LivePanel state=live_state/> })}
            {move || match (job.get(), primary.get()) {
                (Some(traces), _) => view! { <JobReport traces=traces/> }.into_any(),
                (None, None) if following => view! {
                    <p class="hint" id="live-waiting">{move || live_note.get()}</p>
                }.into_any(),
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

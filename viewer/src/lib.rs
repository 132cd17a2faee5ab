//! # oomscope-viewer
//!
//! The browser viewer: a leptos client-side app, compiled to WASM, that decodes oomscope traces
//! and runs the same `oomscope-analysis` as `collector summary` inside the page, so the
//! terminal and the browser show the same numbers and nothing is uploaded anywhere. Charts are
//! drawn with plotters on `<canvas>`.
//!
//! Modules: [`load`] (bytes → trace, prefix kept on damage), [`view_model`] (pure, unit-tested
//! values the page shows), [`browser`] (the report's embedded traces, files, downloads),
//! [`timeline`] and [`views`] (components, one view per file), [`app`] (layout and opening
//! files), [`job`] (a job's traces together: the ranks of every node, then one trace), [`live`]
//! (traces followed as their runs write them, from `collector serve`), [`worker`] (large memory
//! snapshots read off the page's thread).

// leptos components receive their props by value (the macro builds a props struct), so this
// lint would flag every component that only reads an `Arc` it was given.
#![allow(clippy::needless_pass_by_value)]

pub mod app;
pub mod browser;
pub mod chart;
pub mod job;
pub mod live;
pub mod load;
pub mod open;
pub mod print;
pub mod report;
pub mod series;
pub mod snapshot_wire;
pub mod timeline;
pub mod view_model;
pub mod views;
pub mod worker;

pub use app::App;

/// Mounts the viewer on `<body>`, with the report's embedded traces if there are any. A panic
/// leaves a message on the page rather than a blank or half-drawn one.
pub fn start() {
    // In the page's Web Worker (no window): answer its requests instead.
    if web_sys::window().is_none() {
        worker::serve();
        return;
    }
    std::panic::set_hook(Box::new(|info| {
        let message = format!("The viewer hit an internal error: {info}");
        let Some(doc) = web_sys::window().and_then(|w| w.document()) else {
            return;
        };
        if let (Some(body), Ok(div)) = (doc.body(), doc.create_element("div")) {
            div.set_class_name("banner error");
            div.set_id("viewer-crash");
            div.set_text_content(Some(&message));
            let _ = body.prepend_with_node_1(&div);
        }
    }));
    browser::record_time("data-start-ms");
    // A large snapshot is read in the background, the page shows its progress meanwhile.
    // The page `collector serve` serves names its traces' addresses instead of holding them.
    let live = live::sources();
    let snapshot = live.is_empty().then(open::embedded_snapshot).flatten();
    let initial = match (&snapshot, live.is_empty()) {
        (None, true) => open::embedded_traces(),
        _ => Vec::new(),
    };
    browser::record_time("data-read-ms");
    let (attached_now, attached_later) = open::embedded_snapshots();
    leptos::mount::mount_to_body(move || {
        use leptos::prelude::*;
        // Large attached snapshots fill their slot under the OOM once read in the background,
        // or at once when the page is printed (a printout cannot wait for the worker).
        let later: Vec<(open::Pending, RwSignal<Option<load::NamedSnapshot>>)> = attached_later
            .into_iter()
            .map(|e| {
                (
                    std::rc::Rc::new(std::cell::RefCell::new(Some(e))),
                    RwSignal::new(None),
                )
            })
            .collect();
        let slots = attached_now
            .into_iter()
            .map(|named| RwSignal::new(Some(named)))
            .chain(later.iter().map(|(_, slot)| *slot))
            .collect();
        provide_context(views::AttachedSnapshots(slots));
        let for_print = later.clone();
        browser::on_window_event("beforeprint", move || {
            for (pending, slot) in &for_print {
                if let Some(named) = open::read_pending_now(pending).and_then(load::Loaded::named) {
                    slot.set(Some(named));
                }
            }
        });
        leptos::task::spawn_local(async move {
            for (pending, slot) in later {
                let read = open::read_embedded_snapshot(pending, RwSignal::new(None)).await;
                if let Some(named) = read.and_then(load::Loaded::named) {
                    slot.set(Some(named));
                }
            }
        });
        view! { <App initial=initial snapshot=snapshot live=live/> }
    });
}

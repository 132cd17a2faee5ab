//! Traces followed while their runs record them: the page `collector serve` serves names each
//! trace's address (`page::LIVE_ATTRIBUTE`) instead of holding its bytes. The page asks for the
//! bytes from where it got to (the server answers at once when there are some, else after a
//! wait) and hands them to the analysis's live feed (`oomscope_analysis::live::LiveFeed`,
//! the loop `collector watch` runs too, with the same throttle), and shows the trace again
//! (charts, verdict, analysis, and a lone run's live state: its memory, alerts and leak) when
//! whole chunks were added, no more often than [`REFRESH_MS`], until the trace ends.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use leptos::prelude::{RwSignal, Set as _};
use oomscope_analysis::live::LiveFeed;
use oomscope_analysis::live::LiveState;
use oomscope_report::page::{LIVE_ATTRIBUTE, WAITING_HEADER, trace_element_id};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::browser::{attribute, document, now_ms, sleep_ms};
use crate::load::Loaded;

/// The page shows a followed trace again no more often than this, and no later than this after
/// its bytes arrived (while a refresh costs less than [`REFRESH_SHARE`] of it).
pub const REFRESH_MS: f64 = 400.0;

/// The share of the page's time refreshes may take: a long run's refresh (its analysis grows
/// with the trace) comes no sooner than its last one's cost divided by it.
pub const REFRESH_SHARE: f64 = 0.25;

/// How long the page waits before asking again when the server did not answer.
const RETRY_MS: i32 = 2000;

/// A trace the page follows: its name and the address of its bytes (ending in `?` or `&`).
#[derive(Debug, Clone)]
pub struct Source {
    /// The trace's name.
    pub name: String,
    /// Where its bytes are fetched (`from=N` is appended).
    pub address: String,
}

/// The traces this page follows (none: a report or the bare viewer).
pub fn sources() -> Vec<Source> {
    let Some(doc) = document() else {
        return Vec::new();
    };
    (0..)
        .map_while(|i| doc.get_element_by_id(&trace_element_id(i)))
        .map_while(|el| {
            Some(Source {
                address: attribute(&el, LIVE_ATTRIBUTE)?,
                name: attribute(&el, "data-name").unwrap_or_else(|| "live trace".to_owned()),
            })
        })
        .collect()
}

/// One followed trace.
struct Followed {
    source: Source,
    feed: LiveFeed,
    /// Bytes received (the next request's offset).
    offset: u64,
    failed: Option<String>,
}

impl Followed {
    /// What the page shows of it now: nothing before its first chunk. `analysed`: the page
    /// shows this trace's report (it follows no other), which takes its analysis from the feed
    /// (a job's page analyses the traces together, and the one the user picks when picked).
    fn loaded(&mut self, analysed: bool) -> Option<Loaded> {
        let name = self.source.name.clone();
        if let Some(e) = &self.failed {
            return Some(Loaded::failed(name, e.clone()));
        }
        let trace = self.feed.trace()?;
        let analysis = analysed.then(|| self.feed.analysis().cloned()).flatten();
        Some(Loaded::followed(
            name,
            self.offset as usize,
            Arc::new(trace.clone()),
            analysis,
        ))
    }
}

/// The followed traces and when they were last shown.
struct Following {
    traces: Vec<Followed>,
    shown_ms: f64,
    /// Chunks arrived since they were last shown.
    unshown: bool,
    /// A show is scheduled.
    scheduled: bool,
    /// A show is scheduled for when a feed's analysis is due (none arrives with bytes).
    analysis_scheduled: bool,
    /// What the last show took (the traces copied and analysed).
    cost_ms: f64,
    show: Rc<dyn Fn(Vec<Loaded>)>,
    /// Whether the page shows the followed traces now (not while it shows a file the user
    /// opened): when not, a refresh sets only the note, and copies nothing.
    wanted: Rc<dyn Fn() -> bool>,
    note: RwSignal<String>,
    /// A lone run's live state (its memory against its limits, the alerts, the leak).
    state: RwSignal<Option<LiveState>>,
}

/// Follows `sources` until each ends, calling `show` with every trace as it stands (at most every
/// [`REFRESH_MS`]; none before a trace's first chunk; only while `wanted` says the page shows
/// them), setting `note` to what the page says about the following and `state` to a lone run's
/// live state.
pub fn follow(
    sources: Vec<Source>,
    note: RwSignal<String>,
    state: RwSignal<Option<LiveState>>,
    wanted: impl Fn() -> bool + 'static,
    show: impl Fn(Vec<Loaded>) + 'static,
) {
    let count = sources.len();
    let state = Rc::new(RefCell::new(Following {
        traces: sources
            .into_iter()
            .map(|source| Followed {
                source,
                feed: LiveFeed::default(),
                offset: 0,
                failed: None,
            })
            .collect(),
        shown_ms: f64::NEG_INFINITY,
        unshown: true,
        scheduled: false,
        analysis_scheduled: false,
        cost_ms: 0.0,
        show: Rc::new(show),
        wanted: Rc::new(wanted),
        note,
        state,
    }));
    note.set("live: following".to_owned());
    for i in 0..count {
        let state = state.clone();
        leptos::task::spawn_local(async move {
            loop {
                let address = {
                    let s = state.borrow();
                    format!("{}from={}", s.traces[i].source.address, s.traces[i].offset)
                };
                let done = match fetch(&address).await {
                    Some((bytes, waiting)) => received(&state, i, &bytes, waiting),
                    None => {
                        note.set("live: the server did not answer; asking again".to_owned());
                        sleep_ms(RETRY_MS).await;
                        false
                    }
                };
                if done {
                    break;
                }
            }
        });
    }
}

/// Takes the bytes fetched for trace `i` and refreshes the page when it is due; whether that
/// trace is done (ended, or not a trace).
fn received(state: &Rc<RefCell<Following>>, i: usize, bytes: &[u8], waiting: bool) -> bool {
    let done = {
        let mut s = state.borrow_mut();
        let note = s.note;
        let t = &mut s.traces[i];
        let added = match t.feed.push(bytes) {
            Ok(added) => added,
            Err(e) => {
                t.failed = Some(format!("this is not a readable oomscope trace: {e}"));
                false
            }
        };
        t.offset += bytes.len() as u64;
        if waiting {
            note.set(format!("live: waiting for {} to appear", t.source.name));
        }
        let changed = added || t.failed.is_some();
        let done = t.failed.is_some() || t.feed.ended();
        s.unshown |= changed;
        done
    };
    refresh(state);
    done
}

/// Shows the traces when chunks arrived and the last show is old enough ([`REFRESH_MS`],
/// [`REFRESH_SHARE`]); else schedules the show for then.
fn refresh(state: &Rc<RefCell<Following>>) {
    let wait_ms = {
        let s = state.borrow();
        if !s.unshown || s.scheduled {
            return;
        }
        REFRESH_MS.max(s.cost_ms / REFRESH_SHARE) - (now_ms() - s.shown_ms)
    };
    if wait_ms > 0.0 {
        state.borrow_mut().scheduled = true;
        let state = state.clone();
        leptos::prelude::set_timeout(
            move || {
                state.borrow_mut().scheduled = false;
                refresh(&state);
            },
            std::time::Duration::from_millis(wait_ms.ceil() as u64),
        );
        return;
    }
    let started_ms = now_ms();
    let (loaded, text, show, note, live) = {
        let mut s = state.borrow_mut();
        s.unshown = false;
        s.shown_ms = started_ms;
        for t in s.traces.iter_mut().filter(|t| t.failed.is_none()) {
            t.feed.refresh(&now_ms);
        }
        let ended = s
            .traces
            .iter()
            .all(|t| t.failed.is_some() || t.feed.ended());
        let mut text = if ended {
            "live: ended"
        } else {
            "live: following"
        }
        .to_owned();
        // Where a lone run is: its last mark.
        if let [one] = &s.traces[..]
            && let Some(m) = one.feed.trace().and_then(|t| t.marks.last())
        {
            text.push_str(&format!(" · step {} at {}", m.step, m.name));
        }
        let one = s.traces.len() == 1;
        let loaded =
            (s.wanted)().then(|| s.traces.iter_mut().filter_map(|t| t.loaded(one)).collect());
        let live = match &s.traces[..] {
            [one] => one.feed.state().cloned(),
            _ => None,
        };
        (loaded, text, s.show.clone(), s.note, (s.state, live))
    };
    note.set(text);
    live.0.set(live.1);
    if let Some(loaded) = loaded {
        show(loaded);
    }
    state.borrow_mut().cost_ms = now_ms() - started_ms;
    show_analysis_when_due(state);
}

/// Schedules a show for when a feed's analysis, not due at the last one, is: a run that stops
/// appending (paused, hung, between long steps) brings no bytes to refresh on, and its page would
/// keep the analysis of an older part of it (the terminal's refresh runs on a clock).
fn show_analysis_when_due(state: &Rc<RefCell<Following>>) {
    let due_in_ms = {
        let s = state.borrow();
        if s.analysis_scheduled {
            return;
        }
        let now = now_ms();
        s.traces
            .iter()
            .filter(|t| t.failed.is_none())
            .filter_map(|t| t.feed.analysis_due_in_ms(now))
            .reduce(f64::min)
    };
    let Some(due_in_ms) = due_in_ms else {
        return;
    };
    state.borrow_mut().analysis_scheduled = true;
    let state = state.clone();
    leptos::prelude::set_timeout(
        move || {
            {
                let mut s = state.borrow_mut();
                s.analysis_scheduled = false;
                s.unshown = true;
            }
            refresh(&state);
        },
        std::time::Duration::from_millis(due_in_ms.max(REFRESH_MS).ceil() as u64),
    );
}

/// The bytes at `address`, and whether the server said the file does not exist yet; `None` when
/// no good answer came.
async fn fetch(address: &str) -> Option<(Vec<u8>, bool)> {
    let response: web_sys::Response = JsFuture::from(web_sys::window()?.fetch_with_str(address))
        .await
        .ok()?
        .dyn_into()
        .ok()?;
    if !response.ok() {
        return None;
    }
    let waiting = response.headers().has(WAITING_HEADER).unwrap_or(false);
    let buffer = JsFuture::from(response.array_buffer().ok()?).await.ok()?;
    Some((js_sys::Uint8Array::new(&buffer).to_vec(), waiting))
}

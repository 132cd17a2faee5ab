//! The few places the viewer talks to the browser directly: the trace a report embeds, files the
//! user opens, downloads, and the timing mark the performance test reads.
//!
//! Nothing here sends anything anywhere: files are read in the page, downloads are generated in
//! the page from `Blob`s, and a report's Content-Security-Policy forbids network access anyway.

use std::cell::RefCell;
use std::rc::Rc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use leptos::prelude::{RwSignal, Set as _};
use oomscope_analysis::render::verdict::Verdict;
use oomscope_analysis::report_page::trace_element_id;
use oomscope_format::units::{format_bytes, format_count};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::load::Loaded;

fn document() -> Option<web_sys::Document> {
    web_sys::window()?.document()
}

fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    // The collector writes one unbroken line; a page edited by hand may have wrapped it.
    let text = text.trim();
    if !text.contains(|c: char| c.is_ascii_whitespace()) {
        return STANDARD.decode(text);
    }
    let compact: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    STANDARD.decode(compact)
}

/// The bytes of an element's base64 text. The browser's own decoder (`Uint8Array.fromBase64`,
/// which also skips line breaks) when it has one: an hour's trace is 3 MB of base64, which it
/// decodes several times faster than this module, and the text never has to be copied into
/// WASM as UTF-8 first (together ~50 ms of the hour report's start, BENCHMARKS.md).
fn embedded_bytes(el: &web_sys::Element) -> Result<Vec<u8>, String> {
    let damaged =
        |e: &dyn std::fmt::Display| format!("the report's embedded trace is damaged: {e}");
    let text = js_sys::Reflect::get(el, &"textContent".into()).unwrap_or_default();
    let uint8_array = js_sys::Uint8Array::new_with_length(0).constructor();
    let from_base64 = js_sys::Reflect::get(&uint8_array, &"fromBase64".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok());
    if let Some(from_base64) = from_base64.filter(|_| text.is_string()) {
        return match from_base64.call1(&uint8_array, &text) {
            Ok(array) => Ok(js_sys::Uint8Array::new(&array).to_vec()),
            Err(e) => Err(damaged(&String::from(js_sys::Error::from(e).message()))),
        };
    }
    let text = text.as_string().unwrap_or_default();
    decode_base64(&text).map_err(|e| damaged(&e))
}

/// The traces a report carries (none when this page is the bare viewer; several for a job).
pub fn embedded_traces() -> Vec<Loaded> {
    let mut traces: Vec<Loaded> = Vec::new();
    while let Some(next) = embedded_trace(&trace_element_id(traces.len())) {
        traces.push(next);
    }
    traces
}

/// A memory snapshot read and analysed, by its name.
pub type NamedSnapshot = (String, std::sync::Arc<crate::load::OpenSnapshot>);

/// The memory snapshots a run's report attaches to its trace (saved at its OOMs): the small ones
/// read and analysed at once, the large ones as the report holds them, to read in the background
/// ([`read_embedded_snapshot`]). One that cannot be read is left out (the trace is what the
/// report is about).
pub fn embedded_snapshots() -> (Vec<NamedSnapshot>, Vec<EmbeddedSnapshot>) {
    let (mut now, mut later) = (Vec::new(), Vec::new());
    let Some(doc) = document() else {
        return (now, later);
    };
    for i in 0.. {
        let id = oomscope_analysis::report_page::snapshot_element_id(i);
        let Some(el) = doc.get_element_by_id(&id) else {
            break;
        };
        let Some(embedded) = EmbeddedSnapshot::of(&el) else {
            continue;
        };
        if embedded.bytes.len() >= BACKGROUND_BYTES {
            later.push(embedded);
        } else if let Some(named) = embedded.read_here().named() {
            now.push(named);
        }
    }
    (now, later)
}

/// A memory snapshot a report carries (of one snapshot, or attached to a run's trace), as its
/// element holds it.
#[derive(Debug, Clone)]
pub struct EmbeddedSnapshot {
    /// The file's name.
    pub name: String,
    /// The element's bytes (base64 decoded, still deflated).
    pub bytes: Vec<u8>,
    /// Its `data-encoding`.
    pub encoding: Option<String>,
}

impl EmbeddedSnapshot {
    /// What `el` holds, unless its base64 is damaged.
    fn of(el: &web_sys::Element) -> Option<EmbeddedSnapshot> {
        Some(EmbeddedSnapshot {
            name: attribute(el, "data-name").unwrap_or_else(|| "embedded snapshot".to_owned()),
            bytes: embedded_bytes(el).ok()?,
            encoding: el.get_attribute("data-encoding"),
        })
    }

    /// Read and analysed in the page, at once.
    fn read_here(self) -> Loaded {
        match oomscope_analysis::report_page::unpack(self.bytes, self.encoding.as_deref()) {
            Ok(bytes) => Loaded::decode(self.name, &bytes, None),
            Err(e) => Loaded::failed(self.name, e),
        }
    }
}

/// Embedded snapshots at least this large (deflated) are read in the page's worker; smaller ones
/// at once, so that the page is complete when it appears.
const BACKGROUND_BYTES: usize = 1 << 20;

/// Base64 characters of an element decoded to tell a snapshot from a trace.
const SNIFF_CHARS: u32 = 4096;

/// The large memory snapshot a report of one snapshot carries, to read in the background
/// ([`read_embedded_snapshot`]); `None` for any other page (read by [`embedded_traces`]). Told
/// from a trace by its length and first bytes, so that a trace's report decodes its base64 once.
pub fn embedded_snapshot() -> Option<EmbeddedSnapshot> {
    let doc = document()?;
    if doc.get_element_by_id(&trace_element_id(1)).is_some() {
        return None;
    }
    let el = doc.get_element_by_id(&trace_element_id(0))?;
    let text: js_sys::JsString = js_sys::Reflect::get(&el, &"textContent".into())
        .ok()?
        .dyn_into()
        .ok()?;
    if (text.length() as usize) / 4 * 3 < BACKGROUND_BYTES {
        return None;
    }
    let head: String = String::from(text.slice(0, SNIFF_CHARS))
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let head = STANDARD.decode(&head[..head.len() / 4 * 4]).ok()?;
    let encoding = el.get_attribute("data-encoding");
    if !oomscope_analysis::report_page::holds_snapshot(&head, encoding.as_deref()) {
        return None;
    }
    EmbeddedSnapshot::of(&el)
}

/// A snapshot a report carries, waiting to be read: taken by whichever comes first, the read in
/// the background or a printout (which cannot wait for it).
pub type Pending = Rc<RefCell<Option<EmbeddedSnapshot>>>;

/// Reads and analyses a snapshot a report carries: in the page's worker, else here at once.
/// `None` when a printout took it meanwhile ([`read_pending_now`]).
pub async fn read_embedded_snapshot(
    pending: Pending,
    progress: RwSignal<Option<String>>,
) -> Option<Loaded> {
    let (name, source) = {
        let slot = pending.borrow();
        let embedded = slot.as_ref()?;
        let bytes = js_sys::Uint8Array::from(&embedded.bytes[..]);
        let source = crate::worker::Source::Bytes(bytes, embedded.encoding.clone());
        (embedded.name.clone(), source)
    };
    let read = crate::worker::read(&name, source, progress).await;
    let embedded = pending.borrow_mut().take()?;
    Some(match read {
        Some(Ok(open)) => Loaded::analysed_snapshot(embedded.name, embedded.bytes.len(), open),
        Some(Err(e)) => Loaded::failed(embedded.name, e),
        None => embedded.read_here(),
    })
}

/// What is still waiting in `pending`, read here at once: a printout cannot wait for the worker.
pub fn read_pending_now(pending: &Pending) -> Option<Loaded> {
    pending.borrow_mut().take().map(EmbeddedSnapshot::read_here)
}

/// An element's base64 `data-` attribute, as text.
fn attribute(el: &web_sys::Element, name: &str) -> Option<String> {
    el.get_attribute(name)
        .and_then(|v| decode_base64(&v).ok())
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// One trace a report carries. Its name, the notice about thinned samples and (one trace's report)
/// the verdict its collector worked out travel base64-encoded in `data-` attributes, so no
/// recorded text is ever parsed as HTML, not even in an attribute.
fn embedded_trace(id: &str) -> Option<Loaded> {
    let el = document()?.get_element_by_id(id)?;
    let attr = |name: &str| attribute(&el, name);
    let name = attr("data-name").unwrap_or_else(|| "embedded trace".to_owned());
    let notice = attr("data-notice");
    let encoding = el.get_attribute("data-encoding");
    let bytes = embedded_bytes(&el)
        .and_then(|b| oomscope_analysis::report_page::unpack(b, encoding.as_deref()));
    let mut loaded = match bytes {
        Ok(bytes) => Loaded::decode(name, &bytes, notice),
        Err(e) => Loaded::failed(name, e),
    };
    if loaded.trace.is_some() {
        loaded.verdict = attr("data-verdict").and_then(|v| Verdict::from_text(&v));
    }
    Some(loaded)
}

/// Reads a file the user picked or dropped. A PyTorch memory snapshot (often hundreds of
/// megabytes) is read, analysed and charted in a Web Worker ([`crate::worker`]), or where none
/// can be started a slice at a time in the page ([`read_snapshot_in_slices`]), with `progress`
/// saying how far it got; anything else is read whole.
pub async fn read_file(file: web_sys::File, progress: RwSignal<Option<String>>) -> Loaded {
    let name = file.name();
    let head = read_slice(&file, 0.0, file.size().min(2.0)).await;
    if head
        .as_deref()
        .is_ok_and(oomscope_snapshot::looks_like_pickle)
    {
        // Off the page's thread where a worker can be started, else a slice at a time here.
        return match crate::worker::read(&name, crate::worker::Source::File(file.clone()), progress)
            .await
        {
            Some(Ok(open)) => Loaded::analysed_snapshot(name, file.size() as usize, open),
            Some(Err(e)) => Loaded::failed(name, e),
            None => read_snapshot_in_slices(name, &file, progress).await,
        };
    }
    match JsFuture::from(file.array_buffer()).await {
        Ok(buffer) => {
            let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
            Loaded::open(name, &bytes)
        }
        Err(_) => Loaded::failed(name, "the browser could not read this file".to_owned()),
    }
}

/// How far reading a snapshot has got, as the page's status says it.
pub fn reading_progress(name: &str, read_bytes: u64, size_bytes: u64, entries: usize) -> String {
    format!(
        "reading {name}: {} of {} ({} trace entries)",
        format_bytes(read_bytes),
        format_bytes(size_bytes),
        format_count(entries as u64)
    )
}

/// How much of a snapshot is read at a time: the page gets the event loop back after each slice
/// (a few tenths of a second of parsing at most), so it stays responsive and shows progress.
const SNAPSHOT_SLICE_BYTES: f64 = 4.0 * 1024.0 * 1024.0;

/// Bytes `from..to` of `file`.
async fn read_slice(file: &web_sys::Blob, from: f64, to: f64) -> Result<Vec<u8>, String> {
    let cannot = |_| "the browser could not read this file".to_owned();
    let slice = file.slice_with_f64_and_f64(from, to).map_err(cannot)?;
    let buffer = JsFuture::from(slice.array_buffer()).await.map_err(cannot)?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Reads a memory snapshot slice by slice ([`oomscope_snapshot::SnapshotParser`]): the
/// file is never held whole, and between slices the page redraws `progress`.
async fn read_snapshot_in_slices(
    name: String,
    file: &web_sys::File,
    progress: RwSignal<Option<String>>,
) -> Loaded {
    let size = file.size();
    let mut parser = oomscope_snapshot::SnapshotParser::default();
    let mut at = 0.0;
    let result = loop {
        if at < size {
            let to = (at + SNAPSHOT_SLICE_BYTES).min(size);
            match read_slice(file, at, to).await {
                Ok(bytes) => parser.push(bytes),
                Err(e) => return Loaded::failed(name, e),
            }
            at = to;
        } else {
            parser.finish();
        }
        if let Some(done) = parser.resume() {
            break done;
        }
        progress.set(Some(reading_progress(
            &name,
            parser.bytes_read(),
            size as u64,
            parser.entries(),
        )));
        yield_to_page().await;
    };
    record_time("data-snapshot-read-ms");
    progress.set(Some(format!("analysing {name}…")));
    yield_to_page().await;
    // The analysis, then the charts' timelines, each in a task of its own.
    let snapshot = match result {
        Ok(s) => s,
        Err(e) => return Loaded::failed(name, e.to_string()),
    };
    let analysis = oomscope_analysis::snapshot::analysis::analyze_snapshot(&snapshot);
    record_time("data-snapshot-analysis-ms");
    progress.set(Some(format!("drawing {name}…")));
    yield_to_page().await;
    let stacked = crate::load::OpenSnapshot::stacked(&snapshot, &analysis);
    record_time("data-snapshot-stacked-ms");
    Loaded::analysed_snapshot(
        name,
        size as usize,
        crate::load::OpenSnapshot {
            snapshot,
            analysis,
            stacked,
        },
    )
}

/// Lets the page handle events and paint before going on. By a 1 ms timer: chromium runs a
/// 0 ms timer before timers already due (measured: a 0.5 s analysis after a 0 ms yield was one
/// 1 s stall with the 50 ms timer that watched it), a delayed one after them.
pub async fn yield_to_page() {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 1);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// The files of a `FileList` (picker or drop), in order.
pub fn files(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    let Some(list) = list else {
        return Vec::new();
    };
    (0..list.length()).filter_map(|i| list.get(i)).collect()
}

/// Offers `text` as a download named `file_name`.
pub fn download(file_name: &str, mime: &str, text: &str) {
    let Some(doc) = document() else { return };
    let parts = js_sys::Array::of1(&wasm_bindgen::JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    let Ok(blob) = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options) else {
        return;
    };
    let Ok(url) = web_sys::Url::create_object_url_with_blob(&blob) else {
        return;
    };
    if let Ok(a) = doc.create_element("a") {
        let a: web_sys::HtmlAnchorElement = a.unchecked_into();
        a.set_href(&url);
        a.set_download(file_name);
        a.click();
    }
    let _ = web_sys::Url::revoke_object_url(&url);
}

/// Milliseconds since the page started loading.
pub fn now_ms() -> f64 {
    web_sys::window()
        .and_then(|w| w.performance())
        .map_or(0.0, |p| p.now())
}

/// Sets `name` on the page's body to the milliseconds since the page started (the browser tests
/// and BENCHMARKS.md read them: `data-analysis-ms`, `data-tables-ms`).
pub fn record_time(name: &str) {
    if let Some(body) = document().and_then(|d| d.body()) {
        let _ = body.set_attribute(name, &format!("{:.1}", now_ms()));
    }
}

/// [`record_time`], unless `name` was recorded already: when the first chart finished drawing
/// (`data-first-chart-ms`) and when the verdict was first on the page (`data-verdict-ms`), which
/// the browser tests and BENCHMARKS.md read.
pub fn record_first_time(name: &str) {
    if let Some(body) = document().and_then(|d| d.body())
        && !body.has_attribute(name)
    {
        record_time(name);
    }
}

/// Sets the page title (a DOM property: the text is never parsed).
pub fn set_title(title: &str) {
    if let Some(d) = document() {
        d.set_title(title);
    }
}

/// Whether the page is being printed right now (Ctrl-P, or headless `--print-to-pdf`).
pub fn printing() -> bool {
    media_matches("print")
}

/// Whether the system asks for dark colours (`prefers-color-scheme: dark`); the charts follow it.
pub fn dark_mode() -> bool {
    media_matches("(prefers-color-scheme: dark)")
}

fn media_matches(query: &str) -> bool {
    web_sys::window()
        .and_then(|w| w.match_media(query).ok().flatten())
        .is_some_and(|m| m.matches())
}

/// Calls `f` on every `event` of the window for the page's lifetime (`resize`, `beforeprint`).
pub fn on_window_event(event: &str, f: impl FnMut() + 'static) {
    let Some(w) = web_sys::window() else { return };
    let closure = wasm_bindgen::closure::Closure::<dyn FnMut()>::new(f);
    let _ = w.add_event_listener_with_callback(event, closure.as_ref().unchecked_ref());
    // Lives as long as the page.
    closure.forget();
}

/// Opens every `<details>` so a printout holds what the screen keeps folded.
pub fn open_all_details() {
    let Some(list) = document().and_then(|d| d.query_selector_all("details").ok()) else {
        return;
    };
    for i in 0..list.length() {
        if let Some(d) = list
            .get(i)
            .and_then(|n| n.dyn_into::<web_sys::HtmlDetailsElement>().ok())
        {
            d.set_open(true);
        }
    }
}

/// Device pixels per CSS pixel (2 on most laptops' screens): the charts draw at this resolution.
pub fn device_pixel_ratio() -> f64 {
    web_sys::window()
        .map(|w| w.device_pixel_ratio())
        .filter(|r| r.is_finite() && *r > 0.0)
        .unwrap_or(1.0)
        .clamp(1.0, 4.0)
}

/// Calls `f` whenever `element`'s box changes size (`ResizeObserver`; the first call comes at
/// once). The observer lives as long as the element is observed.
pub fn observe_resize(element: &web_sys::Element, f: impl FnMut() + 'static) {
    let closure = wasm_bindgen::closure::Closure::<dyn FnMut()>::new(f);
    if let Ok(observer) = web_sys::ResizeObserver::new(closure.as_ref().unchecked_ref()) {
        observer.observe(element);
        // Held by the page from here on.
        std::mem::forget(observer);
    }
    closure.forget();
}

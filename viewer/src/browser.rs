//! The few places the viewer talks to the browser directly: elements and their base64 bytes,
//! files the user opens and downloads, the window's events and media, and the timing marks the
//! performance test reads. Bytes and the DOM only: what the bytes are is [`crate::load`]'s, and
//! which path a file takes (the worker or the page) is [`crate::open`]'s.
//!
//! Nothing here sends anything anywhere: files are read in the page, downloads are generated in
//! the page from `Blob`s, and a report's Content-Security-Policy forbids network access anyway.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use oomscope_format::units::{format_bytes, format_count};
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// The page's document (none in the worker).
pub fn document() -> Option<web_sys::Document> {
    web_sys::window()?.document()
}

/// Base64 as the collector writes it (one line), or wrapped by hand.
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
/// WASM as UTF-8 first (together ~50 ms of the hour report's start, docs/benchmarks-log.md,
/// 2026-11-23).
pub fn embedded_bytes(el: &web_sys::Element) -> Result<Vec<u8>, String> {
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

/// An element's base64 `data-` attribute, as text.
pub fn attribute(el: &web_sys::Element, name: &str) -> Option<String> {
    attribute_bytes(el, name).map(|b| String::from_utf8_lossy(&b).into_owned())
}

/// The bytes of a base64-encoded attribute (a report's verdict).
pub fn attribute_bytes(el: &web_sys::Element, name: &str) -> Option<Vec<u8>> {
    el.get_attribute(name).and_then(|v| decode_base64(&v).ok())
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

/// Bytes `from..to` of `file`.
pub async fn read_slice(file: &web_sys::Blob, from: f64, to: f64) -> Result<Vec<u8>, String> {
    let cannot = |_| "the browser could not read this file".to_owned();
    let slice = file.slice_with_f64_and_f64(from, to).map_err(cannot)?;
    let buffer = JsFuture::from(slice.array_buffer()).await.map_err(cannot)?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Lets the page handle events and paint before going on. By a 1 ms timer: chromium runs a
/// 0 ms timer before timers already due (measured: a 0.5 s analysis after a 0 ms yield was one
/// 1 s stall with the 50 ms timer that watched it), a delayed one after them.
pub async fn yield_to_page() {
    sleep_ms(1).await;
}

/// Waits `ms` milliseconds (a timer), giving the page the event loop meanwhile.
pub async fn sleep_ms(ms: i32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(w) = web_sys::window() {
            let _ = w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms);
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

//! What the page opens and how: the traces and memory snapshots a report embeds, a file the user
//! picks or drops. A large snapshot is read in the page's Web Worker ([`crate::worker`]), else a
//! slice at a time here; everything else is read at once ([`crate::load`]).

use std::cell::RefCell;
use std::rc::Rc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use leptos::prelude::{RwSignal, Set as _};
use oomscope_report::page::trace_element_id;
use oomscope_words::verdict::Verdict;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::browser::{
    attribute, attribute_bytes, document, embedded_bytes, read_slice, reading_progress,
    record_time, yield_to_page,
};
use crate::load::{Loaded, NamedSnapshot};

/// The traces a report carries (none when this page is the bare viewer; several for a job).
pub fn embedded_traces() -> Vec<Loaded> {
    let mut traces: Vec<Loaded> = Vec::new();
    while let Some(next) = embedded_trace(&trace_element_id(traces.len())) {
        traces.push(next);
    }
    traces
}

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
        let id = oomscope_report::page::snapshot_element_id(i);
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
        match oomscope_report::page::unpack(self.bytes, self.encoding.as_deref()) {
            Ok(bytes) => Loaded::decode(self.name, &bytes, None),
            Err(e) => Loaded::failed(self.name, e.into()),
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
    if !oomscope_report::page::holds_snapshot(&head, encoding.as_deref()) {
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
        .and_then(|b| Ok(oomscope_report::page::unpack(b, encoding.as_deref())?));
    let mut loaded = match bytes {
        Ok(bytes) => Loaded::decode(name, &bytes, notice),
        Err(e) => Loaded::failed(name, e),
    };
    if loaded.trace.is_some() {
        loaded.verdict = attribute_bytes(&el, "data-verdict").and_then(|v| Verdict::from_bytes(&v));
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

/// How much of a snapshot is read at a time: the page gets the event loop back after each slice
/// (a few tenths of a second of parsing at most), so it stays responsive and shows progress.
const SNAPSHOT_SLICE_BYTES: f64 = 4.0 * 1024.0 * 1024.0;

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

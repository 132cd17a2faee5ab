//! Reading a memory snapshot in a Web Worker, so that even a 1 GB pickle never stops the page:
//! the worker reads, analyses and builds the stacked timelines, the page only shows progress and
//! then takes the result a chunk at a time ([`crate::snapshot_wire`]).
//!
//! The worker runs the page's own code, so a report needs no second file and no network: the
//! page makes it from its module script's text up to [`GLUE_END`] (wasm-bindgen's glue, made a
//! classic script by [`classic_script`]) plus [`BOOT`], and sends it the WebAssembly module it
//! already compiled. In the worker, the viewer's
//! `start` finds no window and calls [`serve`] instead of mounting the page, which says it is
//! ready. Where there is no such script (the viewer served by `trunk serve`), or the browser
//! refuses the worker (a policy without `worker-src blob:`), the page reads the snapshot itself
//! ([`crate::browser`]: a picked file in slices, an embedded one at once); a worker that fails
//! after it was ready is an error on the page, not a second read.

use crate::snapshot_wire::{self as wire, Parts, Receiver};
use futures::StreamExt as _;
use futures::channel::mpsc;
use leptos::prelude::{RwSignal, Set as _};
use oomscope_analysis::snapshot::analysis::analyze_snapshot;
use oomscope_report::page::GLUE_END;
use oomscope_snapshot::SnapshotParser;
use wasm_bindgen::JsCast as _;
use wasm_bindgen::JsValue;
use wasm_bindgen::closure::Closure;

use crate::load::{OpenSnapshot, stacked_timelines};

/// What the worker runs after the glue: the first message is the page's WebAssembly module;
/// instantiating it runs the viewer's `start`, which hands the worker's messages to [`serve`].
const BOOT: &str =
    "\nself.onmessage = (e) => { self.onmessage = null; initSync({ module: e.data }); };\n";

/// How much of a snapshot the worker reads at a time (and says how far it got).
const SLICE_BYTES: usize = 4 << 20;

/// Where the snapshot's bytes are.
#[derive(Debug, Clone)]
pub enum Source {
    /// A file the user picked or dropped (the worker reads it a slice at a time).
    File(web_sys::File),
    /// A snapshot a report embeds, as its element holds it, and its `data-encoding`.
    Bytes(js_sys::Uint8Array, Option<String>),
}

/// The page's side: reads `source` in a worker, showing its progress in `progress`, and records
/// `data-snapshot-worker` on the page's body. `None` when no worker could be started: the
/// caller then reads the snapshot itself.
pub async fn read(
    name: &str,
    source: Source,
    progress: RwSignal<Option<String>>,
) -> Option<Result<OpenSnapshot, String>> {
    let (worker, mut messages) = match Running::start() {
        Ok(started) => started,
        Err(why) => return gave_up(&why),
    };
    let request = js_sys::Object::new();
    set(&request, "name", &name.into());
    let handed_over = match source {
        Source::File(f) => {
            set(&request, "file", &f);
            worker.worker.post_message(&request)
        }
        Source::Bytes(b, encoding) => {
            set(&request, "bytes", &b);
            set(
                &request,
                "encoding",
                &encoding.map_or(JsValue::NULL, Into::into),
            );
            // Handed over, not copied.
            worker
                .worker
                .post_message_with_transfer(&request, &js_sys::Array::of1(&b.buffer()))
        }
    };
    if handed_over.is_err() {
        return gave_up("the request could not be posted");
    }
    let mut receiver = Receiver::default();
    let mut heard = false;
    while let Some(message) = messages.next().await {
        let data = match message {
            Ok(data) => data,
            // The worker could not start (it says it is ready before anything else).
            Err(e) if !heard => return gave_up(&e),
            Err(e) => return Some(Err(format!("reading {name} in the background failed: {e}"))),
        };
        if !heard {
            heard = true;
            crate::browser::record_time("data-snapshot-worker");
        }
        if let Some(text) = get(&data, "progress").as_string() {
            progress.set(Some(text));
        }
        if let Some(phase) = get(&data, "phase").as_string() {
            crate::browser::record_time(&phase);
        }
        if let Some(error) = get(&data, "error").as_string() {
            return Some(Err(error));
        }
        let part = get(&data, "part");
        if part.is_object() {
            let bytes = js_sys::Uint8Array::new(&part).to_vec();
            match receiver.push(&bytes) {
                Ok(Some(parts)) => {
                    crate::browser::record_time("data-snapshot-received-ms");
                    return Some(Ok(OpenSnapshot::from(parts)));
                }
                Ok(None) => {}
                Err(e) => return Some(Err(e.to_string())),
            }
            // One chunk per task: the page paints between them.
            crate::browser::yield_to_page().await;
        }
    }
    None
}

/// No worker: the page reads the snapshot itself, and the reason is left where a developer (and
/// the browser tests) find it, `data-snapshot-worker-failed` on the page's body.
fn gave_up<T>(why: &str) -> Option<T> {
    if let Some(body) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.body())
    {
        let _ = body.set_attribute("data-snapshot-worker-failed", why);
    }
    None
}

/// What a worker said, or why it stopped.
type Messages = mpsc::UnboundedReceiver<Result<JsValue, String>>;

/// A worker started from the page's code; ended when dropped.
struct Running {
    worker: web_sys::Worker,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

impl Running {
    /// The worker, and its messages (and errors) as a stream; or why there is none.
    fn start() -> Result<(Running, Messages), String> {
        let glue = page_glue().ok_or("this page has no glue to start a worker from")?;
        let script = classic_script(&glue).ok_or("the glue cannot be a classic script")?;
        let parts = js_sys::Array::of2(&script.into(), &BOOT.into());
        let options = web_sys::BlobPropertyBag::new();
        options.set_type("text/javascript");
        let url = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options)
            .and_then(|blob| web_sys::Url::create_object_url_with_blob(&blob))
            .map_err(|_| "no blob address for the worker")?;
        let worker = web_sys::Worker::new(&url);
        let _ = web_sys::Url::revoke_object_url(&url);
        let worker = worker.map_err(|e| {
            e.dyn_ref::<js_sys::Error>().map_or_else(
                || "the browser refused the worker".to_owned(),
                |e| e.message().into(),
            )
        })?;
        let (tx, rx) = mpsc::unbounded();
        let sender = tx.clone();
        let on_message =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                let _ = sender.unbounded_send(Ok(e.data()));
            });
        let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |e: web_sys::Event| {
            let text = e.dyn_ref::<web_sys::ErrorEvent>().map_or_else(
                || "the worker stopped".to_owned(),
                web_sys::ErrorEvent::message,
            );
            let _ = tx.unbounded_send(Err(text));
        });
        worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
        // Ended when dropped, from here on.
        let running = Running {
            worker,
            _on_message: on_message,
            _on_error: on_error,
        };
        running
            .worker
            .post_message(&wasm_bindgen::module())
            .map_err(|_| "the page's module could not be handed to the worker")?;
        Ok((running, rx))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.worker.set_onmessage(None);
        self.worker.set_onerror(None);
        self.worker.terminate();
    }
}

/// wasm-bindgen's glue as this page runs it: its module script's text before [`GLUE_END`].
fn page_glue() -> Option<String> {
    let scripts = web_sys::window()?
        .document()?
        .query_selector_all("script[type=module]")
        .ok()?;
    (0..scripts.length())
        .filter_map(|i| scripts.get(i)?.text_content())
        .find_map(|text| Some(text.split_once(GLUE_END)?.0.to_owned()))
}

/// The glue as a classic script: chromium starts no module worker from a `blob:` address in a
/// page opened from `file://` (a report's usual place), but a classic one. wasm-bindgen's
/// `--target web` glue is a module only by its `export`s and its default path of the WASM file
/// (`import.meta.url`, unused here: the worker is handed the module); `None` when it holds
/// anything else of a module's, and the page then reads the snapshot itself.
fn classic_script(glue: &str) -> Option<String> {
    let glue = glue.replace("import.meta.url", "self.location.href");
    let mut script = String::with_capacity(glue.len());
    let mut in_export_list = false;
    for line in glue.lines() {
        if in_export_list || line.starts_with("export {") {
            // `export { initSync, __wbg_init as default };`, on one line or several.
            in_export_list = !line.contains('}');
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        if line.starts_with("import ") || line.starts_with("export ") {
            return None;
        }
        script.push_str(line);
        script.push('\n');
    }
    (!script.contains("import.meta") && !in_export_list).then_some(script)
}

fn set(object: &js_sys::Object, key: &str, value: &JsValue) {
    let _ = js_sys::Reflect::set(object, &key.into(), value);
}

fn get(object: &JsValue, key: &str) -> JsValue {
    js_sys::Reflect::get(object, &key.into()).unwrap_or_default()
}

/// The worker's side: answers each request ([`read`]'s) with progress, the timing phases and
/// the snapshot's parts.
pub fn serve() {
    let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() else {
        return;
    };
    // A panic here would only be a trap (`panic = "abort"`): say it to the page first.
    std::panic::set_hook(Box::new(|info| {
        if let Ok(scope) = js_sys::global().dyn_into::<web_sys::DedicatedWorkerGlobalScope>() {
            let message = js_sys::Object::new();
            let text = format!("the viewer hit an internal error in its worker: {info}");
            set(&message, "error", &text.into());
            let _ = scope.post_message(&message);
        }
    }));
    let reply = scope.clone();
    let on_request =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
            if let Err(error) = answer(&e.data(), &reply) {
                let message = js_sys::Object::new();
                set(&message, "error", &error.into());
                let _ = reply.post_message(&message);
            }
        });
    scope.set_onmessage(Some(on_request.as_ref().unchecked_ref()));
    // The worker lives as long as the page keeps it.
    on_request.forget();
    // Ready: a failure from now on is the reading's, not the worker's start (the page then does
    // not read the snapshot again itself).
    let ready = js_sys::Object::new();
    set(&ready, "ready", &JsValue::TRUE);
    let _ = scope.post_message(&ready);
}

/// The bytes of a snapshot from an offset on (a slice of them).
type SliceAt = Box<dyn FnMut(u64) -> Result<Vec<u8>, String>>;

/// Reads, analyses and sends one snapshot.
fn answer(request: &JsValue, scope: &web_sys::DedicatedWorkerGlobalScope) -> Result<(), String> {
    let name = get(request, "name").as_string().unwrap_or_default();
    let say = |progress: &str, phase: Option<&str>| {
        let message = js_sys::Object::new();
        set(&message, "progress", &progress.into());
        if let Some(phase) = phase {
            set(&message, "phase", &phase.into());
        }
        let _ = scope.post_message(&message);
    };
    let mut parser = SnapshotParser::default();
    let file = get(request, "file");
    let (size, mut next): (u64, SliceAt) = if let Some(file) = file.dyn_ref::<web_sys::File>() {
        let reader = web_sys::FileReaderSync::new().map_err(|_| cannot_read())?;
        let file = file.clone();
        let size = file.size() as u64;
        let next = move |at: u64| {
            let to = (at + SLICE_BYTES as u64).min(size);
            let slice = file
                .slice_with_f64_and_f64(at as f64, to as f64)
                .map_err(|_| cannot_read())?;
            let buffer = reader
                .read_as_array_buffer(&slice)
                .map_err(|_| cannot_read())?;
            Ok(js_sys::Uint8Array::new(&buffer).to_vec())
        };
        (size, Box::new(next))
    } else {
        let bytes = js_sys::Uint8Array::new(&get(request, "bytes")).to_vec();
        let encoding = get(request, "encoding").as_string();
        let bytes = oomscope_report::page::unpack(bytes, encoding.as_deref())?;
        let size = bytes.len() as u64;
        let next = move |at: u64| {
            let from = at.min(size) as usize;
            let to = (at + SLICE_BYTES as u64).min(size) as usize;
            Ok(bytes[from..to].to_vec())
        };
        (size, Box::new(next))
    };
    let mut at = 0;
    let read = loop {
        if at < size {
            let slice = next(at)?;
            at += slice.len() as u64;
            if slice.is_empty() {
                parser.finish();
            } else {
                parser.push(slice);
            }
        } else {
            parser.finish();
        }
        if let Some(done) = parser.resume() {
            break done;
        }
        say(
            &crate::browser::reading_progress(&name, parser.bytes_read(), size, parser.entries()),
            None,
        );
    };
    let snapshot = read.map_err(|e| e.to_string())?;
    say(&format!("analysing {name}…"), Some("data-snapshot-read-ms"));
    let analysis = analyze_snapshot(&snapshot);
    say(
        &format!("drawing {name}…"),
        Some("data-snapshot-analysis-ms"),
    );
    let stacked = stacked_timelines(&snapshot, &analysis);
    say(
        &format!("drawing {name}…"),
        Some("data-snapshot-stacked-ms"),
    );
    let parts = Parts {
        snapshot,
        analysis,
        stacked,
    };
    wire::send(parts, |bytes| {
        let part = js_sys::Uint8Array::from(&bytes[..]);
        let message = js_sys::Object::new();
        set(&message, "part", &part);
        // Handed over, not copied.
        let _ = scope.post_message_with_transfer(&message, &js_sys::Array::of1(&part.buffer()));
    })
    .map_err(|e| e.to_string())
}

fn cannot_read() -> String {
    "the browser could not read this file".to_owned()
}

#[cfg(test)]
mod tests {
    use super::classic_script;

    #[test]
    fn the_glue_becomes_a_classic_script() {
        let glue = "export class Sink {\n  f() {}\n}\nlet wasm;\nexport function g() {}\n\
            function initSync(m) {}\nasync function __wbg_init(m) {\n  m = new URL('x_bg.wasm', import.meta.url);\n}\n\
            export { initSync, __wbg_init as default };\n";
        let script = classic_script(glue).unwrap();
        assert!(!script.contains("export"), "{script}");
        assert!(!script.contains("import.meta"), "{script}");
        assert!(script.contains("class Sink {"), "{script}");
        assert!(script.contains("function g() {}"), "{script}");
        assert!(
            script.contains("new URL('x_bg.wasm', self.location.href)"),
            "{script}"
        );
        // An export list over several lines goes too.
        let script =
            classic_script("function initSync() {}\nexport {\n  initSync,\n};\nlet after;\n")
                .unwrap();
        assert_eq!(script, "function initSync() {}\nlet after;\n");
        // Anything else a module may hold: no classic script.
        assert!(classic_script("import { x } from './x.js';\nfunction initSync() {}\n").is_none());
        assert!(classic_script("const u = import.meta.resolve('x');\n").is_none());
        assert!(classic_script("export {\n  initSync,\n").is_none());
    }
}

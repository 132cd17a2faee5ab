//! `collector report`: one self-contained HTML file holding the viewer and a trace, to attach to
//! a bug ticket and open from `file://` with no network.
//!
//! The viewer (built by trunk into `viewer/dist`, see `scripts/build-viewer.sh`) is embedded into
//! the collector at build time when it exists; a collector built without it still builds and
//! says how to get it (or reads a built viewer from `OOMSCOPE_VIEWER_DIST` at run time).
//!
//! Layout of the page, and why it is safe to open a stranger's trace:
//! - the trace and the WASM module are base64 inside `<script type="application/octet-stream">`
//!   elements: data the browser never executes, in an alphabet that cannot close the element;
//! - the trace's file name and the thinning notice are base64 `data-` attributes; no recorded
//!   string is ever written into the HTML, and the viewer only creates text nodes from them;
//! - the one executable script is the viewer's module, allowed by its SHA-256 hash in the
//!   Content-Security-Policy, which also allows no network access (`default-src 'none'`).
//!
//! A report must stay small enough to attach (5 MB by default) and open at once (200 000 sample
//! rows by default): when the trace's base64 would not fit, or it has more rows, the report
//! embeds a copy with thinned sample rows (`oomscope_report::reduce`) and says so on the page;
//! marks, OOMs, notes and statistics are always complete.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use oomscope_format::units::{format_bytes, format_count};
use oomscope_report::page::{DEFLATE, GLUE_END, pack};
use oomscope_report::reduce;
use sha2::{Digest, Sha256};

mod assets {
    include!(concat!(env!("OUT_DIR"), "/viewer_assets.rs"));
}

/// The viewer's stylesheet, shared with the trunk build.
const CSS: &str = include_str!("../../static/viewer.css");

/// File names trunk writes (`filehash = false` in `viewer/Trunk.toml`).
const JS_NAME: &str = "oomscope-viewer.js";
const WASM_NAME: &str = "oomscope-viewer_bg.wasm";

/// Default size limit of a report, in bytes: what ticket trackers accept as an attachment.
pub const DEFAULT_MAX_BYTES: u64 = 5_000_000;

/// Default limit of the sample rows a report carries: the page's read, decode, first chart and
/// analysis grow with them, and this many open an hour at 1 kHz within BENCHMARKS.md's 300 ms
/// while keeping each counter's extremes per time slice (of ~1/15 000 of the run).
pub const DEFAULT_MAX_ROWS: usize = 200_000;

/// The built viewer: wasm-bindgen's JavaScript glue and the WASM module.
#[derive(Debug)]
pub struct Viewer {
    js: Cow<'static, str>,
    wasm: Cow<'static, [u8]>,
}

impl Viewer {
    /// The viewer embedded at build time, else the one in `OOMSCOPE_VIEWER_DIST`.
    pub fn find() -> Result<Viewer> {
        if let Some(dir) = std::env::var_os("OOMSCOPE_VIEWER_DIST") {
            return Viewer::from_dir(Path::new(&dir));
        }
        match (assets::VIEWER_JS, assets::VIEWER_WASM) {
            (Some(js), Some(wasm)) => Ok(Viewer {
                js: Cow::Borrowed(js),
                wasm: Cow::Borrowed(wasm),
            }),
            _ => bail!(
                "this collector was built without the viewer: run `bash scripts/build-viewer.sh` and \
                 rebuild the collector, or set OOMSCOPE_VIEWER_DIST to a built viewer's dist directory"
            ),
        }
    }

    /// A viewer built by trunk into `dir`.
    pub fn from_dir(dir: &Path) -> Result<Viewer> {
        let js = std::fs::read_to_string(dir.join(JS_NAME))
            .with_context(|| format!("no built viewer in {} (missing {JS_NAME})", dir.display()))?;
        let wasm = std::fs::read(dir.join(WASM_NAME)).with_context(|| {
            format!("no built viewer in {} (missing {WASM_NAME})", dir.display())
        })?;
        Ok(Viewer {
            js: Cow::Owned(js),
            wasm: Cow::Owned(wasm),
        })
    }

    /// Size of the WASM module.
    pub fn wasm_bytes(&self) -> usize {
        self.wasm.len()
    }

    /// A stand-in with the shape of wasm-bindgen's glue, for unit tests of pages.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Viewer {
        Viewer {
            js: Cow::Borrowed(
                "let wasm;\nasync function __wbg_init(x) { wasm = x; }\nexport { initSync };\nexport default __wbg_init;\n",
            ),
            wasm: Cow::Borrowed(b"\0asm\x01\0\0\0"),
        }
    }
}

/// A trace as a report carries it.
#[derive(Debug)]
pub struct Embedded {
    /// File name shown in the page.
    pub name: String,
    /// The trace bytes (the file itself, or a thinned copy), deflated
    /// (`oomscope_report::page::pack`).
    pub bytes: Vec<u8>,
    /// What the page says about the copy, when it is not the whole recording.
    pub notice: Option<String>,
    /// When sample rows were left out (a thinned copy), the limits that made it so ("to stay
    /// under 5 MB", "to open at once", or both).
    pub thinned: Option<String>,
    /// The verdict of the embedded copy (`oomscope_words::verdict::Verdict::to_bytes`), which
    /// the page shows the moment it starts, before its own analysis of the same bytes replaces it.
    pub verdict: Option<Vec<u8>>,
}

/// Room left in a report for a trace element's tag and attributes: its name, notice and verdict,
/// base64 (~1.5 KB for a verdict of three long lines).
const ATTRIBUTES_BYTES: usize = 4096;

impl Embedded {
    /// `bytes` (packed) as they are, with nothing to say about them yet.
    fn whole(name: String, bytes: Vec<u8>) -> Embedded {
        Embedded {
            name,
            bytes,
            notice: None,
            thinned: None,
            verdict: None,
        }
    }
}

/// Reads `path` and fits it into a report of at most `max_bytes` with about `max_rows` sample
/// rows at most (0: no limit; see `reduce::FitLimits`), given the size of the page without the
/// trace; `with_verdict`: a trace (not a snapshot) also carries its verdict.
pub fn embed_trace(
    path: &Path,
    max_bytes: u64,
    max_rows: usize,
    page_bytes: usize,
    with_verdict: bool,
) -> Result<Embedded> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    let fits = |len: usize| {
        max_bytes == 0 || (page_bytes + ATTRIBUTES_BYTES + base64_len(len)) as u64 <= max_bytes
    };
    if oomscope_snapshot::looks_like_pickle(&bytes) {
        // A memory snapshot goes in whole: it is read where it is opened, and there is no
        // thinned copy of a pickle.
        oomscope_snapshot::read_snapshot(&bytes[..])
            .with_context(|| format!("cannot open {}", path.display()))?;
        let packed = pack(&bytes);
        if !fits(packed.len()) {
            bail!(
                "the snapshot {} ({}, {} deflated) does not fit in a report of {}: pass \
                 --max-size-mb 0 (no limit) or a larger size",
                path.display(),
                format_bytes(bytes.len() as u64),
                format_bytes(packed.len() as u64),
                megabytes(max_bytes)
            );
        }
        let name = path.file_name().map_or_else(
            || "snapshot.pickle".to_owned(),
            |n| n.to_string_lossy().into_owned(),
        );
        return Ok(Embedded::whole(name, packed));
    }
    let decoded = oomscope_format::decode(&bytes)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let name = path.file_name().map_or_else(
        || "trace.oomt".to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    let rows_fit = max_rows == 0 || decoded.trace.samples.len() <= max_rows;
    if rows_fit {
        let packed = pack(&bytes);
        if fits(packed.len()) {
            let verdict = with_verdict.then(|| verdict_of(&packed)).flatten();
            return Ok(Embedded {
                verdict,
                ..Embedded::whole(name, packed)
            });
        }
    }
    // base64 makes 4 bytes of 3.
    let budget = match max_bytes {
        0 => Some(0),
        max => (max as usize)
            .checked_sub(page_bytes + ATTRIBUTES_BYTES)
            .map(|b| b / 4 * 3)
            .filter(|b| *b > 0),
    }
    .with_context(|| {
        format!(
            "a report of at most {} cannot hold the viewer ({} already)",
            megabytes(max_bytes),
            format_bytes(page_bytes as u64)
        )
    })?;
    let thinned = reduce::fit(
        &decoded.trace,
        reduce::FitLimits {
            max_bytes: budget,
            max_rows,
        },
        |encoded| pack(&encoded),
    )
    .with_context(|| format!("cannot re-encode {}", path.display()))?;
    // Which limit made the copy thin: the rows, the bytes (it kept clearly fewer rows than
    // allowed), or both.
    let mut why = Vec::new();
    if max_bytes > 0 && (rows_fit || thinned.rows_kept < max_rows / 10 * 9) {
        why.push(format!("to stay under {}", megabytes(max_bytes)));
    }
    if !rows_fit {
        why.push("to open at once".to_owned());
    }
    let why = thinned.is_thinned().then(|| why.join(" and "));
    let notice = why.as_ref().map(|why| {
        format!(
            "This report carries a thinned copy of {name} {why}: {} of {} sample rows (every \
             stage mark's reading, the first and last, and each counter's minimum and maximum per \
             time slice); marks, OOMs, notes and statistics are complete. Peaks and stage tables \
             match the full recording; open {name} itself for every sample.",
            format_count(thinned.rows_kept as u64),
            format_count(thinned.rows_total as u64),
        )
    });
    let packed = thinned.trace_bytes;
    let notice = match decoded.warnings.first() {
        // The copy is re-encoded from what decoded, so the reader's warnings would be lost.
        Some(w) => Some(format!(
            "{}The recording itself is damaged ({} reader warning(s), the first: {w}); the copy \
             holds what could be read.",
            notice.map(|n| n + " ").unwrap_or_default(),
            decoded.warnings.len()
        )),
        None => notice,
    };
    if !fits(packed.len()) {
        crate::ui::warning(&format!(
            "even the thinned trace makes the report larger than {} (its marks alone are {} \
             deflated)",
            megabytes(max_bytes),
            format_bytes(packed.len() as u64)
        ));
    }
    Ok(Embedded {
        notice,
        thinned: why,
        verdict: with_verdict.then(|| verdict_of(&packed)).flatten(),
        ..Embedded::whole(name, packed)
    })
}

/// The size limit as the user gave it: `--max-size-mb` counts decimal megabytes.
fn megabytes(bytes: u64) -> String {
    format!("{} MB", bytes as f64 / 1e6)
}

fn base64_len(len: usize) -> usize {
    len.div_ceil(3) * 4
}

/// The init function of wasm-bindgen's `--target web` glue: its default export, written
/// `export default NAME;` or `export { …, NAME as default };`.
fn init_function(js: &str) -> Result<&str> {
    let is_ident = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$')
    };
    if let Some((_, rest)) = js.rsplit_once("export default ") {
        let name = rest.split(';').next().unwrap_or("").trim();
        if is_ident(name) {
            return Ok(name);
        }
    }
    for (_, rest) in js
        .match_indices("export {")
        .map(|(i, _)| js.split_at(i + 8))
    {
        let list = rest.split('}').next().unwrap_or("");
        for item in list.split(',') {
            if let Some(name) = item.trim().strip_suffix(" as default")
                && is_ident(name.trim())
            {
                return Ok(name.trim());
            }
        }
    }
    bail!("the viewer's JavaScript has no default export (not wasm-bindgen --target web output?)")
}

/// The page holding `traces` (none: the bare viewer, which also tells how much room traces
/// have); a job's report holds several.
pub fn render(viewer: &Viewer, traces: &[Embedded]) -> Result<String> {
    render_with(viewer, traces, &[])
}

/// [`render`], with the memory snapshots a run's OOMs saved attached to its trace.
pub fn render_with(viewer: &Viewer, traces: &[Embedded], snapshots: &[Embedded]) -> Result<String> {
    let mut elements = String::with_capacity(
        traces
            .iter()
            .chain(snapshots)
            .map(|t| t.bytes.len() * 4 / 3 + 256)
            .sum::<usize>(),
    );
    for (i, t) in traces.iter().enumerate() {
        let id = oomscope_report::page::trace_element_id(i);
        elements.push_str(&format!(
            "<script id=\"{id}\" type=\"application/octet-stream\" data-encoding=\"{DEFLATE}\" \
             data-name=\""
        ));
        elements.push_str(&STANDARD.encode(t.name.as_bytes()));
        elements.push('"');
        if let Some(n) = &t.notice {
            elements.push_str(" data-notice=\"");
            elements.push_str(&STANDARD.encode(n.as_bytes()));
            elements.push('"');
        }
        if let Some(v) = &t.verdict {
            elements.push_str(" data-verdict=\"");
            elements.push_str(&STANDARD.encode(v));
            elements.push('"');
        }
        elements.push('>');
        elements.push_str(&STANDARD.encode(&t.bytes));
        elements.push_str("</script>\n");
    }
    for (i, snap) in snapshots.iter().enumerate() {
        let id = oomscope_report::page::snapshot_element_id(i);
        elements.push_str(&format!(
            "<script id=\"{id}\" type=\"application/octet-stream\" data-encoding=\"{DEFLATE}\" \
             data-name=\"{}\">",
            STANDARD.encode(snap.name.as_bytes())
        ));
        elements.push_str(&STANDARD.encode(&snap.bytes));
        elements.push_str("</script>\n");
    }
    Ok(page(viewer, &elements, Network::None)?.html)
}

/// What a page may fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// Nothing: a report opens offline and reaches nothing (`default-src 'none'`).
    None,
    /// Its own origin only (`connect-src 'self'`): the page `collector serve` serves, which
    /// fetches its traces' bytes as they grow.
    SameOrigin,
}

/// A page of the viewer: its HTML and the Content-Security-Policy it states.
#[derive(Debug)]
pub struct Page {
    /// The whole document.
    pub html: String,
    /// Its policy (also in a `<meta>` of the document).
    pub csp: String,
}

/// The viewer's page, holding `elements` (the data the viewer reads: traces, snapshots, or the
/// addresses of live ones) before its WASM module and its one script.
pub fn page(viewer: &Viewer, elements: &str, network: Network) -> Result<Page> {
    if viewer.js.to_ascii_lowercase().contains("</script") {
        bail!("the viewer's JavaScript contains `</script`, which cannot be inlined");
    }
    let init = init_function(&viewer.js)?;
    // Instantiated synchronously when the browser allows it (it does below 8 MB of WASM): the page
    // is then built before the load event, which is when headless `--print-to-pdf` prints. The
    // asynchronous path stays as the fallback.
    if !viewer.js.contains("initSync") {
        bail!(
            "the viewer's JavaScript exports no initSync (not wasm-bindgen --target web output?)"
        );
    }
    let module = format!(
        "{js}\n{GLUE_END}\n;{{\n\
         const b64 = document.getElementById(\"oomscope-wasm\").textContent.trim();\n\
         const bytes = Uint8Array.fromBase64 ? Uint8Array.fromBase64(b64)\n\
           : Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));\n\
         try {{ initSync({{ module: bytes }}); }}\n\
         catch (e) {{ await {init}({{ module_or_path: bytes }}); }}\n}}\n",
        js = viewer.js
    );
    let hash = STANDARD.encode(Sha256::digest(module.as_bytes()));
    let connect = match network {
        Network::None => "",
        Network::SameOrigin => "connect-src 'self'; ",
    };
    let csp = format!(
        "default-src 'none'; script-src 'sha256-{hash}' 'wasm-unsafe-eval'; worker-src blob:; \
         {connect}style-src 'unsafe-inline'; \
         img-src data: blob:; base-uri 'none'; form-action 'none'"
    );
    let mut html =
        String::with_capacity(viewer.wasm.len() * 4 / 3 + elements.len() + module.len() + 8192);
    html.push_str("<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    html.push_str(&format!(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">\n"
    ));
    html.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    html.push_str("<meta name=\"generator\" content=\"oomscope collector report\">\n");
    html.push_str("<title>oomscope report</title>\n<style>\n");
    html.push_str(CSS);
    html.push_str("</style>\n</head>\n<body>\n");
    html.push_str(elements);
    html.push_str("<script id=\"oomscope-wasm\" type=\"application/octet-stream\">");
    html.push_str(&STANDARD.encode(&viewer.wasm));
    html.push_str("</script>\n<script type=\"module\">");
    html.push_str(&module);
    html.push_str("</script>\n</body>\n</html>\n");
    Ok(Page { html, csp })
}

/// Where `collector report TRACE|DIR` writes by default: the path with `.html` (`runs/4242/`
/// gives `runs/4242.html`).
pub fn default_output(trace: Option<&Path>) -> PathBuf {
    match trace {
        Some(t) => t.with_extension("html"),
        None => PathBuf::from("oomscope-viewer.html"),
    }
}

/// Writes the report of `traces` (none: the bare viewer; several: a job's, analysed together
/// in the page); returns its size and, for each trace that had to be thinned, why (see
/// [`Embedded::thinned`]). A job's traces share
/// the size and row limits equally.
pub fn write_report(
    traces: &[Named],
    output: &Path,
    max_bytes: u64,
    max_rows: usize,
) -> Result<(usize, Vec<String>)> {
    let viewer = Viewer::find()?;
    let page_bytes = render(&viewer, &[])?.len();
    let each = match (max_bytes, traces.len()) {
        (0, _) | (_, 0) => 0,
        (max, n) => page_bytes as u64 + max.saturating_sub(page_bytes as u64) / n as u64,
    };
    // The page reads every trace it holds before it can answer: they share the rows too.
    let each_rows = match max_rows {
        0 => 0,
        max => (max / traces.len().max(1)).max(1),
    };
    // One run's report opens with its verdict (a job's page opens with the job's findings).
    let with_verdict = traces.len() == 1;
    let embedded = traces
        .iter()
        .map(|t| {
            let mut e = embed_trace(&t.path, each, each_rows, page_bytes, with_verdict)?;
            e.name.clone_from(&t.name);
            Ok(e)
        })
        .collect::<Result<Vec<_>>>()?;
    // One run's report also carries the memory snapshots its OOMs saved, as room allows.
    let mut snapshots = Vec::new();
    if let [one] = traces {
        let mut used = render(&viewer, &embedded)?.len() as u64;
        for path in oom_snapshots(&one.path) {
            let bytes =
                std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
            if !oomscope_snapshot::looks_like_pickle(&bytes) {
                continue;
            }
            let packed = pack(&bytes);
            let size = base64_len(packed.len()) as u64 + 256;
            if max_bytes > 0 && used + size > max_bytes {
                crate::ui::warning(&format!(
                    "the memory snapshot saved at the OOM, {} ({} deflated), does not fit in the \
                     report of {}: open it on its own (`collector report {}`) or pass \
                     --max-size-mb 0",
                    path.display(),
                    format_bytes(packed.len() as u64),
                    megabytes(max_bytes),
                    path.display()
                ));
                continue;
            }
            used += size;
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            snapshots.push(Embedded::whole(name, packed));
        }
    }
    let html = render_with(&viewer, &embedded, &snapshots)?;
    if max_bytes > 0 && html.len() as u64 > max_bytes {
        crate::ui::warning(&format!(
            "the report is {}, over the {} asked for",
            format_bytes(html.len() as u64),
            megabytes(max_bytes)
        ));
    }
    std::fs::write(output, &html).with_context(|| format!("cannot write {}", output.display()))?;
    let thinned = embedded.into_iter().filter_map(|e| e.thinned).collect();
    Ok((html.len(), thinned))
}

/// The verdict of a packed trace as the page's analysis will find it: worked out from the very
/// bytes the page will read, by the same analysis.
fn verdict_of(packed: &[u8]) -> Option<Vec<u8>> {
    let bytes = oomscope_report::page::unpack(packed.to_vec(), Some(DEFLATE)).ok()?;
    let trace = oomscope_format::decode(&bytes).ok()?.trace;
    let analysis =
        oomscope_analysis::analyze(&trace, &oomscope_analysis::AnalysisOptions::default());
    Some(oomscope_words::verdict::verdict(&trace, &analysis).to_bytes())
}

/// The memory snapshots a trace says were saved next to it at an OOM (`collector run
/// --oom-snapshot`), those still there.
fn oom_snapshots(trace: &Path) -> Vec<PathBuf> {
    let Ok(decoded) = std::fs::read(trace).map(|b| oomscope_format::decode(&b)) else {
        return Vec::new();
    };
    let Ok(decoded) = decoded else {
        return Vec::new();
    };
    let dir = trace.parent().unwrap_or(Path::new("."));
    decoded
        .trace
        .saved_snapshots
        .iter()
        // A bare name in the trace's directory, never a path elsewhere.
        .filter(|s| !s.file.is_empty() && !s.file.contains(['/', '\\']))
        .map(|s| dir.join(&*s.file))
        .filter(|p| p.is_file())
        .collect()
}

/// A trace file and the name the page shows for it.
#[derive(Debug, Clone)]
pub struct Named {
    /// The file.
    pub path: PathBuf,
    /// Its name in the page: the file name, or its path inside the directory named to
    /// `collector report DIR` (a job's node files may share a name across subdirectories).
    pub name: String,
}

impl Named {
    /// `path` named relative to `root` when it lies inside, else by its file name.
    pub fn new(path: PathBuf, root: Option<&Path>) -> Named {
        let name = root
            .and_then(|r| path.strip_prefix(r).ok())
            .map(|p| p.display().to_string())
            .or_else(|| path.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "trace.oomt".to_owned());
        Named { path, name }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_viewer() -> Viewer {
        Viewer::for_tests()
    }

    #[test]
    fn recorded_strings_never_reach_the_html() {
        let t = Embedded {
            name: "<script>alert(1)</script>.oomt".into(),
            bytes: b"<img src=x onerror=alert(1)>".to_vec(),
            notice: Some("</script><script>alert(2)</script>".into()),
            thinned: Some("to open at once".into()),
            verdict: Some(b"\x02short\t\"><script>alert(3)</script>\n".to_vec()),
        };
        let html = render(&fake_viewer(), std::slice::from_ref(&t)).unwrap();
        assert!(!html.contains("alert"), "{html}");
        assert!(!html.contains("onerror"));
        assert_eq!(html.matches("<script").count(), 3, "trace, wasm, module");
    }

    #[test]
    fn csp_hash_matches_the_module_script() {
        let html = render(&fake_viewer(), &[]).unwrap();
        let module = html
            .split("<script type=\"module\">")
            .nth(1)
            .and_then(|r| r.split("</script>").next())
            .unwrap();
        let hash = STANDARD.encode(Sha256::digest(module.as_bytes()));
        assert!(html.contains(&format!("'sha256-{hash}'")));
        assert!(html.contains("default-src 'none'"));
        assert!(
            !html.contains("unsafe-inline' 'wasm") && !html.contains("script-src 'unsafe-inline'")
        );
        assert!(module.contains("await __wbg_init({ module_or_path: bytes })"));
    }

    #[test]
    fn glue_that_would_break_out_is_refused() {
        let v = Viewer {
            js: Cow::Borrowed("export default init; const s = '</SCRIPT>';"),
            wasm: Cow::Borrowed(b""),
        };
        assert!(render(&v, &[]).is_err());
        let v = Viewer {
            js: Cow::Borrowed("function f() {}"),
            wasm: Cow::Borrowed(b""),
        };
        assert!(
            render(&v, &[])
                .unwrap_err()
                .to_string()
                .contains("default export")
        );
        let v = Viewer {
            js: Cow::Borrowed(
                "async function __wbg_init() {}\nexport { initSync, __wbg_init as default };\n",
            ),
            wasm: Cow::Borrowed(b""),
        };
        assert!(
            render(&v, &[])
                .unwrap()
                .contains("await __wbg_init({ module_or_path: bytes })")
        );
    }

    #[test]
    fn default_output_sits_beside_the_trace() {
        assert_eq!(
            default_output(Some(Path::new("runs/a.oomt"))),
            PathBuf::from("runs/a.html")
        );
        assert_eq!(default_output(None), PathBuf::from("oomscope-viewer.html"));
    }
}

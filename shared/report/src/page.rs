//! How a report (`collector report`, one offline HTML file) keeps its traces: each in a
//! `<script id="oomscope-trace…" type="application/octet-stream">` element, deflated
//! (`data-encoding="deflate"`, since reports of version 0.2; traces are varints and compress
//! about 3×, which keeps an hour at 1 kHz under 5 MB) then base64, with the file name, the
//! thinning notice and, in a one-trace report, its verdict (`verdict::Verdict::to_text`) as base64
//! `data-` attributes (`data-name`, `data-notice`, `data-verdict`). The collector writes that element
//! and both the viewer and `collector summary` read it back through here, so a report attached to
//! a ticket opens, summarises and compares like the trace it was made from.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// The `id` of the element holding a report's `index`-th trace: `oomscope-trace`, then
/// `oomscope-trace-1`, `-2`, … (a job's report holds several; the viewer reads them in order).
pub fn trace_element_id(index: usize) -> String {
    match index {
        0 => "oomscope-trace".to_owned(),
        i => format!("oomscope-trace-{i}"),
    }
}

/// The `id` of the element holding the `index`-th memory snapshot a report attaches to its trace
/// (`collector run --oom-snapshot` saved it at the OOM): `oomscope-snapshot-0`, `-1`, …
pub fn snapshot_element_id(index: usize) -> String {
    format!("oomscope-snapshot-{index}")
}

/// Written in a report's module script between wasm-bindgen's glue and the lines that start the
/// viewer: the viewer starts its Web Worker (which reads large memory snapshots off the page's
/// thread) from the text before it, so the worker runs the page's own code with no file or
/// network.
pub const GLUE_END: &str = "/* oomscope-viewer-glue-end */";

/// The attribute of a trace element that holds, instead of the trace, the address its bytes are
/// fetched from while its run records it (`collector serve`; base64 like the name): the page asks
/// for `ADDRESS` with `from=N` appended, gets the bytes from offset `N` on as they are written, and
/// follows the trace (`oomscope_format::Follower`) until it ends.
pub const LIVE_ATTRIBUTE: &str = "data-live";

/// The response header that says a live trace's file does not exist yet (its run has not
/// started recording): the page says it waits.
pub const WAITING_HEADER: &str = "x-oomscope-waiting";

/// The `data-encoding` of a deflated trace.
pub const DEFLATE: &str = "deflate";

/// Most bytes a report's trace may inflate to (a damaged or hostile page cannot make the reader
/// allocate more).
pub const MAX_INFLATED_BYTES: usize = 2 << 30;

/// Deflates a trace (or snapshot) for a report.
pub fn pack(bytes: &[u8]) -> Vec<u8> {
    miniz_oxide::deflate::compress_to_vec(bytes, 6)
}

/// Why a report's embedded trace could not be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// Its base64 or its deflate stream is damaged.
    #[error("the report's embedded trace is damaged: {0}")]
    Damaged(String),
    /// Its `data-encoding` is one this reader does not know.
    #[error("the report's embedded trace has an unknown encoding `{0}` (a newer report?)")]
    UnknownEncoding(String),
}

impl From<PageError> for String {
    fn from(e: PageError) -> String {
        e.to_string()
    }
}

/// The trace from an element's bytes and its `data-encoding` (none: as is).
pub fn unpack(bytes: Vec<u8>, encoding: Option<&str>) -> Result<Vec<u8>, PageError> {
    match encoding {
        None => Ok(bytes),
        Some(DEFLATE) => {
            miniz_oxide::inflate::decompress_to_vec_with_limit(&bytes, MAX_INFLATED_BYTES)
                .map_err(|e| PageError::Damaged(format!("{e:?}")))
        }
        Some(other) => Err(PageError::UnknownEncoding(other.to_owned())),
    }
}

/// Whether an element's bytes (and `data-encoding`) hold a memory snapshot rather than a trace:
/// the viewer reads a snapshot in its worker, and finds out from the first bytes alone.
pub fn holds_snapshot(bytes: &[u8], encoding: Option<&str>) -> bool {
    const HEAD: usize = 2;
    match encoding {
        None => oomscope_snapshot::looks_like_pickle(bytes),
        Some(DEFLATE) => {
            let head = match miniz_oxide::inflate::decompress_to_vec_with_limit(bytes, HEAD) {
                Ok(all) => all,
                Err(e) => e.output,
            };
            oomscope_snapshot::looks_like_pickle(&head)
        }
        Some(_) => false,
    }
}

/// A trace found in a report's HTML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportTrace {
    /// The trace's bytes.
    pub bytes: Vec<u8>,
    /// The report's notice (the trace is a thinned copy of the recording), if it has one.
    pub notice: Option<String>,
}

/// The first trace a report's HTML embeds, with its notice. `None` when `bytes` is not a report;
/// an error (one sentence) when it is one whose trace is damaged.
pub fn trace_in_report(bytes: &[u8]) -> Option<Result<ReportTrace, String>> {
    // A report is HTML: it starts with `<` (after any byte-order mark or blank); a trace starts
    // with its magic. Only HTML is searched, so reading a large trace costs nothing here.
    let start = bytes
        .strip_prefix(b"\xEF\xBB\xBF")
        .unwrap_or(bytes)
        .iter()
        .find(|b| !b.is_ascii_whitespace())?;
    if *start != b'<' {
        return None;
    }
    let tag = format!("<script id=\"{}\"", trace_element_id(0));
    let start = bytes.windows(tag.len()).position(|w| w == tag.as_bytes())?;
    let rest = &bytes[start..];
    let open_end = rest.iter().position(|b| *b == b'>')?;
    let attributes = String::from_utf8_lossy(&rest[..open_end]);
    let body = &rest[open_end + 1..];
    const CLOSE: &[u8] = b"</script";
    let close = body.windows(CLOSE.len()).position(|w| w == CLOSE)?;
    let text: Vec<u8> = body[..close]
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let notice = attributes
        .split("data-notice=\"")
        .nth(1)
        .and_then(|v| v.split('"').next())
        .and_then(|v| STANDARD.decode(v).ok())
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    let encoding = attributes
        .split("data-encoding=\"")
        .nth(1)
        .and_then(|v| v.split('"').next());
    Some(
        STANDARD
            .decode(&text)
            .map_err(|e| PageError::Damaged(e.to_string()))
            .and_then(|bytes| unpack(bytes, encoding))
            .map(|bytes| ReportTrace { bytes, notice })
            .map_err(String::from),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(body: &str, notice: Option<&str>) -> String {
        let notice = notice.map_or_else(String::new, |n| {
            format!(" data-notice=\"{}\"", STANDARD.encode(n))
        });
        format!(
            "<html><body><script id=\"{}\" type=\"application/octet-stream\"{notice}>\n{body}\n</script></body></html>",
            trace_element_id(0)
        )
    }

    #[test]
    fn a_snapshot_is_told_from_a_trace_by_its_first_bytes() {
        let pickle = std::fs::read(format!(
            "{}/../snapshot/tests/data/small_p4.pickle",
            std::env::var("CARGO_MANIFEST_DIR").unwrap()
        ))
        .unwrap();
        let trace = oomscope_testkit::synth::TrainingRun::default().to_bytes();
        assert!(holds_snapshot(&pack(&pickle), Some(DEFLATE)));
        assert!(holds_snapshot(&pickle, None));
        assert!(!holds_snapshot(&pack(&trace), Some(DEFLATE)));
        assert!(!holds_snapshot(&trace, None));
        assert!(!holds_snapshot(b"", Some(DEFLATE)));
        assert!(!holds_snapshot(b"garbage", Some(DEFLATE)));
        assert!(!holds_snapshot(&pack(&pickle), Some("zstd")));
    }

    #[test]
    fn the_embedded_trace_and_its_notice_come_back() {
        let html = page(&STANDARD.encode(b"OOMT trace bytes"), Some("thinned 4x"));
        let t = trace_in_report(html.as_bytes()).unwrap().unwrap();
        assert_eq!(t.bytes, b"OOMT trace bytes");
        assert_eq!(t.notice.as_deref(), Some("thinned 4x"));
    }

    #[test]
    fn a_deflated_trace_comes_back_and_a_damaged_one_is_a_sentence() {
        let trace = b"OOMT trace bytes ".repeat(100);
        let html = page(&STANDARD.encode(pack(&trace)), None)
            .replace("type=", "data-encoding=\"deflate\" type=");
        assert_eq!(
            trace_in_report(html.as_bytes()).unwrap().unwrap().bytes,
            trace
        );
        let broken = page(&STANDARD.encode(b"not deflate"), None)
            .replace("type=", "data-encoding=\"deflate\" type=");
        let e = trace_in_report(broken.as_bytes()).unwrap().unwrap_err();
        assert!(
            e.starts_with("the report's embedded trace is damaged"),
            "{e}"
        );
        assert!(
            unpack(vec![1], Some("zstd"))
                .unwrap_err()
                .to_string()
                .contains("unknown encoding")
        );
    }

    #[test]
    fn other_files_are_not_reports_and_damage_is_one_sentence() {
        assert!(trace_in_report(b"OOMT\x01\x04 not html").is_none());
        // A trace that happens to hold the element's text is still not a report.
        let tag = format!(
            "OOMT\x01\x04<script id=\"{}\">QUJD</script>",
            trace_element_id(0)
        );
        assert!(trace_in_report(tag.as_bytes()).is_none());
        assert!(trace_in_report(format!("\u{feff}\n{}", page("QUJD", None)).as_bytes()).is_some());
        assert!(trace_in_report(b"<html><script id=\"oomscope-trace\"").is_none());
        let damaged = trace_in_report(page("!!not base64!!", None).as_bytes()).unwrap();
        assert!(
            damaged
                .unwrap_err()
                .starts_with("the report's embedded trace is damaged")
        );
        assert_eq!(trace_element_id(2), "oomscope-trace-2");
    }
}

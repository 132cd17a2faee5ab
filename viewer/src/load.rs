//! Turning bytes into something to show: decode, keep whatever prefix survives, analyse later.
//!
//! Decoding is split from analysis on purpose: the timeline needs only the decoded samples, so
//! the page draws the first chart as soon as decoding ends and runs the (slower) analysis in a
//! later task. A trace that cannot be decoded at all still produces a [`Loaded`] with a message,
//! never a blank page.

use std::sync::Arc;

use crate::snapshot_wire::Parts;
use oomscope_analysis::snapshot::analysis::{SnapshotAnalysis, analyze_snapshot};
use oomscope_analysis::{Analysis, AnalysisOptions, analyze};
use oomscope_format::{Trace, decode};
use oomscope_report::page::trace_in_report;
use oomscope_snapshot::timeline::{StackedTimeline, stacked_by_site};
use oomscope_snapshot::{Snapshot, SnapshotError, SnapshotParser, looks_like_pickle};
use oomscope_words::verdict::Verdict;

/// A PyTorch memory snapshot, read and analysed.
#[derive(Debug)]
pub struct OpenSnapshot {
    /// What was read.
    pub snapshot: Snapshot,
    /// Its analysis (`collector summary`'s).
    pub analysis: SnapshotAnalysis,
    /// Each analysed device's active memory stacked by site, in the analysis's device order.
    pub stacked: Vec<Arc<StackedTimeline>>,
}

/// Sites drawn as their own band in a snapshot's chart (the rest share one).
pub const SNAPSHOT_BANDS: usize = 8;

/// Moments drawn in a snapshot's chart (each its slice of entries' highest).
pub const SNAPSHOT_POINTS: usize = 600;

impl OpenSnapshot {
    /// The stacked timelines of `analysis`'s devices.
    pub fn stacked(snapshot: &Snapshot, analysis: &SnapshotAnalysis) -> Vec<Arc<StackedTimeline>> {
        stacked_timelines(snapshot, analysis)
            .into_iter()
            .map(Arc::new)
            .collect()
    }
}

/// A snapshot the page's worker read and analysed ([`crate::worker`]).
impl From<Parts> for OpenSnapshot {
    fn from(parts: Parts) -> OpenSnapshot {
        OpenSnapshot {
            snapshot: parts.snapshot,
            analysis: parts.analysis,
            stacked: parts.stacked.into_iter().map(Arc::new).collect(),
        }
    }
}

/// Each of `analysis`'s devices' active memory stacked by site, as the page draws it.
pub fn stacked_timelines(snapshot: &Snapshot, analysis: &SnapshotAnalysis) -> Vec<StackedTimeline> {
    analysis
        .devices
        .iter()
        .map(|d| stacked_by_site(snapshot, d.device, SNAPSHOT_BANDS, SNAPSHOT_POINTS))
        .collect()
}

/// One opened trace.
#[derive(Debug)]
pub struct Loaded {
    /// File name (from the picker, the drop, or the report).
    pub name: String,
    /// Size of the file.
    pub size_bytes: usize,
    /// What decoded; `None` when nothing could be (see `error`).
    pub trace: Option<Arc<Trace>>,
    /// Reader warnings (truncation, damaged chunks skipped, unknown records).
    pub warnings: Vec<String>,
    /// Why nothing decoded.
    pub error: Option<String>,
    /// Set by a report when its trace is a thinned copy of the recording.
    pub notice: Option<String>,
    /// When the file is a PyTorch memory snapshot (a pickle) instead of a trace.
    pub snapshot: Option<Arc<OpenSnapshot>>,
    /// The verdict the report's collector worked out from these very bytes: shown until the
    /// page's own analysis (the same code) has run.
    pub verdict: Option<Verdict>,
    /// `trace` already analysed where it was followed ([`crate::live`], from what it kept of
    /// the last refresh: `oomscope_analysis::analyze_prepared`).
    pub analysis: Option<Arc<Analysis>>,
}

impl Loaded {
    /// Decodes `bytes` (a trace, or a report's HTML holding one); never panics, whatever they
    /// hold.
    pub fn open(name: String, bytes: &[u8]) -> Loaded {
        match trace_in_report(bytes) {
            None => Loaded::decode(name, bytes, None),
            Some(Ok(t)) => Loaded::decode(name, &t.bytes, t.notice),
            Some(Err(e)) => Loaded::failed(name, e),
        }
    }

    /// Decodes `bytes` (a trace, or a memory snapshot pickle); never panics, whatever they hold.
    pub fn decode(name: String, bytes: &[u8], notice: Option<String>) -> Loaded {
        if looks_like_pickle(bytes) {
            return Loaded::snapshot(name, bytes);
        }
        match decode(bytes) {
            Ok(d) => Loaded {
                name,
                size_bytes: bytes.len(),
                trace: Some(Arc::new(d.trace)),
                warnings: d.warnings.iter().map(ToString::to_string).collect(),
                error: None,
                notice,
                snapshot: None,
                verdict: None,
                analysis: None,
            },
            Err(e) => Loaded {
                name,
                size_bytes: bytes.len(),
                trace: None,
                warnings: Vec::new(),
                error: Some(format!("this file is not a readable oomscope trace: {e}")),
                notice,
                snapshot: None,
                verdict: None,
                analysis: None,
            },
        }
    }

    /// Reads a memory snapshot pickle and analyses it (as `collector summary` does).
    fn snapshot(name: String, bytes: &[u8]) -> Loaded {
        Loaded::from_snapshot(name, bytes.len(), SnapshotParser::read_bytes(bytes))
    }

    /// A memory snapshot read (whole, or in slices by the page), analysed as `collector summary`
    /// does.
    pub fn from_snapshot(
        name: String,
        size_bytes: usize,
        read: Result<Snapshot, SnapshotError>,
    ) -> Loaded {
        match read {
            Ok(snapshot) => {
                let analysis = analyze_snapshot(&snapshot);
                let open = OpenSnapshot {
                    stacked: OpenSnapshot::stacked(&snapshot, &analysis),
                    analysis,
                    snapshot,
                };
                Loaded::analysed_snapshot(name, size_bytes, open)
            }
            Err(e) => Loaded::failed(name, e.to_string()),
        }
    }

    /// A memory snapshot read and analysed.
    pub fn analysed_snapshot(name: String, size_bytes: usize, open: OpenSnapshot) -> Loaded {
        Loaded {
            name,
            size_bytes,
            trace: None,
            warnings: open.snapshot.warnings.clone(),
            error: None,
            notice: None,
            snapshot: Some(Arc::new(open)),
            verdict: None,
            analysis: None,
        }
    }

    /// A trace followed while its run records it ([`crate::live`]): what was decoded so far,
    /// and its analysis when it was made there.
    pub fn followed(
        name: String,
        size_bytes: usize,
        trace: Arc<Trace>,
        analysis: Option<Arc<Analysis>>,
    ) -> Loaded {
        Loaded {
            name,
            size_bytes,
            trace: Some(trace),
            warnings: Vec::new(),
            error: None,
            notice: None,
            snapshot: None,
            verdict: None,
            analysis,
        }
    }

    /// A file that could not even be read.
    pub fn failed(name: String, error: String) -> Loaded {
        Loaded {
            name,
            size_bytes: 0,
            trace: None,
            warnings: Vec::new(),
            error: Some(error),
            notice: None,
            snapshot: None,
            verdict: None,
            analysis: None,
        }
    }

    /// Its name and snapshot, when it is a memory snapshot that could be read.
    pub fn named(self) -> Option<NamedSnapshot> {
        Some((self.name, self.snapshot?))
    }

    /// True when the reader had to skip or stop early: the page says that it shows a prefix.
    pub fn is_partial(&self) -> bool {
        !self.warnings.is_empty()
    }
}

/// The same analysis `collector summary` runs, with the same options.
pub fn analyse(trace: &Trace) -> Analysis {
    analyze(trace, &AnalysisOptions::default())
}

/// A memory snapshot read and analysed, by its name.
pub type NamedSnapshot = (String, Arc<OpenSnapshot>);

#[cfg(test)]
mod tests {
    #[test]
    fn a_report_opens_as_the_trace_it_embeds() {
        use base64::Engine as _;
        let bytes = TrainingRun {
            steps: 20,
            ..TrainingRun::default()
        }
        .to_bytes();
        let b64 = base64::engine::general_purpose::STANDARD;
        let html = format!(
            "<!doctype html><body><script id=\"oomscope-trace\" type=\"application/octet-stream\" data-name=\"{}\" data-notice=\"{}\">{}\n</script><script id=\"oomscope-wasm\">AAAA</script>",
            b64.encode("run.oomt"),
            b64.encode("thinned"),
            b64.encode(&bytes)
        );
        let l = Loaded::open("run.html".into(), html.as_bytes());
        assert!(l.error.is_none(), "{:?}", l.error);
        assert_eq!(l.notice.as_deref(), Some("thinned"));
        assert_eq!(
            l.trace.unwrap().marks.len(),
            Loaded::decode("x".into(), &bytes, None)
                .trace
                .unwrap()
                .marks
                .len()
        );
        let damaged = html.replace(&b64.encode(&bytes)[..8], "!!!!!!!!");
        assert!(
            Loaded::open("d.html".into(), damaged.as_bytes())
                .error
                .is_some()
        );
        // Not a report: read as a trace (and refused as one).
        assert!(
            Loaded::open("x.html".into(), b"<html></html>")
                .error
                .is_some()
        );
    }

    use super::*;
    use oomscope_testkit::synth::TrainingRun;

    #[test]
    fn truncated_trace_keeps_its_prefix_and_says_so() {
        let bytes = TrainingRun {
            steps: 30,
            ..TrainingRun::default()
        }
        .to_bytes();
        let cut = &bytes[..bytes.len() * 2 / 3];
        let l = Loaded::decode("cut.oomt".into(), cut, None);
        assert!(l.error.is_none());
        assert!(l.is_partial(), "a cut trace warns");
        let t = l.trace.unwrap();
        assert!(!t.marks.is_empty() && !t.samples.is_empty());
    }

    #[test]
    fn garbage_gives_a_message() {
        let l = Loaded::decode("x.oomt".into(), b"<html>not a trace</html>", None);
        assert!(l.trace.is_none());
        assert!(l.error.unwrap().contains("not a readable oomscope trace"));
    }
}

//! A trace file followed while its run writes it, and its live state (`oomscope_analysis::live`)
//! kept up to date: what `collector watch` shows for each trace it follows and `collector run
//! --live` adds to the status line.
//!
//! Why it reads the file and nothing else: the recorder must never wait for a viewer (memray's
//! live mode blocked the traced program when its reader fell behind), and the trace is already
//! crash-safe and flushed at least once a second. Each refresh decodes only the bytes appended
//! since the last (`oomscope_format::Follower`). What a row and a mark say (where the run is,
//! each memory against its limit, the warnings at 90%) is shown from every refresh that read
//! something, whatever the trace's length; the analysis (the leak and when memory is full, the
//! findings, the chart) is brought up to date only when something was appended, and no more
//! often than keeps it under 1% of a core ([`ANALYSIS_SHARE`]). What it reads at the marks is
//! kept between analyses (`oomscope_analysis::Prepared`: the values, the folds of the stage
//! table, the peaks, the evals, the memory outside the allocator, the rows' scans, and the marks
//! each leak fit reads, at most 4 096 a stage) and extended with what was appended, so an
//! analysis costs about the same at any length: 7 ms on a day at 100 Hz, which keeps it at every
//! refresh (BENCHMARKS.md). What is read again each time: the marks since the last eval measured
//! for good (the one before the last that began), and the marks of a trace with input records
//! (`inputs::input_peak`).

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use oomscope_analysis::live::{LiveState, analysed, live_now};
use oomscope_analysis::metrics::host_in_use;
use oomscope_analysis::{AnalysisOptions, Prepared, analyze_prepared};
use oomscope_format::{CounterId, Follower};

/// The analysis may take at most this share of the follower's wall time: re-run no sooner than
/// its last run's cost divided by it.
pub const ANALYSIS_SHARE: f64 = 0.01;

/// The most of a file read at once.
const READ_PIECE_BYTES: u64 = 4 << 20;

/// A trace being followed.
#[derive(Debug)]
pub struct LiveTrace {
    /// Its file (which may not exist yet).
    pub path: PathBuf,
    file: Option<File>,
    /// What was decoded so far.
    pub follower: Follower,
    /// When its file last grew.
    pub grew_at: Instant,
    analysed_at: Option<Instant>,
    analysis_cost: Duration,
    /// Chunks were decoded since the last analysis.
    unanalysed: bool,
    /// The state changed since the caller last took note ([`LiveTrace::take_fresh`]).
    fresh: bool,
    /// The live state, from the last analysis.
    pub state: Option<LiveState>,
    /// The host's memory in use, as the last analysis chose it (`metrics::host_in_use`).
    host: Option<CounterId>,
    /// What the last analysis read at the marks, extended by the next with what was appended.
    prepared: Option<Prepared>,
}

impl LiveTrace {
    /// A follower of `path`, not read yet.
    pub fn new(path: PathBuf) -> LiveTrace {
        LiveTrace {
            path,
            file: None,
            follower: Follower::default(),
            grew_at: Instant::now(),
            analysed_at: None,
            analysis_cost: Duration::ZERO,
            unanalysed: false,
            fresh: false,
            state: None,
            host: None,
            prepared: None,
        }
    }

    /// Whether its file was found (and opened).
    pub fn found(&self) -> bool {
        self.file.is_some()
    }

    /// Whether the state changed since this was last asked.
    pub fn take_fresh(&mut self) -> bool {
        std::mem::take(&mut self.fresh)
    }

    /// Reads what was appended to the file and, when it is due, analyses what was decoded.
    /// `buf` is scratch space kept between calls.
    pub fn refresh(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        if self.file.is_none() {
            match File::open(&self.path) {
                Ok(file) => self.file = Some(file),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => {
                    return Err(e).with_context(|| format!("cannot read {}", self.path.display()));
                }
            }
        }
        let Some(file) = self.file.as_mut() else {
            return Ok(());
        };
        let before = self.follower.chunks();
        // In pieces: the first read of a day-long trace never sits in memory beside its decoding.
        loop {
            buf.clear();
            Read::by_ref(file)
                .take(READ_PIECE_BYTES)
                .read_to_end(buf)
                .with_context(|| format!("cannot read {}", self.path.display()))?;
            if buf.is_empty() {
                break;
            }
            self.grew_at = Instant::now();
            if let Err(e) = self.follower.push(buf) {
                bail!("cannot follow {}: {e}", self.path.display());
            }
            if (buf.len() as u64) < READ_PIECE_BYTES {
                break;
            }
        }
        self.unanalysed |= self.follower.chunks() > before;
        let due = self.analysed_at.is_none_or(|at| {
            at.elapsed().as_secs_f64() >= self.analysis_cost.as_secs_f64() / ANALYSIS_SHARE
        });
        let Some(trace) = self.follower.trace() else {
            return Ok(());
        };
        if self.unanalysed && (due || self.follower.ended()) {
            self.unanalysed = false;
            let started = Instant::now();
            let prepared = self.prepared.get_or_insert_with(|| Prepared::new(trace));
            let analysis = analyze_prepared(trace, &AnalysisOptions::default(), prepared);
            self.host = host_in_use(trace);
            let now = live_now(trace, self.host);
            self.state = Some(analysed(now, trace, &analysis, Some(prepared)));
            self.analysis_cost = started.elapsed();
            self.analysed_at = Some(Instant::now());
            self.fresh = true;
        } else if self.follower.chunks() > before {
            // The readings now; the analysis's part as it last was.
            let now = live_now(trace, self.host);
            self.state = Some(match self.state.take() {
                Some(last) => LiveState {
                    leak: last.leak,
                    findings: last.findings,
                    chart: last.chart,
                    ..now
                },
                None => now,
            });
            self.fresh = true;
        }
        Ok(())
    }
}

//! A trace followed while its run writes it, and its analysis and live state kept up to date:
//! the one loop every live view runs (`collector watch`, `collector run --live`, the page
//! `collector serve` serves). It does no I/O: the caller hands it the bytes appended since the
//! last time (read from a file, fetched over HTTP) and the time now, so the terminal and the page
//! follow a trace the same way, with the same throttle.
//!
//! Each push decodes only the appended bytes (`oomscope_format::Follower`). What a row and a mark
//! say (where the run is, each memory against its limit, the alerts) is brought up to date at
//! every refresh that read something, whatever the trace's length; the analysis (the leak and when
//! memory is full, the findings, the chart) only when whole chunks were appended, and no more
//! often than keeps it under [`ANALYSIS_SHARE`] of the follower's time. What the analysis read at
//! the marks is kept between analyses ([`Prepared`]) and extended with what was appended, so an
//! analysis costs about the same at any length (BENCHMARKS.md: 7 ms on a day at 100 Hz).

use std::sync::Arc;

use super::state::{LiveState, readings, with_analysis};
use crate::metrics::host_in_use;
use crate::{Analysis, AnalysisOptions, Prepared, analyze_prepared};
use oomscope_format::{CounterId, DecodeError, Follower, Trace};

/// The analysis may take at most this share of the follower's wall time: it runs again no
/// sooner than its last run's cost divided by it (a day-long trace's 7 ms: every 0.7 s).
pub const ANALYSIS_SHARE: f64 = 0.01;

/// A trace being followed.
#[derive(Debug, Default)]
pub struct LiveFeed {
    follower: Follower,
    /// What the last analysis read at the marks, extended by the next with what was appended.
    prepared: Option<Prepared>,
    /// The host's memory in use, as the last analysis chose it (`metrics::host_in_use`).
    host: Option<CounterId>,
    /// The last analysis.
    analysis: Option<Arc<Analysis>>,
    /// The live state: the readings now, the analysis's part as it last was.
    state: Option<LiveState>,
    /// Chunks were decoded since the last analysis.
    unanalysed: bool,
    /// Chunks were decoded since the last refresh.
    unread: bool,
    /// When the last analysis ended, on the caller's clock (ms), and what it cost.
    analysed_at_ms: Option<f64>,
    cost_ms: f64,
}

/// What a refresh did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// Nothing new was read.
    Nothing,
    /// The readings are new; the analysis is as it last was (not due yet).
    Readings,
    /// The analysis ran again.
    Analysis,
}

impl LiveFeed {
    /// Decodes `bytes`, the next bytes of the trace's file; whether whole chunks were added.
    pub fn push(&mut self, bytes: &[u8]) -> Result<bool, DecodeError> {
        let before = self.follower.chunks();
        self.follower.push(bytes)?;
        let added = self.follower.chunks() > before;
        self.unanalysed |= added;
        self.unread |= added;
        Ok(added)
    }

    /// Brings the live state up to what was pushed: the analysis too when it is due (its cost
    /// against [`ANALYSIS_SHARE`] of the time since it last ran, or the trace ended). `now_ms` is
    /// the caller's clock, read before and after an analysis.
    pub fn refresh(&mut self, now_ms: &dyn Fn() -> f64) -> Refreshed {
        let Some(trace) = self.follower.trace() else {
            return Refreshed::Nothing;
        };
        let started_ms = now_ms();
        let due = self
            .analysed_at_ms
            .is_none_or(|at| started_ms - at >= self.cost_ms / ANALYSIS_SHARE);
        if self.unanalysed && (due || self.follower.ended()) {
            self.unanalysed = false;
            self.unread = false;
            let prepared = self.prepared.get_or_insert_with(|| Prepared::new(trace));
            let analysis = analyze_prepared(trace, &AnalysisOptions::default(), prepared);
            self.host = host_in_use(trace);
            let now = readings(trace, self.host);
            self.state = Some(with_analysis(now, trace, &analysis, Some(prepared)));
            self.analysis = Some(Arc::new(analysis));
            // Nothing more will be appended: what the marks read is no longer needed.
            if self.follower.ended() {
                self.prepared = None;
            }
            let ended_ms = now_ms();
            self.cost_ms = ended_ms - started_ms;
            self.analysed_at_ms = Some(ended_ms);
            return Refreshed::Analysis;
        }
        if !std::mem::take(&mut self.unread) {
            return Refreshed::Nothing;
        }
        // The readings now; the analysis's part as it last was.
        let now = readings(trace, self.host);
        self.state = Some(match self.state.take() {
            Some(last) => LiveState {
                leak: last.leak,
                findings: last.findings,
                chart: last.chart,
                ..now
            },
            None => now,
        });
        Refreshed::Readings
    }

    /// When an analysis is waiting for its turn (chunks were read since the last one, which ran
    /// too recently): the milliseconds until a refresh runs it, from `now_ms`. A view that
    /// refreshes only when bytes arrive asks so that a run that stops appending (paused, hung,
    /// between long steps) is still analysed as far as it went.
    pub fn analysis_due_in_ms(&self, now_ms: f64) -> Option<f64> {
        if !self.unanalysed {
            return None;
        }
        Some(self.analysed_at_ms.map_or(0.0, |at| {
            (at + self.cost_ms / ANALYSIS_SHARE - now_ms).max(0.0)
        }))
    }

    /// The live state, once something was read and refreshed.
    pub fn state(&self) -> Option<&LiveState> {
        self.state.as_ref()
    }

    /// The last analysis (of the trace as it was then).
    pub fn analysis(&self) -> Option<&Arc<Analysis>> {
        self.analysis.as_ref()
    }

    /// What was decoded so far.
    pub fn trace(&self) -> Option<&Trace> {
        self.follower.trace()
    }

    /// The recorder wrote its end: nothing more will come.
    pub fn ended(&self) -> bool {
        self.follower.ended()
    }

    /// The whole chunks decoded so far.
    pub fn chunks(&self) -> u64 {
        self.follower.chunks()
    }

    /// The bytes decoded so far.
    pub fn bytes_decoded(&self) -> u64 {
        self.follower.bytes_decoded()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::MIB;
    use oomscope_testkit::synth::TrainingRun;
    use std::cell::Cell;

    /// A trace pushed in pieces ends with the state of the whole trace, and the analysis runs
    /// only when it is due.
    #[test]
    fn a_trace_pushed_in_pieces_ends_as_the_whole_trace() {
        let bytes = TrainingRun {
            steps: 120,
            leak_bytes_per_step: 64 * MIB,
            ..TrainingRun::default()
        }
        .to_bytes();
        let clock = Cell::new(0.0);
        let now = || {
            clock.set(clock.get() + 1.0);
            clock.get()
        };
        let mut feed = LiveFeed::default();
        assert_eq!(feed.refresh(&now), Refreshed::Nothing);
        let mut analyses = 0;
        for piece in bytes.chunks(bytes.len() / 7 + 1) {
            feed.push(piece).unwrap();
            if feed.refresh(&now) == Refreshed::Analysis {
                analyses += 1;
            }
        }
        assert!(feed.ended());
        assert!((1..=8).contains(&analyses), "{analyses}");
        let trace = oomscope_format::decode(&bytes).unwrap().trace;
        let whole = crate::live::live_state(&trace, &crate::analyze(&trace, &Default::default()));
        let state = feed.state().unwrap();
        assert_eq!(state.step, whole.step);
        assert_eq!(state.leak, whole.leak);
        assert_eq!(state.memory, whole.memory);
        assert_eq!(state.findings.len(), whole.findings.len());
    }

    /// A slow analysis is not run again until its cost is a small share of the time since.
    #[test]
    fn the_analysis_waits_for_its_share_of_the_time() {
        let bytes = TrainingRun::default().to_bytes();
        let cut = bytes.len() / 2;
        // Each read of the clock is 10 ms later: an analysis costs 10 ms.
        let clock = Cell::new(0.0);
        let now = || {
            clock.set(clock.get() + 10.0);
            clock.get()
        };
        let mut feed = LiveFeed::default();
        feed.push(&bytes[..cut / 2]).unwrap();
        assert_eq!(feed.refresh(&now), Refreshed::Analysis);
        assert_eq!(
            feed.analysis_due_in_ms(clock.get()),
            None,
            "nothing unanalysed"
        );
        feed.push(&bytes[cut / 2..cut]).unwrap();
        // 10 ms after a 10 ms analysis: not due for 1 s.
        assert_eq!(feed.refresh(&now), Refreshed::Readings);
        // The analysis ended at 20 ms and cost 10 ms; the clock reads 30 ms: due in 990 ms.
        assert_eq!(feed.analysis_due_in_ms(clock.get()), Some(990.0));
        clock.set(clock.get() + 1_000.0);
        assert_eq!(feed.analysis_due_in_ms(clock.get()), Some(0.0));
        assert_eq!(feed.refresh(&now), Refreshed::Analysis);
        assert_eq!(feed.analysis_due_in_ms(clock.get()), None);
        assert_eq!(feed.refresh(&now), Refreshed::Nothing);
    }
}

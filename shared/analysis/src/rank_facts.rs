//! What ranks side by side show, as facts: a rank's first OOM, the rank furthest above the
//! others at a stage, the rank that failed first and what the others did. Declared apart from the
//! comparison that finds them (`ranks`), so that a finding can carry them and a rank's summary
//! can carry its findings without the two files importing each other.

use serde::Serialize;

use crate::metrics::MetricKey;
use oomscope_format::ExitStatus;

/// A rank's first OOM.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankOom {
    /// When, on the job's clock.
    pub t_us: u64,
    /// Host memory (not device).
    pub host: bool,
    /// At which stage and step, when known.
    pub stage: Option<String>,
    /// Step.
    pub step: Option<u64>,
    /// The error's first line.
    pub message: String,
}

/// The rank furthest above the others at one stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageImbalance {
    /// The stage.
    pub stage: String,
    /// What was compared (`host.rss`, `gpu0.process`, `allocated`).
    pub metric: MetricKey,
    /// The rank with the most.
    pub rank: u32,
    /// Its value (the stage's highest on that rank).
    pub max_bytes: u64,
    /// The median rank's value.
    pub median_bytes: u64,
    /// How many ranks were compared.
    pub ranks: usize,
    /// The group compared within, when the ranks named groups.
    pub group: Option<String>,
}

impl StageImbalance {
    /// What the rank holds beyond the median.
    pub fn excess_bytes(&self) -> u64 {
        self.max_bytes.saturating_sub(self.median_bytes)
    }
}

/// What one of the other ranks did when the first one failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankFate {
    /// The rank.
    pub rank: u32,
    /// How it ended (its launcher's word), when known.
    pub exit: Option<ExitStatus>,
    /// Seconds between the failure and its last mark when it marked nothing after the failure
    /// (it waited: in a collective, for the failed rank), else `None`.
    pub idle_after_failure_us: Option<u64>,
    /// It also ran out of memory.
    pub oom: bool,
}

/// The first rank to fail on the common clock, and the others' fate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FirstFailure {
    /// The rank.
    pub rank: u32,
    /// When (job clock), when known.
    pub t_us: Option<u64>,
    /// Its first OOM, when it ran out of memory.
    pub oom: Option<RankOom>,
    /// How it ended, when known.
    pub exit: Option<ExitStatus>,
    /// The other ranks.
    pub others: Vec<RankFate>,
}

impl FirstFailure {
    /// The error line, when there is one.
    pub fn message(&self) -> Option<&str> {
        self.oom.as_ref().map(|o| o.message.as_str())
    }
}

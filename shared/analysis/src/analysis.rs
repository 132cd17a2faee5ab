//! What [`crate::analyze()`] returns ([`Analysis`]: the overview, every analysis's result and
//! the findings) and the knobs it takes ([`AnalysisOptions`]): types only, so that the rules
//! (`recommend`) and the words (`oomscope-words`) can read an analysis without reaching the code that
//! makes one. Every type is `Serialize`: field names are the JSON contract (snake_case, units in
//! the names); what `summary --json` writes in words (the findings) the words crate adds.

use serde::Serialize;

use crate::batch_fit::{BatchFit, DEFAULT_BATCH_MARGIN, TrialSummary};
use crate::finding::Finding;
use crate::host::HostMemory;
use crate::leaks::{DEFAULT_MIN_STEPS, GrowthFit};
pub use crate::marks::MarksSampled;
use crate::metrics::MetricKey;
use crate::oom::OomContext;
use crate::overhead::OutsideAllocator;
use crate::peaks::Peak;
use crate::phases::{PhaseTransition, TrainingPeak};
use crate::pressure::PressureReport;
use crate::ranks::RankOwn;
use crate::stages::{Growth, StageTable};
use crate::{estimate, inputs, ranks, stage_breakdown, trend, workers};
use oomscope_format::ExitStatus;

/// Knobs of the analysis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AnalysisOptions {
    /// Mark index the stage table reports deltas against (see [`crate::stages::StageTableOptions`]).
    pub baseline_mark: Option<usize>,
    /// Share of device memory kept free when choosing a batch size (default 0.10).
    pub batch_margin: f64,
    /// Distinct steps a leak fit needs (default 20).
    pub leak_min_steps: usize,
}

impl Default for AnalysisOptions {
    fn default() -> AnalysisOptions {
        AnalysisOptions {
            baseline_mark: None,
            batch_margin: DEFAULT_BATCH_MARGIN,
            leak_min_steps: DEFAULT_MIN_STEPS,
        }
    }
}

/// One GPU of the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSummary {
    /// Device index.
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// Total memory.
    pub total_memory_bytes: u64,
}

/// How the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExitSummary {
    /// When.
    pub t_us: u64,
    /// Exit code or signal.
    pub status: ExitStatus,
    /// Killed while host memory was nearly exhausted.
    pub probable_host_oom: bool,
}

/// Records the recorder dropped, per record tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DroppedSummary {
    /// Record tag (see `FORMAT.md`).
    pub record_tag: u8,
    /// Records dropped.
    pub count: u64,
}

/// The highest value of one counter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CounterPeak {
    /// The counter (serialised as its label, `gpu0.used`).
    pub label: MetricKey,
    /// Its peak.
    pub bytes: u64,
}

/// What was recorded, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Overview {
    /// The watched command line, arguments joined by spaces.
    pub command: String,
    /// Host name.
    pub host: String,
    /// Process id.
    pub pid: u32,
    /// Distributed rank, when known.
    pub rank: Option<u32>,
    /// Distributed world size, when known.
    pub world_size: Option<u32>,
    /// Recorder version.
    pub collector_version: String,
    /// The watched GPUs.
    pub gpus: Vec<GpuSummary>,
    /// Time of the last thing in the trace.
    pub duration_us: u64,
    /// Sample rows.
    pub samples: usize,
    /// Stage marks.
    pub marks: usize,
    /// Steps the program ran, as the marks number them: distinct steps among the marks, or every
    /// step from the first to the last when the hooks marked one in several ([`MarksSampled`]).
    pub steps: usize,
    /// Distinct steps among the marks.
    pub marked_steps: usize,
    /// When the hooks marked one iteration in several.
    pub marks_sampled: Option<MarksSampled>,
    /// Lowest step.
    pub first_step: Option<u64>,
    /// Highest step.
    pub last_step: Option<u64>,
    /// Label of the metric headline numbers use.
    pub primary_metric: Option<MetricKey>,
    /// How the process ended, if it did while recorded.
    pub exit: Option<ExitSummary>,
    /// The recorder wrote its end record (false: crash, kill or truncation).
    pub ended_cleanly: bool,
    /// A recorder that attached to the process while it ran (`collector attach`): when, how long
    /// the process had run, and how the watch ended; empty for a recorder that started it.
    pub attach: Vec<oomscope_format::Attach>,
    /// Dropped records per tag.
    pub dropped: Vec<DroppedSummary>,
    /// All dropped records.
    pub dropped_total: u64,
    /// Peak of each sampled counter.
    pub counter_peaks: Vec<CounterPeak>,
}

/// Everything [`crate::analyze()`] computes.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    /// What was recorded.
    pub overview: Overview,
    /// Live tensors that grew across steps, as the hooks counted them while memory rose (the
    /// trace's HELD records, largest growth first).
    pub held: Vec<oomscope_format::HeldTensors>,
    /// Garbage collections that freed memory (the trace's GC records, in time order).
    pub gc: Vec<oomscope_format::GcCollection>,
    /// Peaks of every memory quantity.
    pub peaks: Vec<Peak>,
    /// Memory per stage.
    pub stage_table: StageTable,
    /// The largest rise of the primary metric between consecutive marks.
    pub largest_growth: Option<Growth>,
    /// A training step whose peak its larger input explains (variable-length batches).
    pub input_peak: Option<inputs::InputPeak>,
    /// Per-stage growth fits; `is_leak` marks the leaks.
    pub leak_fits: Vec<GrowthFit>,
    /// Growth of the main counters over time, for runs without step marks.
    pub time_trends: Vec<trend::TimeTrend>,
    /// The program's other processes (workers) whose private memory grows.
    pub growing_workers: Vec<workers::WorkerGrowth>,
    /// Allocator fragmentation and retries.
    pub pressure: Option<PressureReport>,
    /// GPU memory outside the allocator.
    pub outside_allocator: Option<OutsideAllocator>,
    /// What the memory is at each stage of one iteration (see [`stage_breakdown`]).
    pub stage_breakdown: Option<stage_breakdown::StageBreakdown>,
    /// The breakdown at the peak beside `collector estimate` for the same model, when the trace
    /// has a breakdown with the parameter counts.
    pub against_estimate: Option<estimate::AgainstEstimate>,
    /// The host's tightest moment.
    pub host_memory: Option<HostMemory>,
    /// Train→eval→train transitions.
    pub phase_transitions: Vec<PhaseTransition>,
    /// The most memory training itself held, the evals' tails left out.
    pub training_peak: Option<TrainingPeak>,
    /// Out-of-memory events in context.
    pub ooms: Vec<OomContext>,
    /// What each memory did along the run's unit, read from the readings alone
    /// ([`crate::symptom`]).
    pub symptoms: Vec<crate::symptom::Symptom>,
    /// What rose before the run's fatal OOM, when it died in an eval.
    pub run_up: Option<crate::run_up::RunUp>,
    /// The shared-memory tmpfs (`/dev/shm`) over the run, when sampled.
    pub shared_memory: Option<crate::shm::SharedMemory>,
    /// The batch-size memory model (from a breakdown only when the primary metric does not
    /// leak: a leak would be counted as activations).
    pub batch_fit: Option<BatchFit>,
    /// The batch-size search, if one ran.
    pub batch_trials: Option<TrialSummary>,
    /// Ranks side by side, when the trace holds several (torchrun's workers under one
    /// collector): each rank's stage table and findings, imbalance, the first failure. (In
    /// `summary --json` with the findings in words: the words crate writes it.)
    #[serde(skip)]
    pub ranks: Option<ranks::RankAnalysis>,
    /// What to change, most severe first. (In `summary --json` in words: the words crate writes
    /// it.)
    #[serde(skip)]
    pub findings: Vec<Finding>,
}

impl Analysis {
    /// The leak fits that are leaks.
    pub fn leaks(&self) -> impl Iterator<Item = &GrowthFit> {
        self.leak_fits.iter().filter(|f| f.is_leak())
    }

    /// The leak the `leak` finding headlines (see [`crate::leaks::headline_leak`]): what every
    /// view that shows one leak shows.
    pub fn headline_leak(&self) -> Option<&GrowthFit> {
        crate::leaks::headline_leak(&self.leak_fits, self.stage_table.primary_metric)
    }

    /// What this analysis of a rank's view adds to the rank's summary.
    pub fn into_rank_own(self) -> RankOwn {
        RankOwn {
            stage_table: self.stage_table,
            findings: self.findings,
            leak_fits: self.leak_fits,
        }
    }
}

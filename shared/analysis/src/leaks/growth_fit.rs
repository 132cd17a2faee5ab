//! A growth fit as the analysis keeps it ([`GrowthFit`]): the line, what the steps and the
//! transitions between them kept, and one verdict ([`LeakVerdict`]): a leak and the evidence that
//! made it one, or why it is not one.

use serde::ser::{Serialize, SerializeMap, Serializer};

use crate::clocks::Clock;
use crate::metrics::MetricKey;

/// Which evidence made a fit a leak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LeakEvidence {
    /// At least the configured number of steps (default [`super::DEFAULT_MIN_STEPS`]).
    Long,
    /// A short, very straight, sustained fit ([`super::SHORT_MIN_STEPS`]).
    Short,
    /// Sustained growth that ended in an out-of-memory error ([`super::BEFORE_OOM_MIN_STEPS`]).
    BeforeOom,
}

/// Why a fit is not a leak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotALeak {
    /// Memory does not rise: the line, or the training steps' own rate, is flat or falling.
    NotRising,
    /// Host memory that rises as resident pages of memory-mapped files (at least
    /// [`super::FILE_BACKED_MIN_SHARE`] of the growth): the kernel's to drop.
    FileBacked,
    /// Host memory that grew within the training steps less than at the evals or pauses between
    /// them, with no live tensors counted growing: the creep of a C allocator heap that what the
    /// transitions keep has fragmented, not a leak of its own; the eval finding states it.
    StaircaseCreep,
    /// Host memory whose growth the growing workers' private copies account for (at least
    /// [`crate::workers::WORKERS_EXPLAIN_FRACTION`] of it): the copy-on-write workers' finding
    /// tells it.
    CopiedByWorkers,
    /// It rises, but too few steps, too crooked or too little for any evidence a leak needs.
    TooLittleEvidence,
}

/// What a fit is: a leak and which evidence made it one, or not, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeakVerdict {
    /// A leak.
    Leak(LeakEvidence),
    /// Not a leak.
    Not(NotALeak),
}

impl LeakVerdict {
    /// Whether it is a leak.
    pub fn is_leak(self) -> bool {
        matches!(self, LeakVerdict::Leak(_))
    }

    /// The evidence that made it a leak.
    pub fn evidence(self) -> Option<LeakEvidence> {
        match self {
            LeakVerdict::Leak(e) => Some(e),
            LeakVerdict::Not(_) => None,
        }
    }

    /// Why it is not a leak.
    pub fn not_a_leak(self) -> Option<NotALeak> {
        match self {
            LeakVerdict::Leak(_) => None,
            LeakVerdict::Not(why) => Some(why),
        }
    }
}

/// The verdict's keys as `summary --json` has always written them (`is_leak`, `evidence`), and
/// why a fit is not a leak (`not_a_leak`).
impl Serialize for LeakVerdict {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("is_leak", &self.is_leak())?;
        map.serialize_entry("evidence", &self.evidence())?;
        map.serialize_entry("not_a_leak", &self.not_a_leak())?;
        map.end()
    }
}

/// Which limit a projection runs into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitBasis {
    /// The GPU's total memory.
    DeviceTotal,
    /// Host memory: the last `MemAvailable` plus the RSS at that time.
    HostMemory,
}

/// When a leak fills memory, extrapolating the fitted line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FullProjection {
    /// The limit.
    pub limit_bytes: u64,
    /// What the limit is.
    pub limit_basis: LimitBasis,
    /// Highest value of the metric at any training mark of the last fitted step: the leaked
    /// bytes add to every stage, so the stage that is highest fills memory first.
    pub current_bytes: u64,
    /// Steps until the limit at the fitted slope (0 when already there).
    pub steps_remaining: u64,
    /// The step at which memory is full.
    pub full_at_step: u64,
    /// Mean wall time per step over the fitted marks.
    pub us_per_step: Option<f64>,
    /// Wall time until memory is full.
    pub time_to_full_us: Option<u64>,
}

/// A line fitted to one metric at one stage across steps.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GrowthFit {
    /// Stage name.
    pub stage: String,
    /// Metric label.
    pub metric: MetricKey,
    /// What the `*_step` fields count: training steps, or forwards of a run that never trains.
    pub clock: Clock,
    /// True when the metric is host memory (RSS) rather than GPU memory.
    pub host_memory: bool,
    /// Fitted growth per step.
    pub slope_bytes_per_step: f64,
    /// Fitted value at step 0.
    pub intercept_bytes: f64,
    /// R² of the final fit.
    pub r_squared: f64,
    /// R² of the training steps' own series (the transitions' growth taken out; equal to
    /// `r_squared` without transitions): what decides a leak.
    pub train_r_squared: f64,
    /// Marks the final fit used.
    pub points: usize,
    /// Marks dropped as outliers.
    pub points_dropped: usize,
    /// Distinct steps among the marks used; of a stage thinned for its fit (see
    /// [`crate::fit_marks`]), the steps they stand for (`steps_per_point` each, no more than the
    /// stage's steps).
    pub steps: usize,
    /// How many steps one point stands for: 1, unless the stage had more marks than
    /// [`crate::fit_marks::FIT_MARKS_MAX`] over more steps and was fitted on the last of each
    /// block of this many steps.
    pub steps_per_point: u64,
    /// First step used.
    pub first_step: u64,
    /// Last step used.
    pub last_step: u64,
    /// Fitted growth from the first to the last step.
    pub growth_bytes: i64,
    /// Growth needed to call it a leak.
    pub min_leak_growth_bytes: u64,
    /// Growth between training points with nothing else between them, per step: what the steps
    /// themselves keep. Equal to the slope when there are no transitions.
    pub train_slope_bytes_per_step: f64,
    /// Growth between training points with nothing else between them, in all.
    pub train_growth_bytes: i64,
    /// Growth across transitions (an eval, or a pause such as a checkpoint save, between two
    /// consecutive training points): what the transitions keep.
    pub transition_growth_bytes: i64,
    /// Of it, what came beyond the training steps' own rate over the steps counted with the
    /// transitions: what the transitions themselves kept (a steady leak grows as much across an
    /// eval as across any step, and nothing more came at it).
    pub transition_excess_bytes: i64,
    /// Transitions between the fitted points.
    pub transitions: usize,
    /// Of them, pauses: a step that took [`super::PAUSE_FACTOR`] times the median and grew (a
    /// checkpoint, a collection, the hooks' count); the rest are evals and epoch ends.
    pub pauses: usize,
    /// Of them, epoch ends (the epoch changed between the two points, no eval between).
    pub epoch_ends: usize,
    /// The second half of the points still rises (see [`super::SUSTAINED_SHARE`]).
    pub sustained: bool,
    /// A leak and the evidence that made it one, or why it is not one (see
    /// [`super::leak_fits`]). In `summary --json` as `is_leak`, `evidence` and `not_a_leak`.
    #[serde(flatten)]
    pub verdict: LeakVerdict,
    /// Measured whatever the verdict: host memory that grew within the training steps less than
    /// at the evals or pauses between them, with no live tensors counted growing (see
    /// [`NotALeak::StaircaseCreep`]); the eval finding reads it even where the verdict names an
    /// earlier reason.
    pub staircase_creep: bool,
    /// Measured whatever the verdict: the growing workers' copies account for the growth (see
    /// [`NotALeak::CopiedByWorkers`]).
    pub copied_by_workers: bool,
    /// For host memory: what the growing workers copied of their parent's pages within the fit's
    /// span (each worker's rise over the share of its readings inside it), the bytes a
    /// [`NotALeak::CopiedByWorkers`] verdict holds against `growth_bytes`; 0 without growing
    /// workers.
    pub workers_copied_bytes: u64,
    /// When memory is full (leaks with a known limit only).
    pub projection: Option<FullProjection>,
    /// For host memory, when the trace records the tree's file-backed pages (`host.rss_file`):
    /// how much of `growth_bytes`' span they grew. At least [`super::FILE_BACKED_MIN_SHARE`] of the
    /// growth is pages of memory-mapped files, which the kernel drops at will: never a leak.
    pub file_backed_growth_bytes: Option<i64>,
}

impl GrowthFit {
    /// Whether it is a leak.
    pub fn is_leak(&self) -> bool {
        self.verdict.is_leak()
    }
}

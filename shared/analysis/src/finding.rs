//! A finding, as every layer reads it: what it is about ([`FindingKind`], one per rule), how
//! urgent, its words, and the numbers behind it ([`Evidence`], each with its [`Unit`]). Declared
//! here, below the rules that make findings (`recommend`) and the analyses that carry them (a
//! rank's own findings, `ranks`), so that both can name it.

use serde::{Deserialize, Serialize};

/// How urgent a finding is. Ordered: `Info < Warning < Critical`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; nothing is wrong.
    Info,
    /// Costs memory or time, or will become a problem.
    Warning,
    /// The run failed or will fail.
    Critical,
}

impl Severity {
    /// `info`, `warning` or `critical`.
    pub fn label(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }

    /// The severity [`Severity::label`] names.
    pub fn from_label(label: &str) -> Option<Severity> {
        [Severity::Info, Severity::Warning, Severity::Critical]
            .into_iter()
            .find(|s| s.label() == label)
    }
}

/// What a finding is about: one kind per rule. Its id (`oom`, `leak`, …, kebab-case) is what
/// `collector summary --json` writes and the text shows after a finding's title.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FindingKind {
    /// The run died of an out-of-memory error.
    Oom,
    /// Activations dominate the peak.
    ActivationsDominate,
    /// The caching allocator holds much more than the tensors use.
    Fragmentation,
    /// The optimizer's state is a large share of the model's memory.
    OptimizerStateHeavy,
    /// Models that are not trained (an EMA copy, a frozen encoder) hold a large share.
    ModelCopies,
    /// The peak step had a much larger input than a median step, and memory follows the input.
    InputPeak,
    /// Memory grows step after step.
    Leak,
    /// Reference cycles hold memory until the garbage collector runs.
    ReferenceCycles,
    /// Evaluation leaves memory behind.
    EvalRetainsMemory,
    /// Evaluation needs more memory than training.
    EvalPeak,
    /// The process holds device memory outside the caching allocator.
    OutsideAllocator,
    /// Gradients turned NaN or infinite.
    NonFiniteGradients,
    /// Recorded tensors hold NaN or infinite elements.
    NonFiniteTensors,
    /// The host ran short of memory.
    HostMemoryPressure,
    /// What batch size fits.
    BatchSize,
    /// One request larger than the whole device or host: a shape or configuration bug.
    ImpossibleRequest,
    /// The program's workers copy their parent's memory page by page (copy-on-write).
    WorkerPrivateGrowth,
    /// The shared-memory tmpfs (`/dev/shm`) DataLoader workers hand batches through was full.
    ShmPressure,
    /// One rank holds much more than the others at some stage.
    RankImbalance,
    /// A rank failed first; the others followed.
    FirstRankFailure,
    /// A node's host memory spiked far above its level in the loop (every rank loading or
    /// saving at once).
    NodeHostSpike,
}

impl FindingKind {
    /// The stable kebab-case id.
    pub fn id(self) -> &'static str {
        match self {
            FindingKind::Oom => "oom",
            FindingKind::ActivationsDominate => "activations-dominate",
            FindingKind::Fragmentation => "fragmentation",
            FindingKind::OptimizerStateHeavy => "optimizer-state-heavy",
            FindingKind::ModelCopies => "model-copies",
            FindingKind::InputPeak => "input-peak",
            FindingKind::Leak => "leak",
            FindingKind::ReferenceCycles => "reference-cycles",
            FindingKind::EvalRetainsMemory => "eval-retains-memory",
            FindingKind::EvalPeak => "eval-peak",
            FindingKind::OutsideAllocator => "outside-allocator",
            FindingKind::NonFiniteGradients => "non-finite-gradients",
            FindingKind::NonFiniteTensors => "non-finite-tensors",
            FindingKind::HostMemoryPressure => "host-memory-pressure",
            FindingKind::BatchSize => "batch-size",
            FindingKind::ImpossibleRequest => "impossible-request",
            FindingKind::WorkerPrivateGrowth => "worker-private-growth",
            FindingKind::ShmPressure => "shm-pressure",
            FindingKind::RankImbalance => "rank-imbalance",
            FindingKind::FirstRankFailure => "first-rank-failure",
            FindingKind::NodeHostSpike => "node-host-spike",
        }
    }

    /// A few words naming what was found, for sentences such as "leak gone" (a comparison's
    /// headline).
    pub fn noun(self) -> &'static str {
        match self {
            FindingKind::Oom => "out-of-memory error",
            FindingKind::ActivationsDominate => "activation-heavy peak",
            FindingKind::Fragmentation => "fragmentation",
            FindingKind::OptimizerStateHeavy => "heavy optimizer state",
            FindingKind::ModelCopies => "untrained model copies",
            FindingKind::InputPeak => "input-driven peak",
            FindingKind::Leak => "leak",
            FindingKind::ReferenceCycles => "memory held by reference cycles",
            FindingKind::EvalRetainsMemory => "memory kept by eval",
            FindingKind::EvalPeak => "eval peak above training",
            FindingKind::OutsideAllocator => "memory outside the allocator",
            FindingKind::NonFiniteGradients => "non-finite gradients",
            FindingKind::NonFiniteTensors => "non-finite tensors",
            FindingKind::HostMemoryPressure => "host memory pressure",
            FindingKind::BatchSize => "batch-size estimate",
            FindingKind::ImpossibleRequest => "impossible request",
            FindingKind::WorkerPrivateGrowth => "workers' copy-on-write growth",
            FindingKind::ShmPressure => "a full /dev/shm",
            FindingKind::RankImbalance => "rank imbalance",
            FindingKind::FirstRankFailure => "first-rank failure",
            FindingKind::NodeHostSpike => "node host-memory spike",
        }
    }

    /// Order among findings of one severity: lower first. A request that can never fit is the
    /// cause whatever else the run shows, so it leads; the rest go by id.
    pub fn rank(self) -> u8 {
        match self {
            FindingKind::ImpossibleRequest => 0,
            // Which rank failed first frames every other finding of a failed job.
            FindingKind::FirstRankFailure => 1,
            // The step and the input that set the peak come before what the peak is made of
            // (on the H200 the input-driven peak read second, after "Activations are 99%").
            FindingKind::InputPeak => 2,
            _ => 3,
        }
    }
}

/// The unit of an evidence value, so every layer formats it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bytes (negative for a shrink).
    Bytes,
    /// A count of things (steps, records, elements, a batch size, a step number).
    Count,
    /// A share of a whole, 0–1.
    Share,
    /// A duration in microseconds.
    Micros,
    /// A plain number (a fit's R²).
    Number,
}

impl Unit {
    /// `bytes`, `count`, `share`, `micros`, `number` (as serialised).
    pub fn label(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Count => "count",
            Unit::Share => "share",
            Unit::Micros => "micros",
            Unit::Number => "number",
        }
    }
}

/// A machine-readable number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// What it is (`shortfall_bytes`, `r_squared`, `step`).
    pub label: String,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: Unit,
}

impl Evidence {
    /// Bytes.
    pub fn bytes(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Bytes)
    }

    /// A count.
    pub fn count(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Count)
    }

    /// A share of a whole (0–1).
    pub fn share(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Share)
    }

    /// A duration in microseconds.
    pub fn micros(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Micros)
    }

    /// A plain number.
    pub fn number(label: &str, value: f64) -> Evidence {
        Evidence::new(label, value, Unit::Number)
    }

    fn new(label: &str, value: f64, unit: Unit) -> Evidence {
        Evidence {
            label: label.to_owned(),
            value,
            unit,
        }
    }

    /// The value for a reader: bytes as `1.5 GiB`, durations as `3m 20s`, shares as `37.5%`.
    pub fn text(&self) -> String {
        match self.unit {
            Unit::Bytes => oomscope_format::units::format_bytes_f64(self.value),
            Unit::Micros => oomscope_format::units::format_duration_us(self.value.max(0.0) as u64),
            Unit::Share => format!("{:.1}%", self.value * 100.0),
            Unit::Count if self.value.fract() == 0.0 && self.value.abs() < 1e15 => {
                format!("{:.0}", self.value)
            }
            Unit::Count | Unit::Number => format!("{:.3}", self.value),
        }
    }
}

/// One diagnosis with its numbers and the change to make.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// What it is about (serialised as its kebab-case id, e.g. `"id": "oom"`).
    #[serde(rename = "id")]
    pub kind: FindingKind,
    /// How urgent.
    pub severity: Severity,
    /// One line.
    pub title: String,
    /// What was measured and what it means, quoting the numbers.
    pub explanation: String,
    /// The concrete change to try.
    pub change: String,
    /// The numbers, machine-readable.
    pub evidence: Vec<Evidence>,
}

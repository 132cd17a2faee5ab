//! What a finding is about ([`FindingKind`], one per rule) and how urgent it is ([`Severity`]):
//! the two facts every finding has, whatever it found.

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

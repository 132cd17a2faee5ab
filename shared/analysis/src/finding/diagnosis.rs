//! What each rule found, as types: the diagnosis a [`super::Finding`] carries in its
//! [`Detail`], holding every number and fact its words quote.
//!
//! Why here, apart from the rules: a rule (`recommend/`) decides and measures, the words crate
//! says what it found, and both name these types; the rules import them, the words read them,
//! and nothing here imports a rule. Each is a plain value the finding owns (copied out of the
//! analysis), so a finding reads the same wherever it goes: the terminal, the page, a comparison.
//! Decisions are fields (`pressed`, `impossible`, `critical`), never left for the words to make.

use super::kind::FindingKind;
use crate::batch_fit::{BatchFit, TrialSummary};
use crate::host::HostMemory;
use crate::inputs::InputPeak;
use crate::leaks::GrowthFit;
use crate::metrics::MetricKey;
use crate::node::NodeHostSpike;
use crate::oom::OomContext;
use crate::overhead::OutsideAllocator;
use crate::peaks::Peak;
use crate::phases::{EvalTail, PhaseTransition};
use crate::pressure::PressureReport;
use crate::rank_facts::{FirstFailure, StageImbalance};
use crate::run_up::RunUp;
use crate::shm::SharedMemory;
use crate::trend::TimeTrend;
use crate::workers::WorkerGrowth;
use oomscope_format::{
    GcCollection, GradientSummary, HeldTensors, NamedBytes, StartMethod, TensorStats,
};

/// What part of the training loop a stage name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopPart {
    /// The forward pass (activations are being built).
    Forward,
    /// The backward pass (activations are consumed, gradients built).
    Backward,
    /// The optimizer step (state is read and, on the first step, allocated).
    Optimizer,
    /// Anything else: data loading, logging, between steps, or unknown.
    Other,
}

impl LoopPart {
    /// Classifies a stage name by the words in it.
    pub fn of_stage(name: &str) -> LoopPart {
        let name = name.to_ascii_lowercase();
        if name.contains("backward") {
            LoopPart::Backward
        } else if name.contains("optim") {
            LoopPart::Optimizer
        } else if name.contains("forward") {
            LoopPart::Forward
        } else {
            LoopPart::Other
        }
    }

    /// The part of the loop running between a mark `stage` and the next one, `next`: heading to
    /// `post_X` means X is running; right after `pre_X`, X is running; otherwise unknown.
    pub fn running(stage: Option<&str>, next: Option<&str>) -> LoopPart {
        let starts_pre = |s: &str| s.to_ascii_lowercase().starts_with("pre");
        if let Some(next) = next
            && !starts_pre(next)
        {
            return LoopPart::of_stage(next);
        }
        match stage {
            Some(stage) if starts_pre(stage) => LoopPart::of_stage(stage),
            _ => LoopPart::Other,
        }
    }
}

/// What the advice may assume of the program: where its tensors live and whether it has worker
/// processes, so that a CPU run whose leak is tensors is not told about copy-on-write workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Program {
    /// No device memory was recorded: the tensors live in host memory.
    pub cpu_only: bool,
    /// Processes other than the program were seen in its tree (DataLoader workers, ranks).
    pub workers: bool,
    /// The run has stage marks (from the hooks or the program).
    pub marked: bool,
}

/// `oom`: the first GPU OOM, in context.
#[derive(Debug, Clone, PartialEq)]
pub struct OutOfGpuMemory {
    /// The OOM the run died of, else the first the program survived.
    pub first: OomContext,
    /// GPU OOM events in all.
    pub events: usize,
    /// The part of the loop that was running then.
    pub part: LoopPart,
    /// The memory model's batch that fits, when it knows one.
    pub fit: Option<BatchFit>,
    /// The optimizer's state at the peak, when the components are known.
    pub optimizer_state_bytes: Option<u64>,
    /// Batch-size trials that ran out of memory (a batch search probing the limit).
    pub oom_trials: usize,
    /// The eval the run died in and what it had added, when it died of this OOM in one.
    pub run_up: Option<RunUp>,
    /// Its request alone was larger than the whole device (`impossible-request` tells it).
    pub impossible: bool,
}

/// `activations-dominate`: activations are most of the peak.
#[derive(Debug, Clone, PartialEq)]
pub struct ActivationShare {
    /// The memory peak.
    pub peak: Peak,
    /// Its activations (peak minus the model's components, against the allocator's own numbers).
    pub activations_bytes: u64,
    /// `activations / peak`.
    pub share: f64,
    /// The memory model's batch that fits, when it knows one.
    pub fit: Option<BatchFit>,
    /// The run pressed on memory: it hit a GPU OOM or peaked near the device's total.
    pub pressed: bool,
    /// A memory's floor or peak followed the input's size (its symptom): activations, which
    /// scale with the input, are what moves it.
    pub follows_input: Option<FollowsInput>,
}

/// A memory that followed the input's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FollowsInput {
    /// The memory.
    pub metric: MetricKey,
    /// Bytes per input element, fitted.
    pub bytes_per_element: f64,
    /// The fit's correlation.
    pub correlation: f64,
}

/// A part of a memory's rise that one kind of state made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StateGrowth {
    /// The memory.
    pub metric: MetricKey,
    /// What the state grew by.
    pub grew_bytes: u64,
    /// The memory's rise over the same span.
    pub rise_bytes: u64,
}

/// `optimizer-state-heavy`: the optimizer's state is a large share of the peak.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerShare {
    /// The memory peak.
    pub peak_bytes: u64,
    /// The optimizer's state at it.
    pub optimizer_state_bytes: u64,
    /// The parameters at it.
    pub parameters_bytes: u64,
    /// `optimizer state / peak`.
    pub share: f64,
    /// What 8-bit moments would save (they take a quarter of fp32 ones).
    pub estimated_saving_bytes: u64,
    /// Ranks the state could be sharded across (more than one).
    pub ranks: Option<u32>,
    /// The run pressed on memory: it hit a GPU OOM or peaked near the device's total.
    pub pressed: bool,
    /// The optimizer's state grew over the run by most of a memory's rise (parameter groups
    /// added, an optimizer's history filling): how much, and the rise.
    pub grew: Option<StateGrowth>,
}

/// `batch-size`: a batch-size search ran.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSearchResult {
    /// The trials, summarised.
    pub trials: TrialSummary,
    /// The memory model fitted to them, when it could be.
    pub fit: Option<BatchFit>,
}

/// `fragmentation`: the allocator held much more than tensors needed, or retried.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentedCache {
    /// The allocator's pressure report it read.
    pub pressure: PressureReport,
    /// The peak gap reached the thresholds.
    pub large_gap: bool,
    /// Times the allocator freed its cache and retried.
    pub retries: u64,
    /// An OOM the cache could have served: its request was no larger than what the allocator
    /// held unused at that moment.
    pub served_by_cache: Option<OomContext>,
}

/// `outside-allocator`: GPU memory the process holds outside PyTorch's allocator.
#[derive(Debug, Clone, PartialEq)]
pub struct Outside {
    /// The measurement.
    pub outside: OutsideAllocator,
    /// The trace is one rank of several (its first collective creates NCCL's buffers).
    pub distributed: bool,
}

/// An untrained model at the peak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UntrainedModel {
    /// Its name and bytes.
    pub model: NamedBytes,
    /// It is the trained model's size: a copy of it (an EMA).
    pub copy: bool,
}

/// `model-copies`: untrained models hold a large share of the peak.
#[derive(Debug, Clone, PartialEq)]
pub struct UntrainedModels {
    /// The peak they are a share of.
    pub peak_bytes: u64,
    /// What the peak measures.
    pub metric: MetricKey,
    /// The untrained models, largest first.
    pub models: Vec<UntrainedModel>,
    /// Their bytes over the peak.
    pub share: f64,
    /// They press on device memory: a warning.
    pub pressed: bool,
}

impl UntrainedModels {
    /// Their bytes, all together.
    pub fn total_bytes(&self) -> u64 {
        self.models.iter().map(|m| m.model.bytes).sum()
    }
}

/// `reference-cycles`: memory that only the garbage collector frees.
#[derive(Debug, Clone, PartialEq)]
pub struct CycleMemory {
    /// The collections that freed memory.
    pub collections: Vec<GcCollection>,
    /// Tensors the hooks found held only by a cycle, one a step or more.
    pub held: Vec<HeldTensors>,
    /// The largest collection is a large share of the peak: a warning.
    pub pressed: bool,
}

impl CycleMemory {
    /// The collection that freed the most.
    pub fn largest(&self) -> Option<&GcCollection> {
        self.collections.iter().max_by_key(|g| g.freed_bytes)
    }

    /// What the collections freed in all.
    pub fn freed_bytes(&self) -> u64 {
        self.collections.iter().map(|g| g.freed_bytes).sum()
    }
}

/// `eval-peak`: an eval needed more memory than training.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalAboveTraining {
    /// The eval with the highest peak (the earliest of equals).
    pub eval: PhaseTransition,
    /// Its peak.
    pub eval_peak_bytes: u64,
    /// The highest value at any training mark outside the evals' tails.
    pub training_peak_bytes: u64,
    /// An eval's tail, left out of the training peak, that read above it.
    pub tail: Option<EvalTail>,
    /// Whether eval forwards ran with autograd on, when the trace says.
    pub autograd: Option<bool>,
    /// An eval that grew inside itself by at least a third of its rise: the outputs collected
    /// batch by batch (the peak's own eval, else the one that grew most).
    pub grower: Option<PhaseTransition>,
    /// Memory was also kept after evals (an `eval-retains-memory` finding says so).
    pub also_retains: bool,
}

impl EvalAboveTraining {
    /// How far the eval's peak is above training's.
    pub fn excess_bytes(&self) -> u64 {
        self.eval_peak_bytes
            .saturating_sub(self.training_peak_bytes)
    }

    /// Whether the eval that grew inside itself is the peak's own.
    pub fn grower_is_the_peak(&self) -> bool {
        self.grower
            .as_ref()
            .is_some_and(|g| g.entry_t_us == self.eval.entry_t_us && g.metric == self.eval.metric)
    }
}

/// Where repeated eval retention leads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalProjection {
    /// The memory limit (device total, or host memory).
    pub limit_bytes: u64,
    /// The run's high point so far: the memory peak, or the last eval's peak when higher.
    pub current_bytes: u64,
    /// Mean memory kept per retaining eval.
    pub per_eval_bytes: u64,
    /// More evals like these until an eval no longer fits (0: the next one does not).
    pub evals_remaining: u64,
    /// Training steps between evals (the median), when more than one eval ran.
    pub steps_between_evals: Option<u64>,
}

/// `eval-retains-memory`: memory rises on entering eval and does not come back.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalRetention {
    /// The eval that kept the most (the earliest of equals).
    pub worst: PhaseTransition,
    /// Evals that kept memory.
    pub retaining_evals: usize,
    /// Evals recorded.
    pub evals: usize,
    /// Memory kept by all of them.
    pub total_retained_bytes: i64,
    /// When the evals fill memory at this rate, if the limit is known.
    pub projection: Option<EvalProjection>,
    /// Memory also leaks within training steps (a `leak` finding explains that part).
    pub also_leaks: bool,
    /// Host memory that grew inside the training steps after the evals, less than the evals
    /// kept and with no tensors counted growing: the heap's creep, stated here.
    pub creep: Option<GrowthFit>,
    /// Whether eval forwards ran with autograd on, when the trace says.
    pub autograd: Option<bool>,
    /// The retaining evals grew inside themselves, batch by batch, by at least a third of what
    /// they kept: their outputs are collected and kept.
    pub accumulates: bool,
    /// Growth inside the retaining evals, summed, and the batches it came over.
    pub within_growth_bytes: i64,
    /// See `within_growth_bytes`.
    pub within_batches: usize,
    /// What the hooks counted growing over an eval's batches, the largest a program names.
    pub holder: Option<HeldTensors>,
}

/// `leak`: memory that grows on the run's clock.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // one a finding: boxing buys nothing
pub enum LeakDiagnosis {
    /// Memory at a stage grows step after step (or forward after forward, epoch after epoch).
    PerStep(GrowingMemory),
    /// A counter grows for the whole of a run that has no step marks.
    OverTime(OverTime),
    /// No stage's memory fits a steady rise, but the hooks' counts found tensors that accumulate
    /// step after step (largest first).
    Accumulating(Vec<HeldTensors>),
    /// The floor of a memory rises without bound (its symptom), and nothing else measured
    /// accounts for it: no stage's fit, no eval's retention, no worker's copies.
    Rising(RisingFloor),
}

/// A rising floor no other measurement accounts for.
#[derive(Debug, Clone, PartialEq)]
pub struct RisingFloor {
    /// What the memory did.
    pub symptom: crate::symptom::Symptom,
    /// What the hooks counted growing meanwhile (steady groups, largest first).
    pub steady: Vec<HeldTensors>,
    /// What the advice may assume of the program.
    pub program: Program,
    /// When memory is full at that rate, when its limit is known.
    pub full: Option<FloorFull>,
    /// Most of the rise is new models' state, their parameters with it (parameters, gradients,
    /// optimizer state): models and their optimizers kept as the run goes (a sweep's trials).
    pub models_kept: bool,
}

/// Where a rising floor meets its memory's limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloorFull {
    /// The limit.
    pub limit_bytes: u64,
    /// What the limit is.
    pub limit_basis: crate::leaks::LimitBasis,
    /// The position on the symptom's unit where the floor reaches it.
    pub full_at: u64,
    /// In how long, at the run's pace.
    pub time_to_full_us: Option<u64>,
}

/// A per-step leak.
#[derive(Debug, Clone, PartialEq)]
pub struct GrowingMemory {
    /// The leak to headline.
    pub headline: GrowthFit,
    /// Stage/metric fits that grow.
    pub leaking_fits: usize,
    /// At this rate memory fills within a few times the steps observed.
    pub critical: bool,
    /// What the advice may assume.
    pub program: Program,
    /// The groups the hooks counted growing at least one a step with no eval between their
    /// counts, each once (the latest counts).
    pub steady: Vec<HeldTensors>,
    /// The bytes a step the program's containers were counted gaining on the leak's side (host or
    /// device); `None` when none was, or what grows keeps autograd graphs.
    pub counted_bytes_per_step: Option<f64>,
    /// `counted_bytes_per_step` is well under the leak's rate: what was counted is only part.
    pub counted_is_part: bool,
    /// On the epochs' clock: the containers counted at epoch starts that gained items, each
    /// holder once (its latest count).
    pub epoch_rows: Vec<HeldTensors>,
}

/// A counter that grows for the whole of a run without step marks.
#[derive(Debug, Clone, PartialEq)]
pub struct OverTime {
    /// The trend.
    pub trend: TimeTrend,
    /// What the advice may assume.
    pub program: Program,
    /// At this rate memory fills within a few times the time observed.
    pub critical: bool,
}

/// `host-memory-pressure`: host memory nearly ran out, or a process was killed for it.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPressure {
    /// The host's tightest moment (also when it was not tight: the evidence quotes it).
    pub host: Option<HostMemory>,
    /// Whether available memory fell below the threshold then.
    pub low: bool,
    /// The probable kill by the kernel's OOM killer.
    pub kill: Option<OomContext>,
    /// A host allocation the program saw fail: the process was not killed, it raised.
    pub failed: Option<OomContext>,
    /// The failed request alone was larger than the whole host (`impossible-request` tells it).
    pub failed_impossible: bool,
    /// A launcher's word that it killed a task for memory.
    pub launcher: Option<OomContext>,
    /// The eval the process died in, and what it had added (a kill or failure in an eval).
    pub run_up: Option<RunUp>,
    /// Whether the program had processes besides itself (DataLoader workers).
    pub workers: bool,
}

/// `worker-private-growth`: the program's workers each grow private memory.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkersGrowing {
    /// The workers, largest growth first.
    pub workers: Vec<WorkerGrowth>,
    /// What they grew is memory of their own (spawned or fork-server interpreters, or forked
    /// workers whose PSS rose as much), not copies of their parent's pages.
    pub own: bool,
    /// How they were started, when all the same way (`Fork`, `Spawn`); `Forkserver` otherwise.
    pub start: StartMethod,
}

/// `shm-pressure`: the shared-memory tmpfs (`/dev/shm`) was full.
#[derive(Debug, Clone, PartialEq)]
pub struct ShmFull {
    /// `/dev/shm` over the run.
    pub shm: SharedMemory,
    /// Whether the run failed (a non-zero exit, a signal).
    pub failed: bool,
    /// Whether the program had processes besides itself (DataLoader workers).
    pub workers: bool,
    /// PyTorch's first words that `/dev/shm` had no room, and when.
    pub said: Option<(u64, String)>,
}

/// `impossible-request`: one allocation asked for more than the device or host has in all.
#[derive(Debug, Clone, PartialEq)]
pub struct TooLargeRequest {
    /// The OOM whose request exceeds everything.
    pub oom: OomContext,
    /// What it asked for.
    pub requested_bytes: u64,
    /// All of the memory it could have had: the device's total, or the host's.
    pub limit_bytes: u64,
}

impl TooLargeRequest {
    /// How many times the limit it asked for.
    pub fn times_the_limit(&self) -> f64 {
        self.requested_bytes as f64 / self.limit_bytes.max(1) as f64
    }
}

/// `input-peak`: the peak step had a much larger input than a median step.
#[derive(Debug, Clone, PartialEq)]
pub struct InputDriven {
    /// The step and what its input did.
    pub peak: InputPeak,
    /// The peak is a large share of the limit: a warning.
    pub pressed: bool,
    /// The largest input (elements) that keeps the peak under `cap_share` of the limit, when it
    /// is near the inputs the run sees (a number worth setting).
    pub cap_elements: Option<u64>,
    /// See `cap_elements`.
    pub cap_share: f64,
}

/// `non-finite-gradients`: gradients held NaN or Inf.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFiniteGradientSteps {
    /// The first non-finite summary.
    pub first: GradientSummary,
    /// The last summary recorded (finite or not).
    pub last: GradientSummary,
    /// Whether the last is non-finite too.
    pub last_non_finite: bool,
    /// Summaries with NaN or Inf.
    pub non_finite_steps: usize,
    /// Summaries recorded.
    pub recorded_steps: usize,
    /// NaN elements counted over them.
    pub nan_elements: u64,
    /// Inf elements counted over them.
    pub inf_elements: u64,
    /// Inf only, in few steps, and the last finite: the fp16 loss scaler at work.
    pub sporadic_inf: bool,
}

/// `non-finite-tensors`: watched tensors held NaN or Inf.
#[derive(Debug, Clone, PartialEq)]
pub struct NonFiniteTensorRecords {
    /// The first record with NaN or Inf.
    pub first: TensorStats,
    /// Records with NaN or Inf.
    pub records: usize,
    /// The distinct tensors among them, by name.
    pub tensors: Vec<String>,
    /// NaN elements counted over them.
    pub nan_elements: u64,
    /// Inf elements counted over them.
    pub inf_elements: u64,
}

/// `node-host-spike`: a node's host memory far above its level in the loop.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpike {
    /// The spike.
    pub spike: NodeHostSpike,
    /// Little host memory was left then: a warning.
    pub tight: bool,
}

/// The typed diagnosis of a finding: one variant per rule, each what its words quote.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // a run has a few dozen findings at most: boxing buys nothing
pub enum Detail {
    /// `oom`.
    Oom(OutOfGpuMemory),
    /// `activations-dominate`.
    ActivationsDominate(ActivationShare),
    /// `fragmentation`.
    Fragmentation(FragmentedCache),
    /// `optimizer-state-heavy`.
    OptimizerStateHeavy(OptimizerShare),
    /// `model-copies`.
    ModelCopies(UntrainedModels),
    /// `input-peak`.
    InputPeak(InputDriven),
    /// `leak`.
    Leak(LeakDiagnosis),
    /// `reference-cycles`.
    ReferenceCycles(CycleMemory),
    /// `eval-retains-memory`.
    EvalRetainsMemory(EvalRetention),
    /// `eval-peak`.
    EvalPeak(EvalAboveTraining),
    /// `outside-allocator`.
    OutsideAllocator(Outside),
    /// `non-finite-gradients`.
    NonFiniteGradients(NonFiniteGradientSteps),
    /// `non-finite-tensors`.
    NonFiniteTensors(NonFiniteTensorRecords),
    /// `host-memory-pressure`.
    HostMemoryPressure(HostPressure),
    /// `batch-size`.
    BatchSize(BatchSearchResult),
    /// `impossible-request`.
    ImpossibleRequest(TooLargeRequest),
    /// `worker-private-growth`.
    WorkerPrivateGrowth(WorkersGrowing),
    /// `shm-pressure`.
    ShmPressure(ShmFull),
    /// `rank-imbalance`.
    RankImbalance(StageImbalance),
    /// `first-rank-failure`.
    FirstRankFailure(FirstFailure),
    /// `node-host-spike`.
    NodeHostSpike(NodeSpike),
}

impl Detail {
    /// What the finding is about.
    pub fn kind(&self) -> FindingKind {
        use FindingKind as K;
        match self {
            Detail::Oom(_) => K::Oom,
            Detail::ActivationsDominate(_) => K::ActivationsDominate,
            Detail::Fragmentation(_) => K::Fragmentation,
            Detail::OptimizerStateHeavy(_) => K::OptimizerStateHeavy,
            Detail::ModelCopies(_) => K::ModelCopies,
            Detail::InputPeak(_) => K::InputPeak,
            Detail::Leak(_) => K::Leak,
            Detail::ReferenceCycles(_) => K::ReferenceCycles,
            Detail::EvalRetainsMemory(_) => K::EvalRetainsMemory,
            Detail::EvalPeak(_) => K::EvalPeak,
            Detail::OutsideAllocator(_) => K::OutsideAllocator,
            Detail::NonFiniteGradients(_) => K::NonFiniteGradients,
            Detail::NonFiniteTensors(_) => K::NonFiniteTensors,
            Detail::HostMemoryPressure(_) => K::HostMemoryPressure,
            Detail::BatchSize(_) => K::BatchSize,
            Detail::ImpossibleRequest(_) => K::ImpossibleRequest,
            Detail::WorkerPrivateGrowth(_) => K::WorkerPrivateGrowth,
            Detail::ShmPressure(_) => K::ShmPressure,
            Detail::RankImbalance(_) => K::RankImbalance,
            Detail::FirstRankFailure(_) => K::FirstRankFailure,
            Detail::NodeHostSpike(_) => K::NodeHostSpike,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loop_part_of_the_code_between_marks() {
        use LoopPart::*;
        assert_eq!(
            LoopPart::running(Some("pre_forward"), Some("post_forward")),
            Forward
        );
        assert_eq!(
            LoopPart::running(Some("post_forward"), Some("post_backward")),
            Backward
        );
        assert_eq!(
            LoopPart::running(Some("post_backward"), Some("post_optimizer_step")),
            Optimizer
        );
        assert_eq!(
            LoopPart::running(Some("post_optimizer_step"), Some("pre_forward")),
            Other
        );
        assert_eq!(LoopPart::running(Some("pre_forward"), None), Forward);
        assert_eq!(LoopPart::running(Some("post_forward"), None), Other);
        assert_eq!(LoopPart::running(None, None), Other);
    }
}

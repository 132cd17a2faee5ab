//! The decoded, in-memory form of a trace.
//!
//! These types are what the reader produces and what every analysis consumes. They are kept
//! separate from the byte layout (see `FORMAT.md` and [`crate::codec`]) so that the format can
//! grow new record kinds without the analysis noticing, and so that tests can build a [`Trace`]
//! directly without going through bytes.
//!
//! Times are microseconds since the trace's start (`t_us`); the wall-clock start is
//! [`Metadata::start_unix_ns`]. Memory is in bytes (`_bytes`).

use serde::Serialize;

mod growth;
mod hooks;
mod marks;
mod name;
mod packed;
mod samples;

pub use marks::{AllocatorQuantity, AllocatorStats, Mark, Marks, Phase, StageMark};
pub use name::Name;
pub use packed::{Column, ColumnIter, MISSING, PackedColumn};
pub use samples::{CounterId, Samples};

pub use hooks::{
    CHECKPOINT_SAVE_STAGES, EvalAutograd, GcCollection, HeldClock, HeldKind, HeldTensors,
    MarkSampling, ProgramEnd, SavedSnapshot, StepInput,
};

/// Who recorded the trace, where, and what was being watched.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    /// Host name of the machine the run was recorded on.
    pub host: String,
    /// Process id of the watched process (the child of `collector run`, or the program itself).
    pub pid: u32,
    /// The watched command line, one argument per entry.
    pub command: Vec<String>,
    /// Wall-clock time of `t_us == 0`, in nanoseconds since the Unix epoch.
    pub start_unix_ns: u64,
    /// Version string of the program that wrote the trace.
    pub collector_version: String,
    /// Sampling interval the recorder was asked for, in microseconds (0 when not sampling).
    pub sample_interval_us: u64,
    /// Distributed rank of the watched process, when known.
    pub rank: Option<u32>,
    /// Distributed world size, when known.
    pub world_size: Option<u32>,
    /// The GPUs the recorder watched.
    pub gpus: Vec<GpuInfo>,
}

/// One GPU as NVML (or libtorch) described it when recording started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GpuInfo {
    /// Device index as the driver numbers it.
    pub index: u32,
    /// Marketing name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Device UUID.
    pub uuid: String,
    /// Total device memory in bytes.
    pub total_memory_bytes: u64,
    /// Driver version string.
    pub driver_version: String,
    /// CUDA version string.
    pub cuda_version: String,
}

/// What a counter measures. The numeric codes are part of the format and never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum CounterKind {
    /// Device memory in use (NVML `used`; v2 where available, which excludes reserved).
    GpuUsed,
    /// Device memory free (NVML `free`).
    GpuFree,
    /// Device memory reserved by the driver (NVML v2 `reserved`).
    GpuReserved,
    /// Total device memory.
    GpuTotal,
    /// Device memory used by the watched process tree (NVML per-process query).
    ProcessGpu,
    /// One of the caching allocator's quantities, sampled (a tch program recording itself reads
    /// them at every tick; marks carry them as [`AllocatorStats`]).
    Allocator(AllocatorQuantity),
    /// Resident set size of the watched process tree.
    HostRss,
    /// Host memory available (`MemAvailable`).
    HostAvailable,
    /// Proportional set size of the watched process tree: each shared page counted once, split
    /// among the processes that map it (forked DataLoader workers share their parent's pages;
    /// summed RSS counts them once per worker). Format v1.4.
    HostPss,
    /// Resident set size of one process of the tree (a rank): the counter names its pid
    /// ([`Counter::pid`]). Format v1.5.
    PidRss,
    /// Device memory of one process of the tree on one device (NVML per-process query): the
    /// counter names its pid and device. Format v1.5.
    PidGpu,
    /// Resident pages of the watched process tree that are file-backed or shared memory
    /// (`/proc/PID/statm`'s `shared`: memory-mapped files such as an `np.memmap` dataset, shared
    /// libraries, shmem). Clean file pages are the kernel's to drop under pressure: growth here is
    /// not a leak; the rest of `HostRss` is anonymous memory. Format v1.8.
    HostRssFile,
    /// Bytes in use on the shared-memory tmpfs (`/dev/shm`: its blocks less its free blocks):
    /// POSIX shared memory, where DataLoader workers hand their batches to the main process, and
    /// any file written there. The whole mount's, every process's that uses it (a container's
    /// `/dev/shm` is its own): host memory the run uses outside any process's RSS until a
    /// process maps it. Format v1.13.
    ShmUsed,
    /// The size of that tmpfs (Docker's default is 64 MB): what `ShmUsed` can reach before a
    /// worker's batch no longer fits. Format v1.13.
    ShmSize,
    /// A kind this reader does not know (written by a newer recorder); the code is kept.
    Other(u16),
}

impl CounterKind {
    /// Every kind this version knows, in code order.
    pub const KNOWN: [CounterKind; 21] = [
        CounterKind::GpuUsed,
        CounterKind::GpuFree,
        CounterKind::GpuReserved,
        CounterKind::GpuTotal,
        CounterKind::ProcessGpu,
        CounterKind::Allocator(AllocatorQuantity::Allocated),
        CounterKind::Allocator(AllocatorQuantity::Reserved),
        CounterKind::Allocator(AllocatorQuantity::Active),
        CounterKind::Allocator(AllocatorQuantity::PeakAllocated),
        CounterKind::Allocator(AllocatorQuantity::PeakReserved),
        CounterKind::HostRss,
        CounterKind::HostAvailable,
        CounterKind::HostPss,
        CounterKind::PidRss,
        CounterKind::PidGpu,
        CounterKind::HostRssFile,
        CounterKind::Allocator(AllocatorQuantity::InactiveSplit),
        CounterKind::Allocator(AllocatorQuantity::AllocRetries),
        CounterKind::Allocator(AllocatorQuantity::Ooms),
        CounterKind::ShmUsed,
        CounterKind::ShmSize,
    ];

    /// The stable numeric code written to the trace.
    pub fn code(self) -> u16 {
        match self {
            CounterKind::GpuUsed => 1,
            CounterKind::GpuFree => 2,
            CounterKind::GpuReserved => 3,
            CounterKind::GpuTotal => 4,
            CounterKind::ProcessGpu => 5,
            CounterKind::Allocator(q) => q.counter_code(),
            CounterKind::HostRss => 11,
            CounterKind::HostAvailable => 12,
            CounterKind::HostPss => 13,
            CounterKind::PidRss => 14,
            CounterKind::PidGpu => 15,
            CounterKind::HostRssFile => 16,
            CounterKind::ShmUsed => 20,
            CounterKind::ShmSize => 21,
            CounterKind::Other(code) => code,
        }
    }

    /// The kind for a code; unknown codes become [`CounterKind::Other`].
    pub fn from_code(code: u16) -> CounterKind {
        CounterKind::KNOWN
            .into_iter()
            .find(|k| k.code() == code)
            .unwrap_or(CounterKind::Other(code))
    }

    /// The standard name of this kind's counter on `device` (`gpu0.used`, `host.rss`,
    /// `gpu0.allocator.reserved`): the one name every writer declares (the collector, the tch
    /// `Session`, the simulator, tests), so the CSV header, the viewer's legend and the findings
    /// say the same thing. Allocator counters are `allocator.*`, apart from the metrics read from
    /// the marks' allocator statistics (`allocated`, `reserved`).
    pub fn counter_name(self, device: Option<u32>) -> String {
        let field = match self {
            CounterKind::GpuUsed => "used",
            CounterKind::GpuFree => "free",
            CounterKind::GpuReserved => "driver_reserved",
            CounterKind::GpuTotal => "total",
            CounterKind::ProcessGpu => "process",
            CounterKind::Allocator(q) => {
                return match device {
                    Some(d) => format!("gpu{d}.allocator.{}", q.label()),
                    None => format!("gpu.allocator.{}", q.label()),
                };
            }
            CounterKind::HostRss => return "host.rss".to_owned(),
            CounterKind::HostAvailable => return "host.available".to_owned(),
            CounterKind::HostPss => return "host.pss".to_owned(),
            CounterKind::PidRss => return "pid.rss".to_owned(),
            CounterKind::HostRssFile => return "host.rss_file".to_owned(),
            CounterKind::ShmUsed => return "host.shm_used".to_owned(),
            CounterKind::ShmSize => return "host.shm_size".to_owned(),
            CounterKind::PidGpu => "pid",
            CounterKind::Other(code) => return format!("other{code}"),
        };
        match device {
            Some(d) => format!("gpu{d}.{field}"),
            None => format!("gpu.{field}"),
        }
    }

    /// The standard name of one process's counter of this kind: `pid4101.rss`,
    /// `gpu0.pid4101` (the per-process kinds), else [`Self::counter_name`].
    pub fn process_counter_name(self, device: Option<u32>, pid: Option<u32>) -> String {
        match (self, pid) {
            (CounterKind::PidRss, Some(pid)) => format!("pid{pid}.rss"),
            (CounterKind::PidGpu, Some(pid)) => match device {
                Some(d) => format!("gpu{d}.pid{pid}"),
                None => format!("gpu.pid{pid}"),
            },
            _ => self.counter_name(device),
        }
    }

    /// Whether a counter of this kind measures one process ([`Counter::pid`]).
    pub fn is_per_process(self) -> bool {
        matches!(self, CounterKind::PidRss | CounterKind::PidGpu)
    }

    /// A short, stable label used in tables, CSV headers and JSON (`gpu_used`, `host_rss`, ...).
    pub fn label(self) -> &'static str {
        match self {
            CounterKind::GpuUsed => "gpu_used",
            CounterKind::GpuFree => "gpu_free",
            CounterKind::GpuReserved => "gpu_reserved",
            CounterKind::GpuTotal => "gpu_total",
            CounterKind::ProcessGpu => "process_gpu",
            CounterKind::Allocator(q) => q.label(),
            CounterKind::HostRss => "host_rss",
            CounterKind::HostAvailable => "host_available",
            CounterKind::HostPss => "host_pss",
            CounterKind::PidRss => "pid_rss",
            CounterKind::PidGpu => "pid_gpu",
            CounterKind::HostRssFile => "host_rss_file",
            CounterKind::ShmUsed => "shm_used",
            CounterKind::ShmSize => "shm_size",
            CounterKind::Other(_) => "other",
        }
    }
}

/// A declared counter: one column of [`Samples`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    /// What it measures.
    pub kind: CounterKind,
    /// GPU index for device counters; `None` for host counters.
    pub device: Option<u32>,
    /// Display name as the recorder chose it (e.g. `gpu0.used`).
    pub name: String,
    /// The one process a per-process counter measures ([`CounterKind::PidRss`],
    /// [`CounterKind::PidGpu`]); `None` for the others. Format v1.5.
    pub pid: Option<u32>,
}

/// Named bytes, e.g. an extra model copy the user registered (`ema`: 1.2 GiB).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NamedBytes {
    /// What it is.
    pub name: Name,
    /// How big.
    pub bytes: u64,
}

/// Where the model's own memory goes: the part of the peak that is not activations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ComponentBreakdown {
    /// When it was measured.
    pub t_us: u64,
    /// At which step.
    pub step: u64,
    /// Batch size in use (samples per step), when known; needed to express activations per sample.
    pub batch_size: Option<u64>,
    /// Bytes of trainable and frozen parameters.
    pub parameters_bytes: u64,
    /// Bytes of buffers (e.g. batch-norm statistics).
    pub buffers_bytes: u64,
    /// Bytes of gradients.
    pub gradients_bytes: u64,
    /// Bytes of optimizer state (moments etc.).
    pub optimizer_state_bytes: u64,
    /// Extra copies the user registered (EMA, frozen teacher, ...).
    pub extras: Vec<NamedBytes>,
    /// `optimizer_state_bytes` per optimizer, named by its class and, where the program names
    /// it, its variable (`opt_d:Adam`); empty when unknown. Format v1.10.
    pub optimizers: Vec<NamedBytes>,
    /// Elements of the trained models' parameters (each once), when known. Format v1.10.
    pub parameter_count: Option<u64>,
    /// Of them, those an optimizer updates (the rest are frozen), when known. Format v1.10.
    pub trainable_parameter_count: Option<u64>,
}

impl ComponentBreakdown {
    /// Sum of every component (what is resident independent of activations).
    pub fn total_bytes(&self) -> u64 {
        let extras: u64 = self.extras.iter().map(|e| e.bytes).sum();
        self.parameters_bytes
            .saturating_add(self.buffers_bytes)
            .saturating_add(self.gradients_bytes)
            .saturating_add(self.optimizer_state_bytes)
            .saturating_add(extras)
    }
}

/// Gradients after a backward pass.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientSummary {
    /// When.
    pub t_us: u64,
    /// At which step.
    pub step: u64,
    /// Parameters that had a gradient.
    pub params_with_grad: u64,
    /// Bytes of all gradients.
    pub gradient_bytes: u64,
    /// Global L2 norm over all gradients.
    pub global_norm: f64,
    /// NaN elements over all gradients.
    pub nan_count: u64,
    /// Infinite elements over all gradients.
    pub inf_count: u64,
}

/// Statistics of one tensor, computed on its device.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorStats {
    /// When.
    pub t_us: u64,
    /// At which step.
    pub step: u64,
    /// The name the program gave (e.g. `block3.out`).
    pub name: Name,
    /// Shape.
    pub shape: Vec<u64>,
    /// Element type (e.g. `f32`).
    pub dtype: Name,
    /// Bytes of the tensor's data.
    pub bytes: u64,
    /// Minimum over finite elements.
    pub min: f64,
    /// Maximum over finite elements.
    pub max: f64,
    /// Mean over finite elements.
    pub mean: f64,
    /// Standard deviation over finite elements.
    pub std: f64,
    /// NaN elements.
    pub nan_count: u64,
    /// Infinite elements.
    pub inf_count: u64,
}

impl TensorStats {
    /// Statistics of the tensor `name` before anything was measured: no shape, dtype `?`, 0
    /// bytes, NaN statistics, no NaN/Inf elements counted.
    pub fn unmeasured(name: Name) -> TensorStats {
        TensorStats {
            t_us: 0,
            step: 0,
            name,
            shape: Vec::new(),
            dtype: "?".into(),
            bytes: 0,
            min: f64::NAN,
            max: f64::NAN,
            mean: f64::NAN,
            std: f64::NAN,
            nan_count: 0,
            inf_count: 0,
        }
    }
}

/// How an out-of-memory event came to be known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OomSource {
    /// Recognised in the program's stderr (e.g. PyTorch's `CUDA out of memory`).
    Stderr,
    /// Reported by the caching allocator's OOM observer.
    Allocator,
    /// Sent by the program as a marker message.
    Marker,
    /// The process was killed (SIGKILL) while host memory was nearly exhausted.
    HostKill,
    /// The program reported a failed host allocation (`Cannot allocate memory`, `MemoryError`).
    /// Added in format v1.1.
    HostError,
    /// A launcher said it killed a task for memory: Slurm's `srun: error: NODE: task N: Out Of
    /// Memory` (the step's memory cgroup, perhaps on another node; the event's rank is the task).
    /// Added in format v1.6.
    LauncherKill,
    /// A source this reader does not know.
    Other(u8),
}

/// Which memory ran out: the accelerator's (CUDA, ROCm, MPS, TPU) or the host's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OomKind {
    /// Accelerator memory (an OOM error in the program).
    Gpu,
    /// Host memory (the kernel's OOM killer, a failed host allocation, a launcher's kill).
    Host,
}

impl OomSource {
    /// Whether the event is about host memory rather than device memory.
    pub fn is_host(self) -> bool {
        self.kind() == OomKind::Host
    }

    /// Which memory the event is about.
    pub fn kind(self) -> OomKind {
        match self {
            OomSource::HostKill | OomSource::HostError | OomSource::LauncherKill => OomKind::Host,
            _ => OomKind::Gpu,
        }
    }
}

impl OomSource {
    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            OomSource::Stderr => 1,
            OomSource::Allocator => 2,
            OomSource::Marker => 3,
            OomSource::HostKill => 4,
            OomSource::HostError => 5,
            OomSource::LauncherKill => 6,
            OomSource::Other(code) => code,
        }
    }

    /// The source for a code.
    pub fn from_code(code: u8) -> OomSource {
        match code {
            1 => OomSource::Stderr,
            2 => OomSource::Allocator,
            3 => OomSource::Marker,
            4 => OomSource::HostKill,
            5 => OomSource::HostError,
            6 => OomSource::LauncherKill,
            other => OomSource::Other(other),
        }
    }

    /// `stderr`, `allocator`, `marker`, `host_kill`, `host_error`, `launcher_kill` (as
    /// serialised), `other`.
    pub fn label(self) -> &'static str {
        match self {
            OomSource::Stderr => "stderr",
            OomSource::Allocator => "allocator",
            OomSource::Marker => "marker",
            OomSource::HostKill => "host_kill",
            OomSource::HostError => "host_error",
            OomSource::LauncherKill => "launcher_kill",
            OomSource::Other(_) => "other",
        }
    }
}

/// An out-of-memory error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OomEvent {
    /// When.
    pub t_us: u64,
    /// How it was detected.
    pub source: OomSource,
    /// The stage active when it happened, if the recorder knew.
    pub stage: Option<Name>,
    /// The step, if known.
    pub step: Option<u64>,
    /// Bytes the failing allocation asked for.
    pub requested_bytes: Option<u64>,
    /// Which GPU.
    pub device: Option<u32>,
    /// Free device memory at the time, as the error or the allocator stated it.
    pub device_free_bytes: Option<u64>,
    /// Total device memory, as the error or the allocator stated it.
    pub device_total_bytes: Option<u64>,
    /// The error text (first line(s) of it).
    pub message: String,
    /// The process that ran out, when known (the sender of the message; format v1.5).
    pub pid: Option<u32>,
    /// That process's distributed rank, when it has one (format v1.5).
    pub rank: Option<u32>,
    /// Bytes the caching allocator had allocated at the failure, when the reporter knew
    /// (`torch.cuda.memory_stats()` read by the allocator's OOM observer; format v1.7). In JSON
    /// the analysis's resolved figure stands for it.
    #[serde(skip)]
    pub allocated_bytes: Option<u64>,
    /// Bytes the caching allocator had reserved at the failure, likewise (format v1.7).
    #[serde(skip)]
    pub reserved_bytes: Option<u64>,
}

impl OomEvent {
    /// Two reports closer than this (µs) can be one OOM told twice.
    pub const SAME_OOM_WITHIN_US: u64 = 2_000_000;
    /// Requested sizes this close (a share of the larger) are one request: a traceback rounds it
    /// (`Tried to allocate 2.34 GiB`) where the allocator's observer gives exact bytes.
    pub const SAME_SIZE_SHARE: f64 = 0.01;

    /// Whether `later` is this OOM told again (e.g. the allocator's observer inside the program,
    /// then the traceback on stderr): within [`Self::SAME_OOM_WITHIN_US`], of the same memory
    /// (device or host), and the same requested size or one of them unknown.
    pub fn same_oom(&self, later: &OomEvent) -> bool {
        let close = later.t_us.abs_diff(self.t_us) < Self::SAME_OOM_WITHIN_US;
        let same_size = match (self.requested_bytes, later.requested_bytes) {
            (Some(a), Some(b)) => a.abs_diff(b) as f64 <= Self::SAME_SIZE_SHARE * a.max(b) as f64,
            _ => true,
        };
        let same_process = match (self.pid, later.pid) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        close && same_size && same_process && self.source.is_host() == later.source.is_host()
    }

    /// An OOM of `source` saying `message`, with nothing else known yet (stage, step, sizes).
    pub fn new(t_us: u64, source: OomSource, message: String) -> OomEvent {
        OomEvent {
            t_us,
            source,
            stage: None,
            step: None,
            requested_bytes: None,
            device: None,
            device_free_bytes: None,
            device_total_bytes: None,
            message,
            pid: None,
            rank: None,
            allocated_bytes: None,
            reserved_bytes: None,
        }
    }
}

/// Outcome of one batch-size trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrialOutcome {
    /// The step ran.
    Fit,
    /// The step ran out of memory.
    Oom,
    /// The step failed for another reason.
    Error,
}

impl TrialOutcome {
    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            TrialOutcome::Fit => 1,
            TrialOutcome::Oom => 2,
            TrialOutcome::Error => 3,
        }
    }

    /// The outcome for a code (unknown codes read as `Error`).
    pub fn from_code(code: u8) -> TrialOutcome {
        match code {
            1 => TrialOutcome::Fit,
            2 => TrialOutcome::Oom,
            _ => TrialOutcome::Error,
        }
    }
}

/// One trial of a batch-size search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTrial {
    /// When it finished.
    pub t_us: u64,
    /// Batch size tried.
    pub batch_size: u64,
    /// What happened.
    pub outcome: TrialOutcome,
    /// Peak allocated bytes during the trial, when it fit.
    pub peak_bytes: Option<u64>,
}

/// How the watched process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// Exited with this code.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

/// The end of the watched process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessExit {
    /// When.
    pub t_us: u64,
    /// Code or signal.
    pub status: ExitStatus,
    /// Killed by SIGKILL while host memory was nearly exhausted: probably the kernel's OOM killer.
    pub probable_host_oom: bool,
}

/// One source line's share of the GPU memory alive at an OOM: the caching allocator's live
/// blocks grouped by the first stack frame in the program's own code (not torch, not a library),
/// as the zero-code hooks send them with `collector run --oom-snapshot`. The rows of one OOM
/// arrive together, right after it. Added in format v1.3.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AliveSite {
    /// When (the moment the rows arrived, just after their OOM).
    pub t_us: u64,
    /// The source file (`<unknown>` for blocks allocated before history was recorded, `<other>`
    /// for the rows beyond the ones sent).
    pub file: Name,
    /// The line in `file` (0 when unknown).
    pub line: u32,
    /// The function that line is in.
    pub function: Name,
    /// Bytes the allocations from this line asked for, alive at the OOM.
    pub bytes: u64,
    /// How many live blocks.
    pub count: u64,
}

/// A process of the watched program killed by the kernel's OOM killer, as the kernel itself
/// accounted for it: the memory cgroup's `oom_kill` counter (v2 `memory.events`, v1
/// `memory.oom_control`) and, where readable, the kernel log's `Killed process PID (name)` line.
/// The collector writes one per kill it can tell apart; the analysis says "killed by the kernel
/// OOM killer" only on this evidence, "probably" otherwise. Added in format v1.4.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct OomKill {
    /// When: the kernel log's time, else when the collector saw the counter rise, else the
    /// program's exit.
    pub t_us: u64,
    /// The killed process (0 when only the counter says a process was killed).
    pub pid: u32,
    /// Its name as the kernel gives it (`python3`); empty when unknown.
    pub process: Name,
    /// The killed process is the watched program itself (not a worker, a rank or a helper).
    pub main_process: bool,
    /// The kernel log named it.
    pub from_kernel_log: bool,
    /// The memory cgroup's OOM-kill counter rose.
    pub from_cgroup_counter: bool,
    /// The whole host ran out (`Out of memory: Killed process`), not a cgroup's limit.
    pub global: bool,
    /// Its resident memory when killed (anon + file + shmem, from the kernel log).
    pub rss_bytes: Option<u64>,
    /// The memory cgroup's limit, when it has one.
    pub limit_bytes: Option<u64>,
    /// The memory cgroup (`/job/123`), when known.
    pub cgroup: Name,
}

/// One process of the watched tree other than the program itself (a DataLoader worker, a rank
/// under a launcher), as the kernel accounts its memory: what only it uses and its proportional
/// share. The collector writes one per such process at every PSS reading (about once a second),
/// so the analysis can see a worker's private memory grow: copy-on-write of the parent's pages
/// (refcount updates touch every Python object a worker reads). Added in format v1.4.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcessMemory {
    /// When it was read.
    pub t_us: u64,
    /// The process.
    pub pid: u32,
    /// Pages only it maps (`Private_Clean + Private_Dirty` of `smaps_rollup`).
    pub private_bytes: u64,
    /// Its proportional set size.
    pub pss_bytes: u64,
}

/// What a process of the watched tree is to the run. Codes are part of the format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessRole {
    /// The watched program itself, training in its own process (no ranks below it).
    #[default]
    Program,
    /// A process that starts the ranks and trains nothing itself (torchrun's agent, DeepSpeed's
    /// `launch.py`, `mpirun`): the program when ranks appear below it.
    Launcher,
    /// A training process with a distributed rank.
    Rank,
    /// A helper of a rank (a DataLoader worker, a compile worker): it inherited the rank's
    /// environment, so it is not a rank itself.
    Worker,
    /// Any other process of the tree (a shell between the program and a launcher).
    Other,
    /// A role this reader does not know.
    Unknown(u8),
}

impl ProcessRole {
    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            ProcessRole::Program => 1,
            ProcessRole::Launcher => 2,
            ProcessRole::Rank => 3,
            ProcessRole::Worker => 4,
            ProcessRole::Other => 5,
            ProcessRole::Unknown(code) => code,
        }
    }

    /// The role for a code.
    pub fn from_code(code: u8) -> ProcessRole {
        match code {
            1 => ProcessRole::Program,
            2 => ProcessRole::Launcher,
            3 => ProcessRole::Rank,
            4 => ProcessRole::Worker,
            5 => ProcessRole::Other,
            other => ProcessRole::Unknown(other),
        }
    }
}

/// How a process of the tree was started, as its command line tells: a forked child shares its
/// parent's pages until it writes to them (copy-on-write); a spawned one, and a forkserver's
/// child (forked from a fresh server process, Python 3.14's default on Linux), is an interpreter
/// of its own whose memory is its own. Codes are part of the format (v1.12).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StartMethod {
    /// Not known (an older trace, a process that is not Python, one read before it ran).
    #[default]
    Unknown,
    /// Forked from its parent: the same command line.
    Fork,
    /// `multiprocessing`'s spawn: a new interpreter (`spawn_main` on its command line).
    Spawn,
    /// Forked from `multiprocessing`'s fork server (its command line), or the server itself.
    Forkserver,
}

impl StartMethod {
    /// Every method, in code order.
    pub const ALL: [StartMethod; 4] = [
        StartMethod::Unknown,
        StartMethod::Fork,
        StartMethod::Spawn,
        StartMethod::Forkserver,
    ];

    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            StartMethod::Unknown => 0,
            StartMethod::Fork => 1,
            StartMethod::Spawn => 2,
            StartMethod::Forkserver => 3,
        }
    }

    /// The method for a code; an unknown code reads as [`StartMethod::Unknown`].
    pub fn from_code(code: u8) -> StartMethod {
        StartMethod::ALL
            .into_iter()
            .find(|m| m.code() == code)
            .unwrap_or_default()
    }

    /// `fork`, `spawn`, `forkserver` or `unknown`: `multiprocessing`'s names.
    pub fn label(self) -> &'static str {
        match self {
            StartMethod::Unknown => "unknown",
            StartMethod::Fork => "fork",
            StartMethod::Spawn => "spawn",
            StartMethod::Forkserver => "forkserver",
        }
    }
}

/// Where a process's rank came from. Codes are part of the format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankSource {
    /// No rank is known.
    #[default]
    None,
    /// The process said so in a message (`rank=`: the zero-code hooks and the helpers send it
    /// from `torch.distributed` or the environment the process sees now).
    Message,
    /// The environment the process was started with (`/proc/PID/environ`: `RANK`,
    /// `SLURM_PROCID`, `OMPI_COMM_WORLD_RANK`, `PMI_RANK`, `PMIX_RANK`).
    Environment,
}

impl RankSource {
    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            RankSource::None => 0,
            RankSource::Message => 1,
            RankSource::Environment => 2,
        }
    }

    /// The source for a code (unknown codes read as `None`).
    pub fn from_code(code: u8) -> RankSource {
        match code {
            1 => RankSource::Message,
            2 => RankSource::Environment,
            _ => RankSource::None,
        }
    }
}

/// Who one process of the watched tree is: its role and, for a rank, its place in the job. The
/// collector writes one when it first sees a process (a message from it, or the tree walk) and
/// again when it learns more (a message names its rank; the program turns out to be a launcher);
/// the latest record of a pid is what it is. Added in format v1.5.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessInfo {
    /// When the collector learnt this.
    pub t_us: u64,
    /// The process (in the collector's pid namespace).
    pub pid: u32,
    /// Its parent, when it was read.
    pub parent_pid: Option<u32>,
    /// Its name (`/proc/PID/comm`: `python3`, `pt_main_thread`).
    pub name: Name,
    /// What it is to the run.
    pub role: ProcessRole,
    /// Where its rank came from.
    pub rank_from: RankSource,
    /// Global rank (`RANK`, `SLURM_PROCID`, …).
    pub rank: Option<u32>,
    /// Rank within the node (`LOCAL_RANK`, `SLURM_LOCALID`, …).
    pub local_rank: Option<u32>,
    /// Number of ranks in the job (`WORLD_SIZE`, `SLURM_NTASKS`, …).
    pub world_size: Option<u32>,
    /// Which attempt of an elastic job (`TORCHELASTIC_RESTART_COUNT`).
    pub restart: Option<u32>,
    /// The group of ranks it is compared with, as the process said (`process group=pp0`):
    /// ranks of a pipeline stage, of an expert-parallel group, a parameter server. Ranks of
    /// different groups differ by design; imbalance is measured within a group. Format v1.6.
    pub group: Option<Name>,
    /// How it was started, when its command line tells (format v1.12).
    pub start: StartMethod,
}

/// The end of one process of the tree other than the program: seen by the collector (the process
/// left the tree; its exit status is its parent's to read) or stated by its launcher (torchrun's
/// `ChildFailedError` summary: rank, local rank, exit code or signal, pid). Added in format v1.5.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcessEnd {
    /// When: the collector saw it gone, or read the launcher's account of it.
    pub t_us: u64,
    /// The process (0 when the launcher did not say).
    pub pid: u32,
    /// Its rank, when known.
    pub rank: Option<u32>,
    /// Its local rank, when known.
    pub local_rank: Option<u32>,
    /// How it ended, when known (torchrun states a negative exit code for a signal).
    pub status: Option<ExitStatus>,
    /// The launcher named it the first failure (torchrun's "Root Cause").
    pub first_failure: bool,
    /// This is the launcher's account (`true`) rather than the collector's observation.
    pub from_launcher: bool,
}

/// A free-text note from the program or the recorder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// When.
    pub t_us: u64,
    /// What.
    pub text: String,
}

/// Records the recorder had to drop (it never blocks the watched program).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dropped {
    /// When the drop was accounted.
    pub t_us: u64,
    /// Record tag of what was dropped (see `FORMAT.md`).
    pub record_tag: u8,
    /// How many.
    pub count: u64,
}

/// One fact of a trace other than its samples: what the recorder writes, the reader returns,
/// the marker protocol carries and the exports list. Each kind's byte layout is in
/// [`crate::codec::records`] (encoder and decoder side by side) and `FORMAT.md`.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// A stage mark.
    Mark(StageMark),
    /// A component breakdown.
    Components(ComponentBreakdown),
    /// A gradient summary.
    Gradients(GradientSummary),
    /// Tensor statistics.
    Tensor(TensorStats),
    /// An out-of-memory event.
    Oom(OomEvent),
    /// A batch-size trial.
    Trial(BatchTrial),
    /// How the watched process ended.
    Exit(ProcessExit),
    /// A free-text note.
    Note(Note),
    /// Drop accounting.
    Dropped(Dropped),
    /// What was alive at an OOM, one source line (format v1.3).
    Alive(AliveSite),
    /// A process killed by the kernel's OOM killer (format v1.4).
    OomKill(OomKill),
    /// The memory of one process of the tree other than the program (format v1.4).
    ProcessMemory(ProcessMemory),
    /// Who one process of the tree is: its role and rank (format v1.5).
    Process(ProcessInfo),
    /// The end of one process of the tree other than the program (format v1.5).
    ProcessEnd(ProcessEnd),
    /// A group of live tensors that grew across steps (format v1.9).
    Held(HeldTensors),
    /// A garbage collection that freed memory (format v1.9).
    Gc(GcCollection),
    /// The size of a training step's input, when it changed (format v1.10).
    Input(StepInput),
    /// Whether a process's eval forwards run with autograd on (format v1.11).
    EvalAutograd(EvalAutograd),
    /// A memory snapshot saved next to the trace at an OOM (format v1.11).
    SavedSnapshot(SavedSnapshot),
    /// The hooks mark one training iteration in several from a step on (format v1.11).
    MarkSampling(MarkSampling),
    /// The program's own code ended; the interpreter's shutdown follows (format v1.12).
    ProgramEnd(ProgramEnd),
}

impl Record {
    /// When it happened.
    pub fn t_us(&self) -> u64 {
        *self.time()
    }

    /// Sets when it happened (the recorder stamps records as they arrive).
    pub fn set_t_us(&mut self, t_us: u64) {
        *self.time_mut() = t_us;
    }

    fn time(&self) -> &u64 {
        match self {
            Record::Mark(r) => &r.t_us,
            Record::Components(r) => &r.t_us,
            Record::Gradients(r) => &r.t_us,
            Record::Tensor(r) => &r.t_us,
            Record::Oom(r) => &r.t_us,
            Record::Trial(r) => &r.t_us,
            Record::Exit(r) => &r.t_us,
            Record::Note(r) => &r.t_us,
            Record::Dropped(r) => &r.t_us,
            Record::Alive(r) => &r.t_us,
            Record::OomKill(r) => &r.t_us,
            Record::ProcessMemory(r) => &r.t_us,
            Record::Process(r) => &r.t_us,
            Record::ProcessEnd(r) => &r.t_us,
            Record::Held(r) => &r.t_us,
            Record::Gc(r) => &r.t_us,
            Record::Input(r) => &r.t_us,
            Record::EvalAutograd(r) => &r.t_us,
            Record::SavedSnapshot(r) => &r.t_us,
            Record::MarkSampling(r) => &r.t_us,
            Record::ProgramEnd(r) => &r.t_us,
        }
    }

    fn time_mut(&mut self) -> &mut u64 {
        match self {
            Record::Mark(r) => &mut r.t_us,
            Record::Components(r) => &mut r.t_us,
            Record::Gradients(r) => &mut r.t_us,
            Record::Tensor(r) => &mut r.t_us,
            Record::Oom(r) => &mut r.t_us,
            Record::Trial(r) => &mut r.t_us,
            Record::Exit(r) => &mut r.t_us,
            Record::Note(r) => &mut r.t_us,
            Record::Dropped(r) => &mut r.t_us,
            Record::Alive(r) => &mut r.t_us,
            Record::OomKill(r) => &mut r.t_us,
            Record::ProcessMemory(r) => &mut r.t_us,
            Record::Process(r) => &mut r.t_us,
            Record::ProcessEnd(r) => &mut r.t_us,
            Record::Held(r) => &mut r.t_us,
            Record::Gc(r) => &mut r.t_us,
            Record::Input(r) => &mut r.t_us,
            Record::EvalAutograd(r) => &mut r.t_us,
            Record::SavedSnapshot(r) => &mut r.t_us,
            Record::MarkSampling(r) => &mut r.t_us,
            Record::ProgramEnd(r) => &mut r.t_us,
        }
    }
}

/// A whole decoded trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// Format version the file was written in (major, minor).
    pub format_version: (u16, u16),
    /// Who, where, what.
    pub metadata: Metadata,
    /// Declared counters, indexed by [`CounterId`].
    pub counters: Vec<Counter>,
    /// Counter samples.
    pub samples: Samples,
    /// Stage marks in time order, their allocator statistics beside them.
    pub marks: Marks,
    /// Component breakdowns.
    pub components: Vec<ComponentBreakdown>,
    /// Gradient summaries.
    pub gradients: Vec<GradientSummary>,
    /// Tensor statistics.
    pub tensors: Vec<TensorStats>,
    /// Out-of-memory events.
    pub ooms: Vec<OomEvent>,
    /// Batch-size trials.
    pub batch_trials: Vec<BatchTrial>,
    /// How the process ended, when it did while recorded.
    pub exit: Option<ProcessExit>,
    /// Notes.
    pub notes: Vec<Note>,
    /// Drop accounting.
    pub dropped: Vec<Dropped>,
    /// What was alive at OOMs, by source line.
    pub alive: Vec<AliveSite>,
    /// Processes the kernel's OOM killer killed.
    pub oom_kills: Vec<OomKill>,
    /// Memory of the tree's other processes, over time.
    pub process_memory: Vec<ProcessMemory>,
    /// Who the tree's processes are, in the order learnt (the latest of a pid counts).
    pub processes: Vec<ProcessInfo>,
    /// Ends of the tree's other processes.
    pub process_ends: Vec<ProcessEnd>,
    /// Groups of live tensors that grew across steps.
    pub held: Vec<HeldTensors>,
    /// Garbage collections that freed memory.
    pub gc: Vec<GcCollection>,
    /// Training steps' input sizes, each sent when it changed.
    pub inputs: Vec<StepInput>,
    /// Whether eval forwards ran with autograd on, as each process first said.
    pub eval_autograd: Vec<EvalAutograd>,
    /// Memory snapshots saved next to the trace at OOMs.
    pub saved_snapshots: Vec<SavedSnapshot>,
    /// When the hooks began marking one iteration in several, and how many.
    pub mark_sampling: Vec<MarkSampling>,
    /// When each process's own code ended (its interpreter's shutdown followed).
    pub program_ends: Vec<ProgramEnd>,
    /// Time of the end record; `None` when the recorder never finished (crash, kill, truncation).
    pub end_us: Option<u64>,
}

impl Trace {
    /// Whether the program failed: a non-zero exit, a signal, or no recorded end.
    pub fn failed(&self) -> bool {
        self.exit.is_none_or(|e| e.status != ExitStatus::Code(0))
    }

    /// Adds a record to the list of its kind (an exit replaces an earlier one).
    pub fn push(&mut self, record: Record) {
        /// Lists grow by an eighth, not doubling (a day's run with a gradient summary a step has
        /// 240 000).
        fn add<T>(list: &mut Vec<T>, record: T) {
            growth::reserve_gently(list, 1);
            list.push(record);
        }
        match record {
            Record::Mark(r) => self.marks.push(r),
            Record::Components(r) => add(&mut self.components, r),
            Record::Gradients(r) => add(&mut self.gradients, r),
            Record::Tensor(r) => add(&mut self.tensors, r),
            Record::Oom(r) => add(&mut self.ooms, r),
            Record::Trial(r) => add(&mut self.batch_trials, r),
            Record::Exit(r) => self.exit = Some(r),
            Record::Note(r) => add(&mut self.notes, r),
            Record::Dropped(r) => add(&mut self.dropped, r),
            Record::Alive(r) => add(&mut self.alive, r),
            Record::OomKill(r) => add(&mut self.oom_kills, r),
            Record::ProcessMemory(r) => add(&mut self.process_memory, r),
            Record::Process(r) => add(&mut self.processes, r),
            Record::ProcessEnd(r) => add(&mut self.process_ends, r),
            Record::Held(r) => add(&mut self.held, r),
            Record::Gc(r) => add(&mut self.gc, r),
            Record::Input(r) => add(&mut self.inputs, r),
            Record::EvalAutograd(r) => add(&mut self.eval_autograd, r),
            Record::SavedSnapshot(r) => add(&mut self.saved_snapshots, r),
            Record::MarkSampling(r) => add(&mut self.mark_sampling, r),
            Record::ProgramEnd(r) => add(&mut self.program_ends, r),
        }
    }

    /// Every record in time order, each kind's list keeping its own order (ties go to the kind
    /// listed first in [`Record`]): what re-encoding, the exports and the viewer's markers walk.
    pub fn records_in_time(&self) -> impl Iterator<Item = Record> + '_ {
        type List<'a> = std::iter::Peekable<Box<dyn Iterator<Item = Record> + 'a>>;
        fn list<'a, T: Clone + 'a>(
            items: impl IntoIterator<Item = &'a T> + 'a,
            kind: fn(T) -> Record,
        ) -> List<'a> {
            let records: Box<dyn Iterator<Item = Record> + 'a> =
                Box::new(items.into_iter().cloned().map(kind));
            records.peekable()
        }
        let mut lists = [
            {
                let marks: Box<dyn Iterator<Item = Record> + '_> =
                    Box::new(self.marks.iter_recorded().map(Record::Mark));
                marks.peekable()
            },
            list(&self.components, Record::Components),
            list(&self.gradients, Record::Gradients),
            list(&self.tensors, Record::Tensor),
            list(&self.ooms, Record::Oom),
            list(&self.batch_trials, Record::Trial),
            list(&self.exit, Record::Exit),
            list(&self.notes, Record::Note),
            list(&self.dropped, Record::Dropped),
            list(&self.alive, Record::Alive),
            list(&self.oom_kills, Record::OomKill),
            list(&self.process_memory, Record::ProcessMemory),
            list(&self.processes, Record::Process),
            list(&self.process_ends, Record::ProcessEnd),
            list(&self.held, Record::Held),
            list(&self.gc, Record::Gc),
            list(&self.inputs, Record::Input),
            list(&self.eval_autograd, Record::EvalAutograd),
            list(&self.saved_snapshots, Record::SavedSnapshot),
            list(&self.mark_sampling, Record::MarkSampling),
            list(&self.program_ends, Record::ProgramEnd),
        ];
        std::iter::from_fn(move || {
            let (_, first) = lists
                .iter_mut()
                .enumerate()
                .filter_map(|(kind, l)| Some((l.peek()?.t_us(), kind)))
                .min()?;
            lists[first].next()
        })
    }

    /// Declares a counter (used when building traces in memory) and returns its id.
    pub fn declare_counter(&mut self, kind: CounterKind, device: Option<u32>) -> CounterId {
        let name = kind.counter_name(device);
        self.counters.push(Counter {
            kind,
            device,
            name,
            pid: None,
        });
        let id = CounterId((self.counters.len() - 1) as u32);
        self.samples.edit_column(id, |_| ());
        id
    }

    /// Declares a per-process counter (used when building traces in memory) and returns its id.
    pub fn declare_process_counter(
        &mut self,
        kind: CounterKind,
        device: Option<u32>,
        pid: u32,
    ) -> CounterId {
        let name = kind.process_counter_name(device, Some(pid));
        self.counters.push(Counter {
            kind,
            device,
            name,
            pid: Some(pid),
        });
        let id = CounterId((self.counters.len() - 1) as u32);
        self.samples.edit_column(id, |_| ());
        id
    }

    /// The first counter of a kind (on a device, or any device when `device` is `None`).
    pub fn counter(&self, kind: CounterKind, device: Option<u32>) -> Option<CounterId> {
        self.counters
            .iter()
            .position(|c| c.kind == kind && (device.is_none() || c.device == device))
            .map(|i| CounterId(i as u32))
    }

    /// Latest timestamp of anything in the trace.
    pub fn duration_us(&self) -> u64 {
        let last_sample = self.samples.times_us().last().unwrap_or(0);
        let last_mark = self.marks.last().map_or(0, |m| m.t_us);
        let last_oom = self.ooms.iter().map(|o| o.t_us).max().unwrap_or(0);
        let exit = self.exit.map_or(0, |e| e.t_us);
        [
            last_sample,
            last_mark,
            last_oom,
            exit,
            self.end_us.unwrap_or(0),
        ]
        .into_iter()
        .max()
        .unwrap_or(0)
    }

    /// Total memory of the watched GPU(s) as recorded: metadata first, then a `GpuTotal` counter.
    pub fn gpu_total_bytes(&self, device: Option<u32>) -> Option<u64> {
        let from_meta = self
            .metadata
            .gpus
            .iter()
            .find(|g| device.is_none_or(|d| g.index == d))
            .map(|g| g.total_memory_bytes)
            .filter(|b| *b > 0);
        from_meta.or_else(|| {
            let id = self.counter(CounterKind::GpuTotal, device)?;
            self.samples.points(id).map(|(_, v)| v).max()
        })
    }
}

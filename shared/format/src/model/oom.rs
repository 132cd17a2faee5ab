//! What ran out of memory and how the run learned it: an out-of-memory error the program raised
//! or the kernel's killer ([`OomEvent`], [`OomKill`]), what was alive at it ([`AliveSite`]), and a
//! batch-size search's trials ([`BatchTrial`]). Its own module: the records of a failure, apart
//! from the records of a run going well.

use serde::Serialize;

use super::name::Name;

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

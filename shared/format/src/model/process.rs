//! The processes of a run: each one the recorder saw ([`ProcessInfo`]: its role, rank, how it was
//! started), its memory ([`ProcessMemory`]), how it ended ([`ProcessEnd`], [`ProcessExit`]). Its
//! own module: a run's process tree, apart from what the memory did.

use serde::Serialize;

use super::name::Name;

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

/// What happened between a recorder and a process it did not start (`collector attach PID`): it
/// began watching a process already running, the process ended, or the recorder stopped while
/// the process went on. Codes are part of the format (v1.14).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AttachEvent {
    /// The recorder began watching the metadata's process, which was already running: what its
    /// memory did before is not in the trace.
    #[default]
    Attached,
    /// The process ended; a recorder that is not its parent cannot read its exit status.
    ProcessEnded,
    /// The recorder stopped (Ctrl-C, a signal) and the process went on.
    Detached,
    /// A code this reader does not know (a newer writer's); kept.
    Other(u8),
}

impl AttachEvent {
    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            AttachEvent::Attached => 1,
            AttachEvent::ProcessEnded => 2,
            AttachEvent::Detached => 3,
            AttachEvent::Other(code) => code,
        }
    }

    /// The event for a code.
    pub fn from_code(code: u8) -> AttachEvent {
        match code {
            1 => AttachEvent::Attached,
            2 => AttachEvent::ProcessEnded,
            3 => AttachEvent::Detached,
            other => AttachEvent::Other(other),
        }
    }
}

/// One [`AttachEvent`]: the first record of an attached trace says when the recorder attached
/// and how long the process had run by then; its last says how the watch ended (in place of an
/// [`ProcessExit`], which only a parent can know). Added in format v1.14.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Attach {
    /// When.
    pub t_us: u64,
    /// What happened.
    pub event: AttachEvent,
    /// For [`AttachEvent::Attached`]: how long the process had been running (from its start time
    /// in `/proc/PID/stat`), when known.
    pub process_age_us: Option<u64>,
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

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

mod counter_kind;
mod growth;
mod hooks;
mod marks;
mod name;
mod oom;
mod packed;
mod process;
mod samples;

pub use counter_kind::CounterKind;
pub use marks::{AllocatorQuantity, AllocatorStats, Mark, Marks, Phase, StageMark};
pub use name::Name;
pub use oom::{AliveSite, BatchTrial, OomEvent, OomKill, OomKind, OomSource, TrialOutcome};
pub use packed::{Column, ColumnIter, MISSING, PackedColumn};
pub use process::{
    Attach, AttachEvent, ExitStatus, ProcessEnd, ProcessExit, ProcessInfo, ProcessMemory,
    ProcessRole, RankSource, StartMethod,
};
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
    /// A recorder attached to a running process, or its watch of one ended (format v1.14).
    Attach(Attach),
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
            Record::Attach(r) => &r.t_us,
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
            Record::Attach(r) => &mut r.t_us,
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
    /// A recorder that attached to a running process: when, and how its watch ended.
    pub attach: Vec<Attach>,
    /// Time of the end record; `None` when the recorder never finished (crash, kill, truncation).
    pub end_us: Option<u64>,
}

impl Trace {
    /// Whether the program failed: a non-zero exit, a signal, or no recorded end. An attached
    /// recorder's watch that ended ([`Trace::watch_end`]) knows no exit status: no failure.
    pub fn failed(&self) -> bool {
        match self.exit {
            Some(e) => e.status != ExitStatus::Code(0),
            None => self.watch_end().is_none(),
        }
    }

    /// Whether a recorder attached to the process after it started (`collector attach`).
    pub fn attached(&self) -> Option<&Attach> {
        self.attach
            .iter()
            .find(|a| a.event == AttachEvent::Attached)
    }

    /// How an attached recorder's watch ended: the process ended, or the recorder stopped.
    pub fn watch_end(&self) -> Option<&Attach> {
        self.attach
            .iter()
            .rev()
            .find(|a| matches!(a.event, AttachEvent::ProcessEnded | AttachEvent::Detached))
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
            Record::Attach(r) => add(&mut self.attach, r),
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
            list(&self.attach, Record::Attach),
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

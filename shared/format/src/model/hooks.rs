//! What the zero-code Python hooks tell from inside the program, as records: a training step's
//! input size, garbage collections that freed memory, the live tensors that grew while memory
//! grew (and what holds them), whether evals run with autograd, and the memory snapshot saved at
//! an OOM. Each fact is a field; none travels in words (an older writer's words are read into
//! these fields by `codec::legacy`).

use serde::Serialize;

use super::name::Name;

/// The stages the zero-code hooks mark around `torch.save` (`PRE_SAVE`/`POST_SAVE` in
/// `collector/python/oomscope/_hooks/save.py`; a test holds them equal): a checkpoint, not a
/// stage of the training loop.
pub const CHECKPOINT_SAVE_STAGES: [&str; 2] = ["pre_checkpoint_save", "post_checkpoint_save"];

/// The size of a training step's input: the first tensor its outermost training forwards were
/// given (a positional argument, else a keyword argument — `input_ids=` —, else the first a
/// submodule was called with), the largest of the step's forwards (micro-batches). The zero-code
/// hooks send one at the step's end when it differs from the last one sent, so a loop of
/// fixed-size batches sends one; the analysis carries each to the steps after it. Added in
/// format v1.10.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StepInput {
    /// When the forward began.
    pub t_us: u64,
    /// The step the forward belongs to.
    pub step: u64,
    /// Its element count (batch × sequence for token ids).
    pub elements: u64,
    /// Its shape (`8x512`; `scalar` for none).
    pub shape: Name,
    /// The process that sent it (the socket's credentials), when known: a trace of several
    /// ranks has each rank's inputs.
    pub pid: Option<u32>,
}

/// A collection by Python's garbage collector that freed memory: what reference cycles held until
/// it ran. The zero-code hooks time generation 1 and 2 collections (`gc.callbacks`) and send
/// those after which the memory in use (CUDA allocated, else the RSS) was at least 1 MiB lower.
/// Added in format v1.9.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct GcCollection {
    /// When it ended.
    pub t_us: u64,
    /// The generation collected (2: a full collection, also what `gc.collect()` runs).
    pub generation: u32,
    /// Objects it found unreachable.
    pub collected: u64,
    /// How much lower the memory in use was after it.
    pub freed_bytes: u64,
    /// How long the program paused for it.
    pub pause_us: u64,
}

/// What a [`HeldTensors`] row counts. Its code is the byte HELD stores (format v1.11) and its
/// label what the protocol's `held kind=` says (the Python hooks write the same labels; a test
/// holds them equal).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldKind {
    /// Tensors a Python object of the program holds: `holder` names it.
    #[default]
    Tensors,
    /// The autograd nodes behind one tensor the program names (a running total summed without
    /// `.item()`): `count` is how many more nodes its graph has, `bytes` 0, `holder` its name.
    Graph,
    /// Tensors that only a reference cycle holds: garbage the collector frees when it next runs,
    /// not a leak. `holder` names the object in the cycle.
    Cycle,
    /// Tensors no Python container holds (held from C++, such as an autograd graph's saved
    /// tensors): `holder` is empty.
    Uncontained,
    /// Python objects, not tensors, that a container the program names gained (a tokenizer's
    /// cache, a list of results): `holder` names it, `count` is the items it gained, `bytes` their
    /// size as sampled (each new item's objects one level in), `items` its length; device, dtype,
    /// shape and node are empty. Since format v1.12.
    Objects,
}

impl HeldKind {
    /// Every kind, in code order.
    pub const ALL: [HeldKind; 5] = [
        HeldKind::Tensors,
        HeldKind::Graph,
        HeldKind::Cycle,
        HeldKind::Uncontained,
        HeldKind::Objects,
    ];

    /// The byte HELD stores.
    pub fn code(self) -> u8 {
        match self {
            HeldKind::Tensors => 1,
            HeldKind::Graph => 2,
            HeldKind::Cycle => 3,
            HeldKind::Uncontained => 4,
            HeldKind::Objects => 5,
        }
    }

    /// The kind a stored byte says (an unknown code, from a newer writer, reads as `None`).
    pub fn from_code(code: u8) -> Option<HeldKind> {
        HeldKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The protocol's word for it (`held kind=graph`).
    pub fn label(self) -> &'static str {
        match self {
            HeldKind::Tensors => "tensors",
            HeldKind::Graph => "graph",
            HeldKind::Cycle => "cycle",
            HeldKind::Uncontained => "uncontained",
            HeldKind::Objects => "objects",
        }
    }

    /// The kind a protocol word names.
    pub fn from_label(label: &str) -> Option<HeldKind> {
        HeldKind::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// What a [`HeldTensors`] row's `from_step` and `to_step` count: the clock its two counts were
/// taken on (format v1.13; rows before it are on the steps' clock, or, for a v1.12 `objects` row
/// that gained less than an item a step, the epochs': `codec/legacy.rs`). The growth model
/// explains memory on the clock that explains it, so each row says which it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldClock {
    /// Training iterations: `from_step`/`to_step` are steps, `count` the growth between them.
    #[default]
    Step,
    /// The outermost forwards of a program that never trained (a serving or inference loop):
    /// `from_step`/`to_step` are forward counts.
    Forward,
    /// Epoch starts (a DataLoader begun again): `from_step`/`to_step` are the steps of two
    /// consecutive epoch starts, `count` what one epoch's end kept.
    Epoch,
    /// The forwards of one eval within a training program: `from_step`/`to_step` count its
    /// batches from 1 (the eval is the one `t_us` falls in), `count` what its batches kept.
    Eval,
}

impl HeldClock {
    /// Every clock, in code order.
    pub const ALL: [HeldClock; 4] = [
        HeldClock::Step,
        HeldClock::Forward,
        HeldClock::Epoch,
        HeldClock::Eval,
    ];

    /// The byte HELD stores (v1.13).
    pub fn code(self) -> u8 {
        match self {
            HeldClock::Step => 0,
            HeldClock::Forward => 1,
            HeldClock::Epoch => 2,
            HeldClock::Eval => 3,
        }
    }

    /// The clock a stored byte names; `None` for one this reader does not know.
    pub fn from_code(code: u8) -> Option<HeldClock> {
        HeldClock::ALL.into_iter().find(|k| k.code() == code)
    }

    /// The protocol's word for it (`held clock=eval`), and the unit a rate on it is said in.
    pub fn label(self) -> &'static str {
        match self {
            HeldClock::Step => "step",
            HeldClock::Forward => "forward",
            HeldClock::Epoch => "epoch",
            HeldClock::Eval => "eval",
        }
    }

    /// The clock a protocol word names.
    pub fn from_label(label: &str) -> Option<HeldClock> {
        HeldClock::ALL.into_iter().find(|k| k.label() == label)
    }
}

/// A group of live tensors that grew while memory grew across steps: the zero-code hooks count
/// the process's tensors (by device, dtype, shape and autograd node) at two iterations some steps
/// apart once growth is suspected, and send each group that grew, with what holds it where
/// Python can tell. Added in format v1.9; `kind` and `items` in v1.11, `clock` in v1.13.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HeldTensors {
    /// When (the second count).
    pub t_us: u64,
    /// The step of the first count.
    pub from_step: u64,
    /// The step of the second.
    pub to_step: u64,
    /// What the row counts.
    pub kind: HeldKind,
    /// What `from_step` and `to_step` count (v1.13).
    pub clock: HeldClock,
    /// Where the tensors live (`cpu`, `cuda:0`).
    pub device: Name,
    /// Their element type (`float32`).
    pub dtype: Name,
    /// Their shape (`256x512`; `scalar` for none). For a [`HeldKind::Graph`] row, the shape of
    /// the tensor the graph is behind (`graph` in traces before v1.11).
    pub shape: Name,
    /// The autograd node that made them (`AddmmBackward0`): each keeps the graph behind it, and
    /// the activations that graph saved, alive. Empty for tensors outside autograd.
    pub grad_fn: Name,
    /// How many more there were at the second count (autograd nodes for a graph).
    pub count: u64,
    /// How many more bytes of storage they hold (each storage once).
    pub bytes: u64,
    /// What holds them, as the program names it (``list `losses` ``, ``attribute `buf` of a
    /// `Cache` object``); the tensor's name for a graph, the object in the cycle for a cycle;
    /// empty when unknown.
    pub holder: Name,
    /// How many items the holder had at the second count, when it is a container.
    pub items: Option<u64>,
}

impl HeldTensors {
    /// The steps between the two counts (at least 1).
    pub fn steps(&self) -> u64 {
        self.to_step.saturating_sub(self.from_step).max(1)
    }

    /// How many more a step, over the span between the counts.
    pub fn per_step(&self) -> u64 {
        self.count / self.steps()
    }

    /// Whether `other` counts the same group: what, on which clock, held by what (a later pair
    /// of counts finds the same group again; its item count and span move).
    pub fn same_group(&self, other: &HeldTensors) -> bool {
        (self.kind, self.clock) == (other.kind, other.clock)
            && self.holder == other.holder
            && self.device == other.device
            && self.dtype == other.dtype
            && self.shape == other.shape
            && self.grad_fn == other.grad_fn
    }

    /// Whether only a reference cycle holds these tensors.
    pub fn is_cycle(&self) -> bool {
        self.kind == HeldKind::Cycle
    }

    /// Whether this row counts autograd nodes behind one tensor rather than tensors.
    pub fn is_graph(&self) -> bool {
        self.kind == HeldKind::Graph
    }
}

/// Whether a process's eval forwards run with autograd on: the zero-code hooks send it the first
/// time an eval forward runs one way, and again if one runs the other way. Advice to evaluate
/// under `torch.no_grad()` fits only when it was on. Added in format v1.11 (the hooks said it in
/// a note before).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EvalAutograd {
    /// When the eval forward began.
    pub t_us: u64,
    /// Autograd on (neither `torch.no_grad()` nor `torch.inference_mode()`).
    pub enabled: bool,
    /// The process (the socket's credentials), when known.
    pub pid: Option<u32>,
}

/// A PyTorch memory snapshot the zero-code hooks saved next to the trace at a process's first OOM
/// (`collector run --oom-snapshot`): `collector report` bakes the two together. Added in format
/// v1.11 (a note named it before).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SavedSnapshot {
    /// When it was saved.
    pub t_us: u64,
    /// Its file's name, in the trace's directory (no directory part).
    pub file: Name,
    /// The process (the socket's credentials), when known.
    pub pid: Option<u32>,
}

/// The zero-code hooks mark one training iteration in `every` from `from_step` on: a loop faster
/// than they mark (a mark costs the program a reading of its memory), past its first 100
/// iterations. Evals, checkpoints and iterations with a long input stay marked. The step count
/// and the stage table's counts are then the program's steps and the marked ones. Added in
/// format v1.11.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MarkSampling {
    /// When the hooks decided it.
    pub t_us: u64,
    /// One iteration in this many is marked (1: every one again).
    pub every: u32,
    /// The first step it applies to.
    pub from_step: u64,
    /// The loop's iteration time then, as the hooks measured it.
    pub iteration_us: u64,
    /// The last step the loop reached, in the record the hooks send as the process exits (the
    /// last marked step may be earlier); `None` in the others.
    pub last_step: Option<u64>,
    /// The process (the socket's credentials), when known.
    pub pid: Option<u32>,
}

/// The program's own code ended: its main module returned, or raised, or called `sys.exit`, and
/// the interpreter began to shut down. What memory does after it (`atexit` handlers, modules and
/// objects torn down) is the interpreter's, not the run's: the peak the breakdown explains comes
/// before it. Sent by the zero-code hooks from `threading`'s first exit callback, which Python
/// runs before `atexit`'s. Added in format v1.12.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProgramEnd {
    /// When the program's code ended.
    pub t_us: u64,
    /// The process (the socket's credentials), when known.
    pub pid: Option<u32>,
}

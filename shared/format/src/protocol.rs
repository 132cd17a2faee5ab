//! The marker protocol: how a watched program tells `collector run` where it is.
//!
//! It lives in `shared` because it is pure text and every layer speaks it: the collector parses
//! it, the tch `Session` and the Rust `Probe` format it, the Python helper writes it, and tests
//! check all of them against [`keys`], drawn from the one table of each verb's `key=value` fields.
//!
//! Why text lines over a Unix datagram socket: any language can send one (`socket.sendto` in
//! Python, three lines in C), a datagram is one message with no framing to get wrong, and a
//! non-blocking send never stalls the training loop — if the collector falls behind, the kernel
//! drops the datagram and the sender carries on.
//!
//! Version 1. The collector exports `OOMSCOPE_SOCKET` (the socket path) and
//! `OOMSCOPE_PROTOCOL=1`. A datagram holds one or more messages, one per line:
//!
//! ```text
//! mark <stage> [step=N] [epoch=N] [phase=train|eval] [pid=N] [rank=N]
//!      [allocated_bytes=N reserved_bytes=N active_bytes=N inactive_split_bytes=N
//!      peak_allocated_bytes=N peak_reserved_bytes=N num_alloc_retries=N num_ooms=N]
//! step <N> [epoch=N]
//! phase <train|eval>
//! note <free text>
//! components [step=N] [batch_size=N] parameters_bytes=N buffers_bytes=N gradients_bytes=N
//!      optimizer_state_bytes=N [parameter_count=N] [trainable_parameter_count=N]
//!      [extra.<name>=N ...] [optimizer.<name>=N ...]
//! gradients [step=N] params_with_grad=N gradient_bytes=N global_norm=F nan_count=N inf_count=N
//! tensor <name> [step=N] shape=AxBxC dtype=<dtype> bytes=N min=F max=F mean=F std=F
//!      nan_count=N inf_count=N
//! trial batch_size=N outcome=fit|oom|error [peak_bytes=N]
//! oom [stage=<stage>] [step=N] [source=marker|allocator|host_error] [requested_bytes=N] [device=N]
//!      [free_bytes=N] [total_bytes=N] [pid=N] [rank=N] [allocated_bytes=N] [reserved_bytes=N]
//!      [-- <message>]
//! alive bytes=N count=N [line=N] [function=<name>] -- <file>
//! gc freed_bytes=N [generation=N] [collected=N] [pause_us=N]
//! held count=N bytes=N [kind=tensors|graph|cycle|uncontained|objects]
//!      [clock=step|forward|epoch|eval] [from_step=N] [to_step=N] [device=<d>] [dtype=<t>] [shape=AxB|scalar] [grad_fn=<node>] [items=N] [-- <holder>]
//! input elements=N [shape=AxB|scalar] [step=N]
//! eval_autograd on|off
//! memory_snapshot -- <file name>
//! sampling every=N from_step=N [iteration_us=N] [last_step=N]
//! program_end
//! process [rank=N] [local_rank=N] [world_size=N] [restart=N] [group=NAME]
//! at <N> [rss_bytes=N] [rss_file_bytes=N]
//! ring <name>
//! ```
//!
//! Rules: tokens are separated by ASCII whitespace; stage and tensor names are single tokens;
//! unknown verbs and unknown `key=value` fields are ignored (so newer clients work with older
//! collectors); a mark without the allocator fields carries no allocator statistics, and a mark with only
//! some of them is taken with the others as 0. A mark without `step=` keeps the last step the
//! program announced. `pid=` and `rank=` name the sending process: several can share one
//! collector (torchrun's workers under one `collector run`). The collector takes the sender's pid
//! from the kernel (the socket's credentials) over `pid=`, and keeps each sender's step, phase and
//! stage apart. `process` says who the sender is in the job (a rank's helper sends it once); a
//! rank the sender states outranks the one in the environment it was started with. `group=`
//! names the ranks it is compared with (a pipeline stage: `group=pp0`); ranks of different
//! groups differ by design.
//!
//! `at N` says when the messages after it in the same datagram happened: N is the sender's
//! `CLOCK_MONOTONIC` in microseconds (Python's `time.monotonic_ns() // 1000`), and with
//! `rss_bytes=` (and `rss_file_bytes=`, the resident pages that are file-backed or shared) the
//! sender's own memory then, from its `/proc/self/statm`. A sender that times its messages this
//! way needs no reading from the collector at its marks, so the collector drains its datagrams
//! every few milliseconds instead of waking for each one (the wake-up was most of the collector's
//! cost of a mark). Messages without an `at` are stamped when they are read.
//!
//! `ring <name>` announces a ring of shared memory the sender made in the socket's directory
//! (`ring-` and a plain token): from then on the collector reads the sender's messages from it as
//! well, each as one datagram would carry them, and they are the sender's (the announcing
//! datagram's credentials). Its layout is in docs/protocol.md ("Rings") and
//! `oomscope_collector`'s `mark_rings`.

use std::collections::HashMap;
use std::fmt::Write;

use crate::model::{
    AliveSite, AllocatorStats, BatchTrial, ComponentBreakdown, EvalAutograd, GcCollection,
    GradientSummary, HeldClock, HeldKind, HeldTensors, MarkSampling, Name, NamedBytes, Note,
    OomEvent, OomSource, Phase, ProcessInfo, ProcessRole, ProgramEnd, RankSource, Record,
    SavedSnapshot, StageMark, StepInput, TensorStats, TrialOutcome,
};

/// The protocol version this collector speaks (exported as `OOMSCOPE_PROTOCOL`).
pub const PROTOCOL_VERSION: u32 = 1;
/// The environment variable holding the socket path.
pub const SOCKET_ENV: &str = "OOMSCOPE_SOCKET";
/// The environment variable holding the protocol version.
pub const PROTOCOL_ENV: &str = "OOMSCOPE_PROTOCOL";
/// Largest datagram the collector reads; longer ones are truncated by the kernel.
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;

/// Every verb of the protocol, in the order the grammar lists them.
pub const VERBS: [&str; 20] = [
    "mark",
    "step",
    "phase",
    "note",
    "components",
    "gradients",
    "tensor",
    "trial",
    "oom",
    "alive",
    "gc",
    "held",
    "input",
    "eval_autograd",
    "memory_snapshot",
    "sampling",
    "program_end",
    "process",
    "at",
    "ring",
];

/// What a record's sender may leave out and the collector fills in from what the program said
/// last (its latest `step`, `phase` and mark): the record's context, unresolved.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Context {
    /// Step, when given.
    pub step: Option<u64>,
    /// Epoch, when given.
    pub epoch: Option<u32>,
    /// Phase, when given.
    pub phase: Option<Phase>,
    /// Stage (of an OOM), when given.
    pub stage: Option<Name>,
}

/// One parsed message: a record with its unresolved context, or a control verb that only changes
/// the context of later records.
// Most messages are records (a mark per stage): boxing the record would allocate once per mark on
// the recorder's hot path to save bytes on the rare control verbs.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A record. Its time, and any field its context resolves (a mark's step, epoch and phase;
    /// the step of components, gradients and tensors; an OOM's stage and step), are filled in by
    /// the collector.
    Record(Record, Context),
    /// The current step (and epoch).
    Step {
        /// Step.
        step: u64,
        /// Epoch, when given.
        epoch: Option<u32>,
    },
    /// The current phase.
    Phase(Phase),
    /// When the messages after it in its datagram happened, and the sender's memory then.
    At(SenderReading),
    /// The sender's ring of shared memory, by its file's name in the socket's directory.
    Ring(String),
}

/// The sender's clock and memory at a moment: what an `at` line says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SenderReading {
    /// The sender's `CLOCK_MONOTONIC`, microseconds.
    pub mono_us: u64,
    /// The sender's resident bytes.
    pub rss_bytes: Option<u64>,
    /// Of those, file-backed or shared.
    pub rss_file_bytes: Option<u64>,
}

impl Message {
    /// A record whose context is all left to the collector.
    pub fn record(record: Record) -> Message {
        Message::Record(record, Context::default())
    }
}

/// The verb that carries a record kind (`None` for the kinds only the collector writes).
pub fn verb_of(record: &Record) -> Option<&'static str> {
    Some(match record {
        Record::Mark(_) => "mark",
        Record::Note(_) => "note",
        Record::Components(_) => "components",
        Record::Gradients(_) => "gradients",
        Record::Tensor(_) => "tensor",
        Record::Trial(_) => "trial",
        Record::Oom(_) => "oom",
        Record::Alive(_) => "alive",
        Record::Process(_) => "process",
        Record::Held(_) => "held",
        Record::Gc(_) => "gc",
        Record::Input(_) => "input",
        Record::EvalAutograd(_) => "eval_autograd",
        Record::SavedSnapshot(_) => "memory_snapshot",
        Record::MarkSampling(_) => "sampling",
        Record::ProgramEnd(_) => "program_end",
        Record::Exit(_)
        | Record::Dropped(_)
        | Record::OomKill(_)
        | Record::ProcessMemory(_)
        | Record::ProcessEnd(_) => {
            return None;
        }
    })
}

/// The `key=value` fields a verb takes, from the one declaration of each (the field tables
/// below): what the parser reads and the formatter writes, and what the Python helper, the
/// docs/protocol.md's grammar and this module's grammar are checked against by tests. `components` also
/// takes `extra.<name>=N` and `optimizer.<name>=N`.
pub fn keys(verb: &str) -> Vec<&'static str> {
    let context = context_keys(verb);
    let mut keys: Vec<&'static str> = CONTEXT
        .iter()
        .map(|f| f.key)
        .filter(|k| context.contains(k))
        .collect();
    match verb {
        "mark" => {
            keys.extend(MARK.iter().map(|f| f.key));
            keys.extend(AllocatorStats::FIELD_NAMES);
        }
        "components" => keys.extend(COMPONENTS.iter().map(|f| f.key)),
        "gradients" => keys.extend(GRADIENTS.iter().map(|f| f.key)),
        "tensor" => keys.extend(TENSOR.iter().map(|f| f.key)),
        "trial" => keys.extend(TRIAL.iter().map(|f| f.key)),
        "oom" => keys.extend(OOM.iter().map(|f| f.key)),
        "alive" => keys.extend(ALIVE.iter().map(|f| f.key)),
        "held" => keys.extend(HELD.iter().map(|f| f.key)),
        "gc" => keys.extend(GC.iter().map(|f| f.key)),
        "input" => keys.extend(INPUT.iter().map(|f| f.key)),
        "sampling" => keys.extend(SAMPLING.iter().map(|f| f.key)),
        "process" => keys.extend(PROCESS.iter().map(|f| f.key)),
        "at" => keys.extend(AT.iter().map(|f| f.key)),
        _ => {}
    }
    keys
}

/// The verb of a formatted line and the `key=` fields it writes, sorted (`extra.<name>` and
/// `optimizer.<name>` of
/// `components` and the free text after ` -- ` left out): what tests compare with [`keys`].
pub fn written_keys(line: &str) -> (&str, Vec<&str>) {
    let fields = line.split(" -- ").next().unwrap_or_default();
    let verb = fields.split_whitespace().next().unwrap_or_default();
    let mut written: Vec<&str> = fields
        .split_whitespace()
        .filter_map(|t| t.split_once('=').map(|(k, _)| k))
        .filter(|k| !k.starts_with("extra.") && !k.starts_with("optimizer."))
        .collect();
    written.sort_unstable();
    (verb, written)
}

/// The context keys a verb takes (`step` of the `step` verb is its positional value).
fn context_keys(verb: &str) -> &'static [&'static str] {
    match verb {
        "mark" => &["step", "epoch", "phase"],
        "step" => &["epoch"],
        "components" | "gradients" | "tensor" | "input" => &["step"],
        "oom" => &["stage", "step"],
        _ => &[],
    }
}

// ---------------------------------------------------------------------------------------------
// Field tables: each `key=value` field of each verb, declared once, with how it reads into and
// shows out of its record.

/// What a field's absence or a malformed value does to its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Absent or malformed: the field is ignored (newer or sloppier senders still get through).
    Optional,
    /// Malformed: the line is rejected.
    WellFormed,
    /// Absent or malformed: the line is rejected.
    Required,
}

/// One `key=value` field of a record type.
struct Field<R> {
    key: &'static str,
    need: Need,
    read: fn(&mut R, &str) -> Option<()>,
    show: fn(&R, &mut String),
}

/// A field stored at `$path` of the record, its value read and shown by [`Value`].
macro_rules! field {
    ($key:literal, $need:ident, $($path:ident).+) => {
        Field {
            key: $key,
            need: Need::$need,
            read: |r, text| {
                r.$($path).+ = Value::parse(text)?;
                Some(())
            },
            show: |r, out| show_field(out, $key, &r.$($path).+),
        }
    };
}

const CONTEXT: [Field<Context>; 4] = [
    field!("step", Optional, step),
    field!("epoch", Optional, epoch),
    field!("phase", Optional, phase),
    field!("stage", Optional, stage),
];

const MARK: [Field<StageMark>; 2] = [field!("pid", Optional, pid), field!("rank", Optional, rank)];

const COMPONENTS: [Field<ComponentBreakdown>; 7] = [
    field!("batch_size", Optional, batch_size),
    field!("parameters_bytes", Optional, parameters_bytes),
    field!("buffers_bytes", Optional, buffers_bytes),
    field!("gradients_bytes", Optional, gradients_bytes),
    field!("optimizer_state_bytes", Optional, optimizer_state_bytes),
    field!("parameter_count", Optional, parameter_count),
    field!(
        "trainable_parameter_count",
        Optional,
        trainable_parameter_count
    ),
];

const GRADIENTS: [Field<GradientSummary>; 5] = [
    field!("params_with_grad", Optional, params_with_grad),
    field!("gradient_bytes", Optional, gradient_bytes),
    field!("global_norm", Optional, global_norm),
    field!("nan_count", Optional, nan_count),
    field!("inf_count", Optional, inf_count),
];

const TENSOR: [Field<TensorStats>; 9] = [
    field!("shape", WellFormed, shape),
    field!("dtype", Optional, dtype),
    field!("bytes", Optional, bytes),
    field!("min", Optional, min),
    field!("max", Optional, max),
    field!("mean", Optional, mean),
    field!("std", Optional, std),
    field!("nan_count", Optional, nan_count),
    field!("inf_count", Optional, inf_count),
];

const TRIAL: [Field<BatchTrial>; 3] = [
    field!("batch_size", Required, batch_size),
    field!("outcome", Required, outcome),
    field!("peak_bytes", Optional, peak_bytes),
];

const OOM: [Field<OomEvent>; 9] = [
    field!("source", Optional, source),
    field!("requested_bytes", Optional, requested_bytes),
    field!("device", Optional, device),
    field!("free_bytes", Optional, device_free_bytes),
    field!("total_bytes", Optional, device_total_bytes),
    field!("pid", Optional, pid),
    field!("rank", Optional, rank),
    field!("allocated_bytes", Optional, allocated_bytes),
    field!("reserved_bytes", Optional, reserved_bytes),
];

const ALIVE: [Field<AliveSite>; 4] = [
    field!("bytes", Required, bytes),
    field!("count", Required, count),
    field!("line", Optional, line),
    field!("function", Optional, function),
];

const HELD: [Field<HeldTensors>; 11] = [
    field!("count", Required, count),
    field!("bytes", Required, bytes),
    field!("kind", Optional, kind),
    field!("clock", Optional, clock),
    field!("from_step", Optional, from_step),
    field!("to_step", Optional, to_step),
    field!("device", Optional, device),
    field!("dtype", Optional, dtype),
    field!("shape", Optional, shape),
    field!("grad_fn", Optional, grad_fn),
    field!("items", Optional, items),
];

const GC: [Field<GcCollection>; 4] = [
    field!("freed_bytes", Required, freed_bytes),
    field!("generation", Optional, generation),
    field!("collected", Optional, collected),
    field!("pause_us", Optional, pause_us),
];

const INPUT: [Field<StepInput>; 2] = [
    field!("elements", Required, elements),
    field!("shape", Optional, shape),
];

const SAMPLING: [Field<MarkSampling>; 4] = [
    field!("every", Required, every),
    field!("from_step", Required, from_step),
    field!("iteration_us", Optional, iteration_us),
    field!("last_step", Optional, last_step),
];

const PROCESS: [Field<ProcessInfo>; 5] = [
    field!("rank", Optional, rank),
    field!("local_rank", Optional, local_rank),
    field!("world_size", Optional, world_size),
    field!("restart", Optional, restart),
    field!("group", Optional, group),
];

const AT: [Field<SenderReading>; 2] = [
    field!("rss_bytes", Optional, rss_bytes),
    field!("rss_file_bytes", Optional, rss_file_bytes),
];

/// How a field's value is written in a line and read back.
trait Value: Sized {
    fn parse(text: &str) -> Option<Self>;
    /// Appends the value; [`Value::shown`] said there is one.
    fn show(&self, out: &mut String);
    /// Whether there is a value to write (an absent option is not written).
    fn shown(&self) -> bool {
        true
    }
}

fn show_field<T: Value>(out: &mut String, key: &str, value: &T) {
    if value.shown() {
        out.push(' ');
        out.push_str(key);
        out.push('=');
        value.show(out);
    }
}

macro_rules! display_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn parse(text: &str) -> Option<$t> {
                text.parse().ok()
            }
            fn show(&self, out: &mut String) {
                let _ = write!(out, "{self}");
            }
        }
    )*};
}
display_value!(u64, u32, f64);

impl<T: Value> Value for Option<T> {
    fn parse(text: &str) -> Option<Option<T>> {
        T::parse(text).map(Some)
    }
    fn show(&self, out: &mut String) {
        if let Some(v) = self {
            v.show(out);
        }
    }
    fn shown(&self) -> bool {
        self.as_ref().is_some_and(Value::shown)
    }
}

impl Value for Name {
    fn parse(text: &str) -> Option<Name> {
        Some(text.into())
    }
    fn show(&self, out: &mut String) {
        push_token(out, self);
    }
}

/// A shape: dimensions joined by `x` (`4x512x1024`); empty for a scalar.
impl Value for Vec<u64> {
    fn parse(text: &str) -> Option<Vec<u64>> {
        if text.is_empty() {
            return Some(Vec::new());
        }
        text.split('x').map(|d| d.parse().ok()).collect()
    }
    fn show(&self, out: &mut String) {
        for (i, d) in self.iter().enumerate() {
            if i > 0 {
                out.push('x');
            }
            let _ = write!(out, "{d}");
        }
    }
}

impl Value for Phase {
    fn parse(text: &str) -> Option<Phase> {
        match text {
            "train" => Some(Phase::Train),
            "eval" => Some(Phase::Eval),
            _ => None,
        }
    }
    fn show(&self, out: &mut String) {
        out.push_str(self.label());
    }
    fn shown(&self) -> bool {
        *self != Phase::Unknown
    }
}

/// Who saw an OOM, as a program reports it: `marker` (the program caught it and says so; the
/// default, never written), `allocator` (the caching allocator's OOM observer, from inside the
/// process: the zero-code hooks and the tch `Session`) or `host_error` (a failed host allocation
/// the program raised, e.g. libtorch's `DefaultCPUAllocator`). Sources only the collector itself
/// can know (stderr, a SIGKILL) are not accepted from a program.
impl Value for OomSource {
    fn parse(text: &str) -> Option<OomSource> {
        match text {
            "marker" => Some(OomSource::Marker),
            "allocator" => Some(OomSource::Allocator),
            "host_error" => Some(OomSource::HostError),
            _ => None,
        }
    }
    fn show(&self, out: &mut String) {
        out.push_str(match self {
            OomSource::Allocator => "allocator",
            OomSource::HostError => "host_error",
            _ => "marker",
        });
    }
    fn shown(&self) -> bool {
        matches!(self, OomSource::Allocator | OomSource::HostError)
    }
}

impl Value for HeldKind {
    fn parse(text: &str) -> Option<HeldKind> {
        HeldKind::from_label(text)
    }
    fn show(&self, out: &mut String) {
        out.push_str(self.label());
    }
}

impl Value for HeldClock {
    fn parse(text: &str) -> Option<HeldClock> {
        HeldClock::from_label(text)
    }
    fn show(&self, out: &mut String) {
        out.push_str(self.label());
    }
}

impl Value for TrialOutcome {
    fn parse(text: &str) -> Option<TrialOutcome> {
        match text {
            "fit" => Some(TrialOutcome::Fit),
            "oom" => Some(TrialOutcome::Oom),
            "error" => Some(TrialOutcome::Error),
            _ => None,
        }
    }
    fn show(&self, out: &mut String) {
        out.push_str(match self {
            TrialOutcome::Fit => "fit",
            TrialOutcome::Oom => "oom",
            TrialOutcome::Error => "error",
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing.

/// Parses every message of a datagram. Lines that are not messages are counted in the second
/// value (unknown verbs, or a known verb with a malformed required field).
pub fn parse_datagram(datagram: &str) -> (Vec<Message>, usize) {
    let mut messages = Vec::new();
    let mut rejected = 0;
    for line in datagram.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match parse_line(line) {
            Some(m) => messages.push(m),
            None => rejected += 1,
        }
    }
    (messages, rejected)
}

/// Parses one message line; `None` for an unknown verb or a malformed required field.
pub fn parse_line(line: &str) -> Option<Message> {
    let (verb, rest) = split_token(line);
    match verb {
        "step" => {
            let (step, rest) = split_token(rest);
            let mut context = Context::default();
            Fields::parse(rest).read(context_fields("step"), &mut context)?;
            Some(Message::Step {
                step: step.parse().ok()?,
                epoch: context.epoch,
            })
        }
        "phase" => Value::parse(split_token(rest).0).map(Message::Phase),
        "at" => {
            let (mono_us, rest) = split_token(rest);
            let mut reading = SenderReading {
                mono_us: mono_us.parse().ok()?,
                ..SenderReading::default()
            };
            Fields::parse(rest).read(&AT, &mut reading)?;
            Some(Message::At(reading))
        }
        "ring" => match split_token(rest) {
            (name, rest) if !name.is_empty() && rest.trim().is_empty() => {
                Some(Message::Ring(name.to_owned()))
            }
            _ => None,
        },
        "note" => Some(Message::record(Record::Note(Note {
            t_us: 0,
            text: rest.trim().to_owned(),
        }))),
        "oom" => {
            let (fields, message) = match rest.split_once(" -- ") {
                Some((fields, message)) => (fields, message.trim()),
                None => match rest.trim().strip_prefix("--") {
                    Some(message) => ("", message.trim()),
                    None => (rest, ""),
                },
            };
            let mut oom = OomEvent::new(0, OomSource::Marker, message.to_owned());
            let f = Fields::parse(fields);
            f.read(&OOM, &mut oom)?;
            with_context(verb, &f, Record::Oom(oom))
        }
        "alive" => {
            let (fields, file) = rest.split_once(" -- ")?;
            let mut site = AliveSite {
                file: file.trim().into(),
                ..AliveSite::default()
            };
            Fields::parse(fields).read(&ALIVE, &mut site)?;
            Some(Message::record(Record::Alive(site)))
        }
        "gc" => {
            let mut gc = GcCollection::default();
            Fields::parse(rest).read(&GC, &mut gc)?;
            Some(Message::record(Record::Gc(gc)))
        }
        "input" => {
            let f = Fields::parse(rest);
            let mut input = StepInput::default();
            f.read(&INPUT, &mut input)?;
            with_context(verb, &f, Record::Input(input))
        }
        "eval_autograd" => {
            let enabled = match split_token(rest) {
                ("on", rest) if rest.trim().is_empty() => true,
                ("off", rest) if rest.trim().is_empty() => false,
                _ => return None,
            };
            Some(Message::record(Record::EvalAutograd(EvalAutograd {
                enabled,
                ..EvalAutograd::default()
            })))
        }
        "memory_snapshot" => {
            // A file beside the trace: a bare name, never a path.
            let file = rest.trim().strip_prefix("--")?.trim();
            if file.is_empty() || file.contains(['/', '\\']) {
                return None;
            }
            Some(Message::record(Record::SavedSnapshot(SavedSnapshot {
                file: file.into(),
                ..SavedSnapshot::default()
            })))
        }
        // No fields (any that come are a newer sender's, ignored).
        "program_end" => Some(Message::record(Record::ProgramEnd(ProgramEnd::default()))),
        "sampling" => {
            let mut sampling = MarkSampling::default();
            Fields::parse(rest).read(&SAMPLING, &mut sampling)?;
            Some(Message::record(Record::MarkSampling(sampling)))
        }
        "held" => {
            let (fields, holder) = rest.split_once(" -- ").unwrap_or((rest, ""));
            let mut held = HeldTensors {
                holder: holder.trim().into(),
                ..HeldTensors::default()
            };
            Fields::parse(fields).read(&HELD, &mut held)?;
            Some(Message::record(Record::Held(held)))
        }
        "mark" => {
            let (name, rest) = name_token(rest)?;
            let f = Fields::parse(rest);
            let mut mark = StageMark {
                name,
                allocator: f.allocator(),
                ..StageMark::default()
            };
            f.read(&MARK, &mut mark)?;
            with_context(verb, &f, Record::Mark(mark))
        }
        "components" => {
            let f = Fields::parse(rest);
            let mut components = ComponentBreakdown {
                extras: f.extras(),
                optimizers: f.named("optimizer."),
                ..ComponentBreakdown::default()
            };
            f.read(&COMPONENTS, &mut components)?;
            with_context(verb, &f, Record::Components(components))
        }
        "gradients" => {
            let f = Fields::parse(rest);
            let mut gradients = GradientSummary {
                t_us: 0,
                step: 0,
                params_with_grad: 0,
                gradient_bytes: 0,
                global_norm: f64::NAN,
                nan_count: 0,
                inf_count: 0,
            };
            f.read(&GRADIENTS, &mut gradients)?;
            with_context(verb, &f, Record::Gradients(gradients))
        }
        "tensor" => {
            let (name, rest) = name_token(rest)?;
            let f = Fields::parse(rest);
            let mut tensor = TensorStats::unmeasured(name);
            f.read(&TENSOR, &mut tensor)?;
            with_context(verb, &f, Record::Tensor(tensor))
        }
        "process" => {
            let mut process = ProcessInfo::default();
            Fields::parse(rest).read(&PROCESS, &mut process)?;
            if process.rank.is_some() {
                process.role = ProcessRole::Rank;
                process.rank_from = RankSource::Message;
            }
            Some(Message::record(Record::Process(process)))
        }
        "trial" => {
            let mut trial = BatchTrial {
                t_us: 0,
                batch_size: 0,
                outcome: TrialOutcome::Error,
                peak_bytes: None,
            };
            Fields::parse(rest).read(&TRIAL, &mut trial)?;
            Some(Message::record(Record::Trial(trial)))
        }
        _ => None,
    }
}

/// The record with the context fields its verb takes.
fn with_context(verb: &str, fields: &Fields<'_>, record: Record) -> Option<Message> {
    let mut context = Context::default();
    fields.read(context_fields(verb), &mut context)?;
    Some(Message::Record(record, context))
}

fn context_fields(verb: &str) -> impl Iterator<Item = &'static Field<Context>> {
    let keys = context_keys(verb);
    CONTEXT.iter().filter(move |f| keys.contains(&f.key))
}

fn split_token(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(|c: char| c.is_ascii_whitespace()) {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    }
}

/// A positional name (a stage, a tensor): one token that is not a `key=value` field.
fn name_token(text: &str) -> Option<(Name, &str)> {
    let (name, rest) = split_token(text);
    (!name.is_empty() && !name.contains('=')).then(|| (name.into(), rest))
}

/// `key=value` fields of a message.
struct Fields<'a> {
    map: HashMap<&'a str, &'a str>,
    order: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(text: &'a str) -> Fields<'a> {
        let order: Vec<_> = text
            .split_ascii_whitespace()
            .filter_map(|token| token.split_once('='))
            .collect();
        Fields {
            map: order.iter().copied().collect(),
            order,
        }
    }

    /// Reads the fields of `table` into `record`; `None` when the line must be rejected.
    fn read<'t, R: 't>(
        &self,
        table: impl IntoIterator<Item = &'t Field<R>>,
        record: &mut R,
    ) -> Option<()> {
        for field in table {
            let well_read = match self.map.get(field.key) {
                None => field.need != Need::Required,
                Some(text) => (field.read)(record, text).is_some() || field.need == Need::Optional,
            };
            if !well_read {
                return None;
            }
        }
        Some(())
    }

    fn extras(&self) -> Vec<NamedBytes> {
        self.named("extra.")
    }

    /// The `<prefix><name>=N` fields, in order.
    fn named(&self, prefix: &str) -> Vec<NamedBytes> {
        self.order
            .iter()
            .filter_map(|(k, v)| {
                Some(NamedBytes {
                    name: k.strip_prefix(prefix)?.into(),
                    bytes: v.parse().ok()?,
                })
            })
            .collect()
    }

    /// The allocator's statistics: present when any of their fields is, the others read as 0.
    fn allocator(&self) -> Option<AllocatorStats> {
        let names = AllocatorStats::FIELD_NAMES;
        if !names.iter().any(|k| self.map.contains_key(k)) {
            return None;
        }
        Some(AllocatorStats::from_values(names.map(|k| {
            self.map.get(k).and_then(|v| v.parse().ok()).unwrap_or(0)
        })))
    }
}

// ---------------------------------------------------------------------------------------------
// Formatting.

/// Appends `message` as one protocol line (the inverse of [`parse_line`]). A record the
/// protocol does not carry (an exit, drop accounting) appends nothing.
pub fn format(out: &mut String, message: &Message) {
    match message {
        Message::Step { step, epoch } => {
            let _ = write!(out, "step {step}");
            show_field(out, "epoch", epoch);
        }
        Message::Phase(phase) => {
            out.push_str("phase ");
            phase.show(out);
        }
        Message::At(reading) => {
            let _ = write!(out, "at {}", reading.mono_us);
            show_all(out, &AT, reading);
        }
        Message::Ring(name) => {
            out.push_str("ring ");
            push_token(out, name);
        }
        Message::Record(record, context) => {
            let Some(verb) = verb_of(record) else {
                return;
            };
            out.push_str(verb);
            match record {
                Record::Mark(StageMark { name, .. }) | Record::Tensor(TensorStats { name, .. }) => {
                    out.push(' ');
                    push_token(out, name);
                }
                Record::Note(note) => {
                    out.push(' ');
                    push_text(out, &note.text);
                }
                _ => {}
            }
            for field in context_fields(verb) {
                (field.show)(context, out);
            }
            match record {
                Record::Mark(m) => {
                    show_all(out, &MARK, m);
                    if let Some(s) = &m.allocator {
                        for (name, value) in AllocatorStats::FIELD_NAMES.iter().zip(s.values()) {
                            show_field(out, name, &value);
                        }
                    }
                }
                Record::Components(c) => {
                    show_all(out, &COMPONENTS, c);
                    for (prefix, list) in [(" extra.", &c.extras), (" optimizer.", &c.optimizers)] {
                        for named in list {
                            out.push_str(prefix);
                            push_token(out, &named.name);
                            let _ = write!(out, "={}", named.bytes);
                        }
                    }
                }
                Record::Gradients(g) => show_all(out, &GRADIENTS, g),
                Record::Tensor(t) => show_all(out, &TENSOR, t),
                Record::Trial(t) => show_all(out, &TRIAL, t),
                Record::Oom(o) => {
                    show_all(out, &OOM, o);
                    out.push_str(" -- ");
                    push_text(out, &o.message);
                }
                Record::Alive(a) => {
                    show_all(out, &ALIVE, a);
                    out.push_str(" -- ");
                    push_text(out, &a.file);
                }
                Record::Gc(g) => show_all(out, &GC, g),
                Record::Input(i) => show_all(out, &INPUT, i),
                Record::Held(h) => {
                    show_all(out, &HELD, h);
                    if !h.holder.is_empty() {
                        out.push_str(" -- ");
                        push_text(out, &h.holder);
                    }
                }
                Record::EvalAutograd(e) => {
                    out.push_str(if e.enabled { " on" } else { " off" });
                }
                Record::SavedSnapshot(s) => {
                    out.push_str(" -- ");
                    push_text(out, &s.file);
                }
                Record::MarkSampling(m) => show_all(out, &SAMPLING, m),
                Record::Process(p) => show_all(out, &PROCESS, p),
                Record::ProgramEnd(_)
                | Record::Note(_)
                | Record::Exit(_)
                | Record::Dropped(_)
                | Record::OomKill(_)
                | Record::ProcessMemory(_)
                | Record::ProcessEnd(_) => {}
            }
        }
    }
    out.push('\n');
}

fn show_all<R>(out: &mut String, table: &[Field<R>], record: &R) {
    for field in table {
        (field.show)(record, out);
    }
}

/// A name as one token: whitespace would split it, so it becomes `_`.
fn push_token(out: &mut String, name: &str) {
    if name.is_empty() {
        out.push('_');
    }
    out.extend(
        name.chars()
            .map(|c| if c.is_whitespace() { '_' } else { c }),
    );
}

/// Free text on one line.
fn push_text(out: &mut String, text: &str) {
    out.extend(
        text.chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(name: &str) -> StageMark {
        StageMark {
            name: name.into(),
            ..StageMark::default()
        }
    }

    #[test]
    fn the_formatter_writes_exactly_the_declared_keys_of_every_verb() {
        let mut verbs = Vec::new();
        for message in every_verb_in_full() {
            let mut line = String::new();
            format(&mut line, &message);
            let (verb, written) = written_keys(&line);
            let mut declared = keys(verb);
            declared.sort_unstable();
            assert_eq!(written, declared, "{line}");
            verbs.push(verb.to_owned());
        }
        assert_eq!(verbs, VERBS);
    }

    #[test]
    fn no_key_is_declared_twice_for_a_verb() {
        for verb in VERBS {
            let mut keys = keys(verb);
            let all = keys.len();
            keys.sort_unstable();
            keys.dedup();
            assert_eq!(keys.len(), all, "{verb}");
        }
    }

    #[test]
    fn marks_parse_with_and_without_allocator_statistics() {
        let m = parse_line(
            "mark post_backward step=15 phase=train allocated_bytes=100 reserved_bytes=200",
        );
        let expected = StageMark {
            allocator: Some(AllocatorStats {
                allocated_bytes: 100,
                reserved_bytes: 200,
                ..AllocatorStats::default()
            }),
            ..mark("post_backward")
        };
        let context = Context {
            step: Some(15),
            phase: Some(Phase::Train),
            ..Context::default()
        };
        assert_eq!(m, Some(Message::Record(Record::Mark(expected), context)));
        assert_eq!(
            parse_line("mark pre_forward"),
            Some(Message::record(Record::Mark(mark("pre_forward"))))
        );
    }

    #[test]
    fn marks_name_their_sender() {
        let m = parse_line("mark post_forward step=2 pid=4101 rank=1");
        let Some(Message::Record(Record::Mark(m), _)) = m else {
            panic!("{m:?}");
        };
        assert_eq!((m.pid, m.rank), (Some(4101), Some(1)));
        // A malformed optional field is ignored, not the line.
        let m = parse_line("mark post_forward pid=abc");
        assert!(matches!(
            m,
            Some(Message::Record(
                Record::Mark(StageMark { pid: None, .. }),
                _
            ))
        ));
    }

    #[test]
    fn formatted_marks_parse_back() {
        let snapshot = AllocatorStats::from_values([1, 2, 3, 4, 5, 6, 7, 8]);
        let message = Message::Record(
            Record::Mark(StageMark {
                allocator: Some(snapshot),
                pid: Some(7),
                ..mark("my stage")
            }),
            Context {
                step: Some(9),
                phase: Some(Phase::Eval),
                ..Context::default()
            },
        );
        let mut line = String::new();
        format(&mut line, &message);
        let (messages, rejected) = parse_datagram(&line);
        assert_eq!(rejected, 0);
        let Message::Record(Record::Mark(m), context) = message else {
            unreachable!()
        };
        let renamed = Record::Mark(StageMark {
            name: "my_stage".into(),
            ..m
        });
        assert_eq!(messages, [Message::Record(renamed, context)]);
    }

    #[test]
    fn oom_messages_keep_their_text() {
        let m = parse_line(
            "oom stage=post_forward step=3 requested_bytes=2048 -- CUDA out of memory. Tried",
        );
        let Some(Message::Record(Record::Oom(oom), context)) = m else {
            panic!("{m:?}");
        };
        assert_eq!(oom.message, "CUDA out of memory. Tried");
        assert_eq!(oom.requested_bytes, Some(2048));
        assert_eq!(oom.source, OomSource::Marker);
        assert_eq!(context.stage.as_deref(), Some("post_forward"));
        assert_eq!(context.step, Some(3));
    }

    #[test]
    fn components_collect_extras_in_order() {
        let m = parse_line(
            "components parameters_bytes=10 gradients_bytes=10 extra.ema=10 extra.teacher=20 batch_size=4",
        );
        let Some(Message::Record(Record::Components(c), _)) = m else {
            panic!("{m:?}");
        };
        let extras: Vec<_> = c
            .extras
            .iter()
            .map(|e| (e.name.as_ref(), e.bytes))
            .collect();
        assert_eq!(extras, [("ema", 10), ("teacher", 20)]);
        assert_eq!(c.batch_size, Some(4));
    }

    #[test]
    fn inputs_parse_with_their_step_and_format_back() {
        let Some(Message::Record(Record::Input(i), context)) =
            parse_line("input elements=4096 shape=8x512 step=39")
        else {
            panic!("not an input");
        };
        assert_eq!((i.elements, i.shape.as_ref()), (4096, "8x512"));
        assert_eq!(context.step, Some(39));
        let mut line = String::new();
        format(&mut line, &Message::Record(Record::Input(i), context));
        assert_eq!(line, "input step=39 elements=4096 shape=8x512\n");
        assert!(
            parse_line("input shape=8x512").is_none(),
            "elements are required"
        );
    }

    #[test]
    fn unknown_and_malformed_lines_are_counted_not_fatal() {
        let (messages, rejected) = parse_datagram(
            "mark a\nfrobnicate 3\nstep x\nnote hello world\ntensor shape=2x2\ntrial outcome=fit\n\n",
        );
        assert_eq!(messages.len(), 2);
        assert_eq!(rejected, 4);
        let Message::Record(Record::Note(note), _) = &messages[1] else {
            panic!("{messages:?}");
        };
        assert_eq!(note.text, "hello world");
    }

    #[test]
    fn tensors_parse_shapes_and_refuse_bad_ones() {
        let m = parse_line(
            "tensor block3.out step=2 shape=4x512x1024 dtype=f32 bytes=8388608 min=-1 max=1 mean=0 std=0.5 nan_count=0 inf_count=1",
        );
        let Some(Message::Record(Record::Tensor(t), _)) = m else {
            panic!("{m:?}");
        };
        assert_eq!(t.shape, [4, 512, 1024]);
        assert_eq!(t.inf_count, 1);
        assert!(parse_line("tensor x shape=4xq").is_none());
        let Some(Message::Record(Record::Tensor(t), _)) = parse_line("tensor x") else {
            panic!()
        };
        assert!(t.shape.is_empty() && t.min.is_nan() && t.dtype.as_ref() == "?");
    }

    /// One message of every verb, in `VERBS` order, with every optional field given.
    fn every_verb_in_full() -> Vec<Message> {
        let step = |step| Context {
            step: Some(step),
            ..Context::default()
        };
        vec![
            Message::Record(
                Record::Mark(StageMark {
                    allocator: Some(AllocatorStats::from_values([1, 2, 3, 4, 5, 6, 7, 8])),
                    pid: Some(4101),
                    rank: Some(3),
                    ..mark("post_forward")
                }),
                Context {
                    step: Some(3),
                    epoch: Some(1),
                    phase: Some(Phase::Eval),
                    stage: None,
                },
            ),
            Message::Step {
                step: 12,
                epoch: Some(2),
            },
            Message::Phase(Phase::Train),
            Message::record(Record::Note(Note {
                t_us: 0,
                text: "loss spiked".into(),
            })),
            Message::Record(
                Record::Components(ComponentBreakdown {
                    batch_size: Some(32),
                    parameters_bytes: 10,
                    buffers_bytes: 1,
                    gradients_bytes: 10,
                    optimizer_state_bytes: 20,
                    parameter_count: Some(2),
                    trainable_parameter_count: Some(1),
                    extras: vec![NamedBytes {
                        name: "ema".into(),
                        bytes: 10,
                    }],
                    optimizers: vec![NamedBytes {
                        name: "opt:AdamW".into(),
                        bytes: 20,
                    }],
                    ..ComponentBreakdown::default()
                }),
                step(1),
            ),
            Message::Record(
                Record::Gradients(GradientSummary {
                    t_us: 0,
                    step: 0,
                    params_with_grad: 148,
                    gradient_bytes: 1 << 30,
                    global_norm: 0.123_456_789_012_345_6,
                    nan_count: 0,
                    inf_count: 2,
                }),
                step(4),
            ),
            Message::Record(
                Record::Tensor(TensorStats {
                    t_us: 0,
                    step: 0,
                    name: "block3.out".into(),
                    shape: vec![4, 64, 512],
                    dtype: "f32".into(),
                    bytes: 524_288,
                    min: -3.5,
                    max: 2.25,
                    mean: 1e-7,
                    std: 0.999_999_1,
                    nan_count: 1,
                    inf_count: 0,
                }),
                step(5),
            ),
            Message::record(Record::Trial(BatchTrial {
                t_us: 0,
                batch_size: 32,
                outcome: TrialOutcome::Fit,
                peak_bytes: Some(3 << 30),
            })),
            Message::Record(
                Record::Oom(OomEvent {
                    t_us: 0,
                    source: OomSource::Allocator,
                    stage: None,
                    step: None,
                    requested_bytes: Some(2048),
                    device: Some(0),
                    device_free_bytes: Some(1024),
                    device_total_bytes: Some(1 << 30),
                    message: "CUDA out of memory.\nTried".into(),
                    pid: Some(77),
                    rank: Some(2),
                    allocated_bytes: Some(700 << 20),
                    reserved_bytes: Some(900 << 20),
                }),
                Context {
                    stage: Some("post_forward".into()),
                    ..step(9)
                },
            ),
            Message::record(Record::Alive(AliveSite {
                t_us: 0,
                file: "/home/me/my project/train.py".into(),
                line: 42,
                function: "forward".into(),
                bytes: 3 << 30,
                count: 7,
            })),
            Message::record(Record::Gc(GcCollection {
                freed_bytes: 64 << 20,
                generation: 2,
                collected: 40,
                pause_us: 1200,
                ..GcCollection::default()
            })),
            Message::record(Record::Held(HeldTensors {
                kind: HeldKind::Tensors,
                from_step: 4,
                to_step: 12,
                device: "cpu".into(),
                dtype: "float32".into(),
                shape: "64x1024".into(),
                grad_fn: "AddmmBackward0".into(),
                count: 8,
                bytes: 2 << 20,
                holder: "list `val_losses`".into(),
                items: Some(12),
                ..HeldTensors::default()
            })),
            Message::Record(
                Record::Input(StepInput {
                    elements: 512,
                    shape: "8x64".into(),
                    ..StepInput::default()
                }),
                step(3),
            ),
            Message::record(Record::EvalAutograd(EvalAutograd {
                enabled: true,
                ..EvalAutograd::default()
            })),
            Message::record(Record::SavedSnapshot(SavedSnapshot {
                file: "run.oom-4242.pickle".into(),
                ..SavedSnapshot::default()
            })),
            Message::record(Record::MarkSampling(MarkSampling {
                every: 8,
                from_step: 100,
                iteration_us: 2500,
                last_step: Some(2999),
                ..MarkSampling::default()
            })),
            Message::record(Record::ProgramEnd(ProgramEnd::default())),
            Message::record(Record::Process(ProcessInfo {
                role: ProcessRole::Rank,
                rank_from: RankSource::Message,
                rank: Some(5),
                local_rank: Some(1),
                world_size: Some(8),
                restart: Some(0),
                group: Some("pp1".into()),
                ..ProcessInfo::default()
            })),
            Message::At(SenderReading {
                mono_us: 123_456_789,
                rss_bytes: Some(1 << 30),
                rss_file_bytes: Some(1 << 20),
            }),
            Message::Ring("ring-4242-17".into()),
        ]
    }

    #[test]
    fn every_message_formats_and_parses_back() {
        let mut messages = every_verb_in_full();
        messages.push(Message::record(Record::Trial(BatchTrial {
            t_us: 0,
            batch_size: 64,
            outcome: TrialOutcome::Oom,
            peak_bytes: None,
        })));
        for m in messages {
            let mut line = String::new();
            format(&mut line, &m);
            assert_eq!(line.matches('\n').count(), 1, "{line}");
            let parsed = parse_line(line.trim_end()).unwrap_or_else(|| panic!("{line}"));
            let expected = match m {
                Message::Record(Record::Oom(oom), context) => Message::Record(
                    Record::Oom(OomEvent {
                        message: oom.message.replace('\n', " "),
                        ..oom
                    }),
                    context,
                ),
                other => other,
            };
            assert_eq!(parsed, expected, "{line}");
        }
    }

    #[test]
    fn records_the_protocol_does_not_carry_format_to_nothing() {
        let mut line = String::new();
        format(
            &mut line,
            &Message::record(Record::Dropped(crate::model::Dropped {
                t_us: 0,
                record_tag: 4,
                count: 1,
            })),
        );
        assert!(line.is_empty());
    }
}

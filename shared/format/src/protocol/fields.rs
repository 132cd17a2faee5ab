//! Each verb's `key=value` fields, declared once in a table of [`Field`]s with how each reads
//! into and shows out of its record: the parser reads them, the formatter writes them, and
//! [`keys`] lists them for the tests that hold the Python helper and the docs to the same.

use std::fmt::Write;

use super::message::{Context, SenderReading};
use crate::model::{
    AliveSite, AllocatorStats, BatchTrial, ComponentBreakdown, GcCollection, GradientSummary,
    HeldClock, HeldKind, HeldTensors, MarkSampling, Name, OomEvent, OomSource, Phase, ProcessInfo,
    StageMark, StepInput, TensorStats, TrialOutcome,
};

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
pub(super) fn context_keys(verb: &str) -> &'static [&'static str] {
    match verb {
        "mark" => &["step", "epoch", "phase"],
        "step" => &["epoch"],
        "components" | "gradients" | "tensor" | "input" => &["step"],
        "oom" => &["stage", "step"],
        _ => &[],
    }
}

/// What a field's absence or a malformed value does to its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// Absent or malformed: the field is ignored (newer or sloppier senders still get through).
    Optional,
    /// Malformed: the line is rejected.
    WellFormed,
    /// Absent or malformed: the line is rejected.
    Required,
}

/// One `key=value` field of a record type.
pub(super) struct Field<R> {
    pub(super) key: &'static str,
    pub(super) need: Need,
    pub(super) read: fn(&mut R, &str) -> Option<()>,
    pub(super) show: fn(&R, &mut String),
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

pub(super) const CONTEXT: [Field<Context>; 4] = [
    field!("step", Optional, step),
    field!("epoch", Optional, epoch),
    field!("phase", Optional, phase),
    field!("stage", Optional, stage),
];

pub(super) const MARK: [Field<StageMark>; 2] =
    [field!("pid", Optional, pid), field!("rank", Optional, rank)];

pub(super) const COMPONENTS: [Field<ComponentBreakdown>; 7] = [
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

pub(super) const GRADIENTS: [Field<GradientSummary>; 5] = [
    field!("params_with_grad", Optional, params_with_grad),
    field!("gradient_bytes", Optional, gradient_bytes),
    field!("global_norm", Optional, global_norm),
    field!("nan_count", Optional, nan_count),
    field!("inf_count", Optional, inf_count),
];

pub(super) const TENSOR: [Field<TensorStats>; 9] = [
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

pub(super) const TRIAL: [Field<BatchTrial>; 3] = [
    field!("batch_size", Required, batch_size),
    field!("outcome", Required, outcome),
    field!("peak_bytes", Optional, peak_bytes),
];

pub(super) const OOM: [Field<OomEvent>; 9] = [
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

pub(super) const ALIVE: [Field<AliveSite>; 4] = [
    field!("bytes", Required, bytes),
    field!("count", Required, count),
    field!("line", Optional, line),
    field!("function", Optional, function),
];

pub(super) const HELD: [Field<HeldTensors>; 11] = [
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

pub(super) const GC: [Field<GcCollection>; 4] = [
    field!("freed_bytes", Required, freed_bytes),
    field!("generation", Optional, generation),
    field!("collected", Optional, collected),
    field!("pause_us", Optional, pause_us),
];

pub(super) const INPUT: [Field<StepInput>; 2] = [
    field!("elements", Required, elements),
    field!("shape", Optional, shape),
];

pub(super) const SAMPLING: [Field<MarkSampling>; 4] = [
    field!("every", Required, every),
    field!("from_step", Required, from_step),
    field!("iteration_us", Optional, iteration_us),
    field!("last_step", Optional, last_step),
];

pub(super) const PROCESS: [Field<ProcessInfo>; 5] = [
    field!("rank", Optional, rank),
    field!("local_rank", Optional, local_rank),
    field!("world_size", Optional, world_size),
    field!("restart", Optional, restart),
    field!("group", Optional, group),
];

pub(super) const AT: [Field<SenderReading>; 2] = [
    field!("rss_bytes", Optional, rss_bytes),
    field!("rss_file_bytes", Optional, rss_file_bytes),
];

/// How a field's value is written in a line and read back.
pub(super) trait Value: Sized {
    fn parse(text: &str) -> Option<Self>;
    /// Appends the value; [`Value::shown`] said there is one.
    fn show(&self, out: &mut String);
    /// Whether there is a value to write (an absent option is not written).
    fn shown(&self) -> bool {
        true
    }
}

pub(super) fn show_field<T: Value>(out: &mut String, key: &str, value: &T) {
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

/// The context fields `verb` takes, from [`CONTEXT`].
pub(super) fn context_fields(verb: &str) -> impl Iterator<Item = &'static Field<Context>> {
    let keys = context_keys(verb);
    CONTEXT.iter().filter(move |f| keys.contains(&f.key))
}

/// A name as one token: whitespace would split it, so it becomes `_`.
pub(super) fn push_token(out: &mut String, name: &str) {
    if name.is_empty() {
        out.push('_');
    }
    out.extend(
        name.chars()
            .map(|c| if c.is_whitespace() { '_' } else { c }),
    );
}

/// Free text on one line.
pub(super) fn push_text(out: &mut String, text: &str) {
    out.extend(
        text.chars()
            .map(|c| if c == '\n' || c == '\r' { ' ' } else { c }),
    );
}

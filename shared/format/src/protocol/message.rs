//! A parsed message ([`Message`]): a record with what its sender left to the collector
//! ([`Context`]), or a control verb; and the verb each record kind travels as.

use crate::model::{Name, Phase, Record};

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
        | Record::ProcessEnd(_)
        | Record::Attach(_) => {
            return None;
        }
    })
}

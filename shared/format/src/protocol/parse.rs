//! Reading protocol lines into [`Message`]s: each verb's fixed parts, then its fields by their
//! table (`fields.rs`); a line that is not a message is rejected, never guessed at.

use std::collections::HashMap;

use super::fields::*;
use super::message::{Context, Message, SenderReading};
use crate::model::{
    AliveSite, AllocatorStats, BatchTrial, ComponentBreakdown, EvalAutograd, GcCollection,
    GradientSummary, HeldTensors, MarkSampling, Name, NamedBytes, Note, OomEvent, OomSource,
    ProcessInfo, ProcessRole, ProgramEnd, RankSource, Record, SavedSnapshot, StageMark, StepInput,
    TensorStats, TrialOutcome,
};

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
        "step" | "phase" | "at" | "ring" => control(verb, rest),
        "note" | "oom" | "alive" | "held" | "eval_autograd" | "memory_snapshot" | "program_end" => {
            with_text(verb, rest)
        }
        _ => with_fields(verb, rest),
    }
}

/// A control verb: it changes what the records after it are about, and is no record itself.
fn control(verb: &str, rest: &str) -> Option<Message> {
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
        _ => None,
    }
}

/// A record with a text part or none: a note, an OOM's message, an alive site's file, a
/// holder's name, a snapshot's file, or a word.
fn with_text(verb: &str, rest: &str) -> Option<Message> {
    match verb {
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
        "held" => {
            let (fields, holder) = rest.split_once(" -- ").unwrap_or((rest, ""));
            let mut held = HeldTensors {
                holder: holder.trim().into(),
                ..HeldTensors::default()
            };
            Fields::parse(fields).read(&HELD, &mut held)?;
            Some(Message::record(Record::Held(held)))
        }
        _ => None,
    }
}

/// A record of `key=value` fields only (after a name, for a mark or a tensor).
fn with_fields(verb: &str, rest: &str) -> Option<Message> {
    match verb {
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
        "sampling" => {
            let mut sampling = MarkSampling::default();
            Fields::parse(rest).read(&SAMPLING, &mut sampling)?;
            Some(Message::record(Record::MarkSampling(sampling)))
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

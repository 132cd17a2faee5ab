//! Writing a [`Message`] as one protocol line: the inverse of `parse.rs`, from the same field
//! tables.

use std::fmt::Write;

use super::fields::*;
use super::message::{Message, verb_of};
use crate::model::{AllocatorStats, Record, StageMark, TensorStats};

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
                | Record::ProcessEnd(_)
                | Record::Attach(_) => {}
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

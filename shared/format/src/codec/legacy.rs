//! What writers before format v1.11 said in words, read into the fields that say it now, so
//! that nothing after the reader decides from English: the zero-code hooks' notes on evals'
//! autograd and on a saved memory snapshot become [`EvalAutograd`] and [`SavedSnapshot`]
//! records, and a HELD row's kind and its holder's item count come out of its shape and holder
//! (`graph`, `a reference cycle through …`, `no Python container …`, `… (12 items)`). Only files
//! older than v1.11 are touched; the words are the exact ones those hooks wrote.

use crate::model::{EvalAutograd, HeldClock, HeldKind, HeldTensors, SavedSnapshot, Trace};

/// The hooks' note on an eval forward with autograd on (v1.9–v1.10).
const EVAL_AUTOGRAD_ON_NOTE: &str = "eval forwards run with autograd on";
/// ... and without it.
const EVAL_AUTOGRAD_OFF_NOTE: &str = "eval forwards run without autograd";
/// The hooks' note naming the memory snapshot saved at an OOM (v1.3–v1.10), then the file name.
const SAVED_SNAPSHOT_NOTE: &str = "memory snapshot at the OOM: ";
/// How a HELD row about one tensor's autograd graph said so (v1.9–v1.10).
const GRAPH_SHAPE: &str = "graph";
/// How a holder only a reference cycle keeps began.
const CYCLE_HOLDER: &str = "a reference cycle through ";
/// How a holder of tensors no Python container held began.
const UNCONTAINED_HOLDER: &str = "no Python container";

/// Reads an older trace's words into fields (a v1.13 trace is left as it is).
pub(super) fn upgrade(trace: &mut Trace) {
    if trace.format_version < (1, 13) {
        for held in &mut trace.held {
            epoch_clock(held);
        }
    }
    if trace.format_version >= (1, 11) {
        return;
    }
    let notes = std::mem::take(&mut trace.notes);
    for note in notes {
        let text = note.text.as_str();
        if text == EVAL_AUTOGRAD_ON_NOTE || text == EVAL_AUTOGRAD_OFF_NOTE {
            trace.eval_autograd.push(EvalAutograd {
                t_us: note.t_us,
                enabled: text == EVAL_AUTOGRAD_ON_NOTE,
                pid: None,
            });
        } else if let Some(file) = text
            .strip_prefix(SAVED_SNAPSHOT_NOTE)
            .map(str::trim)
            .filter(|f| !f.is_empty() && !f.contains(['/', '\\']))
        {
            trace.saved_snapshots.push(SavedSnapshot {
                t_us: note.t_us,
                file: file.into(),
                pid: None,
            });
        } else {
            trace.notes.push(note);
        }
    }
    for held in &mut trace.held {
        upgrade_held(held);
    }
}

/// A v1.12 `objects` row counted at two epoch starts said so only by gaining less than an item
/// a step (the leak watch's rows gain at least one): its clock, since v1.13 a field.
fn epoch_clock(h: &mut HeldTensors) {
    if h.kind == HeldKind::Objects && h.count < h.steps() {
        h.clock = HeldClock::Epoch;
    }
}

fn upgrade_held(h: &mut HeldTensors) {
    if &*h.shape == GRAPH_SHAPE {
        h.kind = HeldKind::Graph;
        return;
    }
    if let Some(object) = h.holder.strip_prefix(CYCLE_HOLDER) {
        h.kind = HeldKind::Cycle;
        h.holder = object.into();
    } else if h.holder.starts_with(UNCONTAINED_HOLDER) {
        h.kind = HeldKind::Uncontained;
        h.holder = "".into();
        return;
    }
    // `list \`losses\` (96 items)`: the count as a field, the holder without it.
    if let Some((name, rest)) = h.holder.rsplit_once(" (")
        && let Some(items) = rest.strip_suffix(" items)").and_then(|n| n.parse().ok())
    {
        h.items = Some(items);
        h.holder = name.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Note;

    fn held(shape: &str, holder: &str) -> HeldTensors {
        HeldTensors {
            shape: shape.into(),
            holder: holder.into(),
            ..HeldTensors::default()
        }
    }

    #[test]
    fn an_older_traces_words_become_fields_and_a_newer_one_is_left_alone() {
        let mut t = Trace {
            format_version: (1, 10),
            notes: [
                EVAL_AUTOGRAD_OFF_NOTE,
                "memory snapshot at the OOM: run.oom-42.pickle",
                "memory snapshot at the OOM: ../elsewhere.pickle",
                "a note of the program's",
            ]
            .map(|text| Note {
                t_us: 7,
                text: text.into(),
            })
            .into(),
            held: vec![
                held("graph", "total"),
                held(
                    "1024",
                    "a reference cycle through a `Step` object (attribute `x`)",
                ),
                held(
                    "64x64",
                    "no Python container (held from C++, such as an autograd graph's saved tensors)",
                ),
                held("scalar", "list `val_losses` (12 items)"),
                held("scalar", "attribute `buf` of a `Cache` object"),
            ],
            ..Trace::default()
        };
        let mut newer = t.clone();
        newer.format_version = (1, 11);
        let untouched = newer.clone();
        upgrade(&mut newer);
        assert_eq!(newer, untouched);

        upgrade(&mut t);
        assert_eq!(t.eval_autograd.len(), 1);
        assert!(!t.eval_autograd[0].enabled);
        assert_eq!(t.saved_snapshots.len(), 1);
        assert_eq!(&*t.saved_snapshots[0].file, "run.oom-42.pickle");
        // A name with a directory is not a snapshot beside the trace: the note stays a note.
        let notes: Vec<&str> = t.notes.iter().map(|n| n.text.as_str()).collect();
        assert_eq!(
            notes,
            [
                "memory snapshot at the OOM: ../elsewhere.pickle",
                "a note of the program's"
            ]
        );
        let rows: Vec<(HeldKind, &str, Option<u64>)> = t
            .held
            .iter()
            .map(|h| (h.kind, &*h.holder, h.items))
            .collect();
        assert_eq!(
            rows,
            [
                (HeldKind::Graph, "total", None),
                (HeldKind::Cycle, "a `Step` object (attribute `x`)", None),
                (HeldKind::Uncontained, "", None),
                (HeldKind::Tensors, "list `val_losses`", Some(12)),
                (
                    HeldKind::Tensors,
                    "attribute `buf` of a `Cache` object",
                    None
                ),
            ]
        );
    }

    #[test]
    fn a_v1_12_objects_row_counted_at_epoch_starts_is_on_the_epochs_clock() {
        let row = |count, to_step| HeldTensors {
            kind: HeldKind::Objects,
            from_step: 30,
            to_step,
            count,
            ..HeldTensors::default()
        };
        let mut t = Trace {
            format_version: (1, 12),
            // One item over 30 steps (an epoch's end); 40 items over 8 steps (the leak watch's).
            held: vec![row(1, 60), row(40, 38)],
            ..Trace::default()
        };
        let mut newer = t.clone();
        newer.format_version = (1, 13);
        let untouched = newer.clone();
        upgrade(&mut newer);
        assert_eq!(newer, untouched);
        upgrade(&mut t);
        let clocks: Vec<HeldClock> = t.held.iter().map(|h| h.clock).collect();
        assert_eq!(clocks, [HeldClock::Epoch, HeldClock::Step]);
    }
}

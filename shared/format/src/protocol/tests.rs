//! The protocol's tests: every verb parsed and formatted, in full and in part.

use super::*;
use crate::model::*;

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
    let m =
        parse_line("mark post_backward step=15 phase=train allocated_bytes=100 reserved_bytes=200");
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
    let mut all = the_first_verbs_in_full();
    all.extend(the_later_verbs_in_full());
    all
}

/// The verbs up to `oom` in `VERBS` order, in full.
fn the_first_verbs_in_full() -> Vec<Message> {
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
    ]
}

/// The verbs after `oom` in `VERBS` order, in full (see [`every_verb_in_full`]).
fn the_later_verbs_in_full() -> Vec<Message> {
    let step = |step| Context {
        step: Some(step),
        ..Context::default()
    };
    vec![
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
        &Message::record(Record::Dropped(Dropped {
            t_us: 0,
            record_tag: 4,
            count: 1,
        })),
    );
    assert!(line.is_empty());
}

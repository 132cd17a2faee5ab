//! The marker protocol: how a watched program tells `collector run` where it is.
//!
//! It lives in `shared` because it is pure text and every layer speaks it: the collector parses
//! it, the tch `Session` and the Rust `Probe` format it, the Python helper writes it, and tests
//! check all of them against [`VERB_KEYS`], the one list of each verb's `key=value` fields.
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
//! mark <stage> [step=N] [epoch=N] [phase=train|eval] [allocated_bytes=N reserved_bytes=N
//!      active_bytes=N inactive_split_bytes=N peak_allocated_bytes=N peak_reserved_bytes=N
//!      num_alloc_retries=N num_ooms=N]
//! step <N> [epoch=N]
//! phase <train|eval>
//! note <free text>
//! components [step=N] [batch_size=N] parameters_bytes=N buffers_bytes=N gradients_bytes=N
//!      optimizer_state_bytes=N [extra.<name>=N ...]
//! gradients [step=N] params_with_grad=N gradient_bytes=N global_norm=F nan_count=N inf_count=N
//! tensor <name> [step=N] shape=AxBxC dtype=<dtype> bytes=N min=F max=F mean=F std=F
//!      nan_count=N inf_count=N
//! trial batch_size=N outcome=fit|oom|error [peak_bytes=N]
//! oom [stage=<stage>] [step=N] [requested_bytes=N] [device=N] [free_bytes=N] [total_bytes=N]
//!      [-- <message>]
//! ```
//!
//! Rules: tokens are separated by ASCII whitespace; stage and tensor names are single tokens;
//! unknown verbs and unknown `key=value` fields are ignored (so newer clients work with older
//! collectors); a mark without the allocator fields carries no snapshot, and a mark with only
//! some of them is taken with the others as 0. A mark without `step=` keeps the last step the
//! program announced.

use std::collections::HashMap;

use crate::model::{AllocatorSnapshot, Phase, TrialOutcome};

/// The protocol version this collector speaks (exported as `OOMSCOPE_PROTOCOL`).
pub const PROTOCOL_VERSION: u32 = 1;
/// The environment variable holding the socket path.
pub const SOCKET_ENV: &str = "OOMSCOPE_SOCKET";
/// The environment variable holding the protocol version.
pub const PROTOCOL_ENV: &str = "OOMSCOPE_PROTOCOL";
/// Largest datagram the collector reads; longer ones are truncated by the kernel.
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;

/// Every verb of the protocol, in the order the grammar lists them.
pub const VERBS: [&str; 9] = [
    "mark",
    "step",
    "phase",
    "note",
    "components",
    "gradients",
    "tensor",
    "trial",
    "oom",
];

/// The `key=value` fields a verb takes: the one declaration the parser reads by (it can read no
/// other key), and that the Rust formatter, the Python helper, the README's grammar and this
/// module's grammar are checked against by tests. `components` also takes `extra.<name>=N`.
pub fn keys(verb: &str) -> Vec<&'static str> {
    match verb {
        "mark" => [
            ["step", "epoch", "phase"].as_slice(),
            &AllocatorSnapshot::FIELD_NAMES,
        ]
        .concat(),
        "step" => vec!["epoch"],
        "components" => vec![
            "step",
            "batch_size",
            "parameters_bytes",
            "buffers_bytes",
            "gradients_bytes",
            "optimizer_state_bytes",
        ],
        "gradients" => vec![
            "step",
            "params_with_grad",
            "gradient_bytes",
            "global_norm",
            "nan_count",
            "inf_count",
        ],
        "tensor" => vec![
            "step",
            "shape",
            "dtype",
            "bytes",
            "min",
            "max",
            "mean",
            "std",
            "nan_count",
            "inf_count",
        ],
        "trial" => vec!["batch_size", "outcome", "peak_bytes"],
        "oom" => vec![
            "stage",
            "step",
            "requested_bytes",
            "device",
            "free_bytes",
            "total_bytes",
        ],
        _ => Vec::new(),
    }
}

/// The verb of a formatted line and the `key=` fields it writes, sorted (`extra.<name>` of
/// `components` and the free text after ` -- ` left out): what tests compare with [`keys`].
pub fn written_keys(line: &str) -> (&str, Vec<&str>) {
    let fields = line.split(" -- ").next().unwrap_or_default();
    let verb = fields.split_whitespace().next().unwrap_or_default();
    let mut written: Vec<&str> = fields
        .split_whitespace()
        .filter_map(|t| t.split_once('=').map(|(k, _)| k))
        .filter(|k| !k.starts_with("extra."))
        .collect();
    written.sort_unstable();
    (verb, written)
}

/// One parsed message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A stage mark.
    Mark {
        /// Stage name.
        stage: String,
        /// Step, when given.
        step: Option<u64>,
        /// Epoch, when given.
        epoch: Option<u32>,
        /// Phase, when given.
        phase: Option<Phase>,
        /// Allocator statistics, when any field was given.
        snapshot: Option<AllocatorSnapshot>,
    },
    /// The current step (and epoch).
    Step {
        /// Step.
        step: u64,
        /// Epoch, when given.
        epoch: Option<u32>,
    },
    /// The current phase.
    Phase(Phase),
    /// Free text.
    Note(String),
    /// Model memory by component.
    Components {
        /// Step, when given.
        step: Option<u64>,
        /// Batch size, when given.
        batch_size: Option<u64>,
        /// Parameters, buffers, gradients, optimizer state (bytes).
        parameters_bytes: u64,
        /// Buffers.
        buffers_bytes: u64,
        /// Gradients.
        gradients_bytes: u64,
        /// Optimizer state.
        optimizer_state_bytes: u64,
        /// Named extra copies.
        extras: Vec<(String, u64)>,
    },
    /// A gradient summary.
    Gradients {
        /// Step, when given.
        step: Option<u64>,
        /// Parameters with a gradient.
        params_with_grad: u64,
        /// Bytes of gradients.
        gradient_bytes: u64,
        /// Global L2 norm.
        global_norm: f64,
        /// NaN elements.
        nan_count: u64,
        /// Infinite elements.
        inf_count: u64,
    },
    /// Statistics of one tensor.
    Tensor {
        /// Name.
        name: String,
        /// Step, when given.
        step: Option<u64>,
        /// Shape.
        shape: Vec<u64>,
        /// Element type.
        dtype: String,
        /// Bytes.
        bytes: u64,
        /// Minimum, maximum, mean, standard deviation.
        min: f64,
        /// Maximum.
        max: f64,
        /// Mean.
        mean: f64,
        /// Standard deviation.
        std: f64,
        /// NaN elements.
        nan_count: u64,
        /// Infinite elements.
        inf_count: u64,
    },
    /// A batch-size trial.
    Trial {
        /// Batch size.
        batch_size: u64,
        /// Outcome.
        outcome: TrialOutcome,
        /// Peak bytes, when it fit.
        peak_bytes: Option<u64>,
    },
    /// An out-of-memory error the program caught.
    Oom {
        /// Stage, when given.
        stage: Option<String>,
        /// Step, when given.
        step: Option<u64>,
        /// Requested bytes.
        requested_bytes: Option<u64>,
        /// Device.
        device: Option<u32>,
        /// Free device bytes.
        free_bytes: Option<u64>,
        /// Total device bytes.
        total_bytes: Option<u64>,
        /// The error text.
        message: String,
    },
}

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
        "mark" => {
            let (stage, rest) = split_token(rest);
            if stage.is_empty() || stage.contains('=') {
                return None;
            }
            let f = Fields::parse("mark", rest);
            Some(Message::Mark {
                stage: stage.to_owned(),
                step: f.u64("step"),
                epoch: f.u32("epoch"),
                phase: f.phase(),
                snapshot: f.snapshot(),
            })
        }
        "step" => {
            let (step, rest) = split_token(rest);
            let f = Fields::parse("step", rest);
            Some(Message::Step {
                step: step.parse().ok()?,
                epoch: f.u32("epoch"),
            })
        }
        "phase" => parse_phase(split_token(rest).0).map(Message::Phase),
        "note" => Some(Message::Note(rest.trim().to_owned())),
        "components" => {
            let f = Fields::parse("components", rest);
            Some(Message::Components {
                step: f.u64("step"),
                batch_size: f.u64("batch_size"),
                parameters_bytes: f.u64("parameters_bytes").unwrap_or(0),
                buffers_bytes: f.u64("buffers_bytes").unwrap_or(0),
                gradients_bytes: f.u64("gradients_bytes").unwrap_or(0),
                optimizer_state_bytes: f.u64("optimizer_state_bytes").unwrap_or(0),
                extras: f.extras(),
            })
        }
        "gradients" => {
            let f = Fields::parse("gradients", rest);
            Some(Message::Gradients {
                step: f.u64("step"),
                params_with_grad: f.u64("params_with_grad").unwrap_or(0),
                gradient_bytes: f.u64("gradient_bytes").unwrap_or(0),
                global_norm: f.f64("global_norm").unwrap_or(f64::NAN),
                nan_count: f.u64("nan_count").unwrap_or(0),
                inf_count: f.u64("inf_count").unwrap_or(0),
            })
        }
        "tensor" => {
            let (name, rest) = split_token(rest);
            if name.is_empty() || name.contains('=') {
                return None;
            }
            let f = Fields::parse("tensor", rest);
            let shape = match f.get("shape") {
                None | Some("") => Vec::new(),
                Some(s) => s
                    .split('x')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .ok()?,
            };
            Some(Message::Tensor {
                name: name.to_owned(),
                step: f.u64("step"),
                shape,
                dtype: f.get("dtype").unwrap_or("?").to_owned(),
                bytes: f.u64("bytes").unwrap_or(0),
                min: f.f64("min").unwrap_or(f64::NAN),
                max: f.f64("max").unwrap_or(f64::NAN),
                mean: f.f64("mean").unwrap_or(f64::NAN),
                std: f.f64("std").unwrap_or(f64::NAN),
                nan_count: f.u64("nan_count").unwrap_or(0),
                inf_count: f.u64("inf_count").unwrap_or(0),
            })
        }
        "trial" => {
            let f = Fields::parse("trial", rest);
            let outcome = match f.get("outcome")? {
                "fit" => TrialOutcome::Fit,
                "oom" => TrialOutcome::Oom,
                "error" => TrialOutcome::Error,
                _ => return None,
            };
            Some(Message::Trial {
                batch_size: f.u64("batch_size")?,
                outcome,
                peak_bytes: f.u64("peak_bytes"),
            })
        }
        "oom" => {
            let (fields, message) = match rest.split_once(" -- ") {
                Some((fields, message)) => (fields, message.trim()),
                None => match rest.trim().strip_prefix("--") {
                    Some(message) => ("", message.trim()),
                    None => (rest, ""),
                },
            };
            let f = Fields::parse("oom", fields);
            Some(Message::Oom {
                stage: f.get("stage").map(str::to_owned),
                step: f.u64("step"),
                requested_bytes: f.u64("requested_bytes"),
                device: f.u32("device"),
                free_bytes: f.u64("free_bytes"),
                total_bytes: f.u64("total_bytes"),
                message: message.to_owned(),
            })
        }
        _ => None,
    }
}

fn split_token(text: &str) -> (&str, &str) {
    let text = text.trim_start();
    match text.find(|c: char| c.is_ascii_whitespace()) {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    }
}

fn parse_phase(text: &str) -> Option<Phase> {
    match text {
        "train" => Some(Phase::Train),
        "eval" => Some(Phase::Eval),
        _ => None,
    }
}

/// `key=value` fields of a message.
struct Fields<'a> {
    verb: &'static str,
    map: HashMap<&'a str, &'a str>,
    order: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn parse(verb: &'static str, text: &'a str) -> Fields<'a> {
        let order: Vec<_> = text
            .split_ascii_whitespace()
            .filter_map(|token| token.split_once('='))
            .collect();
        Fields {
            verb,
            map: order.iter().copied().collect(),
            order,
        }
    }

    fn get(&self, key: &str) -> Option<&'a str> {
        debug_assert!(
            keys(self.verb).contains(&key),
            "`{key}` is not declared for `{}` in protocol::keys",
            self.verb
        );
        self.map.get(key).copied()
    }

    fn u64(&self, key: &str) -> Option<u64> {
        self.get(key)?.parse().ok()
    }

    fn u32(&self, key: &str) -> Option<u32> {
        self.get(key)?.parse().ok()
    }

    fn f64(&self, key: &str) -> Option<f64> {
        self.get(key)?.parse().ok()
    }

    fn phase(&self) -> Option<Phase> {
        parse_phase(self.get("phase")?)
    }

    fn extras(&self) -> Vec<(String, u64)> {
        self.order
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("extra.")?.to_owned(), v.parse().ok()?)))
            .collect()
    }

    fn snapshot(&self) -> Option<AllocatorSnapshot> {
        let names = AllocatorSnapshot::FIELD_NAMES;
        if !names.iter().any(|k| self.get(k).is_some()) {
            return None;
        }
        Some(AllocatorSnapshot::from_values(
            names.map(|k| self.u64(k).unwrap_or(0)),
        ))
    }
}

/// Appends a mark message to `out` (the inverse of [`parse_line`] for marks).
pub fn format_mark(
    out: &mut String,
    stage: &str,
    step: Option<u64>,
    phase: Option<Phase>,
    snapshot: Option<&AllocatorSnapshot>,
) {
    format(
        out,
        &Message::Mark {
            stage: stage.to_owned(),
            step,
            epoch: None,
            phase,
            snapshot: snapshot.copied(),
        },
    );
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

/// Appends `message` as one protocol line (the inverse of [`parse_line`]).
pub fn format(out: &mut String, message: &Message) {
    use std::fmt::Write;
    let opt = |out: &mut String, key: &str, value: Option<u64>| {
        if let Some(v) = value {
            let _ = write!(out, " {key}={v}");
        }
    };
    match message {
        Message::Mark {
            stage,
            step,
            epoch,
            phase,
            snapshot,
        } => {
            out.push_str("mark ");
            push_token(out, stage);
            opt(out, "step", *step);
            opt(out, "epoch", epoch.map(u64::from));
            if let Some(phase) = phase.filter(|p| *p != Phase::Unknown) {
                let _ = write!(out, " phase={}", phase.label());
            }
            if let Some(s) = snapshot {
                for (name, value) in AllocatorSnapshot::FIELD_NAMES.iter().zip(s.values()) {
                    let _ = write!(out, " {name}={value}");
                }
            }
        }
        Message::Step { step, epoch } => {
            let _ = write!(out, "step {step}");
            opt(out, "epoch", epoch.map(u64::from));
        }
        Message::Phase(phase) => {
            let _ = write!(out, "phase {}", phase.label());
        }
        Message::Note(text) => {
            out.push_str("note ");
            push_text(out, text);
        }
        Message::Components {
            step,
            batch_size,
            parameters_bytes,
            buffers_bytes,
            gradients_bytes,
            optimizer_state_bytes,
            extras,
        } => {
            let _ = write!(
                out,
                "components parameters_bytes={parameters_bytes} buffers_bytes={buffers_bytes} gradients_bytes={gradients_bytes} optimizer_state_bytes={optimizer_state_bytes}"
            );
            opt(out, "step", *step);
            opt(out, "batch_size", *batch_size);
            for (name, bytes) in extras {
                out.push_str(" extra.");
                push_token(out, name);
                let _ = write!(out, "={bytes}");
            }
        }
        Message::Gradients {
            step,
            params_with_grad,
            gradient_bytes,
            global_norm,
            nan_count,
            inf_count,
        } => {
            let _ = write!(
                out,
                "gradients params_with_grad={params_with_grad} gradient_bytes={gradient_bytes} global_norm={global_norm} nan_count={nan_count} inf_count={inf_count}"
            );
            opt(out, "step", *step);
        }
        Message::Tensor {
            name,
            step,
            shape,
            dtype,
            bytes,
            min,
            max,
            mean,
            std,
            nan_count,
            inf_count,
        } => {
            out.push_str("tensor ");
            push_token(out, name);
            opt(out, "step", *step);
            let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
            let _ = write!(out, " shape={} dtype=", shape.join("x"));
            push_token(out, dtype);
            let _ = write!(
                out,
                " bytes={bytes} min={min} max={max} mean={mean} std={std} nan_count={nan_count} inf_count={inf_count}"
            );
        }
        Message::Trial {
            batch_size,
            outcome,
            peak_bytes,
        } => {
            let outcome = match outcome {
                TrialOutcome::Fit => "fit",
                TrialOutcome::Oom => "oom",
                TrialOutcome::Error => "error",
            };
            let _ = write!(out, "trial batch_size={batch_size} outcome={outcome}");
            opt(out, "peak_bytes", *peak_bytes);
        }
        Message::Oom {
            stage,
            step,
            requested_bytes,
            device,
            free_bytes,
            total_bytes,
            message,
        } => {
            out.push_str("oom");
            if let Some(stage) = stage {
                out.push_str(" stage=");
                push_token(out, stage);
            }
            opt(out, "step", *step);
            opt(out, "requested_bytes", *requested_bytes);
            opt(out, "device", device.map(u64::from));
            opt(out, "free_bytes", *free_bytes);
            opt(out, "total_bytes", *total_bytes);
            out.push_str(" -- ");
            push_text(out, message);
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn marks_parse_with_and_without_snapshots() {
        let m = parse_line(
            "mark post_backward step=15 phase=train allocated_bytes=100 reserved_bytes=200",
        );
        assert_eq!(
            m,
            Some(Message::Mark {
                stage: "post_backward".into(),
                step: Some(15),
                epoch: None,
                phase: Some(Phase::Train),
                snapshot: Some(AllocatorSnapshot {
                    allocated_bytes: 100,
                    reserved_bytes: 200,
                    ..AllocatorSnapshot::default()
                }),
            })
        );
        let plain = parse_line("mark pre_forward");
        assert!(matches!(
            plain,
            Some(Message::Mark {
                snapshot: None,
                step: None,
                ..
            })
        ));
    }

    #[test]
    fn formatted_marks_parse_back() {
        let snapshot = AllocatorSnapshot {
            allocated_bytes: 1,
            reserved_bytes: 2,
            active_bytes: 3,
            inactive_split_bytes: 4,
            peak_allocated_bytes: 5,
            peak_reserved_bytes: 6,
            num_alloc_retries: 7,
            num_ooms: 8,
        };
        let mut line = String::new();
        format_mark(
            &mut line,
            "my stage",
            Some(9),
            Some(Phase::Eval),
            Some(&snapshot),
        );
        let (messages, rejected) = parse_datagram(&line);
        assert_eq!(rejected, 0);
        assert_eq!(
            messages,
            [Message::Mark {
                stage: "my_stage".into(),
                step: Some(9),
                epoch: None,
                phase: Some(Phase::Eval),
                snapshot: Some(snapshot),
            }]
        );
    }

    #[test]
    fn oom_messages_keep_their_text() {
        let m = parse_line(
            "oom stage=post_forward step=3 requested_bytes=2048 -- CUDA out of memory. Tried",
        );
        assert_eq!(
            m,
            Some(Message::Oom {
                stage: Some("post_forward".into()),
                step: Some(3),
                requested_bytes: Some(2048),
                device: None,
                free_bytes: None,
                total_bytes: None,
                message: "CUDA out of memory. Tried".into(),
            })
        );
    }

    #[test]
    fn components_collect_extras_in_order() {
        let m = parse_line(
            "components parameters_bytes=10 gradients_bytes=10 extra.ema=10 extra.teacher=20 batch_size=4",
        );
        let Some(Message::Components {
            extras, batch_size, ..
        }) = m
        else {
            panic!("{m:?}");
        };
        assert_eq!(extras, [("ema".to_owned(), 10), ("teacher".to_owned(), 20)]);
        assert_eq!(batch_size, Some(4));
    }

    #[test]
    fn unknown_and_malformed_lines_are_counted_not_fatal() {
        let (messages, rejected) =
            parse_datagram("mark a\nfrobnicate 3\nstep x\nnote hello world\ntensor shape=2x2\n\n");
        assert_eq!(messages.len(), 2);
        assert_eq!(rejected, 3);
        assert_eq!(messages[1], Message::Note("hello world".into()));
    }

    #[test]
    fn tensors_parse_shapes() {
        let m = parse_line(
            "tensor block3.out step=2 shape=4x512x1024 dtype=f32 bytes=8388608 min=-1 max=1 mean=0 std=0.5 nan_count=0 inf_count=1",
        );
        let Some(Message::Tensor {
            shape, inf_count, ..
        }) = m
        else {
            panic!("{m:?}");
        };
        assert_eq!(shape, [4, 512, 1024]);
        assert_eq!(inf_count, 1);
    }

    /// One message of every verb, in `VERBS` order, with every optional field given.
    fn every_verb_in_full() -> Vec<Message> {
        vec![
            Message::Mark {
                stage: "post_forward".into(),
                step: Some(3),
                epoch: Some(1),
                phase: Some(Phase::Eval),
                snapshot: Some(AllocatorSnapshot::from_values([1, 2, 3, 4, 5, 6, 7, 8])),
            },
            Message::Step {
                step: 12,
                epoch: Some(2),
            },
            Message::Phase(Phase::Train),
            Message::Note("loss spiked".into()),
            Message::Components {
                step: Some(1),
                batch_size: Some(32),
                parameters_bytes: 10,
                buffers_bytes: 1,
                gradients_bytes: 10,
                optimizer_state_bytes: 20,
                extras: vec![("ema".into(), 10)],
            },
            Message::Gradients {
                step: Some(4),
                params_with_grad: 148,
                gradient_bytes: 1 << 30,
                global_norm: 0.123_456_789_012_345_6,
                nan_count: 0,
                inf_count: 2,
            },
            Message::Tensor {
                name: "block3.out".into(),
                step: Some(5),
                shape: vec![4, 64, 512],
                dtype: "f32".into(),
                bytes: 524_288,
                min: -3.5,
                max: 2.25,
                mean: 1e-7,
                std: 0.999_999_1,
                nan_count: 1,
                inf_count: 0,
            },
            Message::Trial {
                batch_size: 32,
                outcome: TrialOutcome::Fit,
                peak_bytes: Some(3 << 30),
            },
            Message::Oom {
                stage: Some("post_forward".into()),
                step: Some(9),
                requested_bytes: Some(2048),
                device: Some(0),
                free_bytes: Some(1024),
                total_bytes: Some(1 << 30),
                message: "CUDA out of memory.\nTried".into(),
            },
        ]
    }

    #[test]
    fn every_message_formats_and_parses_back() {
        let mut messages = every_verb_in_full();
        messages.push(Message::Trial {
            batch_size: 64,
            outcome: TrialOutcome::Oom,
            peak_bytes: None,
        });
        for m in messages {
            let mut line = String::new();
            format(&mut line, &m);
            assert_eq!(line.matches('\n').count(), 1, "{line}");
            let parsed = parse_line(line.trim_end()).unwrap_or_else(|| panic!("{line}"));
            let expected = match m {
                Message::Oom {
                    message,
                    stage,
                    step,
                    requested_bytes,
                    device,
                    free_bytes,
                    total_bytes,
                } => Message::Oom {
                    message: message.replace('\n', " "),
                    stage,
                    step,
                    requested_bytes,
                    device,
                    free_bytes,
                    total_bytes,
                },
                other => other,
            };
            assert_eq!(parsed, expected, "{line}");
        }
    }
}

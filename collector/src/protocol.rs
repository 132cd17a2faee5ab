//! The marker protocol: how a watched program tells `collector run` where it is.
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

use oomscope_trace::{AllocatorSnapshot, Phase, TrialOutcome};

/// The protocol version this collector speaks (exported as `OOMSCOPE_PROTOCOL`).
pub const PROTOCOL_VERSION: u32 = 1;
/// The environment variable holding the socket path.
pub const SOCKET_ENV: &str = "OOMSCOPE_SOCKET";
/// The environment variable holding the protocol version.
pub const PROTOCOL_ENV: &str = "OOMSCOPE_PROTOCOL";
/// Largest datagram the collector reads; longer ones are truncated by the kernel.
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;

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
            let f = Fields::parse(rest);
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
            let f = Fields::parse(rest);
            Some(Message::Step {
                step: step.parse().ok()?,
                epoch: f.u32("epoch"),
            })
        }
        "phase" => parse_phase(split_token(rest).0).map(Message::Phase),
        "note" => Some(Message::Note(rest.trim().to_owned())),
        "components" => {
            let f = Fields::parse(rest);
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
            let f = Fields::parse(rest);
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
            let f = Fields::parse(rest);
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
            let f = Fields::parse(rest);
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
            let f = Fields::parse(fields);
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

    fn get(&self, key: &str) -> Option<&'a str> {
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
        if !names.iter().any(|k| self.map.contains_key(k)) {
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
    use std::fmt::Write;
    // Whitespace would split the stage name; it is replaced, never sent.
    out.push_str("mark ");
    out.extend(
        stage
            .chars()
            .map(|c| if c.is_whitespace() { '_' } else { c }),
    );
    if let Some(step) = step {
        let _ = write!(out, " step={step}");
    }
    if let Some(phase) = phase.filter(|p| *p != Phase::Unknown) {
        let _ = write!(out, " phase={}", phase.label());
    }
    if let Some(s) = snapshot {
        for (name, value) in AllocatorSnapshot::FIELD_NAMES.iter().zip(s.values()) {
            let _ = write!(out, " {name}={value}");
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

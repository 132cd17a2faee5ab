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
//!
//! The module's parts: the messages ([`Message`], `message.rs`), each verb's `key=value` fields
//! declared once (`fields.rs`), reading a line (`parse.rs`) and writing one (`format.rs`).

mod fields;
mod format;
mod message;
mod parse;

pub use fields::{keys, written_keys};
pub use format::format;
pub use message::{Context, Message, SenderReading, verb_of};
pub use parse::{parse_datagram, parse_line};

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

#[cfg(test)]
mod tests;

//! # oomscope-format
//!
//! The vocabulary every side of oomscope shares: the records of a trace ([`Record`], [`Trace`]
//! and the types inside them), their bytes ([`TraceWriter`] streams a trace to a file that stays
//! readable when the writer is killed; [`decode`] reads any prefix of one without panicking), the
//! line protocol programs use to send marks ([`protocol`]), and the units people read
//! ([`units`]). It imports nothing else of oomscope: the collector's recorder, sampler, `Probe`
//! and tch `Session` need only this crate, and the analysis builds on it.
//!
//! Pure Rust with no I/O runtime: it builds for `wasm32-unknown-unknown`. The byte layout is
//! documented in `FORMAT.md` beside this crate.
//!
//! ```
//! use oomscope_format::{decode, CounterKind, Metadata, Record, StageMark, TraceWriter};
//!
//! let mut w = TraceWriter::new(Vec::new(), &Metadata::default()).unwrap();
//! let rss = w.declare_counter(CounterKind::HostRss, None).unwrap();
//! w.sample(1_000, &[(rss, 512 << 20)]).unwrap();
//! let mark = StageMark { t_us: 2_000, name: "post_forward".into(), step: 1, ..StageMark::default() };
//! w.write(&Record::Mark(mark)).unwrap();
//! let bytes = w.finish(3_000).unwrap();
//!
//! let decoded = decode(&bytes).unwrap();
//! assert_eq!(decoded.trace.samples.len(), 1);
//! assert!(decoded.warnings.is_empty());
//! ```
#![deny(missing_docs)]

pub mod codec;
mod error;
mod model;
pub mod protocol;
pub mod units;
mod varint;

pub use codec::follow::Follower;
pub use codec::reader::{DecodeOptions, Decoded, Warning, decode, decode_with};
pub use codec::writer::{TraceWriter, WriterOptions};
pub use error::{DecodeError, EncodeError};
pub use model::*;

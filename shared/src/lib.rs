//! # oomscope-trace
//!
//! The one place where oomscope's trace format and analysis live. The native `collector` writes
//! traces with [`TraceWriter`]; the collector's terminal output and the browser viewer both read
//! them with [`decode`] and compute every number they show with [`analysis::analyze`], so the
//! terminal and the browser can never disagree.
//!
//! The crate is pure Rust with no I/O runtime, no GPU libraries and no UI: it builds for
//! `wasm32-unknown-unknown`. The byte layout is documented in `FORMAT.md` beside this crate.
//!
//! ```
//! use oomscope_trace::{decode, CounterKind, Metadata, Record, StageMark, TraceWriter};
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

pub mod analysis;
pub mod codec;
mod error;
pub mod estimate;
pub mod export;
pub mod fleet;
pub mod headline;
pub mod launch_env;
pub mod launcher_text;
pub mod model;
pub mod oom_text;
pub mod pickle;
pub mod protocol;
pub mod reduce;
pub mod report_page;
pub mod snapshot;
pub mod synth;
pub mod text;
pub mod units;
mod varint;
pub mod verdict;

pub use codec::reader::{DecodeOptions, Decoded, Warning, decode, decode_with};
pub use codec::writer::{TraceWriter, WriterOptions};
pub use error::{DecodeError, EncodeError};
pub use model::*;

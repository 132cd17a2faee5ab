//! # oomscope-testkit
//!
//! What oomscope's tests, benchmarks and golden traces share (a dev-dependency only, never
//! shipped):
//! - [`TrainingRun`] (and [`NodeRun`]): a simulated training run written through the real
//!   [`oomscope_format::TraceWriter`], with a caching allocator's shapes and seeded noise; the
//!   benchmarks, the golden traces, the demo and the analysis's integration tests use it;
//! - [`Run`]: the same run in the same vocabulary (`parameters_bytes`, `leak_bytes_per_step`,
//!   `eval_retained_bytes`, `fragmentation_bytes`, `oom_at_step`, …) built directly as an
//!   in-memory [`oomscope_format::Trace`] with exact numbers (no noise, no 2 MiB segments, no
//!   writer), for the analysis's unit tests that assert bytes to the byte;
//! - [`Scratch`]: a directory per test, removed when the test passes;
//! - [`data`]: the committed traces and snapshots, found from any crate's tests.

pub mod data;
pub mod run;
mod scratch;
pub mod synth;

pub use run::Run;
pub use scratch::Scratch;
pub use synth::{NodeRun, TrainingRun};

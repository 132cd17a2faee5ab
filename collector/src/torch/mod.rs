//! Instrumentation of tch (libtorch) training loops, from inside the program (feature `tch`).
//!
//! tch exposes no allocator statistics, no `empty_cache` and no peak reset (tch-rs#896), so Rust
//! users debug OOMs with nvidia-smi. This module gives them what Python has in
//! `torch.cuda.memory_stats`, through a small C++ shim built against libtorch
//! (`cpp/allocator_shim.cpp`), and records it with stage marks:
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use oomscope_collector::torch::Session;
//! // Under `collector run`: reports to it. Alone: records its own trace.
//! let session = Session::auto("train.oomt")?;
//! for step in 0..100 {
//!     session.step(step);
//!     let _forward = session.span("forward"); // pre_forward now, post_forward on drop
//! }
//! session.finish()?;
//! # Ok(())
//! # }
//! ```
//!
//! Every mark carries the caching allocator's statistics when CUDA is in use; on CPU the same
//! calls record host memory.

pub mod allocator;
mod batch;
mod session;
pub mod stats;

pub use batch::{BatchSearch, BatchSearchResult};
pub use session::{OomError, Session, Span};

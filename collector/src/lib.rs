//! # oomscope collector
//!
//! The native half of oomscope: `collector run -- CMD` records a program's GPU and host memory,
//! stage marks and OOM errors into a trace (the format in `oomscope-format`, the analysis in
//! `oomscope-analysis`, its words in `oomscope-words`); `summary`, `watch`, `serve`, `export`
//! and `estimate` read traces back, and `collector report` writes one self-contained HTML file
//! with the browser viewer and a trace ([`report`]).
//!
//! Programs that want to say where they are use the marker protocol
//! ([`oomscope_format::protocol`]); Rust programs
//! use [`probe::Probe`], which costs nothing when the program is not run under the collector.

pub mod cgroup;
pub mod cli;
pub mod clock;
pub mod fleet;
pub mod gpu;
pub mod host;
pub mod launch_env;
pub mod launcher_text;
pub mod live_trace;
#[cfg(feature = "parquet")]
pub mod parquet_export;
pub mod probe;
pub mod report;
pub mod run;
pub mod serve;
#[cfg(feature = "tch")]
pub mod torch;
pub mod trace_file;
pub mod ui;
pub mod watch_view;

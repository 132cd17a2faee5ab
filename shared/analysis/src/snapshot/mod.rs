//! What a PyTorch memory snapshot says ([`analysis`]), its rows as CSV and Perfetto ([`export`]),
//! and a read snapshot handed from the viewer's Web Worker to its page ([`wire`]). Reading the
//! pickle and replaying its timeline is the `oomscope-snapshot` crate's.

pub mod analysis;
pub mod export;
pub mod wire;

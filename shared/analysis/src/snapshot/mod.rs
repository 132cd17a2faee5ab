//! What a PyTorch memory snapshot says ([`analysis`]). Reading the pickle and replaying its
//! timeline is the `oomscope-snapshot` crate's; its rows as CSV and Perfetto are
//! `oomscope-report`'s (`snapshot_export`), and its hand-over from the viewer's Web Worker to its
//! page the viewer's (`snapshot_wire`).

pub mod analysis;

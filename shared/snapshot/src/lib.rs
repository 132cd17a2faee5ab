//! PyTorch memory snapshots (`torch.cuda.memory._dump_snapshot()` pickles, also written on OOM
//! by Megatron, torchtitan, torchtnt, Composer, verl and `collector run --oom-snapshot`): read in
//! one streaming pass into a compact form, then analysed like oomscope's own traces.
//!
//! The pickle's trace entries (`device_traces`, often millions) become fixed-size [`Event`]s as
//! they are read and are dropped at once ([`pickle::Visitor`]); frames are interned by
//! identity and stacks by content, so memory stays near the size of the events, not of the
//! pickle's object graph. The allocator state at dump time (`segments` and their blocks) is
//! kept whole. Every key is optional and unknown keys are ignored: the format has grown keys in
//! every PyTorch release (its keys are listed in the docstring of `torch.cuda.memory._snapshot`,
//! `torch/cuda/memory.py`, which differs from release to release).
//!
//! A cut-short pickle keeps what was read before the cut, with a warning; anything that is not
//! a snapshot is one clear error.

mod model;
pub mod pickle;
mod reader;
mod sites;
pub mod timeline;

pub use model::{Action, Block, BlockState, Event, Frame, Segment, Snapshot, StackId};
pub use reader::{SnapshotError, SnapshotParser, looks_like_pickle, read_snapshot};
pub use sites::{NO_STACK, Sites, site_of, stack_text, total};

//! What a snapshot holds once read: the allocator's segments and blocks at dump time, the trace
//! events as fixed-size [`Event`]s, and the frames and stacks they point at, interned.

use serde::{Deserialize, Serialize};

/// An interned stack: an index into [`Snapshot::stacks`].
pub type StackId = u32;

/// One Python (or C++) frame of a stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Source file (`train.py`, `.../torch/nn/modules/linear.py`, `??` for unknown C++).
    pub filename: String,
    /// Line number (0 when not given).
    pub line: u64,
    /// Function name.
    pub name: String,
}

/// What a trace entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Action {
    /// A block handed to a tensor.
    Alloc,
    /// A block freed by the program, waiting for its streams.
    FreeRequested,
    /// A block returned to the allocator.
    FreeCompleted,
    /// `cudaMalloc` of a segment.
    SegmentAlloc,
    /// `cudaFree` of a segment.
    SegmentFree,
    /// Pages mapped into an expandable segment.
    SegmentMap,
    /// Pages unmapped from an expandable segment.
    SegmentUnmap,
    /// The moment a snapshot was taken.
    Snapshot,
    /// An allocation failed: out of memory.
    Oom,
    /// Anything else (`annotate`, and names newer versions add).
    Other,
}

impl Action {
    /// From torch's name (`free` is an older name of `free_completed`).
    pub fn parse(name: &str) -> Action {
        match name {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" | "free" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "snapshot" => Action::Snapshot,
            "oom" => Action::Oom,
            _ => Action::Other,
        }
    }

    /// torch's name.
    pub fn name(self) -> &'static str {
        match self {
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentAlloc => "segment_alloc",
            Action::SegmentFree => "segment_free",
            Action::SegmentMap => "segment_map",
            Action::SegmentUnmap => "segment_unmap",
            Action::Snapshot => "snapshot",
            Action::Oom => "oom",
            Action::Other => "other",
        }
    }
}

/// One trace entry of one device: 40 bytes, as a 1 GB snapshot holds some 8 million.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The block's or segment's address; on OOM entries the device's free bytes then, which
    /// torch records in place of the address (see [`Event::device_free_bytes`]).
    pub addr: u64,
    /// Bytes (on OOM entries: the request that failed).
    pub size: u64,
    /// µs since the Unix epoch (0 when not recorded).
    pub time_us: u64,
    /// The stack that did it, when recorded.
    pub stack: Option<StackId>,
    /// The CUDA stream, as an index into [`Snapshot::streams`].
    pub stream: u32,
    /// What happened.
    pub action: Action,
}

/// [`Event::addr`] of an OOM entry that did not say how much was free.
pub(crate) const FREE_UNKNOWN: u64 = u64::MAX;

impl Event {
    /// On OOM entries: the device's free bytes when the request failed, when recorded.
    pub fn device_free_bytes(&self) -> Option<u64> {
        (self.action == Action::Oom && self.addr != FREE_UNKNOWN).then_some(self.addr)
    }
}

/// A block's state at dump time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BlockState {
    /// Held by a tensor.
    ActiveAllocated,
    /// Freed by the program, waiting for a stream (`active_pending_free`, also spelled
    /// `active_awaiting_free`).
    ActivePendingFree,
    /// Free, cached by the allocator.
    Inactive,
}

impl BlockState {
    /// What the allocator view and its legend call it.
    pub fn label(self) -> &'static str {
        match self {
            BlockState::ActiveAllocated => "allocated",
            BlockState::ActivePendingFree => "freed, waiting for its stream",
            BlockState::Inactive => "free (cached)",
        }
    }
}

/// A block of a segment at dump time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    /// Address (0 in old snapshots without it).
    pub address: u64,
    /// Bytes, rounded as the allocator hands them out.
    pub size: u64,
    /// Bytes the program asked for.
    pub requested_size: u64,
    /// State.
    pub state: BlockState,
    /// The stack that allocated it, when recorded.
    pub stack: Option<StackId>,
}

/// A segment (one `cudaMalloc`, or an expandable segment) at dump time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    /// Device index.
    pub device: u32,
    /// Address.
    pub address: u64,
    /// Bytes reserved.
    pub total_size: u64,
    /// Bytes in blocks held by tensors.
    pub allocated_size: u64,
    /// Bytes in active blocks (allocated or pending free).
    pub active_size: u64,
    /// The stream.
    pub stream: u64,
    /// From the large pool (blocks > 1 MiB).
    pub large: bool,
    /// An expandable segment (`expandable_segments:True`).
    pub expandable: bool,
    /// Its blocks.
    pub blocks: Vec<Block>,
}

/// A memory snapshot, read.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Snapshot {
    /// The allocator's segments at dump time.
    pub segments: Vec<Segment>,
    /// Trace entries per device index, in recorded order.
    pub devices: Vec<Vec<Event>>,
    /// Interned frames.
    pub frames: Vec<Frame>,
    /// Interned stacks: frame indexes, innermost first.
    pub stacks: Vec<Vec<u32>>,
    /// The CUDA streams the entries name (pointer values; 0 is the default stream).
    pub streams: Vec<u64>,
    /// `allocator_settings` as written (`expandable_segments`, `max_split_size`, …).
    pub settings: Vec<(String, String)>,
    /// Damage: the pickle cut short, parts that were not what a snapshot holds.
    pub warnings: Vec<String>,
    /// The pickle was cut short: the entries are a prefix, so the dump's state (the segments,
    /// written first) is not where they lead, and what was active before them is unknown.
    pub truncated: bool,
}

impl Snapshot {
    /// Trace entries of every device.
    pub fn events(&self) -> usize {
        self.devices.iter().map(Vec::len).sum()
    }

    /// The frames of `stack`, innermost first.
    pub fn frames_of(&self, stack: StackId) -> impl Iterator<Item = &Frame> {
        self.stacks
            .get(stack as usize)
            .into_iter()
            .flatten()
            .filter_map(|f| self.frames.get(*f as usize))
    }

    /// An allocator setting, as written.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

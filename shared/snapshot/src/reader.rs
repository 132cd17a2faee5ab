//! Reading a snapshot pickle in one streaming pass into a [`Snapshot`]: the pickle machine
//! ([`crate::pickle`]) offers each value to a visitor that keeps what the model needs and drops
//! trace entries as soon as they are events.

use rustc_hash::FxHashMap as HashMap;
use std::io::Read;
use std::rc::Rc;

use crate::model::{
    Action, Block, BlockState, Event, FREE_UNKNOWN, Frame, Segment, Snapshot, StackId,
};
use crate::pickle::{self, Dict, List, Memo, Offer, Value, Visitor};

/// Whether `bytes` start like a pickle (protocol 2 or later): what tells a snapshot from a trace.
pub fn looks_like_pickle(bytes: &[u8]) -> bool {
    matches!(bytes, [0x80, 2..=5, ..])
}

/// Why a file is no snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError(pub String);

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SnapshotError {}

/// Reads a snapshot pickle from `input` in one pass.
pub fn read_snapshot<R: Read>(mut input: R) -> Result<Snapshot, SnapshotError> {
    // One instance of the reader, compiled here (with this crate's optimisation settings)
    // rather than in each caller; the input is called once per 256 KiB.
    read_from(&mut input)
}

fn read_from(input: &mut dyn Read) -> Result<Snapshot, SnapshotError> {
    let mut reader = SnapshotReader::default();
    let result = pickle::read(input, &mut reader);
    assemble(reader, result)
}

/// A snapshot read from slices handed over as they arrive ([`pickle::Resumable`]): the viewer
/// reads a large file a few megabytes at a time, showing progress, and the page stays
/// responsive in between.
#[derive(Debug)]
pub struct SnapshotParser {
    read: pickle::Resumable<SnapshotReader>,
}

impl Default for SnapshotParser {
    fn default() -> SnapshotParser {
        SnapshotParser {
            read: pickle::Resumable::new(SnapshotReader::default()),
        }
    }
}

impl SnapshotParser {
    /// The next bytes of the pickle.
    pub fn push(&mut self, bytes: Vec<u8>) {
        self.read.push(bytes);
    }

    /// No more bytes will come.
    pub fn finish(&mut self) {
        self.read.finish();
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read.bytes_read()
    }

    /// Trace entries read so far.
    pub fn entries(&self) -> usize {
        self.read.visitor.events
    }

    /// A whole pickle held in memory, read a slice at a time: what [`read_snapshot`] returns,
    /// by the parser the viewer reads files with, so the page carries one copy of the pickle
    /// machine instead of two.
    pub fn read_bytes(bytes: &[u8]) -> Result<Snapshot, SnapshotError> {
        const SLICE_BYTES: usize = 1 << 20;
        let mut parser = SnapshotParser::default();
        for slice in bytes.chunks(SLICE_BYTES) {
            parser.push(slice.to_vec());
            if let Some(done) = parser.resume() {
                return done;
            }
        }
        parser.finish();
        parser
            .resume()
            .unwrap_or_else(|| Err(SnapshotError("cannot read the snapshot".to_owned())))
    }

    /// Reads as far as the bytes given allow: `None` while more are needed, then what
    /// [`read_snapshot`] returns for the whole input.
    pub fn resume(&mut self) -> Option<Result<Snapshot, SnapshotError>> {
        let result = self.read.resume()?;
        Some(assemble(std::mem::take(&mut self.read.visitor), result))
    }
}

/// The snapshot from what the reader took and how the pickle ended.
fn assemble(
    mut reader: SnapshotReader,
    result: Result<Value, (pickle::PickleError, pickle::Leftover)>,
) -> Result<Snapshot, SnapshotError> {
    let (top, pending, warning) = match result {
        Ok(Value::Dict(top)) => (Some(top), Vec::new(), None),
        Ok(_) => {
            return Err(SnapshotError(
                "this pickle is not a memory snapshot: its top level is not a dict".to_owned(),
            ));
        }
        Err((e, left)) => {
            let mut stack = left.stack.into_iter();
            match stack.next() {
                Some(Value::Dict(top)) => (Some(top), stack.collect(), Some(e)),
                _ if reader.events > 0 => (None, Vec::new(), Some(e)),
                _ => return Err(SnapshotError(format!("cannot read the snapshot: {e}"))),
            }
        }
    };
    let mut snap = Snapshot::default();
    // The top dict's items, then (after a cut) the keys and values still waiting on the stack.
    let mut fields: Vec<(String, Value)> = top
        .as_ref()
        .map(|t| {
            t.with_pairs(|pairs| {
                pairs
                    .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.clone())))
                    .collect()
            })
        })
        .unwrap_or_default();
    let mut device_lists: Vec<Rc<List>> = Vec::new();
    let mut i = 0;
    while i + 1 < pending.len() {
        match (&pending[i], &pending[i + 1]) {
            (Value::Str(k), Value::List(outer)) if k.as_str() == "device_traces" => {
                device_lists.extend(list_items(outer));
                // The devices' lists not yet appended to the outer list follow it, then the
                // entries of the last one not yet appended to it (pickle appends in batches of
                // 1 000): complete entries are taken as if appended.
                let rest = &pending[i + 2..];
                let lists = rest.iter().take_while(|v| matches!(v, Value::List(_)));
                device_lists.extend(lists.clone().filter_map(|v| match v {
                    Value::List(l) => Some(l.clone()),
                    _ => None,
                }));
                if let Some(last) = device_lists.last() {
                    for v in &rest[lists.count()..] {
                        if let Value::Dict(d) = v {
                            reader.take(last.id, d, None);
                        }
                    }
                }
                break;
            }
            (Value::Str(k), v) => {
                fields.push((k.to_string(), v.clone()));
                i += 2;
            }
            _ => i += 1,
        }
    }
    if top.is_none() && device_lists.is_empty() {
        // Cut inside the first device's entries: they are device 0's.
        snap.devices = vec![reader.by_list.drain().flat_map(|(_, v)| v).collect()];
    }
    for (key, value) in &fields {
        match (key.as_str(), value) {
            ("device_traces", Value::List(outer)) => device_lists = list_items(outer),
            ("segments", Value::List(segments)) => {
                for s in segments.items.borrow().iter() {
                    match s {
                        Value::Dict(d) => snap.segments.push(reader.segment(d)),
                        _ => snap
                            .warnings
                            .push("a segment that is not a dict was skipped".to_owned()),
                    }
                }
            }
            ("allocator_settings", Value::Dict(d)) => {
                snap.settings = d.with_pairs(|pairs| {
                    pairs
                        .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), setting_text(v))))
                        .collect()
                });
            }
            _ => {}
        }
    }
    if !device_lists.is_empty() {
        snap.devices = device_lists
            .iter()
            .map(|l| reader.by_list.remove(&l.id).unwrap_or_default())
            .collect();
    }
    let orphans: usize = reader.by_list.values().map(Vec::len).sum();
    if orphans > 0 {
        snap.warnings.push(format!(
            "{orphans} trace entries were in lists outside `device_traces` and are not shown"
        ));
    }
    snap.truncated = warning.is_some();
    if let Some(e) = &warning {
        snap.warnings.insert(
            0,
            format!(
                "{e}; what was read before it is shown ({} trace entries, {} segments)",
                snap.events(),
                snap.segments.len()
            ),
        );
    }
    if let Some(e) = &warning
        && snap.events() == 0
        && snap.segments.is_empty()
    {
        return Err(SnapshotError(format!("cannot read the snapshot: {e}")));
    }
    if warning.is_none()
        && !fields
            .iter()
            .any(|(k, _)| k == "segments" || k == "device_traces")
    {
        return Err(SnapshotError(
            "this pickle is not a memory snapshot: it has neither `segments` nor `device_traces`"
                .to_owned(),
        ));
    }
    snap.frames = reader.frames;
    snap.stacks = reader.stacks;
    snap.streams = reader.streams;
    Ok(snap)
}

fn list_items(list: &List) -> Vec<Rc<List>> {
    list.items
        .borrow()
        .iter()
        .filter_map(|v| match v {
            Value::List(l) => Some(l.clone()),
            _ => None,
        })
        .collect()
}

fn setting_text(v: &Value) -> String {
    setting_text_within(v, 4)
}

/// A setting's value as text, nested dicts `depth` levels deep at most (a crafted pickle can put
/// a dict inside itself).
fn setting_text_within(v: &Value, depth: u32) -> String {
    match v {
        Value::None => "None".to_owned(),
        Value::Bool(b) => if *b { "True" } else { "False" }.to_owned(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Long(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.to_string(),
        Value::Dict(d) if depth > 0 => {
            let items: Vec<String> = d.with_pairs(|pairs| {
                pairs
                    .map(|(k, v)| {
                        format!(
                            "{}: {}",
                            setting_text_within(k, depth - 1),
                            setting_text_within(v, depth - 1)
                        )
                    })
                    .collect()
            });
            format!("{{{}}}", items.join(", "))
        }
        _ => "…".to_owned(),
    }
}

/// The visitor: trace entries become [`Event`]s as they are appended; frames and stacks are
/// interned as they are first seen.
#[derive(Default)]
struct SnapshotReader {
    frames: Vec<Frame>,
    frame_by_content: HashMap<Frame, u32>,
    stacks: Vec<Vec<u32>>,
    stack_ids: HashMap<Vec<u32>, StackId>,
    /// Reused for each stack's frame ids (no allocation per stack).
    scratch: Vec<u32>,
    streams: Vec<u64>,
    /// Events by the id of the list they were appended to (a device's list).
    by_list: HashMap<u32, Vec<Event>>,
    events: usize,
}

impl Visitor for SnapshotReader {
    fn appended(&mut self, list: &List, item: &Value, memo: &mut Memo) -> Offer {
        // A list's first item tells what it holds: trace entries (dicts with an `action`), or
        // anything else (a stack's frames, a segment's blocks), never asked about again.
        match item {
            Value::Dict(d) if self.take(list.id, d, Some(memo)) => Offer::Take,
            _ => Offer::KeepList,
        }
    }
}

impl SnapshotReader {
    /// Takes `d` as an entry of the list `list_id` when it is one (it has an `action`); its
    /// keys are read in one pass (entries are millions).
    fn take(&mut self, list_id: u32, d: &Dict, memo: Option<&mut Memo>) -> bool {
        let (mut action, mut frames, mut stream, mut device_free) = (None, None, 0, None);
        let mut event = Event {
            addr: 0,
            size: 0,
            time_us: 0,
            stack: None,
            stream: 0,
            action: Action::Other,
        };
        d.with_pairs(|pairs| {
            for (k, v) in pairs {
                let Value::Str(k) = k else {
                    continue;
                };
                match k.as_str() {
                    "action" => action = v.as_str().map(Action::parse),
                    "addr" => event.addr = v.as_u64().unwrap_or(0),
                    "size" => event.size = v.as_u64().unwrap_or(0),
                    "stream" => stream = v.as_u64().unwrap_or(0),
                    "time_us" => event.time_us = v.as_f64().map_or(0, |t| t.max(0.0) as u64),
                    "frames" => frames = Some(v.clone()),
                    "device_free" => device_free = v.as_u64(),
                    _ => {}
                }
            }
        });
        let Some(action) = action else {
            return false;
        };
        if action == Action::Oom {
            event.addr = device_free.unwrap_or(FREE_UNKNOWN);
        }
        // Streams are a handful: the last one is nearly always the one.
        event.stream = match self.streams.iter().rposition(|s| *s == stream) {
            Some(i) => i as u32,
            None => {
                self.streams.push(stream);
                (self.streams.len() - 1) as u32
            }
        };
        event.action = action;
        event.stack = self.stack(frames, memo);
        self.by_list.entry(list_id).or_default().push(event);
        self.events += 1;
        true
    }

    /// The stack of a `frames` value: a handle already interned, or a list interned now (and,
    /// when memoized, replaced in the memo by its handle so later references cost nothing).
    fn stack(&mut self, frames: Option<Value>, mut memo: Option<&mut Memo>) -> Option<StackId> {
        match frames? {
            Value::Handle(h) => ((h as usize) < self.stacks.len()).then_some(h),
            Value::List(l) => {
                // A list still being appended to (a pickle whose event's frames are the very
                // list the event is appended into: the fuzzer wrote one) cannot be read yet:
                // no stack, rather than a second borrow of it.
                let items = l.items.try_borrow().ok()?;
                let mut ids = std::mem::take(&mut self.scratch);
                ids.clear();
                for f in items.iter() {
                    if let Some(id) = self.frame(f, memo.as_deref_mut()) {
                        ids.push(id);
                    }
                }
                drop(items);
                let id = match self.stack_ids.get(ids.as_slice()) {
                    Some(id) => *id,
                    None => {
                        let id = self.stacks.len() as StackId;
                        self.stacks.push(ids.clone());
                        self.stack_ids.insert(ids.clone(), id);
                        id
                    }
                };
                self.scratch = ids;
                if let (Some(memo), Some(slot)) = (memo, l.memo_slot()) {
                    memo.replace(slot, Some(Value::Handle(id)));
                }
                Some(id)
            }
            _ => None,
        }
    }

    /// The id of a frame: a handle already interned, or a frame dict interned now. Given the
    /// memo, the dict's slot then holds the handle: a stack refers to its frames again and again
    /// (25 memo references per allocation at a usual depth), and a handle is a plain copy where
    /// a dict costs a reference count each time.
    fn frame(&mut self, v: &Value, memo: Option<&mut Memo>) -> Option<u32> {
        let d = match v {
            Value::Handle(h) => return ((*h as usize) < self.frames.len()).then_some(*h),
            Value::Dict(d) => d,
            _ => return None,
        };
        let id = match d.tag.get() {
            u32::MAX => {
                let text = |k: &str| {
                    d.get(k)
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default()
                };
                let frame = Frame {
                    filename: text("filename"),
                    line: d.get("line").and_then(|v| v.as_u64()).unwrap_or(0),
                    name: text("name"),
                };
                let next = self.frames.len() as u32;
                let id = *self.frame_by_content.entry(frame).or_insert_with_key(|f| {
                    self.frames.push(f.clone());
                    next
                });
                d.tag.set(id);
                id
            }
            tagged => tagged,
        };
        if let (Some(memo), Some(slot)) = (memo, d.memo_slot()) {
            memo.replace(slot, Some(Value::Handle(id)));
        }
        Some(id)
    }

    fn segment(&mut self, d: &Dict) -> Segment {
        let int = |key: &str| d.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
        let blocks = match d.get("blocks") {
            Some(Value::List(l)) => l
                .items
                .borrow()
                .iter()
                .filter_map(|b| match b {
                    Value::Dict(b) => Some(self.block(b)),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        Segment {
            device: int("device") as u32,
            address: int("address"),
            total_size: int("total_size"),
            allocated_size: int("allocated_size"),
            active_size: int("active_size"),
            stream: int("stream"),
            large: d
                .get("segment_type")
                .and_then(|v| v.as_str().map(|s| s == "large"))
                != Some(false),
            expandable: d
                .get("is_expandable")
                .and_then(|v| v.as_bool())
                .unwrap_or(false),
            blocks,
        }
    }

    fn block(&mut self, d: &Dict) -> Block {
        let int = |key: &str| d.get(key).and_then(|v| v.as_u64()).unwrap_or(0);
        let state = match d.get("state").as_ref().and_then(Value::as_str) {
            Some("active_allocated") => BlockState::ActiveAllocated,
            Some("active_pending_free" | "active_awaiting_free") => BlockState::ActivePendingFree,
            _ => BlockState::Inactive,
        };
        // Snapshots before PyTorch 2.1 keep the stack in `history: [{addr, real_size, frames}]`.
        let frames = d.get("frames").or_else(|| match d.get("history") {
            // (`try_borrow`: a list still being appended to is not read; see `stack`.)
            Some(Value::List(h)) => h.items.try_borrow().ok()?.last().and_then(|e| match e {
                Value::Dict(e) => e.get("frames"),
                _ => None,
            }),
            _ => None,
        });
        let size = int("size");
        Block {
            address: int("address"),
            size,
            requested_size: d
                .get("requested_size")
                .and_then(|v| v.as_u64())
                .unwrap_or(size),
            state,
            stack: self.stack(frames, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_40_bytes_and_an_oom_keeps_the_free_bytes() {
        assert_eq!(size_of::<Event>(), 40);
        let oom = Event {
            addr: 1 << 20,
            size: 1 << 30,
            time_us: 0,
            stack: None,
            stream: 0,
            action: Action::Oom,
        };
        assert_eq!(oom.device_free_bytes(), Some(1 << 20));
        let unknown = Event {
            addr: FREE_UNKNOWN,
            ..oom
        };
        assert_eq!(unknown.device_free_bytes(), None);
        let alloc = Event {
            action: Action::Alloc,
            ..oom
        };
        assert_eq!(alloc.device_free_bytes(), None);
    }
}

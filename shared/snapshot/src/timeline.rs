//! A device's memory over a snapshot's entries, replayed one entry at a time: where the replay
//! starts (what was active and reserved before the recorded window), active memory stacked by
//! allocation site, and what was alive at any entry.
//!
//! One replay serves the analysis (peak, OOM context), the exports (a row per entry) and the
//! viewer's stacked chart and "alive at this moment" list, so all of them agree on every number.
//! A free whose allocation came before the window (the trace is a ring buffer) is taken from
//! "allocated before the recorded window", never from a site.

use rustc_hash::FxHashMap as HashMap;
use serde::{Deserialize, Serialize};

use crate::model::{Action, BlockState, Event, Snapshot, StackId};
use crate::sites::{Sites, total};

/// What a stacked chart calls the memory allocated before the recorded window.
pub const BEFORE_WINDOW: &str = "(allocated before the recorded window)";

/// Active and reserved bytes before a device's first recorded entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Start {
    /// Bytes in active blocks.
    pub active_bytes: u64,
    /// Bytes reserved in segments.
    pub reserved_bytes: u64,
}

/// The entries of device `device` (none when it recorded nothing).
pub fn events_of(snap: &Snapshot, device: u32) -> &[Event] {
    snap.devices.get(device as usize).map_or(&[], Vec::as_slice)
}

/// Where the replay of `device` starts: the dump's end state (its segments) minus what the
/// entries added. A cut-short snapshot's entries are a prefix, so its end state says nothing
/// about their start: the replay then starts from nothing.
pub fn start(snap: &Snapshot, device: u32) -> Start {
    if snap.truncated {
        return Start::default();
    }
    let segments = || snap.segments.iter().filter(|s| s.device == device);
    let active_end = total(
        segments()
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state != BlockState::Inactive)
            .map(|b| b.size),
    );
    let reserved_end = total(segments().map(|s| s.total_size));
    let (mut net_active, mut net_reserved) = (0i128, 0i128);
    for e in events_of(snap, device) {
        let size = i128::from(e.size);
        match e.action {
            Action::Alloc => net_active += size,
            Action::FreeCompleted => net_active -= size,
            Action::SegmentAlloc | Action::SegmentMap => net_reserved += size,
            Action::SegmentFree | Action::SegmentUnmap => net_reserved -= size,
            _ => {}
        }
    }
    let before = |end: u64, net: i128| u64::try_from((i128::from(end) - net).max(0)).unwrap_or(0);
    Start {
        active_bytes: before(active_end, net_active),
        reserved_bytes: before(reserved_end, net_reserved),
    }
}

/// Active and reserved bytes after each entry ([`replay`]).
#[derive(Debug, Clone)]
pub struct Replay<'a> {
    events: std::iter::Enumerate<std::slice::Iter<'a, Event>>,
    active: i128,
    reserved: i128,
}

/// One entry and the device's memory just after it.
#[derive(Debug, Clone, Copy)]
pub struct Step<'a> {
    /// The entry's index.
    pub index: usize,
    /// The entry.
    pub event: &'a Event,
    /// Active bytes after it.
    pub active_bytes: u64,
    /// Reserved bytes after it.
    pub reserved_bytes: u64,
}

/// Replays `events` from `start`.
pub fn replay(events: &[Event], start: Start) -> Replay<'_> {
    Replay {
        events: events.iter().enumerate(),
        active: i128::from(start.active_bytes),
        reserved: i128::from(start.reserved_bytes),
    }
}

impl<'a> Iterator for Replay<'a> {
    type Item = Step<'a>;

    fn next(&mut self) -> Option<Step<'a>> {
        let (index, event) = self.events.next()?;
        let size = i128::from(event.size);
        match event.action {
            Action::Alloc => self.active += size,
            Action::FreeCompleted => self.active -= size,
            Action::SegmentAlloc | Action::SegmentMap => self.reserved += size,
            Action::SegmentFree | Action::SegmentUnmap => self.reserved -= size,
            _ => {}
        }
        let clamp = |v: i128| u64::try_from(v.max(0)).unwrap_or(u64::MAX);
        Some(Step {
            index,
            event,
            active_bytes: clamp(self.active),
            reserved_bytes: clamp(self.reserved),
        })
    }
}

/// One band of a stacked chart: a site, "other sites", or what was allocated before the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Band {
    /// `file:line (function)`, `(N other sites)` or [`BEFORE_WINDOW`].
    pub label: String,
    /// A stack of the site (to show whole), when the band is one site.
    pub stack: Option<StackId>,
}

/// One moment of a stacked chart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackedPoint {
    /// µs since the epoch.
    pub time_us: u64,
    /// The entry it shows the memory after.
    pub index: usize,
    /// Active bytes per band (in [`StackedTimeline::bands`] order); they sum to the active
    /// bytes after the entry.
    pub bytes: Vec<u64>,
}

impl StackedPoint {
    /// The active bytes after its entry: its bands together.
    pub fn active_bytes(&self) -> u64 {
        total(self.bytes.iter().copied())
    }
}

/// Active memory over the entries, stacked by allocation site.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackedTimeline {
    /// The bands, bottom first: the top sites, then the other sites, then memory allocated
    /// before the recorded window.
    pub bands: Vec<Band>,
    /// At most `points` moments, each its slice of entries' highest (so no peak is hidden).
    pub points: Vec<StackedPoint>,
}

/// Active memory of `device` stacked by the `top` sites that hold the most at any moment (the
/// rest as one band), thinned to at most `points` moments.
pub fn stacked_by_site(snap: &Snapshot, device: u32, top: usize, points: usize) -> StackedTimeline {
    let events = events_of(snap, device);
    let sites = Sites::new(snap);
    let begin = start(snap, device);

    // First pass: each site's most live bytes at any moment, to pick the bands.
    let mut site_ids: HashMap<&str, usize> = HashMap::default();
    let mut names: Vec<(&str, Option<StackId>)> = Vec::new();
    let mut site_of_stack: HashMap<Option<StackId>, usize> = HashMap::default();
    let mut site_index = |stack: Option<StackId>| {
        *site_of_stack.entry(stack).or_insert_with(|| {
            let name = sites.of(stack);
            *site_ids.entry(name).or_insert_with(|| {
                names.push((name, stack));
                names.len() - 1
            })
        })
    };
    let mut live: HashMap<u64, (u64, usize)> = HashMap::default();
    let mut now: Vec<u64> = Vec::new();
    let mut most: Vec<u64> = Vec::new();
    // Each allocation's site (`NO_SITE` for other entries), so the second pass looks up nothing.
    const NO_SITE: u32 = u32::MAX;
    let mut allocs: Vec<u32> = Vec::with_capacity(events.len());
    for e in events {
        let site = match e.action {
            Action::Alloc => {
                let s = site_index(e.stack);
                if s >= now.len() {
                    now.resize(s + 1, 0);
                    most.resize(s + 1, 0);
                }
                live.insert(e.addr, (e.size, s));
                now[s] = now[s].saturating_add(e.size);
                most[s] = most[s].max(now[s]);
                s as u32
            }
            Action::FreeCompleted => {
                if let Some((size, s)) = live.remove(&e.addr) {
                    now[s] = now[s].saturating_sub(size);
                }
                NO_SITE
            }
            _ => NO_SITE,
        };
        allocs.push(site);
    }
    let mut ranked: Vec<usize> = (0..names.len()).filter(|s| most[*s] > 0).collect();
    ranked.sort_by(|a, b| {
        most[*b]
            .cmp(&most[*a])
            .then_with(|| names[*a].0.cmp(names[*b].0))
    });
    let shown = ranked.len().min(top);
    let mut band_of_site = vec![shown; names.len()];
    let mut bands: Vec<Band> = ranked[..shown]
        .iter()
        .enumerate()
        .map(|(band, s)| {
            band_of_site[*s] = band;
            Band {
                label: names[*s].0.to_owned(),
                stack: names[*s].1,
            }
        })
        .collect();
    let others = ranked.len() - shown;
    let other_band = (others > 0).then(|| {
        bands.push(Band {
            label: format!("({others} other sites)"),
            stack: None,
        });
        bands.len() - 1
    });
    let before_band = bands.len();
    bands.push(Band {
        label: BEFORE_WINDOW.to_owned(),
        stack: None,
    });

    // Second pass: the bands' bytes after each entry, keeping each slice's highest moment.
    let mut bytes = vec![0u64; bands.len()];
    bytes[before_band] = begin.active_bytes;
    let mut live: HashMap<u64, (u64, usize)> = HashMap::default();
    let slice = events.len().div_ceil(points.max(1)).max(1);
    let mut out: Vec<StackedPoint> = Vec::with_capacity(points.min(events.len()) + 1);
    let mut slice_best = 0u64;
    for step in replay(events, begin) {
        let e = step.event;
        match (e.action, allocs[step.index]) {
            (Action::Alloc, s) if s != NO_SITE => {
                let s = s as usize;
                let band = other_band
                    .filter(|_| band_of_site[s] >= shown)
                    .unwrap_or(band_of_site[s]);
                live.insert(e.addr, (e.size, band));
                bytes[band] = bytes[band].saturating_add(e.size);
            }
            (Action::FreeCompleted, _) => {
                let (size, band) = live.remove(&e.addr).unwrap_or((e.size, before_band));
                bytes[band] = bytes[band].saturating_sub(size);
            }
            _ => {}
        }
        let point = StackedPoint {
            time_us: e.time_us,
            index: step.index,
            bytes: Vec::new(),
        };
        if step.index % slice == 0 {
            slice_best = step.active_bytes;
            out.push(StackedPoint {
                bytes: bytes.clone(),
                ..point
            });
        } else if step.active_bytes > slice_best {
            slice_best = step.active_bytes;
            if let Some(last) = out.last_mut() {
                last.time_us = point.time_us;
                last.index = point.index;
                last.bytes.copy_from_slice(&bytes);
            }
        }
    }
    StackedTimeline { bands, points: out }
}

/// A block alive at some moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AliveBlock {
    /// Its address.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// The stack that allocated it.
    pub stack: Option<StackId>,
    /// When it was allocated (µs since the epoch).
    pub since_us: u64,
}

/// What was alive at one moment ([`alive_at`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AliveAt {
    /// The blocks allocated in the recorded window and not yet freed, largest first.
    pub blocks: Vec<AliveBlock>,
    /// Bytes allocated before the window and still active.
    pub before_bytes: u64,
    /// All active bytes then: the blocks and what came before the window.
    pub active_bytes: u64,
}

/// What was alive on `device` just after entry `index`.
pub fn alive_at(snap: &Snapshot, device: u32, index: usize) -> AliveAt {
    let events = events_of(snap, device);
    let begin = start(snap, device);
    let mut live: HashMap<u64, AliveBlock> = HashMap::default();
    let mut active = begin.active_bytes;
    for step in replay(events, begin).take(index.saturating_add(1)) {
        let e = step.event;
        match e.action {
            Action::Alloc => {
                live.insert(
                    e.addr,
                    AliveBlock {
                        addr: e.addr,
                        size: e.size,
                        stack: e.stack,
                        since_us: e.time_us,
                    },
                );
            }
            Action::FreeCompleted => {
                live.remove(&e.addr);
            }
            _ => {}
        }
        active = step.active_bytes;
    }
    let mut blocks: Vec<AliveBlock> = live.into_values().collect();
    blocks.sort_by(|a, b| b.size.cmp(&a.size).then(a.addr.cmp(&b.addr)));
    let placed = total(blocks.iter().map(|b| b.size));
    let before_bytes = active.saturating_sub(placed);
    AliveAt {
        blocks,
        before_bytes,
        active_bytes: placed.saturating_add(before_bytes),
    }
}

/// The last entry of `events` at or before `time_us` (the first when `time_us` is before them
/// all); `None` without entries.
pub fn entry_at(events: &[Event], time_us: u64) -> Option<usize> {
    if events.is_empty() {
        return None;
    }
    Some(
        events
            .partition_point(|e| e.time_us <= time_us)
            .saturating_sub(1),
    )
}

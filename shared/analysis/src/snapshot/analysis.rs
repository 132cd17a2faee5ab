//! What a memory snapshot says: per device, active and reserved memory over the recorded
//! entries, the peak and what was alive at it by allocation site, what is alive at the end
//! (the `segments`), how fragmented the cache is, and each OOM — with findings ranked like a
//! trace's, from the same thresholds ([`snapshot_findings`]; their words are the words crate's).
//!
//! An allocation's site is its first user frame: the innermost frame outside torch, site- or
//! dist-packages, Python's own `<…>` frames and C++ sources (frames are innermost first); a stack
//! with none of those falls back to its innermost frame. Memory allocated before the recorded
//! window (the trace is a ring buffer) cannot be placed by its alloc entry; it is shown as such,
//! never spread over sites.

use rustc_hash::FxHashMap as HashMap;

use serde::{Deserialize, Serialize};

use crate::finding::{Diagnosed, Evidence, EvidenceKey as K, Finding, FindingKind, Severity};
use crate::recommend::fragmentation_min_gap_bytes;
use oomscope_snapshot::timeline::{replay, start};
use oomscope_snapshot::{Action, BlockState, NO_STACK, Sites, Snapshot, StackId, total};

/// Most points kept of a device's timeline (each the highest of its slice of entries).
pub const TIMELINE_POINTS: usize = 2_000;

/// Sites listed at the peak and at the end.
pub const TOP_SITES: usize = 10;

/// One allocation site's live bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteBytes {
    /// `file:line (function)` of the first user frame; `(no stack recorded)`; or `(allocated
    /// before the recorded window)`.
    pub site: String,
    /// Bytes live (block sizes).
    pub bytes: u64,
    /// Blocks live.
    pub blocks: u64,
    /// A representative stack (the largest block's), for the full stack on hover.
    #[serde(skip)]
    pub stack: Option<StackId>,
}

/// One OOM entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotOom {
    /// µs since the epoch.
    pub time_us: u64,
    /// Where the failing request came from (its first user frame).
    pub site: String,
    /// The request that failed.
    pub requested_bytes: u64,
    /// The device's free memory then, as torch read it.
    pub device_free_bytes: Option<u64>,
    /// Active bytes just before it (the replay's).
    pub active_bytes: u64,
    /// Reserved bytes just before it.
    pub reserved_bytes: u64,
}

/// One device's analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceAnalysis {
    /// Device index.
    pub device: u32,
    /// Trace entries recorded.
    pub events: usize,
    /// First and last entry time (µs since the epoch), when recorded.
    pub span_us: Option<(u64, u64)>,
    /// Active bytes before the first recorded entry (blocks allocated before the window).
    pub active_before_bytes: u64,
    /// (µs, active bytes, reserved bytes) over the entries, thinned to [`TIMELINE_POINTS`]
    /// keeping each slice's highest.
    #[serde(skip)]
    pub timeline: Vec<(u64, u64, u64)>,
    /// Highest active bytes and when (µs), and at which entry.
    pub peak_active_bytes: u64,
    /// When the peak was reached.
    pub peak_time_us: u64,
    /// Highest reserved bytes.
    pub peak_reserved_bytes: u64,
    /// Alive at the peak by site, largest first (at most [`TOP_SITES`] plus "other").
    pub at_peak: Vec<SiteBytes>,
    /// Alive at the end (the dump's blocks) by site.
    pub at_end: Vec<SiteBytes>,
    /// Segments' bytes at the end: reserved, allocated (tensors), active (allocated + pending).
    pub reserved_bytes: u64,
    /// Bytes in tensors at the end.
    pub allocated_bytes: u64,
    /// Bytes in active blocks at the end.
    pub active_bytes: u64,
    /// Free bytes in segments that also hold active blocks (cannot be released: fragmentation).
    pub inactive_split_bytes: u64,
    /// The largest free block.
    pub largest_free_block_bytes: u64,
    /// Bytes the allocator rounded up (block size − requested size of active blocks).
    pub rounding_bytes: u64,
    /// Its OOMs, in order.
    pub ooms: Vec<SnapshotOom>,
    /// Sites that kept allocating without freeing across the recording (most bytes first).
    pub kept: Vec<KeptSite>,
}

/// A site whose allocations in the recording were never freed in it, spread over the recording:
/// memory kept across steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptSite {
    /// The site.
    pub site: String,
    /// Blocks it allocated in the recording that are still live at its end.
    pub blocks: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Share of the recording between its first and last such allocation (0–1000, ‰).
    pub spread_permille: u64,
}

/// A site keeps memory when at least this many of its recorded allocations stay live…
pub const KEPT_MIN_BLOCKS: u64 = 5;
/// …holding at least this much…
pub const KEPT_MIN_BYTES: u64 = 64 << 20;
/// …allocated over at least this share of the recording (‰), and none of its recorded
/// allocations was freed.
pub const KEPT_MIN_SPREAD_PERMILLE: u64 = 500;

/// A snapshot's analysis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnapshotAnalysis {
    /// Per device that has segments or entries.
    pub devices: Vec<DeviceAnalysis>,
    /// `expandable_segments` was set.
    pub expandable_segments: bool,
}

impl SnapshotAnalysis {
    /// Its findings, most severe first (every device's, from its analysis alone).
    pub fn findings(&self) -> Vec<Finding<SnapshotDetail>> {
        let mut findings = Vec::new();
        for d in &self.devices {
            findings.extend(findings_of(d, self.expandable_segments));
        }
        crate::sort::sort_by_key(&mut findings, |f| std::cmp::Reverse(f.severity));
        findings
    }
}

/// What a snapshot's rules found, per device.
#[derive(Debug, Clone, PartialEq)]
pub enum SnapshotDetail {
    /// The device's first OOM.
    Oom(SnapshotOomFound),
    /// A site kept memory across the recording (`leak`).
    Kept {
        /// The device.
        device: u32,
        /// The site.
        site: KeptSite,
    },
    /// Free memory split between live blocks (`fragmentation`).
    Fragmented(SnapshotFragmentation),
}

impl Diagnosed for SnapshotDetail {
    fn kind(&self) -> FindingKind {
        match self {
            SnapshotDetail::Oom(_) => FindingKind::Oom,
            SnapshotDetail::Kept { .. } => FindingKind::Leak,
            SnapshotDetail::Fragmented(_) => FindingKind::Fragmentation,
        }
    }
}

/// A device's first OOM, and why its request failed.
#[derive(Debug, Clone, PartialEq)]
pub struct SnapshotOomFound {
    /// The device.
    pub device: u32,
    /// The OOM.
    pub oom: SnapshotOom,
    /// OOM entries on the device.
    pub ooms: usize,
    /// The largest holders at the peak that have a stack (at most three).
    pub holders: Vec<SiteBytes>,
    /// Why the request failed.
    pub cause: OomCause,
}

/// Why a snapshot's OOM request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomCause {
    /// The request alone was larger than all the process had (reserved + free on the device).
    TooLarge,
    /// The cache held enough free but in no block large enough (`expandable_segments` off).
    Fragmented {
        /// Free in the cache at the end.
        free_cached_bytes: u64,
        /// Its largest free block.
        largest_free_block_bytes: u64,
    },
    /// Neither: memory was short.
    Short,
}

/// A device's cache split into free pieces between live blocks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SnapshotFragmentation {
    /// The device.
    pub device: u32,
    /// Free bytes inside segments still in use.
    pub inactive_split_bytes: u64,
    /// Reserved bytes.
    pub reserved_bytes: u64,
    /// The largest free block.
    pub largest_free_block_bytes: u64,
    /// `expandable_segments` was already set.
    pub expandable: bool,
}

impl SnapshotFragmentation {
    /// The split bytes' share of what is reserved.
    pub fn share(&self) -> f64 {
        self.inactive_split_bytes as f64 / self.reserved_bytes.max(1) as f64
    }
}

/// Sums blocks by site, largest first; past [`TOP_SITES`] they go into one "other" row.
fn by_site(names: &Sites, blocks: impl Iterator<Item = (u64, Option<StackId>)>) -> Vec<SiteBytes> {
    let mut sites: HashMap<&str, SiteBytes> = HashMap::default();
    let mut largest: HashMap<&str, u64> = HashMap::default();
    for (size, stack) in blocks {
        let site = names.of(stack);
        let e = sites.entry(site).or_insert_with(|| SiteBytes {
            site: site.to_owned(),
            bytes: 0,
            blocks: 0,
            stack,
        });
        e.bytes = e.bytes.saturating_add(size);
        e.blocks += 1;
        let l = largest.entry(site).or_insert(0);
        if size > *l {
            *l = size;
            e.stack = stack;
        }
    }
    let mut sites: Vec<SiteBytes> = sites.into_values().collect();
    crate::sort::sort_by(&mut sites, |a, b| {
        b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site))
    });
    if sites.len() > TOP_SITES {
        let rest = sites.split_off(TOP_SITES);
        sites.push(SiteBytes {
            site: format!("({} other sites)", rest.len()),
            bytes: total(rest.iter().map(|s| s.bytes)),
            blocks: total(rest.iter().map(|s| s.blocks)),
            stack: None,
        });
    }
    sites
}

/// Analyses every device of `snap`.
pub fn analyze_snapshot(snap: &Snapshot) -> SnapshotAnalysis {
    let mut indexes: Vec<u32> = snap.segments.iter().map(|s| s.device).collect();
    indexes.extend(
        snap.devices
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_empty())
            .map(|(i, _)| i as u32),
    );
    indexes.sort_unstable();
    indexes.dedup();
    let names = Sites::new(snap);
    let devices: Vec<DeviceAnalysis> = indexes
        .into_iter()
        .map(|d| device(snap, &names, d))
        .collect();
    let expandable_segments = snap
        .setting("expandable_segments")
        .is_some_and(|v| v == "True")
        || snap
            .setting("PYTORCH_CUDA_ALLOC_CONF")
            .is_some_and(|v| v.contains("expandable_segments:True"));
    SnapshotAnalysis {
        devices,
        expandable_segments,
    }
}

fn device(snap: &Snapshot, names: &Sites, index: u32) -> DeviceAnalysis {
    let segments: Vec<_> = snap.segments.iter().filter(|s| s.device == index).collect();
    let events: &[oomscope_snapshot::Event] =
        snap.devices.get(index as usize).map_or(&[], Vec::as_slice);
    let active = |s: BlockState| s != BlockState::Inactive;
    let blocks = || segments.iter().flat_map(|s| s.blocks.iter());
    let reserved_bytes = total(segments.iter().map(|s| s.total_size));
    let active_bytes = total(blocks().filter(|b| active(b.state)).map(|b| b.size));
    let allocated_bytes = total(
        blocks()
            .filter(|b| b.state == BlockState::ActiveAllocated)
            .map(|b| b.size),
    );
    let inactive_split_bytes = total(
        segments
            .iter()
            .filter(|s| s.blocks.iter().any(|b| active(b.state)))
            .flat_map(|s| s.blocks.iter())
            .filter(|b| b.state == BlockState::Inactive)
            .map(|b| b.size),
    );
    let largest_free_block_bytes = blocks()
        .filter(|b| b.state == BlockState::Inactive)
        .map(|b| b.size)
        .max()
        .unwrap_or(0);
    let rounding_bytes = total(
        blocks()
            .filter(|b| active(b.state))
            .map(|b| b.size.saturating_sub(b.requested_size)),
    );

    let begin = start(snap, index);
    let active_before_bytes = begin.active_bytes;

    // Replay: active and reserved after each entry, the peak, the OOMs.
    let mut peak = begin.active_bytes;
    let (mut peak_at, mut peak_time) = (None::<usize>, 0u64);
    let mut peak_reserved = begin.reserved_bytes;
    let mut ooms = Vec::new();
    let slice = events.len().div_ceil(TIMELINE_POINTS).max(1);
    let mut timeline: Vec<(u64, u64, u64)> = Vec::with_capacity(TIMELINE_POINTS + 1);
    for step in replay(events, begin) {
        let (i, e) = (step.index, step.event);
        let (av, rv) = (step.active_bytes, step.reserved_bytes);
        if e.action == Action::Oom {
            ooms.push(SnapshotOom {
                time_us: e.time_us,
                site: names.of(e.stack).to_owned(),
                requested_bytes: e.size,
                device_free_bytes: e.device_free_bytes(),
                active_bytes: av,
                reserved_bytes: rv,
            });
        }
        if av > peak {
            (peak, peak_at, peak_time) = (av, Some(i), e.time_us);
        }
        peak_reserved = peak_reserved.max(rv);
        match timeline.last_mut() {
            Some(last) if i % slice != 0 => {
                last.1 = last.1.max(av);
                last.2 = last.2.max(rv);
            }
            _ => timeline.push((e.time_us, av, rv)),
        }
    }

    // Alive at the peak: replay the allocations up to it.
    let at_peak = match peak_at {
        Some(end) => {
            let mut live: HashMap<u64, (u64, Option<StackId>)> = HashMap::default();
            for e in &events[..=end] {
                match e.action {
                    Action::Alloc => {
                        live.insert(e.addr, (e.size, e.stack));
                    }
                    Action::FreeCompleted => {
                        live.remove(&e.addr);
                    }
                    _ => {}
                }
            }
            // Blocks freed in the window but allocated before it make the live set smaller than
            // the replayed total: the difference was allocated before the window.
            let placed = total(live.values().map(|(s, _)| *s));
            let mut sites = by_site(names, live.into_values());
            let before = peak.saturating_sub(placed);
            if before > 0 {
                sites.push(SiteBytes {
                    site: oomscope_snapshot::timeline::BEFORE_WINDOW.to_owned(),
                    bytes: before,
                    blocks: 0,
                    stack: None,
                });
                crate::sort::sort_by_key(&mut sites, |s| std::cmp::Reverse(s.bytes));
            }
            sites
        }
        // The peak is the state before the first entry (or there are no entries): the end's
        // blocks are the best account of it only when nothing changed.
        None => Vec::new(),
    };
    let kept = kept_sites(names, events);
    let at_end = by_site(
        names,
        blocks()
            .filter(|b| active(b.state))
            .map(|b| (b.size, b.stack)),
    );
    let span_us = match (events.first(), events.last()) {
        (Some(f), Some(l)) if f.time_us > 0 => Some((f.time_us, l.time_us)),
        _ => None,
    };
    DeviceAnalysis {
        device: index,
        events: events.len(),
        span_us,
        active_before_bytes,
        timeline,
        peak_active_bytes: peak.max(active_bytes),
        peak_time_us: peak_time,
        peak_reserved_bytes: peak_reserved.max(reserved_bytes),
        at_peak,
        at_end,
        reserved_bytes,
        allocated_bytes,
        active_bytes,
        inactive_split_bytes,
        largest_free_block_bytes,
        rounding_bytes,
        ooms,
        kept,
    }
}

/// A site's recorded allocations: how many, their bytes, the first and last time, and whether
/// any of them was freed.
#[derive(Debug, Default, Clone, Copy)]
struct SiteTally {
    blocks: u64,
    bytes: u64,
    t0: u64,
    t1: u64,
    freed: bool,
}

/// Sites whose recorded allocations were never freed in the recording and are spread across it
/// ([`KEPT_MIN_BLOCKS`], [`KEPT_MIN_BYTES`], [`KEPT_MIN_SPREAD_PERMILLE`]).
fn kept_sites(names: &Sites, events: &[oomscope_snapshot::Event]) -> Vec<KeptSite> {
    let (Some(first), Some(last)) = (events.first(), events.last()) else {
        return Vec::new();
    };
    let span = last.time_us.saturating_sub(first.time_us).max(1);
    // Per site: its allocations (a site any of whose allocations was freed is not one that kept
    // memory, so only never-freed sites' tallies are read: all their allocations are live).
    // Sites are found once per stack, addresses once per entry: millions of entries, few sites.
    let mut tallies: Vec<(&str, SiteTally)> = Vec::new();
    let mut by_name: HashMap<&str, usize> = HashMap::default();
    let mut by_stack: HashMap<Option<StackId>, usize> = HashMap::default();
    let mut owner: HashMap<u64, usize> = HashMap::default();
    for e in events {
        match e.action {
            Action::Alloc => {
                let site = *by_stack.entry(e.stack).or_insert_with(|| {
                    let name = names.of(e.stack);
                    *by_name.entry(name).or_insert_with(|| {
                        tallies.push((name, SiteTally::default()));
                        tallies.len() - 1
                    })
                });
                let t = &mut tallies[site].1;
                t.t0 = if t.blocks == 0 {
                    e.time_us
                } else {
                    t.t0.min(e.time_us)
                };
                t.t1 = t.t1.max(e.time_us);
                t.blocks += 1;
                t.bytes = t.bytes.saturating_add(e.size);
                owner.insert(e.addr, site);
            }
            Action::FreeCompleted => {
                if let Some(site) = owner.remove(&e.addr) {
                    tallies[site].1.freed = true;
                }
            }
            _ => {}
        }
    }
    let mut kept: Vec<KeptSite> = tallies
        .into_iter()
        .filter(|(site, t)| !t.freed && t.blocks > 0 && !site.starts_with('('))
        .filter_map(|(site, t)| {
            let (blocks, bytes, t0, t1) = (t.blocks, t.bytes, t.t0, t.t1);
            let spread_permille =
                (u128::from(t1.saturating_sub(t0)) * 1000 / u128::from(span)) as u64;
            (blocks >= KEPT_MIN_BLOCKS
                && bytes >= KEPT_MIN_BYTES
                && spread_permille >= KEPT_MIN_SPREAD_PERMILLE)
                .then_some(KeptSite {
                    site: site.to_owned(),
                    blocks,
                    bytes,
                    spread_permille,
                })
        })
        .collect();
    crate::sort::sort_by(&mut kept, |a, b| {
        b.bytes.cmp(&a.bytes).then_with(|| a.site.cmp(&b.site))
    });
    kept
}

/// A device's findings: its first OOM, the sites that kept memory, fragmentation.
fn findings_of(d: &DeviceAnalysis, expandable: bool) -> Vec<Finding<SnapshotDetail>> {
    let mut out = Vec::new();
    if let Some(o) = d.ooms.first() {
        let free_cached = d.reserved_bytes.saturating_sub(d.active_bytes);
        let fragmented =
            free_cached >= o.requested_bytes && d.largest_free_block_bytes < o.requested_bytes;
        // All the process could have had: what it reserved plus what the device had free.
        let capacity = o
            .reserved_bytes
            .saturating_add(o.device_free_bytes.unwrap_or(0));
        let cause = if o.device_free_bytes.is_some() && o.requested_bytes > capacity {
            OomCause::TooLarge
        } else if fragmented && !expandable {
            OomCause::Fragmented {
                free_cached_bytes: free_cached,
                largest_free_block_bytes: d.largest_free_block_bytes,
            }
        } else {
            OomCause::Short
        };
        out.push(Finding {
            severity: Severity::Critical,
            evidence: vec![
                Evidence::bytes(K::RequestedBytes, o.requested_bytes as f64),
                Evidence::bytes(K::DeviceFreeBytes, o.device_free_bytes.unwrap_or(0) as f64),
                Evidence::bytes(K::ActiveBytes, o.active_bytes as f64),
                Evidence::bytes(K::ReservedBytes, o.reserved_bytes as f64),
                Evidence::bytes(K::LargestFreeBlockBytes, d.largest_free_block_bytes as f64),
                Evidence::count(K::Ooms, d.ooms.len() as f64),
            ],
            detail: SnapshotDetail::Oom(SnapshotOomFound {
                device: d.device,
                oom: o.clone(),
                ooms: d.ooms.len(),
                holders: d
                    .at_peak
                    .iter()
                    .filter(|s| s.site != NO_STACK)
                    .take(3)
                    .cloned()
                    .collect(),
                cause,
            }),
        });
    }
    for k in &d.kept {
        out.push(Finding {
            severity: Severity::Warning,
            evidence: vec![
                Evidence::bytes(K::KeptBytes, k.bytes as f64),
                Evidence::count(K::KeptBlocks, k.blocks as f64),
                Evidence::share(K::SpreadOfRecording, k.spread_permille as f64 / 1000.0),
            ],
            detail: SnapshotDetail::Kept {
                device: d.device,
                site: k.clone(),
            },
        });
    }
    // Fragmented: much free memory inside segments in use, and no free block near its size
    // (one large free block serves any request up to its size).
    if d.inactive_split_bytes >= fragmentation_min_gap_bytes(d.reserved_bytes)
        && d.largest_free_block_bytes.saturating_mul(2) < d.inactive_split_bytes
    {
        let f = SnapshotFragmentation {
            device: d.device,
            inactive_split_bytes: d.inactive_split_bytes,
            reserved_bytes: d.reserved_bytes,
            largest_free_block_bytes: d.largest_free_block_bytes,
            expandable,
        };
        out.push(Finding {
            severity: Severity::Warning,
            evidence: vec![
                Evidence::bytes(K::InactiveSplitBytes, d.inactive_split_bytes as f64),
                Evidence::bytes(K::ReservedBytes, d.reserved_bytes as f64),
                Evidence::share(K::InactiveSplitFraction, f.share()),
                Evidence::bytes(K::LargestFreeBlockBytes, d.largest_free_block_bytes as f64),
            ],
            detail: SnapshotDetail::Fragmented(f),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_snapshot::{Block, Event, Frame, Segment, site_of};

    fn frame(file: &str, line: u64) -> Frame {
        Frame {
            filename: file.to_owned(),
            line,
            name: "f".to_owned(),
        }
    }

    #[test]
    fn the_site_is_the_first_user_frame_innermost_first() {
        let snap = Snapshot {
            frames: vec![
                frame(
                    "/usr/lib/python3/site-packages/torch/nn/modules/linear.py",
                    125,
                ),
                frame("??", 0),
                frame("/home/me/train.py", 42),
                frame("/home/me/main.py", 7),
            ],
            stacks: vec![vec![0, 1, 2, 3], vec![0, 1], vec![]],
            ..Snapshot::default()
        };
        assert_eq!(site_of(&snap, Some(0)), "train.py:42 (f)");
        assert_eq!(site_of(&snap, Some(1)), "linear.py:125 (f)");
        assert_eq!(site_of(&snap, Some(2)), "(no stack recorded)");
        assert_eq!(site_of(&snap, None), "(no stack recorded)");
    }

    #[test]
    fn the_peak_is_replayed_from_the_end_state_and_the_entries() {
        use oomscope_format::units::MIB;
        let ev = |action, addr, size, t| Event {
            action,
            addr,
            size,
            stream: 0,
            time_us: t,
            stack: Some(0),
        };
        // 100 MiB alive from before the window; +300 MiB, +200 MiB, then the 300 freed.
        let snap = Snapshot {
            frames: vec![frame("train.py", 9)],
            stacks: vec![vec![0]],
            segments: vec![Segment {
                device: 0,
                address: 0,
                total_size: 1024 * MIB,
                allocated_size: 300 * MIB,
                active_size: 300 * MIB,
                stream: 0,
                large: true,
                expandable: false,
                blocks: vec![
                    Block {
                        address: 0,
                        size: 100 * MIB,
                        requested_size: 100 * MIB,
                        state: BlockState::ActiveAllocated,
                        stack: None,
                    },
                    Block {
                        address: 400 * MIB,
                        size: 200 * MIB,
                        requested_size: 150 * MIB,
                        state: BlockState::ActiveAllocated,
                        stack: Some(0),
                    },
                    Block {
                        address: 600 * MIB,
                        size: 424 * MIB,
                        requested_size: 0,
                        state: BlockState::Inactive,
                        stack: None,
                    },
                ],
            }],
            devices: vec![vec![
                ev(Action::Alloc, 100 * MIB, 300 * MIB, 1),
                ev(Action::Alloc, 400 * MIB, 200 * MIB, 2),
                ev(Action::FreeRequested, 100 * MIB, 300 * MIB, 3),
                ev(Action::FreeCompleted, 100 * MIB, 300 * MIB, 4),
            ]],
            ..Snapshot::default()
        };
        let a = analyze_snapshot(&snap);
        let d = &a.devices[0];
        assert_eq!(d.active_before_bytes, 100 * MIB);
        assert_eq!(d.peak_active_bytes, 600 * MIB);
        assert_eq!(d.peak_time_us, 2);
        assert_eq!(d.at_peak[0].site, "train.py:9 (f)");
        assert_eq!(d.at_peak[0].bytes, 500 * MIB);
        assert_eq!(d.at_peak[1].site, "(allocated before the recorded window)");
        assert_eq!(d.at_peak[1].bytes, 100 * MIB);
        assert_eq!(d.active_bytes, 300 * MIB);
        assert_eq!(d.rounding_bytes, 50 * MIB);
        assert_eq!(d.inactive_split_bytes, 424 * MIB);
        assert_eq!(d.largest_free_block_bytes, 424 * MIB);
        assert_eq!(d.timeline.last(), Some(&(4, 300 * MIB, 1024 * MIB)));
        // 424 MiB free of 1 GiB reserved: under the 1 GiB gap threshold, no fragmentation.
        assert!(a.findings().is_empty(), "{:?}", a.findings());
    }
}

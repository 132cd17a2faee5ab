//! Private memory growing in the program's other processes: the copy-on-write "DataLoader leak".
//!
//! A forked DataLoader worker starts sharing every page of its parent. When it reads a dataset
//! held as Python objects (lists of dicts, strings, numbers), CPython updates each object's
//! reference count, which writes to the page and makes the kernel copy it: the worker's private
//! memory climbs epoch after epoch until it holds a copy of the dataset, once per worker, and the
//! host OOM killer steps in. The parent's RSS shows nothing; summed RSS showed it from the start
//! (counting shared pages per worker). Only each worker's private bytes tell it apart, so the
//! collector records them ([`oomscope_format::ProcessMemory`]) and this module fits each worker's
//! private bytes against time.
//!
//! A worker started by `spawn` or a fork server (Python 3.14's default on Linux) shares nothing
//! of its parent's: it is an interpreter of its own, whose private memory at first is its own
//! start-up (the interpreter, `import torch`: ~270 MiB). Its growth is measured from the first
//! mark after its first reading, when the program had its first batch and the worker had started
//! ([`WorkerGrowth::start`] says how it was started).

use serde::Serialize;

use crate::fit::{least_squares, robust_line};
use oomscope_format::{ProcessRole, StartMethod, Trace};

/// A worker's private growth below this is not reported: the worker's own start-up (its
/// interpreter, its imports, its first batches' buffers) stays under it. The same floor as a
/// leak's (`leaks::MIN_GROWTH_BYTES`), chosen on its own: the leak fits read workers, not the
/// other way round.
pub const MIN_GROWTH_BYTES: u64 = 64 << 20;

/// Readings of one worker a fit needs.
pub const MIN_READINGS: usize = 4;

/// Time the readings must span.
pub const MIN_SPAN_US: u64 = 4_000_000;

/// R² a worker's growth needs.
pub const MIN_R_SQUARED: f64 = 0.8;

/// A worker that copied what it read and levelled off (it has read the whole dataset: an epoch
/// or a shuffled pass over it) grew over at least this many intervals between readings...
pub const MIN_RISING_INTERVALS: usize = 3;

/// ...none of which holds more than this share of the growth: a copy made page by page as the
/// rows are read, not a buffer allocated at once (a worker's prefetch or decode buffers).
pub const MAX_ONE_INTERVAL_SHARE: f64 = 0.75;

/// Host memory that grows, over time or step by step, is the workers' copies when their private
/// growth together is at least this share of it: one finding tells it, the workers'. Not all:
/// a line through a copy that levelled off overstates the tree's rise (a hooked run's PSS rose
/// 717 MiB by its fit while two workers copied 600 MiB).
///
/// First set at 0.7 on `cow_dataloader.py` (python_hooks_findings.rs, `v1_10_cow_workers.oomt`: 0.84).
/// Checked on the zoo's `cow_text_corpus.py`, a new shape, it held by too little (0.73 under the
/// suite's load: 1.04 times it), so it was set again on both: 0.6 (the copies of forked workers
/// never make all of a tree's growth: a line through a copy that levels off overstates it).
/// Checked now on `cow_records.py` where its growth decides (`scripts/zoo_thresholds.py`).
pub const WORKERS_EXPLAIN_FRACTION: f64 = 0.6;

/// One worker whose private memory grows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkerGrowth {
    /// The process.
    pub pid: u32,
    /// How it was started (the collector reads its command line): a forked worker copies its
    /// parent's pages, a spawned or fork-server one grows its own memory.
    pub start: StartMethod,
    /// Private bytes at the first reading (of a spawned or fork-server worker: the first after
    /// its start-up).
    pub first_private_bytes: u64,
    /// Private bytes at the last reading.
    pub last_private_bytes: u64,
    /// Fitted growth per second.
    pub slope_bytes_per_s: f64,
    /// R² of the fit.
    pub r_squared: f64,
    /// Readings.
    pub readings: usize,
    /// Still growing at the last readings (the second half's slope at least half the whole
    /// fit's); `false` for a worker that copied what it read and levelled off.
    pub still_growing: bool,
    /// First reading.
    pub from_us: u64,
    /// Last reading.
    pub to_us: u64,
    /// What its PSS rose for each byte its private memory rose, from its first reading to its
    /// last (`None` without a rise or PSS readings): 1 for memory of its own, less for pages it
    /// copied from its parent (see [`OWN_MEMORY_PSS_SHARE`]).
    pub pss_per_private: Option<f64>,
}

impl WorkerGrowth {
    /// Whether what it grew is memory of its own, not copies of its parent's pages: an
    /// interpreter of its own (spawn, fork server), or a forked worker whose PSS rose as much as
    /// its private memory.
    pub fn grows_its_own(&self) -> bool {
        own_interpreter(self.start)
            || (self.start == StartMethod::Fork
                && self
                    .pss_per_private
                    .is_some_and(|share| share >= OWN_MEMORY_PSS_SHARE))
    }
}

/// A forked worker whose PSS rose at least this much for each private byte grew memory of its
/// own (a cache of decoded items, prefetched batches): a page it allocates adds a whole page to
/// its PSS. A page it copies adds N/(N+1) of one with N forked workers sharing it with their
/// parent, and its siblings' copies of pages it still shares raise its PSS too (each by
/// 1/(N(N+1))): at most 0.83 with 2 workers, 0.92 with 3, 0.95 with 4. So the share tells
/// copies from memory of its own only with [`MAX_FORKED_TOLD_BY_PSS`] workers or fewer. Set on
/// the zoo's forked workers that cache decoded items (`spawn_workers.py --context fork`, 3
/// workers: 1.00) against two that copy (`cow_text_corpus.py`, 3 workers, and `cow_records.py`,
/// 2: 0.66–0.78); checked on `fork_worker_cache.py` and on `cow_dataloader.py`
/// (python_hooks_findings.rs), which must still be told as copies.
pub const OWN_MEMORY_PSS_SHARE: f64 = 0.95;

/// See [`OWN_MEMORY_PSS_SHARE`]: with more forked workers growing, their growth is told as
/// copies (the copy-on-write story), as before the share was read.
pub const MAX_FORKED_TOLD_BY_PSS: usize = 3;

/// Whether what these workers grew is memory of their own, not copies of their parent's pages:
/// all interpreters of their own (spawn, fork server), or all forked, at most
/// [`MAX_FORKED_TOLD_BY_PSS`] of them, each [`WorkerGrowth::grows_its_own`].
pub fn grow_their_own(workers: &[WorkerGrowth]) -> bool {
    let forked = workers.iter().all(|w| w.start == StartMethod::Fork);
    workers.iter().all(|w| own_interpreter(w.start))
        || (forked
            && workers.len() <= MAX_FORKED_TOLD_BY_PSS
            && workers.iter().all(WorkerGrowth::grows_its_own))
}

/// The workers (other processes of the tree) whose private memory grows steadily by at least
/// [`MIN_GROWTH_BYTES`] over [`MIN_SPAN_US`] or more (or copied what they read, page by page, however
/// short they lived), most growth first. A process that trains
/// or starts those that do is no worker, whatever its parent: one that sent stage marks, a rank
/// or a launcher. Under a launcher
/// that starts the training script as its child (`accelerate launch` on one process, a shell
/// wrapper) the script's private memory grows as it loads torch and builds its model: its own
/// memory, not pages copied from its parent.
#[cfg(test)] // the batch form, the folds' oracle in the tests
pub fn growing_workers(trace: &Trace) -> Vec<WorkerGrowth> {
    growing_workers_with(trace, &MarkingPids::new(trace))
}

/// The processes that sent marks, each once: what [`growing_workers`] reads of the marks (a
/// day's trace has millions), kept as a fold a live view extends with the marks appended
/// ([`crate::Prepared`]) rather than reading every mark again each refresh. Equal to
/// [`MarkingPids::new`] of the same marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkingPids {
    /// The marks read.
    marks: usize,
    /// Sorted.
    pids: Vec<u32>,
}

impl MarkingPids {
    /// The processes that sent the marks of `trace`.
    pub fn new(trace: &Trace) -> MarkingPids {
        let mut pids = MarkingPids::default();
        pids.extend(trace);
        pids
    }

    /// Takes in the marks `trace` has beyond those read (all again should it have fewer).
    pub fn extend(&mut self, trace: &Trace) {
        if trace.marks.len() < self.marks {
            *self = MarkingPids::default();
        }
        let mut last = None;
        for pid in trace.marks[self.marks..].iter().filter_map(|m| m.pid) {
            // Runs of one sender's marks: one search a run.
            if last != Some(pid) {
                if let Err(at) = self.pids.binary_search(&pid) {
                    self.pids.insert(at, pid);
                }
                last = Some(pid);
            }
        }
        self.marks = trace.marks.len();
    }

    /// Whether `pid` sent a mark.
    pub fn contains(&self, pid: u32) -> bool {
        self.pids.binary_search(&pid).is_ok()
    }
}

/// [`growing_workers`] of `trace`, the processes that sent its marks read into `marking`.
pub fn growing_workers_with(trace: &Trace, marking: &MarkingPids) -> Vec<WorkerGrowth> {
    // The program itself and the job's ranks train, and so does a marking process whose parent
    // does not mark (the script a launcher such as `accelerate launch --cpu` starts). A marking
    // child of a marking process (a `multiprocessing.Pool` worker training a model of its own, a
    // Hogwild trainer) is still a worker whose private memory is told as such. A marking process
    // the recorder did not see start (no PROCESS record: an older trace, a sender outside the
    // tree) counts as the program.
    let trains = |pid: u32| {
        let seen = trace.processes.iter().rev().find(|p| p.pid == pid);
        let parent_marks = seen
            .and_then(|p| p.parent_pid)
            .is_some_and(|parent| marking.contains(parent));
        pid == trace.metadata.pid
            || seen.is_some_and(|p| matches!(p.role, ProcessRole::Rank | ProcessRole::Launcher))
            || (marking.contains(pid) && (seen.is_none() || !parent_marks))
    };
    let end_us = crate::peaks::program_end_us(trace);
    let mut pids: Vec<u32> = trace.process_memory.iter().map(|p| p.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    pids.retain(|pid| !trains(*pid));
    let mut out: Vec<WorkerGrowth> = pids
        .into_iter()
        .filter_map(|pid| {
            // One walk of the readings a process up to the program's end: (time, private bytes)
            // of every reading, (PSS, private bytes) of those with PSS. A worker read during the
            // interpreter's shutdown, freeing what it kept, is teardown, not the run.
            let mut readings: Vec<(u64, u64)> = Vec::new();
            let mut pss: Vec<(u64, u64)> = Vec::new();
            for p in trace
                .process_memory
                .iter()
                .filter(|p| p.pid == pid && end_us.is_none_or(|end| p.t_us <= end))
            {
                readings.push((p.t_us, p.private_bytes));
                if p.pss_bytes > 0 {
                    pss.push((p.pss_bytes, p.private_bytes));
                }
            }
            let start = trace
                .processes
                .iter()
                .rev()
                .find(|p| p.pid == pid)
                .map_or(StartMethod::Unknown, |p| p.start);
            if own_interpreter(start) {
                // Its start-up is its own, not growth: from the first reading at or after the
                // first mark after its first reading (the program had a batch: the worker had
                // started).
                let first_t = readings.first()?.0;
                if let Some(mark) = trace.marks.iter().find(|m| m.t_us > first_t) {
                    let from = readings.partition_point(|r| r.0 < mark.t_us);
                    readings.drain(..from.min(readings.len() - 1));
                }
            }
            let (first, last) = (readings.first()?, readings.last()?);
            if readings.len() < MIN_READINGS {
                return None;
            }
            let xy: Vec<(f64, f64)> = readings
                .iter()
                .map(|&(t, v)| (t as f64 / 1e6, v as f64))
                .collect();
            let span_s = (last.0 - first.0) as f64 / 1e6;
            let line = robust_line(&xy)?.line;
            let sustained = least_squares(&xy[xy.len() / 2..])
                .is_some_and(|half| half.slope >= 0.5 * line.slope);
            // A steady rise needs the span; a copy made page by page (`copied`) is told by its
            // rises, however short the worker lived (a worker of one 4-second epoch, started
            // anew each epoch: the DataLoader's default).
            let grows = last.0.saturating_sub(first.0) >= MIN_SPAN_US
                && line.slope > 0.0
                && line.r_squared >= MIN_R_SQUARED
                && sustained
                && line.slope * span_s >= MIN_GROWTH_BYTES as f64;
            (grows || copied(&readings)).then_some(WorkerGrowth {
                pid,
                start,
                first_private_bytes: first.1,
                last_private_bytes: last.1,
                slope_bytes_per_s: line.slope,
                r_squared: line.r_squared,
                readings: readings.len(),
                still_growing: grows,
                from_us: first.0,
                to_us: last.0,
                pss_per_private: match (pss.first(), pss.last()) {
                    (Some(a), Some(b)) if b.1 > a.1 && b.0 >= a.0 => {
                        Some((b.0 - a.0) as f64 / (b.1 - a.1) as f64)
                    }
                    _ => None,
                },
            })
        })
        .collect();
    crate::sort::sort_by(&mut out, |a, b| {
        let growth = |w: &WorkerGrowth| w.last_private_bytes.saturating_sub(w.first_private_bytes);
        growth(b).cmp(&growth(a))
    });
    out
}

/// Whether a worker started so is an interpreter of its own (spawn, fork server), not a copy
/// of its parent.
pub fn own_interpreter(start: StartMethod) -> bool {
    matches!(start, StartMethod::Spawn | StartMethod::Forkserver)
}

/// A worker's private memory that rose by at least [`MIN_GROWTH_BYTES`] over the readings,
/// page by page ([`MIN_RISING_INTERVALS`], none more than [`MAX_ONE_INTERVAL_SHARE`] of it),
/// never falling back by more than a tenth of it: a copy of what it read, whether or not it has
/// levelled off since.
fn copied(readings: &[(u64, u64)]) -> bool {
    let (Some(first), Some(last)) = (readings.first(), readings.last()) else {
        return false;
    };
    let growth = last.1.saturating_sub(first.1);
    if growth < MIN_GROWTH_BYTES {
        return false;
    }
    let rises: Vec<u64> = readings
        .windows(2)
        .map(|w| w[1].1.saturating_sub(w[0].1))
        .filter(|&r| r > 0)
        .collect();
    let falls_back = readings
        .windows(2)
        .any(|w| w[0].1.saturating_sub(w[1].1) > growth / 10);
    rises.len() >= MIN_RISING_INTERVALS
        && !falls_back
        && rises
            .iter()
            .all(|&r| r as f64 <= MAX_ONE_INTERVAL_SHARE * growth as f64)
}

impl crate::fold::Fold for MarkingPids {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = MarkingPids::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        MarkingPids::extend(self, input.trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::ProcessMemory;

    use oomscope_format::units::MIB;

    fn with(readings: &[(u32, u64, u64)]) -> Trace {
        let mut trace = Trace::default();
        for &(pid, t_s, private_mib) in readings {
            trace.process_memory.push(ProcessMemory {
                t_us: t_s * 1_000_000,
                pid,
                private_bytes: private_mib * MIB,
                pss_bytes: private_mib * MIB,
            });
        }
        trace
    }

    #[test]
    fn a_forked_worker_whose_pss_rose_with_its_private_memory_grows_its_own() {
        // Private memory 10 -> 300 MiB over 6 readings; PSS rising as much (a cache of its own)
        // or 0.7 as much (pages copied from the 4 processes sharing them).
        let worker = |pss_share: f64| {
            let mut trace = Trace::default();
            trace.processes.push(oomscope_format::ProcessInfo {
                pid: 7,
                start: StartMethod::Fork,
                ..oomscope_format::ProcessInfo::default()
            });
            for i in 0..6u64 {
                let private = (10 + 58 * i) * MIB;
                trace.process_memory.push(ProcessMemory {
                    t_us: i * 1_000_000,
                    pid: 7,
                    private_bytes: private,
                    pss_bytes: 90 * MIB + (pss_share * (58 * i * MIB) as f64) as u64,
                });
            }
            growing_workers(&trace).remove(0)
        };
        let own = worker(1.0);
        assert!(own.grows_its_own(), "{own:#?}");
        let copies = worker(0.7);
        assert!(!copies.grows_its_own(), "{copies:#?}");
        assert!((copies.pss_per_private.unwrap() - 0.7).abs() < 0.01);
        // Told so for a few workers only: with four, copies can raise the share to 0.95 too.
        assert!(grow_their_own(&vec![own.clone(); 3]));
        assert!(!grow_their_own(&vec![own.clone(); 4]));
        assert!(!grow_their_own(&[own, copies]));
    }

    #[test]
    fn a_worker_that_copied_its_dataset_and_levelled_off_is_found_and_a_buffer_is_not() {
        // As recorded: two DataLoader workers over 300 000 rows of Python lists, one epoch.
        let mut readings = Vec::new();
        for (t, mib) in [(0, 14), (1, 92), (2, 153), (5, 255), (8, 305), (10, 313)] {
            readings.push((101, t, mib));
            // A worker that allocates its buffers at once and stays there.
            readings.push((102, t, if t == 0 { 14 } else { 300 }));
            // One that grows and gives it back.
            readings.push((103, t, [14, 100, 200, 300, 100, 14][readings.len() / 3 % 6]));
        }
        let found = growing_workers(&with(&readings));
        assert_eq!(found.iter().map(|w| w.pid).collect::<Vec<_>>(), [101]);
        assert!(!found[0].still_growing);
        assert_eq!(found[0].last_private_bytes, 313 * MIB);
    }

    #[test]
    fn a_worker_copying_its_parent_s_pages_is_found_and_a_flat_one_is_not() {
        let mut readings = Vec::new();
        for t in 0..10 {
            readings.push((101, t, 10 + 40 * t)); // +40 MiB/s
            readings.push((102, t, 12)); // flat
        }
        let found = growing_workers(&with(&readings));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].pid, 101);
        assert!((found[0].slope_bytes_per_s - (40 * MIB) as f64).abs() < 1.0);
        // A worker that copied once at start-up and then stayed is not growing.
        let warmup: Vec<(u32, u64, u64)> = (0..10)
            .map(|t| (103, t, if t < 2 { 10 + 100 * t } else { 210 }))
            .collect();
        assert!(growing_workers(&with(&warmup)).is_empty());
        // Too short to tell.
        let short: Vec<(u32, u64, u64)> = (0..3).map(|t| (104, t, 10 + 100 * t)).collect();
        assert!(growing_workers(&with(&short)).is_empty());
    }

    #[test]
    fn a_process_that_trains_is_no_worker() {
        let readings: Vec<(u32, u64, u64)> = (0..10).map(|t| (105, t, 8 + 40 * t)).collect();
        assert_eq!(growing_workers(&with(&readings)).len(), 1);
        // The training script a launcher started: it sends the stage marks.
        let mut trace = with(&readings);
        trace.marks.push(oomscope_format::StageMark {
            name: "pre_forward".into(),
            pid: Some(105),
            ..Default::default()
        });
        assert!(growing_workers(&trace).is_empty());
        // A rank (its marks aside).
        let mut trace = with(&readings);
        trace.processes.push(oomscope_format::ProcessInfo {
            pid: 105,
            role: ProcessRole::Rank,
            rank: Some(1),
            ..Default::default()
        });
        assert!(growing_workers(&trace).is_empty());
    }

    #[test]
    fn the_marks_senders_folded_are_those_read_anew() {
        let mut trace = Trace::default();
        let mut kept = MarkingPids::default();
        let senders = [
            Some(5),
            None,
            Some(3),
            Some(5),
            Some(5),
            Some(9),
            Some(3),
            None,
        ];
        for (i, pid) in senders.into_iter().enumerate() {
            trace.marks.push(oomscope_format::StageMark {
                t_us: i as u64,
                name: "s".into(),
                pid,
                ..Default::default()
            });
            kept.extend(&trace);
            assert_eq!(kept, MarkingPids::new(&trace), "after mark {i}");
        }
        assert_eq!(kept.pids, [3, 5, 9]);
        assert!(kept.contains(9) && !kept.contains(4));
        // Fewer marks than read: read again.
        trace.marks = trace.marks.filter(|m| m.pid == Some(3));
        kept.extend(&trace);
        assert_eq!(kept.pids, [3]);
    }
}

//! State shared by the threads of one `collector run`: the clock, the stop flag, drop counters,
//! the watched process tree, and the latest readings the status line shows. Everything is an
//! atomic or a short-held lock, so no thread ever waits on another for long.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use oomscope_format::CounterId;
use oomscope_format::protocol::Message;

/// "No reading" in an atomic slot.
pub const UNKNOWN: u64 = u64::MAX;

/// Latest value and peak of one reading.
#[derive(Debug)]
pub struct Gauge {
    current: AtomicU64,
    peak: AtomicU64,
}

impl Gauge {
    /// A gauge with no reading.
    pub fn new() -> Gauge {
        Gauge {
            current: AtomicU64::new(UNKNOWN),
            peak: AtomicU64::new(0),
        }
    }

    /// Records a reading.
    pub fn set(&self, value: u64) {
        self.current.store(value, Ordering::Relaxed);
        self.peak.fetch_max(value, Ordering::Relaxed);
    }

    /// The latest reading.
    pub fn current(&self) -> Option<u64> {
        let v = self.current.load(Ordering::Relaxed);
        (v != UNKNOWN).then_some(v)
    }

    /// The highest reading so far (0 before any).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Default for Gauge {
    fn default() -> Gauge {
        Gauge::new()
    }
}

/// What every thread of a run can see.
#[derive(Debug)]
pub struct RunState {
    start: Instant,
    /// `CLOCK_MONOTONIC` at `start`, microseconds: what a sender's `at` time is measured from.
    start_mono_us: u64,
    /// Set when the run is over: threads finish their current iteration and return.
    stop: AtomicBool,
    /// Wakes the threads that sleep between rare tasks (poller, status line) when the run ends,
    /// so that they sleep whole intervals instead of waking every few milliseconds to look.
    stop_signal: (Mutex<bool>, std::sync::Condvar),
    /// Wakes the poller early (the tree changed: read PSS for the new tree now).
    poll_signal: (Mutex<bool>, std::sync::Condvar),
    /// Samples dropped because the recorder fell behind.
    pub dropped_samples: AtomicU64,
    /// Marker messages dropped because the recorder fell behind.
    pub dropped_messages: AtomicU64,
    /// Marker lines that were not valid messages.
    pub rejected_lines: AtomicU64,
    /// The run time up to which the inbox has read the marks (the sampler's last drain or
    /// wait): the recorder holds a stderr OOM until the program's marks before it are in.
    pub inbox_read_us: AtomicU64,
    /// The watched process tree (root first), refreshed by the slow poller.
    pub tree: Mutex<Vec<u32>>,
    /// Every process ever seen in the tree (sorted): whose OOM kills are the program's.
    pub seen_pids: Mutex<Vec<u32>>,
    /// Bumped whenever `tree` changes, so the sampler reopens files only then.
    pub tree_generation: AtomicU64,
    /// Per watched GPU: memory used by the process tree (slow poll).
    pub process_gpu_bytes: Vec<Gauge>,
    /// Per watched GPU: device memory used.
    pub gpu_used: Vec<Gauge>,
    /// Per watched GPU: device memory used when the poller last asked NVML per process.
    gpu_used_at_query: Vec<AtomicU64>,
    /// Set when the device's use moved since that query: the poller asks again soon.
    gpu_query_wanted: AtomicBool,
    /// Per watched GPU: total memory.
    pub gpu_total_bytes: Vec<u64>,
    /// Per watched GPU: its device index (`--gpus 2` watches one GPU, index 2).
    pub gpu_indices: Vec<u32>,
    /// Host RSS of the tree.
    pub host_rss: Gauge,
    /// Host available memory.
    pub host_available: Gauge,
    /// The tree's last PSS reading and the processes it was read for (multi-process trees only):
    /// the sampler carries PSS forward between readings by the change in its own RSS reading
    /// since it first saw this one, and writes none for a tree not read yet.
    pub host_pss: Mutex<Option<(u64, Vec<u32>)>>,
    /// Host total memory.
    pub host_total_bytes: AtomicU64,
    /// Current stage and step as the program last said (for the status line).
    pub stage: Mutex<(String, u64)>,
    /// Readings and marker messages taken and not yet written.
    pub pending: PendingQueue,
    /// Who the tree's processes are (ranks, launcher, workers).
    pub processes: Mutex<super::processes::Processes>,
    /// Mirrors the registry's generation: the sampler re-reads the ranks when it moves.
    pub ranks_generation: AtomicU64,
    /// The per-process counters (a rank's RSS, its memory on each GPU): the sampler asks for an
    /// id, the recorder declares it before the first row that uses it.
    pub pid_counters: Mutex<PidCounters>,
    /// Per-process device memory from the poller's last NVML query: (GPU index, pid, bytes) of
    /// the tree's ranks.
    pub pid_gpu_bytes: Mutex<Vec<(u32, u32, u64)>>,
}

/// Ids of per-process counters, handed out before they are declared.
///
/// Why: ranks appear while the run goes on, and only the recorder owns the writer. The sampler
/// takes a provisional id here (counted from [`PidCounters::PROVISIONAL`], far above any declared
/// id) and uses it in its rows; the recorder declares each pending counter before writing the
/// next rows and maps the provisional id to the declared one.
#[derive(Debug, Default)]
pub struct PidCounters {
    ids: std::collections::HashMap<(oomscope_format::CounterKind, Option<u32>, u32), CounterId>,
    pending: Vec<PidCounter>,
}

/// A per-process counter to declare: its provisional id, kind, device and pid.
pub type PidCounter = (CounterId, oomscope_format::CounterKind, Option<u32>, u32);

impl PidCounters {
    /// First provisional id.
    pub const PROVISIONAL: u32 = 1 << 24;

    /// The provisional id of a process's counter (the same one every time).
    pub fn id(
        &mut self,
        kind: oomscope_format::CounterKind,
        device: Option<u32>,
        pid: u32,
    ) -> CounterId {
        let next = CounterId(Self::PROVISIONAL + self.ids.len() as u32);
        *self.ids.entry((kind, device, pid)).or_insert_with(|| {
            self.pending.push((next, kind, device, pid));
            next
        })
    }

    /// The counters to declare now, in the order their ids were handed out.
    pub fn take_pending(&mut self) -> Vec<PidCounter> {
        std::mem::take(&mut self.pending)
    }
}

/// One sampling instant: its time and counter values.
pub type SampleRow = (u64, Vec<(CounterId, u64)>);

/// What waits for the recorder in time order: a reading, or a marker message (stamped with when
/// it happened and the sender's pid; see [`super::inbox`]).
#[derive(Debug)]
pub enum Pending {
    /// A reading.
    Row(SampleRow),
    /// A marker message.
    Message {
        /// When it arrived.
        t_us: u64,
        /// What it said (boxed: a record is ten times a row's size).
        message: Box<Message>,
        /// The pid the kernel states for the datagram.
        sender: Option<u32>,
    },
}

impl Pending {
    fn t_us(&self) -> u64 {
        match self {
            Pending::Row((t_us, _)) | Pending::Message { t_us, .. } => *t_us,
        }
    }
}

/// Readings and marker messages on their way from the sampler to the recorder, in time order.
///
/// Why not the event channel: an item through the channel wakes the recorder each time (a futex
/// wake-up in both threads): a row per tick was a quarter of the collector's CPU at 1 kHz, and a
/// fast loop's six marks a step as much again (2026-11-26). Here the sampler appends under an
/// uncontended lock and nudges the recorder every [`PendingQueue::NUDGE_EVERY`]; the recorder
/// takes what waits up to the time of any event from elsewhere (a stderr OOM) before handling
/// it, so the trace stays in time order and an OOM meets the stage its process marked last.
#[derive(Debug, Default)]
pub struct PendingQueue {
    items: Mutex<VecDeque<Pending>>,
}

impl PendingQueue {
    /// Most items waiting; past it new ones are dropped (and counted): the recorder is stuck.
    pub const MAX_ITEMS: usize = 1 << 16;
    /// How often the sampler wakes the recorder to write what waits.
    pub const NUDGE_EVERY: Duration = Duration::from_millis(50);

    /// Adds an item in time order (the sampler's come in order; an item from another thread,
    /// the tch `Session`'s, may be a little older than the last and goes before it); `false`
    /// when it was dropped.
    pub fn push(&self, item: Pending) -> bool {
        let Ok(mut items) = self.items.lock() else {
            return false;
        };
        if items.len() >= Self::MAX_ITEMS {
            return false;
        }
        let t_us = item.t_us();
        if items.back().is_none_or(|last| last.t_us() <= t_us) {
            items.push_back(item);
        } else {
            let at = items.partition_point(|i| i.t_us() <= t_us);
            items.insert(at, item);
        }
        true
    }

    /// Moves the items taken at or before `t_us` into `out`, oldest first.
    pub fn take_through(&self, t_us: u64, out: &mut Vec<Pending>) {
        if let Ok(mut items) = self.items.lock() {
            let n = items.partition_point(|item| item.t_us() <= t_us);
            out.extend(items.drain(..n));
        }
    }
}

/// `CLOCK_MONOTONIC` now, microseconds (the clock `Instant` reads on Linux, and Python's
/// `time.monotonic_ns`).
pub(crate) fn monotonic_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec it is given a valid pointer to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000
        + u64::try_from(ts.tv_nsec).unwrap_or(0) / 1_000
}

impl RunState {
    /// State for a run watching these GPUs.
    pub fn new(gpus: &[oomscope_format::GpuInfo], root_pid: u32) -> RunState {
        let gpu_total_bytes: Vec<u64> = gpus.iter().map(|g| g.total_memory_bytes).collect();
        let gpu_indices = gpus.iter().map(|g| g.index).collect();
        let gpus = gpu_total_bytes.len();
        RunState {
            start: Instant::now(),
            start_mono_us: monotonic_us(),
            stop: AtomicBool::new(false),
            stop_signal: (Mutex::new(false), std::sync::Condvar::new()),
            poll_signal: (Mutex::new(false), std::sync::Condvar::new()),
            dropped_samples: AtomicU64::new(0),
            dropped_messages: AtomicU64::new(0),
            rejected_lines: AtomicU64::new(0),
            inbox_read_us: AtomicU64::new(0),
            tree: Mutex::new(vec![root_pid]),
            seen_pids: Mutex::new(vec![root_pid]),
            tree_generation: AtomicU64::new(1),
            process_gpu_bytes: (0..gpus).map(|_| Gauge::new()).collect(),
            gpu_used: (0..gpus).map(|_| Gauge::new()).collect(),
            gpu_used_at_query: (0..gpus).map(|_| AtomicU64::new(UNKNOWN)).collect(),
            gpu_query_wanted: AtomicBool::new(false),
            gpu_total_bytes,
            gpu_indices,
            host_rss: Gauge::new(),
            host_available: Gauge::new(),
            host_pss: Mutex::new(None),
            host_total_bytes: AtomicU64::new(0),
            stage: Mutex::new((String::new(), 0)),
            pending: PendingQueue::default(),
            processes: Mutex::new(super::processes::Processes::new(root_pid)),
            ranks_generation: AtomicU64::new(0),
            pid_counters: Mutex::new(PidCounters::default()),
            pid_gpu_bytes: Mutex::new(Vec::new()),
        }
    }

    /// Microseconds since the run started (the trace's clock).
    pub fn now_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// A sender's `CLOCK_MONOTONIC` time (microseconds) on the trace's clock; `None` when it
    /// is not within the run so far (another clock: a time namespace, a bad sender).
    pub fn trace_time_of(&self, mono_us: u64) -> Option<u64> {
        let t_us = mono_us.checked_sub(self.start_mono_us)?;
        (t_us <= self.now_us()).then_some(t_us)
    }

    /// Whether the run is over.
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Ends the run: every thread finishes its current iteration, sleepers wake at once.
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        let (stopped, wake) = &self.stop_signal;
        if let Ok(mut stopped) = stopped.lock() {
            *stopped = true;
        }
        wake.notify_all();
        self.wake_poller();
    }

    /// The sampler's reading of GPU `i`'s used memory. When it moved by
    /// [`RunState::GPU_REQUERY_BYTES`] since the poller's last per-process query, the poller is
    /// woken to ask again: per-process memory only changes when some process's allocator grows or
    /// shrinks, and a once-a-second query missed the whole peak of a run shorter than a second
    /// past its growth (the H200 proof: the process figure stayed at the model's load while the
    /// allocator reserved 0.7 GiB more, so the memory outside the allocator went unsaid).
    pub fn gpu_used_read(&self, i: usize, used_bytes: u64) {
        let Some(gauge) = self.gpu_used.get(i) else {
            return;
        };
        gauge.set(used_bytes);
        let at = self.gpu_used_at_query[i].load(Ordering::Relaxed);
        if at == UNKNOWN {
            // The poller's first query came before the sampler's first reading: this is the
            // use that query saw, near enough (else no growth would ask again until the next
            // scheduled query).
            self.gpu_used_at_query[i].store(used_bytes, Ordering::Relaxed);
        } else if used_bytes.abs_diff(at) >= Self::GPU_REQUERY_BYTES
            && !self.gpu_query_wanted.swap(true, Ordering::Relaxed)
        {
            self.wake_poller();
        }
    }

    /// How far the device's use moves before per-process memory is asked again: the allocator
    /// grows by 2 MiB blocks at the least.
    pub const GPU_REQUERY_BYTES: u64 = 2 << 20;

    /// The poller asks NVML per process now: remembers each device's use at this moment and
    /// clears the request.
    pub fn gpu_queried(&self) {
        self.gpu_query_wanted.store(false, Ordering::Relaxed);
        for (at, gauge) in self.gpu_used_at_query.iter().zip(&self.gpu_used) {
            at.store(gauge.current().unwrap_or(UNKNOWN), Ordering::Relaxed);
        }
    }

    /// Whether the device's use moved since the last per-process query.
    pub fn gpu_query_wanted(&self) -> bool {
        self.gpu_query_wanted.load(Ordering::Relaxed)
    }

    /// Wakes the poller now.
    pub fn wake_poller(&self) {
        let (requested, wake) = &self.poll_signal;
        if let Ok(mut requested) = requested.lock() {
            *requested = true;
        }
        wake.notify_all();
    }

    /// The poller's sleep: `duration`, or less when the run ends or [`RunState::wake_poller`]
    /// is called.
    pub fn poller_sleep(&self, duration: Duration) {
        let (requested, wake) = &self.poll_signal;
        if let Ok(guard) = requested.lock()
            && let Ok((mut guard, _)) =
                wake.wait_timeout_while(guard, duration, |r| !*r && !self.stopping())
        {
            *guard = false;
        }
    }

    /// Sleeps for `duration`, or less when the run ends meanwhile (one wake-up, not a poll).
    pub fn sleep_unless_stopping(&self, duration: Duration) {
        let (stopped, wake) = &self.stop_signal;
        if let Ok(guard) = stopped.lock() {
            let _ = wake.wait_timeout_while(guard, duration, |stopped| !*stopped);
        }
    }

    /// Runs `f` on the process registry and returns the records it made; the sampler learns of
    /// any change of the ranks.
    pub fn with_processes(
        &self,
        f: impl FnOnce(&mut super::processes::Processes) -> Vec<oomscope_format::Record>,
    ) -> Vec<oomscope_format::Record> {
        let Ok(mut processes) = self.processes.lock() else {
            return Vec::new();
        };
        let records = f(&mut processes);
        self.ranks_generation
            .store(processes.generation, Ordering::Relaxed);
        records
    }

    /// The watched processes.
    pub fn tree(&self) -> Vec<u32> {
        self.tree.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Replaces the watched tree (when it changed), remembers its processes and tells the sampler
    /// to reopen its files.
    pub fn set_tree(&self, tree: &[u32]) {
        let Ok(mut shared) = self.tree.lock() else {
            return;
        };
        if shared.as_slice() == tree {
            return;
        }
        shared.clear();
        shared.extend_from_slice(tree);
        drop(shared);
        if let Ok(mut seen) = self.seen_pids.lock() {
            seen.extend_from_slice(tree);
            seen.sort_unstable();
            seen.dedup();
        }
        self.tree_generation.fetch_add(1, Ordering::Relaxed);
        self.wake_poller();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn a_stop_wakes_a_sleeper_at_once() {
        let state = Arc::new(RunState::new(&[], 1));
        let sleeper = {
            let state = Arc::clone(&state);
            std::thread::spawn(move || {
                let started = Instant::now();
                state.sleep_unless_stopping(Duration::from_secs(30));
                started.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        state.request_stop();
        assert!(sleeper.join().unwrap() < Duration::from_secs(5));
        assert!(state.stopping());
        // Once stopped, a sleep returns at once.
        let started = Instant::now();
        state.sleep_unless_stopping(Duration::from_secs(30));
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}

#[cfg(test)]
mod pending_tests {
    use super::*;

    fn times(items: &[Pending]) -> Vec<u64> {
        items.iter().map(Pending::t_us).collect()
    }

    #[test]
    fn items_are_taken_through_a_time_in_order_and_capped() {
        let pending = PendingQueue::default();
        for t in [10, 20, 30] {
            assert!(pending.push(Pending::Row((t, vec![(CounterId(0), t)]))));
            assert!(pending.push(Pending::Message {
                t_us: t,
                message: Box::new(Message::Step {
                    step: t,
                    epoch: None
                }),
                sender: None,
            }));
        }
        let mut out = Vec::new();
        pending.take_through(20, &mut out);
        assert_eq!(times(&out), [10, 10, 20, 20]);
        assert!(matches!(out[1], Pending::Message { .. }));
        pending.take_through(u64::MAX, &mut out);
        assert_eq!(times(&out), [10, 10, 20, 20, 30, 30]);
        for t in 0..PendingQueue::MAX_ITEMS as u64 {
            assert!(pending.push(Pending::Row((t, Vec::new()))));
        }
        assert!(
            !pending.push(Pending::Row((u64::MAX, Vec::new()))),
            "a full buffer drops"
        );
    }
}

//! The two sampling threads.
//!
//! The fast sampler reads device memory (NVML) and host memory (`/proc`) every interval on an
//! absolute schedule (it never drifts; after a stall it skips ahead instead of bursting), has the
//! [`super::inbox`] read the marks between ticks (taking the readings that go with them), and
//! hands everything to the recorder without blocking, through [`PendingQueue`] (nudging the
//! recorder now and then). The slow poller finds the process tree and asks NVML for per-process
//! GPU memory once a second, because that query holds the driver's global lock, and again within
//! ~0.1 s when the fast sampler sees a device's use move (a process's allocator grew or shrank).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use oomscope_format::{CounterId, CounterKind, Record};

use super::event::Event;
use super::inbox::{Inbox, MarkerSocket, Readings};
use super::pss::{ANON_POLL, PssSchedule, read_pss};
use super::shared_state::{Pending, PendingQueue, RunState};
use crate::gpu::Gpus;
use crate::host::{LastPid, MemInfo, TreeRss, process_tree};

/// Counter ids of one watched GPU.
#[derive(Debug, Clone, Copy)]
pub struct GpuCounters {
    /// Device used.
    pub used: CounterId,
    /// Device free.
    pub free: CounterId,
    /// Driver reserved.
    pub reserved: CounterId,
    /// Process-tree memory.
    pub process: CounterId,
}

/// Counter ids of a run.
#[derive(Debug, Clone)]
pub struct Counters {
    /// Per watched GPU.
    pub gpus: Vec<GpuCounters>,
    /// Host RSS of the tree.
    pub host_rss: CounterId,
    /// Host available memory.
    pub host_available: CounterId,
    /// Host PSS of the tree.
    pub host_pss: CounterId,
    /// Resident file-backed and shared pages of the tree.
    pub host_rss_file: CounterId,
    /// Bytes in use on `/dev/shm`.
    pub shm_used: CounterId,
    /// `/dev/shm`'s size.
    pub shm_size: CounterId,
}

/// What the fast sampler reads.
#[derive(Clone, Copy)]
pub struct Sources<'a> {
    /// The watched GPUs, when NVML is available.
    pub gpus: Option<&'a Gpus>,
    /// Counter ids of the row.
    pub counters: &'a Counters,
    /// Extra readings appended to every row.
    pub extra: Option<ExtraReadings<'a>>,
}

/// A mark triggers an immediate reading unless one was taken this recently (bounds the cost of a
/// flood of marks to one reading per this interval).
pub(crate) const MIN_MARK_READING_GAP_US: u64 = 200;

/// Extra readings a sampler takes on every tick (e.g. the caching allocator's statistics when
/// a tch program records itself): it appends (counter, value) pairs to the row.
pub type ExtraReadings<'a> = &'a (dyn Fn(&mut Vec<(CounterId, u64)>) + Sync);

/// The fast sampler's readers and buffers.
struct Reader<'a> {
    state: &'a RunState,
    /// The recorder's channel (a nudge when rows wait).
    events: &'a SyncSender<Event>,
    gpus: Option<&'a Gpus>,
    counters: &'a Counters,
    extra: Option<ExtraReadings<'a>>,
    rss: TreeRss,
    meminfo: Option<MemInfo>,
    /// Watches for new processes, so a new worker or rank is in the RSS from its first tick.
    last_pid: Option<LastPid>,
    seen_last_pid: Option<u32>,
    last_rescan: Instant,
    generation: u64,
    /// The processes `rss` reads.
    tree: Vec<u32>,
    /// The PSS reading in use and this sampler's RSS when it first saw it.
    pss_anchor: Option<(u64, u64)>,
    row: Vec<(CounterId, u64)>,
    /// The last tick's row, which a sender's own reading at a mark completes.
    tick_row: Vec<(CounterId, u64)>,
    last_t_us: Option<u64>,
    /// The time of the last row or message handed to the recorder (times only grow there).
    pushed_t_us: u64,
    /// When the recorder was last told that rows are waiting.
    last_nudge: Instant,
    /// The ranks (pid, rank) and the registry generation they were read at.
    ranks: Vec<(u32, u32)>,
    ranks_generation: u64,
    /// Each rank's RSS counter (provisional ids from [`RunState::pid_counters`]).
    pid_rss: HashMap<u32, CounterId>,
    /// Each (GPU index, pid)'s device-memory counter.
    pid_gpu: HashMap<(u32, u32), CounterId>,
}

/// After a process of the tree is born, the tree is walked again no sooner than this.
const MIN_RESCAN_GAP: Duration = Duration::from_millis(20);

impl Reader<'_> {
    /// The tree's PSS now, given its RSS now. One process shares nothing within the tree: its
    /// PSS is its RSS (and nothing is locked). Several: the poller's last reading of exactly
    /// these processes, moved by the RSS change since this sampler first saw it (new memory is
    /// the process's own); none for a tree not read yet rather than a wrong one.
    fn pss(&mut self, rss: u64) -> Option<u64> {
        if self.tree.len() < 2 {
            return Some(rss);
        }
        let reading = self.state.host_pss.lock().ok().and_then(|r| {
            r.as_ref()
                .filter(|(_, tree)| *tree == self.tree)
                .map(|(p, _)| *p)
        })?;
        if self.pss_anchor.is_none_or(|(p, _)| p != reading) {
            self.pss_anchor = Some((reading, rss));
        }
        self.pss_anchor
            .map(|(p, rss_then)| (p + rss).saturating_sub(rss_then).min(rss))
    }

    /// Walks the process tree again when the newest pid the kernel handed out belongs to a child
    /// of the tree (and [`MIN_RESCAN_GAP`] has passed): a DataLoader worker or a rank is counted
    /// from the next tick instead of at the poller's next round, up to a second later. Any
    /// process born on the host changes the last pid (on a busy host, every tick), so only its
    /// parent is read (one small file); walking the tree on every birth cost 0.05–0.1% of a core
    /// at 100 Hz. A process born just before an unrelated one waits for the poller.
    fn rescan_on_birth(&mut self) {
        let Some(newest) = self.last_pid.as_mut().and_then(LastPid::read) else {
            return;
        };
        if self.seen_last_pid == Some(newest) || self.last_rescan.elapsed() < MIN_RESCAN_GAP {
            return;
        }
        self.seen_last_pid = Some(newest);
        if !crate::host::parent_of(newest).is_some_and(|parent| self.tree.contains(&parent)) {
            return;
        }
        self.last_rescan = Instant::now();
        let state = self.state;
        let Some(root) = state.tree.lock().ok().and_then(|t| t.first().copied()) else {
            return;
        };
        let tree = process_tree(root);
        state.set_tree(&tree);
    }

    /// Each rank's RSS (from the readings just taken) and its memory on each GPU (the poller's
    /// last per-process query), as per-process counters.
    fn per_rank(&mut self) {
        let state = self.state;
        let generation = state.ranks_generation.load(Ordering::Relaxed);
        if generation != self.ranks_generation {
            self.ranks_generation = generation;
            self.ranks = state
                .processes
                .lock()
                .map(|p| p.ranks())
                .unwrap_or_default();
        }
        if self.ranks.is_empty() {
            return;
        }
        for &(pid, _) in &self.ranks {
            let Some(bytes) = self.rss.rss_of(pid) else {
                continue;
            };
            let id = *self.pid_rss.entry(pid).or_insert_with(|| {
                state
                    .pid_counters
                    .lock()
                    .map(|mut c| c.id(CounterKind::PidRss, None, pid))
                    .unwrap_or(CounterId(u32::MAX))
            });
            self.row.push((id, bytes));
        }
        let Ok(gpu) = state.pid_gpu_bytes.lock() else {
            return;
        };
        for &(device, pid, bytes) in gpu.iter() {
            let id = *self.pid_gpu.entry((device, pid)).or_insert_with(|| {
                state
                    .pid_counters
                    .lock()
                    .map(|mut c| c.id(CounterKind::PidGpu, Some(device), pid))
                    .unwrap_or(CounterId(u32::MAX))
            });
            self.row.push((id, bytes));
        }
    }

    /// Hands the row to the recorder, stamped `t_us`.
    fn push_row(&mut self, t_us: u64) {
        let state = self.state;
        self.pushed_t_us = self.pushed_t_us.max(t_us);
        if !state.pending.push(Pending::Row((t_us, self.row.clone()))) {
            state.dropped_samples.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A mark's reading from what its sender read of itself: the tree's memory as of the last
    /// tick with the sender's own replaced (its workers' memory moves on the tick's scale, its
    /// own at every stage), its rank's counter, and the PSS moved with it. Nothing when the
    /// sender was not read at the last tick (not in the tree, or new): the mark then reads the
    /// tick's values.
    fn sender_reading(&mut self, t_us: u64, sender: Option<u32>, rss_bytes: u64, file_bytes: u64) {
        let Some(pid) = sender else {
            return;
        };
        // As many readings as an untimed sender's marks get, no more: a mark sooner after the
        // last reading reads that one.
        if self
            .last_t_us
            .is_some_and(|last| t_us.saturating_sub(last) < MIN_MARK_READING_GAP_US)
        {
            return;
        }
        let Some((tree_rss, tree_file)) = self.rss.with_reading_of(pid, rss_bytes, file_bytes)
        else {
            return;
        };
        let pss = self.pss(tree_rss);
        // The last tick's row (the GPUs, MemAvailable: what a mark's look-back must always
        // find), with the host's memory as of this mark.
        self.row.clone_from(&self.tick_row);
        let mut set = |id: CounterId, value: u64| match self.row.iter_mut().find(|(i, _)| *i == id)
        {
            Some(cell) => cell.1 = value,
            None => self.row.push((id, value)),
        };
        set(self.counters.host_rss, tree_rss);
        set(self.counters.host_rss_file, tree_file);
        if let Some(&id) = self.pid_rss.get(&pid) {
            set(id, rss_bytes);
        }
        if let Some(pss) = pss {
            set(self.counters.host_pss, pss);
        }
        self.last_t_us = Some(t_us);
        self.push_row(t_us);
    }

    /// Reads every counter and sends the row stamped `t_us`.
    fn sample(&mut self, t_us: u64, at_mark: bool) -> bool {
        let state = self.state;
        // A mark's reading is the tree's memory; a fast loop sends thousands of marks a second,
        // so what changes only on the tick's scale is left to the ticks: a new process (it is in
        // the tree from the next tick) and the host's available memory (`/proc/meminfo`, a
        // quarter of the sampler's CPU when read at every mark; the analysis looks back to the
        // last tick's value).
        if !at_mark {
            self.rescan_on_birth();
        }
        let current = state.tree_generation.load(Ordering::Relaxed);
        if current != self.generation {
            self.tree = state.tree();
            self.rss.set_pids(&self.tree);
            self.generation = current;
        }
        self.row.clear();
        if let Some(gpus) = self.gpus {
            for (i, ids) in self.counters.gpus.iter().enumerate() {
                if let Some(m) = gpus.memory(i) {
                    self.row.extend([
                        (ids.used, m.used_bytes),
                        (ids.free, m.free_bytes),
                        (ids.reserved, m.reserved_bytes),
                    ]);
                    state.gpu_used_read(i, m.used_bytes);
                }
                if let Some(bytes) = state.process_gpu_bytes[i].current() {
                    self.row.push((ids.process, bytes));
                }
            }
        }
        if let Some(bytes) = self.rss.rss_bytes() {
            self.row.push((self.counters.host_rss, bytes));
            self.row
                .push((self.counters.host_rss_file, self.rss.file_bytes()));
            state.host_rss.set(bytes);
            let pss = self.pss(bytes);
            self.row
                .extend(pss.map(|pss| (self.counters.host_pss, pss)));
        }
        self.per_rank();
        if let Some(m) = self
            .meminfo
            .as_mut()
            .filter(|_| !at_mark)
            .and_then(MemInfo::read)
        {
            self.row
                .push((self.counters.host_available, m.available_bytes));
            state.host_available.set(m.available_bytes);
            state
                .host_total_bytes
                .store(m.total_bytes, Ordering::Relaxed);
        }
        // `/dev/shm` (one statvfs, ~1 us) at ticks: what DataLoader workers hand over lives
        // there, outside every process's RSS.
        if let Some((used, size)) = (!at_mark)
            .then(|| crate::host::filesystem_usage(crate::host::SHM_DIR))
            .flatten()
        {
            self.row.extend([
                (self.counters.shm_used, used),
                (self.counters.shm_size, size),
            ]);
        }
        if let Some(extra) = self.extra {
            extra(&mut self.row);
        }
        self.last_t_us = Some(t_us);
        if !at_mark {
            self.tick_row.clone_from(&self.row);
        }
        if self.row.is_empty() {
            return true;
        }
        self.push_row(t_us);
        if self.last_nudge.elapsed() < PendingQueue::NUDGE_EVERY {
            return true;
        }
        self.last_nudge = Instant::now();
        // A full channel is fine: the rows wait, and the recorder takes them at its next event.
        !matches!(
            self.events.try_send(Event::Pending),
            Err(TrySendError::Disconnected(_))
        )
    }
}

impl Readings for Reader<'_> {
    fn state(&self) -> &RunState {
        self.state
    }

    fn handed_through_us(&self) -> u64 {
        self.pushed_t_us
    }

    fn sender_reading(&mut self, t_us: u64, sender: Option<u32>, rss_bytes: u64, file_bytes: u64) {
        Reader::sender_reading(self, t_us, sender, rss_bytes, file_bytes);
    }

    fn mark_reading(&mut self, t_us: u64) {
        // At most one reading per [`MIN_MARK_READING_GAP_US`]: a flood of marks costs one.
        let recent = self
            .last_t_us
            .is_some_and(|last| t_us.saturating_sub(last) < MIN_MARK_READING_GAP_US);
        if !recent {
            self.sample(t_us, true);
        }
    }

    fn handed_on(&mut self, t_us: u64) {
        self.pushed_t_us = t_us;
    }
}

/// Runs the fast sampler until the run stops: a reading every `interval` on an absolute
/// schedule (after a stall it resumes from now instead of bursting), and between ticks it drains
/// the marker socket. A mark is stamped with the time it arrived and gets a reading stamped with
/// the same time, so the stage table sees memory as it was at the mark, not up to one interval
/// earlier — unless its sender timed it and read its own memory (`at`): then the mark keeps its
/// sender's time and reading, and from the first such message on the socket is drained every
/// [`Inbox::drain_every`] instead of waking the sampler for each datagram.
pub fn sample_loop(
    state: &RunState,
    sources: Sources<'_>,
    interval: Duration,
    socket: Option<&MarkerSocket>,
    events: &SyncSender<Event>,
) {
    let Sources {
        gpus,
        counters,
        extra,
    } = sources;
    let mut reader = Reader {
        state,
        events,
        gpus,
        counters,
        extra,
        rss: TreeRss::new(),
        meminfo: MemInfo::open().ok(),
        last_pid: LastPid::open().ok(),
        seen_last_pid: None,
        last_rescan: Instant::now(),
        generation: 0,
        tree: Vec::new(),
        pss_anchor: None,
        row: Vec::with_capacity(counters.gpus.len() * 4 + 2),
        tick_row: Vec::new(),
        last_t_us: None,
        pushed_t_us: 0,
        last_nudge: Instant::now(),
        ranks: Vec::new(),
        ranks_generation: 0,
        pid_rss: HashMap::new(),
        pid_gpu: HashMap::new(),
    };
    let mut inbox = Inbox::new(socket);
    let mut next = Instant::now();
    let mut next_drain = Instant::now();
    loop {
        // What was sent before now is read by the end of this turn (a drain, a wait, or none).
        let turn_us = state.now_us();
        let now = Instant::now();
        if now >= next {
            if let Some(socket) = socket.filter(|_| inbox.timed()) {
                inbox.drain(socket, &mut reader);
            }
            state.inbox_read_us.store(turn_us, Ordering::Relaxed);
            if state.stopping() || !reader.sample(state.now_us(), false) {
                break;
            }
            next += interval;
            if next < now {
                next = now + interval;
            }
            continue;
        }
        let Some(socket) = socket else {
            std::thread::sleep(next - now);
            continue;
        };
        if inbox.timed() {
            let wake = next_drain.min(next);
            if wake > now {
                std::thread::sleep(wake - now);
            }
            inbox.drain(socket, &mut reader);
            state.inbox_read_us.store(turn_us, Ordering::Relaxed);
            next_drain = Instant::now() + inbox.drain_every();
            continue;
        }
        inbox.wait(socket, next - now, &mut reader);
        state.inbox_read_us.store(turn_us, Ordering::Relaxed);
    }
    if let Some(socket) = socket {
        inbox.drain_all(socket, &mut reader);
    }
}

/// Said once when NVML names only processes this collector cannot see.
pub const FOREIGN_PIDS_NOTE: &str = "NVML names GPU processes that are not in this collector's pid namespace (a container without the host's pids: Kubernetes without hostPID, docker without --pid=host): per-process and per-rank GPU memory are not recorded; device totals are, and allocator figures from inside the program";

/// The shortest gap between two per-process GPU queries that a moving device use asks for.
const GPU_REQUERY_GAP: Duration = Duration::from_millis(100);

/// Runs the slow poller until the run stops: refreshes the process tree and per-process GPU
/// memory every `interval`.
pub fn poll_loop(
    state: &Arc<RunState>,
    root_pid: u32,
    gpus: Option<&Gpus>,
    interval: Duration,
    events: &SyncSender<Event>,
) {
    let mut last_tree = Vec::new();
    let mut pss = PssSchedule::new();
    let mut next_gpu = Instant::now();
    let mut last_gpu_query = Instant::now();
    let mut foreign_noted = false;
    while !state.stopping() {
        let tree = process_tree(root_pid);
        // The sampler may have walked the tree since (a birth it saw first): that is a change too.
        let changed = tree != last_tree || state.tree() != tree;
        // Processes still without an identity (a rank seen between its fork and its exec) are
        // read again at every poll, not only when the tree changes next.
        let now_us = state.now_us();
        let look_again = state
            .processes
            .lock()
            .is_ok_and(|p| p.wants_another_look(now_us));
        if changed || look_again {
            if changed {
                state.set_tree(&tree);
            }
            let records = state.with_processes(|p| p.observe_tree(&tree, state.now_us()));
            if !records.is_empty() {
                // Who the processes are must not be lost: the recorder never waits long.
                let _ = events.send(Event::Records(records));
            }
        }
        if changed {
            last_tree = tree;
            // A process came or went: its shared pages moved; read PSS again once the tree
            // settles and the cost budget allows (a program spawning processes all the time
            // cannot make it spin).
            pss.tree_changed(Instant::now());
        }
        // The per-process GPU query holds the driver's global lock: on its own schedule, not
        // again when a new process wakes the poller early for its PSS; sooner (never more often
        // than GPU_REQUERY_GAP) when a device's use moved since the last query.
        let now = Instant::now();
        let gpu_due = now >= next_gpu
            || (state.gpu_query_wanted() && now >= last_gpu_query + GPU_REQUERY_GAP);
        if let Some(gpus) = gpus
            && gpu_due
        {
            state.gpu_queried();
            last_gpu_query = Instant::now();
            next_gpu = last_gpu_query + interval;
            let ranks = state
                .processes
                .lock()
                .map(|p| p.ranks())
                .unwrap_or_default();
            let mut per_pid = Vec::new();
            let mut foreign = false;
            for i in 0..gpus.len() {
                let Some(processes) = gpus.processes(i) else {
                    continue;
                };
                let device = state.gpu_indices.get(i).copied().unwrap_or(0);
                let ours = processes.iter().filter(|(pid, _)| last_tree.contains(pid));
                state.process_gpu_bytes[i].set(ours.map(|(_, b)| *b).sum());
                per_pid.extend(
                    processes
                        .iter()
                        .filter(|(pid, _)| ranks.iter().any(|(r, _)| r == pid))
                        .map(|(pid, bytes)| (device, *pid, *bytes)),
                );
                foreign |= !processes.is_empty()
                    && processes
                        .iter()
                        .all(|(pid, _)| !std::path::Path::new(&format!("/proc/{pid}")).exists());
            }
            if let Ok(mut shared) = state.pid_gpu_bytes.lock() {
                *shared = per_pid;
            }
            if foreign && !foreign_noted {
                foreign_noted = true;
                let note = Record::Note(oomscope_format::Note {
                    t_us: state.now_us(),
                    text: FOREIGN_PIDS_NOTE.to_owned(),
                });
                let _ = events.send(Event::Records(vec![note]));
            }
        }
        read_pss(state, interval, &mut pss, events);
        let now = Instant::now();
        let gpu_at = if state.gpu_query_wanted() {
            next_gpu.min(last_gpu_query + GPU_REQUERY_GAP)
        } else {
            next_gpu
        };
        let until_gpu = gpu_at.saturating_duration_since(now);
        let sleep = if gpus.is_some() && !until_gpu.is_zero() {
            until_gpu
        } else {
            interval
        };
        // A changed tree's reading is due within the settle window, not a poll interval later
        // (never sooner than 10 ms: the tree walk each wake-up costs is not in the PSS budget).
        let sleep = pss
            .wait(now)
            .map_or(sleep, |w| sleep.min(w.max(Duration::from_millis(10))));
        // While a worker's memory grows, its anonymous memory is read every ANON_POLL in
        // between (without walking /proc for the tree: that waits for the next poll, or for a
        // birth the sampler saw).
        let until = Instant::now() + sleep;
        let woken = |state: &RunState| {
            state.stopping() || state.tree() != last_tree || state.gpu_query_wanted()
        };
        while pss.watching() && until.saturating_duration_since(Instant::now()) > ANON_POLL {
            state.poller_sleep(ANON_POLL);
            if woken(state) {
                break;
            }
            read_pss(state, interval, &mut pss, events);
        }
        if !woken(state) {
            state.poller_sleep(until.saturating_duration_since(Instant::now()));
        }
    }
}

//! When the tree's PSS is read ([`PssSchedule`]) and the reading itself ([`read_pss`]): each
//! reading walks every page table of the tree, so it runs on a CPU budget, sooner while a worker's
//! private memory grows and once a forking tree has settled. Its own module: the poller's most
//! tuned part, with its own tests.

use std::collections::HashMap;
use std::sync::mpsc::SyncSender;
use std::time::{Duration, Instant};

use oomscope_format::Record;

use super::event::Event;
use super::shared_state::RunState;

/// Reading the tree's PSS walks every page table of the tree (17 ms for 2 GiB on the development
/// VM), so it has a budget: this share of one core over time...
const PSS_CPU_SHARE: f64 = 0.01;

/// ...and this share while a process of the tree other than the program grew its private memory
/// by [`GROWING_PRIVATE_BYTES`] between two readings: copy-on-write workers of a large parent
/// (80 ms a reading for a 1.2 GiB parent and two workers) were read three times in their 15 s at
/// 1%, too few to call their growth (15 -> 100 -> 316 MiB each); at 3% ~6 times.
const PSS_CPU_SHARE_GROWING: f64 = 0.03;

/// Private growth of a worker between two readings that raises the budget (and growth of its
/// anonymous memory since the last reading that asks for the next at once,
/// [`PssSchedule::anon_now`]).
const GROWING_PRIVATE_BYTES: u64 = 16 << 20;

/// ...with bursts of up to this much (seconds), so that the workers a DataLoader starts are read
/// at once even when each reading is slow, while a program that spawns processes all the time
/// cannot make the poller walk page tables without pause.
const PSS_BURST_S: f64 = 0.1;

/// After the tree changes, its PSS is read once it has not changed for this long: a DataLoader
/// forks its workers ~10 ms apart, and reading each partial tree (17–43 ms each for a 256 MiB
/// parent) spent the burst before the whole tree was read, so workers shorter-lived than the
/// refill went unread (the forked-workers test failed 1 run in 10).
///
/// Set on `cow_dataloader.py`'s forked workers (python_hooks_findings.rs); checked on the zoo's
/// `cow_text_corpus.py` and `spawn_workers.py`: every worker read, their private bytes within
/// 10% of what the programs read of them themselves (0.95–1.00 seen; `scripts/zoo_thresholds.py`).
const PSS_SETTLE: Duration = Duration::from_millis(50);

/// ...but no later than this after the first change, for a program that forks without pause.
const PSS_SETTLE_MAX: Duration = Duration::from_millis(250);

/// While a worker's memory grows, its anonymous memory (`statm`, a few µs a worker) is polled
/// this often, so that the reading that finds it full comes soon after it stopped.
pub(super) const ANON_POLL: Duration = Duration::from_millis(250);

/// Growth between two polls under which a worker's memory has stopped rising (a page or a
/// batch, not a cache filling)...
const ANON_RISING_BYTES: u64 = 1 << 20;

/// ...in this many polls in a row (a worker starved of CPU on a loaded machine stalls for a
/// poll's time)...
const ANON_STILL_POLLS: u8 = 2;

/// ...each judged only over at least this long (an early wake, or the GPU query's schedule, can poll
/// again within milliseconds, when a filling cache has grown less than that).
const ANON_RISING_GAP: Duration = Duration::from_millis(200);

/// How far into debt (CPU seconds) the reading of workers whose memory just stopped rising may
/// run the budget: repaid before the next such reading may run into debt again, so readings of
/// a changed tree are not kept waiting by one debt after another.
const PSS_SETTLED_DEBT_S: f64 = PSS_BURST_S;

/// When the tree's PSS is read next: when `due` (a poll interval after the last reading, once a
/// changed tree has settled, or at once when a worker's anonymous memory rose) and the budget (a
/// token bucket of CPU seconds) is not spent.
pub(super) struct PssSchedule {
    due: Instant,
    /// When the tree began changing, while a read waits for it to settle.
    changing_since: Option<Instant>,
    /// A worker's anonymous memory moved by [`GROWING_PRIVATE_BYTES`] since the last reading: one
    /// is wanted as soon as the budget allows.
    moved: bool,
    /// ...and has stopped rising since the poll before: the reading that reads it full may run
    /// the budget into debt ([`PSS_SETTLED_DEBT_S`]).
    settled: bool,
    /// Each worker's anonymous bytes (`statm`, cheap) at the last reading.
    anon_bytes: HashMap<u32, u64>,
    /// ...and at the last poll that judged whether they still rise, and when.
    anon_polled_bytes: HashMap<u32, u64>,
    anon_polled_at: Option<Instant>,
    /// Polls in a row that found none rising ([`ANON_STILL_POLLS`]).
    still_polls: u8,
    /// The budget has been out of debt since the last reading that ran it into debt.
    debt_repaid: bool,
    tokens_s: f64,
    refilled: Instant,
    /// The budget's share of a core now ([`PSS_CPU_SHARE`] or [`PSS_CPU_SHARE_GROWING`]).
    share: f64,
    /// Each process's private bytes at the last reading (the program's left out).
    private: HashMap<u32, u64>,
}

impl PssSchedule {
    pub(super) fn new() -> PssSchedule {
        let now = Instant::now();
        PssSchedule {
            due: now,
            changing_since: None,
            moved: false,
            settled: false,
            anon_bytes: HashMap::new(),
            anon_polled_bytes: HashMap::new(),
            anon_polled_at: None,
            still_polls: 0,
            debt_repaid: true,
            tokens_s: PSS_BURST_S,
            refilled: now,
            share: PSS_CPU_SHARE,
            private: HashMap::new(),
        }
    }

    /// Whether a reading may start now.
    fn ready(&mut self, now: Instant) -> bool {
        let earned = now.saturating_duration_since(self.refilled).as_secs_f64() * self.share;
        self.tokens_s = (self.tokens_s + earned).min(PSS_BURST_S);
        self.refilled = now;
        self.debt_repaid |= self.tokens_s >= 0.0;
        now >= self.due
            && (self.tokens_s > 0.0
                || (self.settled && self.debt_repaid && self.tokens_s > -PSS_SETTLED_DEBT_S))
    }

    /// Whether the workers' anonymous memory is watched closely ([`ANON_POLL`]): one rose since
    /// the last reading, or grew between the last two.
    pub(super) fn watching(&self) -> bool {
        self.moved || self.share == PSS_CPU_SHARE_GROWING
    }

    /// The tree changed at `now`: read it once it has settled.
    pub(super) fn tree_changed(&mut self, now: Instant) {
        let since = *self.changing_since.get_or_insert(now);
        self.due = (now + PSS_SETTLE).min(since + PSS_SETTLE_MAX);
    }

    /// The workers' anonymous bytes now (read at each poll, cheap): a worker that allocated
    /// [`GROWING_PRIVATE_BYTES`] since the last reading wants one as soon as the budget
    /// allows, at the growing share; once none rose since the poll before ([`ANON_POLL`] ago
    /// while watched), at once, the budget run into debt if need be. Without it a worker whose
    /// cache filled between two readings of a large tree (a second or more apart) and that then
    /// ended with the program was never read full: the zoo's `fork_worker_cache.py` (caches full
    /// 1 s before the end) read 0.71–0.89 of its workers' memory after the zoo's cgroup
    /// programs, in CI and here.
    fn anon_now(&mut self, now: Instant, anon: impl Iterator<Item = (u32, u64)>) {
        let judged = self
            .anon_polled_at
            .is_none_or(|at| now.saturating_duration_since(at) >= ANON_RISING_GAP);
        let mut polled = HashMap::new();
        let (mut moved, mut rising) = (false, false);
        for (pid, bytes) in anon {
            moved |= self
                .anon_bytes
                .get(&pid)
                .is_some_and(|&then| bytes >= then + GROWING_PRIVATE_BYTES);
            if judged {
                rising |= self
                    .anon_polled_bytes
                    .get(&pid)
                    .is_none_or(|&then| bytes >= then + ANON_RISING_BYTES);
                polled.insert(pid, bytes);
            }
        }
        if judged {
            self.anon_polled_bytes = polled;
            self.anon_polled_at = Some(now);
            self.still_polls = if rising {
                0
            } else {
                self.still_polls.saturating_add(1)
            };
        }
        if moved {
            self.moved = true;
            self.share = PSS_CPU_SHARE_GROWING;
            self.due = self.due.min(now);
            self.settled = self.still_polls >= ANON_STILL_POLLS;
        }
    }

    /// A reading started at `start` of a tree that was `still` the same when it ended.
    /// `cost_s` is the poller's CPU time for it (not the wall time: on a loaded host a reading
    /// waits for a core, and charging the wait left workers' growth read too seldom to call).
    fn read(&mut self, start: Instant, cost_s: f64, still: bool, interval: Duration) {
        let now = Instant::now();
        self.tokens_s -= cost_s;
        self.debt_repaid &= self.tokens_s >= 0.0;
        self.moved = false;
        self.settled = false;
        if still {
            self.changing_since = None;
            self.due = start + interval;
        } else {
            self.tree_changed(now);
        }
    }

    /// The workers' private bytes just read (and their anonymous bytes, the mark
    /// [`PssSchedule::anon_now`] measures from): while one grows, readings come more often.
    fn workers_read(
        &mut self,
        private: impl Iterator<Item = (u32, u64)>,
        anon: impl Iterator<Item = (u32, u64)>,
    ) {
        self.anon_bytes = anon.collect();
        let last = std::mem::take(&mut self.private);
        let mut growing = false;
        for (pid, bytes) in private {
            growing |= last
                .get(&pid)
                .is_some_and(|&then| bytes >= then + GROWING_PRIVATE_BYTES);
            self.private.insert(pid, bytes);
        }
        self.share = if growing {
            PSS_CPU_SHARE_GROWING
        } else {
            PSS_CPU_SHARE
        };
    }

    /// The program is alone (its workers ended): nothing waits for a reading, and the next
    /// workers start from the plain share.
    fn alone(&mut self) {
        self.changing_since = None;
        self.moved = false;
        self.settled = false;
        self.anon_bytes.clear();
        self.anon_polled_bytes.clear();
        self.anon_polled_at = None;
        self.still_polls = 0;
        self.private.clear();
        self.share = PSS_CPU_SHARE;
    }

    /// How long the poller may sleep before a reading falls due, when one waits on a changed
    /// tree or on a worker whose memory rose (and the budget it waits for, if spent).
    pub(super) fn wait(&self, now: Instant) -> Option<Duration> {
        if self.changing_since.is_none() && !self.moved {
            return None;
        }
        let floor = if self.settled && self.debt_repaid {
            -PSS_SETTLED_DEBT_S
        } else {
            0.0
        };
        let refill = Duration::from_secs_f64((floor - self.tokens_s).max(0.0) / self.share);
        Some(self.due.saturating_duration_since(now).max(refill))
    }
}

/// Reads the tree's PSS when it has several processes and a reading is due; with one process
/// the sampler uses its RSS and no page tables are walked.
pub(super) fn read_pss(
    state: &RunState,
    interval: Duration,
    schedule: &mut PssSchedule,
    events: &SyncSender<Event>,
) {
    let tree = state.tree();
    if tree.len() < 2 {
        schedule.alone();
        if let Ok(mut r) = state.host_pss.lock() {
            *r = None;
        }
        return;
    }
    // Workers only: a rank grows its own memory (loading a model).
    let ranks: Vec<u32> = state
        .processes
        .lock()
        .map(|p| p.ranks().into_iter().map(|(pid, _)| pid).collect())
        .unwrap_or_default();
    let is_worker = |pid: u32| Some(pid) != tree.first().copied() && !ranks.contains(&pid);
    let workers_anon = || {
        tree.iter()
            .filter(|pid| is_worker(**pid))
            .filter_map(|&pid| Some((pid, crate::host::anon_bytes(pid)?)))
    };
    let start = Instant::now();
    // (Not while a changed tree settles: the poller then wakes every few milliseconds, and the
    // reading is near anyway.)
    if schedule.changing_since.is_none() {
        schedule.anon_now(start, workers_anon());
    }
    if !schedule.ready(start) {
        return;
    }
    let cpu_start = thread_cpu_s();
    // A reading a worker's growth asked for reads the workers alone: the program's page tables,
    // the largest (a 1 GiB interpreter with torch), cost most of a reading, and the tree's PSS
    // can wait for the next whole reading.
    let workers_only = schedule.moved && schedule.changing_since.is_none();
    let read: Vec<u32> = if workers_only {
        tree.iter().copied().filter(|pid| is_worker(*pid)).collect()
    } else {
        tree.clone()
    };
    let rollups = crate::host::tree_rollups(&read);
    let t_us = state.now_us();
    // Each process but the program itself, for the workers' private growth.
    for r in rollups
        .iter()
        .filter(|r| Some(r.pid) != tree.first().copied())
    {
        let record = Record::ProcessMemory(oomscope_format::ProcessMemory {
            t_us,
            pid: r.pid,
            private_bytes: r.private_bytes,
            pss_bytes: r.pss_bytes,
        });
        // Never wait for the recorder: a full channel loses one reading, not the run's pace.
        let _ = events.try_send(Event::Records(vec![record]));
    }
    schedule.workers_read(
        rollups
            .iter()
            .filter(|r| is_worker(r.pid))
            .map(|r| (r.pid, r.private_bytes)),
        workers_anon(),
    );
    let still = state.tree() == tree;
    if !rollups.is_empty()
        && !workers_only
        && let Ok(mut r) = state.host_pss.lock()
    {
        *r = Some((rollups.iter().map(|r| r.pss_bytes).sum(), tree));
    }
    // A tree that changed while it was read (workers forked one after another) is read again
    // once it settles: the sampler writes PSS only for the tree it sees.
    schedule.read(start, thread_cpu_s() - cpu_start, still, interval);
}

/// This thread's CPU time, seconds.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec it is given a valid pointer to.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_forking_workers_is_read_once_it_settles() {
        let mut s = PssSchedule::new();
        let t0 = Instant::now();
        // Four workers forked 10 ms apart: one reading, 50 ms after the last fork.
        for i in 0..4 {
            s.tree_changed(t0 + Duration::from_millis(10 * i));
        }
        assert!(!s.ready(t0 + Duration::from_millis(60)));
        assert!(s.ready(t0 + Duration::from_millis(80)));
        assert_eq!(
            s.wait(t0 + Duration::from_millis(60)),
            Some(Duration::from_millis(20))
        );
        // A program that never stops forking is read 250 ms after its first fork at the latest.
        let mut s = PssSchedule::new();
        for i in 0..100 {
            s.tree_changed(t0 + Duration::from_millis(10 * i));
        }
        assert!(s.ready(t0 + PSS_SETTLE_MAX));
    }

    #[test]
    fn a_worker_growing_its_private_memory_is_read_more_often() {
        let mut s = PssSchedule::new();
        s.workers_read(
            [(10, 15 << 20), (11, 15 << 20)].into_iter(),
            std::iter::empty(),
        );
        assert_eq!(s.share, PSS_CPU_SHARE);
        s.workers_read(
            [(10, 100 << 20), (11, 15 << 20)].into_iter(),
            std::iter::empty(),
        );
        assert_eq!(s.share, PSS_CPU_SHARE_GROWING);
        // Spent: the refill comes three times sooner.
        s.tokens_s = -0.03;
        s.changing_since = Some(Instant::now());
        let wait = s.wait(Instant::now()).unwrap();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        s.workers_read(
            [(10, 101 << 20), (11, 16 << 20)].into_iter(),
            std::iter::empty(),
        );
        assert_eq!(s.share, PSS_CPU_SHARE, "growth stopped");
    }

    #[test]
    fn a_spent_budget_is_waited_for_not_polled() {
        let mut s = PssSchedule::new();
        let t0 = Instant::now();
        s.tree_changed(t0);
        s.tokens_s = -0.05;
        // 50 ms of CPU over a 1% share: five seconds.
        let wait = s.wait(t0).unwrap();
        assert!(wait >= Duration::from_millis(4_900), "{wait:?}");
    }

    #[test]
    fn a_worker_that_allocated_since_the_last_reading_is_read_once_the_budget_allows() {
        let mut s = PssSchedule::new();
        let t0 = Instant::now();
        s.workers_read(
            [(10, 100 << 20)].into_iter(),
            [(10, 100 << 20), (11, 50 << 20)].into_iter(),
        );
        s.read(t0, 0.02, true, Duration::from_secs(1));
        assert_eq!(s.share, PSS_CPU_SHARE);
        // Less than the mark, or memory given back: no reading before it is due.
        s.anon_now(t0, [(10, 110 << 20), (11, 10 << 20)].into_iter());
        assert!(!s.moved && s.wait(t0).is_none());
        // 16 MiB more, the budget spent: due now, waiting only for the budget, refilled at the
        // growing share (10 ms of CPU at 3%: a third of a second, not a second).
        s.tokens_s = -0.01;
        s.anon_now(t0, [(10, 116 << 20), (11, 10 << 20)].into_iter());
        assert!(s.moved);
        assert_eq!(s.share, PSS_CPU_SHARE_GROWING);
        assert!(s.due <= t0);
        let wait = s.wait(t0).unwrap();
        assert!(
            wait > Duration::from_millis(300) && wait < Duration::from_millis(350),
            "{wait:?}"
        );
        assert!(!s.ready(t0 + wait / 2));
        assert!(s.ready(t0 + wait + Duration::from_millis(1)));
        s.read(t0 + wait, 0.02, true, Duration::from_secs(1));
        assert!(!s.moved);
        // The workers end before the next reading: nothing is waited for any more.
        s.anon_now(t0, [(10, 200 << 20)].into_iter());
        assert!(s.moved);
        s.alone();
        assert!(s.wait(t0).is_none());
        assert_eq!(s.share, PSS_CPU_SHARE);
    }

    #[test]
    fn workers_whose_memory_stopped_rising_are_read_at_once_into_debt() {
        let mut s = PssSchedule::new();
        let t0 = Instant::now();
        let poll = |k: u32| t0 + ANON_POLL * k;
        s.workers_read([(10, 100 << 20)].into_iter(), [(10, 100 << 20)].into_iter());
        s.read(t0, 0.02, true, Duration::from_secs(1));
        s.tokens_s = -0.05;
        // Rising: due, waiting for the budget (50 ms at 3%: 1.7 s).
        s.anon_now(poll(1), [(10, 150 << 20)].into_iter());
        s.anon_now(poll(2), [(10, 200 << 20)].into_iter());
        assert!(s.watching() && !s.settled);
        assert!(!s.ready(poll(2)));
        // Polled again a few ms later, 0.5 MiB more: too soon to tell it stopped.
        s.anon_now(
            poll(2) + Duration::from_millis(5),
            [(10, (200 << 20) + (512 << 10))].into_iter(),
        );
        assert!(!s.settled);
        // One still poll (a stall on a loaded machine) is not enough; two are: read now, the
        // budget run into debt.
        s.anon_now(poll(3), [(10, 200 << 20)].into_iter());
        assert!(!s.settled);
        s.anon_now(poll(4), [(10, 200 << 20)].into_iter());
        assert!(s.settled);
        assert_eq!(s.wait(poll(4)), Some(Duration::ZERO));
        assert!(s.ready(poll(4)));
        s.read(poll(4), 0.02, true, Duration::from_secs(1));
        assert!(!s.settled && !s.moved && !s.debt_repaid);
        // Grown and stopped again before the debt is repaid: waited for, not more debt.
        s.anon_now(poll(5), [(10, 300 << 20)].into_iter());
        s.anon_now(poll(6), [(10, 300 << 20)].into_iter());
        s.anon_now(poll(7), [(10, 300 << 20)].into_iter());
        assert!(s.settled && !s.ready(poll(7)));
        // Repaid (tokens back to 0 at 3%: ~2.5 s), then read.
        let repaid = poll(7) + Duration::from_secs(3);
        assert!(s.ready(repaid) && s.debt_repaid);
    }
}

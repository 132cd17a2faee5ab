//! The two sampling threads.
//!
//! The fast sampler reads device memory (NVML) and host memory (`/proc`) every interval on an
//! absolute schedule (it never drifts; after a stall it skips ahead instead of bursting) and hands
//! each row to the recorder with a non-blocking send. The slow poller finds the process tree and
//! asks NVML for per-process GPU memory about once a second, because that query holds the
//! driver's global lock.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};

use oomscope_trace::CounterId;

use super::Event;
use super::shared_state::RunState;
use crate::gpu::Gpus;
use crate::host::{MemInfo, TreeRss, process_tree};

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
}

/// Runs the fast sampler until the run stops.
pub fn sample_loop(
    state: &RunState,
    gpus: Option<&Gpus>,
    counters: &Counters,
    interval: Duration,
    events: &SyncSender<Event>,
) {
    let mut rss = TreeRss::new();
    let mut meminfo = MemInfo::open().ok();
    let mut generation = 0;
    let mut row = Vec::with_capacity(counters.gpus.len() * 4 + 2);
    let mut next = Instant::now();
    while !state.stopping() {
        let current = state.tree_generation.load(Ordering::Relaxed);
        if current != generation {
            rss.set_pids(&state.tree());
            generation = current;
        }
        let t_us = state.now_us();
        row.clear();
        if let Some(gpus) = gpus {
            for (i, ids) in counters.gpus.iter().enumerate() {
                if let Some(m) = gpus.memory(i) {
                    row.extend([
                        (ids.used, m.used_bytes),
                        (ids.free, m.free_bytes),
                        (ids.reserved, m.reserved_bytes),
                    ]);
                    state.gpu_used[i].set(m.used_bytes);
                }
                if let Some(bytes) = state.process_gpu_bytes[i].current() {
                    row.push((ids.process, bytes));
                }
            }
        }
        if let Some(bytes) = rss.rss_bytes() {
            row.push((counters.host_rss, bytes));
            state.host_rss.set(bytes);
        }
        if let Some(m) = meminfo.as_mut().and_then(MemInfo::read) {
            row.push((counters.host_available, m.available_bytes));
            state.host_available.set(m.available_bytes);
            state
                .host_total_bytes
                .store(m.total_bytes, Ordering::Relaxed);
        }
        if !row.is_empty() {
            match events.try_send(Event::Sample {
                t_us,
                values: row.clone(),
            }) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    state.dropped_samples.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
        next += interval;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Behind (the machine stalled us): resume the schedule from now rather than burst.
            next = now;
        }
    }
}

/// Runs the slow poller until the run stops: refreshes the process tree and per-process GPU
/// memory every `interval`.
pub fn poll_loop(state: &Arc<RunState>, root_pid: u32, gpus: Option<&Gpus>, interval: Duration) {
    let mut last_tree = Vec::new();
    while !state.stopping() {
        let tree = process_tree(root_pid);
        if tree != last_tree {
            if let Ok(mut shared) = state.tree.lock() {
                shared.clone_from(&tree);
            }
            state.tree_generation.fetch_add(1, Ordering::Relaxed);
            last_tree = tree;
        }
        if let Some(gpus) = gpus {
            for i in 0..gpus.len() {
                if let Some(bytes) = gpus.process_bytes(i, &last_tree) {
                    state.process_gpu_bytes[i].set(bytes);
                }
            }
        }
        // Sleep in short slices so that stopping is prompt.
        let until = Instant::now() + interval;
        while !state.stopping() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
}

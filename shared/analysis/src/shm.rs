//! Shared memory (`/dev/shm`): host memory the run uses outside its processes.
//!
//! DataLoader workers hand each batch to the main process through POSIX shared memory, a tmpfs
//! file per tensor, freed once the main process has taken it. Those pages count in no process's
//! RSS until one maps them, so the tree's memory does not show them; and the tmpfs has a size of
//! its own (half the host's memory by default, 64 MB in a Docker container unless `--shm-size`
//! says more). A worker whose batch does not fit fails ("unable to allocate shared memory(shm)",
//! a bus error) while the host has memory to spare, and the loop waits for a batch that never
//! comes. The collector samples the tmpfs's use and size (`ShmUsed`, `ShmSize`, format 1.13).

use serde::Serialize;

use crate::metrics::counter_with_data;
use oomscope_format::{CounterKind, Trace};

/// `/dev/shm` used at this share of its size or more is full: the next batch a worker hands over
/// may not fit (a batch is often several MiB; the tmpfs rounds to pages and holds other files).
/// Also full below it: when what was left free at the peak is less than the largest rise between
/// two readings (a batch handed over, or a few), the next such rise does not fit (a real run's
/// failing handover came at 88%: `collector/tests/zoo/shm_small.py`).
pub const SHM_FULL_FRACTION: f64 = 0.9;

/// What `/dev/shm` held during the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SharedMemory {
    /// The tmpfs's size.
    pub size_bytes: u64,
    /// In use at the first reading (other processes' files, an earlier run's leftovers).
    pub start_bytes: u64,
    /// The most in use at any reading.
    pub peak_bytes: u64,
    /// When.
    pub peak_t_us: u64,
    /// The largest rise between two consecutive readings (a batch handed over, or a few).
    pub largest_rise_bytes: u64,
}

impl SharedMemory {
    /// What the run added at its peak over what was there when it began.
    pub fn run_bytes(&self) -> u64 {
        self.peak_bytes.saturating_sub(self.start_bytes)
    }

    /// The peak as a share of the size.
    pub fn peak_fraction(&self) -> f64 {
        self.peak_bytes as f64 / self.size_bytes.max(1) as f64
    }

    /// What was left free at the peak.
    pub fn free_at_peak_bytes(&self) -> u64 {
        self.size_bytes.saturating_sub(self.peak_bytes)
    }

    /// Whether it was full at its peak: [`SHM_FULL_FRACTION`] of its size, or less free than
    /// its largest rise.
    pub fn full(&self) -> bool {
        self.peak_fraction() >= SHM_FULL_FRACTION
            || self.free_at_peak_bytes() < self.largest_rise_bytes
    }
}

/// `/dev/shm`'s use over the run; `None` when it was not sampled (an older trace, a host
/// without it).
pub fn shared_memory(trace: &Trace) -> Option<SharedMemory> {
    let used = counter_with_data(trace, CounterKind::ShmUsed)?;
    let size = counter_with_data(trace, CounterKind::ShmSize)?;
    let samples = &trace.samples;
    let times = samples.times_us();
    let mut start = None;
    let mut peak: Option<(u64, u64)> = None;
    let (mut last, mut largest_rise_bytes) = (None, 0);
    for (row, t_us) in times.iter().enumerate() {
        let Some(bytes) = samples.value(used, row) else {
            continue;
        };
        start.get_or_insert(bytes);
        if let Some(before) = last {
            largest_rise_bytes = largest_rise_bytes.max(bytes.saturating_sub(before));
        }
        last = Some(bytes);
        if peak.is_none_or(|(b, _)| bytes > b) {
            peak = Some((bytes, t_us));
        }
    }
    let size_bytes = (0..times.len())
        .filter_map(|row| samples.value(size, row))
        .max()?;
    let (peak_bytes, peak_t_us) = peak?;
    Some(SharedMemory {
        size_bytes,
        start_bytes: start?,
        peak_bytes,
        peak_t_us,
        largest_rise_bytes,
    })
}

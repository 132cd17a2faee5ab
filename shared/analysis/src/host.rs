//! How close the host came to running out of memory.
//!
//! GPU training still lives on the host: DataLoader workers, pinned buffers, datasets loaded into
//! RAM, CPU copies of checkpoints. When host memory runs out the kernel kills the process with
//! SIGKILL and no Python traceback, which looks like a mysterious crash. The sampled
//! `MemAvailable` against the process's RSS shows how close it came.

use serde::Serialize;

use crate::marks::StageAt;
use crate::metrics::counter_with_data;
use oomscope_format::{Column, CounterKind, MISSING, Trace};

/// The host's tightest moment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostMemory {
    /// Lowest available host memory.
    pub min_available_bytes: u64,
    /// The process's RSS at that moment (latest sample at or before it).
    pub rss_at_min_bytes: Option<u64>,
    /// `available / (available + rss)` at that moment: the share of the memory the process
    /// could have had that was still free.
    pub min_available_fraction: Option<f64>,
    /// When.
    pub t_us: u64,
    /// The stage active then.
    pub stage: Option<StageAt>,
    /// Highest RSS of the process.
    pub peak_rss_bytes: Option<u64>,
}

/// Finds the moment the host had the least memory available, relative to what the process plus
/// the free memory add up to. `None` without a `HostAvailable` counter with data.
pub fn host_memory(trace: &Trace) -> Option<HostMemory> {
    let available = trace
        .samples
        .column(counter_with_data(trace, CounterKind::HostAvailable)?)?;
    let rss_id = crate::metrics::host_in_use(trace);
    let rss = rss_id.and_then(|id| trace.samples.column(id));
    let times = trace.samples.times_us();
    let (row, min_available_bytes, rss_at_min_bytes) = match tightest_share(available, rss) {
        Some((row, avail, r)) => (row, avail, Some(r)),
        // No RSS read with it: the lowest available.
        None => {
            let (row, avail) = available
                .iter()
                .enumerate()
                .filter(|(_, a)| *a != MISSING)
                .min_by_key(|(_, a)| *a)?;
            (row, avail, None)
        }
    };
    Some(HostMemory {
        min_available_bytes,
        rss_at_min_bytes,
        min_available_fraction: rss_at_min_bytes.map(|r| share(min_available_bytes, r)),
        t_us: times.at(row),
        stage: StageAt::at(trace, times.at(row)),
        peak_rss_bytes: rss_id
            .and_then(|id| trace.samples.first_max(id, 0..times.len()))
            .map(|(_, bytes)| bytes),
    })
}

/// The first row where available memory was the smallest share of itself plus the RSS read
/// last (at or before the row), as (row, available, RSS). The shares are compared exactly and
/// without a division, `a / (a + r) < b / (b + s)` as `a (b + s) < b (a + r)` in 128 bits: a day
/// at 100 Hz is 8.6 million rows, every refresh of a live view. (A share of 0 / 0 counts as 0.)
fn tightest_share(available: Column<'_>, rss: Option<Column<'_>>) -> Option<(usize, u64, u64)> {
    let rss = rss?;
    let mut best: Option<(usize, u64, u64)> = None;
    // The best row's available and total.
    let (mut best_available, mut best_total) = (1u64, 1u64);
    let mut last_rss = MISSING;
    available.zip_chunks(rss, 0..available.len(), |start, available, rss| {
        for (row, (&avail, &r)) in (start..).zip(available.iter().zip(rss)) {
            if r != MISSING {
                last_rss = r;
            }
            if avail == MISSING || last_rss == MISSING {
                continue;
            }
            let total = avail.saturating_add(last_rss).max(1);
            if best.is_none()
                || u128::from(avail) * u128::from(best_total)
                    < u128::from(best_available) * u128::from(total)
            {
                best = Some((row, avail, last_rss));
                (best_available, best_total) = (avail, total);
            }
        }
    });
    best
}

/// `available / (available + rss)`; 0 when both are 0.
fn share(available: u64, rss: u64) -> f64 {
    let total = available.saturating_add(rss);
    if total == 0 {
        0.0
    } else {
        available as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn tightest_moment_relative_to_the_process() {
        let run = Run {
            host_total_bytes: 64 * GIB,
            host_rss_bytes: 20 * GIB,
            host_rss_growth_per_step: 512 * MIB,
            ..Run::default()
        };
        let h = host_memory(&run.build()).unwrap();
        // Step 59: RSS 20 + 29.5 GiB, available 64 − 49.5 = 14.5 GiB.
        assert_eq!(h.rss_at_min_bytes, Some(49 * GIB + 512 * MIB));
        assert_eq!(h.min_available_bytes, 14 * GIB + 512 * MIB);
        assert!((h.min_available_fraction.unwrap() - 14.5 / 64.0).abs() < 1e-9);
        assert_eq!(h.stage.unwrap().step, 59);
        assert_eq!(h.peak_rss_bytes, Some(49 * GIB + 512 * MIB));
    }

    #[test]
    fn needs_available_memory() {
        assert!(
            host_memory(
                &Run {
                    counters: false,
                    ..Run::default()
                }
                .build()
            )
            .is_none()
        );
    }
}

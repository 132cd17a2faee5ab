//! How close the host came to running out of memory.
//!
//! GPU training still lives on the host: DataLoader workers, pinned buffers, datasets loaded into
//! RAM, CPU copies of checkpoints. When host memory runs out the kernel kills the process with
//! SIGKILL and no Python traceback, which looks like a mysterious crash. The sampled
//! `MemAvailable` against the process's RSS shows how close it came.

use serde::Serialize;

use crate::marks::StageAt;
use crate::metrics::counter_with_data;
use oomscope_format::{CounterKind, MISSING, Trace};

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
    let rss = crate::metrics::host_in_use(trace).and_then(|id| trace.samples.column(id));
    let times = trace.samples.times_us();
    let mut last_rss: Option<u64> = None;
    let mut peak_rss: Option<u64> = None;
    // (row, available, rss, fraction): the lowest fraction, or the lowest available without RSS.
    let mut worst: Option<(usize, u64, Option<u64>, Option<f64>)> = None;
    for (row, &avail) in available.iter().enumerate() {
        if let Some(r) = rss
            .and_then(|c| c.get(row).copied())
            .filter(|r| *r != MISSING)
        {
            last_rss = Some(r);
            peak_rss = Some(peak_rss.map_or(r, |p| p.max(r)));
        }
        if avail == MISSING {
            continue;
        }
        let fraction = last_rss.map(|r| {
            let total = avail.saturating_add(r);
            if total == 0 {
                0.0
            } else {
                avail as f64 / total as f64
            }
        });
        let better = match (worst, fraction) {
            (None, _) => true,
            (Some((_, _, _, Some(w))), Some(f)) => f < w,
            (Some((_, _, _, None)), Some(_)) => true,
            (Some((_, _, _, Some(_))), None) => false,
            (Some((_, a, _, None)), None) => avail < a,
        };
        if better {
            worst = Some((row, avail, last_rss, fraction));
        }
    }
    let (row, min_available_bytes, rss_at_min_bytes, min_available_fraction) = worst?;
    Some(HostMemory {
        min_available_bytes,
        rss_at_min_bytes,
        min_available_fraction,
        t_us: times[row],
        stage: StageAt::at(trace, times[row]),
        peak_rss_bytes: peak_rss,
    })
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

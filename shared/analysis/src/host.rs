//! How close the host came to running out of memory.
//!
//! GPU training still lives on the host: DataLoader workers, pinned buffers, datasets loaded into
//! RAM, CPU copies of checkpoints. When host memory runs out the kernel kills the process with
//! SIGKILL and no Python traceback, which looks like a mysterious crash. The sampled
//! `MemAvailable` against the process's RSS shows how close it came.

use serde::Serialize;

use crate::marks::StageAt;
use crate::metrics::counter_with_data;
use std::ops::Range;

use oomscope_format::{Column, CounterId, CounterKind, MISSING, Trace};

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
    let mut scan = HostScan::default();
    scan.extend(trace);
    scan.host_memory(trace)
}

/// [`host_memory`]'s pass over the sample rows, kept as a fold: a live view keeps one from one
/// analysis of a trace still being written to the next ([`crate::Prepared`]) and folds in only
/// the rows appended (rows are final once written), so it does not scan a day's 8.6 million
/// rows again each refresh for the tightest moment. (Which counter is the memory in use,
/// [`crate::metrics::host_in_use`], still reads the RSS and PSS columns when both are
/// recorded.) Begun again when the counters it reads change (a counter gaining its first
/// reading, PSS found to differ from RSS) or the rows shrink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostScan {
    /// The counters read: available memory, and the process's RSS (or PSS) when there is one.
    counters: Option<(CounterId, Option<CounterId>)>,
    /// The rows folded.
    rows: usize,
    /// The RSS read last (at or before the last row folded), [`MISSING`] before the first.
    last_rss_bytes: u64,
    /// The first row where available memory was the smallest share of itself plus the RSS
    /// read last, as (row, available bytes, RSS bytes).
    tightest: Option<(usize, u64, u64)>,
    /// The first row with the lowest available memory, as (row, available bytes), up to the first
    /// row with a share (what [`host_memory`] says when no row has one).
    lowest: Option<(usize, u64)>,
}

impl Default for HostScan {
    /// Nothing folded yet.
    fn default() -> HostScan {
        HostScan {
            counters: None,
            rows: 0,
            last_rss_bytes: MISSING,
            tightest: None,
            lowest: None,
        }
    }
}

impl HostScan {
    /// Folds in the rows of `trace` not folded yet (all of them again when the counters read
    /// changed or the rows are fewer than those folded).
    pub fn extend(&mut self, trace: &Trace) {
        let counters = counter_with_data(trace, CounterKind::HostAvailable)
            .map(|available| (available, crate::metrics::host_in_use(trace)));
        if counters != self.counters || trace.samples.len() < self.rows {
            *self = HostScan {
                counters,
                ..HostScan::default()
            };
        }
        let Some((available, rss)) = counters else {
            return;
        };
        let Some(available) = trace.samples.column(available) else {
            return;
        };
        let rows = self.rows..available.len();
        self.rows = rows.end;
        match rss.and_then(|id| trace.samples.column(id)) {
            Some(rss) => self.fold_tightest(available, rss, rows),
            None => available.for_each_chunk(rows, |start, values| {
                for (row, &avail) in (start..).zip(values) {
                    self.lowest = lower(self.lowest, row, avail);
                }
            }),
        }
    }

    /// The first row where available memory was the smallest share of itself plus the RSS read
    /// last (at or before the row). The shares are compared exactly and without a division,
    /// `a / (a + r) < b / (b + s)` as `a (b + s) < b (a + r)` in 128 bits: a day at 100 Hz is
    /// 8.6 million rows. (A share of 0 / 0 counts as 0.)
    fn fold_tightest(&mut self, available: Column<'_>, rss: Column<'_>, rows: Range<usize>) {
        // The best row's available and total.
        let (mut best_available, mut best_total) = self
            .tightest
            .map_or((1, 1), |(_, a, r)| (a, a.saturating_add(r).max(1)));
        let (mut tightest, mut lowest, mut last_rss_bytes) =
            (self.tightest, self.lowest, self.last_rss_bytes);
        available.zip_chunks(rss, rows, |start, available, rss| {
            for (row, (&avail, &r)) in (start..).zip(available.iter().zip(rss)) {
                if r != MISSING {
                    last_rss_bytes = r;
                }
                if tightest.is_none() {
                    lowest = lower(lowest, row, avail);
                }
                if avail == MISSING || last_rss_bytes == MISSING {
                    continue;
                }
                let total = avail.saturating_add(last_rss_bytes).max(1);
                if tightest.is_none()
                    || u128::from(avail) * u128::from(best_total)
                        < u128::from(best_available) * u128::from(total)
                {
                    tightest = Some((row, avail, last_rss_bytes));
                    (best_available, best_total) = (avail, total);
                }
            }
        });
        (self.tightest, self.lowest) = (tightest, lowest);
        self.last_rss_bytes = last_rss_bytes;
    }

    /// [`host_memory`] of `trace`, the trace this scan was brought up to.
    pub fn host_memory(&self, trace: &Trace) -> Option<HostMemory> {
        let (_, rss_id) = self.counters?;
        let times = trace.samples.times_us();
        let (row, min_available_bytes, rss_at_min_bytes) = match self.tightest {
            Some((row, avail, r)) => (row, avail, Some(r)),
            // No RSS read with it: the lowest available.
            None => {
                let (row, avail) = self.lowest?;
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
}

/// `lowest` with a row's available memory taken in: the first row with the lowest. (Wanted
/// only while no row has a share, no RSS read yet: a row with one ends the need.)
fn lower(lowest: Option<(usize, u64)>, row: usize, available: u64) -> Option<(usize, u64)> {
    if available != MISSING && lowest.is_none_or(|(_, low)| available < low) {
        Some((row, available))
    } else {
        lowest
    }
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

impl crate::fold::Fold for HostScan {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = HostScan::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        HostScan::extend(self, input.trace);
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

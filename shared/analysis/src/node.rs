//! The node as a whole: when several ranks share a host, their memory adds up, and the moments
//! when every rank does the same heavy thing at once (each loading the full checkpoint before
//! sharding it, each gathering the state dict to save it) make the node's host memory spike far
//! above what training needs. The kernel's OOM killer then takes a rank that did nothing wrong.
//!
//! Measured on the ranks' own RSS added up (format 1.5 records each rank's; a DataLoader
//! worker's copy-on-write pages would be counted again in the tree's summed RSS), else on the
//! tree's RSS, and compared with the same sum at the marks of the training loop.

use serde::Serialize;

use crate::metrics::counter_with_data;
use crate::rank_views::RankProcess;
use oomscope_format::{CHECKPOINT_SAVE_STAGES, CounterId, CounterKind, Trace};

/// A spike is named when the node's peak exceeds its level in the loop by this much…
pub const NODE_SPIKE_MIN_BYTES: u64 = 256 << 20;
/// …and by this share of that level.
pub const NODE_SPIKE_MIN_SHARE: f64 = 0.25;

/// Where the spike came, relative to the marked training loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "when")]
pub enum SpikeWhen {
    /// Before the first mark: loading the model, the checkpoint, the data.
    BeforeFirstMark,
    /// After the last mark: saving, teardown.
    AfterLastMark,
    /// Between two marks of the loop: a checkpoint save or an evaluation that does not mark.
    BetweenMarks {
        /// The mark before it.
        stage: String,
        /// Its step.
        step: u64,
    },
}

/// A node's host memory far above its level in the training loop.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeHostSpike {
    /// The node (host name).
    pub host: String,
    /// The trace it came from (a file name in a job; empty for one trace).
    pub source: String,
    /// Ranks on the node.
    pub ranks: usize,
    /// The highest of the ranks' RSS added up (the tree's RSS for traces without per-rank
    /// counters).
    pub peak_bytes: u64,
    /// When, on the job's clock.
    pub t_us: u64,
    /// Where, relative to the loop.
    pub when: SpikeWhen,
    /// The same sum's median at the loop's marks.
    pub loop_bytes: u64,
    /// Host memory still available at the peak, when recorded.
    pub available_bytes: Option<u64>,
}

impl NodeHostSpike {
    /// How far the peak is above the loop's level.
    pub fn excess_bytes(&self) -> u64 {
        self.peak_bytes.saturating_sub(self.loop_bytes)
    }
}

/// The node's memory over time: at each sample, the ranks' RSS added up (those read then), or
/// the tree's RSS when the trace has no per-rank counters.
fn node_series(trace: &Trace) -> Vec<(u64, u64)> {
    let ranks: Vec<CounterId> = trace
        .counters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == CounterKind::PidRss)
        .map(|(i, _)| CounterId(i as u32))
        .collect();
    if ranks.is_empty() {
        return counter_with_data(trace, CounterKind::HostRss)
            .map(|id| trace.samples.points(id).collect())
            .unwrap_or_default();
    }
    let times = trace.samples.times_us();
    (0..times.len())
        .filter_map(|row| {
            let values: Vec<u64> = ranks
                .iter()
                .filter_map(|id| trace.samples.value(*id, row))
                .collect();
            (!values.is_empty()).then(|| (times.at(row), values.iter().sum()))
        })
        .collect()
}

/// The node's spike in a trace of several ranks (`ranks`), on the job's clock (`offset_us`);
/// `None` when the trace has fewer than two ranks, no marks or no RSS, or the peak is within
/// [`NODE_SPIKE_MIN_BYTES`] and [`NODE_SPIKE_MIN_SHARE`] of the loop's level.
pub fn node_host_spike(
    trace: &Trace,
    ranks: &[RankProcess],
    source: &str,
    offset_us: u64,
) -> Option<NodeHostSpike> {
    if ranks.len() < 2 {
        return None;
    }
    let series = node_series(trace);
    // The loop's marks: a checkpoint saved before the loop (the file the ranks then load) is not
    // the loop's first mark.
    let mut in_loop = trace
        .marks
        .iter()
        .filter(|m| !CHECKPOINT_SAVE_STAGES.contains(&m.name.as_ref()));
    let first = in_loop.next()?.t_us;
    let last = in_loop.next_back().map_or(first, |m| m.t_us);
    let at = |t_us: u64| {
        let i = series.partition_point(|(t, _)| *t <= t_us);
        i.checked_sub(1).map(|i| series[i].1)
    };
    let mut at_marks: Vec<u64> = trace.marks.iter().filter_map(|m| at(m.t_us)).collect();
    if at_marks.is_empty() {
        return None;
    }
    at_marks.sort_unstable();
    let loop_bytes = at_marks[at_marks.len() / 2];
    let (t_us, peak_bytes) = series
        .iter()
        .copied()
        .max_by_key(|(t, v)| (*v, std::cmp::Reverse(*t)))?;
    let excess = peak_bytes.saturating_sub(loop_bytes);
    if excess < NODE_SPIKE_MIN_BYTES || (excess as f64) < NODE_SPIKE_MIN_SHARE * loop_bytes as f64 {
        return None;
    }
    let when = if t_us < first {
        SpikeWhen::BeforeFirstMark
    } else if t_us > last {
        SpikeWhen::AfterLastMark
    } else {
        let before = trace.marks.iter().rev().find(|m| m.t_us <= t_us)?;
        SpikeWhen::BetweenMarks {
            stage: before.name.to_string(),
            step: before.step,
        }
    };
    let available_bytes = counter_with_data(trace, CounterKind::HostAvailable)
        .and_then(|id: CounterId| trace.samples.value_at(id, t_us));
    Some(NodeHostSpike {
        host: trace.metadata.host.clone(),
        source: source.to_owned(),
        ranks: ranks.len(),
        peak_bytes,
        t_us: t_us + offset_us,
        when,
        loop_bytes,
        available_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{Counter, Samples, StageMark};

    use oomscope_format::units::MIB;

    /// Two ranks; the tree's RSS at `rss_mib` per sample (one a millisecond), marks from 10 ms.
    fn node(rss_mib: &[u64]) -> (Trace, Vec<RankProcess>) {
        let mut t = Trace::default();
        t.counters.push(Counter {
            kind: CounterKind::HostRss,
            device: None,
            name: "host.rss".into(),
            pid: None,
        });
        t.samples = Samples::with_counters(1);
        for (i, mib) in rss_mib.iter().enumerate() {
            t.samples
                .push_row(i as u64 * 1000, &[(CounterId(0), mib * MIB)]);
        }
        for step in 0..5 {
            t.marks.push(StageMark {
                t_us: 10_000 + step * 2000,
                name: "post_step".into(),
                step,
                ..StageMark::default()
            });
        }
        let ranks = (0..2)
            .map(|rank| RankProcess {
                rank,
                pid: Some(100 + rank),
                local_rank: Some(rank),
            })
            .collect();
        (t, ranks)
    }

    #[test]
    fn every_rank_loading_at_once_is_a_spike_before_the_first_mark() {
        let mut rss = vec![2000; 20];
        rss[3] = 5000;
        let (t, ranks) = node(&rss);
        let s = node_host_spike(&t, &ranks, "node0.oomt", 0).unwrap();
        assert_eq!(s.when, SpikeWhen::BeforeFirstMark);
        assert_eq!((s.peak_bytes, s.loop_bytes), (5000 * MIB, 2000 * MIB));
        assert_eq!(s.excess_bytes(), 3000 * MIB);
        assert_eq!(s.t_us, 3000);
    }

    #[test]
    fn a_save_between_marks_is_placed_after_its_mark() {
        let mut rss = vec![2000; 20];
        rss[15] = 3000;
        let (t, ranks) = node(&rss);
        let s = node_host_spike(&t, &ranks, "", 0).unwrap();
        assert_eq!(
            s.when,
            SpikeWhen::BetweenMarks {
                stage: "post_step".into(),
                step: 2
            }
        );
    }

    #[test]
    fn small_bumps_and_single_ranks_are_not_spikes() {
        let mut rss = vec![2000; 20];
        rss[3] = 2400; // +400 MiB but under 25%
        let (t, ranks) = node(&rss);
        assert!(node_host_spike(&t, &ranks, "", 0).is_none());
        rss[3] = 5000;
        let (t, ranks) = node(&rss);
        assert!(node_host_spike(&t, &ranks[..1], "", 0).is_none());
    }
}

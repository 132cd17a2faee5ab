//! Which processes of a trace are ranks, and each rank's *view* of the trace: its own marks and
//! OOMs, its own memory counters (its RSS, its memory on each GPU) in the places the
//! single-process analysis reads them, the device-level counters as they are. [`crate::analyze`]
//! runs on a view as on any trace, so a rank's stage table, leaks and findings are the same words
//! as a single run's.

use oomscope_format::{Counter, CounterId, CounterKind, Marks, ProcessRole, Trace};
use serde::Serialize;

/// One rank of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RankProcess {
    /// Its rank.
    pub rank: u32,
    /// Its process (the latest one, after elastic restarts), when known.
    pub pid: Option<u32>,
    /// Its rank on the node.
    pub local_rank: Option<u32>,
}

/// The ranks a trace holds: processes the collector took for ranks, and the senders of marks
/// that named a rank (traces of format 1.2–1.4 have only those). A single-process trace whose
/// program has a rank is that one rank; a trace without any rank has none.
pub fn ranks_of(trace: &Trace) -> Vec<RankProcess> {
    ranks_with(trace, &MarkRanks::new(trace))
}

/// The ranks the marks of a trace named, as (rank, sender) pairs, each once, in the order of
/// its last mark: what [`ranks_of`] reads of the marks, kept as a fold a live view extends with
/// the marks appended ([`crate::Prepared`]) rather than reading a day's marks again (several
/// times an analysis). Equal to [`MarkRanks::new`] of the same marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkRanks {
    /// The marks read.
    marks: usize,
    pairs: Vec<(u32, Option<u32>)>,
}

impl MarkRanks {
    /// The ranks the marks of `trace` named.
    pub fn new(trace: &Trace) -> MarkRanks {
        let mut ranks = MarkRanks::default();
        ranks.extend(trace);
        ranks
    }

    /// Takes in the marks `trace` has beyond those read (all again should it have fewer).
    pub fn extend(&mut self, trace: &Trace) {
        if trace.marks.len() < self.marks {
            *self = MarkRanks::default();
        }
        for m in &trace.marks[self.marks..] {
            let Some(rank) = m.rank else {
                continue;
            };
            let pair = (rank, m.pid);
            if self.pairs.last() != Some(&pair) {
                self.pairs.retain(|p| *p != pair);
                self.pairs.push(pair);
            }
        }
        self.marks = trace.marks.len();
    }
}

/// [`ranks_of`] `trace`, its marks' ranks read into `marks`.
pub fn ranks_with(trace: &Trace, marks: &MarkRanks) -> Vec<RankProcess> {
    let mut ranks: Vec<RankProcess> = Vec::new();
    let mut add = |rank: u32, pid: Option<u32>, local_rank: Option<u32>| match ranks
        .iter_mut()
        .find(|r| r.rank == rank)
    {
        Some(r) => {
            r.pid = pid.or(r.pid);
            r.local_rank = local_rank.or(r.local_rank);
        }
        None => ranks.push(RankProcess {
            rank,
            pid,
            local_rank,
        }),
    };
    // The latest record of each pid is what it is.
    let mut latest: Vec<&oomscope_format::ProcessInfo> = Vec::new();
    for p in &trace.processes {
        match latest.iter_mut().find(|q| q.pid == p.pid) {
            Some(q) => *q = p,
            None => latest.push(p),
        }
    }
    for p in &latest {
        if p.role == ProcessRole::Rank
            && let Some(rank) = p.rank
        {
            add(rank, Some(p.pid), p.local_rank);
        }
    }
    // A pair's last mark decides the rank's sender, as each mark in turn would.
    for &(rank, pid) in &marks.pairs {
        let is_launcher = latest
            .iter()
            .any(|p| Some(p.pid) == pid && p.role == ProcessRole::Launcher);
        if !is_launcher {
            add(rank, pid, None);
        }
    }
    crate::sort::sort_by_key(&mut ranks, |r| r.rank);
    ranks
}

/// A rank's view of a trace: its marks, OOMs and kills, its own RSS as `host.rss` and its own
/// memory on each GPU as `gpuN.process`, the devices' counters as recorded. Records without a
/// sender (components, statistics, trials) and the other processes are left out.
pub fn rank_view(trace: &Trace, rank: &RankProcess) -> Trace {
    let mine = |pid: Option<u32>, r: Option<u32>| {
        r == Some(rank.rank) || (r.is_none() && pid.is_some() && pid == rank.pid)
    };
    // Columns: device-level and in-process counters as they are; the tree's RSS, PSS and
    // per-GPU process memory replaced by this rank's own. When the rank is the program itself
    // (`srun` running one collector per task), the tree is the rank and its workers: its
    // counters are the rank's.
    let program_is_rank = rank.pid == Some(trace.metadata.pid)
        && !trace
            .counters
            .iter()
            .any(|c| c.kind.is_per_process() && c.pid == rank.pid);
    let mut keep: Vec<(CounterId, Counter)> = Vec::new();
    for (i, c) in trace.counters.iter().enumerate() {
        let id = CounterId(i as u32);
        let as_kind = match c.kind {
            CounterKind::HostRss | CounterKind::HostPss | CounterKind::ProcessGpu
                if program_is_rank =>
            {
                c.kind
            }
            CounterKind::PidRss if c.pid.is_some() && c.pid == rank.pid => CounterKind::HostRss,
            CounterKind::PidGpu if c.pid.is_some() && c.pid == rank.pid => CounterKind::ProcessGpu,
            CounterKind::PidRss
            | CounterKind::PidGpu
            | CounterKind::HostRss
            | CounterKind::HostPss
            | CounterKind::ProcessGpu => continue,
            other => other,
        };
        keep.push((
            id,
            Counter {
                kind: as_kind,
                device: c.device,
                name: as_kind.counter_name(c.device),
                pid: None,
            },
        ));
    }
    let ids: Vec<CounterId> = keep.iter().map(|(id, _)| *id).collect();
    let end = trace
        .process_ends
        .iter()
        .filter(|e| e.from_launcher && mine(Some(e.pid).filter(|p| *p != 0), e.rank))
        .find_map(|e| e.status);
    let mut metadata = trace.metadata.clone();
    metadata.rank = Some(rank.rank);
    metadata.world_size = trace
        .processes
        .iter()
        .rev()
        .find(|p| Some(p.pid) == rank.pid)
        .and_then(|p| p.world_size)
        .or(metadata.world_size);
    metadata.pid = rank.pid.unwrap_or(metadata.pid);
    Trace {
        format_version: trace.format_version,
        metadata,
        counters: keep.into_iter().map(|(_, c)| c).collect(),
        samples: trace.samples.select(&ids),
        marks: trace.marks.filter(|m| mine(m.pid, m.rank)),
        ooms: trace
            .ooms
            .iter()
            .filter(|o| mine(o.pid, o.rank))
            .cloned()
            .collect(),
        oom_kills: trace
            .oom_kills
            .iter()
            .filter(|k| rank.pid == Some(k.pid))
            .cloned()
            .collect(),
        exit: match (end, trace.exit) {
            (Some(status), Some(exit)) => Some(oomscope_format::ProcessExit {
                status,
                probable_host_oom: false,
                ..exit
            }),
            (_, exit) => exit,
        },
        notes: trace.notes.clone(),
        dropped: trace.dropped.clone(),
        inputs: trace
            .inputs
            .iter()
            .filter(|i| i.pid.is_none() || i.pid == rank.pid)
            .cloned()
            .collect(),
        end_us: trace.end_us,
        ..Trace::default()
    }
}

/// The marks the whole-run analysis reads when a trace holds several ranks: the lowest rank's
/// and those without a sender (one process's stages; each rank's are in
/// [`RankSummary::stage_table`]).
pub fn lowest_rank_marks(trace: &Trace, ranks: &[RankProcess]) -> Option<Marks> {
    let lowest = ranks.first()?;
    Some(trace.marks.filter(|m| {
        m.rank == Some(lowest.rank)
            || (m.rank.is_none() && (m.pid.is_none() || m.pid == lowest.pid))
    }))
}

impl crate::fold::Fold for MarkRanks {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = MarkRanks::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        MarkRanks::extend(self, input.trace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{ProcessInfo, StageMark};

    #[test]
    fn the_marks_ranks_folded_name_each_rank_by_its_last_sender() {
        // Rank 0 sent by 10, then 11 (a restart), then 10 again; rank 1 by 20 and then a mark
        // without a sender; a launcher (30) forwarding a mark of rank 2; marks without a rank.
        let mut trace = Trace::default();
        trace.processes.push(ProcessInfo {
            pid: 30,
            role: ProcessRole::Launcher,
            ..ProcessInfo::default()
        });
        let senders = [
            (Some(0), Some(10)),
            (None, Some(10)),
            (Some(1), Some(20)),
            (Some(0), Some(11)),
            (Some(2), Some(30)),
            (Some(0), Some(10)),
            (Some(1), None),
            (Some(0), Some(10)),
        ];
        let mut kept = MarkRanks::default();
        for (i, &(rank, pid)) in senders.iter().enumerate() {
            trace.marks.push(StageMark {
                t_us: i as u64,
                name: "s".into(),
                rank,
                pid,
                ..StageMark::default()
            });
            kept.extend(&trace);
            // Mark by mark, as `ranks_of` once read them: each rank's latest sender.
            let mut senders: Vec<(u32, Option<u32>)> = Vec::new();
            for m in trace.marks.iter().filter(|m| m.pid != Some(30)) {
                let Some(rank) = m.rank else { continue };
                match senders.iter_mut().find(|(r, _)| *r == rank) {
                    Some((_, pid)) => *pid = m.pid.or(*pid),
                    None => senders.push((rank, m.pid)),
                }
            }
            senders.sort_unstable();
            let folded: Vec<(u32, Option<u32>)> = ranks_with(&trace, &kept)
                .iter()
                .map(|r| (r.rank, r.pid))
                .collect();
            assert_eq!(folded, senders, "after mark {i}");
        }
        let ranks = ranks_of(&trace);
        let of = |rank: u32| ranks.iter().find(|r| r.rank == rank).map(|r| r.pid);
        assert_eq!(ranks.len(), 2, "{ranks:?}");
        assert_eq!(of(0), Some(Some(10)), "the last sender of rank 0");
        assert_eq!(
            of(1),
            Some(Some(20)),
            "a mark without a sender keeps the one before"
        );
        assert_eq!(of(2), None, "a launcher's mark names no rank");
    }
}

//! A job: several traces (one per node under a launcher, or one per rank) analysed together on
//! one clock, and the findings only ranks side by side show (which rank failed first, imbalance,
//! a node's host-memory spike) above each rank's own.

use crate::analysis::AnalysisOptions;
use crate::analyze::rank_own;
use crate::finding::Finding;
use crate::node::node_host_spike;
use crate::rank_views::ranks_of;
use crate::ranks::{RankAnalysis, compare_ranks, summarize};
use crate::recommend::{Diagnose, FirstRankFailure, NodeHostSpikeRule, RankImbalance};
use oomscope_format::Trace;

/// One trace of a job: where it came from and what it holds.
#[derive(Debug, Clone, Copy)]
pub struct JobTrace<'a> {
    /// Its name (the file).
    pub source: &'a str,
    /// The decoded trace.
    pub trace: &'a Trace,
}

/// A job's traces analysed together (one per node under a launcher, or one per rank): every
/// rank on the clock of the earliest trace's start (wall clock, so nodes agree as far as their
/// clocks do), imbalance across nodes, the first failure of the whole job.
pub fn analyze_job(traces: &[JobTrace<'_>], options: &AnalysisOptions) -> RankAnalysis {
    let start = traces
        .iter()
        .map(|t| t.trace.metadata.start_unix_ns)
        .min()
        .unwrap_or(0);
    let offset_us = |t: &JobTrace<'_>| t.trace.metadata.start_unix_ns.saturating_sub(start) / 1_000;
    let summaries = traces
        .iter()
        .flat_map(|t| {
            summarize(t.trace, t.source, offset_us(t), &mut |_, v| {
                rank_own(v, options)
            })
        })
        .collect();
    let mut compared = compare_ranks(summaries);
    compared.node_spikes = traces
        .iter()
        .filter_map(|t| node_host_spike(t.trace, &ranks_of(t.trace), t.source, offset_us(t)))
        .collect();
    crate::sort::sort_by_key(&mut compared.node_spikes, |s| {
        std::cmp::Reverse(s.excess_bytes())
    });
    compared
}

/// A finding of a job: one of the ranks side by side (`rank` `None`), or one rank's own.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFinding {
    /// The rank whose own finding it is.
    pub rank: Option<u32>,
    /// The finding.
    pub finding: Finding,
}

/// The findings of ranks side by side, for a job's traces analysed together
/// ([`analyze_job`]): which rank failed first, imbalance, then each rank's own findings; most
/// severe first.
pub fn job_findings(r: &RankAnalysis) -> Vec<JobFinding> {
    fn of<R: Diagnose>(rule: &R, d: R::Diagnosis) -> JobFinding {
        JobFinding {
            rank: None,
            finding: Finding {
                severity: rule.severity(&d),
                evidence: rule.evidence(&d),
                detail: R::detail(d),
            },
        }
    }
    let mut out = Vec::new();
    if let Some(f) = &r.first_failure {
        out.push(of(&FirstRankFailure, f.clone()));
    }
    if let Some(i) = r.imbalance.first() {
        out.push(of(&RankImbalance, i.clone()));
    }
    if let Some(s) = r.node_spikes.first() {
        out.push(of(&NodeHostSpikeRule, NodeHostSpikeRule::diagnose(s)));
    }
    for rank in &r.ranks {
        out.extend(rank.findings.iter().map(|f| JobFinding {
            rank: Some(rank.rank),
            finding: f.clone(),
        }));
    }
    crate::sort::sort_by(&mut out, |a, b| {
        b.finding
            .severity
            .cmp(&a.finding.severity)
            .then_with(|| a.finding.kind().rank().cmp(&b.finding.kind().rank()))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranks::*;
    use oomscope_format::{Counter, Samples};
    use oomscope_format::{CounterId, CounterKind, ProcessRole, StageMark};

    /// A trace whose program is rank `rank` (one collector per task), its RSS rising to
    /// `peak_mib`.
    fn one_task(rank: u32, peak_mib: u64) -> Trace {
        let mut t = Trace::default();
        t.metadata.pid = 10 + rank;
        t.counters.push(Counter {
            kind: CounterKind::HostRss,
            device: None,
            name: "host.rss".into(),
            pid: None,
        });
        t.samples = Samples::with_counters(1);
        for (i, mib) in [peak_mib / 2, peak_mib, peak_mib / 2]
            .into_iter()
            .enumerate()
        {
            t.samples
                .push_row(i as u64 * 1000, &[(CounterId(0), mib << 20)]);
            t.marks.push(StageMark {
                t_us: i as u64 * 1000,
                name: "post_forward".into(),
                step: i as u64,
                pid: Some(10 + rank),
                rank: Some(rank),
                ..StageMark::default()
            });
        }
        t
    }

    #[test]
    fn a_rank_s_curve_is_thinned_on_the_job_clock_and_keeps_its_peak() {
        let mut t = one_task(3, 0);
        t.samples = Samples::with_counters(1);
        // 10 000 samples over 10 s, a one-sample spike at 4.321 s.
        for i in 0..10_000u64 {
            let mib = if i == 4_321 { 900 } else { 100 + i / 100 };
            t.samples.push_row(i * 1_000, &[(CounterId(0), mib << 20)]);
        }
        let options = AnalysisOptions::default();
        let summary = &summarize(&t, "", 5_000_000, &mut |_, v| rank_own(v, &options))[0];
        let curve = summary.curve.as_ref().unwrap();
        assert!(!curve.device);
        assert!(curve.points.len() <= CURVE_POINTS && curve.points.len() >= CURVE_POINTS - 1);
        assert_eq!(
            curve.points.iter().map(|p| p.1).max(),
            summary.peak_host_bytes
        );
        assert_eq!(curve.points.iter().map(|p| p.1).max(), Some(900 << 20));
        assert_eq!(curve.points[0], (5_000_000, 100 << 20));
        assert!(curve.points.windows(2).all(|w| w[0].0 < w[1].0));
        assert!(curve.points.last().unwrap().0 <= 5_000_000 + 9_999_000);
    }

    #[test]
    fn the_ranks_curves_share_one_scale_with_the_lower_median_peak() {
        let traces: Vec<Trace> = [(0, 200), (1, 500), (2, 300), (3, 400)]
            .into_iter()
            .map(|(rank, mib)| one_task(rank, mib))
            .collect();
        let jobs: Vec<JobTrace> = traces
            .iter()
            .map(|trace| JobTrace {
                source: "node.oomt",
                trace,
            })
            .collect();
        let mut job = analyze_job(&jobs, &AnalysisOptions::default());
        let scale = job.curve_scale().expect("four ranks with curves");
        assert_eq!(scale.top_bytes, 500 << 20);
        // Peaks 200, 300, 400, 500: the lower median is 300, as the imbalance finding's.
        assert_eq!(scale.median_peak_bytes, 300 << 20);
        assert!(!scale.device);
        assert!(scale.t1_us > scale.t0_us);
        job.ranks.truncate(1);
        assert_eq!(job.curve_scale(), None, "one rank has nothing to compare");
    }

    #[test]
    fn a_rank_that_is_the_program_keeps_the_tree_s_memory() {
        let (a, b) = (one_task(0, 200), one_task(1, 500));
        let job = analyze_job(
            &[
                JobTrace {
                    source: "node-0.oomt",
                    trace: &a,
                },
                JobTrace {
                    source: "node-1.oomt",
                    trace: &b,
                },
            ],
            &AnalysisOptions::default(),
        );
        let peaks: Vec<_> = job.ranks.iter().map(|r| r.peak_host_bytes).collect();
        assert_eq!(peaks, [Some(200 << 20), Some(500 << 20)]);
        assert_eq!(job.ranks[1].marks, 3);
        let i = job.imbalance.first().expect("rank 1 holds 300 MiB more");
        assert_eq!((i.rank, i.stage.as_str()), (1, "post_forward"));
    }

    #[test]
    fn ranks_are_compared_within_the_group_they_named() {
        // Four ranks in two pipeline stages: the first stage holds 400 MiB more by design;
        // within it, rank 1 holds 200 MiB more than rank 0.
        let peaks = [(0, 1000), (1, 1200), (2, 600), (3, 600)];
        let traces: Vec<Trace> = peaks
            .iter()
            .map(|&(rank, mib)| {
                let mut t = one_task(rank, mib);
                t.processes.push(oomscope_format::ProcessInfo {
                    pid: 10 + rank,
                    role: ProcessRole::Rank,
                    rank: Some(rank),
                    group: Some(if rank < 2 { "pp0" } else { "pp1" }.into()),
                    ..Default::default()
                });
                t
            })
            .collect();
        let names: Vec<String> = (0..4).map(|i| format!("rank{i}.oomt")).collect();
        let job: Vec<JobTrace<'_>> = traces
            .iter()
            .zip(&names)
            .map(|(trace, source)| JobTrace { source, trace })
            .collect();
        let r = analyze_job(&job, &AnalysisOptions::default());
        assert_eq!(r.imbalance.len(), 1, "{:?}", r.imbalance);
        let i = &r.imbalance[0];
        assert_eq!((i.rank, i.group.as_deref()), (1, Some("pp0")));
        assert_eq!(i.excess_bytes(), 200 << 20);
        assert_eq!(i.ranks, 2);
    }
}

//! Rules that only a comparison of ranks can make: one rank holding more than the others, the
//! rank that failed first while the others waited or were stopped, and a node whose ranks all
//! did the same heavy thing at once.

use super::rule::{Diagnose, RuleContext, warning_if};
use crate::finding::{Detail, Evidence, EvidenceKey as K, FindingKind, NodeSpike, Severity};
use crate::node::NodeHostSpike;
use crate::ranks::{FirstFailure, StageImbalance};

/// One rank holds much more than the median rank at some stage.
#[derive(Debug)]
pub struct RankImbalance;

impl Diagnose for RankImbalance {
    const KIND: FindingKind = FindingKind::RankImbalance;
    type Diagnosis = StageImbalance;

    /// Detection: the largest imbalance of [`crate::ranks::RankAnalysis::imbalance`]
    /// (over 64 MiB and 10% of the median rank).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<StageImbalance> {
        ctx.analysis.ranks.as_ref()?.imbalance.first().cloned()
    }

    fn severity(&self, _: &StageImbalance) -> Severity {
        Severity::Warning
    }

    fn evidence(&self, i: &StageImbalance) -> Vec<Evidence> {
        vec![
            Evidence::count(K::Rank, f64::from(i.rank)),
            Evidence::bytes(K::MaxBytes, i.max_bytes as f64),
            Evidence::bytes(K::MedianBytes, i.median_bytes as f64),
            Evidence::bytes(K::ExcessBytes, i.excess_bytes() as f64),
            Evidence::count(K::Ranks, i.ranks as f64),
        ]
    }

    fn detail(d: StageImbalance) -> Detail {
        Detail::RankImbalance(d)
    }
}

/// A node's host memory far above its level in the loop: every rank loading (or saving) at once.
#[derive(Debug)]
pub struct NodeHostSpikeRule;

/// Below this share of available host memory left at the spike, it is a warning.
const SPIKE_TIGHT_SHARE: f64 = 0.10;

impl NodeHostSpikeRule {
    /// A spike as a diagnosis: tight when little host memory was left then.
    pub fn diagnose(spike: &NodeHostSpike) -> NodeSpike {
        NodeSpike {
            tight: spike
                .available_bytes
                .is_some_and(|a| (a as f64) < SPIKE_TIGHT_SHARE * (a + spike.peak_bytes) as f64),
            spike: spike.clone(),
        }
    }
}

impl Diagnose for NodeHostSpikeRule {
    const KIND: FindingKind = FindingKind::NodeHostSpike;
    type Diagnosis = NodeSpike;

    /// Detection: the largest of [`crate::ranks::RankAnalysis::node_spikes`] (the
    /// tree's peak over 256 MiB and 25% above its median at the loop's marks).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<NodeSpike> {
        Some(Self::diagnose(
            ctx.analysis.ranks.as_ref()?.node_spikes.first()?,
        ))
    }

    fn severity(&self, d: &NodeSpike) -> Severity {
        warning_if(d.tight)
    }

    fn evidence(&self, d: &NodeSpike) -> Vec<Evidence> {
        let s = &d.spike;
        let mut evidence = vec![
            Evidence::bytes(K::PeakBytes, s.peak_bytes as f64),
            Evidence::bytes(K::LoopBytes, s.loop_bytes as f64),
            Evidence::bytes(K::ExcessBytes, s.excess_bytes() as f64),
            Evidence::count(K::Ranks, s.ranks as f64),
            Evidence::micros(K::TUs, s.t_us as f64),
        ];
        if let Some(a) = s.available_bytes {
            evidence.push(Evidence::bytes(K::AvailableBytes, a as f64));
        }
        evidence
    }

    fn detail(d: NodeSpike) -> Detail {
        Detail::NodeHostSpike(d)
    }
}

/// A rank failed first; what the others did.
#[derive(Debug)]
pub struct FirstRankFailure;

impl Diagnose for FirstRankFailure {
    const KIND: FindingKind = FindingKind::FirstRankFailure;
    type Diagnosis = FirstFailure;

    /// Detection: a rank ran out of memory or ended with a failure
    /// ([`crate::ranks::RankAnalysis::first_failure`]).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<FirstFailure> {
        ctx.analysis.ranks.as_ref()?.first_failure.clone()
    }

    fn severity(&self, _: &FirstFailure) -> Severity {
        Severity::Critical
    }

    fn evidence(&self, f: &FirstFailure) -> Vec<Evidence> {
        let mut evidence = vec![Evidence::count(K::Rank, f64::from(f.rank))];
        if let Some(t) = f.t_us {
            evidence.push(Evidence::micros(K::TUs, t as f64));
        }
        if let Some(w) = f
            .others
            .iter()
            .filter_map(|o| o.idle_after_failure_us)
            .max()
        {
            evidence.push(Evidence::micros(K::OthersWaitedUs, w as f64));
        }
        evidence
    }

    fn detail(d: FirstFailure) -> Detail {
        Detail::FirstRankFailure(d)
    }
}

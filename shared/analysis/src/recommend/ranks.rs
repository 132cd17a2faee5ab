//! Rules that only a comparison of ranks can make: one rank holding more than the others, the
//! rank that failed first while the others waited or were stopped, and a node whose ranks all
//! did the same heavy thing at once.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::node::{NodeHostSpike, SpikeWhen};
use crate::ranks::{FirstFailure, RankFate, StageImbalance, status_words};
use oomscope_format::units::{format_bytes, format_duration_us};

/// One rank holds much more than the median rank at some stage.
#[derive(Debug)]
pub struct RankImbalance;

impl Diagnose for RankImbalance {
    const KIND: FindingKind = FindingKind::RankImbalance;
    type Diagnosis<'a> = &'a StageImbalance;

    /// Detection: the largest imbalance of [`crate::ranks::RankAnalysis::imbalance`]
    /// (over 64 MiB and 10% of the median rank).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        ctx.analysis.ranks.as_ref()?.imbalance.first()
    }

    /// Wording.
    fn explain(&self, i: &Self::Diagnosis<'_>) -> Finding {
        let (of_group, ranks_of) = match &i.group {
            Some(g) => (format!(" of group {g}"), format!("ranks of group {g}")),
            None => (String::new(), "ranks".to_owned()),
        };
        finding(
            self,
            Severity::Warning,
            format!(
                "Rank {} holds {} more than the median rank{of_group} at {} ({})",
                i.rank,
                format_bytes(i.excess_bytes()),
                i.stage,
                i.metric
            ),
            format!(
                "at {} rank {} reaches {} of {} where the median of the {} {ranks_of} is {}: \
                 every rank needs room for the largest one, so the job's batch and model size are \
                 set by this rank",
                i.stage,
                i.rank,
                format_bytes(i.max_bytes),
                i.metric,
                i.ranks,
                format_bytes(i.median_bytes)
            ),
            format!(
                "look at what rank {} does that the others do not at {}: evaluation outputs or \
                 metrics gathered on one rank, logging, a full checkpoint gathered for saving \
                 (save with torch.distributed.checkpoint, or gather to CPU in pieces), a model \
                 loaded on every rank before sharding (load on rank 0 and broadcast); when the \
                 difference is by design (first and last pipeline stages), size for it",
                i.rank, i.stage
            ),
            vec![
                Evidence::count("rank", f64::from(i.rank)),
                Evidence::bytes("max_bytes", i.max_bytes as f64),
                Evidence::bytes("median_bytes", i.median_bytes as f64),
                Evidence::bytes("excess_bytes", i.excess_bytes() as f64),
                Evidence::count("ranks", i.ranks as f64),
            ],
        )
    }
}

/// A node's host memory far above its level in the loop: every rank loading (or saving) at once.
#[derive(Debug)]
pub struct NodeHostSpikeRule;

/// Below this share of available host memory left at the spike, it is a warning.
const SPIKE_TIGHT_SHARE: f64 = 0.10;

impl Diagnose for NodeHostSpikeRule {
    const KIND: FindingKind = FindingKind::NodeHostSpike;
    type Diagnosis<'a> = &'a NodeHostSpike;

    /// Detection: the largest of [`crate::ranks::RankAnalysis::node_spikes`] (the
    /// tree's peak over 256 MiB and 25% above its median at the loop's marks).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        ctx.analysis.ranks.as_ref()?.node_spikes.first()
    }

    /// Wording.
    fn explain(&self, s: &Self::Diagnosis<'_>) -> Finding {
        let (place, what, change) = match &s.when {
            SpikeWhen::BeforeFirstMark => (
                "before the first mark".to_owned(),
                "the time programs load the model, checkpoints and data",
                "load the checkpoint once per node or on rank 0 and broadcast it, load with \
                 torch.load(path, mmap=True, weights_only=True) so ranks share the file's pages, \
                 build the model on the meta device and load shards only (FSDP, \
                 torch.distributed.checkpoint), or stagger the ranks' loads",
            ),
            SpikeWhen::AfterLastMark => (
                "after the last mark".to_owned(),
                "the time programs save and tear down",
                "save sharded with torch.distributed.checkpoint instead of gathering the full \
                 state on every rank (or on rank 0), and free the optimizer's state before a \
                 final save",
            ),
            SpikeWhen::BetweenMarks { stage, step } => (
                format!("after {stage} of step {step}, before the next mark"),
                "in the loop between two marks: a checkpoint save or an evaluation that does \
                 not mark",
                "if a checkpoint is saved there, save sharded with torch.distributed.checkpoint \
                 (or gather to CPU in pieces) rather than a full state dict on every rank; \
                 mark the save (oomscope_probe.mark) to see it in the stage table",
            ),
        };
        let tight = s
            .available_bytes
            .is_some_and(|a| (a as f64) < SPIKE_TIGHT_SHARE * (a + s.peak_bytes) as f64);
        let node = if s.source.is_empty() {
            format!("node {}", s.host)
        } else {
            format!("node {} ({})", s.host, s.source)
        };
        let mut explanation = format!(
            "the {} ranks on {node} together held {} of host memory {place}, {} more than in \
             the training loop ({} at the median mark): {what}; when a node runs out, the \
             kernel's OOM killer picks a rank, whichever did it",
            s.ranks,
            format_bytes(s.peak_bytes),
            format_bytes(s.excess_bytes()),
            format_bytes(s.loop_bytes),
        );
        if let Some(a) = s.available_bytes {
            explanation.push_str(&format!("; {} was still available then", format_bytes(a)));
        }
        let mut evidence = vec![
            Evidence::bytes("peak_bytes", s.peak_bytes as f64),
            Evidence::bytes("loop_bytes", s.loop_bytes as f64),
            Evidence::bytes("excess_bytes", s.excess_bytes() as f64),
            Evidence::count("ranks", s.ranks as f64),
            Evidence::micros("t_us", s.t_us as f64),
        ];
        if let Some(a) = s.available_bytes {
            evidence.push(Evidence::bytes("available_bytes", a as f64));
        }
        finding(
            self,
            if tight {
                Severity::Warning
            } else {
                Severity::Info
            },
            format!(
                "The node's host memory spikes {} above the loop {place}",
                format_bytes(s.excess_bytes())
            ),
            explanation,
            change.to_owned(),
            evidence,
        )
    }
}

/// A rank failed first; what the others did.
#[derive(Debug)]
pub struct FirstRankFailure;

impl Diagnose for FirstRankFailure {
    const KIND: FindingKind = FindingKind::FirstRankFailure;
    type Diagnosis<'a> = &'a FirstFailure;

    /// Detection: a rank ran out of memory or ended with a failure
    /// ([`crate::ranks::RankAnalysis::first_failure`]).
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        ctx.analysis.ranks.as_ref()?.first_failure.as_ref()
    }

    /// Wording.
    fn explain(&self, f: &Self::Diagnosis<'_>) -> Finding {
        let fates: Vec<String> = f.others.iter().map(fate).collect();
        let waited = f
            .others
            .iter()
            .filter_map(|o| o.idle_after_failure_us)
            .max();
        let mut explanation = format!("rank {} {} first", f.rank, f.what);
        if let Some(message) = &f.message {
            explanation.push_str(&format!(" (\"{message}\")"));
        }
        if !fates.is_empty() {
            explanation.push_str(&format!("; then {}", fates.join("; ")));
        }
        explanation.push_str(
            ". The other ranks' failures follow from the first one: a rank that loses its peer \
             waits in its next collective until the launcher stops it or the timeout fires",
        );
        let mut evidence = vec![Evidence::count("rank", f64::from(f.rank))];
        if let Some(t) = f.t_us {
            evidence.push(Evidence::micros("t_us", t as f64));
        }
        if let Some(w) = waited {
            evidence.push(Evidence::micros("others_waited_us", w as f64));
        }
        finding(
            self,
            Severity::Critical,
            format!("Rank {} failed first: it {}", f.rank, f.what),
            explanation,
            format!(
                "fix rank {}'s failure (its findings are in the rank table: `collector summary` \
                 shows each rank); the other ranks' errors (timeouts, SIGTERM) are consequences",
                f.rank
            ),
            evidence,
        )
    }
}

/// What one other rank did, in words.
fn fate(o: &RankFate) -> String {
    let mut words = format!("rank {}", o.rank);
    if o.oom {
        words.push_str(" also ran out of memory");
    } else if let Some(idle) = o.idle_after_failure_us {
        words.push_str(&format!(
            " marked nothing more and ended {} later",
            format_duration_us(idle)
        ));
    } else {
        words.push_str(" went on");
    }
    if let Some(status) = o.exit {
        words.push_str(&format!(" ({})", status_words(status)));
    }
    words
}

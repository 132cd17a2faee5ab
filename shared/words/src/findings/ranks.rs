//! The words of the rules only a comparison of ranks makes: one rank holding more than the
//! others, the rank that failed first, and a node whose ranks all did the same heavy thing at
//! once.

use super::finding_text::FindingText;
use oomscope_analysis::facts::SpikeWhen;
use oomscope_analysis::facts::{FirstFailure, RankFate, StageImbalance};
use oomscope_analysis::finding::NodeSpike;
use oomscope_format::units::{format_bytes, format_duration_us};

use crate::phrases::{failure_what, status_words};

/// `rank-imbalance`.
pub(super) fn imbalance(i: &StageImbalance) -> FindingText {
    let (of_group, ranks_of) = match &i.group {
        Some(g) => (format!(" of group {g}"), format!("ranks of group {g}")),
        None => (String::new(), "ranks".to_owned()),
    };
    FindingText::new(
        format!(
            "Rank {} holds {} more than the median rank{of_group} at {} ({})",
            i.rank,
            format_bytes(i.excess_bytes()),
            i.stage,
            i.metric
        ),
        format!(
            "at {} rank {} reaches {} of {} where the median of the {} {ranks_of} is {}: every \
             rank needs room for the largest one, so the job's batch and model size are set by \
             this rank",
            i.stage,
            i.rank,
            format_bytes(i.max_bytes),
            i.metric,
            i.ranks,
            format_bytes(i.median_bytes)
        ),
        vec![
            format!(
                "look at what rank {} does that the others do not at {}: evaluation outputs or \
                 metrics gathered on one rank, logging, a full checkpoint gathered for saving \
                 (save with torch.distributed.checkpoint, or gather to CPU in pieces), a model \
                 loaded on every rank before sharding (load on rank 0 and broadcast)",
                i.rank, i.stage
            ),
            "when the difference is by design (first and last pipeline stages), size for it"
                .to_owned(),
        ],
    )
}

/// `node-host-spike`.
pub(super) fn node_spike(d: &NodeSpike) -> FindingText {
    let s = &d.spike;
    let (place, what, changes): (String, &str, &[&str]) = match &s.when {
        SpikeWhen::BeforeFirstMark => (
            "before the first mark".to_owned(),
            "the time programs load the model, checkpoints and data",
            &[
                "load the checkpoint once per node or on rank 0 and broadcast it, load with \
                 torch.load(path, mmap=True, weights_only=True) so ranks share the file's pages, \
                 build the model on the meta device and load shards only (FSDP, \
                 torch.distributed.checkpoint), or stagger the ranks' loads",
            ],
        ),
        SpikeWhen::AfterLastMark => (
            "after the last mark".to_owned(),
            "the time programs save and tear down",
            &[
                "save sharded with torch.distributed.checkpoint instead of gathering the full \
                 state on every rank (or on rank 0), and free the optimizer's state before a \
                 final save",
            ],
        ),
        SpikeWhen::BetweenMarks { stage, step } => (
            format!("after {stage} of step {step}, before the next mark"),
            "in the loop between two marks: a checkpoint save or an evaluation that does not \
             mark",
            &[
                "if a checkpoint is saved there, save sharded with torch.distributed.checkpoint \
                 (or gather to CPU in pieces) rather than a full state dict on every rank",
                "mark the save (oomscope_probe.mark) to see it in the stage table",
            ],
        ),
    };
    let node = if s.source.is_empty() {
        format!("node {}", s.host)
    } else {
        format!("node {} ({})", s.host, s.source)
    };
    let mut explanation = format!(
        "the {} ranks on {node} together held {} of host memory {place}, {} more than in the \
         training loop ({} at the median mark): {what}; when a node runs out, the kernel's OOM \
         killer picks a rank, whichever did it",
        s.ranks,
        format_bytes(s.peak_bytes),
        format_bytes(s.excess_bytes()),
        format_bytes(s.loop_bytes),
    );
    if let Some(a) = s.available_bytes {
        explanation.push_str(&format!("; {} was still available then", format_bytes(a)));
    }
    FindingText::new(
        format!(
            "The node's host memory spikes {} above the loop {place}",
            format_bytes(s.excess_bytes())
        ),
        explanation,
        changes.iter().map(|c| (*c).to_owned()).collect(),
    )
}

/// `first-rank-failure`.
pub(super) fn first_failure(f: &FirstFailure) -> FindingText {
    let fates: Vec<String> = f.others.iter().map(fate).collect();
    let what = failure_what(f);
    let mut explanation = format!("rank {} {what} first", f.rank);
    if let Some(message) = f.message() {
        explanation.push_str(&format!(" (\"{message}\")"));
    }
    if !fates.is_empty() {
        explanation.push_str(&format!("; then {}", fates.join("; ")));
    }
    explanation.push_str(
        ". The other ranks' failures follow from the first one: a rank that loses its peer waits \
         in its next collective until the launcher stops it or the timeout fires",
    );
    FindingText::new(
        format!("Rank {} failed first: it {what}", f.rank),
        explanation,
        vec![
            format!(
                "fix rank {}'s failure (its findings are in the rank table: `collector summary` \
                 shows each rank)",
                f.rank
            ),
            "the other ranks' errors (timeouts, SIGTERM) are consequences".to_owned(),
        ],
    )
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

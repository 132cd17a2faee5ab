//! The documents `collector summary --json` writes: the analysis's typed facts as they
//! serialise, with the words added where the schema has words (each finding's title,
//! explanation and changes; the first failure's `what`). Field names and order are the JSON
//! contract (`SUMMARY_SCHEMA_VERSION` in the collector: fields are added, never removed).

use std::borrow::Cow;

use serde::Serialize;

use oomscope_analysis::Analysis;
use oomscope_analysis::facts::NodeHostSpike;
use oomscope_analysis::facts::{FirstFailure, RankFate, RankOom, StageImbalance};
use oomscope_analysis::facts::{RankAnalysis, RankSummary};
use oomscope_analysis::finding::Finding;
use oomscope_analysis::job::JobFinding;
use oomscope_analysis::snapshot::analysis::{DeviceAnalysis, SnapshotAnalysis};
use oomscope_analysis::symptom::Symptom;
use oomscope_format::ExitStatus;

use crate::findings::{Worded, worded, worded_snapshot};
use crate::phrases::{failure_what, oom_message};

/// A trace's analysis as `summary --json` writes it.
#[derive(Debug, Serialize)]
pub struct AnalysisJson<'a> {
    /// Every fact of the analysis (its ranks and findings follow, with their words), each OOM's
    /// `message` its words where the record has none (a kill: who killed what, and why).
    #[serde(flatten)]
    pub analysis: Cow<'a, Analysis>,
    /// The symptom the summary leads with ([`oomscope_analysis::symptom::headline`]).
    pub symptom: Option<Symptom>,
    /// Ranks side by side, when the trace holds several.
    pub ranks: Option<RanksJson<'a>>,
    /// What to change, most severe first.
    pub findings: Vec<Worded>,
}

impl<'a> AnalysisJson<'a> {
    /// The document of `analysis`.
    pub fn of(analysis: &'a Analysis) -> AnalysisJson<'a> {
        AnalysisJson {
            analysis: with_oom_words(analysis),
            symptom: oomscope_analysis::symptom::headline(&analysis.symptoms).cloned(),
            ranks: analysis.ranks.as_ref().map(RanksJson::of),
            findings: all_worded(&analysis.findings),
        }
    }
}

/// `analysis`, each OOM's message the words [`oom_message`] says of it (copied only when one
/// differs from the recorded line: a kill records none).
fn with_oom_words(analysis: &Analysis) -> Cow<'_, Analysis> {
    if analysis
        .ooms
        .iter()
        .all(|c| oom_message(c) == c.event.message)
    {
        return Cow::Borrowed(analysis);
    }
    let mut owned = analysis.clone();
    for c in &mut owned.ooms {
        c.event.message = oom_message(c);
    }
    Cow::Owned(owned)
}

fn all_worded(findings: &[Finding]) -> Vec<Worded> {
    findings.iter().map(worded).collect()
}

/// Ranks side by side as `summary --json` writes them.
#[derive(Debug, Serialize)]
pub struct RanksJson<'a> {
    /// Each rank, by rank, with its findings in words.
    pub ranks: Vec<RankJson<'a>>,
    /// Per stage and metric, the rank furthest above the median.
    pub imbalance: &'a [StageImbalance],
    /// The first failure, when a rank failed.
    pub first_failure: Option<FirstFailureJson<'a>>,
    /// Nodes whose host memory spiked far above their level in the loop.
    pub node_spikes: &'a [NodeHostSpike],
}

impl<'a> RanksJson<'a> {
    /// The document of `ranks`.
    pub fn of(ranks: &'a RankAnalysis) -> RanksJson<'a> {
        RanksJson {
            ranks: ranks
                .ranks
                .iter()
                .map(|summary| RankJson {
                    summary,
                    findings: all_worded(&summary.findings),
                })
                .collect(),
            imbalance: &ranks.imbalance,
            first_failure: ranks.first_failure.as_ref().map(FirstFailureJson::of),
            node_spikes: &ranks.node_spikes,
        }
    }
}

/// One rank as `summary --json` writes it.
#[derive(Debug, Serialize)]
pub struct RankJson<'a> {
    /// Its facts.
    #[serde(flatten)]
    pub summary: &'a RankSummary,
    /// Its own findings, in words.
    pub findings: Vec<Worded>,
}

/// The first failure as `summary --json` writes it.
#[derive(Debug, Serialize)]
pub struct FirstFailureJson<'a> {
    /// The rank.
    pub rank: u32,
    /// When (job clock), when known.
    pub t_us: Option<u64>,
    /// What happened, in words (`ran out of host memory after post_forward of step 3`).
    pub what: String,
    /// The error line, when there is one.
    pub message: Option<&'a str>,
    /// Its first OOM, when it ran out of memory.
    pub oom: Option<&'a RankOom>,
    /// How it ended, when known.
    pub exit: Option<ExitStatus>,
    /// The other ranks.
    pub others: &'a [RankFate],
}

impl<'a> FirstFailureJson<'a> {
    fn of(f: &'a FirstFailure) -> FirstFailureJson<'a> {
        FirstFailureJson {
            rank: f.rank,
            t_us: f.t_us,
            what: failure_what(f),
            message: f.message(),
            oom: f.oom.as_ref(),
            exit: f.exit,
            others: &f.others,
        }
    }
}

/// A job's findings in words: a rank's own with its rank before its title.
pub fn job_findings_worded(findings: &[JobFinding]) -> Vec<Worded> {
    findings
        .iter()
        .map(|j| {
            let mut w = worded(&j.finding);
            if let Some(rank) = j.rank {
                w.title = format!("rank {rank}: {}", w.title);
            }
            w
        })
        .collect()
}

/// A memory snapshot's analysis as `summary --json` writes it.
#[derive(Debug, Serialize)]
pub struct SnapshotAnalysisJson<'a> {
    /// Per device that has segments or entries.
    pub devices: &'a [DeviceAnalysis],
    /// Findings, most severe first, in words.
    pub findings: Vec<Worded>,
    /// `expandable_segments` was set.
    pub expandable_segments: bool,
}

impl<'a> SnapshotAnalysisJson<'a> {
    /// The document of `analysis`.
    pub fn of(analysis: &'a SnapshotAnalysis) -> SnapshotAnalysisJson<'a> {
        SnapshotAnalysisJson {
            devices: &analysis.devices,
            findings: analysis.findings().iter().map(worded_snapshot).collect(),
            expandable_segments: analysis.expandable_segments,
        }
    }
}

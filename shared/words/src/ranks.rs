//! Ranks side by side in words: the ranks' table, the rank with the most memory, how each rank
//! ended, where it ran, the largest imbalance. The summary of a trace with several ranks and a
//! job's text print them; the viewer shows the same sentences.

use crate::stage_table::stage_table;
use crate::wrap::{line, section, shorten, wrap};
use oomscope_analysis::facts::RankAnalysis;
use oomscope_format::units::{format_bytes, format_count, format_duration_us};

/// The ranks side by side: the worst rank and the spread first, a row per rank, imbalance, and
/// (in the full summary) each rank's stage table.
pub fn ranks(out: &mut String, r: &RankAnalysis, each_stage_table: bool) {
    section(out, &format!("Ranks ({})", r.ranks.len()));
    if let Some(highest) = rank_highest(r) {
        wrap(out, &highest, 2, 4);
    }
    let header = format!(
        "  {:>5} {:>8} {:<14} {:>6} {:>6} {:>10} {:>10}  {}",
        "rank", "pid", "node", "marks", "step", "host peak", "dev peak", "ended"
    );
    line(out, header.trim_end());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for rank in &r.ranks {
        line(
            out,
            format!(
                "  {:>5} {:>8} {:<14} {:>6} {:>6} {:>10} {:>10}  {}",
                rank.rank,
                opt(rank.pid.map(|p| p.to_string())),
                shorten(&node_of(rank), 14),
                format_count(rank.marks as u64),
                opt(rank.last_step.map(format_count)),
                opt(rank.peak_host_bytes.map(format_bytes)),
                opt(rank.peak_device_bytes.map(format_bytes)),
                rank_ended(rank)
            )
            .trim_end(),
        );
    }
    if let Some(imbalance) = rank_imbalance(r) {
        wrap(out, &imbalance, 2, 4);
    }
    if each_stage_table {
        for rank in &r.ranks {
            if let Some(primary) = rank.stage_table.primary_metric {
                line(out, "");
                line(out, &format!("  rank {}:", rank.rank));
                stage_table(out, &rank.stage_table, primary);
            }
        }
    }
}

/// The ranks' headline: the rank with the most memory and the spread between the highest and
/// the lowest (`highest: rank 1 with 900 MiB of host memory; spread between ranks 300 MiB`).
pub fn rank_highest(r: &RankAnalysis) -> Option<String> {
    let (worst, spread, device) = r.worst()?;
    let peak = if device {
        worst.peak_device_bytes
    } else {
        worst.peak_host_bytes
    };
    Some(format!(
        "highest: rank {} with {} of {} memory; spread between ranks {}",
        worst.rank,
        peak.map(format_bytes).unwrap_or_default(),
        if device { "device" } else { "host" },
        format_bytes(spread)
    ))
}

/// How a rank ended: its OOM (`OOM (host) at 3.2 s`), else its launcher's word, else `-`.
pub fn rank_ended(rank: &oomscope_analysis::facts::RankSummary) -> String {
    match (&rank.oom, rank.exit) {
        (Some(o), _) => format!(
            "OOM ({}) at {}",
            if o.host { "host" } else { "device" },
            format_duration_us(o.t_us)
        ),
        (None, Some(status)) => crate::phrases::status_words(status),
        (None, None) => "-".to_owned(),
    }
}

/// The largest imbalance between ranks, when there is one (`imbalance at post_forward: rank 1
/// 900 MiB vs median 600 MiB (host.rss, +300 MiB)`).
pub fn rank_imbalance(r: &RankAnalysis) -> Option<String> {
    let i = r.imbalance.first()?;
    let more = r.imbalance.iter().filter(|j| j.rank == i.rank).count() - 1;
    Some(format!(
        "imbalance at {}: rank {} {} vs median{} {} ({}, +{}){}",
        i.stage,
        i.rank,
        format_bytes(i.max_bytes),
        i.group
            .as_ref()
            .map_or_else(String::new, |g| format!(" of group {g}")),
        format_bytes(i.median_bytes),
        i.metric,
        format_bytes(i.excess_bytes()),
        if more > 0 {
            format!("; rank {} leads at {more} more stage(s)", i.rank)
        } else {
            String::new()
        }
    ))
}

/// Where a rank ran: its trace's file name in a job (one file per node), else the host.
pub fn node_of(rank: &oomscope_analysis::facts::RankSummary) -> String {
    std::path::Path::new(&rank.source)
        .file_stem()
        .map_or_else(|| rank.host.clone(), |s| s.to_string_lossy().into_owned())
}

//! A job's traces side by side in words (`collector summary DIR`): one line per trace, the ranks'
//! table, the rank with the most memory, how each rank ended, the largest imbalance. The viewer
//! shows the same sentences.

use crate::headline;
use crate::ranks::ranks;
use crate::wrap::{line, section, wrap};
use oomscope_analysis::facts::RankAnalysis;
use oomscope_format::Trace;

/// The summary of a job's traces analysed together (`collector summary DIR`): the traces, the
/// ranks side by side with each one's stage table, and the findings.
pub fn render_job(sources: &[(String, String)], r: &RankAnalysis) -> String {
    let mut out = String::new();
    line(
        &mut out,
        &format!(
            "oomscope: {} traces, {} ranks",
            sources.len(),
            r.ranks.len()
        ),
    );
    for (source, about) in sources {
        line(&mut out, &format!("  {source}: {about}"));
    }
    ranks(&mut out, r, true);
    let findings = crate::json::job_findings_worded(&oomscope_analysis::job::job_findings(r));
    section(&mut out, "Findings");
    if findings.is_empty() {
        line(
            &mut out,
            "  nothing to change: no rule found evidence of a memory problem on any rank",
        );
    }
    for f in &findings {
        let tag = format!("[{}]", f.severity.label().to_ascii_uppercase());
        wrap(
            &mut out,
            &format!("{tag} {} ({})", f.title, f.kind.id()),
            2,
            4,
        );
        wrap(&mut out, &f.explanation, 4, 4);
        wrap(&mut out, &format!("→ {}", f.change), 4, 6);
    }
    out
}

/// One trace of a job in a line: where it ran and how it ended (`host node-1, exited with code 0
/// after 12.0 s`).
pub fn trace_about(trace: &Trace) -> String {
    format!("host {}, {}", trace.metadata.host, headline::ending(trace))
}

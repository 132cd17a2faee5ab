//! A stage table in text: per stage, the count, mean and max of a metric and its change since the
//! previous mark. The summary prints one per metric, a job's text one per rank.

use crate::wrap::{line, section, shorten, wrap};
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::MetricKey;
use oomscope_analysis::facts::StageTable;
use oomscope_format::units::{
    format_bytes, format_bytes_f64, format_count, format_signed_bytes, format_signed_bytes_f64,
};

/// Widest stage name shown in the stage table before it is shortened.
pub const STAGE_COLUMN: usize = 28;

pub fn stage_tables(out: &mut String, analysis: &Analysis) {
    let table = &analysis.stage_table;
    if table.rows.is_empty() {
        return;
    }
    let mut shown: Vec<MetricKey> = Vec::new();
    shown.extend(table.primary_metric);
    if table.metric_index(MetricKey::RESERVED).is_some() && !shown.contains(&MetricKey::RESERVED) {
        shown.push(MetricKey::RESERVED);
    }
    for metric in shown {
        stage_table(out, table, metric);
    }
}

pub fn stage_table(out: &mut String, table: &StageTable, metric: MetricKey) {
    let Some(m) = table.metric_index(metric) else {
        return;
    };
    section(
        out,
        &format!("Stages ({metric}, delta = change since the previous mark)"),
    );
    let header = format!(
        "  {:<STAGE_COLUMN$} {:>7} {:>10} {:>10} {:>11} {:>11}",
        "stage", "count", "mean", "max", "mean delta", "max delta"
    );
    line(out, header.trim_end());
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    for row in &table.rows {
        let s = &row.metrics[m];
        let name = format!("{}{}", row.stage, row.phase.suffix());
        line(
            out,
            &format!(
                "  {:<STAGE_COLUMN$} {:>7} {:>10} {:>10} {:>11} {:>11}",
                shorten(&name, STAGE_COLUMN),
                format_count(row.count as u64),
                opt(s.mean_bytes.map(format_bytes_f64)),
                opt(s.max_bytes.map(format_bytes)),
                opt(s.mean_delta_bytes.map(format_signed_bytes_f64)),
                opt(s.max_delta_bytes.map(format_signed_bytes)),
            ),
        );
    }
    if let Some(b) = &table.baseline {
        let vs: Vec<String> = table
            .rows
            .iter()
            .filter_map(|r| {
                let v = r.metrics[m].max_vs_baseline_bytes?;
                Some(format!("{} {}", r.stage, format_signed_bytes(v)))
            })
            .collect();
        wrap(
            out,
            &format!(
                "max vs {} of step {}: {}",
                b.stage,
                format_count(b.step),
                vs.join(", ")
            ),
            4,
            4,
        );
    }
}

/// The iteration read stage by stage (the analysis's stage breakdown): the metric at each mark and
/// what the model's parts were then; nothing without it.
pub fn stage_breakdown_table(out: &mut String, analysis: &Analysis) {
    let Some(b) = &analysis.stage_breakdown else {
        return;
    };
    let rest = if b.metric.is_host() {
        "activations, data, the interpreter and its libraries"
    } else {
        "activations and temporaries"
    };
    section(
        out,
        &format!(
            "What the memory is, stage by stage (step {}, {})",
            format_count(b.step),
            b.metric
        ),
    );
    let columns = |stage: &str, cells: [&str; 5]| {
        format!(
            "  {:<STAGE_COLUMN$} {:>10} {:>10} {:>10} {:>10} {:>10}",
            shorten(stage, STAGE_COLUMN),
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4]
        )
    };
    let metric = b.metric.to_string();
    line(
        out,
        columns(
            "stage",
            [&metric, "weights", "gradients", "optimizer", "the rest"],
        )
        .trim_end(),
    );
    for r in &b.rows {
        let cells = [
            r.bytes,
            r.weights_bytes,
            r.gradients_bytes,
            r.optimizer_state_bytes,
            r.rest_bytes,
        ]
        .map(format_bytes);
        line(
            out,
            &columns(
                &r.stage,
                [&cells[0], &cells[1], &cells[2], &cells[3], &cells[4]],
            ),
        );
    }
    line(out, &format!("  the rest: {rest}"));
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_analysis::{AnalysisOptions, analyze};
    use oomscope_format::ComponentBreakdown;
    use oomscope_format::units::MIB;
    use oomscope_testkit::run::Run;

    #[test]
    fn the_stages_breakdown_in_words() {
        let mut trace = Run {
            steps: 4,
            ..Run::default()
        }
        .build();
        let after = |step: u64, stage: &str| {
            1 + trace
                .marks
                .iter()
                .find(|m| m.step == step && m.name.as_ref() == stage)
                .unwrap()
                .t_us
        };
        let breakdown = |t_us: u64, step: u64, gradients: u64| ComponentBreakdown {
            t_us,
            step,
            parameters_bytes: 2048 * MIB,
            gradients_bytes: gradients * MIB,
            optimizer_state_bytes: 4096 * MIB,
            ..ComponentBreakdown::default()
        };
        trace.components = vec![
            breakdown(after(0, "post_optimizer_step"), 0, 2048),
            breakdown(after(1, "pre_forward"), 1, 0),
            breakdown(after(1, "post_backward"), 1, 2048),
        ];
        let mut out = String::new();
        stage_breakdown_table(&mut out, &analyze(&trace, &AnalysisOptions::default()));
        insta::assert_snapshot!(out);
    }
}

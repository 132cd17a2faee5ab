//! The `collector estimate` table, and a run's breakdown beside the estimate for the same model,
//! in words laid out like every terminal text ([`crate::wrap`]).

use crate::wrap::{line, wrap};
use oomscope_analysis::estimate::{AgainstEstimate, Disagreement, Estimate, EstimateWarning};
use oomscope_format::units::{format_bytes, format_count};

/// The `collector estimate` table.
pub fn render_estimate(e: &Estimate, what: &str) -> String {
    let mut out = String::new();
    wrap(&mut out, &format!("Training memory estimate: {what}"), 0, 2);
    let row = |out: &mut String, label: &str, bytes: u64, note: &str| {
        line(
            out,
            format!("  {label:<22} {:>10}  {note}", format_bytes(bytes)).trim_end(),
        );
    };
    let frozen = e.parameters - e.trainable_parameters;
    let weights_note = if frozen > 0 {
        format!("{} of them frozen", format_count(frozen))
    } else {
        String::new()
    };
    row(&mut out, "weights", e.weights_bytes, &weights_note);
    row(&mut out, "gradients", e.gradients_bytes, "");
    if e.master_weights_bytes > 0 {
        row(&mut out, "fp32 master weights", e.master_weights_bytes, "");
    }
    row(&mut out, "optimizer state", e.optimizer_bytes, "");
    line(
        &mut out,
        &format!(
            "  (model state: {} bytes per trainable parameter before sharding)",
            e.bytes_per_trainable_parameter
        ),
    );
    match e.activations_bytes {
        Some(a) => {
            let note = e
                .logits_bytes
                .map(|l| format!("of which logits for the loss {}", format_bytes(l)))
                .unwrap_or_default();
            row(&mut out, "activations", a, &note);
        }
        None => line(&mut out, "  activations                   ?  (unknown)"),
    }
    row(&mut out, "CUDA context", e.cuda_context_bytes, "");
    row(
        &mut out,
        "allocator overhead",
        e.allocator_overhead_bytes,
        "caching allocator rounding and fragmentation",
    );
    let share = match (e.fraction_of_gpu, e.gpu_memory_bytes) {
        (Some(f), Some(g)) => format!("{:.0}% of the GPU's {}", f * 100.0, format_bytes(g)),
        _ => String::new(),
    };
    row(&mut out, "total per GPU", e.total_bytes, &share);
    if let Some(batch) = e.max_batch_within_90_percent {
        line(
            &mut out,
            &format!("  largest batch within 90% of the GPU: {batch}"),
        );
    }
    for w in &e.warnings {
        wrap(&mut out, &format!("warning: {}", warning(w)), 0, 2);
    }
    out
}

/// An estimate's warning in words.
pub fn warning(w: &EstimateWarning) -> String {
    match *w {
        EstimateWarning::LongerThanPositions {
            seq_len,
            max_positions,
        } => format!(
            "a sequence of {seq_len} tokens is longer than the model's {max_positions} positions \
             (max_position_embeddings)"
        ),
        EstimateWarning::NoActivations => "activations are not included: give --batch with \
             --activation-bytes-per-sample (collector run measures them as the post_forward \
             growth) or with --model-config and --seq-len"
            .to_owned(),
        EstimateWarning::NearlyFull {
            total_bytes,
            fraction,
            gpu_bytes,
        } => format!(
            "the total, {}, is {:.0}% of the GPU's {}: expect an out-of-memory error",
            format_bytes(total_bytes),
            fraction * 100.0,
            format_bytes(gpu_bytes)
        ),
    }
}

/// Why a measured part differs from the estimate, in words.
pub fn disagreement(why: Disagreement) -> &'static str {
    match why {
        Disagreement::MissingGradients => {
            "fewer gradients than trainable parameters: some had none when it was measured \
             (unused in the loss, or set to None)"
        }
        Disagreement::NoStateYet => {
            "no optimizer state yet when it was measured: optimizers make it at their first step"
        }
        Disagreement::MoreState => {
            "the optimizer keeps more than the estimate counts (amsgrad's maximum, a step count \
             per tensor, state in another precision)"
        }
        Disagreement::LessState => {
            "the optimizer keeps less than the estimate counts (state for some parameters only, \
             or in a lower precision)"
        }
    }
}

/// The section's title, in the summary and the report.
pub const AGAINST_ESTIMATE_TITLE: &str = "Measured against estimated";

/// What a part that does not agree with the estimate is marked with.
pub const DIFFERS: &str = "differs";

/// What the comparison sets side by side.
pub fn against_estimate_heading(a: &AgainstEstimate) -> String {
    format!(
        "the breakdown of step {} beside `{}` for the same model",
        format_count(a.step),
        a.command
    )
}

/// The comparison in words, as a section of the terminal summary.
pub fn render_against_estimate(a: &AgainstEstimate) -> String {
    let mut out = String::new();
    line(&mut out, "");
    line(&mut out, AGAINST_ESTIMATE_TITLE);
    wrap(&mut out, &against_estimate_heading(a), 2, 4);
    line(
        &mut out,
        &format!("  {:<18} {:>10} {:>10}", "part", "measured", "estimated"),
    );
    for p in &a.parts {
        let verdict = if p.agrees() {
            String::new()
        } else {
            format!("  {DIFFERS}")
        };
        line(
            &mut out,
            &format!(
                "  {:<18} {:>10} {:>10}{verdict}",
                p.part,
                format_bytes(p.measured_bytes),
                format_bytes(p.estimated_bytes)
            ),
        );
    }
    for p in &a.parts {
        if let Some(why) = p.why {
            wrap(
                &mut out,
                &format!("{}: {}", p.part, disagreement(why)),
                2,
                4,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_analysis::estimate::against_estimate;
    use oomscope_format::ComponentBreakdown;

    #[test]
    fn the_comparison_reads_as_a_table_with_what_differs_and_why() {
        // 2 M fp32 parameters trained by AdamW: every part as estimated.
        let mut c = ComponentBreakdown {
            step: 3,
            parameters_bytes: 8_000_000,
            gradients_bytes: 8_000_000,
            optimizer_state_bytes: 16_000_000,
            parameter_count: Some(2_000_000),
            trainable_parameter_count: Some(2_000_000),
            optimizers: vec![oomscope_format::NamedBytes {
                name: "AdamW(Net)".into(),
                bytes: 16_000_000,
            }],
            ..ComponentBreakdown::default()
        };
        let text = render_against_estimate(&against_estimate(&c).unwrap());
        assert!(
            text.contains("  optimizer state      15.3 MiB   15.3 MiB\n"),
            "{text}"
        );
        assert!(!text.contains("differs"), "{text}");
        // Before the optimizer's first step: its state differs, and the text says why.
        c.optimizer_state_bytes = 0;
        c.optimizers[0].bytes = 0;
        let text = render_against_estimate(&against_estimate(&c).unwrap());
        assert!(text.contains("differs"), "{text}");
        assert!(
            text.contains("optimizer state: no optimizer state yet"),
            "{text}"
        );
    }
}

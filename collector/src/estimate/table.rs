//! The `collector estimate` table in words, laid out like every terminal text
//! ([`oomscope_analysis::render::wrap`]).

use oomscope_analysis::render::wrap::{line, wrap};
use oomscope_format::units::{format_bytes, format_count};

use super::Estimate;

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
        wrap(&mut out, &format!("warning: {w}"), 0, 2);
    }
    out
}

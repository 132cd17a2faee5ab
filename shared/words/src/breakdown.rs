//! The one line that says what the peak is made of — "allocated 71.8 GiB = weights 14.0 GiB
//! (model 7.00 GiB, ema 7.00 GiB) + gradients 7.00 GiB + optimizer state 28.0 GiB + activations
//! 19.0 GiB" — which the terminal summary and the report both print, so the two never differ.

use oomscope_analysis::facts::{ActivationsBasis, Peak};
use oomscope_format::units::format_bytes;

/// An optimizer as the hooks name it: `opt_d:Adam` (the program's variable, the class) reads
/// "opt_d Adam"; a class alone stays as it is.
pub fn optimizer_label(name: &str) -> String {
    match name.split_once(':') {
        Some((variable, class)) => format!("{variable} {class}"),
        None => name.to_owned(),
    }
}

/// The peak's make-up, or `None` when the trace has no component breakdown near it.
pub fn breakdown_line(peak: &Peak) -> Option<String> {
    let c = peak.components.as_ref()?;
    let b = &c.breakdown;
    let model = b.parameters_bytes.saturating_add(b.buffers_bytes);
    let extras: u64 = b.extras.iter().map(|e| e.bytes).sum();
    let weights = if b.extras.is_empty() {
        format!("weights {}", format_bytes(model))
    } else {
        let named: Vec<String> = std::iter::once(format!("model {}", format_bytes(model)))
            .chain(
                b.extras
                    .iter()
                    .map(|e| format!("{} {}", e.name, format_bytes(e.bytes))),
            )
            .collect();
        format!(
            "weights {} ({})",
            format_bytes(model.saturating_add(extras)),
            named.join(", ")
        )
    };
    let mut parts = vec![weights];
    if b.gradients_bytes > 0 {
        parts.push(format!("gradients {}", format_bytes(b.gradients_bytes)));
    }
    if b.optimizer_state_bytes > 0 {
        let which = match b.optimizers.as_slice() {
            [] => String::new(),
            [one] => format!(" ({})", optimizer_label(&one.name)),
            several => format!(
                " ({})",
                several
                    .iter()
                    .map(|o| format!("{} {}", optimizer_label(&o.name), format_bytes(o.bytes)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        parts.push(format!(
            "optimizer state {}{which}",
            format_bytes(b.optimizer_state_bytes)
        ));
    }
    let rest = peak.bytes.saturating_sub(c.total_bytes);
    parts.push(match (c.activations_bytes, c.activations_basis) {
        (Some(a), Some(ActivationsBasis::AllocatorAllocated)) => {
            format!("activations {}", format_bytes(a))
        }
        (Some(a), Some(ActivationsBasis::ProcessGpu)) => format!(
            "activations, the allocator's cache and the CUDA context {}",
            format_bytes(a)
        ),
        (Some(a), _) => format!(
            "activations and everything else on the GPU {}",
            format_bytes(a)
        ),
        (None, _) if !peak.measure.is_host() => {
            format!("the rest {}", format_bytes(rest))
        }
        (None, _) => match c.forward_rise_bytes.filter(|r| *r > 0) {
            Some(rise) => format!(
                "the rest {} (activations, data, the interpreter and its libraries; a training \
                 forward adds {} to it, the activations kept for backward)",
                format_bytes(rest),
                format_bytes(rise)
            ),
            None => format!(
                "the rest {} (activations, data, the interpreter and its libraries)",
                format_bytes(rest)
            ),
        },
    });
    let mut beside = Vec::new();
    if let Some(cache) = c.cached_bytes {
        beside.push(format!("the allocator's cache {}", format_bytes(cache)));
    }
    if let Some(outside) = c.outside_allocator_bytes {
        beside.push(format!(
            "outside the allocator {} (CUDA context, NCCL, other libraries)",
            format_bytes(outside)
        ));
    }
    let beside = if beside.is_empty() {
        String::new()
    } else {
        format!("; beside it on the GPU: {}", beside.join(" + "))
    };
    Some(format!(
        "{} {} = {}{beside}",
        peak.metric.label(),
        format_bytes(peak.bytes),
        parts.join(" + ")
    ))
}

//! Gradient and tensor statistics.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_format::Trace;
use oomscope_format::units::format_bytes;

/// Latest rows of gradient or tensor statistics listed.
const STAT_ROWS: usize = 40;
/// First non-finite rows listed besides the latest ones.
const FIRST_NONFINITE: usize = 5;

/// Gradient and tensor statistics, NaN/Inf highlighted.
#[component]
pub fn Statistics(trace: Arc<Trace>) -> impl IntoView {
    if trace.gradients.is_empty() && trace.tensors.is_empty() {
        return ().into_any();
    }
    let bad_grads = trace
        .gradients
        .iter()
        .filter(|g| g.nan_count + g.inf_count > 0)
        .count();
    // The first non-finite records say where it started; the latest say where it stands.
    let first_nonfinite_grads: Vec<usize> = trace
        .gradients
        .iter()
        .enumerate()
        .filter(|(_, g)| g.nan_count + g.inf_count > 0)
        .map(|(i, _)| i)
        .take(FIRST_NONFINITE)
        .collect();
    let first_nonfinite_tensors: Vec<usize> = trace
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.nan_count + t.inf_count > 0)
        .map(|(i, _)| i)
        .take(FIRST_NONFINITE)
        .collect();
    let grads = trace
        .gradients
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            first_nonfinite_grads.contains(i) || *i + STAT_ROWS >= trace.gradients.len()
        })
        .map(|(_, g)| {
            let bad = g.nan_count + g.inf_count > 0;
            view! {
                <tr class:nonfinite=bad>
                    <td>{g.step}</td><td class="num">{format!("{:.4e}", g.global_norm)}</td>
                    <td class="num">{g.params_with_grad}</td><td class="num">{format_bytes(g.gradient_bytes)}</td>
                    <td class="num">{g.nan_count}</td><td class="num">{g.inf_count}</td>
                </tr>
            }
        })
        .collect_view();
    let bad_tensors = trace
        .tensors
        .iter()
        .filter(|t| t.nan_count + t.inf_count > 0)
        .count();
    let tensors = trace
        .tensors
        .iter()
        .enumerate()
        .filter(|(i, _)| first_nonfinite_tensors.contains(i) || *i + STAT_ROWS >= trace.tensors.len())
        .map(|(_, t)| {
            let bad = t.nan_count + t.inf_count > 0;
            let shape = t.shape.iter().map(u64::to_string).collect::<Vec<_>>().join("×");
            view! {
                <tr class:nonfinite=bad>
                    <td>{t.step}</td><td>{t.name.as_ref().to_owned()}</td><td>{shape}</td>
                    <td>{t.dtype.as_ref().to_owned()}</td><td class="num">{format_bytes(t.bytes)}</td>
                    <td class="num">{format!("{:.4}", t.min)}</td><td class="num">{format!("{:.4}", t.max)}</td>
                    <td class="num">{format!("{:.4}", t.mean)}</td><td class="num">{format!("{:.4}", t.std)}</td>
                    <td class="num">{t.nan_count}</td><td class="num">{t.inf_count}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section id="statistics">
            <h2>"Gradients and tensors"</h2>
            <p>{format!("{} gradient summaries ({bad_grads} with NaN/Inf), {} tensor statistics ({bad_tensors} with NaN/Inf); listed: the first {FIRST_NONFINITE} non-finite ones and the latest {STAT_ROWS}.",
                trace.gradients.len(), trace.tensors.len())}</p>
            <div class="scroll">
            <h3>"Gradients (per step)"</h3>
            <table id="gradient-table"><thead><tr><th>"step"</th><th>"global norm"</th><th>"params"</th>
                <th>"bytes"</th><th>"NaN"</th><th>"Inf"</th></tr></thead><tbody>{grads}</tbody></table>
            <h3>"Tensors"</h3>
            <table id="tensor-table"><thead><tr><th>"step"</th><th>"tensor"</th><th>"shape"</th><th>"dtype"</th>
                <th>"bytes"</th><th>"min"</th><th>"max"</th><th>"mean"</th><th>"std"</th><th>"NaN"</th><th>"Inf"</th></tr></thead>
                <tbody>{tensors}</tbody></table>
            </div>
        </section>
    }
    .into_any()
}

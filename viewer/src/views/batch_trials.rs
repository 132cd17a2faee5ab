//! Batch-size trials and the fit of peak memory against the batch.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::BatchFitMethod;
use oomscope_format::units::{format_bytes, format_bytes_f64};
use oomscope_format::{Trace, TrialOutcome};
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use crate::view_model::bytes_text;

/// Batch-size trials: peak against batch size, the fitted line, the budget and the
/// recommended batch.
#[component]
pub fn BatchTrials(trace: Arc<Trace>, analysis: Arc<Analysis>) -> impl IntoView {
    if trace.batch_trials.is_empty() {
        return ().into_any();
    }
    let fit = analysis
        .batch_fit
        .clone()
        .filter(|f| f.method == BatchFitMethod::Trials);
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let trials = trace.batch_trials.clone();
    let drawn_fit = fit.clone();
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            canvas.set_width(canvas.client_width().max(300) as u32);
            draw_trials(&canvas, &trials, drawn_fit.as_ref());
        }
    });
    let rows = trace
        .batch_trials
        .iter()
        .map(|t| {
            let outcome = match t.outcome {
                TrialOutcome::Fit => "fit",
                TrialOutcome::Oom => "out of memory",
                TrialOutcome::Error => "error",
            };
            view! { <tr class:nonfinite=t.outcome != TrialOutcome::Fit>
            <td class="num">{t.batch_size}</td><td>{outcome}</td>
            <td class="num">{bytes_text(t.peak_bytes)}</td></tr> }
        })
        .collect_view();
    let recommendation = fit.map(|f| {
        view! { <p id="recommended-batch" data-batch=f.max_batch.to_string()>
            {format!("Recommended batch size: {} (fit: {} per sample + {} fixed, budget {} = {:.0}% of {}).",
                f.max_batch, format_bytes_f64(f.per_sample_bytes), format_bytes_f64(f.fixed_bytes),
                format_bytes(f.budget_bytes), (1.0 - f.margin) * 100.0, format_bytes(f.device_total_bytes))}
        </p> }
    });
    view! {
        <section id="batch">
            <h2>"Batch-size search"</h2>
            {recommendation}
            <div class="split">
                <canvas id="batch-canvas" node_ref=canvas_ref height="260"></canvas>
                <table><thead><tr><th>"batch"</th><th>"outcome"</th><th>"peak"</th></tr></thead><tbody>{rows}</tbody></table>
            </div>
        </section>
    }
    .into_any()
}

fn draw_trials(
    canvas: &web_sys::HtmlCanvasElement,
    trials: &[oomscope_format::BatchTrial],
    fit: Option<&oomscope_analysis::facts::BatchFit>,
) -> Option<()> {
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&WHITE).ok()?;
    let x_max = trials
        .iter()
        .map(|t| t.batch_size)
        .chain(fit.map(|f| f.max_batch))
        .max()
        .unwrap_or(1) as f64
        * 1.15;
    let y_max = trials
        .iter()
        .filter_map(|t| t.peak_bytes)
        .chain(fit.map(|f| f.budget_bytes))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(78)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .ok()?;
    chart
        .configure_mesh()
        .x_desc("batch size")
        .y_label_formatter(&|v| format_bytes(v.max(0.0) as u64))
        .draw()
        .ok()?;
    if let Some(f) = fit {
        let line = |x: f64| f.fixed_bytes + f.per_sample_bytes * x;
        // End the fitted line where it leaves the plot: a point beyond the range would be
        // clamped to the edge and bend the line.
        let x_end = if f.per_sample_bytes > 0.0 {
            x_max.min((y_max - f.fixed_bytes) / f.per_sample_bytes)
        } else {
            x_max
        };
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, line(0.0)), (x_end, line(x_end))],
                BLUE.stroke_width(1),
            ))
            .ok()?;
        let budget = f.budget_bytes as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, budget), (x_max, budget)],
                RED.mix(0.6),
            ))
            .ok()?;
        let best = f.max_batch as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(best, 0.0), (best, y_max)],
                GREEN.stroke_width(2),
            ))
            .ok()?;
    }
    chart
        .draw_series(trials.iter().filter_map(|t| {
            Some(Circle::new(
                (t.batch_size as f64, t.peak_bytes? as f64),
                5,
                BLUE.filled(),
            ))
        }))
        .ok()?;
    chart
        .draw_series(
            trials
                .iter()
                .filter(|t| t.outcome != TrialOutcome::Fit)
                .map(|t| Cross::new((t.batch_size as f64, y_max * 0.95), 6, RED.stroke_width(2))),
        )
        .ok()?;
    root.present().ok()
}

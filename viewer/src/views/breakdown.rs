//! The breakdown at the peak: model state by component and activations, as a bar chart, and
//! beside the estimate for the same model (the terminal summary's last section).

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::breakdown_peak;
use oomscope_format::units::format_bytes;
use oomscope_words::breakdown::breakdown_line;
use oomscope_words::estimate::{AGAINST_ESTIMATE_TITLE, DIFFERS, against_estimate_heading};
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use crate::view_model::PALETTE;

/// Draws a horizontal bar chart of named sizes.
fn draw_bars(canvas: &web_sys::HtmlCanvasElement, parts: &[(String, u64)]) -> Option<()> {
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&WHITE).ok()?;
    let max = parts.iter().map(|p| p.1).max().unwrap_or(1).max(1) as f64 * 1.1;
    let n = parts.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .margin(8)
        .x_label_area_size(26)
        .y_label_area_size(8)
        .build_cartesian_2d(0f64..max, 0f64..n)
        .ok()?;
    // Bars are labelled by colour: the table beside the chart carries the same swatches.
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|x| format_bytes(x.max(0.0) as u64))
        .x_labels(5)
        .draw()
        .ok()?;
    chart
        .draw_series(parts.iter().enumerate().map(|(i, (_, bytes))| {
            let y = n - i as f64;
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            Rectangle::new(
                [(0.0, y - 0.85), (*bytes as f64, y - 0.15)],
                RGBColor(r, g, b).filled(),
            )
        }))
        .ok()?;
    root.present().ok()
}

/// What made up memory at the peak: parameters, gradients, optimizer state, activations, other.
#[component]
pub fn Breakdown(analysis: Arc<Analysis>) -> impl IntoView {
    let Some(peak) = breakdown_peak(&analysis.peaks) else {
        return ().into_any();
    };
    if peak.components.is_none() {
        return view! {
            <section id="breakdown"><h2>"At the peak"</h2>
            <p>{format!("{} peaked at {}; the trace has no component breakdown (the zero-code hooks record one at the end of the first training step; the tch Session and the helper's components() do too).",
                peak.metric, format_bytes(peak.bytes))}</p></section>
        }
        .into_any();
    }
    let parts: Vec<(String, u64)> = peak
        .parts()
        .into_iter()
        .map(|p| (p.name.to_string(), p.bytes))
        .collect();
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let drawn = parts.clone();
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            canvas.set_width(canvas.client_width().max(300) as u32);
            draw_bars(&canvas, &drawn);
        }
    });
    let rows = parts
        .iter()
        .enumerate()
        .map(|(i, (name, bytes))| {
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            view! { <tr data-part=name.clone() data-bytes=bytes.to_string()>
                <td><span class="swatch" style:background-color=format!("rgb({r},{g},{b})")></span>" "{name.clone()}</td>
                <td class="num">{format_bytes(*bytes)}</td></tr> }
        })
        .collect_view();
    let stage = oomscope_words::phrases::peak_place(peak);
    // The same comparison the terminal summary ends with.
    let against = analysis.against_estimate.as_ref().map(|a| {
        let rows = a
            .parts
            .iter()
            .map(|p| {
                view! { <tr data-part=p.part data-measured=p.measured_bytes.to_string()
                        data-estimated=p.estimated_bytes.to_string()>
                    <td>{p.part}</td>
                    <td class="num">{format_bytes(p.measured_bytes)}</td>
                    <td class="num">{format_bytes(p.estimated_bytes)}</td>
                    <td>{if p.agrees() { "" } else { DIFFERS }}</td></tr> }
            })
            .collect_view();
        let why = a
            .parts
            .iter()
            .filter_map(|p| p.why.map(|w| view! { <li>{format!("{}: {}", p.part, oomscope_words::estimate::disagreement(w))}</li> }))
            .collect_view();
        view! {
            <div id="against-estimate">
                <h3>{AGAINST_ESTIMATE_TITLE}</h3>
                <p>{against_estimate_heading(a)}</p>
                <table class="against-estimate">
                    <tr><th>"part"</th><th class="num">"measured"</th><th class="num">"estimated"</th><th></th></tr>
                    {rows}
                </table>
                <ul>{why}</ul>
            </div>
        }
    });
    view! {
        <section id="breakdown">
            <h2>"At the peak"</h2>
            <p>{format!("{} peaked at {}{stage}.", peak.metric, format_bytes(peak.bytes))}</p>
            <p class="breakdown-line">{breakdown_line(peak)}</p>
            <div class="split">
                <canvas id="breakdown-canvas" node_ref=canvas_ref height="220"></canvas>
                <table class="breakdown">{rows}</table>
            </div>
            {against}
        </section>
    }
    .into_any()
}

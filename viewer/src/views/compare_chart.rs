//! Two runs overlaid by step: memory at each training step of A (before) and B (after) on one
//! chart, so a fixed leak shows as a slope turned flat and a lowered peak as a line moved down,
//! whatever the two runs' timing.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_analysis::compare::StepOverlay;
use oomscope_format::units::format_count;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_canvas::CanvasBackend;

use crate::chart::{Theme, font, frame, keep_drawn};

/// The chart's height in CSS pixels.
const HEIGHT_CSS_PX: u32 = 240;

/// A's colour (the run before the fix) and B's.
const A_COLOR: RGBColor = RGBColor(200, 60, 40);
const B_COLOR: RGBColor = RGBColor(31, 119, 180);

/// The overlay of both runs' memory per step.
#[component]
pub fn CompareChart(overlay: Arc<StepOverlay>, a_name: String, b_name: String) -> impl IntoView {
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let drawn = overlay.clone();
    let names = (a_name.clone(), b_name.clone());
    keep_drawn(
        canvas_ref,
        HEIGHT_CSS_PX,
        || {},
        move |canvas, scale| draw(canvas, &drawn, &names, scale).is_some(),
    );
    let last = |points: &[(u64, u64)]| points.last().map(|(_, v)| v.to_string());
    view! {
        <h3>{format!("{} per step, A and B", overlay.metric)}</h3>
        <canvas id="compare-chart" node_ref=canvas_ref style:height=format!("{HEIGHT_CSS_PX}px")
            data-metric=overlay.metric.label()
            data-a-steps=overlay.a.len().to_string() data-b-steps=overlay.b.len().to_string()
            data-a-last-bytes=last(&overlay.a) data-b-last-bytes=last(&overlay.b)
            role="img" aria-label=format!("{} per step: A {a_name}, B {b_name}", overlay.metric)></canvas>
    }
}

fn draw(
    canvas: &web_sys::HtmlCanvasElement,
    d: &StepOverlay,
    (a_name, b_name): &(String, String),
    scale: f64,
) -> Option<()> {
    let theme = Theme::current();
    let px = |css: f64| (css * scale).round() as u32;
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let all = d.a.iter().chain(&d.b);
    let x0 = all.clone().map(|(s, _)| *s).min()? as f64;
    let x1 = (all.clone().map(|(s, _)| *s).max()? as f64).max(x0 + 1.0);
    let top = all.clone().map(|(_, v)| *v).max()? as f64;
    let bottom = all.map(|(_, v)| *v).min()? as f64;
    let pad = ((top - bottom) * 0.08).max(top * 0.002).max(1.0);
    let steps = |s: &f64| format_count(s.max(0.0) as u64);
    let y = (bottom - pad).max(0.0)..top + pad;
    let mut chart = frame(&root, theme, scale, (x0..x1, y), "step", Some(&steps))?;
    for (points, color) in [(&d.a, A_COLOR), (&d.b, B_COLOR)] {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|(s, v)| (*s as f64, *v as f64)),
                color.stroke_width(px(2.0)),
            ))
            .ok()?;
    }
    // The legend: which line is which run.
    for (row, text, color) in [
        (0.0, format!("A {a_name}"), &A_COLOR),
        (1.0, format!("B {b_name}"), &B_COLOR),
    ] {
        let style = font(theme, scale, 12.0)
            .color(color)
            .pos(Pos::new(HPos::Left, VPos::Top));
        let at = (px(96.0) as i32, px(12.0 + row * 16.0) as i32);
        root.draw(&Text::new(text, at, style)).ok()?;
    }
    root.present().ok()
}

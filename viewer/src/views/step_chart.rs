//! Memory along the run's clock: the value at each stage against the step number (the forward's
//! in a run that never trains; the epoch, each stage's lowest, when memory is kept at epoch
//! ends), so a steady leak draws as a straight line (over time it draws as plateaus and ramps),
//! with the leak's fitted line carried on to the memory limit and where it meets it marked.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::Clock;
use oomscope_format::Trace;
use oomscope_format::units::{format_bytes, format_count};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_canvas::CanvasBackend;

use crate::chart::{Theme, font, frame, keep_drawn};
use crate::view_model::{PALETTE, StepChartData, step_chart};

/// The chart's height in CSS pixels.
const HEIGHT_CSS_PX: u32 = 280;

/// The per-step chart; nothing when the trace has fewer than two training steps.
#[component]
pub fn StepChart(trace: Arc<Trace>, analysis: Arc<Analysis>) -> impl IntoView {
    let Some(data) = step_chart(&trace, &analysis) else {
        return ().into_any();
    };
    let data = Arc::new(data);
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let drawn = data.clone();
    keep_drawn(
        canvas_ref,
        HEIGHT_CSS_PX,
        || {},
        move |canvas, scale| draw(canvas, &drawn, scale).is_some(),
    );
    let unit = data.clock.unit();
    let drawn_as = match data.clock {
        Clock::Epoch => format!("{}: each stage's lowest value in each epoch", data.metric),
        _ => format!("{} at each stage per {unit}", data.metric),
    };
    let caption = match (&data.projection, data.full_beyond) {
        (Some((_, (at, limit))), beyond) => format!(
            "{drawn_as}; dashed: the leak's fit, carried on to the {} ({}) at {unit} {}{}",
            data.limit.as_ref().map_or("limit", |(n, _)| n.as_str()),
            format_bytes(*limit),
            format_count(*at),
            if beyond { ", past the right edge" } else { "" }
        ),
        (None, _) if data.fit.is_some() => {
            format!("{drawn_as}; dashed: the leak's fit (no known limit to carry it to)")
        }
        (None, _) => drawn_as,
    };
    let full_step = data.projection.map(|(_, (s, _))| s.to_string());
    let heading = format!("Memory per {unit}");
    let label = format!("memory at each stage per {unit}");
    view! {
        <section id="per-step">
            <h2>{heading}</h2>
            <p class="hint" id="per-step-caption">{caption}</p>
            <canvas id="step-chart" node_ref=canvas_ref style:height=format!("{HEIGHT_CSS_PX}px")
                data-full-at-step=full_step role="img" aria-label=label></canvas>
        </section>
    }
    .into_any()
}

fn draw(canvas: &web_sys::HtmlCanvasElement, d: &StepChartData, scale: f64) -> Option<()> {
    let theme = Theme::current();
    let px = |css: f64| (css * scale).round() as u32;
    let font = |size: f64| font(theme, scale, size);
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let values = d
        .stages
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(_, v)| *v));
    let data_max = values.clone().max().unwrap_or(1) as f64;
    let data_min = values.min().unwrap_or(0) as f64;
    let top = d
        .projection
        .map_or(data_max, |(_, (_, limit))| data_max.max(limit as f64));
    let (y0, y1) = if d.projection.is_some() {
        (0.0, top * 1.05)
    } else {
        let pad = ((data_max - data_min) * 0.08)
            .max(data_max * 0.002)
            .max(1.0);
        ((data_min - pad).max(0.0), data_max + pad)
    };
    let (x0, x1) = (d.x_range.0 as f64, d.x_range.1 as f64);
    let steps = |s: &f64| format_count(s.max(0.0) as u64);
    let mut chart = frame(
        &root,
        theme,
        scale,
        (x0..x1, y0..y1),
        d.clock.unit(),
        Some(&steps),
    )?;
    for (_, color, points) in &d.stages {
        let (r, g, b) = PALETTE[*color];
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|(s, v)| (*s as f64, *v as f64)),
                RGBColor(r, g, b).stroke_width(px(1.5)),
            ))
            .ok()?;
    }
    if let Some((slope, intercept, first, last)) = d.fit {
        let at = |s: u64| intercept + slope * s as f64;
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(first as f64, at(first)), (last as f64, at(last))],
                px(6.0),
                px(3.0),
                theme.ink.stroke_width(px(2.0)),
            )))
            .ok()?;
    }
    let red = RGBColor(200, 0, 0);
    if let Some(((s0, v0), (s1, limit))) = d.projection {
        // Clip the line at the right edge when the limit lies beyond it.
        let end = (s1 as f64).min(x1);
        let slope = if s1 > s0 {
            (limit as f64 - v0 as f64) / (s1 - s0) as f64
        } else {
            0.0
        };
        let end_v = v0 as f64 + slope * (end - s0 as f64);
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(s0 as f64, v0 as f64), (end, end_v)],
                px(6.0),
                px(3.0),
                red.stroke_width(px(2.0)),
            )))
            .ok()?;
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(x0, limit as f64), (x1, limit as f64)],
                px(4.0),
                px(4.0),
                red.mix(0.7).stroke_width(px(1.0)),
            )))
            .ok()?;
        let label = d
            .limit
            .as_ref()
            .map_or_else(String::new, |(n, b)| format!("{n} {}", format_bytes(*b)));
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (x0 + (x1 - x0) * 0.01, limit as f64),
                font(11.0)
                    .color(&red)
                    .pos(Pos::new(HPos::Left, VPos::Bottom)),
            )))
            .ok()?;
        if !d.full_beyond {
            chart
                .draw_series(std::iter::once(Circle::new(
                    (s1 as f64, limit as f64),
                    px(4.0),
                    red.filled(),
                )))
                .ok()?;
            chart
                .draw_series(std::iter::once(Text::new(
                    format!("full at step {}", format_count(s1)),
                    (s1 as f64, limit as f64 * 0.97),
                    font(11.0).color(&red).pos(Pos::new(HPos::Right, VPos::Top)),
                )))
                .ok()?;
        }
    }
    root.present().ok()
}

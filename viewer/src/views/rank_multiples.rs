//! Ranks as small multiples: one small chart per rank of its memory over time, all on the same
//! time axis and the same byte scale, so the rank that holds more stands out at a glance; a
//! dashed line in each marks the ranks' median peak. The rank with the most memory is drawn in
//! red; clicking a chart picks that rank for the drill-down below.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_analysis::facts::{CurveScale, RankAnalysis, RankCurve};
use oomscope_format::units::format_bytes;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use crate::chart::{Theme, keep_drawn};

/// Each chart's height in CSS pixels.
const HEIGHT_CSS_PX: u32 = 56;

/// Most ranks drawn (the rank table lists them all).
const MAX_RANKS: usize = 64;

/// The line of the rank with the most memory, and of the others.
const WORST: RGBColor = RGBColor(200, 40, 30);
const OTHER: RGBColor = RGBColor(31, 119, 180);

/// One small chart per rank (nothing with fewer than two ranks with samples).
#[component]
pub fn RankMultiples(
    ranks: Arc<RankAnalysis>,
    prefix: &'static str,
    selected: RwSignal<Option<u32>>,
) -> impl IntoView {
    // The scale (shared with the terminal's reading of imbalance: the same lower median).
    let Some(scale) = ranks.curve_scale() else {
        return ().into_any();
    };
    let curves: Vec<(u32, Arc<RankCurve>)> = ranks
        .ranks
        .iter()
        .filter_map(|r| Some((r.rank, Arc::new(r.curve.clone()?))))
        .take(MAX_RANKS)
        .collect();
    let worst = ranks.worst().map(|(w, _, _)| w.rank);
    let what = if scale.device {
        "GPU memory of each rank's process"
    } else {
        "resident host memory of each rank"
    };
    let charts = curves
        .into_iter()
        .map(|(rank, curve)| {
            let peak = curve.peak_bytes().unwrap_or(0);
            let is_worst = worst == Some(rank);
            view! {
                <figure class="rank-multiple" data-rank=rank.to_string() data-peak-bytes=peak.to_string()
                    class:worst=is_worst class:selected=move || selected.get() == Some(rank)
                    on:click=move |_| selected.set(Some(rank))>
                    <figcaption>{format!("rank {rank} · {}", format_bytes(peak))}</figcaption>
                    <RankCurveChart curve=curve scale=scale worst=is_worst/>
                </figure>
            }
        })
        .collect_view();
    view! {
        <div id=format!("{prefix}rank-multiples") class="rank-multiples">
            <p class="hint">{format!(
                "{what} over the job, on one scale (top {}); dashed: the ranks' median peak ({}). Click a rank to open it below.",
                format_bytes(scale.top_bytes),
                format_bytes(scale.median_peak_bytes)
            )}</p>
            <div class="rank-grid">{charts}</div>
        </div>
    }
    .into_any()
}

#[component]
fn RankCurveChart(curve: Arc<RankCurve>, scale: CurveScale, worst: bool) -> impl IntoView {
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    keep_drawn(
        canvas_ref,
        HEIGHT_CSS_PX,
        || {},
        move |canvas, dpr| draw(canvas, &curve, scale, worst, dpr).is_some(),
    );
    view! { <canvas class="rank-curve" node_ref=canvas_ref style:height=format!("{HEIGHT_CSS_PX}px")></canvas> }
}

fn draw(
    canvas: &web_sys::HtmlCanvasElement,
    curve: &RankCurve,
    s: CurveScale,
    worst: bool,
    dpr: f64,
) -> Option<()> {
    let theme = Theme::current();
    let px = |css: f64| (css * dpr).round() as u32;
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let mut chart = ChartBuilder::on(&root)
        .margin(px(2.0))
        .build_cartesian_2d(
            s.t0_us as f64..s.t1_us as f64,
            0.0..s.top_bytes as f64 * 1.05,
        )
        .ok()?;
    let color = if worst { WORST } else { OTHER };
    chart
        .draw_series(AreaSeries::new(
            curve.points.iter().map(|(t, v)| (*t as f64, *v as f64)),
            0.0,
            color.mix(0.15),
        ))
        .ok()?;
    chart
        .draw_series(LineSeries::new(
            curve.points.iter().map(|(t, v)| (*t as f64, *v as f64)),
            color.stroke_width(px(1.5)),
        ))
        .ok()?;
    let median = s.median_peak_bytes as f64;
    chart
        .draw_series(std::iter::once(DashedPathElement::new(
            vec![(s.t0_us as f64, median), (s.t1_us as f64, median)],
            px(3.0),
            px(3.0),
            theme.text.mix(0.5).stroke_width(px(1.0)),
        )))
        .ok()?;
    root.present().ok()
}

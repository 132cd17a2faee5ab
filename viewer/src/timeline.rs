//! The memory timeline: every "in use" counter over time, eval phases and (when zoomed in)
//! stages shaded, OOMs and notes marked, wheel zoom, drag pan, and a tooltip with the values and
//! the stage under the cursor.
//!
//! Each redraw asks `shared`'s min/max decimation for one bucket per pixel column of the visible
//! window, so a redraw costs the same for a 1-hour 1 kHz trace as for a short one: a line through
//! each bucket's maximum (a spike that caused an OOM is never averaged away) and a faint bar from
//! minimum to maximum where they differ.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_trace::analysis::series::{BlockIndex, Bucket, decimate_indexed, decimate_points};
use oomscope_trace::units::format_bytes;
use oomscope_trace::{Phase, Trace};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use crate::browser;
use crate::view_model::{
    PALETTE, Plotted, Window, eval_spans, hover_lines, plotted_counters, stage_spans,
};

/// Most stage intervals shaded at once (more would be stripes, not information).
const MAX_STAGE_SPANS: usize = 120;

/// Where the plot sits inside the canvas, for mapping the cursor back to time.
#[derive(Debug, Clone, Copy, Default)]
struct PlotArea {
    x0_px: i32,
    x1_px: i32,
    y0_px: i32,
    y1_px: i32,
}

/// The timeline of one trace.
#[component]
pub fn Timeline(trace: Arc<Trace>) -> impl IntoView {
    let full = Window {
        t0_us: trace.samples.times_us().first().copied().unwrap_or(0),
        t1_us: trace.duration_us().max(1),
    };
    let window = RwSignal::new(full);
    let plotted = plotted_counters(&trace);
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let area = StoredValue::new(PlotArea::default());
    let drag = StoredValue::new(None::<(i32, Window)>);
    let hover = RwSignal::new(None::<(i32, i32, Vec<String>)>);
    let eval = eval_spans(&trace);

    let legend = plotted
        .iter()
        .map(|p| {
            let (r, g, b) = PALETTE[p.color];
            let swatch = format!("rgb({r},{g},{b})");
            view! {
                <span class="legend-item">
                    <span class="swatch" style:background-color=swatch></span>
                    {p.label.clone()}
                </span>
            }
        })
        .collect_view();
    let allocated_legend = trace.marks.iter().any(|m| m.snapshot.is_some()).then(|| {
        view! {
            <span class="legend-item">
                <span class="swatch" style:background-color="rgba(0,0,0,0.55)"></span>
                "allocated (allocator, at stage marks)"
            </span>
        }
    });
    let eval_legend = has_eval(&trace).then(|| {
        view! {
            <span class="legend-item">
                <span class="swatch" style:background-color="rgba(255,200,80,0.5)"></span>
                "eval phase"
            </span>
        }
    });

    {
        let trace = trace.clone();
        let plotted = plotted.clone();
        // Built once: every redraw of a wide window then reads blocks, not millions of points.
        let indexes: Vec<BlockIndex> = plotted
            .iter()
            .map(|p| BlockIndex::new(&trace.samples, p.id))
            .collect();
        let drawing = Arc::new((trace, plotted, indexes, eval));
        let pending = StoredValue::new(false);
        Effect::new(move |_| {
            // Track the window; draw at most once per animation frame however many wheel or
            // drag events arrive in between.
            window.track();
            if pending.get_value() {
                return;
            }
            pending.set_value(true);
            let drawing = drawing.clone();
            request_animation_frame(move || {
                pending.set_value(false);
                let (trace, plotted, indexes, eval) = &*drawing;
                let w = window.get_untracked();
                let Some(canvas) = canvas_ref.get_untracked() else {
                    return;
                };
                let width = canvas.client_width().max(300) as u32;
                if canvas.width() != width {
                    canvas.set_width(width);
                }
                let start_ms = browser::now_ms();
                if let Some(a) = draw(&canvas, trace, plotted, indexes, eval, w) {
                    area.set_value(a);
                    browser::record_first_chart();
                    // How long a redraw takes (BENCHMARKS.md reads it through the browser test).
                    let took_ms = browser::now_ms() - start_ms;
                    let _ = canvas.set_attribute("data-draw-ms", &format!("{took_ms:.1}"));
                }
            });
        });
    }

    let at_fraction = move |x: i32| {
        let a = area.get_value();
        if a.x1_px <= a.x0_px {
            return None;
        }
        let f = f64::from(x - a.x0_px) / f64::from(a.x1_px - a.x0_px);
        (0.0..=1.0).contains(&f).then_some(f)
    };
    let on_wheel = move |ev: leptos::ev::WheelEvent| {
        ev.prevent_default();
        let at = at_fraction(ev.offset_x()).unwrap_or(0.5);
        let factor = 1.25f64.powf(ev.delta_y() / 100.0);
        window.update(|w| *w = w.zoom(factor, at, full));
    };
    let on_down = move |ev: leptos::ev::MouseEvent| {
        drag.set_value(Some((ev.offset_x(), window.get_untracked())));
    };
    let on_up = move |_| drag.set_value(None);
    let hover_trace = trace.clone();
    let hover_plotted = plotted.clone();
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let x = ev.offset_x();
        let a = area.get_value();
        if let Some((x_start, w_start)) = drag.get_value() {
            if ev.buttons() & 1 == 1 && a.x1_px > a.x0_px {
                let fraction = -f64::from(x - x_start) / f64::from(a.x1_px - a.x0_px);
                window.set(w_start.pan(fraction, full));
                return;
            }
            drag.set_value(None);
        }
        let inside_y = ev.offset_y() >= a.y0_px && ev.offset_y() <= a.y1_px;
        match at_fraction(x).filter(|_| inside_y) {
            Some(f) => {
                let w = window.get_untracked();
                let t = w.t0_us + (w.width_us() as f64 * f) as u64;
                let lines = hover_lines(&hover_trace, &hover_plotted, t);
                hover.set(Some((x, ev.offset_y(), lines)));
            }
            None => hover.set(None),
        }
    };
    let zoom_by = move |factor: f64| window.update(|w| *w = w.zoom(factor, 0.5, full));
    let pan_by = move |fraction: f64| window.update(|w| *w = w.pan(fraction, full));

    view! {
        <section class="timeline" id="timeline">
            <h2>"Timeline"</h2>
            <div class="toolbar">
                <button id="zoom-in" on:click=move |_| zoom_by(0.5)>"Zoom in"</button>
                <button id="zoom-out" on:click=move |_| zoom_by(2.0)>"Zoom out"</button>
                <button on:click=move |_| pan_by(-0.5)>"◀"</button>
                <button on:click=move |_| pan_by(0.5)>"▶"</button>
                <button id="zoom-reset" on:click=move |_| window.set(full)>"Whole run"</button>
                <span class="hint">"wheel: zoom · drag: pan · double-click: whole run"</span>
            </div>
            <div class="legend">{legend}{allocated_legend}{eval_legend}</div>
            <div class="chart-wrap">
                <canvas
                    id="timeline-canvas"
                    node_ref=canvas_ref
                    height="360"
                    on:wheel=on_wheel
                    on:mousedown=on_down
                    on:mouseup=on_up
                    on:mousemove=on_move
                    on:mouseleave=move |_| {
                        hover.set(None);
                        drag.set_value(None);
                    }
                    on:dblclick=move |_| window.set(full)
                ></canvas>
                {move || {
                    hover
                        .get()
                        .map(|(x, y, lines)| {
                            view! {
                                <div
                                    class="tooltip"
                                    style:left=format!("{}px", x + 14)
                                    style:top=format!("{}px", y + 14)
                                >
                                    {lines.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}
                                </div>
                            }
                        })
                }}
            </div>
        </section>
    }
}

/// Draws the visible window; returns where the plot area ended up.
fn draw(
    canvas: &web_sys::HtmlCanvasElement,
    trace: &Trace,
    plotted: &[Plotted],
    indexes: &[BlockIndex],
    eval: &[(u64, u64)],
    w: Window,
) -> Option<PlotArea> {
    let backend = CanvasBackend::with_canvas_object(canvas.clone())?;
    let root = backend.into_drawing_area();
    root.fill(&WHITE).ok()?;
    let (width_px, _) = root.dim_in_pixel();
    let buckets = (width_px as usize).saturating_sub(90).max(10);

    let series: Vec<_> = plotted
        .iter()
        .zip(indexes)
        .map(|(_, ix)| decimate_indexed(&trace.samples, ix, w.t0_us, w.t1_us, buckets))
        .collect();
    let allocated = allocated_buckets(trace, w, buckets);
    let y_max = series
        .iter()
        .flatten()
        .map(|b| b.max)
        .chain(allocated.iter().map(|b| b.max))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.08;

    let secs = |t: u64| t as f64 / 1e6;
    let (x0, x1) = (secs(w.t0_us), secs(w.t1_us).max(secs(w.t0_us) + 1e-6));
    let mut chart = ChartBuilder::on(&root)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(78)
        .build_cartesian_2d(x0..x1, 0f64..y_max)
        .ok()?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .x_labels(8)
        .y_labels(6)
        .y_label_formatter(&|v| format_bytes(v.max(0.0) as u64))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .ok()?;

    // Eval phases, then (zoomed in) each stage as a coloured band along the top.
    let shade = RGBColor(255, 200, 80).mix(0.18).filled();
    chart
        .draw_series(
            eval.iter()
                .filter(|(a, b)| *b >= w.t0_us && *a <= w.t1_us)
                .map(|(a, b)| Rectangle::new([(secs(*a), 0.0), (secs(*b), y_max)], shade)),
        )
        .ok()?;
    if let Some(spans) = stage_spans(trace, w.t0_us, w.t1_us, MAX_STAGE_SPANS) {
        let mut names: Vec<&str> = Vec::new();
        let band = y_max * 0.03;
        chart
            .draw_series(spans.iter().map(|s| {
                let k = names.iter().position(|n| *n == s.stage).unwrap_or_else(|| {
                    names.push(&s.stage);
                    names.len() - 1
                });
                let (r, g, b) = PALETTE[(k + 3) % PALETTE.len()];
                Rectangle::new(
                    [(secs(s.t0_us), y_max - band), (secs(s.t1_us), y_max)],
                    RGBColor(r, g, b).mix(0.45).filled(),
                )
            }))
            .ok()?;
    }

    for (p, buckets) in plotted.iter().zip(&series) {
        let (r, g, b) = PALETTE[p.color];
        let color = RGBColor(r, g, b);
        draw_envelope(&mut chart, buckets, color.mix(0.35), color.stroke_width(2))?;
    }
    if !allocated.is_empty() {
        draw_envelope(
            &mut chart,
            &allocated,
            BLACK.mix(0.2),
            BLACK.mix(0.55).stroke_width(1),
        )?;
    }

    // OOMs in red, notes in grey: vertical lines across the plot.
    let red = RGBColor(200, 0, 0).stroke_width(2);
    chart
        .draw_series(
            trace
                .ooms
                .iter()
                .filter(|o| o.t_us >= w.t0_us && o.t_us <= w.t1_us)
                .map(|o| PathElement::new(vec![(secs(o.t_us), 0.0), (secs(o.t_us), y_max)], red)),
        )
        .ok()?;
    let grey = RGBColor(120, 120, 120).stroke_width(1);
    chart
        .draw_series(
            trace
                .notes
                .iter()
                .filter(|n| n.t_us >= w.t0_us && n.t_us <= w.t1_us)
                .map(|n| PathElement::new(vec![(secs(n.t_us), 0.0), (secs(n.t_us), y_max)], grey)),
        )
        .ok()?;
    root.present().ok()?;
    let (xs, ys) = chart.plotting_area().get_pixel_range();
    Some(PlotArea {
        x0_px: xs.start,
        x1_px: xs.end,
        y0_px: ys.start,
        y1_px: ys.end,
    })
}

/// One series as the chart shows it: a faint bar from each bucket's minimum to its maximum, and
/// a line through the maxima (so no spike is averaged away).
fn draw_envelope(
    chart: &mut ChartContext<'_, CanvasBackend, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    buckets: &[Bucket],
    bar: RGBAColor,
    line: ShapeStyle,
) -> Option<()> {
    let mid = |b: &Bucket| (b.t_start_us / 2 + b.t_end_us / 2) as f64 / 1e6;
    chart
        .draw_series(
            buckets.iter().filter(|b| b.min != b.max).map(|b| {
                PathElement::new(vec![(mid(b), b.min as f64), (mid(b), b.max as f64)], bar)
            }),
        )
        .ok()?;
    chart
        .draw_series(LineSeries::new(
            buckets.iter().map(|b| (mid(b), b.max as f64)),
            line,
        ))
        .ok()?;
    Some(())
}

/// The allocator's `allocated` bytes reported with the marks, reduced like a counter: one
/// min/max bucket per pixel column (a step goes up in forward and down in backward, so a
/// line through every mark would be a solid block).
fn allocated_buckets(trace: &Trace, w: Window, buckets: usize) -> Vec<Bucket> {
    let start = trace.marks.partition_point(|m| m.t_us < w.t0_us);
    let end = trace.marks.partition_point(|m| m.t_us <= w.t1_us);
    let allocated = trace.marks[start..end]
        .iter()
        .filter_map(|m| Some((m.t_us, m.snapshot?.allocated_bytes)));
    decimate_points(allocated, w.t0_us, w.t1_us, buckets)
}

/// Whether the marks include an eval phase (the legend mentions the shading only then).
pub fn has_eval(trace: &Trace) -> bool {
    trace.marks.iter().any(|m| m.phase == Phase::Eval)
}

//! The memory timeline: every "in use" counter over time, the memory limits as dashed lines, the
//! peak marked, eval phases and (when zoomed in) stages shaded in colours fixed per stage with a
//! legend, OOMs and notes marked and named on hover; wheel or keys zoom, shift-drag or arrow keys
//! pan, a plain drag selects a range and lists what each counter did in it.
//!
//! Each redraw asks `shared`'s min/max decimation for one bucket per pixel column of the visible
//! window, so a redraw costs the same for a 1-hour 1 kHz trace as for a short one: a line through
//! each bucket's maximum (a spike that caused an OOM is never averaged away) and a faint bar from
//! minimum to maximum where they differ. The canvas is sized in device pixels (crisp at any
//! device-pixel ratio) and redrawn when the window resizes; colours follow the page's dark mode.

use std::sync::Arc;

use crate::series::{BlockIndex, Bucket, decimate_indexed, decimate_points};
use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_format::units::{format_bytes, format_duration_us};
use oomscope_format::{Phase, Trace};
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters_canvas::CanvasBackend;

use crate::browser;
use crate::chart::{Chart, PlotArea, Theme, font, frame, keep_drawn, tooltip};
use crate::view_model::{
    Limit, PALETTE, Peak, Plotted, RangeRow, Window, YAxis, bytes_text, change_text, eval_spans,
    hover_lines, limits, marker_lines, peak, plotted_counters, range_rows, stage_colors,
    stage_spans, steps_in,
};

/// Most stage intervals shaded at once (more would be stripes, not information).
const MAX_STAGE_SPANS: usize = 120;

/// The chart's height in CSS pixels.
const HEIGHT_CSS_PX: u32 = 360;

/// How far (CSS pixels) the cursor may be from an OOM or note line for the tooltip to name it.
const MARKER_HOVER_CSS_PX: f64 = 6.0;

/// A drag shorter than this (CSS pixels) is a click, not a selection.
const MIN_SELECTION_CSS_PX: i32 = 4;

/// A drag in progress: where it started and what it does.
#[derive(Debug, Clone, Copy)]
enum Drag {
    /// Shift-drag: moves the window.
    Pan { x_css: i32, window: Window },
    /// Plain drag: selects a time range.
    Select { x_css: i32, t_us: u64 },
}

/// Everything a redraw reads, built once per trace.
struct Drawing {
    trace: Arc<Trace>,
    plotted: Vec<Plotted>,
    indexes: Vec<BlockIndex>,
    eval: Vec<(u64, u64)>,
    limits: Vec<Limit>,
    peak: Option<Peak>,
    stage_colors: Vec<(String, usize)>,
}

/// The timeline of one trace.
#[component]
pub fn Timeline(trace: Arc<Trace>) -> impl IntoView {
    let full = Window {
        t0_us: trace.samples.times_us().first().unwrap_or(0),
        t1_us: trace.duration_us().max(1),
    };
    let window = RwSignal::new(full);
    let y_axis = RwSignal::new(YAxis::Fit);
    let selection = RwSignal::new(None::<(u64, u64)>);
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let plotted = plotted_counters(&trace);
    let area = StoredValue::new(PlotArea::default());
    let drag = StoredValue::new(None::<Drag>);
    let hover = RwSignal::new(None::<(i32, i32, Vec<String>)>);
    let drawing = Arc::new(Drawing {
        indexes: plotted
            .iter()
            .map(|p| BlockIndex::new(&trace.samples, p.id))
            .collect(),
        eval: eval_spans(&trace),
        limits: limits(&trace, &plotted),
        peak: peak(&trace, &plotted),
        stage_colors: stage_colors(&trace),
        plotted: plotted.clone(),
        trace: trace.clone(),
    });

    let legend = legend(&trace, &drawing);

    {
        let drawing = drawing.clone();
        let track = move || {
            window.track();
            y_axis.track();
            selection.track();
        };
        keep_drawn(canvas_ref, HEIGHT_CSS_PX, track, move |canvas, scale| {
            let start_ms = browser::now_ms();
            let view = View {
                window: window.get_untracked(),
                y_axis: y_axis.get_untracked(),
                selection: selection.get_untracked(),
                scale,
            };
            let Some(a) = draw(canvas, &drawing, view) else {
                return false;
            };
            area.set_value(a);
            browser::record_first_time("data-first-chart-ms");
            // How long a redraw takes (BENCHMARKS.md reads it through the browser test).
            let took_ms = browser::now_ms() - start_ms;
            let _ = canvas.set_attribute("data-draw-ms", &format!("{took_ms:.1}"));
            true
        });
    }

    let time_at = move |x_css: i32| {
        let f = area.get_value().fraction(x_css)?;
        let w = window.get_untracked();
        Some(w.t0_us + (w.width_us() as f64 * f) as u64)
    };
    let on_wheel = move |ev: leptos::ev::WheelEvent| {
        ev.prevent_default();
        let at = area.get_value().fraction(ev.offset_x()).unwrap_or(0.5);
        let factor = 1.25f64.powf(ev.delta_y() / 100.0);
        window.update(|w| *w = w.zoom(factor, at, full));
    };
    let on_down = move |ev: leptos::ev::MouseEvent| {
        if ev.button() != 0 {
            return;
        }
        let x = ev.offset_x();
        let started = if ev.shift_key() {
            Some(Drag::Pan {
                x_css: x,
                window: window.get_untracked(),
            })
        } else {
            time_at(x).map(|t_us| Drag::Select { x_css: x, t_us })
        };
        drag.set_value(started);
    };
    let finish_drag = move |x_css: i32| {
        if let Some(Drag::Select { x_css: x0, t_us }) = drag.get_value() {
            if (x_css - x0).abs() >= MIN_SELECTION_CSS_PX
                && let Some(t1) = time_at(x_css)
            {
                selection.set(Some((t_us.min(t1), t_us.max(t1))));
            } else {
                selection.set(None);
            }
        }
        drag.set_value(None);
    };
    let hover_drawing = drawing.clone();
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let x = ev.offset_x();
        let a = area.get_value();
        match drag.get_value() {
            Some(Drag::Pan { x_css, window: w0 }) if ev.buttons() & 1 == 1 => {
                let plot_css = a.width_css();
                if plot_css > 0.0 {
                    window.set(w0.pan(-f64::from(x - x_css) / plot_css, full));
                }
                return;
            }
            Some(Drag::Select { t_us, .. }) if ev.buttons() & 1 == 1 => {
                if let Some(t1) = time_at(x) {
                    selection.set(Some((t_us.min(t1), t_us.max(t1))));
                }
                return;
            }
            Some(_) => drag.set_value(None),
            None => {}
        }
        match time_at(x).filter(|_| a.inside_y(ev.offset_y())) {
            Some(t) => {
                let d = &hover_drawing;
                let mut lines = hover_lines(&d.trace, &d.plotted, t);
                let w = window.get_untracked();
                let plot_css = a.width_css().max(1.0);
                let tolerance = (w.width_us() as f64 * MARKER_HOVER_CSS_PX / plot_css) as u64;
                lines.extend(marker_lines(&d.trace, t, tolerance));
                hover.set(Some((x, ev.offset_y(), lines)));
            }
            None => hover.set(None),
        }
    };
    let zoom_by = move |factor: f64| window.update(|w| *w = w.zoom(factor, 0.5, full));
    let pan_by = move |fraction: f64| window.update(|w| *w = w.pan(fraction, full));
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        let handled = match ev.key().as_str() {
            "+" | "=" => {
                zoom_by(0.5);
                true
            }
            "-" | "_" => {
                zoom_by(2.0);
                true
            }
            "ArrowLeft" => {
                pan_by(-0.25);
                true
            }
            "ArrowRight" => {
                pan_by(0.25);
                true
            }
            "0" | "Home" => {
                window.set(full);
                true
            }
            "Escape" => {
                selection.set(None);
                true
            }
            _ => false,
        };
        if handled {
            ev.prevent_default();
        }
    };
    let zoom_to_selection = move |_| {
        if let Some((a, b)) = selection.get_untracked() {
            window.set(Window::span(a, b, full));
        }
    };
    let y_options = YAxis::ALL
        .iter()
        .enumerate()
        .map(|(i, (_, label))| view! { <option value=i.to_string()>{*label}</option> })
        .collect_view();
    let choose_y = move |ev: leptos::ev::Event| {
        if let Some((mode, _)) = event_target_value(&ev)
            .parse::<usize>()
            .ok()
            .and_then(|i| YAxis::ALL.get(i))
        {
            y_axis.set(*mode);
        }
    };
    let range_trace = trace.clone();
    let range_plotted = plotted.clone();
    let range_table = move || {
        let (t0, t1) = selection.get()?;
        let rows = range_rows(&range_trace, &range_plotted, t0, t1);
        let steps = steps_in(&range_trace, t0, t1).map_or_else(
            || "no stage marks in it".to_owned(),
            |(a, b)| format!("steps {a}–{b}"),
        );
        Some(view! {
            <div id="selection" class="selection">
                <p>
                    <strong>{format!("Selected {} to {} ({})", format_duration_us(t0),
                        format_duration_us(t1), format_duration_us(t1 - t0))}</strong>
                    {format!(": {steps}. ")}
                    <button id="zoom-selection" on:click=zoom_to_selection>"Zoom to the selection"</button>
                    " "
                    <button id="clear-selection" on:click=move |_| selection.set(None)>"Clear"</button>
                </p>
                <table id="selection-table">
                    <thead><tr><th>"counter"</th><th>"at start"</th><th>"at end"</th>
                        <th>"change"</th><th>"lowest"</th><th>"highest"</th></tr></thead>
                    <tbody>{rows.into_iter().map(range_row).collect_view()}</tbody>
                </table>
            </div>
        })
    };

    view! {
        <section class="timeline" id="timeline">
            <h2>"Timeline"</h2>
            <div class="toolbar">
                <button id="zoom-in" on:click=move |_| zoom_by(0.5) title="zoom in (+)">"Zoom in"</button>
                <button id="zoom-out" on:click=move |_| zoom_by(2.0) title="zoom out (-)">"Zoom out"</button>
                <button id="pan-left" on:click=move |_| pan_by(-0.5) title="earlier (←)" aria-label="earlier">"◀"</button>
                <button id="pan-right" on:click=move |_| pan_by(0.5) title="later (→)" aria-label="later">"▶"</button>
                <button id="zoom-reset" on:click=move |_| window.set(full) title="whole run (0)">"Whole run"</button>
                <label>" y axis "
                    <select id="y-axis" on:change=choose_y>{y_options}</select>
                </label>
                <span class="hint">"drag: select · shift-drag: pan · wheel or +/−: zoom · ←/→: pan · 0: whole run"</span>
            </div>
            {legend}
            <div class="chart-wrap">
                <canvas
                    id="timeline-canvas"
                    node_ref=canvas_ref
                    tabindex="0"
                    role="img"
                    aria-label="memory over time; + and - zoom, arrow keys pan, 0 shows the whole run"
                    style:height=format!("{HEIGHT_CSS_PX}px")
                    on:wheel=on_wheel
                    on:mousedown=on_down
                    on:mouseup=move |ev: leptos::ev::MouseEvent| finish_drag(ev.offset_x())
                    on:mousemove=on_move
                    on:keydown=on_key
                    on:mouseleave=move |_| {
                        hover.set(None);
                        if matches!(drag.get_value(), Some(Drag::Pan { .. })) {
                            drag.set_value(None);
                        }
                    }
                    on:dblclick=move |_| {
                        selection.set(None);
                        window.set(full);
                    }
                ></canvas>
                {move || hover.get().map(|(x, y, lines)| tooltip(canvas_ref, x, y, lines))}
            </div>
            {range_table}
        </section>
    }
}

fn range_row(r: RangeRow) -> impl IntoView {
    view! {
        <tr data-counter=r.label.clone()>
            <td>{r.label.clone()}</td>
            <td class="num">{bytes_text(r.start_bytes)}</td>
            <td class="num">{bytes_text(r.end_bytes)}</td>
            <td class="num">{change_text(r.start_bytes, r.end_bytes)}</td>
            <td class="num">{bytes_text(r.min_bytes)}</td>
            <td class="num">{bytes_text(r.max_bytes)}</td>
        </tr>
    }
}

/// The legend: counters, limits, the peak, the allocator line, eval shading, and each stage's
/// colour (the bands appear when zoomed in far enough).
fn legend(trace: &Trace, d: &Drawing) -> impl IntoView + use<> {
    let swatch = |color: String, label: String| {
        view! {
            <span class="legend-item">
                <span class="swatch" style:background-color=color></span>
                {label}
            </span>
        }
    };
    let mut items: Vec<AnyView> = d
        .plotted
        .iter()
        .map(|p| {
            let (r, g, b) = PALETTE[p.color];
            swatch(format!("rgb({r},{g},{b})"), p.label.clone()).into_any()
        })
        .collect();
    for l in &d.limits {
        items.push(
            view! {
                <span class="legend-item limit">
                    <span class="dash"></span>{format!("{} {}", l.label, format_bytes(l.bytes))}
                </span>
            }
            .into_any(),
        );
    }
    if let Some(p) = &d.peak {
        items.push(
            view! {
                <span class="legend-item" id="peak-legend" data-bytes=p.bytes.to_string()>
                    "▲ "{format!("peak {} {} at {}", p.label, format_bytes(p.bytes), format_duration_us(p.t_us))}
                </span>
            }
            .into_any(),
        );
    }
    if trace.marks.has_allocator() {
        items.push(
            swatch(
                "rgba(128,128,128,0.8)".to_owned(),
                "allocated (allocator, at stage marks)".to_owned(),
            )
            .into_any(),
        );
    }
    if has_eval(trace) {
        items.push(swatch("rgba(255,200,80,0.5)".to_owned(), "eval phase".to_owned()).into_any());
    }
    let stages = (!d.stage_colors.is_empty()).then(|| {
        let entries = d
            .stage_colors
            .iter()
            .map(|(name, c)| {
                let (r, g, b) = PALETTE[*c];
                view! {
                    <span class="legend-item" data-stage=name.clone()>
                        <span class="swatch band" style:background-color=format!("rgba({r},{g},{b},0.55)")></span>
                        {name.clone()}
                    </span>
                }
            })
            .collect_view();
        view! {
            <div class="legend stages" id="stage-legend">
                <span class="hint">"stages (bands along the top when zoomed in):"</span>{entries}
            </div>
        }
    });
    view! {
        <div class="legend">{items}</div>
        {stages}
    }
}

/// What one redraw shows.
#[derive(Debug, Clone, Copy)]
struct View {
    window: Window,
    y_axis: YAxis,
    selection: Option<(u64, u64)>,
    /// Device pixels per CSS pixel.
    scale: f64,
}

/// Draws the visible window; returns where the plot area ended up.
fn draw(canvas: &web_sys::HtmlCanvasElement, d: &Drawing, v: View) -> Option<PlotArea> {
    let theme = Theme::current();
    let px = |css: f64| (css * v.scale).round() as u32;
    let backend = CanvasBackend::with_canvas_object(canvas.clone())?;
    let root = backend.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let (width_px, _) = root.dim_in_pixel();
    let w = v.window;
    let buckets = ((f64::from(width_px) / v.scale) as usize)
        .saturating_sub(90)
        .max(10);

    let series: Vec<_> = d
        .indexes
        .iter()
        .map(|ix| decimate_indexed(&d.trace.samples, ix, w.t0_us, w.t1_us, buckets))
        .collect();
    let allocated = allocated_buckets(&d.trace, w, buckets);
    let values = || {
        series
            .iter()
            .flatten()
            .chain(allocated.iter())
            .flat_map(|b| [b.min, b.max])
    };
    let (y0, y1) = v.y_axis.range(
        values().min().unwrap_or(0),
        values().max().unwrap_or(1),
        &d.limits,
    );

    let secs = |t: u64| t as f64 / 1e6;
    let (x0, x1) = (secs(w.t0_us), secs(w.t1_us).max(secs(w.t0_us) + 1e-6));
    let font = |size: f64| font(theme, v.scale, size);
    let mut chart = frame(&root, theme, v.scale, (x0..x1, y0..y1), "seconds", None)?;

    // Eval phases, then (zoomed in) each stage as a band along the top, in its own colour.
    let shade = RGBColor(255, 200, 80).mix(0.18).filled();
    chart
        .draw_series(
            d.eval
                .iter()
                .filter(|(a, b)| *b >= w.t0_us && *a <= w.t1_us)
                .map(|(a, b)| Rectangle::new([(secs(*a), y0), (secs(*b), y1)], shade)),
        )
        .ok()?;
    if let Some(spans) = stage_spans(&d.trace, w.t0_us, w.t1_us, MAX_STAGE_SPANS) {
        let band = (y1 - y0) * 0.03;
        chart
            .draw_series(spans.iter().map(|s| {
                let c = d
                    .stage_colors
                    .iter()
                    .find(|(n, _)| *n == s.stage)
                    .map_or(0, |(_, c)| *c);
                let (r, g, b) = PALETTE[c];
                Rectangle::new(
                    [(secs(s.t0_us), y1 - band), (secs(s.t1_us), y1)],
                    RGBColor(r, g, b).mix(0.55).filled(),
                )
            }))
            .ok()?;
    }
    if let Some((a, b)) = v.selection {
        let fill = RGBColor(31, 119, 180).mix(0.14).filled();
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(secs(a), y0), (secs(b), y1)],
                fill,
            )))
            .ok()?;
    }

    for (p, buckets) in d.plotted.iter().zip(&series) {
        let (r, g, b) = PALETTE[p.color];
        let color = RGBColor(r, g, b);
        draw_envelope(
            &mut chart,
            buckets,
            color.mix(0.35).stroke_width(px(1.0)),
            color.stroke_width(px(2.0)),
        )?;
    }
    if !allocated.is_empty() {
        draw_envelope(
            &mut chart,
            &allocated,
            theme.ink.mix(0.2).stroke_width(px(1.0)),
            theme.ink.mix(0.55).stroke_width(px(1.0)),
        )?;
    }

    // Memory limits: dashed, labelled at the right end when inside the visible range.
    let limit_style = RGBColor(200, 0, 0).mix(0.75).stroke_width(px(1.5));
    for l in d
        .limits
        .iter()
        .filter(|l| (y0..=y1).contains(&(l.bytes as f64)))
    {
        let y = l.bytes as f64;
        chart
            .draw_series(std::iter::once(DashedPathElement::new(
                vec![(x0, y), (x1, y)],
                px(6.0),
                px(4.0),
                limit_style,
            )))
            .ok()?;
        let label = format!("{} {}", l.label, format_bytes(l.bytes));
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (x0 + (x1 - x0) * 0.01, y),
                font(11.0).color(&RGBColor(200, 0, 0)),
            )))
            .ok()?;
    }
    // The peak of the first counter, when in view.
    if let Some(p) = d
        .peak
        .as_ref()
        .filter(|p| (w.t0_us..=w.t1_us).contains(&p.t_us))
    {
        let at = (secs(p.t_us), p.bytes as f64);
        let ink = theme.text;
        chart
            .draw_series(std::iter::once(TriangleMarker::new(
                at,
                px(6.0),
                ink.filled(),
            )))
            .ok()?;
        let label = format!("peak {}", format_bytes(p.bytes));
        let right = at.0 > x0 + (x1 - x0) * 0.85;
        let anchor = if right {
            Pos::new(HPos::Right, VPos::Bottom)
        } else {
            Pos::new(HPos::Left, VPos::Bottom)
        };
        let dx = if right {
            -(x1 - x0) * 0.005
        } else {
            (x1 - x0) * 0.005
        };
        chart
            .draw_series(std::iter::once(Text::new(
                label,
                (at.0 + dx, at.1),
                font(11.0).pos(anchor),
            )))
            .ok()?;
    }

    // OOMs in red, notes in grey: vertical lines across the plot, OOMs labelled.
    let red = RGBColor(200, 0, 0).stroke_width(px(2.0));
    let in_view = |t: u64| t >= w.t0_us && t <= w.t1_us;
    for o in d.trace.ooms.iter().filter(|o| in_view(o.t_us)) {
        let x = secs(o.t_us);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, y0), (x, y1)],
                red,
            )))
            .ok()?;
        chart
            .draw_series(std::iter::once(Text::new(
                "OOM".to_owned(),
                (x, y1),
                font(11.0)
                    .color(&RGBColor(200, 0, 0))
                    .pos(Pos::new(HPos::Right, VPos::Top)),
            )))
            .ok()?;
    }
    let grey = RGBColor(120, 120, 120).stroke_width(px(1.0));
    chart
        .draw_series(
            d.trace
                .notes
                .iter()
                .filter(|n| in_view(n.t_us))
                .map(|n| PathElement::new(vec![(secs(n.t_us), y0), (secs(n.t_us), y1)], grey)),
        )
        .ok()?;
    root.present().ok()?;
    Some(PlotArea::of(&chart, v.scale))
}

/// One series as the chart shows it: a faint bar from each bucket's minimum to its maximum, and
/// a line through the maxima (so no spike is averaged away).
fn draw_envelope(
    chart: &mut Chart<'_>,
    buckets: &[Bucket],
    bar: ShapeStyle,
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
    let Some(column) = trace
        .marks
        .allocator_column(oomscope_format::AllocatorQuantity::Allocated)
    else {
        return Vec::new();
    };
    let allocated = trace.marks[start..end]
        .iter()
        .zip(column.range(start..end))
        .filter(|(_, bytes)| *bytes != oomscope_format::MISSING)
        .map(|(m, bytes)| (m.t_us, bytes));
    decimate_points(allocated, w.t0_us, w.t1_us, buckets)
}

/// Whether the marks include an eval phase (the legend mentions the shading only then).
pub fn has_eval(trace: &Trace) -> bool {
    trace.marks.iter().any(|m| m.phase == Phase::Eval)
}

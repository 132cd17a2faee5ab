//! A PyTorch memory snapshot: its findings first, then per GPU the facts `collector summary`
//! prints (the same lines, from `oomscope_words::snapshot`), active memory over the
//! recorded entries stacked by the sites that held the most (hover: the site's whole stack;
//! click: what was alive at that moment, block by block), reserved memory over it, and what was
//! alive at the peak and at the dump by first user frame, each row showing its full stack on
//! hover.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_analysis::snapshot::analysis::{DeviceAnalysis, SiteBytes};
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_snapshot::Snapshot;
use oomscope_snapshot::timeline::{
    AliveAt, StackedPoint, StackedTimeline, alive_at, entry_at, events_of,
};
use oomscope_snapshot::{site_of, stack_text};
use oomscope_words::snapshot::{about_line, alive_line, device_lines, titles};
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use super::allocator_map::AllocatorMap;
use super::findings::Findings;
use crate::chart::{PlotArea, Theme, frame, keep_drawn, tooltip};
use crate::load::OpenSnapshot;

/// The chart's height in CSS pixels.
const HEIGHT_CSS_PX: u32 = 260;

/// Reserved memory's colour.
const RESERVED: RGBColor = RGBColor(255, 127, 14);

/// Stack lines in the tooltip.
const STACK_LINES: usize = 14;

/// Blocks listed of what was alive at a picked moment.
const ALIVE_ROWS: usize = 40;

/// The sites' colours, bottom band first (none of them the reserved line's orange).
const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(214, 39, 40),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
];

/// The whole snapshot. `attached` when it is shown inside a trace's report, under the OOM that
/// saved it (its ids then do not clash with the trace's).
#[component]
pub fn SnapshotReport(
    name: String,
    snap: Arc<OpenSnapshot>,
    #[prop(optional)] attached: bool,
) -> impl IntoView {
    let (section_id, about_id, findings_id) = if attached {
        (
            "oom-snapshot",
            "oom-snapshot-about",
            "oom-snapshot-findings",
        )
    } else {
        ("snapshot", "snapshot-about", "findings")
    };
    let devices = snap
        .analysis
        .devices
        .iter()
        .zip(&snap.stacked)
        .map(|(d, stacked)| view! { <Device snap=snap.clone() device=d.clone() stacked=stacked.clone()/> })
        .collect_view();
    view! {
        <section id=section_id>
            <h2>{format!("Memory snapshot: {name}")}</h2>
            <p id=about_id class="hint">{about_line(&snap.snapshot, &snap.analysis)}</p>
            {snap.snapshot.warnings.iter().map(|w| view! { <div class="banner warn">{w.clone()}</div> }).collect_view()}
        </section>
        <Findings findings=snap.analysis.findings().iter().map(oomscope_words::findings::worded_snapshot).collect() id=findings_id
            empty="Nothing to change: no rule found a problem in this snapshot."/>
        {devices}
    }
}

#[component]
fn Device(
    snap: Arc<OpenSnapshot>,
    device: DeviceAnalysis,
    stacked: Arc<StackedTimeline>,
) -> impl IntoView {
    let lines = device_lines(&device)
        .into_iter()
        .map(|l| view! { <li>{l}</li> })
        .collect_view();
    let index = device.device;
    let reserved = Arc::new(device.timeline.clone());
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let area = StoredValue::new(PlotArea::default());
    let hover = RwSignal::new(None::<(i32, i32, Vec<String>)>);
    let picked = RwSignal::new(None::<usize>);
    let (drawn, drawn_reserved) = (stacked.clone(), reserved.clone());
    keep_drawn(
        canvas_ref,
        HEIGHT_CSS_PX,
        move || {
            picked.track();
        },
        move |canvas, scale| {
            let at = picked.get_untracked();
            match draw(canvas, &drawn, &drawn_reserved, at, scale) {
                Some(a) => {
                    area.set_value(a);
                    // Where the plot lies (CSS px from the canvas's left), for the tests' clicks.
                    let (x0, x1) = a.x_range_css();
                    let _ = canvas.set_attribute("data-plot-x", &format!("{x0:.1},{x1:.1}"));
                    true
                }
                None => false,
            }
        },
    );
    let events = || events_of(&snap.snapshot, index);
    let first_us = events().first().map_or(0, |e| e.time_us);
    let span_us = events()
        .last()
        .map_or(0, |e| e.time_us)
        .saturating_sub(first_us);
    // The entry under CSS x coordinate `x`.
    let snap_at = snap.clone();
    let entry_under = move |x: i32| {
        let f = area.get_value().fraction(x)?;
        entry_at(
            events_of(&snap_at.snapshot, index),
            first_us + (span_us as f64 * f) as u64,
        )
    };
    let hover_snap = snap.clone();
    let hover_stacked = stacked.clone();
    let hover_entry = entry_under.clone();
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let (x, y) = (ev.offset_x(), ev.offset_y());
        let lines = (|| {
            let at = hover_entry(x)?;
            let point = nearest(&hover_stacked, at)?;
            let height = area.get_value().height_fraction(y)?;
            let top = chart_top(&hover_stacked, &reserved);
            Some(hover_lines(
                &hover_snap.snapshot,
                &hover_stacked,
                point,
                height * top,
                first_us,
            ))
        })();
        hover.set(lines.map(|l| (x, y, l)));
    };
    let alive_snap = snap.clone();
    let alive = move || {
        let at = picked.get()?;
        let alive = alive_at(&alive_snap.snapshot, index, at);
        let time_us = events_of(&alive_snap.snapshot, index).get(at)?.time_us;
        Some(view! {
            <AliveList snap=alive_snap.clone() line=alive_line(at, time_us, first_us, &alive)
                entry=at alive=alive first_us=first_us/>
        })
    };
    let legend = stacked
        .bands
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let stack = b.stack.map(|s| stack_text(&snap.snapshot, Some(s)));
            let RGBColor(r, g, bl) = band_color(&stacked, i);
            view! {
                <li title=stack data-band=b.label.clone()>
                    <span class="swatch" style:background=format!("rgb({r},{g},{bl})")></span>
                    {b.label.clone()}
                </li>
            }
        })
        .collect_view();
    let chart = (stacked.points.len() >= 2).then(|| {
        view! {
            <p class="hint">"active memory stacked by the sites that held the most; reserved as the orange line. Hover: the site and its whole stack. Click: what was alive then."</p>
            <div class="chart-wrap">
                <canvas class="snapshot-chart" node_ref=canvas_ref style:height=format!("{HEIGHT_CSS_PX}px")
                    data-points=stacked.points.len().to_string()
                    data-bands=stacked.bands.len().to_string()
                    role="img" aria-label="active memory by site and reserved memory over time"
                    on:mousemove=on_move
                    on:mouseleave=move |_| hover.set(None)
                    on:click=move |ev: leptos::ev::MouseEvent| picked.set(entry_under(ev.offset_x()))
                ></canvas>
                {move || hover.get().map(|(x, y, lines)| tooltip(canvas_ref, x, y, lines))}
            </div>
            <ul class="legend snapshot-legend">{legend}</ul>
        }
    });
    view! {
        <section class="snapshot-device" data-device=device.device.to_string()
            data-peak-active-bytes=device.peak_active_bytes.to_string()
            data-active-bytes=device.active_bytes.to_string()>
            <h2>{format!("GPU {}", device.device)}</h2>
            <ul class="lines device-lines">{lines}</ul>
            {chart}
            {alive}
            <Sites snap=snap.clone() title=titles::AT_PEAK class="at-peak" sites=device.at_peak.clone()/>
            <Sites snap=snap.clone() title=titles::AT_DUMP class="at-dump" sites=device.at_end.clone()/>
            <AllocatorMap snap=snap device=index/>
        </section>
    }
}

/// The point of the stacked timeline nearest entry `at`.
fn nearest(stacked: &StackedTimeline, at: usize) -> Option<&StackedPoint> {
    let i = stacked.points.partition_point(|p| p.index <= at);
    let before = i.checked_sub(1).and_then(|i| stacked.points.get(i));
    let after = stacked.points.get(i);
    match (before, after) {
        (Some(b), Some(a)) if a.index - at < at - b.index => Some(a),
        (Some(b), _) => Some(b),
        (None, a) => a,
    }
}

/// The tooltip over `point` at `bytes` up the chart: the band there, its bytes and its stack.
fn hover_lines(
    snap: &Snapshot,
    stacked: &StackedTimeline,
    point: &StackedPoint,
    bytes: f64,
    first_us: u64,
) -> Vec<String> {
    let mut lines = vec![format!(
        "+{} · active {}",
        format_duration_us(point.time_us.saturating_sub(first_us)),
        format_bytes(point.active_bytes())
    )];
    let mut below = 0f64;
    for (band, held) in stacked.bands.iter().zip(&point.bytes) {
        let above = below + *held as f64;
        if bytes >= below && bytes < above {
            lines.push(format!("{}: {}", band.label, format_bytes(*held)));
            if band.stack.is_some() {
                lines.extend(
                    stack_text(snap, band.stack)
                        .lines()
                        .take(STACK_LINES)
                        .map(str::to_owned),
                );
            }
            break;
        }
        below = above;
    }
    lines
}

/// What was alive at the picked moment, largest blocks first.
#[component]
fn AliveList(
    snap: Arc<OpenSnapshot>,
    line: String,
    entry: usize,
    alive: AliveAt,
    first_us: u64,
) -> impl IntoView {
    let more = alive.blocks.len().saturating_sub(ALIVE_ROWS);
    let rows = alive
        .blocks
        .into_iter()
        .take(ALIVE_ROWS)
        .map(|b| {
            view! {
                <tr data-bytes=b.size.to_string() title=stack_text(&snap.snapshot, b.stack)>
                    <td class="num">{format_bytes(b.size)}</td>
                    <td class="num">{format!("+{}", format_duration_us(b.since_us.saturating_sub(first_us)))}</td>
                    <td class="num">{format!("{:#x}", b.addr)}</td>
                    <td>{site_of(&snap.snapshot, b.stack)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <div class="alive-at" data-entry=entry.to_string() data-bytes=alive.active_bytes.to_string()
            data-before-bytes=alive.before_bytes.to_string()>
            <h3 class="alive-line">{line}</h3>
            <table class="sites alive-blocks">
                <thead><tr><th>"bytes"</th><th>"allocated at"</th><th>"address"</th><th>"site (hover: the whole stack)"</th></tr></thead>
                <tbody>{rows}</tbody>
            </table>
            {(more > 0).then(|| view! { <p class="hint">{format!("and {} smaller blocks", format_count(more as u64))}</p> })}
        </div>
    }
}

#[component]
fn Sites(
    snap: Arc<OpenSnapshot>,
    title: &'static str,
    class: &'static str,
    sites: Vec<SiteBytes>,
) -> impl IntoView {
    if sites.is_empty() {
        return ().into_any();
    }
    let rows = sites
        .into_iter()
        .map(|s| {
            let stack = stack_text(&snap.snapshot, s.stack);
            view! {
                <tr data-site=s.site.clone() data-bytes=s.bytes.to_string() title=stack>
                    <td class="num">{format_bytes(s.bytes)}</td>
                    <td class="num">{format_count(s.blocks)}</td>
                    <td>{s.site.clone()}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <h3>{title}</h3>
        <table class=format!("sites {class}")>
            <thead><tr><th>"bytes"</th><th>"blocks"</th><th>"site (hover: the whole stack)"</th></tr></thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

/// The chart's top: the highest active or reserved bytes drawn, with a little room.
fn chart_top(stacked: &StackedTimeline, reserved: &[(u64, u64, u64)]) -> f64 {
    let active = stacked.points.iter().map(StackedPoint::active_bytes).max();
    let reserved = reserved.iter().map(|p| p.2).max();
    (active.max(reserved).unwrap_or(0) as f64 * 1.05).max(1.0)
}

/// A band's colour: sites from the palette, "other sites" grey, before the window light grey.
fn band_color(stacked: &StackedTimeline, band: usize) -> RGBColor {
    let last = stacked.bands.len().saturating_sub(1);
    match stacked.bands.get(band) {
        _ if band == last => RGBColor(200, 200, 200),
        Some(b) if b.stack.is_none() => RGBColor(140, 140, 140),
        _ => PALETTE[band % PALETTE.len()],
    }
}

fn draw(
    canvas: &web_sys::HtmlCanvasElement,
    stacked: &StackedTimeline,
    reserved: &[(u64, u64, u64)],
    picked: Option<usize>,
    scale: f64,
) -> Option<PlotArea> {
    let theme = Theme::current();
    let px = |css: f64| (css * scale).round() as u32;
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let points = &stacked.points;
    let t0 = points.first()?.time_us;
    let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
    let x1 = secs(points.last()?.time_us).max(1e-6);
    let top = chart_top(stacked, reserved);
    let mut chart = frame(&root, theme, scale, (0.0..x1, 0.0..top), "seconds", None)?;
    // Bands bottom up: each between the sum below it and that sum plus its bytes.
    let mut below: Vec<f64> = vec![0.0; points.len()];
    for band in 0..stacked.bands.len() {
        let above: Vec<f64> = points
            .iter()
            .zip(&below)
            .map(|(p, b)| b + p.bytes.get(band).copied().unwrap_or(0) as f64)
            .collect();
        let outline: Vec<(f64, f64)> = points
            .iter()
            .zip(&above)
            .map(|(p, y)| (secs(p.time_us), *y))
            .chain(
                points
                    .iter()
                    .zip(&below)
                    .rev()
                    .map(|(p, y)| (secs(p.time_us), *y)),
            )
            .collect();
        chart
            .draw_series(std::iter::once(Polygon::new(
                outline,
                band_color(stacked, band).mix(0.85).filled(),
            )))
            .ok()?;
        below = above;
    }
    chart
        .draw_series(LineSeries::new(
            reserved.iter().map(|p| (secs(p.0), p.2 as f64)),
            RESERVED.stroke_width(px(1.5)),
        ))
        .ok()?;
    if let Some(at) = picked.and_then(|i| nearest(stacked, i)) {
        let x = secs(at.time_us);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, top)],
                theme.ink.stroke_width(px(1.0)),
            )))
            .ok()?;
    }
    root.present().ok()?;
    Some(PlotArea::of(&chart, scale))
}

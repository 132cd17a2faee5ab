//! A PyTorch memory snapshot: its findings first, then per GPU the facts `collector summary`
//! prints (the same lines, from `shared::snapshot::text`), active and reserved memory over the
//! recorded entries, and what was alive at the peak and at the dump by first user frame, each
//! row showing its full stack on hover.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_trace::snapshot::analysis::{DeviceAnalysis, SiteBytes, stack_text};
use oomscope_trace::snapshot::text::{about_line, device_lines, titles};
use oomscope_trace::units::{format_bytes, format_count};
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use super::Findings;
use crate::chart::{Theme, frame, keep_drawn};
use crate::load::OpenSnapshot;

/// The chart's height in CSS pixels.
const HEIGHT_CSS_PX: u32 = 260;

/// Active memory's colour, and reserved's.
const ACTIVE: RGBColor = RGBColor(31, 119, 180);
const RESERVED: RGBColor = RGBColor(255, 127, 14);

/// The whole snapshot.
#[component]
pub fn SnapshotReport(name: String, snap: Arc<OpenSnapshot>) -> impl IntoView {
    let devices = snap
        .analysis
        .devices
        .iter()
        .map(|d| view! { <Device snap=snap.clone() device=d.clone()/> })
        .collect_view();
    view! {
        <section id="snapshot">
            <h2>{format!("Memory snapshot: {name}")}</h2>
            <p id="snapshot-about" class="hint">{about_line(&snap.snapshot, &snap.analysis)}</p>
            {snap.snapshot.warnings.iter().map(|w| view! { <div class="banner warn">{w.clone()}</div> }).collect_view()}
        </section>
        <Findings findings=snap.analysis.findings.clone() id="findings"
            empty="Nothing to change: no rule found a problem in this snapshot."/>
        {devices}
    }
}

#[component]
fn Device(snap: Arc<OpenSnapshot>, device: DeviceAnalysis) -> impl IntoView {
    let lines = device_lines(&device)
        .into_iter()
        .map(|l| view! { <li>{l}</li> })
        .collect_view();
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let points = Arc::new(device.timeline.clone());
    let drawn = points.clone();
    keep_drawn(
        canvas_ref,
        HEIGHT_CSS_PX,
        || {},
        move |canvas, scale| draw(canvas, &drawn, scale).is_some(),
    );
    let chart = (points.len() >= 2).then(|| {
        view! {
            <p class="hint">"active (blue) and reserved (orange) memory over the recorded entries"</p>
            <canvas class="snapshot-chart" node_ref=canvas_ref style:height=format!("{HEIGHT_CSS_PX}px")
                data-points=points.len().to_string()
                role="img" aria-label="active and reserved memory over time"></canvas>
        }
    });
    view! {
        <section class="snapshot-device" data-device=device.device.to_string()
            data-peak-active-bytes=device.peak_active_bytes.to_string()
            data-active-bytes=device.active_bytes.to_string()>
            <h2>{format!("GPU {}", device.device)}</h2>
            <ul class="lines device-lines">{lines}</ul>
            {chart}
            <Sites snap=snap.clone() title=titles::AT_PEAK class="at-peak" sites=device.at_peak.clone()/>
            <Sites snap=snap title=titles::AT_DUMP class="at-dump" sites=device.at_end.clone()/>
        </section>
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

fn draw(canvas: &web_sys::HtmlCanvasElement, points: &[(u64, u64, u64)], scale: f64) -> Option<()> {
    let theme = Theme::current();
    let px = |css: f64| (css * scale).round() as u32;
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let t0 = points.first()?.0;
    let secs = |t: u64| t.saturating_sub(t0) as f64 / 1e6;
    let x1 = secs(points.last()?.0).max(1e-6);
    let top = points.iter().map(|p| p.1.max(p.2)).max()? as f64 * 1.05;
    let mut chart = frame(
        &root,
        theme,
        scale,
        (0.0..x1, 0.0..top.max(1.0)),
        "seconds",
        None,
    )?;
    for (color, pick) in [
        (
            RESERVED,
            (|p: &(u64, u64, u64)| p.2) as fn(&(u64, u64, u64)) -> u64,
        ),
        (ACTIVE, |p| p.1),
    ] {
        chart
            .draw_series(LineSeries::new(
                points.iter().map(|p| (secs(p.0), pick(p) as f64)),
                color.stroke_width(px(1.5)),
            ))
            .ok()?;
    }
    root.present().ok()
}

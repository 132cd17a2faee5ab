//! The allocator's state at the dump, as memory_viz's "allocator state" shows it: each segment a
//! bar (largest first, on one byte scale), its blocks coloured by state — held by a tensor, freed
//! but waiting for its stream, free and cached — so fragmentation is seen, not just counted:
//! free gaps between live blocks are memory a large request cannot use. Hover a block for its
//! size, state, site and whole stack.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_format::units::{format_bytes, format_count};
use oomscope_snapshot::{BlockState, Segment};
use oomscope_snapshot::{site_of, stack_text};
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use crate::chart::{Theme, font, keep_drawn, tooltip};
use crate::load::OpenSnapshot;

/// Segments drawn (the largest); the rest are counted under the map.
const MAX_SEGMENTS: usize = 48;

/// A segment's row: its bar's height and the gap under it, CSS pixels.
const ROW_CSS_PX: f64 = 14.0;
const GAP_CSS_PX: f64 = 4.0;

/// Room for the size label left of the bars, CSS pixels.
const LABEL_CSS_PX: f64 = 78.0;

/// Stack lines in the tooltip.
const STACK_LINES: usize = 14;

/// The states' colours, in legend order.
const STATES: [(BlockState, RGBColor); 3] = [
    (BlockState::ActiveAllocated, RGBColor(31, 119, 180)),
    (BlockState::ActivePendingFree, RGBColor(255, 127, 14)),
    (BlockState::Inactive, RGBColor(205, 205, 205)),
];

fn color(state: BlockState) -> RGBColor {
    STATES
        .iter()
        .find(|(s, _)| *s == state)
        .map_or(RGBColor(0, 0, 0), |(_, c)| *c)
}

/// The segments of `device` drawn, largest first, as indices into the snapshot's segments
/// (sorted once: every redraw and every mouse move reads them).
fn shown(snap: &OpenSnapshot, device: u32) -> Vec<usize> {
    let segments = &snap.snapshot.segments;
    let mut shown: Vec<usize> = (0..segments.len())
        .filter(|i| segments[*i].device == device)
        .collect();
    oomscope_analysis::sort_by(&mut shown, |a, b| {
        let (a, b) = (&segments[*a], &segments[*b]);
        b.total_size
            .cmp(&a.total_size)
            .then(a.address.cmp(&b.address))
    });
    shown.truncate(MAX_SEGMENTS);
    shown
}

/// The segments at `shown`.
fn segments_at<'a>(snap: &'a OpenSnapshot, shown: &[usize]) -> Vec<&'a Segment> {
    shown.iter().map(|i| &snap.snapshot.segments[*i]).collect()
}

/// The allocator's segments and blocks of `device` at the dump.
#[component]
pub fn AllocatorMap(snap: Arc<OpenSnapshot>, device: u32) -> impl IntoView {
    let all = snap
        .snapshot
        .segments
        .iter()
        .filter(|s| s.device == device)
        .count();
    if all == 0 {
        return ().into_any();
    }
    let order = Arc::new(shown(&snap, device));
    let rows = order.len();
    let height = (rows as f64 * (ROW_CSS_PX + GAP_CSS_PX) + 8.0).ceil() as u32;
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let (drawn, drawn_order) = (snap.clone(), order.clone());
    keep_drawn(
        canvas_ref,
        height,
        || {},
        move |canvas, scale| draw(canvas, &segments_at(&drawn, &drawn_order), scale).is_some(),
    );
    let hover = RwSignal::new(None::<(i32, i32, Vec<String>)>);
    let hover_snap = snap.clone();
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let (x, y) = (ev.offset_x(), ev.offset_y());
        let width = canvas_ref.get_untracked().map_or(0, |c| c.client_width());
        let lines = block_at(
            &hover_snap,
            &segments_at(&hover_snap, &order),
            f64::from(x),
            f64::from(y),
            f64::from(width),
        );
        hover.set(lines.map(|l| (x, y, l)));
    };
    let hidden = all.saturating_sub(rows);
    let legend = STATES
        .iter()
        .map(|(state, RGBColor(r, g, b))| {
            view! {
                <span class="legend-item">
                    <span class="swatch" style:background=format!("rgb({r},{g},{b})")></span>
                    {state.label()}
                </span>
            }
        })
        .collect_view();
    view! {
        <h3>"Allocator state at the dump"</h3>
        <p class="hint">{format!(
            "each segment a bar, largest first, on one scale; blocks by state. Hover a block for its stack.{}",
            if hidden > 0 { format!(" {} smaller segments not drawn.", format_count(hidden as u64)) } else { String::new() }
        )}</p>
        <div class="legend">{legend}</div>
        <div class="chart-wrap">
            <canvas class="allocator-map" node_ref=canvas_ref style:height=format!("{height}px")
                data-segments=rows.to_string()
                role="img" aria-label="the allocator's segments and blocks at the dump"
                on:mousemove=on_move
                on:mouseleave=move |_| hover.set(None)></canvas>
            {move || hover.get().map(|(x, y, lines)| tooltip(canvas_ref, x, y, lines))}
        </div>
    }
    .into_any()
}

/// Each block of `segment` with its offset from the segment's start: blocks are listed in address
/// order, and old snapshots give no addresses, so offsets are the sizes before it.
fn spans(segment: &Segment) -> impl Iterator<Item = (u64, &oomscope_snapshot::Block)> {
    segment.blocks.iter().scan(0u64, |at, b| {
        let start = *at;
        *at = at.saturating_add(b.size);
        Some((start, b))
    })
}

/// The tooltip for CSS (`x`, `y`) over a canvas `width` wide: the block there.
fn block_at(
    snap: &OpenSnapshot,
    segments: &[&Segment],
    x: f64,
    y: f64,
    width: f64,
) -> Option<Vec<String>> {
    let row = ((y - 4.0) / (ROW_CSS_PX + GAP_CSS_PX)).floor();
    if row < 0.0 || (y - 4.0) - row * (ROW_CSS_PX + GAP_CSS_PX) > ROW_CSS_PX {
        return None;
    }
    let segment = segments.get(row as usize)?;
    let top = segments.first()?.total_size.max(1) as f64;
    let plot = (width - LABEL_CSS_PX - 8.0).max(1.0);
    let offset = (x - LABEL_CSS_PX) / plot * top;
    if offset < 0.0 || offset >= segment.total_size as f64 {
        return None;
    }
    let (_, block) = spans(segment)
        .take_while(|(start, _)| (*start as f64) <= offset)
        .last()?;
    let mut lines = vec![
        format!("{} · {}", format_bytes(block.size), block.state.label()),
        format!(
            "segment of {} at {:#x}{}",
            format_bytes(segment.total_size),
            segment.address,
            if segment.expandable {
                " (expandable)"
            } else {
                ""
            }
        ),
    ];
    if block.state != BlockState::Inactive {
        lines.push(site_of(&snap.snapshot, block.stack));
        lines.extend(
            stack_text(&snap.snapshot, block.stack)
                .lines()
                .take(STACK_LINES)
                .map(str::to_owned),
        );
    }
    Some(lines)
}

fn draw(canvas: &web_sys::HtmlCanvasElement, segments: &[&Segment], scale: f64) -> Option<()> {
    let theme = Theme::current();
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&theme.background).ok()?;
    let (width_px, _) = root.dim_in_pixel();
    let px = |css: f64| (css * scale).round() as i32;
    let top = segments.first()?.total_size.max(1) as f64;
    let plot = (f64::from(width_px) / scale - LABEL_CSS_PX - 8.0).max(1.0);
    let x_of = |bytes: f64| px(LABEL_CSS_PX + bytes / top * plot);
    for (row, segment) in segments.iter().enumerate() {
        let y0 = 4.0 + row as f64 * (ROW_CSS_PX + GAP_CSS_PX);
        let (y0, y1) = (px(y0), px(y0 + ROW_CSS_PX));
        root.draw(&Text::new(
            format_bytes(segment.total_size),
            (px(2.0), y0),
            font(theme, scale, 11.0),
        ))
        .ok()?;
        // The segment's extent, then its blocks; a block narrower than a pixel still shows.
        root.draw(&Rectangle::new(
            [(x_of(0.0), y0), (x_of(segment.total_size as f64), y1)],
            theme.grid.filled(),
        ))
        .ok()?;
        for (start, block) in spans(segment) {
            let x0 = x_of(start as f64);
            let x1 = x_of(start.saturating_add(block.size) as f64).max(x0 + 1);
            root.draw(&Rectangle::new(
                [(x0, y0), (x1, y1)],
                color(block.state).filled(),
            ))
            .ok()?;
        }
    }
    root.present().ok()
}

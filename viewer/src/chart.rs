//! What the canvas charts share: a backing store in device pixels (crisp on high-DPI screens)
//! and colours that follow the page's light or dark mode.

use std::ops::Range;
use std::rc::Rc;

use leptos::html::Canvas;
use leptos::prelude::*;

use oomscope_format::units::format_bytes;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::{BLACK, RGBColor, WHITE};
use plotters_canvas::CanvasBackend;

use crate::browser;

/// Colours of a chart's frame, light or dark like the page.
#[derive(Debug, Clone, Copy)]
pub struct Theme {
    /// Behind the plot.
    pub background: RGBColor,
    /// Labels and axes.
    pub text: RGBColor,
    /// Grid lines.
    pub grid: RGBColor,
    /// Neutral lines (the allocator's `allocated`, fits).
    pub ink: RGBColor,
}

impl Theme {
    /// The colours for the page's current mode.
    pub fn current() -> Theme {
        if browser::dark_mode() {
            Theme {
                background: RGBColor(18, 22, 32),
                text: RGBColor(210, 214, 222),
                grid: RGBColor(44, 52, 68),
                ink: RGBColor(230, 232, 236),
            }
        } else {
            Theme {
                background: WHITE,
                text: RGBColor(40, 40, 40),
                grid: RGBColor(238, 238, 238),
                ink: BLACK,
            }
        }
    }
}

/// Where the plot sits inside the canvas (device pixels), for mapping the cursor back to data.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlotArea {
    x0_px: i32,
    x1_px: i32,
    y0_px: i32,
    y1_px: i32,
    /// Device pixels per CSS pixel when drawn.
    pub scale: f64,
}

impl PlotArea {
    /// Where `chart` drew, at device scale `scale`.
    pub fn of(chart: &Chart<'_>, scale: f64) -> PlotArea {
        let (xs, ys) = chart.plotting_area().get_pixel_range();
        PlotArea {
            x0_px: xs.start,
            x1_px: xs.end,
            y0_px: ys.start,
            y1_px: ys.end,
            scale,
        }
    }

    /// The plot's left and right edges in CSS pixels from the canvas's left.
    pub fn x_range_css(self) -> (f64, f64) {
        (
            f64::from(self.x0_px) / self.scale,
            f64::from(self.x1_px) / self.scale,
        )
    }

    /// The plot's width in CSS pixels.
    pub fn width_css(self) -> f64 {
        f64::from(self.x1_px - self.x0_px) / self.scale
    }

    /// The fraction of the plot's width under CSS x coordinate `x_css`, if inside.
    pub fn fraction(self, x_css: i32) -> Option<f64> {
        if self.x1_px <= self.x0_px {
            return None;
        }
        let x = f64::from(x_css) * self.scale;
        let f = (x - f64::from(self.x0_px)) / f64::from(self.x1_px - self.x0_px);
        (0.0..=1.0).contains(&f).then_some(f)
    }

    /// The fraction of the plot's height above its bottom under CSS y coordinate `y_css`, if
    /// inside.
    pub fn height_fraction(self, y_css: i32) -> Option<f64> {
        if self.y1_px <= self.y0_px {
            return None;
        }
        let y = f64::from(y_css) * self.scale;
        let f = (f64::from(self.y1_px) - y) / f64::from(self.y1_px - self.y0_px);
        (0.0..=1.0).contains(&f).then_some(f)
    }

    /// Whether CSS y coordinate `y_css` is inside the plot.
    pub fn inside_y(self, y_css: i32) -> bool {
        self.height_fraction(y_css).is_some()
    }
}

/// A tooltip at CSS (`x`, `y`) over the canvas, on the side of the cursor where it fits (never
/// clipped at the right edge).
pub fn tooltip(canvas_ref: NodeRef<Canvas>, x: i32, y: i32, lines: Vec<String>) -> impl IntoView {
    let width = canvas_ref
        .get_untracked()
        .map_or(1000, |c| c.client_width());
    let on_left = x > width / 2;
    let left = (!on_left).then(|| format!("{}px", x + 14));
    let right = on_left.then(|| format!("{}px", width - x + 14));
    view! {
        <div class="tooltip" style:left=left style:right=right style:top=format!("{}px", y + 14)>
            {lines.into_iter().map(|l| view! { <div>{l}</div> }).collect_view()}
        </div>
    }
}

/// A chart of bytes (y) against a number (x: seconds, steps) on a canvas.
pub type Chart<'a> = ChartContext<'a, CanvasBackend, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Text of `size` CSS pixels at device scale `scale`, in the theme's colour.
pub fn font(theme: Theme, scale: f64, size: f64) -> TextStyle<'static> {
    ("sans-serif", (size * scale).round())
        .into_font()
        .color(&theme.text)
}

/// The frame the charts share: margins and label areas scaled to the device, the grid in the
/// theme's colours, bytes on the y axis, `x_desc` under the x axis (its labels through `x_label`
/// when given, plotters' numbers otherwise).
pub fn frame<'a>(
    root: &'a DrawingArea<CanvasBackend, Shift>,
    theme: Theme,
    scale: f64,
    (x, y): (Range<f64>, Range<f64>),
    x_desc: &str,
    x_label: Option<&dyn Fn(&f64) -> String>,
) -> Option<Chart<'a>> {
    let px = |css: f64| (css * scale).round() as u32;
    let mut chart = ChartBuilder::on(root)
        .margin(px(8.0))
        .x_label_area_size(px(30.0))
        .y_label_area_size(px(78.0))
        .build_cartesian_2d(x, y)
        .ok()?;
    let bytes = |b: &f64| format_bytes(b.max(0.0) as u64);
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .x_labels(8)
        .y_labels(6)
        .label_style(font(theme, scale, 12.0))
        .axis_desc_style(font(theme, scale, 12.0))
        .axis_style(theme.text.mix(0.6))
        .y_label_formatter(&bytes)
        .bold_line_style(theme.grid.stroke_width(px(1.0)))
        .light_line_style(theme.grid.mix(0.5));
    if let Some(f) = x_label {
        mesh.x_label_formatter(f);
    }
    mesh.draw().ok()?;
    Some(chart)
}

/// Sizes `canvas`'s backing store to its box (inside the border) times the device-pixel ratio, so
/// one drawn pixel is one screen pixel; returns that ratio (device pixels per CSS pixel), which
/// every drawn size is scaled by. `min_height_css_px` stands in while the box has no height yet.
pub fn fit_canvas(canvas: &web_sys::HtmlCanvasElement, min_height_css_px: u32) -> f64 {
    let scale = browser::device_pixel_ratio();
    let width_css = canvas.client_width().max(300) as u32;
    let height_css = match canvas.client_height() {
        h if h > 0 => h as u32,
        _ => min_height_css_px,
    };
    let (width, height) = (
        (f64::from(width_css) * scale).round() as u32,
        (f64::from(height_css) * scale).round() as u32,
    );
    if canvas.width() != width {
        canvas.set_width(width);
    }
    if canvas.height() != height {
        canvas.set_height(height);
    }
    scale
}

/// Keeps the chart on `canvas_ref` drawn: `draw(canvas, scale)` runs in an animation frame after
/// the canvas appears, whenever a signal read by `track` changes, and whenever the canvas's box
/// changes size (a window resize, a scrollbar appearing, a panel opening) — at most once per
/// frame however many changes arrive in between. The backing store is sized to the box at the
/// device-pixel ratio first ([`fit_canvas`]); when `draw` succeeds the canvas's `data-scale`
/// says at which ratio it drew (the browser tests read it).
pub fn keep_drawn(
    canvas_ref: NodeRef<Canvas>,
    min_height_css_px: u32,
    track: impl Fn() + 'static,
    draw: impl Fn(&web_sys::HtmlCanvasElement, f64) -> bool + 'static,
) {
    let resized = RwSignal::new(0u32);
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            browser::observe_resize(&canvas, move || {
                resized.try_update(|n| *n += 1);
            });
        }
    });
    let draw = Rc::new(draw);
    let pending = StoredValue::new(false);
    Effect::new(move |_| {
        track();
        resized.track();
        canvas_ref.track();
        if pending.get_value() {
            return;
        }
        pending.set_value(true);
        let draw = draw.clone();
        request_animation_frame(move || {
            // A chart closed before its frame came does nothing.
            if pending.try_set_value(false).is_some() {
                return;
            }
            let Some(canvas) = canvas_ref.get_untracked() else {
                return;
            };
            let scale = fit_canvas(&canvas, min_height_css_px);
            if draw(&canvas, scale) {
                let _ = canvas.set_attribute("data-scale", &format!("{scale}"));
            }
        });
    });
}

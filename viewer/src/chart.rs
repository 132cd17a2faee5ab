//! What the canvas charts share: a backing store in device pixels (crisp on high-DPI screens)
//! and colours that follow the page's light or dark mode.

use plotters::style::{BLACK, RGBColor, WHITE};

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

/// Calls `f` whenever `canvas`'s box changes size (a window resize, a scrollbar appearing, a
/// panel opening), for as long as the canvas is in the page.
pub fn on_resize(canvas: &web_sys::HtmlCanvasElement, f: impl FnMut() + 'static) {
    browser::observe_resize(canvas, f);
}

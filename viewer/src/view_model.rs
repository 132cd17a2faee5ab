//! What the page shows, computed from a trace and its analysis without touching the DOM.
//!
//! Everything here is plain Rust so it is unit-tested natively (`cargo test`), and the
//! components stay thin: they lay these values out. Byte values are kept as numbers next to the
//! formatted text (`data-*` attributes) so the browser tests compare exact figures with
//! `collector summary --json`, not rounded strings.

use oomscope_trace::analysis::marks::mark_at_or_before;
use oomscope_trace::units::{format_bytes, format_duration_us, format_signed_bytes};
use oomscope_trace::{CounterId, CounterKind, Phase, Trace};

/// A counter the timeline draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plotted {
    /// The counter.
    pub id: CounterId,
    /// Legend label: the counter's standard name (`gpu0.used`, `host.rss`).
    pub label: String,
    /// Index into [`PALETTE`].
    pub color: usize,
}

/// Line colours, one per plotted counter in order (RGB).
pub const PALETTE: [(u8, u8, u8); 8] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (148, 103, 189),
    (255, 127, 14),
    (23, 190, 207),
    (140, 86, 75),
    (127, 127, 127),
];

/// The counters worth a line: memory in use (GPU used, process, reserved, allocated, host RSS).
/// Free/available memory and totals are the complement of those and would only crowd the chart.
pub fn plotted_counters(trace: &Trace) -> Vec<Plotted> {
    let mut out = Vec::new();
    for (i, c) in trace.counters.iter().enumerate() {
        let id = CounterId(i as u32);
        let shown = !matches!(
            c.kind,
            CounterKind::GpuFree | CounterKind::GpuTotal | CounterKind::HostAvailable
        );
        let has_data = trace
            .samples
            .column(id)
            .is_some_and(|col| col.iter().any(|v| *v != oomscope_trace::MISSING));
        if shown && has_data {
            out.push(Plotted {
                id,
                label: c.kind.counter_name(c.device),
                color: out.len() % PALETTE.len(),
            });
        }
    }
    out
}

/// Time spans (µs, start inclusive, end exclusive) where the marks say the loop was evaluating.
pub fn eval_spans(trace: &Trace) -> Vec<(u64, u64)> {
    let mut spans = Vec::new();
    let mut open: Option<u64> = None;
    for m in &trace.marks {
        match (m.phase == Phase::Eval, open) {
            (true, None) => open = Some(m.t_us),
            (false, Some(start)) => {
                spans.push((start, m.t_us));
                open = None;
            }
            _ => {}
        }
    }
    if let Some(start) = open {
        spans.push((start, trace.duration_us().max(start)));
    }
    spans
}

/// One stage interval: from a mark to the next one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSpan {
    /// Mark time.
    pub t0_us: u64,
    /// Next mark's time (or the end of the trace).
    pub t1_us: u64,
    /// Stage name.
    pub stage: String,
}

/// The stage intervals overlapping `[t0, t1]`, or `None` when there are more than `max` of them
/// (too many to shade legibly: the chart then shades eval phases only).
pub fn stage_spans(trace: &Trace, t0_us: u64, t1_us: u64, max: usize) -> Option<Vec<StageSpan>> {
    let marks = &trace.marks;
    let start = marks.partition_point(|m| m.t_us < t0_us).saturating_sub(1);
    let end = marks.partition_point(|m| m.t_us <= t1_us);
    if end.saturating_sub(start) > max {
        return None;
    }
    let spans = (start..end)
        .map(|i| StageSpan {
            t0_us: marks[i].t_us,
            t1_us: marks
                .get(i + 1)
                .map_or_else(|| trace.duration_us(), |m| m.t_us),
            stage: marks[i].name.as_ref().to_owned(),
        })
        .collect();
    Some(spans)
}

/// What the tooltip says at time `t_us`: the time, the stage, and each plotted counter's value.
pub fn hover_lines(trace: &Trace, plotted: &[Plotted], t_us: u64) -> Vec<String> {
    let mut lines = vec![format!("t = {}", format_duration_us(t_us))];
    match mark_at_or_before(trace, t_us) {
        Some(i) => {
            let m = &trace.marks[i];
            let phase = m.phase.suffix();
            lines.push(format!("stage {}{phase}, step {}", m.name.as_ref(), m.step));
        }
        None => lines.push("before the first stage mark".to_owned()),
    }
    for p in plotted {
        if let Some(v) = trace.samples.value_at(p.id, t_us) {
            lines.push(format!("{}: {}", p.label, format_bytes(v)));
        }
    }
    lines
}

/// A visible time window, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First visible µs.
    pub t0_us: u64,
    /// Last visible µs.
    pub t1_us: u64,
}

/// The narrowest window zooming allows (a few samples at 1 kHz).
pub const MIN_WINDOW_US: u64 = 5_000;

impl Window {
    /// Width in µs.
    pub fn width_us(self) -> u64 {
        self.t1_us - self.t0_us
    }

    /// Zooms by `factor` (< 1 zooms in) keeping the time at fraction `at` (0..=1) of the width
    /// under the cursor, clamped to `full`.
    pub fn zoom(self, factor: f64, at: f64, full: Window) -> Window {
        let at = at.clamp(0.0, 1.0);
        let width = self.width_us() as f64;
        let new_width = (width * factor)
            .clamp(MIN_WINDOW_US as f64, full.width_us().max(1) as f64)
            .round();
        let anchor = self.t0_us as f64 + width * at;
        let t0 = anchor - new_width * at;
        Window::clamped(t0, new_width, full)
    }

    /// Moves by `fraction` of the width (positive: later), clamped to `full`.
    pub fn pan(self, fraction: f64, full: Window) -> Window {
        let width = self.width_us() as f64;
        Window::clamped(self.t0_us as f64 + width * fraction, width, full)
    }

    fn clamped(t0: f64, width: f64, full: Window) -> Window {
        let max_t0 = (full.t1_us as f64 - width).max(full.t0_us as f64);
        let t0 = t0.clamp(full.t0_us as f64, max_t0).round() as u64;
        Window {
            t0_us: t0,
            t1_us: (t0 + width as u64).min(full.t1_us),
        }
    }
}

/// `+1.00 MiB`-style change between two optional values, or `-`.
pub fn change_text(a: Option<u64>, b: Option<u64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format_signed_bytes(b as i64 - a as i64),
        _ => "-".to_owned(),
    }
}

/// Bytes or `-`.
pub fn bytes_text(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_owned(), format_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_trace::decode;
    use oomscope_trace::synth::TrainingRun;

    fn run(leak: u64) -> Trace {
        let r = TrainingRun {
            steps: 50,
            leak_bytes_per_step: leak,
            eval_every: Some(20),
            eval_steps: 2,
            ..TrainingRun::default()
        };
        decode(&r.to_bytes()).unwrap().trace
    }

    #[test]
    fn plotted_counters_skip_complements() {
        let t = run(0);
        let labels: Vec<_> = plotted_counters(&t).into_iter().map(|p| p.label).collect();
        assert!(labels.iter().any(|l| l == "gpu0.used"), "{labels:?}");
        assert!(labels.iter().any(|l| l == "host.rss"), "{labels:?}");
        assert!(
            !labels
                .iter()
                .any(|l| l.contains("free") || l.contains("available"))
        );
    }

    #[test]
    fn eval_spans_follow_the_marks() {
        let t = run(0);
        let spans = eval_spans(&t);
        assert_eq!(spans.len(), 2, "{spans:?}");
        for (a, b) in spans {
            assert!(a < b);
            let inside: Vec<_> = t
                .marks
                .iter()
                .filter(|m| m.t_us >= a && m.t_us < b)
                .collect();
            assert!(!inside.is_empty());
            assert!(inside.iter().all(|m| m.phase == Phase::Eval));
        }
    }

    #[test]
    fn stage_spans_cover_the_window_or_give_up() {
        let t = run(0);
        let full = t.duration_us();
        assert!(stage_spans(&t, 0, full, 10).is_none());
        let m = &t.marks[10];
        let spans = stage_spans(&t, m.t_us, m.t_us + 1, 10).unwrap();
        assert!(spans.iter().any(|s| s.t0_us <= m.t_us && m.t_us < s.t1_us));
        let first = t
            .marks
            .iter()
            .position(|x| x.t_us == spans[0].t0_us)
            .unwrap();
        assert_eq!(spans[0].stage, t.marks[first].name.as_ref());
    }

    #[test]
    fn hover_names_stage_and_values() {
        let t = run(0);
        let plotted = plotted_counters(&t);
        let m = &t.marks[7];
        let lines = hover_lines(&t, &plotted, m.t_us);
        assert!(lines[1].contains(m.name.as_ref()), "{lines:?}");
        assert!(lines[1].contains(&format!("step {}", m.step)), "{lines:?}");
        assert_eq!(lines.len(), 2 + plotted.len(), "{lines:?}");
    }

    #[test]
    fn zoom_keeps_the_anchor_and_stays_inside() {
        let full = Window {
            t0_us: 0,
            t1_us: 1_000_000,
        };
        let z = full.zoom(0.5, 0.5, full);
        assert_eq!(
            z,
            Window {
                t0_us: 250_000,
                t1_us: 750_000
            }
        );
        let z2 = z.zoom(0.5, 0.0, full);
        assert_eq!(z2.t0_us, 250_000);
        assert_eq!(z2.width_us(), 250_000);
        assert_eq!(z.zoom(100.0, 0.5, full), full);
        assert_eq!(full.zoom(1e-9, 0.5, full).width_us(), MIN_WINDOW_US);
        let p = z.pan(10.0, full);
        assert_eq!(
            p,
            Window {
                t0_us: 500_000,
                t1_us: 1_000_000
            }
        );
        assert_eq!(z.pan(-10.0, full).t0_us, 0);
    }
}

//! What the page shows, computed from a trace and its analysis without touching the DOM.
//!
//! Everything here is plain Rust so it is unit-tested natively (`cargo test`), and the
//! components stay thin: they lay these values out. Byte values are kept as numbers next to the
//! formatted text (`data-*` attributes) so the browser tests compare exact figures with
//! `collector summary --json`, not rounded strings.

use oomscope_analysis::facts::MetricKey;
use oomscope_analysis::facts::mark_at_or_before;
use oomscope_analysis::facts::{LimitBasis, limit_of};
use oomscope_format::units::{format_bytes, format_duration_us, format_signed_bytes};
use oomscope_format::{CounterId, CounterKind, Phase, Trace};

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
/// Free/available memory and totals (a GPU's, `/dev/shm`'s size) are the complement of those and
/// would only crowd the chart.
pub fn plotted_counters(trace: &Trace) -> Vec<Plotted> {
    let mut out = Vec::new();
    for (i, c) in trace.counters.iter().enumerate() {
        let id = CounterId(i as u32);
        let shown = !matches!(
            c.kind,
            CounterKind::GpuFree
                | CounterKind::GpuTotal
                | CounterKind::HostAvailable
                | CounterKind::ShmSize
        );
        let has_data = oomscope_analysis::facts::counter_has_data(trace, id);
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

/// A memory limit the timeline draws as a dashed line: a GPU's total, or the host's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// `GPU 0 total`, `host memory`.
    pub label: String,
    /// The limit.
    pub bytes: u64,
}

/// The limits the plotted counters run into (the leak projection's: `limit_of`), once each.
pub fn limits(trace: &Trace, plotted: &[Plotted]) -> Vec<Limit> {
    let mut out: Vec<Limit> = Vec::new();
    for p in plotted {
        let Some((bytes, basis)) = limit_of(trace, MetricKey::of_counter(trace, p.id)) else {
            continue;
        };
        let label = match (basis, trace.counters[p.id.0 as usize].device) {
            (LimitBasis::HostMemory, _) => "host memory".to_owned(),
            (LimitBasis::DeviceTotal, Some(d)) => format!("GPU {d} total"),
            (LimitBasis::DeviceTotal, None) => "GPU total".to_owned(),
        };
        if !out.iter().any(|l| l.label == label) {
            out.push(Limit { label, bytes });
        }
    }
    out
}

/// The highest value of the first plotted counter (the GPU's, when there is one): where the
/// timeline puts its peak marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peak {
    /// When.
    pub t_us: u64,
    /// How much.
    pub bytes: u64,
    /// Which counter.
    pub label: String,
}

/// The peak of the first plotted counter, the earliest of equal values.
pub fn peak(trace: &Trace, plotted: &[Plotted]) -> Option<Peak> {
    let p = plotted.first()?;
    let (t_us, bytes) = trace
        .samples
        .points(p.id)
        .fold(None::<(u64, u64)>, |best, (t, v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((t, v)),
        })?;
    Some(Peak {
        t_us,
        bytes,
        label: p.label.clone(),
    })
}

/// How the timeline's y axis is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YAxis {
    /// From just below the lowest value to just above the highest: small changes show.
    Fit,
    /// From zero.
    Zero,
    /// From zero to the highest memory limit (or the data, if higher).
    Limit,
}

impl YAxis {
    /// Every choice, in the toolbar's order, with its label.
    pub const ALL: [(YAxis, &'static str); 3] = [
        (YAxis::Fit, "fit the data"),
        (YAxis::Zero, "from zero"),
        (YAxis::Limit, "to the memory limit"),
    ];

    /// The visible y range for data between `min` and `max` and the given limits.
    pub fn range(self, min: u64, max: u64, limits: &[Limit]) -> (f64, f64) {
        let (min, max) = (min as f64, (max.max(min)) as f64);
        match self {
            YAxis::Fit => {
                let pad = ((max - min) * 0.08).max(max * 0.002).max(1.0);
                ((min - pad).max(0.0), max + pad)
            }
            YAxis::Zero => (0.0, (max * 1.08).max(1.0)),
            YAxis::Limit => {
                let top = limits.iter().map(|l| l.bytes as f64).fold(max, f64::max);
                (0.0, (top * 1.04).max(1.0))
            }
        }
    }
}

/// Stage names in first-appearance order, each with a palette index that never changes while
/// panning or zooming (the legend and the bands share it).
pub fn stage_colors(trace: &Trace) -> Vec<(String, usize)> {
    oomscope_analysis::facts::stage_names(trace)
        .into_iter()
        .enumerate()
        .map(|(i, name)| (name, (i + 3) % PALETTE.len()))
        .collect()
}

/// What the OOMs and notes within `tolerance_us` of `t_us` say (the tooltip adds these lines).
pub fn marker_lines(trace: &Trace, t_us: u64, tolerance_us: u64) -> Vec<String> {
    let near = |t: u64| t.abs_diff(t_us) <= tolerance_us;
    let mut lines = Vec::new();
    for o in trace.ooms.iter().filter(|o| near(o.t_us)) {
        let first = o.message.lines().next().unwrap_or_default();
        let text = if first.is_empty() {
            format!("OOM at {}", format_duration_us(o.t_us))
        } else {
            format!("OOM at {}: {first}", format_duration_us(o.t_us))
        };
        lines.push(text);
    }
    for n in trace.notes.iter().filter(|n| near(n.t_us)) {
        lines.push(format!(
            "note at {}: {}",
            format_duration_us(n.t_us),
            n.text
        ));
    }
    lines
}

/// One counter over a selected time range: the table under the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeRow {
    /// The counter.
    pub label: String,
    /// At the start of the range (the latest sample at or before it).
    pub start_bytes: Option<u64>,
    /// At its end.
    pub end_bytes: Option<u64>,
    /// Lowest inside.
    pub min_bytes: Option<u64>,
    /// Highest inside.
    pub max_bytes: Option<u64>,
}

/// What each plotted counter did between `t0_us` and `t1_us`.
pub fn range_rows(trace: &Trace, plotted: &[Plotted], t0_us: u64, t1_us: u64) -> Vec<RangeRow> {
    plotted
        .iter()
        .map(|p| {
            let inside = trace
                .samples
                .points(p.id)
                .filter(|(t, _)| (t0_us..=t1_us).contains(t))
                .map(|(_, v)| v);
            let (min, max) = inside.fold((None::<u64>, None::<u64>), |(lo, hi), v| {
                (
                    Some(lo.map_or(v, |x| x.min(v))),
                    Some(hi.map_or(v, |x| x.max(v))),
                )
            });
            RangeRow {
                label: p.label.clone(),
                start_bytes: trace.samples.value_at(p.id, t0_us),
                end_bytes: trace.samples.value_at(p.id, t1_us),
                min_bytes: min,
                max_bytes: max,
            }
        })
        .collect()
}

/// The steps whose marks fall between `t0_us` and `t1_us` (first and last), if any.
pub fn steps_in(trace: &Trace, t0_us: u64, t1_us: u64) -> Option<(u64, u64)> {
    let start = trace.marks.partition_point(|m| m.t_us < t0_us);
    let end = trace.marks.partition_point(|m| m.t_us <= t1_us);
    let marks = trace.marks.get(start..end)?;
    let first = marks.iter().map(|m| m.step).min()?;
    let last = marks.iter().map(|m| m.step).max()?;
    Some((first, last))
}

/// Most steps the per-step chart extends past the data to reach a projection (in multiples of
/// the recorded span): further out, the recorded steps would shrink to a sliver.
pub const MAX_PROJECTION_SPAN: u64 = 4;

/// A stage's name, palette index ([`stage_colors`]) and (step, bytes) per training step.
pub type StageLine = (String, usize, Vec<(u64, u64)>);

/// What the per-step chart draws: memory at each stage against the step, and the leak's fitted
/// line carried on to the memory limit.
#[derive(Debug, Clone, PartialEq)]
pub struct StepChartData {
    /// The metric drawn (the leak's, or the primary metric).
    pub metric: String,
    /// What the x axis counts: the leak's clock, or the run's.
    pub clock: oomscope_analysis::facts::Clock,
    /// One line per stage.
    pub stages: Vec<StageLine>,
    /// The leaking stage's fit: slope per position, intercept, first and last fitted position.
    pub fit: Option<(f64, f64, u64, u64)>,
    /// The projection: from (last position, highest bytes) to (position where full, limit).
    pub projection: Option<((u64, u64), (u64, u64))>,
    /// The limit's name and size.
    pub limit: Option<(String, u64)>,
    /// Visible positions on the clock.
    pub x_range: (u64, u64),
    /// Whether the projection's end lies past `x_range`.
    pub full_beyond: bool,
}

/// The chart of memory along the run's clock (steps; forwards of a run that never trains; epochs
/// when the leak is kept at epoch ends): the headlined leak's metric and clock when there is one,
/// else the primary metric; `None` with fewer than two positions on the clock.
pub fn step_chart(trace: &Trace, analysis: &oomscope_analysis::Analysis) -> Option<StepChartData> {
    use oomscope_analysis::facts::primary_metric;
    use oomscope_analysis::facts::{Clock, clock_rows};
    let leak = analysis.headline_leak();
    let (metric, clock) = match leak {
        Some(f) => (f.metric, f.clock),
        None => (primary_metric(trace)?, Clock::of(trace)),
    };
    let rows = clock_rows(trace, metric, clock);
    let (first, last) = (rows.first()?.at, rows.last()?.at);
    if last <= first {
        return None;
    }
    let stages = stage_colors(trace)
        .into_iter()
        .enumerate()
        .map(|(column, (name, color))| {
            let points = rows
                .iter()
                .filter_map(|r| Some((r.at, r.values.get(column).copied().flatten()?)))
                .collect();
            (name, color, points)
        })
        .collect();
    let fit = leak.map(|f| {
        (
            f.slope_bytes_per_step,
            f.intercept_bytes,
            f.first_step,
            f.last_step,
        )
    });
    let projection = leak
        .and_then(|f| Some((f, f.projection.as_ref()?)))
        .map(|(f, p)| {
            (
                (f.last_step, p.current_bytes),
                (p.full_at_step, p.limit_bytes),
            )
        });
    let limit = leak.and_then(|f| {
        let p = f.projection.as_ref()?;
        let name = match p.limit_basis {
            LimitBasis::DeviceTotal => "device total",
            LimitBasis::HostMemory => "host memory",
        };
        Some((name.to_owned(), p.limit_bytes))
    });
    let cap = last + (last - first) * MAX_PROJECTION_SPAN;
    let wanted_end = projection.map_or(last, |(_, (full, _))| full.max(last));
    Some(StepChartData {
        metric: metric.label(),
        clock,
        stages,
        fit,
        projection,
        limit,
        x_range: (first, wanted_end.min(cap)),
        full_beyond: wanted_end > cap,
    })
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

    /// The window from `t0_us` to `t1_us` (at least [`MIN_WINDOW_US`] wide), inside `full`.
    pub fn span(t0_us: u64, t1_us: u64, full: Window) -> Window {
        let width = t1_us
            .saturating_sub(t0_us)
            .clamp(MIN_WINDOW_US, full.width_us().max(1));
        Window::clamped(t0_us as f64, width as f64, full)
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
    use oomscope_format::decode;
    use oomscope_testkit::synth::TrainingRun;

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
        assert_eq!(
            Window::span(100_000, 300_000, full),
            Window {
                t0_us: 100_000,
                t1_us: 300_000
            }
        );
        assert_eq!(
            Window::span(999_000, 999_500, full).width_us(),
            MIN_WINDOW_US
        );
    }

    #[test]
    fn limits_peak_and_axes() {
        let t = run(64 << 20);
        let plotted = plotted_counters(&t);
        let limits = limits(&t, &plotted);
        let gpu = limits.iter().find(|l| l.label == "GPU 0 total").unwrap();
        assert_eq!(Some(gpu.bytes), t.gpu_total_bytes(Some(0)));
        let p = peak(&t, &plotted).unwrap();
        let max = t
            .samples
            .points(plotted[0].id)
            .map(|(_, v)| v)
            .max()
            .unwrap();
        assert_eq!(p.bytes, max);
        let (lo, hi) = YAxis::Fit.range(10 << 30, 12 << 30, &limits);
        assert!(lo > 9.0 * (1u64 << 30) as f64 && hi < 13.0 * (1u64 << 30) as f64);
        assert_eq!(YAxis::Zero.range(10, 20, &limits).0, 0.0);
        assert!(YAxis::Limit.range(10, 20, &limits).1 >= gpu.bytes as f64);
    }

    #[test]
    fn stage_colours_are_the_trace_s_not_the_window_s() {
        let t = run(0);
        let colors = stage_colors(&t);
        let names = oomscope_analysis::facts::stage_names(&t);
        assert_eq!(colors.len(), names.len());
        // A window that starts at the third stage still colours the first stage the same.
        let spans = stage_spans(&t, t.marks[2].t_us, t.marks[12].t_us, 100).unwrap();
        for s in spans {
            assert!(colors.iter().any(|(n, _)| *n == s.stage));
        }
    }

    #[test]
    fn range_rows_and_steps() {
        let t = run(0);
        let plotted = plotted_counters(&t);
        let (a, b) = (t.marks[5].t_us, t.marks[40].t_us);
        let rows = range_rows(&t, &plotted, a, b);
        assert_eq!(rows.len(), plotted.len());
        for r in &rows {
            assert!(r.min_bytes <= r.max_bytes);
        }
        let (s0, s1) = steps_in(&t, a, b).unwrap();
        assert_eq!((s0, s1), (t.marks[5].step, t.marks[40].step));
        assert!(steps_in(&t, 0, 0).is_none() || t.marks[0].t_us == 0);
    }

    #[test]
    fn the_step_chart_carries_the_leak_to_the_limit() {
        let t = run(256 << 20);
        let a = oomscope_analysis::analyze(&t, &Default::default());
        let d = step_chart(&t, &a).unwrap();
        let f = a.headline_leak().unwrap();
        assert_eq!(d.metric, f.metric.label());
        let ((from_step, _), (full_step, limit)) = d.projection.unwrap();
        let p = f.projection.as_ref().unwrap();
        assert_eq!(
            (from_step, full_step, limit),
            (f.last_step, p.full_at_step, p.limit_bytes)
        );
        assert!(d.x_range.1 <= full_step);
        assert_eq!(d.full_beyond, d.x_range.1 < full_step);
        assert!(d.stages.iter().all(|(_, _, pts)| pts.len() >= 40));

        let clean = run(0);
        let a = oomscope_analysis::analyze(&clean, &Default::default());
        let d = step_chart(&clean, &a).unwrap();
        assert!(d.fit.is_none() && d.projection.is_none());
    }

    #[test]
    fn the_chart_of_a_leak_kept_at_epoch_ends_counts_epochs_and_a_serving_loop_forwards() {
        use oomscope_analysis::facts::Clock;
        // Six epochs of ten steps, 2 GiB kept at each epoch's end: the fit is per epoch, and so
        // is the chart's axis (a per-epoch slope drawn over steps would climb 10 times too fast).
        let mut t = oomscope_testkit::run::Run {
            steps: 60,
            ..Default::default()
        }
        .build();
        oomscope_testkit::run::keep_at_epoch_ends(&mut t, 10, 2 << 30);
        let a = oomscope_analysis::analyze(&t, &Default::default());
        let f = a.headline_leak().unwrap();
        assert_eq!(f.clock, Clock::Epoch, "{f:#?}");
        let d = step_chart(&t, &a).unwrap();
        assert_eq!(d.clock, Clock::Epoch);
        assert_eq!(d.x_range.0, 0);
        assert_eq!(d.fit.map(|(_, _, first, last)| (first, last)), Some((0, 5)));
        assert!(d.stages.iter().all(|(_, _, pts)| pts.len() == 6));

        // The same run never training: a chart per forward, counted from 1.
        for m in &mut t.marks {
            m.phase = Phase::Eval;
        }
        let a = oomscope_analysis::analyze(&t, &Default::default());
        let d = step_chart(&t, &a).unwrap();
        assert_eq!(d.clock, Clock::Forward);
        assert_eq!(d.x_range.0, 1);
    }
}

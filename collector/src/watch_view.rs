//! `collector watch`'s terminal view (ratatui): one pane per followed trace (a job's ranks side
//! by side as tabs, the arrows move between them), showing where the run is, each memory against
//! its limit as a gauge (red from [`ALERT_SHARE`] on, with the warning's words), memory along the
//! run's clock as a chart, the headlined leak with when memory is full, and the findings so far.
//!
//! Drawing is a pure function of what the watcher knows ([`Pane`]s and the selected one), so it
//! is tested by rendering into ratatui's test backend at moments of a real recorded run; the
//! words are `oomscope_words::live`'s, the same `collector watch --json` and the line mode say.

use oomscope_analysis::finding::Severity;
use oomscope_analysis::live::{ALERT_SHARE, LiveChart, LiveState};
use oomscope_format::units::{format_bytes, format_count, format_duration_us, format_percent};
use oomscope_words::findings::text;
use oomscope_words::live::{chart_title, leak, memory, place, warning};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, LineGauge, Paragraph, Tabs, Wrap};

/// How a followed trace stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Following {
    /// Its file does not exist yet.
    Waiting,
    /// It grows.
    Live,
    /// It has not grown for a while and has no end.
    Stale,
    /// Its recorder wrote its end.
    Ended,
}

impl Following {
    fn words(self) -> &'static str {
        match self {
            Following::Waiting => "waiting for the file",
            Following::Live => "live",
            Following::Stale => "not growing (its recorder may have stopped)",
            Following::Ended => "ended",
        }
    }
}

/// One followed trace as the view shows it.
#[derive(Debug, Clone, Copy)]
pub struct Pane<'a> {
    /// The trace's name (its path as given).
    pub name: &'a str,
    /// How it stands.
    pub following: Following,
    /// What was analysed of it (none before its first chunk).
    pub state: Option<&'a LiveState>,
}

/// Draws `panes`, `selected` shown whole.
pub fn draw(frame: &mut Frame, panes: &[Pane], selected: usize) {
    let area = frame.area();
    let [tabs, body, keys] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    let titles = panes.iter().map(|p| {
        let alert = p.state.is_some_and(|s| !s.alerts.is_empty());
        let style = if alert {
            Style::new().fg(Color::Red)
        } else {
            Style::new()
        };
        Line::from(Span::styled(p.name.to_owned(), style))
    });
    frame.render_widget(
        Tabs::new(titles)
            .select(selected)
            .highlight_style(Style::new().add_modifier(Modifier::REVERSED))
            .divider(" "),
        tabs,
    );
    if let Some(pane) = panes.get(selected) {
        draw_pane(frame, pane, body);
    }
    let hint = if panes.len() > 1 {
        "q quits · ←/→ another trace · the summary prints when every run has ended"
    } else {
        "q quits · the summary prints when the run has ended"
    };
    frame.render_widget(
        Paragraph::new(hint).style(Style::new().add_modifier(Modifier::DIM)),
        keys,
    );
}

/// Draws `pane` alone on the whole frame: `collector run --live`'s pane under the program's
/// output (no tabs, no keys: the keyboard is the program's).
pub fn draw_run(frame: &mut Frame, pane: &Pane) {
    draw_pane(frame, pane, frame.area());
}

fn draw_pane(frame: &mut Frame, pane: &Pane, area: Rect) {
    let block = Block::bordered().title(format!(" {} · {} ", pane.name, pane.following.words()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let Some(state) = pane.state else {
        let words = match pane.following {
            Following::Waiting => "waiting for the run to start recording this trace…",
            _ => "waiting for the trace's first chunk…",
        };
        frame.render_widget(Paragraph::new(words), inner);
        return;
    };
    let gauges = state.memory.len() as u16;
    let alerts = state.alerts.len() as u16;
    let [
        place_area,
        gauge_area,
        alert_area,
        chart_area,
        leak_area,
        findings_area,
    ] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(gauges),
        Constraint::Length(alerts),
        Constraint::Min(6),
        Constraint::Length(u16::from(state.leak.is_some())),
        Constraint::Length((state.findings.len() as u16).clamp(1, 6)),
    ])
    .areas(inner);
    let mut at = vec![Span::raw(format_duration_us(state.t_us))];
    if let Some(p) = place(state) {
        at.push(Span::raw(" · "));
        at.push(Span::styled(p, Style::new().add_modifier(Modifier::BOLD)));
    }
    frame.render_widget(Paragraph::new(Line::from(at)), place_area);
    for (i, m) in state.memory.iter().enumerate() {
        let row = Rect {
            y: gauge_area.y + i as u16,
            height: 1,
            ..gauge_area
        };
        let words = memory(m);
        match m.limit_bytes.filter(|l| *l > 0) {
            Some(limit) => {
                let ratio = (m.bytes as f64 / limit as f64).clamp(0.0, 1.0);
                let color = if ratio >= ALERT_SHARE {
                    Color::Red
                } else {
                    Color::Green
                };
                frame.render_widget(
                    LineGauge::default()
                        .ratio(ratio)
                        .label(format!("{words} ({})", format_percent(ratio)))
                        .filled_style(Style::new().fg(color))
                        .unfilled_style(Style::new().fg(Color::DarkGray)),
                    row,
                );
            }
            None => frame.render_widget(Paragraph::new(words), row),
        }
    }
    let alert_lines: Vec<Line> = state
        .alerts
        .iter()
        .map(|a| {
            Line::styled(
                warning(a),
                Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            )
        })
        .collect();
    frame.render_widget(Paragraph::new(alert_lines), alert_area);
    match &state.chart {
        Some(chart) if chart.points.len() >= 2 => draw_chart(frame, chart, chart_area),
        _ => frame.render_widget(
            Paragraph::new("the chart starts at the second step")
                .style(Style::new().add_modifier(Modifier::DIM)),
            chart_area,
        ),
    }
    if let Some(l) = &state.leak {
        frame.render_widget(
            Paragraph::new(Line::styled(leak(l), Style::new().fg(Color::Yellow))),
            leak_area,
        );
    }
    let findings: Vec<Line> = if state.findings.is_empty() {
        vec![Line::raw("no finding so far")]
    } else {
        state
            .findings
            .iter()
            .map(|f| {
                let color = match f.severity {
                    Severity::Critical => Color::Red,
                    Severity::Warning => Color::Yellow,
                    Severity::Info => Color::Reset,
                };
                Line::from(vec![
                    Span::styled(format!("{:<8}", f.severity.label()), Style::new().fg(color)),
                    Span::raw(text(f).title),
                ])
            })
            .collect()
    };
    frame.render_widget(
        Paragraph::new(findings).wrap(Wrap { trim: true }),
        findings_area,
    );
}

/// Memory along the clock: a line of braille dots, its range and positions on the axes.
fn draw_chart(frame: &mut Frame, chart: &LiveChart, area: Rect) {
    let data: Vec<(f64, f64)> = chart
        .points
        .iter()
        .map(|&(at, bytes)| (at as f64, bytes as f64))
        .collect();
    let (first, last) = (chart.points[0].0, chart.points[chart.points.len() - 1].0);
    let low = chart.points.iter().map(|p| p.1).min().unwrap_or(0);
    let high = chart.points.iter().map(|p| p.1).max().unwrap_or(0);
    // A flat line still gets a band to sit in.
    let pad = ((high - low) / 20).max(1 << 20);
    let (y0, y1) = (low.saturating_sub(pad), high + pad);
    let title = format!(" {} ", chart_title(chart));
    let widget = Chart::new(vec![
        Dataset::default()
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(Color::Cyan))
            .data(&data),
    ])
    .block(Block::bordered().title(title))
    .x_axis(
        Axis::default()
            .bounds([first as f64, (last as f64).max(first as f64 + 1.0)])
            .labels([format_count(first), format_count(last)]),
    )
    .y_axis(
        Axis::default()
            .bounds([y0 as f64, y1 as f64])
            .labels([format_bytes(y0), format_bytes(y1)]),
    );
    frame.render_widget(widget, area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_analysis::live::live_state;
    use oomscope_analysis::{AnalysisOptions, analyze};
    use oomscope_format::Follower;
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    /// A real recording: `collector/tests/torch_programs/train.py`'s GPT-style model on an H100
    /// (the golden trace `gpu/h100_gpt.oomt`).
    fn recorded() -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/format/tests/data/gpu/h100_gpt.oomt");
        std::fs::read(path).expect("the golden trace")
    }

    /// The screen after the first `share` of the file's bytes, followed as a watcher does.
    fn screen_at(bytes: &[u8], share: f64, following: Following) -> String {
        let mut follower = Follower::default();
        follower
            .push(&bytes[..(bytes.len() as f64 * share) as usize])
            .unwrap();
        let state = follower
            .trace()
            .map(|t| live_state(t, &analyze(t, &AnalysisOptions::default())));
        let panes = [
            Pane {
                name: "rank0.oomt",
                following,
                state: state.as_ref(),
            },
            Pane {
                name: "rank1.oomt",
                following: Following::Waiting,
                state: None,
            },
        ];
        let mut terminal = Terminal::new(TestBackend::new(100, 32)).unwrap();
        terminal.draw(|f| draw(f, &panes, 0)).unwrap();
        terminal.backend().to_string()
    }

    #[test]
    fn the_view_at_moments_of_a_real_recorded_run() {
        let bytes = recorded();
        insta::assert_snapshot!(
            "before_the_first_chunk",
            screen_at(&bytes, 0.0, Following::Waiting)
        );
        insta::assert_snapshot!("a_third_in", screen_at(&bytes, 0.33, Following::Live));
        insta::assert_snapshot!("two_thirds_in", screen_at(&bytes, 0.66, Following::Live));
        insta::assert_snapshot!("at_the_end", screen_at(&bytes, 1.0, Following::Ended));
    }

    #[test]
    fn memory_past_90_percent_of_its_limit_is_red_with_its_warning() {
        use oomscope_format::units::{GIB, MIB};
        use oomscope_testkit::run::Run;
        let trace = Run {
            steps: 100,
            leak_bytes_per_step: 460 * MIB,
            ..Run::default()
        }
        .build();
        let state = live_state(&trace, &analyze(&trace, &AnalysisOptions::default()));
        assert!(!state.alerts.is_empty(), "{state:?}");
        let panes = [Pane {
            name: "run.oomt",
            following: Following::Live,
            state: Some(&state),
        }];
        let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
        terminal.draw(|f| draw(f, &panes, 0)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        let text = terminal.backend().to_string();
        assert!(text.contains("WARNING gpu0.used at 9"), "{text}");
        assert!(
            text.contains(&format!("of {}", format_bytes(80 * GIB))),
            "{text}"
        );
        // The warning's cells are red.
        let (x, y) = (0..buffer.area.height)
            .find_map(|y| {
                (0..buffer.area.width)
                    .find(|&x| buffer[(x, y)].symbol() == "W" && buffer[(x + 1, y)].symbol() == "A")
                    .map(|x| (x, y))
            })
            .unwrap();
        assert_eq!(buffer[(x, y)].fg, Color::Red);
    }
}

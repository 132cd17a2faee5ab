//! The report's sections below the timeline: overview, findings, stage and step tables,
//! breakdown at the peak, gradient and tensor statistics, batch-size trials, comparison, exports.
//!
//! Every recorded string reaches the page as a text node or a DOM property, never as markup:
//! traces come attached to tickets and are untrusted. Exact byte values ride along in `data-`
//! attributes next to the formatted text, for tests and for copying.

use std::sync::Arc;

use leptos::html::Canvas;
use leptos::prelude::*;
use oomscope_trace::analysis::Analysis;
use oomscope_trace::analysis::batch_fit::BatchFitMethod;
use oomscope_trace::analysis::compare::{compare_peaks, compare_stages};
use oomscope_trace::analysis::metrics::primary_metric;
use oomscope_trace::analysis::peaks::breakdown_peak;
use oomscope_trace::analysis::stages::{step_lines, step_rows};
use oomscope_trace::units::{
    format_bytes, format_bytes_f64, format_count, format_duration_us, format_signed_bytes,
    format_signed_bytes_f64,
};
use oomscope_trace::{Trace, TrialOutcome, export, headline};
use plotters::prelude::*;
use plotters_canvas::CanvasBackend;

use crate::browser;
use crate::load::Loaded;
use crate::view_model::{PALETTE, bytes_text, change_text};

fn opt_text(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_owned())
}

fn opt_num<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// Most notes listed in the overview.
const MAX_NOTES: usize = 50;

/// Command, host, GPUs, duration, notes, warnings, and the OOM banner.
#[component]
pub fn Overview(loaded: Arc<Loaded>) -> impl IntoView {
    let warnings = loaded.warnings.clone();
    let partial = loaded.is_partial().then(|| {
        view! {
            <div class="banner warn" id="partial-banner">
                <strong>"Partly readable trace. "</strong>
                "What follows is the part that decoded; the reader reported:"
                <ul>{warnings.into_iter().map(|w| view! { <li>{w}</li> }).collect_view()}</ul>
            </div>
        }
    });
    let notice = loaded
        .notice
        .clone()
        .map(|n| view! { <div class="banner info" id="thinned-notice">{n}</div> });
    let Some(trace) = loaded.trace.clone() else {
        return view! {
            <section class="overview">
                <div class="banner error" id="load-error">
                    <strong>{loaded.name.clone()}": "</strong>
                    {loaded.error.clone().unwrap_or_default()}
                </div>
            </section>
        }
        .into_any();
    };
    let m = &trace.metadata;
    let command = if m.command.is_empty() {
        "(not recorded)".to_owned()
    } else {
        m.command.join(" ")
    };
    let gpus = if m.gpus.is_empty() {
        "none recorded".to_owned()
    } else {
        m.gpus
            .iter()
            .map(|g| {
                format!(
                    "GPU {}: {} ({})",
                    g.index,
                    g.name,
                    format_bytes(g.total_memory_bytes)
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let exit = headline::ending(&trace);
    let oom = headline::first_oom(&trace)
        .map(|text| view! { <div class="banner error" id="oom-banner">{text}</div> });
    let notes = (!trace.notes.is_empty()).then(|| {
        let shown = trace.notes.iter().take(MAX_NOTES).map(|n| {
            view! { <li><span class="hint">{format_duration_us(n.t_us)}" "</span>{n.text.clone()}</li> }
        });
        let more = trace.notes.len().saturating_sub(MAX_NOTES);
        view! {
            <details id="notes" open=trace.notes.len() <= 5>
                <summary>{format!("{} notes", trace.notes.len())}</summary>
                <ul>{shown.collect_view()}</ul>
                {(more > 0).then(|| view! { <p class="hint">{format!("and {more} more")}</p> })}
            </details>
        }
    });
    view! {
        <section class="overview" id="overview">
            {oom}
            {partial}
            {notice}
            <dl>
                <dt>"file"</dt><dd id="trace-name">{loaded.name.clone()}" ("{format_bytes(loaded.size_bytes as u64)}")"</dd>
                <dt>"command"</dt><dd id="command"><code>{command}</code></dd>
                <dt>"host"</dt><dd id="host">{format!("{} (pid {})", m.host, m.pid)}</dd>
                <dt>"GPUs"</dt><dd id="gpus">{gpus}</dd>
                <dt>"duration"</dt><dd id="duration">{format_duration_us(trace.duration_us())}</dd>
                <dt>"recorded"</dt>
                <dd>{format!("{} samples, {} stage marks, format {}.{}, collector {}",
                    format_count(trace.samples.len() as u64), format_count(trace.marks.len() as u64),
                    trace.format_version.0, trace.format_version.1, m.collector_version)}</dd>
                <dt>"end"</dt><dd id="exit">{exit}</dd>
            </dl>
            {notes}
        </section>
    }
    .into_any()
}

/// Peak of every sampled counter.
#[component]
pub fn CounterPeaks(analysis: Arc<Analysis>) -> impl IntoView {
    let rows = analysis
        .overview
        .counter_peaks
        .iter()
        .map(|p| {
            view! {
                <tr data-metric=p.label.clone() data-bytes=p.bytes.to_string()>
                    <td>{p.label.clone()}</td>
                    <td class="num">{format_bytes(p.bytes)}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section id="peaks">
            <h2>"Peaks"</h2>
            <table class="peaks"><thead><tr><th>"counter"</th><th>"peak"</th></tr></thead>
            <tbody>{rows}</tbody></table>
        </section>
    }
}

/// Findings and what to change, most severe first (the analysis sorts them).
#[component]
pub fn Findings(analysis: Arc<Analysis>) -> impl IntoView {
    if analysis.findings.is_empty() {
        return view! {
            <section id="findings"><h2>"Findings"</h2>
            <p class="empty">"Nothing to change: no rule found a problem in this trace."</p></section>
        }
        .into_any();
    }
    let items = analysis
        .findings
        .iter()
        .map(|f| {
            let evidence = f
                .evidence
                .iter()
                .map(|e| {
                    view! {
                        <tr data-label=e.label.clone() data-value=e.value.to_string()>
                            <td>{e.label.clone()}</td>
                            <td class="num">{e.text()}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <article class=format!("finding {}", f.severity.label()) data-id=f.kind.id()>
                    <h3><span class="severity">{f.severity.label()}</span>" "{f.title.clone()}</h3>
                    <p>{f.explanation.clone()}</p>
                    <p class="change"><strong>"Change: "</strong>{f.change.clone()}</p>
                    <details><summary>"evidence"</summary><table class="evidence">{evidence}</table></details>
                </article>
            }
        })
        .collect_view();
    view! { <section id="findings"><h2>"Findings and recommendations"</h2>{items}</section> }
        .into_any()
}

/// The stage table of one metric, the numbers `collector summary` prints.
#[component]
pub fn StageTable(analysis: Arc<Analysis>) -> impl IntoView {
    let table = analysis.stage_table.clone();
    if table.rows.is_empty() {
        return view! {
            <section id="stages"><h2>"Stages"</h2>
            <p class="empty">"No stage marks in this trace: instrument the loop (README: marker protocol) to get a stage table."</p></section>
        }
        .into_any();
    }
    let initial = table
        .primary_metric
        .clone()
        .unwrap_or_else(|| table.metrics[0].clone());
    let metric = RwSignal::new(initial);
    let options = table
        .metrics
        .iter()
        .map(|m| view! { <option value=m.clone()>{m.clone()}</option> })
        .collect_view();
    let growth = analysis.largest_growth.clone();
    let growth_text = growth.as_ref().map(|g| {
        view! {
            <p id="largest-growth" class="highlight-text">
                {format!("Largest growth: {} {} from {} (step {}) to {} (step {})",
                    g.metric, format_signed_bytes(g.bytes as i64), g.from_stage, g.from_step, g.to_stage, g.step)}
            </p>
        }
    });
    let body_table = table.clone();
    let body = move || {
        let shown = metric.get();
        let Some(mi) = body_table.metric_index(&shown) else {
            return Vec::new();
        };
        body_table
            .rows
            .iter()
            .map(|row| {
                let s = &row.metrics[mi];
                let eval = row.phase.suffix();
                let largest = growth.as_ref().is_some_and(|g| {
                    g.metric == shown && g.to_stage == row.stage && g.phase == row.phase
                });
                view! {
                    <tr class:largest-growth=largest
                        data-stage=row.stage.clone()
                        data-phase=row.phase.label()
                        data-count=row.count.to_string()
                        data-mean-bytes=opt_num(s.mean_bytes)
                        data-max-bytes=opt_num(s.max_bytes)
                        data-mean-delta-bytes=opt_num(s.mean_delta_bytes)
                        data-max-delta-bytes=opt_num(s.max_delta_bytes)>
                        <td>{format!("{}{eval}", row.stage)}</td>
                        <td class="num">{format_count(row.count as u64)}</td>
                        <td class="num">{opt_text(s.mean_bytes.map(format_bytes_f64))}</td>
                        <td class="num">{opt_text(s.max_bytes.map(format_bytes))}</td>
                        <td class="num">{opt_text(s.mean_delta_bytes.map(format_signed_bytes_f64))}</td>
                        <td class="num">{opt_text(s.max_delta_bytes.map(format_signed_bytes))}</td>
                        <td class="num">{opt_text(s.max_vs_baseline_bytes.map(format_signed_bytes))}</td>
                    </tr>
                }
            })
            .collect::<Vec<_>>()
    };
    view! {
        <section id="stages">
            <h2>"Stages"</h2>
            <label>"metric "
                <select id="stage-metric" prop:value=move || metric.get()
                    on:change=move |ev| metric.set(event_target_value(&ev))>{options}</select>
            </label>
            <span class="hint">" delta = change since the previous mark"</span>
            {growth_text}
            <table id="stage-table" class="stages">
                <thead><tr><th>"stage"</th><th>"count"</th><th>"mean"</th><th>"max"</th>
                <th>"mean delta"</th><th>"max delta"</th><th>"max vs baseline"</th></tr></thead>
                <tbody>{body}</tbody>
            </table>
        </section>
    }
    .into_any()
}

/// Rows per page of the step table.
const STEPS_PER_PAGE: usize = 25;

/// The per-step table of the primary metric: value and delta per stage, paged.
#[component]
pub fn StepTable(trace: Arc<Trace>, analysis: Arc<Analysis>) -> impl IntoView {
    let Some(metric) = primary_metric(&trace) else {
        return ().into_any();
    };
    let stages = oomscope_trace::analysis::stages::stage_names(&trace);
    let lines = Arc::new(step_lines(&step_rows(&trace, metric)));
    if lines.is_empty() {
        return ().into_any();
    }
    let label = metric.label(&trace).to_owned();
    let pages = lines.len().div_ceil(STEPS_PER_PAGE);
    let growth = analysis.largest_growth.clone();
    // Open on the page with the largest growth: that is where the reader wants to look.
    let start_page = growth
        .as_ref()
        .and_then(|g| {
            lines
                .iter()
                .position(|l| l.step == g.step && l.phase == g.phase)
        })
        .map_or(0, |i| i / STEPS_PER_PAGE);
    let page = RwSignal::new(start_page);
    let header = stages
        .iter()
        .map(|s| view! { <th colspan="2">{s.clone()}</th> })
        .collect_view();
    let rows_lines = lines.clone();
    let rows = move || {
        let p = page.get();
        rows_lines
            .iter()
            .skip(p * STEPS_PER_PAGE)
            .take(STEPS_PER_PAGE)
            .map(|l| {
                let cells = l
                    .values
                    .iter()
                    .zip(&l.deltas)
                    .zip(&stages)
                    .map(|((v, d), stage)| {
                        let hot = growth.as_ref().is_some_and(|g| {
                            g.step == l.step && g.phase == l.phase && &g.to_stage == stage
                        });
                        view! {
                            <td class="num" data-bytes=opt_num(*v)>{bytes_text(*v)}</td>
                            <td class="num delta" class:largest-growth=hot>{opt_text(d.map(format_signed_bytes))}</td>
                        }
                    })
                    .collect_view();
                let eval = l.phase.suffix();
                view! { <tr><td>{format!("{}{eval}", l.step)}</td>{cells}</tr> }
            })
            .collect_view()
    };
    view! {
        <section id="steps">
            <h2>{format!("Steps ({label})")}</h2>
            <div class="toolbar">
                <button on:click=move |_| page.update(|p| *p = p.saturating_sub(1))>"previous"</button>
                <span>{move || format!(" page {} of {pages} ", page.get() + 1)}</span>
                <button on:click=move |_| page.update(|p| *p = (*p + 1).min(pages - 1))>"next"</button>
            </div>
            <div class="scroll">
                <table id="step-table" class="steps">
                    <thead><tr><th>"step"</th>{header}</tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        </section>
    }
    .into_any()
}

/// Draws a horizontal bar chart of named sizes.
fn draw_bars(canvas: &web_sys::HtmlCanvasElement, parts: &[(String, u64)]) -> Option<()> {
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&WHITE).ok()?;
    let max = parts.iter().map(|p| p.1).max().unwrap_or(1).max(1) as f64 * 1.1;
    let n = parts.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .margin(8)
        .x_label_area_size(26)
        .y_label_area_size(8)
        .build_cartesian_2d(0f64..max, 0f64..n)
        .ok()?;
    // Bars are labelled by colour: the table beside the chart carries the same swatches.
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|x| format_bytes(x.max(0.0) as u64))
        .x_labels(5)
        .draw()
        .ok()?;
    chart
        .draw_series(parts.iter().enumerate().map(|(i, (_, bytes))| {
            let y = n - i as f64;
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            Rectangle::new(
                [(0.0, y - 0.85), (*bytes as f64, y - 0.15)],
                RGBColor(r, g, b).filled(),
            )
        }))
        .ok()?;
    root.present().ok()
}

/// What made up memory at the peak: parameters, gradients, optimizer state, activations, other.
#[component]
pub fn Breakdown(trace: Arc<Trace>, analysis: Arc<Analysis>) -> impl IntoView {
    let Some(peak) = breakdown_peak(&trace, &analysis.peaks) else {
        return ().into_any();
    };
    if peak.components.is_none() {
        return view! {
            <section id="breakdown"><h2>"At the peak"</h2>
            <p>{format!("{} peaked at {}; the trace has no component breakdown (the tch Session and the Python helper's components() record one).",
                peak.metric, format_bytes(peak.bytes))}</p></section>
        }
        .into_any();
    }
    let parts: Vec<(String, u64)> = peak
        .parts()
        .into_iter()
        .map(|p| (p.name, p.bytes))
        .collect();
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let drawn = parts.clone();
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            canvas.set_width(canvas.client_width().max(300) as u32);
            draw_bars(&canvas, &drawn);
        }
    });
    let rows = parts
        .iter()
        .enumerate()
        .map(|(i, (name, bytes))| {
            let (r, g, b) = PALETTE[i % PALETTE.len()];
            view! { <tr data-part=name.clone() data-bytes=bytes.to_string()>
                <td><span class="swatch" style:background-color=format!("rgb({r},{g},{b})")></span>" "{name.clone()}</td>
                <td class="num">{format_bytes(*bytes)}</td></tr> }
        })
        .collect_view();
    let stage = peak
        .stage
        .as_ref()
        .map(|s| format!(", stage {} of step {}", s.stage, s.step))
        .unwrap_or_default();
    view! {
        <section id="breakdown">
            <h2>"At the peak"</h2>
            <p>{format!("{} peaked at {}{stage}.", peak.metric, format_bytes(peak.bytes))}</p>
            <div class="split">
                <canvas id="breakdown-canvas" node_ref=canvas_ref height="220"></canvas>
                <table class="breakdown">{rows}</table>
            </div>
        </section>
    }
    .into_any()
}

/// Latest rows of gradient or tensor statistics listed.
const STAT_ROWS: usize = 40;
/// First non-finite rows listed besides the latest ones.
const FIRST_NONFINITE: usize = 5;

/// Gradient and tensor statistics, NaN/Inf highlighted.
#[component]
pub fn Statistics(trace: Arc<Trace>) -> impl IntoView {
    if trace.gradients.is_empty() && trace.tensors.is_empty() {
        return ().into_any();
    }
    let bad_grads = trace
        .gradients
        .iter()
        .filter(|g| g.nan_count + g.inf_count > 0)
        .count();
    // The first non-finite records say where it started; the latest say where it stands.
    let first_nonfinite_grads: Vec<usize> = trace
        .gradients
        .iter()
        .enumerate()
        .filter(|(_, g)| g.nan_count + g.inf_count > 0)
        .map(|(i, _)| i)
        .take(FIRST_NONFINITE)
        .collect();
    let first_nonfinite_tensors: Vec<usize> = trace
        .tensors
        .iter()
        .enumerate()
        .filter(|(_, t)| t.nan_count + t.inf_count > 0)
        .map(|(i, _)| i)
        .take(FIRST_NONFINITE)
        .collect();
    let grads = trace
        .gradients
        .iter()
        .enumerate()
        .filter(|(i, _)| {
            first_nonfinite_grads.contains(i) || *i + STAT_ROWS >= trace.gradients.len()
        })
        .map(|(_, g)| {
            let bad = g.nan_count + g.inf_count > 0;
            view! {
                <tr class:nonfinite=bad>
                    <td>{g.step}</td><td class="num">{format!("{:.4e}", g.global_norm)}</td>
                    <td class="num">{g.params_with_grad}</td><td class="num">{format_bytes(g.gradient_bytes)}</td>
                    <td class="num">{g.nan_count}</td><td class="num">{g.inf_count}</td>
                </tr>
            }
        })
        .collect_view();
    let bad_tensors = trace
        .tensors
        .iter()
        .filter(|t| t.nan_count + t.inf_count > 0)
        .count();
    let tensors = trace
        .tensors
        .iter()
        .enumerate()
        .filter(|(i, _)| first_nonfinite_tensors.contains(i) || *i + STAT_ROWS >= trace.tensors.len())
        .map(|(_, t)| {
            let bad = t.nan_count + t.inf_count > 0;
            let shape = t.shape.iter().map(u64::to_string).collect::<Vec<_>>().join("×");
            view! {
                <tr class:nonfinite=bad>
                    <td>{t.step}</td><td>{t.name.as_ref().to_owned()}</td><td>{shape}</td>
                    <td>{t.dtype.as_ref().to_owned()}</td><td class="num">{format_bytes(t.bytes)}</td>
                    <td class="num">{format!("{:.4}", t.min)}</td><td class="num">{format!("{:.4}", t.max)}</td>
                    <td class="num">{format!("{:.4}", t.mean)}</td><td class="num">{format!("{:.4}", t.std)}</td>
                    <td class="num">{t.nan_count}</td><td class="num">{t.inf_count}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        <section id="statistics">
            <h2>"Gradients and tensors"</h2>
            <p>{format!("{} gradient summaries ({bad_grads} with NaN/Inf), {} tensor statistics ({bad_tensors} with NaN/Inf); listed: the first {FIRST_NONFINITE} non-finite ones and the latest {STAT_ROWS}.",
                trace.gradients.len(), trace.tensors.len())}</p>
            <div class="scroll">
            <h3>"Gradients (per step)"</h3>
            <table id="gradient-table"><thead><tr><th>"step"</th><th>"global norm"</th><th>"params"</th>
                <th>"bytes"</th><th>"NaN"</th><th>"Inf"</th></tr></thead><tbody>{grads}</tbody></table>
            <h3>"Tensors"</h3>
            <table id="tensor-table"><thead><tr><th>"step"</th><th>"tensor"</th><th>"shape"</th><th>"dtype"</th>
                <th>"bytes"</th><th>"min"</th><th>"max"</th><th>"mean"</th><th>"std"</th><th>"NaN"</th><th>"Inf"</th></tr></thead>
                <tbody>{tensors}</tbody></table>
            </div>
        </section>
    }
    .into_any()
}

/// Batch-size trials: peak against batch size, the fitted line, the budget and the
/// recommended batch.
#[component]
pub fn BatchTrials(trace: Arc<Trace>, analysis: Arc<Analysis>) -> impl IntoView {
    if trace.batch_trials.is_empty() {
        return ().into_any();
    }
    let fit = analysis
        .batch_fit
        .clone()
        .filter(|f| f.method == BatchFitMethod::Trials);
    let canvas_ref: NodeRef<Canvas> = NodeRef::new();
    let trials = trace.batch_trials.clone();
    let drawn_fit = fit.clone();
    Effect::new(move |_| {
        if let Some(canvas) = canvas_ref.get() {
            canvas.set_width(canvas.client_width().max(300) as u32);
            draw_trials(&canvas, &trials, drawn_fit.as_ref());
        }
    });
    let rows = trace
        .batch_trials
        .iter()
        .map(|t| {
            let outcome = match t.outcome {
                TrialOutcome::Fit => "fit",
                TrialOutcome::Oom => "out of memory",
                TrialOutcome::Error => "error",
            };
            view! { <tr class:nonfinite=t.outcome != TrialOutcome::Fit>
            <td class="num">{t.batch_size}</td><td>{outcome}</td>
            <td class="num">{bytes_text(t.peak_bytes)}</td></tr> }
        })
        .collect_view();
    let recommendation = fit.map(|f| {
        view! { <p id="recommended-batch" data-batch=f.max_batch.to_string()>
            {format!("Recommended batch size: {} (fit: {} per sample + {} fixed, budget {} = {:.0}% of {}).",
                f.max_batch, format_bytes_f64(f.per_sample_bytes), format_bytes_f64(f.fixed_bytes),
                format_bytes(f.budget_bytes), (1.0 - f.margin) * 100.0, format_bytes(f.device_total_bytes))}
        </p> }
    });
    view! {
        <section id="batch">
            <h2>"Batch-size search"</h2>
            {recommendation}
            <div class="split">
                <canvas id="batch-canvas" node_ref=canvas_ref height="260"></canvas>
                <table><thead><tr><th>"batch"</th><th>"outcome"</th><th>"peak"</th></tr></thead><tbody>{rows}</tbody></table>
            </div>
        </section>
    }
    .into_any()
}

fn draw_trials(
    canvas: &web_sys::HtmlCanvasElement,
    trials: &[oomscope_trace::BatchTrial],
    fit: Option<&oomscope_trace::analysis::batch_fit::BatchFit>,
) -> Option<()> {
    let root = CanvasBackend::with_canvas_object(canvas.clone())?.into_drawing_area();
    root.fill(&WHITE).ok()?;
    let x_max = trials
        .iter()
        .map(|t| t.batch_size)
        .chain(fit.map(|f| f.max_batch))
        .max()
        .unwrap_or(1) as f64
        * 1.15;
    let y_max = trials
        .iter()
        .filter_map(|t| t.peak_bytes)
        .chain(fit.map(|f| f.budget_bytes))
        .max()
        .unwrap_or(1)
        .max(1) as f64
        * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(78)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)
        .ok()?;
    chart
        .configure_mesh()
        .x_desc("batch size")
        .y_label_formatter(&|v| format_bytes(v.max(0.0) as u64))
        .draw()
        .ok()?;
    if let Some(f) = fit {
        let line = |x: f64| f.fixed_bytes + f.per_sample_bytes * x;
        // End the fitted line where it leaves the plot: a point beyond the range would be
        // clamped to the edge and bend the line.
        let x_end = if f.per_sample_bytes > 0.0 {
            x_max.min((y_max - f.fixed_bytes) / f.per_sample_bytes)
        } else {
            x_max
        };
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, line(0.0)), (x_end, line(x_end))],
                BLUE.stroke_width(1),
            ))
            .ok()?;
        let budget = f.budget_bytes as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, budget), (x_max, budget)],
                RED.mix(0.6),
            ))
            .ok()?;
        let best = f.max_batch as f64;
        chart
            .draw_series(LineSeries::new(
                vec![(best, 0.0), (best, y_max)],
                GREEN.stroke_width(2),
            ))
            .ok()?;
    }
    chart
        .draw_series(trials.iter().filter_map(|t| {
            Some(Circle::new(
                (t.batch_size as f64, t.peak_bytes? as f64),
                5,
                BLUE.filled(),
            ))
        }))
        .ok()?;
    chart
        .draw_series(
            trials
                .iter()
                .filter(|t| t.outcome != TrialOutcome::Fit)
                .map(|t| Cross::new((t.batch_size as f64, y_max * 0.95), 6, RED.stroke_width(2))),
        )
        .ok()?;
    root.present().ok()
}

/// Two traces side by side: peaks and per-stage figures, before vs after a fix.
#[component]
pub fn Compare(
    a_name: String,
    a: Arc<Analysis>,
    b_name: String,
    b: Arc<Analysis>,
) -> impl IntoView {
    let peaks = compare_peaks(&a, &b)
        .into_iter()
        .map(|p| {
            let change = p.change_bytes();
            view! {
                <tr data-metric=p.metric.clone() data-a-bytes=opt_num(p.a_bytes)
                    data-b-bytes=opt_num(p.b_bytes) class:better=change.is_some_and(|c| c < 0)
                    class:worse=change.is_some_and(|c| c > 0)>
                    <td>{p.metric.clone()}</td><td class="num">{bytes_text(p.a_bytes)}</td>
                    <td class="num">{bytes_text(p.b_bytes)}</td>
                    <td class="num">{change_text(p.a_bytes, p.b_bytes)}</td>
                </tr>
            }
        })
        .collect_view();
    let stages = compare_stages(&a, &b).map(|(metric, rows)| {
        let rows = rows
            .into_iter()
            .map(|r| {
                view! {
                    <tr data-stage=r.stage.clone()>
                        <td>{r.stage.clone()}</td>
                        <td class="num">{bytes_text(r.a_max_bytes)}</td>
                        <td class="num">{bytes_text(r.b_max_bytes)}</td>
                        <td class="num">{opt_text(r.a_mean_delta_bytes.map(format_signed_bytes_f64))}</td>
                        <td class="num">{opt_text(r.b_mean_delta_bytes.map(format_signed_bytes_f64))}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <h3>{format!("Stages ({metric})")}</h3>
            <table id="compare-stages"><thead><tr><th>"stage"</th><th>"max A"</th><th>"max B"</th>
                <th>"mean delta A"</th><th>"mean delta B"</th></tr></thead><tbody>{rows}</tbody></table>
        }
    });
    view! {
        <section id="compare" class="compare">
            <h2>"Comparison"</h2>
            <p>"A: "<strong>{a_name}</strong>" · B: "<strong>{b_name}</strong></p>
            <h3>"Peaks"</h3>
            <table id="compare-peaks"><thead><tr><th>"metric"</th><th>"A"</th><th>"B"</th><th>"B − A"</th></tr></thead>
                <tbody>{peaks}</tbody></table>
            {stages}
        </section>
    }
}

/// CSV and Chrome-trace downloads, generated in the page by the same code as `collector export`.
#[component]
pub fn Exports(name: String, trace: Arc<Trace>) -> impl IntoView {
    let stem = name.trim_end_matches(".oomt").to_owned();
    let (t1, s1) = (trace.clone(), stem.clone());
    let csv = move |_| browser::download(&format!("{s1}.csv"), "text/csv", &export::to_csv(&t1));
    let chrome = move |_| {
        browser::download(
            &format!("{stem}.json"),
            "application/json",
            &export::to_chrome_json(&trace),
        );
    };
    view! {
        <section id="exports">
            <h2>"Export"</h2>
            <button id="export-csv" on:click=csv>"CSV"</button>" "
            <button id="export-chrome" on:click=chrome>"Chrome trace (JSON)"</button>
            <span class="hint">" generated here in the browser: chrome://tracing or ui.perfetto.dev open the JSON"</span>
        </section>
    }
}

//! Memory before, during and after every eval (the terminal lists the first five; the page lists
//! them all), the eval that kept the most highlighted: in two real cases this is the section that
//! explained the OOM.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_analysis::facts::Spotlight;
use oomscope_words::summary::{titles, transition_lines};

/// One line per eval; nothing when the run had none.
#[component]
pub fn Evals(analysis: Arc<Analysis>, spotlight: Spotlight) -> impl IntoView {
    let lines = transition_lines(&analysis);
    if lines.is_empty() {
        return ().into_any();
    }
    let items = analysis
        .phase_transitions
        .iter()
        .zip(lines)
        .map(|(t, text)| {
            let kept = spotlight.retaining_eval_step == Some(t.entry_step);
            view! {
                <li class:evidence=kept data-step=t.entry_step.to_string()
                    data-retained-bytes=t.retained_bytes.map(|b| b.to_string()).unwrap_or_default()>
                    {text}
                    {kept.then(|| view! { " " <span class="badge warning">"kept the most"</span> })}
                </li>
            }
        })
        .collect_view();
    view! { <section id="evals"><h2>{titles::EVAL}</h2><ul class="lines">{items}</ul></section> }
        .into_any()
}

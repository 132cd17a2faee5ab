//! Findings and what to change, most severe first.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_trace::analysis::Analysis;

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

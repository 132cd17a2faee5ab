//! Findings and what to change, most severe first.

use leptos::prelude::*;
use oomscope_analysis::recommend::Finding;

/// Findings and what to change, most severe first (the analysis sorts them): a trace's
/// (`#findings`), a rank's (`#rank-findings`) or a job's (`#job-findings`). `empty` says what
/// none means.
#[component]
pub fn Findings(findings: Vec<Finding>, id: &'static str, empty: &'static str) -> impl IntoView {
    if findings.is_empty() {
        return view! {
            <section id=id><h2>"Findings"</h2>
            <p class="empty">{empty}</p></section>
        }
        .into_any();
    }
    let items = findings
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
    view! { <section id=id><h2>"Findings and recommendations"</h2>{items}</section> }.into_any()
}

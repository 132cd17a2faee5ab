//! Findings and what to change, most severe first.

use leptos::prelude::*;
use oomscope_words::findings::{Worded, evidence_text};

/// Findings and what to change, most severe first (the analysis sorts them): a trace's
/// (`#findings`), a rank's (`#rank-findings`) or a job's (`#job-findings`), in the words crate's
/// words. `empty` says what none means.
#[component]
pub fn Findings(findings: Vec<Worded>, id: &'static str, empty: &'static str) -> impl IntoView {
    if findings.is_empty() {
        return view! {
            <section id=id><h2>"Findings"</h2>
            <p class="empty">{empty}</p></section>
        }
        .into_any();
    }
    let items = findings
        .into_iter()
        .map(|f| {
            let evidence = f
                .evidence
                .iter()
                .map(|e| {
                    view! {
                        <tr data-label=e.key.label() data-value=e.value.to_string()>
                            <td>{e.key.label()}</td>
                            <td class="num">{evidence_text(e)}</td>
                        </tr>
                    }
                })
                .collect_view();
            view! {
                <article class=format!("finding {}", f.severity.label()) data-id=f.kind.id()>
                    <h3><span class="severity">{f.severity.label()}</span>" "{f.title}</h3>
                    <p>{f.explanation}</p>
                    <p class="change"><strong>"Change: "</strong>{f.change}</p>
                    <details><summary>"evidence"</summary><table class="evidence">{evidence}</table></details>
                </article>
            }
        })
        .collect_view();
    view! { <section id=id><h2>"Findings and recommendations"</h2>{items}</section> }.into_any()
}

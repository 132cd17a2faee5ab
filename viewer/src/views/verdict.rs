//! The verdict strip the report opens with: one line per problem found (its size and the change
//! to make first), or what "no problem found" rests on. The words are
//! `oomscope_words::verdict`'s.
//!
//! A report carries the verdict its collector worked out from the same bytes with the same code,
//! so the strip says it the moment the page starts (`data-from="report"`); the page's own
//! analysis replaces it a moment later with the same words.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_format::Trace;
use oomscope_words::verdict::verdict;

use crate::browser;

/// The verdict of one trace: the page's own once its analysis is there, else the one its report
/// carries (`early`), else "analysing…".
#[component]
pub fn Verdict(
    trace: Arc<Trace>,
    analysis: Option<Arc<Analysis>>,
    early: Option<oomscope_words::verdict::Verdict>,
) -> impl IntoView {
    let (v, from) = match (analysis, early) {
        (Some(analysis), _) => (verdict(&trace, &analysis), "page"),
        (None, Some(early)) => (early, "report"),
        (None, None) => {
            return view! {
                <section id="verdict" class="verdict pending"><p class="hint">"analysing…"</p></section>
            }
            .into_any();
        }
    };
    browser::record_first_time("data-verdict-ms");
    let more = (v.more > 0).then(|| {
        view! {
            <p class="hint" id="verdict-more">
                <a href="#findings">{format!("{} more finding(s) below", v.more)}</a>
            </p>
        }
    });
    let body = match v.clean {
        Some(clean) => view! { <p id="verdict-clean" class="verdict-clean">{clean}</p> }.into_any(),
        None => view! {
            <ol class="verdict-lines">
                {v.lines.into_iter().map(|l| view! {
                    <li class=format!("verdict-line {}", l.severity.label()) data-id=l.kind.id()>
                        <span class="severity">{l.severity.label()}</span>" "
                        <strong>{l.said()}</strong>". "
                        <span class="change">{l.change}</span>
                    </li>
                }).collect_view()}
            </ol>
        }
        .into_any(),
    };
    view! {
        <section id="verdict" class="verdict" data-short=v.short data-from=from>
            {body}
            {more}
        </section>
    }
    .into_any()
}

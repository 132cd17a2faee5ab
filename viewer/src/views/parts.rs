//! What several views share: how a missing value shows, and a titled list of lines.

use leptos::prelude::*;

pub(crate) fn opt_text(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".to_owned())
}

pub(crate) fn opt_num<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

/// A titled list of lines `oomscope_words::summary` words for the terminal too;
/// nothing when empty.
#[component]
pub(crate) fn Lines(id: &'static str, title: &'static str, lines: Vec<String>) -> impl IntoView {
    if lines.is_empty() {
        return ().into_any();
    }
    view! {
        <section id=id>
            <h2>{title}</h2>
            <ul class="lines">{lines.into_iter().map(|l| view! { <li>{l}</li> }).collect_view()}</ul>
        </section>
    }
    .into_any()
}

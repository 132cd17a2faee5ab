//! A lone run followed live (the page `collector serve` serves), as the terminal shows it:
//! where it is, each memory against its limit, the alerts at 90% of one, the leak and when memory
//! is full. The words are `oomscope_words::live`'s, the same `collector watch` prints, from the
//! same live feed's state.

use leptos::prelude::*;
use oomscope_analysis::live::LiveState;
use oomscope_words::live::{leak, memory, place, warning};

/// The live state of the run the page follows (nothing before its first chunk, or for a job).
#[component]
pub fn LivePanel(state: RwSignal<Option<LiveState>>) -> impl IntoView {
    move || {
        state.get().map(|s| {
            let memories = s
                .memory
                .iter()
                .map(|m| view! { <li class="live-memory">{memory(m)}</li> })
                .collect_view();
            let alerts = s
                .alerts
                .iter()
                .map(|a| view! { <p class="live-alert">{warning(a)}</p> })
                .collect_view();
            view! {
                <section id="live-panel" data-alerts=s.alerts.len().to_string()>
                    <p class="live-place">{place(&s).unwrap_or_default()}</p>
                    <ul>{memories}</ul>
                    {alerts}
                    {s.leak.as_ref().map(|l| view! { <p class="live-leak">{leak(l)}</p> })}
                </section>
            }
        })
    }
}

//! Every out-of-memory error in the terminal's words (when, which step and stage, requested,
//! free, allocated, reserved), with the line the program printed: the allocator's own message
//! often names the request and the reserved-but-unallocated memory that explain it.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_words::summary::{error_line, oom_line, titles};

use super::snapshot::SnapshotReport;
use crate::load::NamedSnapshot;

/// The memory snapshots a report attaches to its trace (by name), given as context: a slot each,
/// filled at once for a small one, once read in the background for a large one (each slot is
/// drawn on its own, so one arriving leaves the others as the user left them).
#[derive(Debug, Clone, Default)]
pub struct AttachedSnapshots(pub Vec<RwSignal<Option<NamedSnapshot>>>);

/// One entry per OOM, the full message under a disclosure; nothing without an OOM.
#[component]
pub fn Ooms(analysis: Arc<Analysis>) -> impl IntoView {
    if analysis.ooms.is_empty() {
        return ().into_any();
    }
    let items = analysis
        .ooms
        .iter()
        .map(|o| {
            let first =
                error_line(o).map(|l| view! { <pre class="error-line">{l.to_owned()}</pre> });
            let more = (o.event.message.lines().count() > 1).then(|| {
                view! {
                    <details class="error-message"><summary>"the whole message"</summary>
                        <pre>{o.event.message.to_string()}</pre></details>
                }
            });
            view! { <li class="oom-line">{oom_line(o)}{first}{more}</li> }
        })
        .collect_view();
    // The memory snapshots `collector run --oom-snapshot` saved at the OOM, when the report
    // carries them: every block alive at that moment, with its stack.
    let attached = use_context::<AttachedSnapshots>()
        .unwrap_or_default()
        .0
        .into_iter()
        .map(|slot| {
            move || {
                slot.get().map(|(name, snap)| {
                    view! {
                        <details class="oom-snapshot" open data-name=name.clone()>
                            <summary>{format!(
                                "The memory snapshot saved at the OOM ({name}): every block alive then, with its stack"
                            )}</summary>
                            <SnapshotReport name=name.clone() snap=snap attached=true/>
                        </details>
                    }
                })
            }
        })
        .collect_view();
    view! {
        <section id="ooms"><h2>{titles::OOMS}</h2><ul class="lines">{items}</ul>{attached}</section>
    }
    .into_any()
}

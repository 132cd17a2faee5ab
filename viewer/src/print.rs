//! Whether the page is being printed: paged views then show everything. A context the page
//! ([`crate::app::App`]) provides and any view reads.

use leptos::prelude::*;

/// Whether the page is being printed: paged views then show everything (provided by [`crate::app::App`]).
#[derive(Debug, Clone, Copy)]
pub struct Printing(pub RwSignal<bool>);

impl Printing {
    /// True while printing (false outside an [`crate::app::App`]).
    pub fn now() -> bool {
        use_context::<Printing>().is_some_and(|p| p.0.get())
    }
}

//! The allocator's state as the terminal prints it: reserved memory never used at once, retries,
//! split blocks, memory outside the allocator.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_words::summary::{allocator_lines, titles};

use super::parts::Lines;

/// The allocator section; nothing without allocator statistics.
#[component]
pub fn Allocator(analysis: Arc<Analysis>) -> impl IntoView {
    view! { <Lines id="allocator" title=titles::ALLOCATOR lines=allocator_lines(&analysis)/> }
}

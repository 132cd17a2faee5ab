//! Growth and leaks, as the terminal prints them: the largest rise between two marks, growth
//! over time for runs without step marks, every leak fit (one line per leaking stage, with
//! where it fills memory), not only the one the verdict names, and the live tensors that grew
//! with what holds them.

use std::sync::Arc;

use leptos::prelude::*;
use oomscope_analysis::Analysis;
use oomscope_words::summary::{
    held_line, largest_growth_line, leak_lines, time_trend_lines, titles,
};

use super::parts::Lines;

/// The growth sections; nothing when the analysis found no growth at all.
#[component]
pub fn Growth(analysis: Arc<Analysis>) -> impl IntoView {
    let largest: Vec<String> = analysis
        .largest_growth
        .iter()
        .map(|g| largest_growth_line(g, analysis.input_peak.as_ref()))
        .collect();
    let held: Vec<String> = analysis.held.iter().map(held_line).collect();
    view! {
        <Lines id="leak-fits" title=titles::LEAKS lines=leak_lines(&analysis)/>
        <Lines id="held" title=titles::HELD lines=held/>
        <Lines id="time-trends" title=titles::TIME_TRENDS lines=time_trend_lines(&analysis)/>
        <Lines id="largest-rise" title=titles::LARGEST_GROWTH lines=largest/>
    }
}

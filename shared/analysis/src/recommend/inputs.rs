//! `input-peak`: the run's peak step had a much larger input than a median step, and memory
//! follows the input (see `crate::inputs`). The cure is to bound the input, not the step count:
//! cap or bucket the lengths, which is why this is told apart from a leak and from activations
//! in general.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::inputs::InputPeak;
use crate::leaks::LimitBasis;
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_percent};

/// The share of the limit the advice keeps the longest input under.
pub const INPUT_CAP_SHARE: f64 = 0.9;

/// A cap this many times the longest input seen is no advice: the inputs are far from it.
const ROOMY_FACTOR: u64 = 4;

/// A peak at or above this share of the limit makes the finding a warning.
const PRESSED_SHARE: f64 = 0.5;

/// The rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct InputPeakRule;

impl Diagnose for InputPeakRule {
    const KIND: FindingKind = FindingKind::InputPeak;
    type Diagnosis<'a> = &'a InputPeak;

    /// Detection: [`crate::inputs::input_peak`] found one.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        ctx.analysis.input_peak.as_ref()
    }

    /// Wording.
    fn explain(&self, p: &Self::Diagnosis<'_>) -> Finding {
        let rise = p.peak_bytes.saturating_sub(p.median_peak_bytes);
        let longer = if p.long_steps.len() > 1 {
            format!(
                "{} of the {} training steps had an input twice a median step's or more",
                format_count(p.long_steps.len() as u64),
                format_count(p.steps as u64)
            )
        } else {
            format!(
                "it was the only one of the {} training steps with an input twice a median \
                 step's or more",
                format_count(p.steps as u64)
            )
        };
        let explanation = format!(
            "step {}'s input ({}, {} elements) was {:.1}× a median step's ({}); its {} peaked at \
             {} at {}, {} above a median step's peak ({}). Over the training steps the peak rises \
             ~{} per input element, so the longest inputs decide the memory the run needs; {}. \
             Memory follows the input here, not the step count: this is not a leak",
            format_count(p.step),
            p.shape,
            format_count(p.elements),
            p.ratio(),
            p.median_shape,
            p.metric,
            format_bytes(p.peak_bytes),
            p.stage,
            format_bytes(rise),
            format_bytes(p.median_peak_bytes),
            format_bytes_f64(p.bytes_per_element),
            longer,
        );
        let memory = |limit: u64, basis: LimitBasis| {
            format!(
                "{} {}",
                format_bytes(limit),
                match basis {
                    LimitBasis::DeviceTotal => "on the GPU",
                    LimitBasis::HostMemory => "of host memory",
                }
            )
        };
        let how = "cap the sequence length (truncate or split long samples), and batch samples \
                   of similar length together (bucketing) to keep the padding out of every batch";
        let pressed = p
            .limit
            .is_some_and(|(limit, _)| p.peak_bytes as f64 >= PRESSED_SHARE * limit as f64);
        let change = match (p.elements_within(INPUT_CAP_SHARE), p.limit) {
            // A cap near the inputs the run sees: that is the number to set.
            (Some(n), Some((limit, basis))) if n < ROOMY_FACTOR * p.elements => format!(
                "bound the input, not the batch count: inputs up to ~{} elements ({:.1}× a \
                 median step's) keep the peak under {} of the {}; {how}",
                format_count(n),
                n as f64 / p.median_elements.max(1) as f64,
                format_percent(INPUT_CAP_SHARE),
                memory(limit, basis),
            ),
            (_, Some((limit, basis))) if !pressed => format!(
                "nothing presses yet (the peak is {} of the {}); if longer inputs come, bound \
                 the input, not the batch count: {how}",
                format_percent(p.peak_bytes as f64 / limit.max(1) as f64),
                memory(limit, basis),
            ),
            _ => format!("bound the input, not the batch count: {how}"),
        };
        finding(
            self,
            if pressed {
                Severity::Warning
            } else {
                Severity::Info
            },
            format!(
                "Step {} peaked with {:.1}× the input of a median step",
                format_count(p.step),
                p.ratio()
            ),
            explanation,
            change,
            vec![
                Evidence::count("step", p.step as f64),
                Evidence::count("input_elements", p.elements as f64),
                Evidence::count("median_input_elements", p.median_elements as f64),
                Evidence::bytes("peak_bytes", p.peak_bytes as f64),
                Evidence::bytes("median_peak_bytes", p.median_peak_bytes as f64),
                Evidence::bytes("bytes_per_input_element", p.bytes_per_element),
            ],
        )
    }
}

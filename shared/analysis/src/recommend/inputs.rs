//! `input-peak`: the run's peak step had a much larger input than a median step, and memory
//! follows the input (see `crate::inputs`). The cure is to bound the input, not the step count:
//! cap or bucket the lengths, which is why this is told apart from a leak and from activations
//! in general.

use super::rule::{Diagnose, RuleContext, warning_if};
use crate::finding::{Detail, Evidence, EvidenceKey as K, FindingKind, InputDriven, Severity};

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
    type Diagnosis = InputDriven;

    /// Detection: [`crate::inputs::input_peak`] found one; whether it presses on the limit, and
    /// the input to cap at when that is near the inputs the run sees.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<InputDriven> {
        let p = ctx.analysis.input_peak.as_ref()?;
        let pressed = p
            .limit
            .is_some_and(|(limit, _)| p.peak_bytes as f64 >= PRESSED_SHARE * limit as f64);
        let cap_elements = p
            .elements_within(INPUT_CAP_SHARE)
            .filter(|n| *n < ROOMY_FACTOR * p.elements && p.limit.is_some());
        Some(InputDriven {
            peak: p.clone(),
            pressed,
            cap_elements,
            cap_share: INPUT_CAP_SHARE,
        })
    }

    fn severity(&self, d: &InputDriven) -> Severity {
        warning_if(d.pressed)
    }

    fn evidence(&self, d: &InputDriven) -> Vec<Evidence> {
        let p = &d.peak;
        vec![
            Evidence::count(K::Step, p.step as f64),
            Evidence::count(K::InputElements, p.elements as f64),
            Evidence::count(K::MedianInputElements, p.median_elements as f64),
            Evidence::bytes(K::PeakBytes, p.peak_bytes as f64),
            Evidence::bytes(K::MedianPeakBytes, p.median_peak_bytes as f64),
            Evidence::bytes(K::BytesPerInputElement, p.bytes_per_element),
        ]
    }

    fn detail(d: InputDriven) -> Detail {
        Detail::InputPeak(d)
    }
}

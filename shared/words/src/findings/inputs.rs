//! The words of `input-peak`: a peak step whose input was much larger than a median step's.

use super::finding_text::FindingText;
use oomscope_analysis::facts::LimitBasis;
use oomscope_analysis::finding::InputDriven;
use oomscope_analysis::symptom::Unit;
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_percent};

/// `input-peak`.
pub(super) fn input_peak(d: &InputDriven) -> FindingText {
    let p = &d.peak;
    let rise = p.peak_bytes.saturating_sub(p.median_peak_bytes);
    // Training steps, or the forwards of a program that never trains (peaks read inside them).
    let (unit, units, at, longest) = match p.unit {
        Unit::Forward => ("forward", "forwards", "during it".to_owned(), "largest"),
        _ => (
            "step",
            "training steps",
            format!("at {}", p.stage),
            "longest",
        ),
    };
    // Past `MAX_POINTS` forwards a point is a block of them: counted as blocks, named by the
    // forwards they span.
    let (of, at_step) = if p.per_point > 1 {
        (
            format!("blocks of {} {units}", p.per_point),
            format!(
                "{units} {}–{}",
                format_count(p.step),
                format_count(p.step + p.per_point - 1)
            ),
        )
    } else {
        (units.to_owned(), format!("{unit} {}", format_count(p.step)))
    };
    let (whose, at) = if p.per_point > 1 {
        (
            format!("the largest input of {at_step}"),
            "during them".to_owned(),
        )
    } else {
        (format!("{at_step}'s input"), at)
    };
    let longer = if p.long_steps.len() > 1 {
        format!(
            "{} of the {} {of} had an input twice a median {unit}'s or more",
            format_count(p.long_steps.len() as u64),
            format_count(p.steps as u64)
        )
    } else {
        format!(
            "it was the only one of the {} {of} with an input twice a median {unit}'s or more",
            format_count(p.steps as u64)
        )
    };
    let explanation = format!(
        "{whose} ({}, {} elements) was {:.1}× a median {unit}'s ({}); its {} peaked at \
         {} {at}, {} above a median {unit}'s peak ({}). Over the {units} the peak rises ~{} per \
         input element, so the {longest} inputs decide the memory the run needs; {}. Memory \
         follows the input here, not the {unit} count: this is not a leak",
        p.shape,
        format_count(p.elements),
        p.ratio(),
        p.median_shape,
        p.metric,
        format_bytes(p.peak_bytes),
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
    let how = match p.unit {
        Unit::Forward => {
            "cap the input's size (split long sequences, tile or downscale the largest images) \
             before the forward, and size the memory for the largest input you accept"
        }
        _ => {
            "cap the sequence length (truncate or split long samples), and batch samples of \
             similar length together (bucketing) to keep the padding out of every batch"
        }
    };
    let changes = match (d.cap_elements, p.limit) {
        // A cap near the inputs the run sees: that is the number to set.
        (Some(n), Some((limit, basis))) => vec![
            format!(
                "bound the input, not the batch count: inputs up to ~{} elements ({:.1}× a median \
                 {unit}'s) keep the peak under {} of the {}",
                format_count(n),
                n as f64 / p.median_elements.max(1) as f64,
                format_percent(d.cap_share),
                memory(limit, basis),
            ),
            how.to_owned(),
        ],
        (_, Some((limit, basis))) if !d.pressed => vec![
            format!(
                "nothing presses yet (the peak is {} of the {})",
                format_percent(p.peak_bytes as f64 / limit.max(1) as f64),
                memory(limit, basis),
            ),
            format!("if longer inputs come, bound the input, not the batch count: {how}"),
        ],
        _ => vec![format!("bound the input, not the batch count: {how}")],
    };
    FindingText::new(
        format!(
            "{} peaked with {:.1}× the input of a median {unit}",
            capitalized(&at_step),
            p.ratio()
        ),
        explanation,
        changes,
    )
}

/// `text` with its first letter a capital.
fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map_or_else(String::new, |c| c.to_uppercase().chain(chars).collect())
}

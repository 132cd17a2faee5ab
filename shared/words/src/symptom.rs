//! What each memory did, in words, before any finding: its floor along the run's unit (the
//! lowest reading of each step, forward or second), whether and how it rose, and what the rise is
//! made of by kind of memory, the rest said to be unexplained. The summary's "What memory did".

use oomscope_analysis::Analysis;
use oomscope_analysis::symptom::{PartKind, Shape, Symptom};
use oomscope_format::units::{format_bytes, format_bytes_f64, format_count, format_signed_bytes};

/// A kind of memory in words.
fn kind(k: PartKind) -> &'static str {
    match k {
        PartKind::Parameters => "parameters",
        PartKind::Gradients => "gradients",
        PartKind::OptimizerState => "optimizer state",
        PartKind::FilePages => "memory-mapped file pages",
        PartKind::SharedMemory => "/dev/shm",
        PartKind::ChildProcesses => "the other processes' private memory",
    }
}

/// One memory's shape: "rose 444 MiB (716 MiB → 1.13 GiB) from step 36 to step 179, steadily:
/// +2.98 MiB/step".
pub fn shape(s: &Symptom) -> String {
    let unit = s.unit.word();
    let at = |p: u64| format!("{unit} {}", format_count(p));
    let levels = format!(
        "{} → {}",
        format_bytes(s.levels.start_bytes),
        format_bytes(s.levels.end_bytes)
    );
    let rose = format_bytes(s.levels.rise_bytes.max(0).unsigned_abs());
    match &s.shape {
        Shape::None => format!(
            "flat: its floor moved {} between {} and {}, within its noise",
            format_signed_bytes(s.levels.rise_bytes),
            at(s.first_at),
            at(s.last_at)
        ),
        Shape::TransientPeak {
            peaks,
            largest_bytes,
            at: where_,
        } => format!(
            "a flat floor ({}); {} {unit}(s) peaked far above it, the highest {} above at {}",
            format_bytes(s.levels.end_bytes),
            format_count(*peaks as u64),
            format_bytes(*largest_bytes),
            at(*where_)
        ),
        Shape::LinearGrowth {
            from,
            rate_bytes_per_unit,
            stairs_every,
        } => format!(
            "rose {rose} ({levels}) from {} to {}, {}: +{}/{unit}",
            at(*from),
            at(s.last_at),
            match stairs_every {
                Some(every) => format!("in stairs every {} {unit}s", format_count(*every)),
                None => "steadily".to_owned(),
            },
            format_bytes_f64(*rate_bytes_per_unit)
        ),
        Shape::Staircase { stairs, .. } => {
            let shown: Vec<String> = stairs
                .iter()
                .take(6)
                .map(|st| format!("+{} at {}", format_bytes(st.bytes.max(0) as u64), at(st.at)))
                .collect();
            format!(
                "rose {rose} ({levels}) in {} stairs: {}{}",
                stairs.len(),
                shown.join(", "),
                if stairs.len() > 6 { ", …" } else { "" }
            )
        }
        Shape::Bounded {
            bound_bytes,
            reached_at,
            rate_bytes_per_unit,
        } => format!(
            "rose {rose} ({levels}) at +{}/{unit}, then stayed at about {} from {}: bounded",
            format_bytes_f64(*rate_bytes_per_unit),
            format_bytes(*bound_bytes),
            at(*reached_at)
        ),
        Shape::FollowsInput {
            bytes_per_element,
            correlation,
        } => format!(
            "followed the size of the input: {} per input element (correlation {:.2}); its floor \
             went {levels}",
            format_bytes_f64(*bytes_per_element),
            correlation
        ),
    }
}

/// What a rise is made of: "of it: optimizer state +256 MiB, memory-mapped file pages +452 KiB;
/// unexplained 187 MiB", or `None` when the floor did not rise beyond its noise.
pub fn parts(s: &Symptom) -> Option<String> {
    if s.levels.rise_bytes < s.levels.need_bytes as i64 {
        return None;
    }
    let mut said: Vec<String> = s
        .parts
        .iter()
        .filter(|p| p.bytes.unsigned_abs() >= s.levels.need_bytes / 16)
        .map(|p| format!("{} {}", kind(p.kind), format_signed_bytes(p.bytes)))
        .collect();
    let over = s.unexplained_bytes.unsigned_abs();
    let rest = if s.unexplained_bytes < 0 && over >= s.levels.need_bytes / 16 {
        // The parts are read where the hooks count them, the floor at each repeat's lowest
        // reading: more than the rise is no closure, and is said so.
        format!(
            "together {} more than the floor rose: the parts are read when the hooks count them, \
             the floor at each {}'s lowest reading, which need not hold them all{}",
            format_bytes(over),
            s.unit.word(),
            if s.parts.iter().any(|p| p.kind == PartKind::Gradients) {
                " (gradients that zero_grad frees)"
            } else {
                ""
            }
        )
    } else if s.unexplained_bytes <= 0 {
        "nothing left unexplained".to_owned()
    } else if said.is_empty() {
        format!(
            "no measured kind of memory accounts for it ({} unexplained: tensors, Python objects \
             or native memory the findings below may name)",
            format_bytes(s.unexplained_bytes.unsigned_abs())
        )
    } else {
        format!(
            "{} unexplained",
            format_bytes(s.unexplained_bytes.unsigned_abs())
        )
    };
    if said.is_empty() {
        return Some(format!("of it: {rest}"));
    }
    said.push(rest);
    Some(format!("of it: {}", said.join(", ")))
}

/// The summary's "What memory did": each memory's shape and what its rise is made of.
pub fn render(out: &mut String, analysis: &Analysis) {
    if analysis.symptoms.is_empty() {
        return;
    }
    let unit = analysis.symptoms[0].unit.word();
    crate::wrap::section(
        out,
        &format!(
            "What memory did (its floor, the lowest reading of each {unit}, from the readings alone)"
        ),
    );
    for s in &analysis.symptoms {
        crate::wrap::wrap(out, &format!("{}: {}", s.metric, shape(s)), 2, 4);
        if let Some(p) = parts(s) {
            crate::wrap::wrap(out, &p, 4, 6);
        }
    }
}

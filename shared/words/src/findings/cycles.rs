//! The words of `reference-cycles`: memory only the garbage collector frees.

use super::finding_text::FindingText;
use oomscope_analysis::finding::CycleMemory;
use oomscope_format::units::{format_bytes, format_count, format_duration_us};

use crate::phrases::holder;

/// `reference-cycles`.
pub(super) fn reference_cycles(d: &CycleMemory) -> FindingText {
    let largest = d.largest();
    let mut explanation = match largest {
        Some(g) => format!(
            "up to {} was held by reference cycles until the garbage collector ran: {} \
             collection(s) freed {} in all (the largest paused the program {})",
            format_bytes(g.freed_bytes),
            format_count(d.collections.len() as u64),
            format_bytes(d.freed_bytes()),
            format_duration_us(g.pause_us)
        ),
        None => "tensors that only reference cycles hold accumulate until the garbage collector \
                 runs, and no collection freed memory while the run was recorded (gc.disable(), \
                 or thresholds that let it run rarely)"
            .to_owned(),
    };
    if let Some(h) = d.held.first() {
        explanation.push_str(&format!(
            "; counted in the program: {} {}[{}] a step ({}/step) kept by {}",
            format_count(h.per_step()),
            h.dtype,
            h.shape,
            format_bytes(h.bytes / h.steps()),
            holder(h)
        ));
    }
    if largest.is_some() {
        explanation.push_str(
            "; memory rises between collections and falls at them: a saw-tooth, not a leak, but \
             its peaks can run out of memory before the next collection",
        );
    }
    FindingText::new(
        match largest {
            Some(g) => format!(
                "Reference cycles hold up to {} until the garbage collector runs",
                format_bytes(g.freed_bytes)
            ),
            None => "Reference cycles hold tensors until the garbage collector runs".to_owned(),
        },
        explanation,
        vec![
            "break the cycle, so that each step's memory is freed the moment the program drops \
             it: an object that refers to itself or to what refers to it (a callback holding \
             self, a closure, a caught exception's traceback) — hold the back-reference through \
             weakref, or del it when done"
                .to_owned(),
            "torch.utils.viz._cycles.warn_tensor_cycles() names the cycles that hold tensors"
                .to_owned(),
            "until then, gc.collect() every few steps bounds the saw-tooth".to_owned(),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::find;
    use oomscope_analysis::finding::FindingKind;
    use oomscope_format::HeldKind;
    use oomscope_format::{GcCollection, HeldTensors};
    use oomscope_testkit::run::Run;

    #[test]
    fn collections_that_free_memory_and_tensors_only_a_cycle_holds_are_named() {
        let mut trace = Run::default().build();
        assert!(find(&trace, FindingKind::ReferenceCycles).is_none());
        trace.gc = (0..3)
            .map(|i| GcCollection {
                t_us: 1_000_000 * (i + 1),
                generation: 2,
                collected: 40,
                freed_bytes: 80 << 20,
                pause_us: 150_000,
            })
            .collect();
        trace.held = vec![HeldTensors {
            from_step: 4,
            to_step: 12,
            device: "cpu".into(),
            dtype: "float32".into(),
            shape: "1024x1024".into(),
            count: 8,
            bytes: 32 << 20,
            kind: HeldKind::Cycle,
            holder: "a `StepRecord` object (attribute `batch`)".into(),
            ..HeldTensors::default()
        }];
        let f = find(&trace, FindingKind::ReferenceCycles).expect("cycles");
        assert_eq!(
            f.title,
            "Reference cycles hold up to 80.0 MiB until the garbage collector runs"
        );
        assert_eq!(
            f.explanation,
            "up to 80.0 MiB was held by reference cycles until the garbage collector ran: 3 \
             collection(s) freed 240 MiB in all (the largest paused the program 150 ms); counted \
             in the program: 1 float32[1024x1024] a step (4.00 MiB/step) kept by a reference \
             cycle through a `StepRecord` object (attribute `batch`); memory rises between \
             collections and falls at them: a saw-tooth, not a leak, but its peaks can run out \
             of memory before the next collection"
        );
        // The cycle's tensors are not a leak.
        assert!(find(&trace, FindingKind::Leak).is_none());
        // One collection alone (what building the model left) is no saw-tooth.
        trace.held.clear();
        trace.gc.truncate(1);
        assert!(find(&trace, FindingKind::ReferenceCycles).is_none());
        // Small collections say nothing.
        for g in &mut trace.gc {
            g.freed_bytes = 4 << 20;
        }
        assert!(find(&trace, FindingKind::ReferenceCycles).is_none());
    }
}

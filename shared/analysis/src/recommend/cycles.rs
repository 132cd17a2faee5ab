//! `reference-cycles`: memory that only Python's garbage collector frees. Objects in a
//! reference cycle are not freed when the program drops them but when a collection runs, so
//! memory rises between collections and falls at them — a saw-tooth that can run out of memory
//! before the next collection, and that is not a leak (the `leak` rule leaves the cycles' tensors
//! out). The evidence: collections after which memory was lower (GC records), and the hooks'
//! counts finding tensors only a cycle holds.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::peaks::breakdown_peak;
use oomscope_format::units::{format_bytes, format_count, format_duration_us};
use oomscope_format::{GcCollection, HeldTensors};

/// A collection freeing at least this much is worth naming.
pub const CYCLES_MIN_FREED_BYTES: u64 = 16 << 20;

/// Collections freeing memory, in the loop, that make a saw-tooth without the hooks' counts.
pub const CYCLES_MIN_COLLECTIONS: usize = 2;

/// Freed at once, at least this share of the peak makes it a warning.
const CYCLES_WARNING_SHARE: f64 = 0.10;

/// The rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceCycles;

/// What [`ReferenceCycles`] detected.
#[derive(Debug, Clone)]
pub struct CycleMemory<'a> {
    /// The collections that freed memory, each at least [`CYCLES_MIN_FREED_BYTES`].
    pub collections: Vec<&'a GcCollection>,
    /// Tensors the hooks found held only by a cycle, one a step or more.
    pub held: Vec<&'a HeldTensors>,
    /// The memory peak the largest collection is a share of.
    pub peak_bytes: Option<u64>,
}

impl Diagnose for ReferenceCycles {
    const KIND: FindingKind = FindingKind::ReferenceCycles;
    type Diagnosis<'a> = CycleMemory<'a>;

    /// Detection: collections in the loop (after its first mark) that each freed at least
    /// [`CYCLES_MIN_FREED_BYTES`], at least [`CYCLES_MIN_COLLECTIONS`] of them (a saw-tooth: one
    /// collection that frees what building the model left is no pattern), or the hooks counted
    /// tensors that only a reference cycle holds, one a step or more.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let loop_start_us = ctx.trace.marks.first().map_or(0, |m| m.t_us);
        let collections: Vec<&GcCollection> = ctx
            .analysis
            .gc
            .iter()
            .filter(|g| g.freed_bytes >= CYCLES_MIN_FREED_BYTES && g.t_us >= loop_start_us)
            .collect();
        let held: Vec<&HeldTensors> = ctx
            .analysis
            .held
            .iter()
            .filter(|h| h.is_cycle() && h.per_step() >= 1)
            .collect();
        if collections.len() < CYCLES_MIN_COLLECTIONS && held.is_empty() {
            return None;
        }
        Some(CycleMemory {
            collections,
            held,
            peak_bytes: breakdown_peak(&ctx.analysis.peaks).map(|p| p.bytes),
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let largest = d.collections.iter().max_by_key(|g| g.freed_bytes);
        let total: u64 = d.collections.iter().map(|g| g.freed_bytes).sum();
        let mut explanation = match largest {
            Some(g) => format!(
                "up to {} was held by reference cycles until the garbage collector ran: {} \
                 collection(s) freed {} in all (the largest paused the program {})",
                format_bytes(g.freed_bytes),
                format_count(d.collections.len() as u64),
                format_bytes(total),
                format_duration_us(g.pause_us)
            ),
            None => "tensors that only reference cycles hold accumulate until the garbage \
                     collector runs, and no collection freed memory while the run was recorded \
                     (gc.disable(), or thresholds that let it run rarely)"
                .to_owned(),
        };
        if let Some(h) = d.held.first() {
            explanation.push_str(&format!(
                "; counted in the program: {} {}[{}] a step ({}/step) kept by {}",
                format_count(h.per_step()),
                h.dtype,
                h.shape,
                format_bytes(h.bytes / h.steps()),
                crate::words::holder(h)
            ));
        }
        if largest.is_some() {
            explanation.push_str(
                "; memory rises between collections and falls at them: a saw-tooth, not a leak, \
                 but its peaks can run out of memory before the next collection",
            );
        }
        let share = match (largest, d.peak_bytes) {
            (Some(g), Some(peak)) => g.freed_bytes as f64 / peak.max(1) as f64,
            _ => 0.0,
        };
        let mut evidence = vec![
            Evidence::count("collections", d.collections.len() as f64),
            Evidence::bytes("freed_bytes", total as f64),
        ];
        evidence
            .extend(largest.map(|g| Evidence::bytes("largest_freed_bytes", g.freed_bytes as f64)));
        finding(
            self,
            if share >= CYCLES_WARNING_SHARE {
                Severity::Warning
            } else {
                Severity::Info
            },
            match largest {
                Some(g) => format!(
                    "Reference cycles hold up to {} until the garbage collector runs",
                    format_bytes(g.freed_bytes)
                ),
                None => "Reference cycles hold tensors until the garbage collector runs".to_owned(),
            },
            explanation,
            "break the cycle, so that each step's memory is freed the moment the program drops \
             it: an object that refers to itself or to what refers to it (a callback holding \
             self, a closure, a caught exception's traceback) — hold the back-reference through \
             weakref, or del it when done; torch.utils.viz._cycles.warn_tensor_cycles() names \
             the cycles that hold tensors; until then, gc.collect() every few steps bounds the \
             saw-tooth"
                .to_owned(),
            evidence,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::find;
    use super::*;
    use oomscope_format::HeldKind;
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

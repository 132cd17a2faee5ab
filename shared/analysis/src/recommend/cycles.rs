//! `reference-cycles`: memory that only Python's garbage collector frees. Objects in a
//! reference cycle are not freed when the program drops them but when a collection runs, so
//! memory rises between collections and falls at them — a saw-tooth that can run out of memory
//! before the next collection, and that is not a leak (the `leak` rule leaves the cycles' tensors
//! out). The evidence: collections after which memory was lower (GC records), and the hooks'
//! counts finding tensors only a cycle holds.

use super::rule::{Diagnose, RuleContext, warning_if};
use crate::finding::{CycleMemory, Detail, Evidence, EvidenceKey as K, FindingKind, Severity};
use crate::peaks::breakdown_peak;

/// A collection freeing at least this much is worth naming.
pub const CYCLES_MIN_FREED_BYTES: u64 = 16 << 20;

/// Collections freeing memory, in the loop, that make a saw-tooth without the hooks' counts.
pub const CYCLES_MIN_COLLECTIONS: usize = 2;

/// Freed at once, at least this share of the peak makes it a warning.
const CYCLES_WARNING_SHARE: f64 = 0.10;

/// The rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReferenceCycles;

impl Diagnose for ReferenceCycles {
    const KIND: FindingKind = FindingKind::ReferenceCycles;
    type Diagnosis = CycleMemory;

    /// Detection: collections in the loop (after its first mark) that each freed at least
    /// [`CYCLES_MIN_FREED_BYTES`], at least [`CYCLES_MIN_COLLECTIONS`] of them (a saw-tooth: one
    /// collection that frees what building the model left is no pattern), or one that freed
    /// most of what the loop's memory rose by ([`super::explained::EXPLAINED_SHARE`] of a symptom's rise:
    /// the rise was garbage in cycles), or the hooks counted tensors that only a reference cycle
    /// holds, one a step or more.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<CycleMemory> {
        let loop_start_us = ctx.trace.marks.first().map_or(0, |m| m.t_us);
        let collections: Vec<_> = ctx
            .analysis
            .gc
            .iter()
            .filter(|g| g.freed_bytes >= CYCLES_MIN_FREED_BYTES && g.t_us >= loop_start_us)
            .cloned()
            .collect();
        let held: Vec<_> = ctx
            .analysis
            .held
            .iter()
            .filter(|h| h.is_cycle() && h.per_step() >= 1)
            .cloned()
            .collect();
        let rise = ctx
            .analysis
            .symptoms
            .iter()
            .map(|s| s.levels.rise_bytes)
            .max()
            .unwrap_or(0);
        // What the evals kept (reachable until the program let it go) is theirs to explain.
        let retained: i64 = ctx
            .analysis
            .phase_transitions
            .iter()
            .filter_map(|t| t.retained_bytes)
            .map(|b| b.max(0))
            .sum();
        let share = super::explained::EXPLAINED_SHARE;
        let freed_the_rise = rise > 0
            && (retained as f64) < share * rise as f64
            && collections
                .iter()
                .any(|g| g.freed_bytes as f64 >= share * rise as f64);
        if collections.len() < CYCLES_MIN_COLLECTIONS && held.is_empty() && !freed_the_rise {
            return None;
        }
        let peak_bytes = breakdown_peak(&ctx.analysis.peaks).map(|p| p.bytes);
        let largest = collections.iter().map(|g| g.freed_bytes).max();
        let share = match (largest, peak_bytes) {
            (Some(freed), Some(peak)) => freed as f64 / peak.max(1) as f64,
            _ => 0.0,
        };
        Some(CycleMemory {
            collections,
            held,
            pressed: share >= CYCLES_WARNING_SHARE,
        })
    }

    fn severity(&self, d: &CycleMemory) -> Severity {
        warning_if(d.pressed)
    }

    fn evidence(&self, d: &CycleMemory) -> Vec<Evidence> {
        let mut evidence = vec![
            Evidence::count(K::Collections, d.collections.len() as f64),
            Evidence::bytes(K::FreedBytes, d.freed_bytes() as f64),
        ];
        evidence.extend(
            d.largest()
                .map(|g| Evidence::bytes(K::LargestFreedBytes, g.freed_bytes as f64)),
        );
        evidence
    }

    fn detail(d: CycleMemory) -> Detail {
        Detail::ReferenceCycles(d)
    }
}

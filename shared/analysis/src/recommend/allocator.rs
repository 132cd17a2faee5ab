//! Rules about the caching allocator: fragmentation and retries, and memory outside it.

use super::rule::{Diagnose, RuleContext, critical_if};
use crate::finding::{
    Detail, Evidence, EvidenceKey as K, FindingKind, FragmentedCache, Outside, Severity,
};
use oomscope_format::OomKind;

/// A peak gap (reserved beyond what tensors needed) of at least this many bytes...
pub const FRAGMENTATION_MIN_GAP_BYTES: u64 = 1 << 30;

/// ...and at least this share of peak reserved is fragmentation worth fixing; smaller gaps are
/// the cache doing its job (rounding, a few spare blocks).
pub const FRAGMENTATION_MIN_GAP_FRACTION: f64 = 0.25;

/// Process GPU memory beyond the allocator's reserved bytes (median over marks) from which it is
/// worth pointing out: a CUDA context alone is 300–600 MiB.
pub const OUTSIDE_ALLOCATOR_MIN_BYTES: i64 = 1 << 30;

/// The gap that counts as fragmentation in an allocator holding `reserved_bytes`: both
/// [`FRAGMENTATION_MIN_GAP_BYTES`] and [`FRAGMENTATION_MIN_GAP_FRACTION`] of it (a trace's rule
/// and a snapshot's use the same).
pub fn fragmentation_min_gap_bytes(reserved_bytes: u64) -> u64 {
    FRAGMENTATION_MIN_GAP_BYTES.max((FRAGMENTATION_MIN_GAP_FRACTION * reserved_bytes as f64) as u64)
}

/// `fragmentation`: the allocator holds much more than tensors need, or had to retry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Fragmentation;

impl Diagnose for Fragmentation {
    const KIND: FindingKind = FindingKind::Fragmentation;
    type Diagnosis = FragmentedCache;

    /// Detection: a large gap at the peak, or any retry; `None` otherwise.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<FragmentedCache> {
        let p = ctx.analysis.pressure.as_ref()?;
        let gap = &p.peak_gap;
        let large_gap = gap.bytes >= fragmentation_min_gap_bytes(gap.reserved_bytes);
        let retries = p.alloc_retries.unwrap_or(0);
        if !large_gap && retries == 0 {
            return None;
        }
        let served_by_cache = ctx.analysis.ooms.iter().find(|o| {
            o.kind == OomKind::Gpu
                && matches!(
                    (o.event.requested_bytes, o.reserved_bytes, o.allocated_bytes),
                    (Some(req), Some(res), Some(alloc)) if req <= res.saturating_sub(alloc)
                )
        });
        Some(FragmentedCache {
            pressure: p.clone(),
            large_gap,
            retries,
            served_by_cache: served_by_cache.cloned(),
        })
    }

    /// Critical when an OOM asked for less than the cache held unused.
    fn severity(&self, d: &FragmentedCache) -> Severity {
        critical_if(d.served_by_cache.is_some())
    }

    fn evidence(&self, d: &FragmentedCache) -> Vec<Evidence> {
        let gap = &d.pressure.peak_gap;
        let mut evidence = vec![
            Evidence::bytes(K::PeakGapBytes, gap.bytes as f64),
            Evidence::share(K::PeakGapFraction, gap.fraction_of_reserved),
            Evidence::bytes(K::PeakReservedBytes, gap.reserved_bytes as f64),
            Evidence::bytes(K::PeakAllocatedBytes, gap.allocated_bytes as f64),
            Evidence::count(K::AllocRetries, d.retries as f64),
        ];
        if let Some(split) = d.pressure.max_inactive_split_bytes {
            evidence.push(Evidence::bytes(K::MaxInactiveSplitBytes, split as f64));
        }
        evidence
    }

    fn detail(d: FragmentedCache) -> Detail {
        Detail::Fragmentation(d)
    }
}

/// `outside-allocator`: the process holds a lot of GPU memory the allocator does not know about.
#[derive(Debug, Clone, Copy, Default)]
pub struct OutsideAllocatorRule;

impl Diagnose for OutsideAllocatorRule {
    const KIND: FindingKind = FindingKind::OutsideAllocator;
    type Diagnosis = Outside;

    /// Detection: the median memory outside the allocator reached
    /// [`OUTSIDE_ALLOCATOR_MIN_BYTES`]; `None` otherwise.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<Outside> {
        let outside = ctx
            .analysis
            .outside_allocator
            .as_ref()
            .filter(|o| o.median_bytes >= OUTSIDE_ALLOCATOR_MIN_BYTES)?;
        let m = &ctx.trace.metadata;
        // A rank is set by launchers only; a world of one is not distributed.
        let distributed = match m.world_size {
            Some(w) => w > 1,
            None => m.rank.is_some(),
        } || ctx.analysis.ranks.is_some();
        Some(Outside {
            outside: outside.clone(),
            distributed,
        })
    }

    /// Information: it is memory to count in the budget, not a fault.
    fn severity(&self, _: &Outside) -> Severity {
        Severity::Info
    }

    fn evidence(&self, d: &Outside) -> Vec<Evidence> {
        let o = &d.outside;
        let mut evidence = vec![
            Evidence::bytes(K::MedianOutsideBytes, o.median_bytes as f64),
            Evidence::bytes(K::MaxOutsideBytes, o.max_bytes as f64),
            Evidence::bytes(K::MedianProcessGpuBytes, o.median_process_bytes as f64),
            Evidence::bytes(K::MedianReservedBytes, o.median_reserved_bytes as f64),
            Evidence::count(K::Marks, o.marks as f64),
        ];
        if let Some(rise) = &o.largest_rise {
            evidence.push(Evidence::bytes(K::LargestRiseBytes, rise.bytes as f64));
            evidence.push(Evidence::count(K::LargestRiseStep, rise.to_step as f64));
        }
        evidence
    }

    fn detail(d: Outside) -> Detail {
        Detail::OutsideAllocator(d)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::with_context;
    use super::*;
    use oomscope_format::units::GIB;
    use oomscope_testkit::run::Run;

    #[test]
    fn large_gap_at_the_peak_is_fragmentation() {
        let trace = Run {
            fragmentation_bytes: 10 * GIB,
            ..Run::default()
        }
        .build();
        let (gap, large, retries) = with_context(&trace, |ctx| {
            let d = Fragmentation.detect(ctx).unwrap();
            (d.pressure.peak_gap.bytes, d.large_gap, d.retries)
        });
        assert_eq!((gap, large, retries), (10 * GIB, true, 0));
    }
}

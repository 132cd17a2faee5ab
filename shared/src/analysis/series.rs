//! Min/max decimation of a counter for charts.
//!
//! An hour at 1 kHz is 3.6 million points per counter; a chart is a thousand pixels wide. The
//! viewer redraws on every zoom and pan, so it asks for one [`Bucket`] per pixel column and draws
//! a vertical bar from `min` to `max`: spikes survive (a plain average or stride would hide the
//! very peak that caused an OOM) and the work is one binary search plus one pass over the
//! visible points, with no allocation per point and one division per bucket, not per point.

use serde::Serialize;

use crate::model::{CounterId, MISSING, Samples};

/// The points of one time slice, reduced to what a chart needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// First microsecond the bucket covers.
    pub t_start_us: u64,
    /// Last microsecond the bucket covers (inclusive).
    pub t_end_us: u64,
    /// Smallest value in the slice.
    pub min: u64,
    /// Largest value in the slice.
    pub max: u64,
    /// Value of the slice's last point (where a line chart continues from).
    pub last: u64,
}

/// Splits `[t0_us, t1_us]` (inclusive) into `buckets` equal slices and reduces the counter's
/// points in each to min, max and last. Slices without a point are omitted; missing values are
/// skipped. Returns nothing for an empty range, zero buckets or an unknown counter.
pub fn decimate(
    samples: &Samples,
    counter: CounterId,
    t0_us: u64,
    t1_us: u64,
    buckets: usize,
) -> Vec<Bucket> {
    let Some(column) = samples.column(counter) else {
        return Vec::new();
    };
    if buckets == 0 || t1_us < t0_us {
        return Vec::new();
    }
    let times = samples.times_us();
    let start = times.partition_point(|t| *t < t0_us);
    // A column is as long as the times; `min` keeps a malformed shorter one from panicking.
    let end = times.partition_point(|t| *t <= t1_us).min(column.len());
    if start >= end {
        return Vec::new();
    }

    let slicer = Slicer::new(t0_us, t1_us, buckets);
    let mut out = Vec::with_capacity(buckets.min(end - start));
    let mut current: Option<Bucket> = None;
    // Points at or after this time belong to a later bucket than `current`.
    let mut next_start_us = 0u64;
    let mut next_is_open = false;

    for (&t, &v) in times[start..end].iter().zip(&column[start..end]) {
        if v == MISSING {
            continue;
        }
        match &mut current {
            Some(b) if next_is_open || t < next_start_us => {
                b.min = b.min.min(v);
                b.max = b.max.max(v);
                b.last = v;
            }
            _ => {
                out.extend(current.take());
                let index = slicer.index_of(t);
                let (t_start_us, t_end_us) = slicer.bounds(index);
                next_is_open = t_end_us == t1_us;
                next_start_us = t_end_us.wrapping_add(1);
                current = Some(Bucket {
                    t_start_us,
                    t_end_us,
                    min: v,
                    max: v,
                    last: v,
                });
            }
        }
    }
    out.extend(current);
    out
}

/// Equal-width slices of an inclusive time range, in integer arithmetic: slice `i` starts at
/// `t0 + floor(i × span / n)` where `span = t1 − t0 + 1`.
struct Slicer {
    t0_us: u64,
    span_us: u128,
    buckets: u128,
}

impl Slicer {
    fn new(t0_us: u64, t1_us: u64, buckets: usize) -> Slicer {
        let span_us = u128::from(t1_us - t0_us) + 1;
        // More buckets than microseconds would make empty slices: cap at one per microsecond.
        let buckets = (buckets as u128).min(span_us);
        Slicer {
            t0_us,
            span_us,
            buckets,
        }
    }

    /// The slice holding `t_us` (which must lie in the range).
    fn index_of(&self, t_us: u64) -> u128 {
        (u128::from(t_us - self.t0_us) * self.buckets / self.span_us).min(self.buckets - 1)
    }

    /// Offset of the first microsecond of slice `index` from `t0`.
    fn start_offset(&self, index: u128) -> u128 {
        // Ceiling, so that `index_of` of the start is `index` itself.
        (index * self.span_us).div_ceil(self.buckets)
    }

    /// First and last (inclusive) microsecond of slice `index`.
    fn bounds(&self, index: u128) -> (u64, u64) {
        let start = self.start_offset(index);
        let end = self.start_offset(index + 1) - 1;
        // Both offsets are below `span_us`, so they fit in u64 after adding t0.
        (self.t0_us + start as u64, self.t0_us + end as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CounterKind, Trace};
    use proptest::prelude::*;

    fn samples(points: &[(u64, Option<u64>)]) -> (Samples, CounterId) {
        let mut trace = Trace::default();
        let id = trace.declare_counter(CounterKind::GpuUsed, Some(0));
        let other = trace.declare_counter(CounterKind::HostRss, None);
        for (t, v) in points {
            match v {
                Some(v) => trace.samples.push_row(*t, &[(id, *v)]),
                None => trace.samples.push_row(*t, &[(other, 1)]),
            }
        }
        (trace.samples, id)
    }

    #[test]
    fn buckets_cover_the_range_and_keep_spikes() {
        let points: Vec<(u64, Option<u64>)> = (0..100).map(|t| (t, Some(10))).collect();
        let mut points = points;
        points[37].1 = Some(1_000);
        points[38].1 = None;
        let (samples, id) = samples(&points);
        let buckets = decimate(&samples, id, 0, 99, 10);
        assert_eq!(buckets.len(), 10);
        assert_eq!(buckets[0].t_start_us, 0);
        assert_eq!(buckets[0].t_end_us, 9);
        assert_eq!(buckets[9].t_end_us, 99);
        assert_eq!(buckets[3].max, 1_000);
        assert_eq!(buckets[3].min, 10);
        assert_eq!(buckets[3].last, 10);
        for pair in buckets.windows(2) {
            assert_eq!(pair[0].t_end_us + 1, pair[1].t_start_us);
        }
    }

    #[test]
    fn empty_slices_are_omitted_and_range_is_respected() {
        let (samples, id) = samples(&[(0, Some(1)), (50, Some(2)), (51, None), (99, Some(3))]);
        let buckets = decimate(&samples, id, 10, 99, 9);
        assert_eq!(buckets.len(), 2);
        assert_eq!((buckets[0].t_start_us, buckets[0].max), (50, 2));
        assert_eq!((buckets[1].t_end_us, buckets[1].last), (99, 3));
    }

    #[test]
    fn degenerate_requests_return_nothing() {
        let (samples, id) = samples(&[(5, Some(1))]);
        assert!(decimate(&samples, id, 0, 10, 0).is_empty());
        assert!(decimate(&samples, id, 10, 0, 4).is_empty());
        assert!(decimate(&samples, id, 6, 10, 4).is_empty());
        assert!(decimate(&samples, CounterId(9), 0, 10, 4).is_empty());
        assert!(decimate(&Samples::default(), id, 0, 10, 4).is_empty());
    }

    #[test]
    fn more_buckets_than_microseconds_and_extreme_times() {
        let (samples, id) = samples(&[(u64::MAX - 1, Some(4)), (u64::MAX, Some(5))]);
        let buckets = decimate(&samples, id, u64::MAX - 2, u64::MAX, 1_000);
        assert_eq!(buckets.len(), 2);
        assert_eq!(buckets[1].t_start_us, u64::MAX);
        assert_eq!(buckets[1].t_end_us, u64::MAX);
        let whole = decimate(&samples, id, 0, u64::MAX, 3);
        assert_eq!(whole.len(), 1);
        assert_eq!((whole[0].min, whole[0].max, whole[0].last), (4, 5, 5));
    }

    proptest! {
        #[test]
        fn decimation_bounds_every_point(
            mut raw in proptest::collection::vec((0u64..10_000, proptest::option::weighted(0.9, any::<u64>().prop_map(|v| v % 1_000_000))), 0..400),
            t0 in 0u64..10_000,
            len in 0u64..12_000,
            n in 1usize..64,
        ) {
            raw.sort_by_key(|p| p.0);
            let (samples, id) = samples(&raw);
            let t1 = t0 + len;
            let buckets = decimate(&samples, id, t0, t1, n);
            prop_assert!(buckets.len() <= n);
            for pair in buckets.windows(2) {
                prop_assert!(pair[0].t_end_us < pair[1].t_start_us);
            }
            let inside: Vec<(u64, u64)> = raw
                .iter()
                .filter(|(t, _)| (t0..=t1).contains(t))
                .filter_map(|(t, v)| v.map(|v| (*t, v)))
                .collect();
            for (t, v) in &inside {
                let b = buckets.iter().find(|b| (b.t_start_us..=b.t_end_us).contains(t));
                prop_assert!(b.is_some(), "point at {} has no bucket", t);
                let b = b.unwrap();
                prop_assert!(b.min <= *v && *v <= b.max);
            }
            prop_assert_eq!(
                buckets.iter().map(|b| b.max).max(),
                inside.iter().map(|p| p.1).max()
            );
            prop_assert_eq!(
                buckets.iter().map(|b| b.min).min(),
                inside.iter().map(|p| p.1).min()
            );
            // The last point of each bucket is its `last`.
            for b in &buckets {
                let last = inside.iter().rev().find(|(t, _)| (b.t_start_us..=b.t_end_us).contains(t));
                prop_assert_eq!(last.map(|p| p.1), Some(b.last));
            }
        }
    }
}

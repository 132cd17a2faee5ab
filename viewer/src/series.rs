//! Min/max decimation of a counter for charts.
//!
//! An hour at 1 kHz is 3.6 million points per counter; a chart is a thousand pixels wide. The
//! viewer redraws on every zoom and pan, so it asks for one [`Bucket`] per pixel column and draws
//! a vertical bar from `min` to `max`: spikes survive (a plain average or stride would hide the
//! very peak that caused an OOM) and the work is one binary search plus one pass over the
//! visible points, with no allocation per point and one division per bucket, not per point.

use serde::Serialize;

use oomscope_format::{CounterId, MISSING, Samples};

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
    decimate_with(samples, counter, None, t0_us, t1_us, buckets)
}

/// Reduces points that are not a counter column (the allocator's `allocated` reported with each
/// stage mark) exactly as [`decimate`] reduces a counter: the same slices, the same min, max and
/// last. `points` are `(t_us, value)` in time order; those outside `[t0_us, t1_us]` are skipped.
pub fn decimate_points(
    points: impl IntoIterator<Item = (u64, u64)>,
    t0_us: u64,
    t1_us: u64,
    buckets: usize,
) -> Vec<Bucket> {
    if buckets == 0 || t1_us < t0_us {
        return Vec::new();
    }
    let mut merger = Merger {
        out: Vec::new(),
        current: None,
        next_start_us: 0,
        next_is_open: false,
        slicer: Slicer::new(t0_us, t1_us, buckets),
    };
    for (t_us, v) in points {
        if (t0_us..=t1_us).contains(&t_us) {
            merger.add(t_us, v, v, v);
        }
    }
    merger.out.extend(merger.current);
    merger.out
}

/// Rows per block of a [`BlockIndex`].
pub const BLOCK_ROWS: usize = 64;

/// Min, max and last value of one counter over each run of [`BLOCK_ROWS`] rows, computed once
/// per trace so that a wide window (many rows per pixel) is reduced from blocks instead of
/// points: [`decimate_indexed`] returns exactly what [`decimate`] returns, ~`BLOCK_ROWS` times
/// faster when a pixel covers many blocks. This keeps zooming and panning an hour at 1 kHz fluid.
#[derive(Debug, Clone)]
pub struct BlockIndex {
    counter: CounterId,
    blocks: Vec<Option<BlockStat>>,
}

#[derive(Debug, Clone, Copy)]
struct BlockStat {
    min: u64,
    max: u64,
    last: u64,
}

/// The smallest, largest and last present reading of a block, if it has one.
fn block_stat(values: &[u64]) -> Option<BlockStat> {
    values
        .iter()
        .filter(|v| **v != MISSING)
        .fold(None, |acc: Option<BlockStat>, &v| {
            Some(match acc {
                None => BlockStat {
                    min: v,
                    max: v,
                    last: v,
                },
                Some(b) => BlockStat {
                    min: b.min.min(v),
                    max: b.max.max(v),
                    last: v,
                },
            })
        })
}

impl BlockIndex {
    /// Summarises `counter` (empty for an unknown counter).
    pub fn new(samples: &Samples, counter: CounterId) -> BlockIndex {
        let mut blocks = Vec::new();
        if let Some(column) = samples.column(counter) {
            // Stretches start at whole runs of rows, and a block divides a run: the blocks
            // cut from each stretch are the column's.
            const { assert!(Samples::SUMMARY_ROWS.is_multiple_of(BLOCK_ROWS)) };
            column.for_each_chunk(0..column.len(), |_, values| {
                blocks.extend(values.chunks(BLOCK_ROWS).map(block_stat));
            });
        }
        BlockIndex { counter, blocks }
    }

    /// The counter it summarises.
    pub fn counter(&self) -> CounterId {
        self.counter
    }
}

/// [`decimate`] for the counter `index` summarises, using the index for whole blocks that fall
/// inside one slice. `samples` must be the ones the index was built from.
pub fn decimate_indexed(
    samples: &Samples,
    index: &BlockIndex,
    t0_us: u64,
    t1_us: u64,
    buckets: usize,
) -> Vec<Bucket> {
    decimate_with(samples, index.counter, Some(index), t0_us, t1_us, buckets)
}

fn decimate_with(
    samples: &Samples,
    counter: CounterId,
    index: Option<&BlockIndex>,
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
    let start = times.partition_point(|t| t < t0_us);
    // A column is as long as the times; `min` keeps a malformed shorter one from panicking.
    let end = times.partition_point(|t| t <= t1_us).min(column.len());
    if start >= end {
        return Vec::new();
    }
    let slicer = Slicer::new(t0_us, t1_us, buckets);
    let mut merger = Merger {
        out: Vec::with_capacity(buckets.min(end - start)),
        current: None,
        next_start_us: 0,
        next_is_open: false,
        slicer,
    };
    // Blocks only pay off when a slice spans several of them.
    let index = index.filter(|ix| {
        ix.blocks.len() == column.len().div_ceil(BLOCK_ROWS)
            && (end - start) / buckets.max(1) >= 2 * BLOCK_ROWS
    });
    // Without the index every row is read, the times and the readings a run at a time; with it
    // only the rows between blocks are, a few a slice, each read where it lies.
    let Some(index) = index else {
        times.zip_chunks(column, start..end, |_, times, values| {
            for (&t, &v) in times.iter().zip(values) {
                if v != MISSING {
                    merger.add(t, v, v, v);
                }
            }
        });
        merger.out.extend(merger.current);
        return merger.out;
    };
    let mut row = start;
    while row < end {
        if row.is_multiple_of(BLOCK_ROWS)
            && row + BLOCK_ROWS <= end
            && merger.slicer.index_of(times.at(row))
                == merger.slicer.index_of(times.at(row + BLOCK_ROWS - 1))
        {
            if let Some(b) = index.blocks[row / BLOCK_ROWS] {
                merger.add(times.at(row), b.min, b.max, b.last);
            }
            row += BLOCK_ROWS;
            continue;
        }
        let v = column.get(row).unwrap_or(MISSING);
        if v != MISSING {
            merger.add(times.at(row), v, v, v);
        }
        row += 1;
    }
    merger.out.extend(merger.current);
    merger.out
}

/// Folds points (or whole blocks inside one slice) into slices, in time order.
struct Merger {
    slicer: Slicer,
    out: Vec<Bucket>,
    current: Option<Bucket>,
    /// Points at or after this time belong to a later slice than `current`.
    next_start_us: u64,
    next_is_open: bool,
}

impl Merger {
    fn add(&mut self, t_us: u64, min: u64, max: u64, last: u64) {
        match &mut self.current {
            Some(b) if self.next_is_open || t_us < self.next_start_us => {
                b.min = b.min.min(min);
                b.max = b.max.max(max);
                b.last = last;
            }
            _ => {
                self.out.extend(self.current.take());
                let index = self.slicer.index_of(t_us);
                let (t_start_us, t_end_us) = self.slicer.bounds(index);
                self.next_is_open = index + 1 == self.slicer.buckets;
                self.next_start_us = t_end_us.wrapping_add(1);
                self.current = Some(Bucket {
                    t_start_us,
                    t_end_us,
                    min,
                    max,
                    last,
                });
            }
        }
    }
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

// Natively: proptest needs an entropy source wasm32-unknown-unknown lacks.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use oomscope_format::{CounterKind, Trace};
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
        fn the_block_index_changes_nothing(
            mut raw in proptest::collection::vec((0u64..200_000, proptest::option::weighted(0.9, any::<u64>().prop_map(|v| v % 1_000_000))), 0..5_000),
            t0 in 0u64..100_000,
            len in 0u64..250_000,
            n in 1usize..40,
        ) {
            raw.sort_by_key(|p| p.0);
            let (samples, id) = samples(&raw);
            let index = BlockIndex::new(&samples, id);
            prop_assert_eq!(index.counter(), id);
            prop_assert_eq!(
                decimate_indexed(&samples, &index, t0, t0 + len, n),
                decimate(&samples, id, t0, t0 + len, n)
            );
        }
    }

    #[test]
    fn the_block_index_is_used_and_exact_on_an_hour() {
        let run = oomscope_testkit::synth::TrainingRun {
            steps: 200,
            ..oomscope_testkit::synth::TrainingRun::hour_at_1khz()
        };
        let trace = oomscope_format::decode(&run.to_bytes()).unwrap().trace;
        let end = trace.duration_us();
        for (i, _) in trace.counters.iter().enumerate() {
            let id = CounterId(i as u32);
            let index = BlockIndex::new(&trace.samples, id);
            for (t0, t1, n) in [
                (0, end, 100),
                (end / 3, end / 2, 40),
                (end / 2, end / 2 + 4_000, 900),
            ] {
                assert_eq!(
                    decimate_indexed(&trace.samples, &index, t0, t1, n),
                    decimate(&trace.samples, id, t0, t1, n),
                    "counter {i}, window {t0}..{t1}"
                );
            }
        }
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

    #[test]
    fn points_are_decimated_like_a_counter() {
        let mut samples = Samples::with_counters(1);
        let points: Vec<(u64, u64)> = (0..500u64).map(|i| (i * 7, (i * 37) % 101)).collect();
        for (t, v) in &points {
            samples.push_row(*t, &[(CounterId(0), *v)]);
        }
        for buckets in [1, 3, 64, 1000] {
            assert_eq!(
                decimate_points(points.iter().copied(), 100, 3_000, buckets),
                decimate(&samples, CounterId(0), 100, 3_000, buckets),
                "{buckets} buckets"
            );
        }
    }
}

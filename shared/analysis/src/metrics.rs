//! What "memory at a mark" means, decided once for every analysis.
//!
//! A stage mark can carry the caching allocator's own statistics, and the sampler may have read
//! NVML and `/proc` counters around the same instant. The stage table, the leak fits, the
//! train→eval transitions and the recommendations all ask "how much memory at this mark?", and
//! they must give the same answer or a reader sees two numbers for one thing. This module is that
//! answer: [`MetricKey`] names a quantity, [`value_at_mark`] reads it, [`primary_metric`] picks
//! the one the headline numbers use, and [`MarkValues`] evaluates every metric at every mark once
//! so the passes that follow are plain array scans.

use serde::Serialize;

use oomscope_format::{
    AllocatorQuantity, AllocatorStats, Column, CounterId, CounterKind, MISSING, PackedColumn, Trace,
};

/// What a metric measures, the same in every trace: one of the allocator's quantities read at
/// marks ([`AllocatorStats`]), or a counter's kind on a device. The one key every analysis names
/// a memory quantity by; the label is for the edges (text, viewer, JSON). It is serialised as
/// its label (`allocated`, `gpu0.used`), so `summary --json` reads as it did when metrics were
/// strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetricKey {
    /// One of the allocator's quantities, read from the statistics a mark carries.
    Allocator(AllocatorQuantity),
    /// A sampled counter.
    Counter {
        /// What it counts.
        kind: CounterKind,
        /// On which GPU, for device counters.
        device: Option<u32>,
    },
}

impl MetricKey {
    /// The allocator's `allocated`, read at marks.
    pub const ALLOCATED: MetricKey = MetricKey::Allocator(AllocatorQuantity::Allocated);
    /// The allocator's `reserved`, read at marks.
    pub const RESERVED: MetricKey = MetricKey::Allocator(AllocatorQuantity::Reserved);

    /// The allocator's quantities read at marks, in table order (its byte quantities).
    pub const AT_MARKS: [MetricKey; 6] = [
        MetricKey::Allocator(AllocatorQuantity::Allocated),
        MetricKey::Allocator(AllocatorQuantity::Reserved),
        MetricKey::Allocator(AllocatorQuantity::Active),
        MetricKey::Allocator(AllocatorQuantity::InactiveSplit),
        MetricKey::Allocator(AllocatorQuantity::PeakAllocated),
        MetricKey::Allocator(AllocatorQuantity::PeakReserved),
    ];

    /// What counter `id` of `trace` measures.
    pub fn of_counter(trace: &Trace, id: CounterId) -> MetricKey {
        let counter = trace.counters.get(id.0 as usize);
        MetricKey::Counter {
            kind: counter.map_or(CounterKind::Other(0), |c| c.kind),
            device: counter.and_then(|c| c.device),
        }
    }

    /// `allocated`, `reserved`, …, or the counter's standard name (`gpu0.used`).
    pub fn label(self) -> String {
        match self {
            MetricKey::Allocator(quantity) => quantity.label().to_owned(),
            MetricKey::Counter { kind, device } => kind.counter_name(device),
        }
    }

    /// The quantity a mark's allocator statistics give for it; `None` for counters.
    pub fn at_mark(self, stats: &AllocatorStats) -> Option<u64> {
        match self {
            MetricKey::Allocator(quantity) => Some(stats.get(quantity)),
            MetricKey::Counter { .. } => None,
        }
    }

    /// The counter's kind, for counter metrics.
    pub fn counter_kind(self) -> Option<CounterKind> {
        match self {
            MetricKey::Counter { kind, .. } => Some(kind),
            MetricKey::Allocator(_) => None,
        }
    }

    /// The GPU a device metric belongs to, when the counter says; the marks' statistics do not.
    pub fn device(self) -> Option<u32> {
        match self {
            MetricKey::Counter { device, .. } => device,
            MetricKey::Allocator(_) => None,
        }
    }

    /// What it measures whatever it was read from and on which device: a running peak as its
    /// quantity, a sampled allocator counter as the allocator's quantity, a device counter
    /// without its device; `None` for limits (total, free, available), the file-backed part of
    /// the RSS, one process's counters and unknown kinds. Peaks are compared by it.
    pub fn measure(self) -> Option<MetricKey> {
        Some(match self {
            MetricKey::Allocator(quantity)
            | MetricKey::Counter {
                kind: CounterKind::Allocator(quantity),
                ..
            } => MetricKey::Allocator(quantity.peak_of()),
            MetricKey::Counter {
                kind:
                    kind @ (CounterKind::GpuUsed
                    | CounterKind::GpuReserved
                    | CounterKind::ProcessGpu
                    | CounterKind::HostRss
                    | CounterKind::HostPss),
                ..
            } => MetricKey::Counter { kind, device: None },
            MetricKey::Counter { .. } => return None,
        })
    }

    /// True when it measures host memory (else device memory).
    pub fn is_host(self) -> bool {
        matches!(
            self,
            MetricKey::Counter {
                kind: CounterKind::HostRss
                    | CounterKind::HostAvailable
                    | CounterKind::HostPss
                    | CounterKind::HostRssFile
                    | CounterKind::ShmUsed
                    | CounterKind::ShmSize,
                ..
            }
        )
    }
}

impl std::fmt::Display for MetricKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label())
    }
}

impl Serialize for MetricKey {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.label())
    }
}

/// True when at least one stage mark carries the allocator's statistics.
pub fn has_allocator_stats(trace: &Trace) -> bool {
    trace.marks.has_allocator()
}

/// The counter a counter metric reads in `trace`: the first of its kind on its device with data
/// (else without); `None` for the allocator's quantities read at marks.
pub fn counter_of(trace: &Trace, key: MetricKey) -> Option<CounterId> {
    let MetricKey::Counter { kind, device } = key else {
        return None;
    };
    let ids = || {
        trace
            .counters
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.kind == kind && c.device == device)
            .map(|(i, _)| CounterId(i as u32))
    };
    ids()
        .find(|id| counter_has_data(trace, *id))
        .or_else(|| ids().next())
}

/// The counter each of `keys` reads ([`counter_of`]).
fn counters_of(trace: &Trace, keys: &[MetricKey]) -> Vec<Option<CounterId>> {
    keys.iter().map(|&key| counter_of(trace, key)).collect()
}

/// True when the counter has at least one present sample.
pub fn counter_has_data(trace: &Trace, id: CounterId) -> bool {
    // A present reading is in some run's summary.
    trace
        .samples
        .first_max(id, 0..trace.samples.len())
        .is_some()
}

/// The first counter of `kind` (any device) that has data.
pub fn counter_with_data(trace: &Trace, kind: CounterKind) -> Option<CounterId> {
    trace
        .counters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == kind)
        .map(|(i, _)| CounterId(i as u32))
        .find(|id| counter_has_data(trace, *id))
}

/// Counter kinds worth reading at marks: memory in use. Totals, free memory, availability and
/// running peaks are limits or summaries, not "memory at this point".
const MARK_COUNTER_KINDS: [CounterKind; 7] = [
    CounterKind::GpuUsed,
    CounterKind::ProcessGpu,
    CounterKind::Allocator(AllocatorQuantity::Allocated),
    CounterKind::Allocator(AllocatorQuantity::Reserved),
    CounterKind::Allocator(AllocatorQuantity::Active),
    CounterKind::HostRss,
    CounterKind::HostPss,
];

/// The host memory the program really uses: the tree's PSS when recorded and it ever differs
/// from the summed RSS (several processes sharing pages: forked workers counted once), else the
/// RSS (one process: the two are the same number, and RSS is the name everyone knows).
pub fn host_in_use(trace: &Trace) -> Option<CounterId> {
    let rss = counter_with_data(trace, CounterKind::HostRss);
    match counter_with_data(trace, CounterKind::HostPss) {
        Some(pss) if rss.is_none_or(|rss| pss_differs(trace, pss, rss)) => Some(pss),
        _ => rss,
    }
}

/// Whether PSS is materially below RSS where RSS peaks (the moment host memory matters): at
/// least [`SHARED_MIN_SHARE`] of the RSS peak is shared between the tree's processes. A brief
/// second process at start-up (a launcher's shim) does not make a single-process run's memory a
/// PSS story. The peak is taken over the rows that read both: the sampler writes no PSS for a
/// tree the poller has not read yet (workers just forked), and a PSS carried over from before
/// the fork would compare one process with five.
fn pss_differs(trace: &Trace, pss: CounterId, rss: CounterId) -> bool {
    let (Some(r), Some(p)) = (trace.samples.column(rss), trace.samples.column(pss)) else {
        return false;
    };
    // The first largest RSS read with a PSS, as (RSS, PSS).
    let mut peak: Option<(u64, u64)> = None;
    r.zip_chunks(p, 0..r.len(), |_, rss, pss| {
        for (&r, &p) in rss.iter().zip(pss) {
            if r != MISSING && p != MISSING && peak.is_none_or(|(best, _)| r >= best) {
                peak = Some((r, p));
            }
        }
    });
    peak.is_some_and(|(r, p)| (p as f64) < (1.0 - SHARED_MIN_SHARE) * r as f64)
}

/// See `pss_differs`.
pub const SHARED_MIN_SHARE: f64 = 0.05;

/// True when the trace's PSS column says nothing the RSS does not (a single process).
pub fn pss_is_rss(trace: &Trace) -> bool {
    counter_with_data(trace, CounterKind::HostPss).is_some()
        && host_in_use(trace) != counter_with_data(trace, CounterKind::HostPss)
}

/// The metrics the per-mark analyses use: the allocator's quantities when any mark carries its
/// statistics, then every counter measuring memory in use (used, process, allocator, RSS) that
/// has data, in declaration order (each key once).
pub fn metrics_at_marks(trace: &Trace) -> Vec<MetricKey> {
    let mut metrics = Vec::new();
    if has_allocator_stats(trace) {
        metrics.extend(MetricKey::AT_MARKS);
    }
    for (i, counter) in trace.counters.iter().enumerate() {
        let id = CounterId(i as u32);
        let key = MetricKey::of_counter(trace, id);
        if MARK_COUNTER_KINDS.contains(&counter.kind)
            && counter_has_data(trace, id)
            && !metrics.contains(&key)
        {
            metrics.push(key);
        }
    }
    metrics
}

/// The metric headline numbers use: the allocator's `allocated` when marks carry its statistics
/// (it is what the program's tensors hold); else the first with data of the allocator's sampled
/// `allocated`, the process's GPU memory, the device's used memory, and the host RSS.
pub fn primary_metric(trace: &Trace) -> Option<MetricKey> {
    if has_allocator_stats(trace) {
        return Some(MetricKey::ALLOCATED);
    }
    [
        CounterKind::Allocator(AllocatorQuantity::Allocated),
        CounterKind::ProcessGpu,
        CounterKind::GpuUsed,
    ]
    .into_iter()
    .find_map(|kind| counter_with_data(trace, kind))
    .or_else(|| host_in_use(trace))
    .map(|id| MetricKey::of_counter(trace, id))
}

/// The allocator's reserved bytes: read at marks when they carry its statistics, else the
/// sampled counter.
pub fn reserved_metric(trace: &Trace) -> Option<MetricKey> {
    if has_allocator_stats(trace) {
        return Some(MetricKey::RESERVED);
    }
    counter_with_data(trace, CounterKind::Allocator(AllocatorQuantity::Reserved))
        .map(|id| MetricKey::of_counter(trace, id))
}

/// Where a mark reads the samples.
struct MarkRow {
    /// The last sample row at or before the mark, with its time.
    row: Option<(usize, u64)>,
    /// Since when a training mark's phase has run (0 for an eval's mark: see [`MarkValues`]).
    phase_since_us: u64,
    /// A row after the mark was read: rows appended later (a trace still being written) cannot
    /// change `row`.
    settled: bool,
}

/// The walk of the marks through the samples ([`MarkRow`]), where it stands before a mark.
/// Marks are in time order, so each search starts where the previous one ended (a mark earlier
/// than its predecessor, which a well-formed trace never has, restarts from the beginning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RowWalk {
    from: usize,
    previous_t: u64,
    /// Whether the marks since `phase_since_us` are training's (the first phase reaches back to
    /// the start: the readings before the first mark are its).
    training: Option<bool>,
    phase_since_us: u64,
}

impl RowWalk {
    /// Before the first mark of `trace`.
    fn start(trace: &Trace) -> RowWalk {
        RowWalk {
            from: 0,
            previous_t: 0,
            training: trace.marks.first().map(|m| crate::marks::is_train(m.phase)),
            phase_since_us: 0,
        }
    }

    /// `mark`'s row, the walk moved past it.
    fn step(&mut self, times: Column<'_>, mark: &oomscope_format::Mark) -> MarkRow {
        let t = mark.t_us;
        if t < self.previous_t {
            self.from = 0;
        }
        self.previous_t = t;
        let is_train = crate::marks::is_train(mark.phase);
        if self.training != Some(is_train) {
            self.training = Some(is_train);
            self.phase_since_us = t;
        }
        let after = first_row_after(times, self.from, t);
        self.from = after;
        MarkRow {
            row: after.checked_sub(1).map(|row| (row, times.at(row))),
            phase_since_us: if is_train { self.phase_since_us } else { 0 },
            settled: after < times.len(),
        }
    }
}

/// The first row from `from` on whose time is after `t` (every row before `from` is at or before
/// `t`): a gallop from `from` — a window `[lo, hi)` with `times[lo - 1] <= t < times[hi]` — then a
/// bisection. Marks are usually a few dozen rows apart, so the window is found in a few reads.
fn first_row_after(times: Column<'_>, from: usize, t: u64) -> usize {
    let (mut lo, mut hi, mut step) = (from, from, 1);
    while hi < times.len() && times.at(hi) <= t {
        lo = hi + 1;
        hi += step;
        step *= 2;
    }
    let mut hi = hi.min(times.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if times.at(mid) <= t {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Marks [`MarkValues::for_metrics`] finds the rows of before reading the counters at them.
const MARK_BATCH: usize = 1 << 14;

/// Every metric evaluated at every mark, computed once and shared by the analyses: the
/// allocator's quantity the mark carries, or the counter's latest reading at or before the mark
/// (looking back at most [`oomscope_format::Samples::MAX_LOOKBACK_ROWS`] rows) — unless a
/// training mark's reading was taken before the program last switched from eval back to
/// training. A reading from inside an eval is not the memory of the training step after it: on a
/// loaded machine the sampler can be hundreds of milliseconds late, and the eval's outputs are
/// freed in that time. Such a mark has no value rather than the eval's. (An eval's first mark may
/// read training's last reading: the memory the eval started from, what its growth is measured
/// from.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkValues {
    keys: Vec<MetricKey>,
    /// One column per metric, one entry per mark, [`MISSING`] where the metric has no value,
    /// packed (a few bits a mark, not an `Option`'s 16 bytes: a day's million marks times a
    /// dozen metrics).
    columns: Vec<PackedColumn>,
    primary: Option<usize>,
    /// The first mark read before a row after it was (the marks' count when there is none):
    /// samples appended later may change what it and the marks after it read, so
    /// [`MarkValues::extend`] reads again from there.
    unsettled_from: usize,
    /// The walk through the samples before that mark.
    walk: RowWalk,
    /// The counter each metric reads ([`counter_of`]; `None` for the marks' own quantities and
    /// a counter the trace lacks): a counter that gains its first reading can take another's
    /// place, and then every mark is read again.
    counters: Vec<Option<CounterId>>,
}

impl MarkValues {
    /// Evaluates [`metrics_at_marks`] (plus the [`primary_metric`], should it be missing) at every
    /// mark of `trace`.
    pub fn new(trace: &Trace) -> MarkValues {
        let (metrics, primary) = MarkValues::metrics_of(trace);
        let mut values = MarkValues::for_metrics(trace, metrics);
        values.primary = primary.and_then(|p| values.index_of(p));
        values
    }

    /// The metrics [`MarkValues::new`] evaluates, and the primary one.
    fn metrics_of(trace: &Trace) -> (Vec<MetricKey>, Option<MetricKey>) {
        let mut metrics = metrics_at_marks(trace);
        let primary = primary_metric(trace);
        if let Some(p) = primary
            && !metrics.contains(&p)
        {
            metrics.push(p);
        }
        (metrics, primary)
    }

    /// The values of `trace`, a trace these were read from ([`MarkValues::new`]) that has grown
    /// since (a live view's: marks and samples appended, nothing before them changed): only the
    /// appended marks are read, and those whose rows the appended samples may have moved; all
    /// again when the metrics evaluated changed (a counter's first readings). Equal to
    /// [`MarkValues::new`] of `trace`. Returns the first mark whose values may have changed.
    pub fn extend(&mut self, trace: &Trace) -> usize {
        let (metrics, primary) = MarkValues::metrics_of(trace);
        if metrics != self.keys
            || primary.and_then(|p| self.index_of(p)) != self.primary
            || trace.marks.len() < self.unsettled_from
            || self.counters != counters_of(trace, &self.keys)
        {
            *self = MarkValues::new(trace);
            return 0;
        }
        let from = self.unsettled_from;
        self.read_on(trace);
        from
    }

    /// The marks whose values later samples cannot change: all before this one.
    pub fn settled_marks(&self) -> usize {
        self.unsettled_from
    }

    /// Evaluates the given metrics at every mark (no primary metric is designated). Finds each
    /// mark's sample row once for all counters, walking forward through the samples as the marks
    /// advance, then reads one counter at every mark of a batch of [`MARK_BATCH`] before going on
    /// to the next counter: each read is a cache miss on a long trace, and reads whose rows are
    /// already known do not wait for one another.
    pub fn for_metrics(trace: &Trace, keys: Vec<MetricKey>) -> MarkValues {
        let mut values = MarkValues {
            columns: vec![PackedColumn::default(); keys.len()],
            keys,
            primary: None,
            unsettled_from: 0,
            walk: RowWalk::start(trace),
            counters: Vec::new(),
        };
        values.read_on(trace);
        values
            .columns
            .iter_mut()
            .for_each(PackedColumn::shrink_to_fit);
        values
    }

    /// Reads the marks from [`MarkValues::unsettled_from`] on (every mark, the first time).
    fn read_on(&mut self, trace: &Trace) {
        let from_mark = self.unsettled_from;
        let times = trace.samples.times_us();
        self.counters = counters_of(trace, &self.keys);
        // A metric is read from the samples: the marks' rows are needed.
        let needs_rows = self.counters.iter().any(Option::is_some);
        // Marks a batch at a time, each column packed as it grows: a day's million marks' rows
        // and plain values would take 48 MB for each metric.
        let mut batch: Vec<MarkRow> = Vec::new();
        // An allocator quantity is the marks' own column.
        let kept = |key: MetricKey| match key {
            MetricKey::Allocator(q) => trace.marks.allocator_column(q),
            MetricKey::Counter { .. } => None,
        };
        for (&key, column) in self.keys.iter().zip(&mut self.columns) {
            column.truncate(from_mark);
            match kept(key) {
                Some(marks) if from_mark == 0 => *column = marks.to_packed(),
                Some(marks) => marks
                    .range(from_mark..marks.len())
                    .for_each(|v| column.push(v)),
                None => {}
            }
        }
        // The walk starts from the first mark's phase, which a trace with no marks yet lacks.
        let mut walk = if from_mark == 0 {
            RowWalk::start(trace)
        } else {
            self.walk
        };
        let mut unsettled = None;
        for start in (from_mark..trace.marks.len()).step_by(MARK_BATCH) {
            let marks = &trace.marks[start..trace.marks.len().min(start + MARK_BATCH)];
            batch.clear();
            if needs_rows {
                for (i, mark) in marks.iter().enumerate() {
                    let before = walk;
                    let row = walk.step(times, mark);
                    if !row.settled && unsettled.is_none() {
                        unsettled = Some((start + i, before));
                    }
                    batch.push(row);
                }
            }
            for ((&key, column), &counter) in
                self.keys.iter().zip(&mut self.columns).zip(&self.counters)
            {
                match key {
                    MetricKey::Counter { .. } => match counter {
                        Some(id) => batch.iter().for_each(|mark| {
                            let Some((row, row_t_us)) = mark.row else {
                                return column.push(MISSING);
                            };
                            let phase_since_us = mark.phase_since_us;
                            // The row's own time is known from the search; an older reading's
                            // is read.
                            let read_after = |read: usize| {
                                phase_since_us == 0
                                    || (if read == row {
                                        row_t_us
                                    } else {
                                        times.at(read)
                                    }) >= phase_since_us
                            };
                            column.push(
                                trace
                                    .samples
                                    .reading_at_row(id, row)
                                    .and_then(|(read, value)| read_after(read).then_some(value))
                                    .unwrap_or(MISSING),
                            );
                        }),
                        None => marks.iter().for_each(|_| column.push(MISSING)),
                    },
                    MetricKey::Allocator(_) if kept(key).is_some() => {}
                    MetricKey::Allocator(_) => marks.iter().for_each(|_| column.push(MISSING)),
                }
            }
        }
        (self.unsettled_from, self.walk) = unsettled.unwrap_or((trace.marks.len(), walk));
    }

    /// One metric at every mark, by the same rule.
    pub fn of_metric(trace: &Trace, metric: MetricKey) -> Vec<Option<u64>> {
        MarkValues::for_metrics(trace, vec![metric])
            .column(0)
            .iter()
            .collect()
    }

    /// What metric number `index` measures.
    pub fn key(&self, index: usize) -> MetricKey {
        self.keys[index]
    }

    /// What every metric measures, in column order.
    pub fn keys(&self) -> &[MetricKey] {
        &self.keys
    }

    /// Column number of `metric`, if it was evaluated.
    pub fn index_of(&self, metric: MetricKey) -> Option<usize> {
        self.keys.iter().position(|k| *k == metric)
    }

    /// Column number of the primary metric, if there is one.
    pub fn primary(&self) -> Option<usize> {
        self.primary
    }

    /// Values of metric number `index` at every mark.
    pub fn column(&self, index: usize) -> MarkColumn<'_> {
        MarkColumn::new(self.columns[index].view())
    }

    /// Value of metric number `index` at mark `mark_index`.
    pub fn get(&self, mark_index: usize, index: usize) -> Option<u64> {
        self.columns
            .get(index)
            .and_then(|c| c.view().get(mark_index))
            .filter(|v| *v != MISSING)
    }
}

/// One metric's values at the marks (or at a range of them), in mark order: each an
/// `Option<u64>`, stored as a `u64` with [`MISSING`] for none.
#[derive(Debug, Clone, Copy)]
pub struct MarkColumn<'a> {
    column: Column<'a>,
    /// The marks `start..end` of the column.
    start: usize,
    end: usize,
}

impl<'a> MarkColumn<'a> {
    fn new(column: Column<'a>) -> MarkColumn<'a> {
        MarkColumn {
            column,
            start: 0,
            end: column.len(),
        }
    }

    /// The value at mark `mark` (counted from the column's first), if it has one.
    pub fn get(self, mark: usize) -> Option<u64> {
        if mark >= self.len() {
            return None;
        }
        self.column.get(self.start + mark).filter(|v| *v != MISSING)
    }

    /// The first mark from `from` on (counted from the column's first) with a value other than
    /// `value`.
    pub fn first_other(self, from: usize, value: u64) -> Option<usize> {
        let found = self.column.first_other(self.start + from, value)?;
        (found < self.end).then(|| found - self.start)
    }

    /// The values in mark order.
    pub fn iter(
        self,
    ) -> impl DoubleEndedIterator<Item = Option<u64>> + ExactSizeIterator + Clone + 'a {
        self.column
            .range(self.start..self.end)
            .map(|v| (v != MISSING).then_some(v))
    }

    /// The values of the marks in `marks` (counted from the column's first).
    pub fn range(self, marks: std::ops::Range<usize>) -> MarkColumn<'a> {
        assert!(
            marks.start <= marks.end && marks.end <= self.len(),
            "marks {marks:?} out of {}",
            self.len()
        );
        MarkColumn {
            column: self.column,
            start: self.start + marks.start,
            end: self.start + marks.end,
        }
    }

    /// Marks in the column.
    pub fn len(self) -> usize {
        self.end - self.start
    }

    /// True when there is no mark.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::{Name, Phase, StageMark};
    use proptest::prelude::*;

    proptest! {
        /// Galloped through the packed times, the row found is the bisection's of the plain ones.
        #[test]
        fn the_row_after_a_time_is_the_bisection_s(
            gaps in proptest::collection::vec(0u64..4, 0..10_000),
            from_share in 0.0f64..1.0,
            t in 0u64..16_000,
        ) {
            let times: Vec<u64> = gaps
                .iter()
                .scan(0, |t, gap| {
                    *t += gap;
                    Some(*t)
                })
                .collect();
            let expected = times.partition_point(|x| *x <= t);
            // Packed, as a trace keeps them (runs of 4 096 rows, then a plain tail).
            let packed = PackedColumn::from_values(times);
            prop_assert_eq!(packed.view().partition_point(|x| x <= t), expected);
            // Any start at or before the answer.
            let from = (expected as f64 * from_share) as usize;
            prop_assert_eq!(first_row_after(packed.view(), from, t), expected);
        }
    }

    fn trace_with_counters() -> (Trace, CounterId, CounterId, CounterId) {
        let mut trace = Trace::default();
        let total = trace.declare_counter(CounterKind::GpuTotal, Some(0));
        let used = trace.declare_counter(CounterKind::GpuUsed, Some(0));
        let process = trace.declare_counter(CounterKind::ProcessGpu, Some(0));
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        let _unused =
            trace.declare_counter(CounterKind::Allocator(AllocatorQuantity::Reserved), Some(0));
        trace
            .samples
            .push_row(0, &[(total, 80), (used, 10), (rss, 5)]);
        trace.samples.push_row(10, &[(used, 20), (process, 7)]);
        trace.marks.push(StageMark {
            t_us: 15,
            name: "post_forward".into(),
            step: 1,
            phase: Phase::Train,
            ..StageMark::default()
        });
        (trace, used, process, rss)
    }

    #[test]
    fn counters_without_allocator_stats() {
        let (trace, used, process, rss) = trace_with_counters();
        let [used, process, rss] = [used, process, rss].map(|id| MetricKey::of_counter(&trace, id));
        // Totals and counters without data are not metrics at marks.
        assert_eq!(metrics_at_marks(&trace), [used, process, rss]);
        assert_eq!(primary_metric(&trace), Some(process));
        assert_eq!(reserved_metric(&trace), None);
        assert_eq!(MarkValues::of_metric(&trace, used), [Some(20)]);
        // RSS was last read at t=0; the row at t=10 misses it, so the look-back finds 5.
        assert_eq!(MarkValues::of_metric(&trace, rss), [Some(5)]);
        assert_eq!(MarkValues::of_metric(&trace, MetricKey::ALLOCATED), [None]);
        assert_eq!(process.label(), "gpu0.process");
        assert!(rss.is_host());
        assert_eq!(used.device(), Some(0));
        // A counter and the allocator's quantity at marks measure the same memory.
        let sampled = MetricKey::Counter {
            kind: CounterKind::Allocator(AllocatorQuantity::PeakAllocated),
            device: Some(0),
        };
        assert_eq!(sampled.measure(), Some(MetricKey::ALLOCATED));
        assert_eq!(
            used.measure(),
            Some(MetricKey::Counter {
                kind: CounterKind::GpuUsed,
                device: None
            })
        );
        assert_eq!(
            MetricKey::Counter {
                kind: CounterKind::GpuTotal,
                device: Some(0)
            }
            .measure(),
            None
        );
    }

    #[test]
    fn pss_is_the_memory_in_use_when_read_below_rss_even_if_missing_at_the_rss_peak() {
        // One process (PSS = RSS), then five forked ones sharing its 256 units: the RSS peak's
        // row has no PSS (the poller had not read that tree yet), a later row of the same tree
        // has. The comparison is made where both were read, not against the PSS carried over
        // from the one-process tree.
        let mut trace = Trace::default();
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        let pss = trace.declare_counter(CounterKind::HostPss, None);
        trace.samples.push_row(0, &[(rss, 260), (pss, 260)]);
        for t in 1..100 {
            trace.samples.push_row(t, &[(rss, 260)]);
        }
        trace.samples.push_row(100, &[(rss, 1300)]);
        trace.samples.push_row(101, &[(rss, 1290), (pss, 300)]);
        assert_eq!(host_in_use(&trace), Some(pss));
        assert!(!pss_is_rss(&trace));

        // One process all along: RSS is the name everyone knows.
        let mut single = Trace::default();
        let rss = single.declare_counter(CounterKind::HostRss, None);
        let pss = single.declare_counter(CounterKind::HostPss, None);
        single.samples.push_row(0, &[(rss, 260), (pss, 260)]);
        single.samples.push_row(1, &[(rss, 300), (pss, 299)]);
        assert_eq!(host_in_use(&single), Some(rss));
        assert!(pss_is_rss(&single));
    }

    #[test]
    fn allocator_stats_at_marks_make_allocated_primary() {
        let (mut trace, _, _, _) = trace_with_counters();
        trace.marks.edit_indexed(|i, m| {
            if i == 0 {
                m.allocator = Some(AllocatorStats {
                    allocated_bytes: 3,
                    reserved_bytes: 4,
                    ..AllocatorStats::default()
                });
            }
        });
        let metrics = metrics_at_marks(&trace);
        assert_eq!(metrics[..6], MetricKey::AT_MARKS);
        assert_eq!(metrics.len(), 9);
        assert_eq!(primary_metric(&trace), Some(MetricKey::ALLOCATED));
        assert_eq!(reserved_metric(&trace), Some(MetricKey::RESERVED));
        assert_eq!(
            MarkValues::of_metric(&trace, MetricKey::RESERVED),
            [Some(4)]
        );

        let values = MarkValues::new(&trace);
        assert_eq!(values.primary(), Some(0));
        assert_eq!(values.get(0, 0), Some(3));
        assert_eq!(values.key(1).label(), "reserved");
        assert_eq!(values.keys().len(), 9);
    }

    /// The rule [`MarkValues`] states, one mark at a time: the counter's reading at or before the
    /// mark, unless a training mark's was read before the first mark of its run of training marks.
    fn value_at_mark(trace: &Trace, i: usize, metric: MetricKey) -> Option<u64> {
        let mark = &trace.marks[i];
        let MetricKey::Counter { .. } = metric else {
            return metric.at_mark(&trace.marks.allocator(i)?);
        };
        let training = crate::marks::is_train(mark.phase);
        let run_start = trace.marks[..i]
            .iter()
            .rposition(|m| crate::marks::is_train(m.phase) != training)
            .filter(|_| training)
            .map_or(0, |before| trace.marks[before + 1].t_us);
        let row = trace.samples.row_at_or_before(mark.t_us)?;
        let (read, value) = trace
            .samples
            .reading_at_row(counter_of(trace, metric)?, row)?;
        (trace.samples.time_us(read) >= run_start).then_some(value)
    }

    #[test]
    fn a_reading_from_the_other_phase_is_not_a_mark_s_value() {
        // RSS read at t=0 (training), t=100 (inside the eval, its outputs held) and t=300; the
        // eval ends at t=200 and the next training mark comes before the sampler reads again. An
        // eval's first mark may read training's last reading: the memory it started from.
        let mut trace = Trace::default();
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        for (t, v) in [(0, 100), (100, 900), (300, 110)] {
            trace.samples.push_row(t, &[(rss, v)]);
        }
        for (t_us, phase) in [
            (10, Phase::Train),
            (90, Phase::Eval),
            (150, Phase::Eval),
            (200, Phase::Train),
            (310, Phase::Train),
        ] {
            trace.marks.push(StageMark {
                t_us,
                name: "pre_forward".into(),
                phase,
                ..StageMark::default()
            });
        }
        let rss = MetricKey::of_counter(&trace, rss);
        assert_eq!(
            MarkValues::of_metric(&trace, rss),
            [Some(100), Some(100), Some(900), None, Some(110)]
        );
        for i in 0..trace.marks.len() {
            assert_eq!(
                MarkValues::of_metric(&trace, rss)[i],
                value_at_mark(&trace, i, rss)
            );
        }
    }

    #[test]
    fn mark_values_read_what_value_at_reads() {
        // Rows every 10 µs with holes of every length up to 100 rows; marks at, between, before
        // and after the rows, including a mark that goes back in time, in training and eval.
        let mut trace = Trace::default();
        let a = trace.declare_counter(CounterKind::GpuUsed, Some(0));
        let b = trace.declare_counter(CounterKind::HostRss, None);
        let mut t = 5;
        for hole in 0..100u64 {
            trace.samples.push_row(t, &[(a, hole), (b, hole * 2)]);
            t += 10;
            for _ in 0..hole {
                trace.samples.push_row(t, &[(b, 7)]);
                t += 10;
            }
        }
        let name: Name = "s".into();
        let mut mark_times: Vec<u64> = (0..t + 50).step_by(7).collect();
        mark_times.insert(300, 3);
        for t_us in mark_times {
            trace.marks.push(StageMark {
                t_us,
                name: name.clone(),
                // Eval every third stretch of 500 µs: readings across a switch are dropped.
                phase: if (t_us / 500) % 3 == 1 {
                    Phase::Eval
                } else {
                    Phase::Train
                },
                ..StageMark::default()
            });
        }
        let metrics = vec![
            MetricKey::of_counter(&trace, a),
            MetricKey::of_counter(&trace, b),
            // No such counter: nothing at any mark.
            MetricKey::Counter {
                kind: CounterKind::PidGpu,
                device: Some(3),
            },
        ];
        let values = MarkValues::for_metrics(&trace, metrics.clone());
        let mut present = 0;
        for (m, metric) in metrics.iter().enumerate() {
            for i in 0..trace.marks.len() {
                let expected = value_at_mark(&trace, i, *metric);
                assert_eq!(values.get(i, m), expected, "mark {i} metric {m}");
                present += usize::from(expected.is_some());
            }
        }
        // Both found values and ran out of look-back.
        assert!(present > 0);
        assert!(values.column(0).iter().any(|v| v.is_none()));
    }

    #[test]
    fn host_only_trace_uses_rss() {
        let mut trace = Trace::default();
        let rss = trace.declare_counter(CounterKind::HostRss, None);
        trace.samples.push_row(0, &[(rss, 5)]);
        assert_eq!(
            primary_metric(&trace),
            Some(MetricKey::of_counter(&trace, rss))
        );
        assert_eq!(primary_metric(&Trace::default()), None);
    }
}

//! Counter samples as a table, with each column's largest reading per run of rows kept beside it.
//!
//! Why the summary: the largest reading of a counter (the peak every summary names) was a scan
//! of every row, tens of megabytes a column on a long trace, on every analysis; a live view
//! analyses again as the trace grows. The summary is made as rows arrive, while they are still in
//! the cache (the reader appends a block at a time), so the scan becomes one value per
//! [`Samples::SUMMARY_ROWS`] rows. Rows only ever arrive at the end or are cut off the end, and a
//! column changed in place is summarised again ([`Samples::edit_column`]), so the summary is
//! always the table's.

use std::ops::Range;

use serde::Serialize;

use super::growth::reserve_gently;
use super::packed::{Column, MISSING, PackedColumn, RUN_ROWS};

/// Index of a declared counter in [`crate::Trace::counters`] (and of its column in [`Samples`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct CounterId(pub u32);

/// Counter samples as a table: one row per sampling instant, one column per declared counter.
///
/// Columns are aligned with [`Samples::times_us`]; a counter that was not read at an instant
/// holds [`MISSING`] there. Each column keeps its full runs of rows packed
/// ([`Column`]: a day at 100 Hz, 8.64 M rows, takes a few bits a reading instead of 8 bytes)
/// and is read a row at a time or a stretch at a time ([`Column::for_each_chunk`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Samples {
    /// The rows' times, packed as the columns are (a day's 8.64 M rows take 26 bits a row).
    times_us: PackedColumn,
    columns: Vec<PackedColumn>,
    /// For each column, the largest present value of each run of [`Samples::SUMMARY_ROWS`] rows,
    /// plus one (`MISSING` wraps to 0: a run with no reading holds 0). As long as the column's
    /// rows, rounded up to runs.
    maxima: Vec<Vec<u64>>,
    /// Rows the summaries cover (all but a block being filled).
    summarised_rows: usize,
}

/// A value with one added, wrapping: [`MISSING`] (`u64::MAX`) becomes 0, below every present
/// value, so a largest-value scan is a single comparison.
fn lifted(v: u64) -> u64 {
    v.wrapping_add(1)
}

/// The largest lifted value of `values` (0 when none is present): a loop the compiler vectorises.
fn lifted_max(values: &[u64]) -> u64 {
    values.iter().map(|v| lifted(*v)).max().unwrap_or(0)
}

/// Index and lifted value of the first largest present value of `values`, if any.
fn first_lifted_max(values: &[u64]) -> Option<(usize, u64)> {
    let best = lifted_max(values);
    (best > 0).then(|| {
        (
            values.iter().position(|v| lifted(*v) == best).unwrap_or(0),
            best,
        )
    })
}

/// Row and lifted value of the first largest present value of `column` within `rows`, if any.
fn first_lifted_max_in(column: &PackedColumn, rows: Range<usize>) -> Option<(usize, u64)> {
    let mut best: Option<(usize, u64)> = None;
    column.for_each_chunk(rows, |start, values| {
        if let Some((i, lifted)) = first_lifted_max(values)
            && lifted > best.map_or(0, |(_, b)| b)
        {
            best = Some((start + i, lifted));
        }
    });
    best
}

impl Samples {
    /// Rows one summary value covers: a run's largest reading is found by scanning at most this
    /// many rows, and the summary costs 8 bytes a column for this many rows.
    pub const SUMMARY_ROWS: usize = RUN_ROWS;

    /// An empty table with room for `counters` columns.
    pub fn with_counters(counters: usize) -> Samples {
        Samples {
            times_us: PackedColumn::default(),
            columns: vec![PackedColumn::default(); counters],
            maxima: vec![Vec::new(); counters],
            summarised_rows: 0,
        }
    }

    /// Number of rows (sampling instants).
    pub fn len(&self) -> usize {
        self.times_us.len()
    }

    /// True when no sample was recorded.
    pub fn is_empty(&self) -> bool {
        self.times_us.len() == 0
    }

    /// Timestamps of the rows, non-decreasing.
    pub fn times_us(&self) -> Column<'_> {
        Column(&self.times_us)
    }

    /// The time of row `row`; panics past the end, as indexing does.
    #[inline]
    pub fn time_us(&self, row: usize) -> u64 {
        self.times_us.get(row).expect("a row of the table")
    }

    /// The column of a counter (with [`MISSING`] holes), or `None` for an unknown counter.
    pub fn column(&self, id: CounterId) -> Option<Column<'_>> {
        self.columns.get(id.0 as usize).map(Column)
    }

    /// Value of a counter at a row, `None` when missing.
    pub fn value(&self, id: CounterId, row: usize) -> Option<u64> {
        let v = self.columns.get(id.0 as usize)?.get(row)?;
        (v != MISSING).then_some(v)
    }

    /// The (time, value) points of one counter, skipping missing rows.
    pub fn points(&self, id: CounterId) -> impl Iterator<Item = (u64, u64)> + '_ {
        let column = self.column(id).map(Column::iter);
        self.times_us()
            .iter()
            .zip(column.into_iter().flatten())
            .filter(|(_, v)| *v != MISSING)
    }

    /// The last (time, value) of a counter: read from the end, not through every row (a live
    /// view asks each refresh).
    pub fn last_point(&self, id: CounterId) -> Option<(u64, u64)> {
        let column = self.columns.get(id.0 as usize)?;
        (0..column.len().min(self.times_us.len()))
            .rev()
            .find_map(|row| match column.get(row) {
                Some(v) if v != MISSING => Some((self.time_us(row), v)),
                _ => None,
            })
    }

    /// The row and value of the first largest reading of a counter within `rows` (cut to the
    /// table), or `None` when it has none there. Whole runs of [`Samples::SUMMARY_ROWS`] rows
    /// are judged by their summary; only the ends of `rows` and the run that holds the largest
    /// are scanned.
    pub fn first_max(&self, id: CounterId, rows: Range<usize>) -> Option<(usize, u64)> {
        let column = self.columns.get(id.0 as usize)?;
        let maxima = &self.maxima[id.0 as usize];
        let end = rows.end.min(column.len());
        let start = rows.start.min(end);
        let run = Samples::SUMMARY_ROWS;
        let (first_run, end_run) = (start.div_ceil(run), end / run);
        if first_run >= end_run {
            let (row, best) = first_lifted_max_in(column, start..end)?;
            return Some((row, best - 1));
        }
        // Candidates in row order, as (first row, lifted value); a later one wins only when
        // larger, so the first largest is kept.
        let head = first_lifted_max_in(column, start..first_run * run);
        let mut whole: Option<(usize, u64)> = None;
        for (i, lifted) in maxima[first_run..end_run].iter().enumerate() {
            if *lifted > whole.map_or(0, |(_, best)| best) {
                whole = Some((first_run + i, *lifted));
            }
        }
        let whole = whole.and_then(|(i, _)| first_lifted_max_in(column, i * run..(i + 1) * run));
        let tail = first_lifted_max_in(column, end_run * run..end);
        let mut best: Option<(usize, u64)> = None;
        for candidate in [head, whole, tail].into_iter().flatten() {
            if candidate.1 > best.map_or(0, |(_, v)| v) {
                best = Some(candidate);
            }
        }
        best.map(|(row, lifted)| (row, lifted - 1))
    }

    /// Index of the last row at or before `t_us`, if any.
    pub fn row_at_or_before(&self, t_us: u64) -> Option<usize> {
        self.times_us()
            .partition_point(|t| t <= t_us)
            .checked_sub(1)
    }

    /// How far [`Samples::value_at`] looks back past missing values: a counter that has not been
    /// read for this many rows has no current value.
    pub const MAX_LOOKBACK_ROWS: usize = 64;

    /// The latest present value of a counter at or before `t_us`, looking back at most
    /// [`Samples::MAX_LOOKBACK_ROWS`] rows past missing values.
    pub fn value_at(&self, id: CounterId, t_us: u64) -> Option<u64> {
        self.value_at_row(id, self.row_at_or_before(t_us)?)
    }

    /// The latest present value of a counter at or before `row`, looking back at most
    /// [`Samples::MAX_LOOKBACK_ROWS`] rows past missing values.
    pub fn value_at_row(&self, id: CounterId, row: usize) -> Option<u64> {
        self.reading_at_row(id, row).map(|(_, v)| v)
    }

    /// [`Samples::value_at_row`] with the row it was read in (at or before `row`), for a caller
    /// that must know how old the reading is.
    #[inline]
    pub fn reading_at_row(&self, id: CounterId, row: usize) -> Option<(usize, u64)> {
        let column = self.columns.get(id.0 as usize)?;
        // Most counters are read every row: the reading at `row` itself, without a scan.
        let v = column.get(row)?;
        if v != MISSING {
            return Some((row, v));
        }
        (row.saturating_sub(Samples::MAX_LOOKBACK_ROWS - 1)..row)
            .rev()
            .find_map(|r| column.get(r).filter(|v| *v != MISSING).map(|v| (r, v)))
    }

    /// Appends a row. `values` are (counter, value) pairs; counters not named get [`MISSING`].
    /// Columns grow to fit counter ids not seen before. Rows must come in time order; a row
    /// earlier than the last one is clamped to the last time (clocks never run backwards here).
    pub fn push_row(&mut self, t_us: u64, values: &[(CounterId, u64)]) {
        let t_us = t_us.max(self.times_us().last().unwrap_or(0));
        let row = self.times_us.len();
        self.times_us.tail_mut().push(t_us);
        for (id, v) in values {
            let column = self.column_entry(*id);
            column.set_len(row);
            column.tail_mut().push(*v);
        }
        let run = row / Samples::SUMMARY_ROWS;
        for (column, maxima) in self.columns.iter_mut().zip(&mut self.maxima) {
            column.set_len(row + 1);
            maxima.resize(run + 1, 0);
            maxima[run] = maxima[run].max(lifted(column.get(row).unwrap_or(MISSING)));
        }
        self.summarised_rows = row + 1;
        if (row + 1).is_multiple_of(Samples::SUMMARY_ROWS) {
            self.columns.iter_mut().for_each(PackedColumn::pack);
            self.times_us.pack();
        }
    }

    /// The column of `id`, created (padded with [`MISSING`] to the current row count) when new,
    /// so every column is always as long as [`Samples::times_us`] once a row is complete.
    fn column_entry(&mut self, id: CounterId) -> &mut PackedColumn {
        let index = id.0 as usize;
        let rows = self.times_us.len();
        if self.columns.len() <= index {
            // Packed as far as the others (every run full before the last block).
            let packed = self.summarised_rows / RUN_ROWS * RUN_ROWS;
            let mut column = PackedColumn::missing(packed);
            column.set_len(rows);
            self.columns.resize(index + 1, column);
            let runs = rows.div_ceil(Samples::SUMMARY_ROWS);
            self.maxima.resize(index + 1, vec![0; runs]);
        }
        &mut self.columns[index]
    }

    /// Changes a counter's values in place (created, all [`MISSING`], when new) and summarises
    /// the column again: how a test plants a reading.
    pub fn edit_column(&mut self, id: CounterId, edit: impl FnOnce(&mut [u64])) {
        let column = self.column_entry(id);
        column.unpack_from(0);
        edit(column.tail_mut());
        column.pack();
        let index = id.0 as usize;
        let rows = self.columns[index].len();
        let mut maxima = vec![0; rows.div_ceil(Samples::SUMMARY_ROWS)];
        summarise(&self.columns[index], 0, &mut maxima);
        self.maxima[index] = maxima;
    }

    /// A table of some columns of this one (the same rows, the columns in the order given; an
    /// unknown counter gives a column of [`MISSING`]).
    pub fn select(&self, ids: &[CounterId]) -> Samples {
        let rows = self.times_us.len();
        let (columns, maxima) = ids
            .iter()
            .map(|id| match self.columns.get(id.0 as usize) {
                Some(column) => (column.clone(), self.maxima[id.0 as usize].clone()),
                None => (
                    PackedColumn::missing(rows),
                    vec![0; rows.div_ceil(Samples::SUMMARY_ROWS)],
                ),
            })
            .unzip();
        Samples {
            times_us: self.times_us.clone(),
            columns,
            maxima,
            summarised_rows: rows,
        }
    }

    /// Number of columns (declared or sampled counters).
    pub fn columns(&self) -> usize {
        self.columns.len()
    }

    /// Reserves room for `rows` more rows' runs in the timestamps (the reader knows the row count
    /// of a whole trace before it decodes it).
    pub(crate) fn reserve_rows(&mut self, rows: usize) {
        self.times_us.reserve_runs(rows);
    }

    /// Creates the column of `id` if it is new and reserves room for `rows` more rows' runs in
    /// it (their packed size is known only as they are packed).
    pub(crate) fn reserve_column(&mut self, id: CounterId, rows: usize) {
        self.column_entry(id).reserve_runs(rows);
    }

    /// Appends `times` as new rows (clamped to be non-decreasing) and returns the first new row.
    /// The caller then fills columns with [`Samples::column_for_block`] and closes the block with
    /// [`Samples::end_block`] (or undoes it with [`Samples::truncate`]).
    pub fn begin_block(&mut self, times: &[u64]) -> usize {
        let start = self.times_us.len();
        let mut last = self.times_us().last().unwrap_or(0);
        let tail = self.times_us.tail_mut();
        reserve_gently(tail, times.len());
        tail.extend(times.iter().map(|t| {
            last = last.max(*t);
            last
        }));
        start
    }

    /// The plain end of the column of `id`, cut back to `start` rows, ready to receive a block's
    /// values (pushed onto it).
    pub fn column_for_block(&mut self, id: CounterId, start: usize) -> &mut Vec<u64> {
        let rows = self.times_us.len();
        let column = self.column_entry(id);
        column.set_len(start);
        let tail = column.tail_mut();
        reserve_gently(tail, rows - start);
        tail
    }

    /// Pads every column not filled by the block to the new row count, summarises the block's
    /// rows and packs the runs it filled.
    pub fn end_block(&mut self) {
        let rows = self.times_us.len();
        for column in &mut self.columns {
            column.set_len(rows);
        }
        self.summarise_from(self.summarised_rows);
        self.columns.iter_mut().for_each(PackedColumn::pack);
        self.times_us.pack();
    }

    /// Drops rows from `rows` on (undoes a block that failed to decode).
    pub(crate) fn truncate(&mut self, rows: usize) {
        self.times_us.set_len(rows.min(self.times_us.len()));
        for column in &mut self.columns {
            column.set_len(rows.min(column.len()));
        }
        let run = Samples::SUMMARY_ROWS;
        for maxima in &mut self.maxima {
            // The run cut through is summarised again from its first row.
            maxima.truncate(rows / run);
        }
        self.summarise_from(rows / run * run);
    }

    /// Brings every column's summary up to date with the rows from `from` on, every row before
    /// `from` being summarised already: the run that holds `from` takes the larger of its summary
    /// and the new rows' largest, later runs are summarised from scratch.
    fn summarise_from(&mut self, from: usize) {
        let run = Samples::SUMMARY_ROWS;
        for (column, maxima) in self.columns.iter().zip(&mut self.maxima) {
            maxima.truncate(from / run + 1);
            maxima.resize(column.len().div_ceil(run).max(from / run + 1), 0);
            summarise(column, from, maxima);
            maxima.truncate(column.len().div_ceil(run));
        }
        self.summarised_rows = self.times_us.len();
    }

    /// Total stored cells (rows × columns), used to bound decoding work.
    pub fn cells(&self) -> usize {
        self.times_us.len() * self.columns.len()
    }
}

/// Raises each run's entry of `maxima` (long enough) to the largest lifted value of `column`'s
/// rows from `from` on.
fn summarise(column: &PackedColumn, from: usize, maxima: &mut [u64]) {
    let run = Samples::SUMMARY_ROWS;
    column.for_each_chunk(from..column.len(), |start, values| {
        let mut row = start;
        // The chunk split where runs end.
        let mut rest = values;
        while !rest.is_empty() {
            let take = (run - row % run).min(rest.len());
            let index = row / run;
            maxima[index] = maxima[index].max(lifted_max(&rest[..take]));
            rest = &rest[take..];
            row += take;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The first largest present value by a plain scan.
    fn scanned(column: &[u64], rows: Range<usize>) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for row in rows {
            let v = column[row];
            if v != MISSING && best.is_none_or(|(_, b)| v > b) {
                best = Some((row, v));
            }
        }
        best
    }

    proptest! {
        #[test]
        fn first_max_is_the_scan_s(
            blocks in proptest::collection::vec(
                proptest::collection::vec(proptest::option::weighted(0.8, 0u64..50), 1..3000),
                1..8,
            ),
            cut in 0usize..20_000,
            from in 0usize..20_000,
            len in 0usize..20_000,
        ) {
            let id = CounterId(1);
            let mut samples = Samples::default();
            let mut kept = 0;
            for (i, block) in blocks.iter().enumerate() {
                let start = samples.begin_block(&vec![i as u64; block.len()]);
                let column = samples.column_for_block(id, start);
                column.extend(block.iter().map(|v| v.unwrap_or(MISSING)));
                samples.end_block();
                if i == 0 {
                    kept = samples.len();
                }
            }
            // A failed block cut off, as the reader does.
            if cut % 3 == 0 && samples.len() > kept {
                samples.truncate(kept + cut % (samples.len() - kept));
            }
            let column = samples.column(id).unwrap().to_vec();
            let n = column.len();
            let rows = from.min(n)..(from + len).min(n);
            prop_assert_eq!(samples.first_max(id, rows.clone()), scanned(&column, rows));
            prop_assert_eq!(samples.first_max(id, 0..n), scanned(&column, 0..n));
            // The empty counter 0, padded to the rows, has no reading.
            prop_assert_eq!(samples.first_max(CounterId(0), 0..n), None);
            // Edited in place, summarised again.
            samples.edit_column(id, |c| if let Some(v) = c.last_mut() { *v = 1_000 });
            prop_assert_eq!(samples.first_max(id, 0..n), Some((n - 1, 1_000)));
        }
    }

    #[test]
    fn the_first_largest_present_value() {
        let id = CounterId(0);
        let table = |values: &[u64]| {
            let mut samples = Samples::default();
            let start = samples.begin_block(&vec![0; values.len()]);
            samples.column_for_block(id, start).extend(values);
            samples.end_block();
            samples
        };
        assert_eq!(table(&[1, MISSING, 3, 3]).first_max(id, 0..4), Some((2, 3)));
        assert_eq!(table(&[MISSING, MISSING]).first_max(id, 0..2), None);
        assert_eq!(table(&[]).first_max(id, 0..0), None);
        let top = MISSING - 1;
        assert_eq!(table(&[0, top]).first_max(id, 0..9), Some((1, top)));
        assert_eq!(table(&[0, top]).first_max(CounterId(3), 0..2), None);
    }

    #[test]
    fn rows_pushed_one_by_one_are_summarised() {
        let (a, b) = (CounterId(0), CounterId(2));
        let mut samples = Samples::default();
        for row in 0..10_000u64 {
            let v = if row == 7_000 { 99 } else { row % 50 };
            samples.push_row(row, &[(a, v)]);
        }
        samples.push_row(10_000, &[(b, 5)]);
        assert_eq!(samples.first_max(a, 0..samples.len()), Some((7_000, 99)));
        assert_eq!(samples.first_max(a, 7_001..10_001), Some((7_049, 49)));
        assert_eq!(samples.first_max(b, 0..10_001), Some((10_000, 5)));
        let selected = samples.select(&[b, a]);
        assert_eq!(
            selected.first_max(CounterId(1), 0..10_001),
            Some((7_000, 99))
        );
    }
}

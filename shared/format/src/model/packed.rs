//! A counter's column of readings, packed a run of rows at a time.
//!
//! Why: a watcher holds a whole run's trace in memory, and a day at 100 Hz is 8.64 M rows a
//! counter, 69 MB as plain `u64`s, while the readings of a few thousand rows in a row span few
//! values (GPU memory is the same between the allocator's growths; host memory moves by pages).
//! Each full run of [`RUN_ROWS`] rows is kept as a frame of reference: its smallest reading, the
//! trailing zero bits every reading's distance from it shares, and that many fewer bits for each
//! distance, so a row is still read in constant time. The rows after the last full run stay plain:
//! that is where the reader appends, and what a block that failed to decode is cut back from.

use std::ops::Range;

use super::growth::reserve_gently;

/// Marks an absent value in a packed column: a [`super::Samples`] column's (the counter was not
/// read at that instant), a mark's allocator quantity's (the mark carried no statistics), the
/// analysis's values at marks.
pub const MISSING: u64 = u64::MAX;

/// Rows in one packed run (the same runs [`super::Samples::SUMMARY_ROWS`] summarises).
pub(crate) const RUN_ROWS: usize = 4096;

/// How one run of [`RUN_ROWS`] rows is packed: row `i` holds code `c` (its `bits` bits at bit
/// `i * bits` of the run's words), read as `base + (c << shift)`, or as [`MISSING`] when `c` is
/// `missing_code`. A run whose codes would need all 64 bits is stored as it is (`bits` 64, `base`
/// and `shift` 0, `missing_code` [`MISSING`] itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    base: u64,
    /// Where the run's words start in [`PackedColumn::words`].
    first_word: usize,
    bits: u32,
    shift: u32,
    /// The code of an absent reading; a code no row has when every reading is present.
    missing_code: u64,
}

impl Run {
    /// The code of row `i` of the run in `words` (the run's own words).
    #[inline]
    fn code(&self, words: &[u64], i: usize) -> u64 {
        if self.bits == 0 {
            return 0;
        }
        let bit = i * self.bits as usize;
        let (word, offset) = (bit / 64, (bit % 64) as u32);
        let mut code = words[word] >> offset;
        if offset + self.bits > 64 {
            code |= words[word + 1] << (64 - offset);
        }
        if self.bits == 64 {
            code
        } else {
            code & ((1 << self.bits) - 1)
        }
    }

    #[inline]
    fn value(&self, code: u64) -> u64 {
        if code == self.missing_code {
            MISSING
        } else {
            self.base.wrapping_add(code << self.shift)
        }
    }

    /// Words the run takes: its codes (a whole number of words, as [`RUN_ROWS`] is a multiple of
    /// 64), and one more but for a run of one value, so that a code is always read from two
    /// words, without a branch.
    fn words(&self) -> usize {
        match self.bits {
            0 => 0,
            64 => RUN_ROWS,
            bits => RUN_ROWS * bits as usize / 64 + 1,
        }
    }
}

/// A column of readings ([`MISSING`] where absent): full runs packed, then the plain rows after.
/// The table's columns are these; so is any long column of readings an analysis keeps (read
/// through [`PackedColumn::view`]).
#[derive(Debug, Clone, Default)]
pub struct PackedColumn {
    runs: Vec<Run>,
    words: Vec<u64>,
    /// The rows after the last packed run.
    tail: Vec<u64>,
}

impl PackedColumn {
    /// `values`, packed.
    pub fn from_values(values: Vec<u64>) -> PackedColumn {
        let mut column = PackedColumn {
            tail: values,
            ..PackedColumn::default()
        };
        column.pack();
        column.tail.shrink_to_fit();
        column.words.shrink_to_fit();
        column
    }

    /// Appends `value` ([`MISSING`] for an absent one), packing the tail once it is a full run:
    /// a column built row by row never holds more than a run plain.
    pub fn push(&mut self, value: u64) {
        reserve_gently(&mut self.tail, 1);
        self.tail.push(value);
        if self.tail.len() == RUN_ROWS {
            self.pack();
        }
    }

    /// Cuts the column to its first `rows` rows (nothing when it is no longer): a reader that
    /// re-reads its last rows (a live analysis extending what it read of a growing trace) cuts
    /// them first. The run cut through is unpacked.
    pub fn truncate(&mut self, rows: usize) {
        if rows < self.len() {
            self.set_len(rows);
        }
    }

    /// Gives back what the column reserved beyond its rows.
    pub fn shrink_to_fit(&mut self) {
        self.tail.shrink_to_fit();
        self.words.shrink_to_fit();
        self.runs.shrink_to_fit();
    }

    /// Words the packed runs take.
    #[cfg(test)]
    pub(crate) fn heap_words(&self) -> usize {
        self.words.len()
    }

    /// The column, to read.
    pub fn view(&self) -> Column<'_> {
        Column(self)
    }

    /// A column of `rows` absent readings.
    pub(crate) fn missing(rows: usize) -> PackedColumn {
        let mut column = PackedColumn::default();
        column.tail.resize(rows % RUN_ROWS, MISSING);
        let run = Run {
            base: 0,
            first_word: 0,
            bits: 0,
            shift: 0,
            missing_code: 0,
        };
        column.runs = vec![run; rows / RUN_ROWS];
        column
    }

    pub(crate) fn len(&self) -> usize {
        self.packed_rows() + self.tail.len()
    }

    /// Rows held in packed runs (a multiple of [`RUN_ROWS`]).
    pub(crate) fn packed_rows(&self) -> usize {
        self.runs.len() * RUN_ROWS
    }

    /// The reading at `row` ([`MISSING`] when absent), `None` past the end.
    #[inline]
    pub(crate) fn get(&self, row: usize) -> Option<u64> {
        match self.runs.get(row / RUN_ROWS) {
            Some(run) => Some(run.value(run.code(&self.words[run.first_word..], row % RUN_ROWS))),
            None => self.tail.get(row - self.packed_rows()).copied(),
        }
    }

    /// The first row from `from` on whose reading is neither `value` nor [`MISSING`]: a packed
    /// run of one reading is passed over whole, the others are read where they lie (the marks'
    /// allocator statistics hold one reserved size for thousands of marks at a time).
    pub(crate) fn first_other(&self, from: usize, value: u64) -> Option<usize> {
        let other = |v: u64| v != value && v != MISSING;
        let packed = self.packed_rows();
        let mut row = from;
        while row < packed {
            let first = row / RUN_ROWS * RUN_ROWS;
            let run = self.runs[row / RUN_ROWS];
            if run.bits == 0 {
                if other(run.value(0)) {
                    return Some(row);
                }
            } else {
                let words = &self.words[run.first_word..];
                let found = (row - first..RUN_ROWS).find(|&i| other(run.value(run.code(words, i))));
                if let Some(i) = found {
                    return Some(first + i);
                }
            }
            row = first + RUN_ROWS;
        }
        let plain = self.tail.get(row - packed..)?;
        plain.iter().position(|v| other(*v)).map(|i| row + i)
    }

    /// Decodes packed run `run` into `out` (cleared first).
    fn decode_run(&self, run: usize, out: &mut Vec<u64>) {
        let run = self.runs[run];
        out.clear();
        let words = &self.words[run.first_word..run.first_word + run.words()];
        match run.bits {
            0 => out.resize(RUN_ROWS, run.value(0)),
            64 => out.extend_from_slice(words),
            bits => {
                let mask = (1u64 << bits) - 1;
                let code = |i: usize| {
                    let bit = i * bits as usize;
                    let (word, offset) = (bit / 64, (bit % 64) as u32);
                    // The next word's bits shifted in by two steps (a shift by 64 is none).
                    ((words[word] >> offset) | ((words[word + 1] << 1) << (63 - offset))) & mask
                };
                if run.missing_code == MISSING {
                    // Every row read: no code to tell apart.
                    out.extend((0..RUN_ROWS).map(|i| run.base.wrapping_add(code(i) << run.shift)));
                } else {
                    out.extend((0..RUN_ROWS).map(|i| run.value(code(i))));
                }
            }
        }
    }

    /// The plain rows after the packed runs, where rows are appended.
    pub(crate) fn tail_mut(&mut self) -> &mut Vec<u64> {
        &mut self.tail
    }

    /// Makes every row from the run that holds `row` on plain again (the tail), so rows from
    /// `row` on can be cut or changed.
    pub(crate) fn unpack_from(&mut self, row: usize) {
        let first = row / RUN_ROWS;
        if first >= self.runs.len() {
            return;
        }
        let mut plain = Vec::with_capacity((self.runs.len() - first) * RUN_ROWS + self.tail.len());
        let mut run_rows = Vec::with_capacity(RUN_ROWS);
        for run in first..self.runs.len() {
            self.decode_run(run, &mut run_rows);
            plain.extend_from_slice(&run_rows);
        }
        plain.append(&mut self.tail);
        self.words.truncate(self.runs[first].first_word);
        self.runs.truncate(first);
        self.tail = plain;
    }

    /// Packs the tail's full runs, leaving the rows after them plain.
    pub(crate) fn pack(&mut self) {
        let full = self.tail.len() / RUN_ROWS;
        if full == 0 {
            return;
        }
        for chunk in self.tail[..full * RUN_ROWS].chunks_exact(RUN_ROWS) {
            let run = pack_run(chunk, &mut self.words);
            self.runs.push(run);
        }
        self.tail.drain(..full * RUN_ROWS);
    }

    /// Calls `f` with each stretch of `rows` (cut to the column) in order, as (first row, values):
    /// every stretch but the first starts a run of [`RUN_ROWS`] rows, and none goes past one.
    pub(crate) fn for_each_chunk(&self, rows: Range<usize>, mut f: impl FnMut(usize, &[u64])) {
        let mut buffer = Vec::new();
        for window in windows(rows, self.len()) {
            f(window.start, self.window(window, &mut buffer));
        }
    }

    /// The readings of `rows`, which lie within one run of [`RUN_ROWS`] rows: borrowed when
    /// plain, decoded into `buffer` when packed.
    fn window<'b>(&'b self, rows: Range<usize>, buffer: &'b mut Vec<u64>) -> &'b [u64] {
        let packed = self.packed_rows();
        if rows.start >= packed {
            return &self.tail[rows.start - packed..rows.end - packed];
        }
        let run = rows.start / RUN_ROWS;
        self.decode_run(run, buffer);
        &buffer[rows.start - run * RUN_ROWS..rows.end - run * RUN_ROWS]
    }

    /// Makes the column `rows` long: cut (unpacking the run cut through), or padded with
    /// [`MISSING`].
    pub(crate) fn set_len(&mut self, rows: usize) {
        if rows < self.packed_rows() {
            self.unpack_from(rows);
        }
        let tail_rows = rows - self.packed_rows();
        let more = tail_rows.saturating_sub(self.tail.len());
        reserve_gently(&mut self.tail, more);
        self.tail.resize(tail_rows, MISSING);
    }

    /// Makes room for `rows` more rows' runs.
    pub(crate) fn reserve_runs(&mut self, rows: usize) {
        self.runs.reserve(rows / RUN_ROWS);
    }
}

/// A packed column, to read: a counter's in a [`super::Samples`] table (its readings, [`MISSING`]
/// where absent), the table's times, a quantity of the marks' allocator statistics.
#[derive(Debug, Clone, Copy)]
pub struct Column<'a>(pub(crate) &'a PackedColumn);

impl<'a> Column<'a> {
    /// Number of rows.
    pub fn len(self) -> usize {
        self.0.len()
    }

    /// True when the column has no row.
    pub fn is_empty(self) -> bool {
        self.0.len() == 0
    }

    /// The reading at `row` ([`MISSING`] when absent), `None` past the end.
    #[inline]
    pub fn get(self, row: usize) -> Option<u64> {
        self.0.get(row)
    }

    /// The reading at `row`; panics past the end, as indexing a slice does.
    #[inline]
    pub fn at(self, row: usize) -> u64 {
        self.0.get(row).expect("a row of the column")
    }

    /// The first row from `from` on whose reading is neither `value` nor [`MISSING`], without
    /// reading each row of a run that holds one reading throughout.
    pub fn first_other(self, from: usize, value: u64) -> Option<usize> {
        self.0.first_other(from, value)
    }

    /// The first row's reading.
    pub fn first(self) -> Option<u64> {
        self.0.get(0)
    }

    /// The last row's reading.
    pub fn last(self) -> Option<u64> {
        self.0.get(self.len().checked_sub(1)?)
    }

    /// The number of rows from the start for which `pred` holds, `pred` holding for a first
    /// stretch of rows and for none after it (a column in order: timestamps): runs are told
    /// apart by their first rows, then the run is bisected, a few rows read where they lie.
    pub fn partition_point(self, pred: impl Fn(u64) -> bool) -> usize {
        let column = self.0;
        let runs = column.runs.len();
        // The first run whose first row fails: every row before it (but its predecessor's
        // later rows) holds.
        let (mut lo, mut hi) = (0, runs);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if pred(column.get(mid * RUN_ROWS).unwrap_or(MISSING)) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == runs {
            // Past every packed run's first row: in the last packed run or the tail.
            let tail = column.tail.partition_point(|v| pred(*v));
            if tail > 0 || lo == 0 {
                return column.packed_rows() + tail;
            }
        }
        if lo == 0 {
            return 0;
        }
        // In run `lo - 1`, whose first row holds.
        let run = lo - 1;
        let (mut a, mut b) = (run * RUN_ROWS + 1, (run + 1) * RUN_ROWS);
        while a < b {
            let mid = (a + b) / 2;
            if pred(column.get(mid).unwrap_or(MISSING)) {
                a = mid + 1;
            } else {
                b = mid;
            }
        }
        a
    }

    /// The readings of every row, in order.
    pub fn iter(self) -> ColumnIter<'a> {
        self.range(0..self.len())
    }

    /// The readings of `rows` (cut to the column), in order.
    pub fn range(self, rows: Range<usize>) -> ColumnIter<'a> {
        let end = rows.end.min(self.len());
        ColumnIter {
            column: self.0,
            row: rows.start.min(end),
            end,
            buffer: Vec::new(),
            buffer_run: usize::MAX,
        }
    }

    /// A packed copy of the column, to keep.
    pub fn to_packed(self) -> PackedColumn {
        self.0.clone()
    }

    /// The readings as a plain vector.
    pub fn to_vec(self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.len());
        self.for_each_chunk(0..self.len(), |_, values| out.extend_from_slice(values));
        out
    }

    /// Calls `f` with each stretch of `rows` (cut to the column) in order, as (first row,
    /// readings): the fastest way through many rows.
    pub fn for_each_chunk(self, rows: Range<usize>, f: impl FnMut(usize, &[u64])) {
        self.0.for_each_chunk(rows, f);
    }

    /// [`Column::for_each_chunk`] through two columns side by side (cut to the shorter), as
    /// (first row, this column's readings, the other's), the two stretches the same rows.
    pub fn zip_chunks(
        self,
        other: Column<'_>,
        rows: Range<usize>,
        mut f: impl FnMut(usize, &[u64], &[u64]),
    ) {
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        for window in windows(rows, self.len().min(other.len())) {
            let start = window.start;
            f(
                start,
                self.0.window(window.clone(), &mut mine),
                other.0.window(window, &mut theirs),
            );
        }
    }
}

/// Rows of a run an iterator must read for it to decode the whole run rather than read each.
const DECODE_MIN_ROWS: usize = 256;

/// The readings of a [`Column`]'s rows: a packed run is decoded once, when its first row is read
/// (unless only a few of its rows are).
#[derive(Debug, Clone)]
pub struct ColumnIter<'a> {
    column: &'a PackedColumn,
    row: usize,
    end: usize,
    buffer: Vec<u64>,
    /// The run decoded in `buffer`.
    buffer_run: usize,
}

impl Iterator for ColumnIter<'_> {
    type Item = u64;

    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.row >= self.end {
            return None;
        }
        let row = self.row;
        self.row += 1;
        let packed = self.column.packed_rows();
        if row >= packed {
            return Some(self.column.tail[row - packed]);
        }
        let run = row / RUN_ROWS;
        if run != self.buffer_run {
            // A few rows of a run are read where they lie; more, and the run is decoded once.
            if self.end.min((run + 1) * RUN_ROWS) - row < DECODE_MIN_ROWS {
                return self.column.get(row);
            }
            self.column.decode_run(run, &mut self.buffer);
            self.buffer_run = run;
        }
        Some(self.buffer[row % RUN_ROWS])
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.row;
        (left, Some(left))
    }
}

impl DoubleEndedIterator for ColumnIter<'_> {
    fn next_back(&mut self) -> Option<u64> {
        if self.row >= self.end {
            return None;
        }
        self.end -= 1;
        self.column.get(self.end)
    }
}

impl ExactSizeIterator for ColumnIter<'_> {}

/// `rows` (cut to `len` rows) cut where runs of [`RUN_ROWS`] rows end.
fn windows(rows: Range<usize>, len: usize) -> impl Iterator<Item = Range<usize>> {
    let end = rows.end.min(len);
    let mut row = rows.start.min(end);
    std::iter::from_fn(move || {
        (row < end).then(|| {
            let stop = ((row / RUN_ROWS + 1) * RUN_ROWS).min(end);
            let window = row..stop;
            row = stop;
            window
        })
    })
}

/// Packs one run of [`RUN_ROWS`] values onto the end of `words`.
fn pack_run(values: &[u64], words: &mut Vec<u64>) -> Run {
    let first_word = words.len();
    let (mut min, mut max, mut missing) = (MISSING, 0, false);
    for &v in values {
        if v == MISSING {
            missing = true;
        } else {
            min = min.min(v);
            max = max.max(v);
        }
    }
    if min == MISSING {
        // Nothing read in the run: every row is the one code, 0.
        return Run {
            base: 0,
            first_word,
            bits: 0,
            shift: 0,
            missing_code: 0,
        };
    }
    let distances = values
        .iter()
        .filter(|v| **v != MISSING)
        .fold(0, |all, v| all | (v - min));
    let shift = if distances == 0 {
        0
    } else {
        distances.trailing_zeros()
    };
    // Present values are below MISSING, so the largest code plus one cannot overflow.
    let top = (max - min) >> shift;
    let last_code = top + u64::from(missing);
    let bits = 64 - last_code.leading_zeros();
    if bits == 64 {
        reserve_gently(words, RUN_ROWS);
        words.extend_from_slice(values);
        return Run {
            base: 0,
            first_word,
            bits: 64,
            shift: 0,
            missing_code: MISSING,
        };
    }
    let run = Run {
        base: min,
        first_word,
        bits,
        shift,
        missing_code: if missing { top + 1 } else { MISSING },
    };
    reserve_gently(words, run.words());
    words.resize(first_word + run.words(), 0);
    let out = &mut words[first_word..];
    if bits > 0 {
        for (i, &v) in values.iter().enumerate() {
            let code = if v == MISSING {
                run.missing_code
            } else {
                (v - min) >> shift
            };
            let bit = i * bits as usize;
            let (word, offset) = (bit / 64, (bit % 64) as u32);
            out[word] |= code << offset;
            if offset + bits > 64 {
                out[word + 1] |= code >> (64 - offset);
            }
        }
    }
    run
}

impl PartialEq for PackedColumn {
    /// The same readings, however they are packed.
    fn eq(&self, other: &PackedColumn) -> bool {
        self.len() == other.len() && (0..self.len()).all(|row| self.get(row) == other.get(row))
    }
}

impl Eq for PackedColumn {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn packed(values: &[u64]) -> PackedColumn {
        let mut column = PackedColumn::default();
        column.tail_mut().extend_from_slice(values);
        column.pack();
        column
    }

    fn read(column: &PackedColumn) -> Vec<u64> {
        let mut out = Vec::new();
        column.for_each_chunk(0..column.len(), |row, values| {
            assert_eq!(row, out.len());
            out.extend_from_slice(values);
        });
        out
    }

    proptest! {
        /// The first other reading is the first a plain scan finds, from any row.
        #[test]
        fn the_first_other_reading_is_the_scan_s(
            stretches in proptest::collection::vec((0u64..3, 1usize..2 * RUN_ROWS), 1..6),
            from in 0usize..6 * RUN_ROWS,
        ) {
            // Stretches of one reading each (0: absent), some a whole run or more.
            let values: Vec<u64> = stretches
                .iter()
                .flat_map(|&(v, rows)| {
                    std::iter::repeat_n(if v == 0 { MISSING } else { v << 21 }, rows)
                })
                .collect();
            let column = packed(&values);
            for value in [1 << 21, 2 << 21] {
                let scan = (from..values.len()).find(|&i| values[i] != value && values[i] != MISSING);
                prop_assert_eq!(column.first_other(from, value), scan);
            }
        }

        #[test]
        fn packed_runs_read_back_as_written(
            base in prop_oneof![Just(0u64), any::<u64>().prop_map(|v| v / 2)],
            step_bits in 0u32..64,
            spread in prop_oneof![Just(0u64), 0u64..4, any::<u64>()],
            missing in prop_oneof![Just(0.0f64), 0.0f64..1.0, Just(1.0)],
            rows in 0usize..3 * RUN_ROWS,
            seed in any::<u64>(),
            cut in 0usize..3 * RUN_ROWS,
        ) {
            let mut state = seed | 1;
            let mut next = || {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state
            };
            let values: Vec<u64> = (0..rows)
                .map(|_| {
                    if (next() % 1000) as f64 / 1000.0 < missing {
                        MISSING
                    } else {
                        let distance = if spread == 0 { 0 } else { next() % spread };
                        base.wrapping_add(distance << step_bits.min(distance.leading_zeros()))
                            .min(MISSING - 1)
                    }
                })
                .collect();
            let mut column = packed(&values);
            prop_assert_eq!(column.len(), values.len());
            prop_assert_eq!(column.packed_rows(), rows / RUN_ROWS * RUN_ROWS);
            for (row, v) in values.iter().enumerate() {
                prop_assert_eq!(column.get(row), Some(*v));
            }
            prop_assert_eq!(column.get(rows), None);
            prop_assert_eq!(read(&column), values.clone());
            // Cut back, as a block that failed is, then grown again.
            let cut = cut.min(rows);
            column.set_len(cut);
            prop_assert_eq!(read(&column), values[..cut].to_vec());
            column.tail_mut().extend_from_slice(&values[cut..]);
            column.pack();
            prop_assert_eq!(read(&column), values.clone());
            prop_assert!(column == packed(&values));
            // Built a row at a time, as the marks' values are.
            let mut pushed = PackedColumn::default();
            values.iter().for_each(|v| pushed.push(*v));
            pushed.shrink_to_fit();
            prop_assert_eq!(pushed.packed_rows(), rows / RUN_ROWS * RUN_ROWS);
            prop_assert_eq!(read(&pushed), values.clone());
        }
    }

    #[test]
    fn partition_points_at_run_boundaries_are_the_slices() {
        for rows in [
            0,
            1,
            RUN_ROWS - 1,
            RUN_ROWS,
            RUN_ROWS + 1,
            2 * RUN_ROWS,
            2 * RUN_ROWS + 7,
        ] {
            let values: Vec<u64> = (0..rows as u64).map(|i| 10 * i).collect();
            let column = packed(&values);
            for t in [
                0,
                5,
                10 * (RUN_ROWS as u64) - 10,
                10 * RUN_ROWS as u64,
                u64::MAX - 1,
            ] {
                let t = t.min(10 * rows as u64 + 3);
                assert_eq!(
                    column.view().partition_point(|v| v <= t),
                    values.partition_point(|v| *v <= t),
                    "{rows} rows, {t}"
                );
            }
        }
    }

    #[test]
    fn steady_readings_take_few_bits() {
        let mib = 1 << 20;
        let values: Vec<u64> = (0..4 * RUN_ROWS as u64)
            .map(|i| 40_000 * mib + (i % 7) * mib)
            .collect();
        let column = packed(&values);
        // Seven values a MiB apart: 3 bits a row, not 64 (and a word after each run's codes).
        assert_eq!(column.words.len(), 4 * (RUN_ROWS * 3 / 64 + 1));
        assert_eq!(read(&column), values);
        let absent = PackedColumn::missing(RUN_ROWS + 3);
        assert_eq!(read(&absent), vec![MISSING; RUN_ROWS + 3]);
        assert!(absent.words.is_empty());
        // Read through the view, both ways.
        let view = Column(&column);
        assert_eq!(view.iter().collect::<Vec<_>>(), values);
        assert_eq!(
            view.range(5..RUN_ROWS + 9).next_back(),
            Some(values[RUN_ROWS + 8])
        );
        assert_eq!(view.to_vec(), values);
    }
}

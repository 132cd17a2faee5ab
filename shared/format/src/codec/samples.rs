//! The SAMPLES record: counter readings, column-encoded in blocks (layout in FORMAT.md,
//! "SAMPLES: column-encoded blocks"). Its encoder and decoder side by side, as `records` keeps
//! every other record's: a change to the layout is one screen here, held together by the
//! round-trip tests. The writer decides when a block ends and the reader what a block may cost;
//! neither knows the layout.
//!
//! Why columns: one counter's readings change little from row to row, so a column is its first
//! value, the GCD of its deltas and the scaled deltas (a constant column costs nothing a row),
//! and timestamps are residuals from the block's mean period.

use super::{MAX_BLOCK_ROWS, MAX_COUNTERS};
use crate::model::{CounterId, MISSING};
use crate::varint::{Cursor, ReadError, put_u64, zigzag};

/// Rows of samples waiting to be column-encoded. All rows share one counter set.
#[derive(Debug, Default)]
pub(super) struct PendingBlock {
    ids: Vec<CounterId>,
    times_us: Vec<u64>,
    /// Row-major values, `ids.len()` per row.
    values: Vec<u64>,
}

impl PendingBlock {
    /// Whether a row of these counters joins the block (the same set, in the same order).
    pub(super) fn takes(&self, values: &[(CounterId, u64)]) -> bool {
        self.ids.len() == values.len() && self.ids.iter().zip(values).all(|(a, (b, _))| a == b)
    }

    /// Starts an (empty) block for this counter set.
    pub(super) fn start(&mut self, values: &[(CounterId, u64)]) {
        self.ids.clear();
        self.ids.extend(values.iter().map(|(id, _)| *id));
    }

    /// Appends a row (of the block's counter set). `u64::MAX`, the in-memory "missing" marker,
    /// is stored as `u64::MAX - 1`.
    pub(super) fn push_row(&mut self, t_us: u64, values: &[(CounterId, u64)]) {
        self.times_us.push(t_us);
        self.values
            .extend(values.iter().map(|(_, v)| (*v).min(MISSING - 1)));
    }

    /// Rows pending.
    pub(super) fn rows(&self) -> usize {
        self.times_us.len()
    }

    /// Encodes the pending rows as a SAMPLES body into `body` (cleared first) and empties the
    /// block; false when there was nothing to encode.
    pub(super) fn encode(&mut self, body: &mut Vec<u8>) -> bool {
        let rows = self.times_us.len();
        if rows == 0 {
            return false;
        }
        let cols = self.ids.len();
        body.clear();
        put_u64(body, rows as u64);
        put_u64(body, cols as u64);
        for id in &self.ids {
            put_u64(body, u64::from(id.0));
        }
        let times = &self.times_us;
        put_u64(body, times[0]);
        if rows > 1 {
            let base_dt = (times[rows - 1] - times[0]) / (rows as u64 - 1);
            put_u64(body, base_dt);
            for pair in times.windows(2) {
                let dt = pair[1] - pair[0];
                put_u64(body, zigzag(dt.wrapping_sub(base_dt) as i64));
            }
        }
        for col in 0..cols {
            let column = self.values[col..].iter().step_by(cols);
            encode_column(body, column, rows);
        }
        self.times_us.clear();
        self.values.clear();
        true
    }
}

/// One column: first value, then a scale (the GCD of all deltas; 0 when the column is constant,
/// in which case nothing more is written), then each delta divided by the scale, zigzagged.
/// Deltas are wrapping `u64` differences read as `i64`, so every value round-trips exactly.
fn encode_column<'a>(
    body: &mut Vec<u8>,
    column: impl Iterator<Item = &'a u64> + Clone,
    rows: usize,
) {
    let mut values = column.clone();
    let Some(&first) = values.next() else {
        return;
    };
    put_u64(body, first);
    let mut scale = 0u64;
    let mut prev = first;
    for &v in values {
        scale = gcd(scale, (v.wrapping_sub(prev) as i64).unsigned_abs());
        prev = v;
    }
    put_u64(body, scale);
    if scale == 0 || rows < 2 {
        return;
    }
    let mut prev = first;
    for &v in column.skip(1) {
        let delta = v.wrapping_sub(prev) as i64;
        // `scale` divides |delta| exactly; i128 keeps i64::MIN / 1 from overflowing.
        let quotient = (i128::from(delta) / i128::from(scale)) as i64;
        put_u64(body, zigzag(quotient));
        prev = v;
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// A block's row count and counter ids, checked against the format's limits.
pub(super) fn read_header(c: &mut Cursor<'_>) -> Result<(usize, Vec<CounterId>), ReadError> {
    let rows = c.count(1)?;
    let cols = c.count(1)?;
    if rows == 0 || rows > MAX_BLOCK_ROWS || cols > MAX_COUNTERS {
        return Err(ReadError::Overlong);
    }
    let mut ids = Vec::with_capacity(cols);
    for _ in 0..cols {
        let id = c.u32()? as usize;
        if id >= MAX_COUNTERS {
            return Err(ReadError::Overlong);
        }
        ids.push(CounterId(id as u32));
    }
    Ok((rows, ids))
}

/// A block's `rows` timestamps into `times` (cleared first).
pub(super) fn read_times(
    c: &mut Cursor<'_>,
    rows: usize,
    times: &mut Vec<u64>,
) -> Result<(), ReadError> {
    times.clear();
    let mut t = c.u64()?;
    times.push(t);
    if rows > 1 {
        let base_dt = c.u64()?;
        for _ in 1..rows {
            let dt = base_dt.wrapping_add(c.i64()? as u64);
            t = t.saturating_add(dt);
            times.push(t);
        }
    }
    Ok(())
}

/// One column of `rows` values, appended to `column`.
#[inline]
pub(super) fn read_column(
    c: &mut Cursor<'_>,
    column: &mut Vec<u64>,
    rows: usize,
) -> Result<(), ReadError> {
    column.reserve(rows);
    let first = c.u64()?;
    let scale = c.u64()?;
    column.push(first);
    if scale == 0 {
        column.resize(column.len() + rows - 1, first);
        return Ok(());
    }
    let scale = scale as i64;
    let mut v = first;
    for _ in 1..rows {
        v = v.wrapping_add(c.i64()?.wrapping_mul(scale) as u64);
        column.push(v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcd_handles_zero() {
        assert_eq!(gcd(0, 12), 12);
        assert_eq!(gcd(12, 0), 12);
        assert_eq!(gcd(0, 0), 0);
    }

    #[test]
    fn a_block_reads_back_as_written() {
        let ids = [(CounterId(0), 0), (CounterId(3), 0)];
        let mut block = PendingBlock::default();
        block.start(&ids);
        let rows = [(10, [5, 7]), (20, [5, 9]), (31, [5, u64::MAX])];
        for (t, [a, b]) in rows {
            block.push_row(t, &[(CounterId(0), a), (CounterId(3), b)]);
        }
        let mut body = Vec::new();
        assert!(block.encode(&mut body));
        assert!(!block.encode(&mut body), "emptied");
        let mut c = Cursor::new(&body);
        let (n, read_ids) = read_header(&mut c).unwrap();
        assert_eq!((n, read_ids), (3, vec![CounterId(0), CounterId(3)]));
        let mut times = Vec::new();
        read_times(&mut c, n, &mut times).unwrap();
        assert_eq!(times, [10, 20, 31]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        read_column(&mut c, &mut a, n).unwrap();
        read_column(&mut c, &mut b, n).unwrap();
        assert_eq!(a, [5, 5, 5]);
        assert_eq!(b, [7, 9, MISSING - 1]);
        assert!(c.is_empty());
    }
}

//! Writing a decoded trace back to bytes, and thinning its samples until it fits a size and a
//! number of rows.
//!
//! Why: `collector report` embeds the trace (base64) in one HTML file that must stay under ~5 MB
//! so it can be attached to a bug ticket, and open at once. An hour sampled at 1 kHz is ~14 MB
//! and does not compress below ~7 MB (timestamp jitter is real entropy), and the page's read,
//! decode, chart and analysis grow with its 3.6 M rows, so the report embeds a *thinned copy*:
//! every record that is not a sample is kept exactly, and of the sample rows only those the
//! analysis and the charts need. The viewer says that samples were thinned when
//! [`Thinned::rows_kept`] is below [`Thinned::rows_total`].
//!
//! - [`encode`] writes a decoded [`Trace`] back through [`TraceWriter`], losslessly.
//! - [`thin_samples`] keeps a chosen subset of the sample rows (what and why is documented there).
//! - [`fit`] thins as little as it can so that the packed encoding fits [`FitLimits`] (bytes and
//!   rows); [`fit_to_size`] is the same for plain bytes.

use oomscope_analysis::facts::counter_with_data;
use oomscope_analysis::facts::host_memory;
use oomscope_format::AllocatorQuantity;
use oomscope_format::EncodeError;
use oomscope_format::codec::MAX_BLOCK_ROWS;
use oomscope_format::{CounterId, CounterKind, MISSING, Samples, Trace};
use oomscope_format::{TraceWriter, WriterOptions};

/// Writer tuning for re-encoding. No time-based flushes: nothing can crash half-way here, and every
/// flush also ends the pending sample block, whose header (~50 bytes for 6 counters) would cost
/// more than the few rows a thinned trace has in each half second. Longer blocks and chunks
/// compress a little better; chunks stay far below the reader's 4 MiB limit.
const ENCODE_OPTIONS: WriterOptions = WriterOptions {
    flush_interval_us: u64::MAX,
    chunk_target_bytes: 256 << 10,
    block_rows: MAX_BLOCK_ROWS,
};

/// Writes `trace` back to bytes: `decode(&encode(&t)?)?.trace == t` for every `t` that came from
/// [`oomscope_format::decode`], with these documented differences:
///
/// - `format_version` becomes the version this crate writes (the bytes are written by it);
/// - a trace without an end record (`end_us == None`: the recorder crashed, was killed or the file
///   was cut off) is written without one too, so the copy still says the recording did not
///   finish cleanly (decoding it gives `end_us == None` and that warning, and no truncation
///   warning, since the copy itself is complete);
/// - a sample column that holds no present value at all cannot be written (a block stores values,
///   not holes), so trailing such columns are absent from the copy. Decoded traces never have one
///   unless the file stored the raw value `u64::MAX`, which reads as missing anyway.
///
/// Counters are declared in order, names are interned as the records use them, and records are
/// written in time order with the samples interleaved, as a recorder writes them: the
/// writer clamps a sample that is earlier than the last record written to that record's time, so
/// every sample row is written before any record later than it. Records of one kind keep their
/// order even when it is not time order.
pub fn encode(trace: &Trace) -> Result<Vec<u8>, EncodeError> {
    let mut out = Vec::new();
    let mut w = TraceWriter::with_options(&mut out, &trace.metadata, ENCODE_OPTIONS)?;
    for c in &trace.counters {
        w.declare_counter_named(c.kind, c.device, c.pid, &c.name)?;
    }
    let mut rows = RowWriter::new(&trace.samples);
    for record in trace.records_in_time() {
        rows.write_through(&mut w, record.t_us())?;
        w.write(&record)?;
    }
    rows.write_through(&mut w, u64::MAX)?;
    match trace.end_us {
        Some(t_us) => {
            w.finish(t_us)?;
        }
        None => w.flush()?,
    }
    Ok(out)
}

/// Writes sample rows in order, skipping missing cells (a row's counter set is what it holds).
struct RowWriter {
    times_us: Vec<u64>,
    columns: Vec<Vec<u64>>,
    next_row: usize,
    values: Vec<(CounterId, u64)>,
}

impl RowWriter {
    fn new(samples: &Samples) -> RowWriter {
        RowWriter {
            times_us: samples.times_us().to_vec(),
            columns: columns(samples),
            next_row: 0,
            values: Vec::with_capacity(samples.columns()),
        }
    }

    /// Writes every row not written yet whose time is at or before `t_us`.
    fn write_through<W: std::io::Write>(
        &mut self,
        w: &mut TraceWriter<W>,
        t_us: u64,
    ) -> Result<(), EncodeError> {
        while let Some(&row_t_us) = self.times_us.get(self.next_row) {
            if row_t_us > t_us {
                break;
            }
            let row = self.next_row;
            self.values.clear();
            self.values.extend(
                self.columns
                    .iter()
                    .enumerate()
                    .filter(|(_, column)| column[row] != MISSING)
                    .map(|(id, column)| (CounterId(id as u32), column[row])),
            );
            w.sample(row_t_us, &self.values)?;
            self.next_row += 1;
        }
        Ok(())
    }
}

/// Every column of `samples`, in counter order, unpacked: choosing rows reads them many times
/// over, row by row.
fn columns(samples: &Samples) -> Vec<Vec<u64>> {
    (0..samples.columns())
        .map(|id| {
            samples
                .column(CounterId(id as u32))
                .map(oomscope_format::Column::to_vec)
                .unwrap_or_default()
        })
        .collect()
}

/// A copy of `trace` with at most about `max_rows` sample rows; an unchanged clone when it has no
/// more than that. Every other record is kept as it is.
///
/// Rows kept, and why:
///
/// 1. **Mandatory rows**, kept whatever `max_rows` says:
///    - the first and the last row (the sampled time span), and each counter's first and last
///      present value;
///    - for every stage mark, OOM event, note, batch trial, component breakdown and the exit, and
///      for the time of each counter's last present value, the row at or before that instant, so
///      every "latest sample at or before" the analysis reads ([`Samples::value_at`]: memory at
///      each mark, the context of an OOM, the host limit of a leak) is unchanged;
///    - the rows the analysis reads one by one ([`oomscope_analysis::facts::rows_read`]): the
///      floors the over-time trends read, and each repeat's floor and peak the symptoms read;
///    - the rows where the whole-trace scans of derived quantities find their extremes, which no
///      single counter's extremes need be: the host's tightest moment (available against RSS),
///      and the allocator's largest reserved − allocated gap and its reserved and allocated peaks
///      over the rows that have both;
///    - the first minimum and first maximum of every counter (below);
///    - where such an instant had no value for a counter because its last one was more than
///      [`Samples::MAX_LOOKBACK_ROWS`] rows back (only in traces with missing cells), those many
///      rows before it, all missing, so the lookback of `value_at` still ends empty instead of
///      reaching the older value (one window per run of missing cells).
/// 2. **Envelope rows**: the sampled time span is split into `B` equal buckets, and within each,
///    for each counter, the row of its first minimum and its first maximum are kept, so every
///    counter's global peak and trough (and the time it was first reached) survive, and a chart's
///    min/max envelope keeps its shape at `B` buckets' resolution. `B` starts at the rows left
///    after the mandatory ones divided by 2 × the number of counters (at least 1), and grows
///    while counters sharing rows (a constant counter's extremes are the bucket's first row)
///    leave rows of the budget unused.
/// 3. **Rows that carry values across missing cells** (only in traces with missing cells): for
///    each kept row and each counter missing there, the row holding that counter's latest earlier
///    value, so that `value_at` and every scan that carries the last known value forward (the
///    host's RSS next to its available memory) read the same value at every kept row.
///
/// `max_rows` is a soft target: the mandatory rows (1) are kept even when they alone are more,
/// and the rows of (3) come on top. Without missing cells, the copy has at most
/// `max(max_rows, mandatory + 2 × counters)` rows, where `thin_samples(trace, 0)` has exactly the
/// mandatory ones. Gradient summaries, tensor statistics and drop accounting do not pin rows: no
/// analysis reads samples at their times.
///
/// Time is linear in rows × counters, plus a binary search per instant and per bucket.
pub fn thin_samples(trace: &Trace, max_rows: usize) -> Trace {
    if trace.samples.len() <= max_rows {
        return trace.clone();
    }
    RowPlan::new(trace).thin(max_rows)
}

/// A set of rows being chosen, with its size.
#[derive(Clone)]
struct Keep {
    rows: Vec<bool>,
    count: usize,
}

impl Keep {
    fn add(&mut self, row: usize) {
        if !self.rows[row] {
            self.rows[row] = true;
            self.count += 1;
        }
    }

    /// Every row whose time is exactly `t_us`.
    fn add_time(&mut self, times_us: &[u64], t_us: u64) {
        let start = times_us.partition_point(|t| *t < t_us);
        let end = times_us.partition_point(|t| *t <= t_us);
        for row in start..end {
            self.add(row);
        }
    }
}

/// What choosing rows needs that does not depend on `max_rows`, found once ([`fit`] tries
/// several).
struct RowPlan<'a> {
    trace: &'a Trace,
    /// The times and the columns unpacked once: rows are read many times over, and `thin` is
    /// tried at several sizes.
    times: Vec<u64>,
    columns: Vec<Vec<u64>>,
    mandatory: Keep,
}

impl<'a> RowPlan<'a> {
    /// Finds the mandatory rows (see [`thin_samples`]).
    fn new(trace: &'a Trace) -> RowPlan<'a> {
        let samples = &trace.samples;
        let times_plain = samples.times_us().to_vec();
        let times = &times_plain[..];
        let columns = columns(samples);
        let n = times.len();
        let mut keep = Keep {
            rows: vec![false; n],
            count: 0,
        };
        if n > 0 {
            keep.add(0);
            keep.add(n - 1);
        }

        // Instants whose row at or before must survive.
        let mut instants: Vec<u64> = trace
            .marks
            .iter()
            .map(|m| m.t_us)
            .chain(trace.ooms.iter().map(|o| o.t_us))
            .chain(trace.notes.iter().map(|n| n.t_us))
            .chain(trace.batch_trials.iter().map(|b| b.t_us))
            .chain(trace.components.iter().map(|c| c.t_us))
            .chain(trace.exit.iter().map(|e| e.t_us))
            .collect();
        for column in &columns {
            let first = column.iter().position(|v| *v != MISSING);
            let last = column.iter().rposition(|v| *v != MISSING);
            if let (Some(first), Some(last)) = (first, last) {
                keep.add(first);
                keep.add(last);
                instants.push(times[last]);
            }
        }
        let mut instant_rows: Vec<usize> = instants
            .into_iter()
            .filter_map(|t| samples.row_at_or_before(t))
            .collect();
        instant_rows.sort_unstable();
        instant_rows.dedup();
        for &row in &instant_rows {
            keep.add(row);
        }
        keep_lookback_windows(&mut keep, &columns, &instant_rows);

        // Where the whole-trace scans of derived quantities find their extremes.
        if let Some(h) = host_memory(trace) {
            keep.add_time(times, h.t_us);
        }
        keep_pressure_rows(&mut keep, trace, &columns);
        for row in oomscope_analysis::facts::rows_read(trace) {
            keep.add(row);
        }

        RowPlan {
            trace,
            times: times_plain,
            columns,
            mandatory: keep,
        }
    }

    /// The copy with the mandatory rows, the envelope rows `max_rows` leaves room for, and the
    /// rows that carry values across missing cells.
    fn thin(&self, max_rows: usize) -> Trace {
        let samples = &self.trace.samples;
        let mut keep = if self.columns.is_empty() || samples.is_empty() {
            self.mandatory.clone()
        } else {
            with_envelope(&self.mandatory, &self.columns, &self.times, max_rows)
        };
        keep_carried_values(&mut keep, &self.columns);
        with_samples(self.trace, select_rows(samples, &keep.rows))
    }
}

/// A copy of `trace` with other samples. Field by field, so that the big sample table is not
/// cloned only to be replaced (and so that a new field of `Trace` cannot be forgotten here).
fn with_samples(trace: &Trace, samples: Samples) -> Trace {
    Trace {
        format_version: trace.format_version,
        metadata: trace.metadata.clone(),
        counters: trace.counters.clone(),
        samples,
        marks: trace.marks.clone(),
        components: trace.components.clone(),
        gradients: trace.gradients.clone(),
        tensors: trace.tensors.clone(),
        ooms: trace.ooms.clone(),
        batch_trials: trace.batch_trials.clone(),
        exit: trace.exit,
        notes: trace.notes.clone(),
        dropped: trace.dropped.clone(),
        alive: trace.alive.clone(),
        oom_kills: trace.oom_kills.clone(),
        process_memory: trace.process_memory.clone(),
        processes: trace.processes.clone(),
        process_ends: trace.process_ends.clone(),
        held: trace.held.clone(),
        gc: trace.gc.clone(),
        inputs: trace.inputs.clone(),
        eval_autograd: trace.eval_autograd.clone(),
        saved_snapshots: trace.saved_snapshots.clone(),
        mark_sampling: trace.mark_sampling.clone(),
        program_ends: trace.program_ends.clone(),
        attach: trace.attach.clone(),
        end_us: trace.end_us,
    }
}

/// Keeps the rows where the allocator-pressure scan over sampled counters (see
/// the analysis's pressure scan) finds its extremes: the largest reserved − allocated gap, and
/// the peaks of reserved and of allocated (each with the allocator's own running peak, when
/// sampled). The scan only reads rows where both reserved and allocated are present, so with
/// missing cells these need not be any counter's own extremes.
fn keep_pressure_rows(keep: &mut Keep, trace: &Trace, columns: &[Vec<u64>]) {
    let column = |kind| counter_with_data(trace, kind).map(|id| columns[id.0 as usize].as_slice());
    let (Some(reserved), Some(allocated)) = (
        column(CounterKind::Allocator(AllocatorQuantity::Reserved)),
        column(CounterKind::Allocator(AllocatorQuantity::Allocated)),
    ) else {
        return;
    };
    let peak_reserved = column(CounterKind::Allocator(AllocatorQuantity::PeakReserved));
    let peak_allocated = column(CounterKind::Allocator(AllocatorQuantity::PeakAllocated));
    let present = |column: Option<&[u64]>, row: usize| {
        column
            .map(|c| c[row])
            .filter(|v| *v != MISSING)
            .unwrap_or(0)
    };
    // (row, value) of the first maximum of: gap, reserved peak, allocated peak.
    let mut best: [Option<(usize, u64)>; 3] = [None; 3];
    for (row, (&r, &a)) in reserved.iter().zip(allocated).enumerate() {
        if r == MISSING || a == MISSING {
            continue;
        }
        let values = [
            r.saturating_sub(a),
            present(peak_reserved, row).max(r),
            present(peak_allocated, row).max(a),
        ];
        for (best, v) in best.iter_mut().zip(values) {
            if best.is_none_or(|(_, b)| v > b) {
                *best = Some((row, v));
            }
        }
    }
    for (row, _) in best.into_iter().flatten() {
        keep.add(row);
    }
}

/// Adds the envelope rows to `mandatory`, with as many buckets as `max_rows` allows. Counters
/// often share the rows of their extremes (a constant counter's are the first row of each
/// bucket), so the first guess of two rows per counter per bucket leaves rows unused; the bucket
/// count is then scaled up by the shortfall, a few times, while the rows stay within `max_rows`.
fn with_envelope(
    mandatory: &Keep,
    columns: &[Vec<u64>],
    times_us: &[u64],
    max_rows: usize,
) -> Keep {
    let n = times_us.len();
    let budget = max_rows.saturating_sub(mandatory.count);
    let mut buckets = (budget / (2 * columns.len())).clamp(1, n);
    let mut best = mandatory.clone();
    add_envelope(&mut best, columns, times_us, buckets);
    for _ in 0..3 {
        let added = best.count - mandatory.count;
        if added == 0 || best.count >= max_rows - max_rows / 10 || buckets >= n {
            break;
        }
        let scale = 0.98 * budget as f64 / added as f64;
        buckets = ((buckets as f64 * scale) as usize).clamp(buckets + 1, n);
        let mut candidate = mandatory.clone();
        add_envelope(&mut candidate, columns, times_us, buckets);
        if candidate.count > max_rows {
            break;
        }
        best = candidate;
    }
    best
}

/// Splits the sampled span into `buckets` equal time slices and keeps, in each, the rows of each
/// counter's first minimum and first maximum.
fn add_envelope(keep: &mut Keep, columns: &[Vec<u64>], times_us: &[u64], buckets: usize) {
    let starts = bucket_starts(times_us, buckets);
    for column in columns {
        for bucket in starts.windows(2) {
            let (start, end) = (bucket[0], bucket[1]);
            if let Some((min, max)) = first_extremes(&column[start..end]) {
                keep.add(start + min);
                keep.add(start + max);
            }
        }
    }
}

/// Row index where each of `buckets` equal time slices of the sampled span starts, plus `n` at
/// the end (a slice without rows starts where the next one does).
fn bucket_starts(times_us: &[u64], buckets: usize) -> Vec<usize> {
    let (t0, t1) = (times_us[0], times_us[times_us.len() - 1]);
    let span = u128::from(t1 - t0);
    let mut starts = Vec::with_capacity(buckets + 1);
    starts.push(0);
    for b in 1..buckets {
        let edge_us = t0 + (span * b as u128 / buckets as u128) as u64;
        starts.push(times_us.partition_point(|t| *t < edge_us));
    }
    starts.push(times_us.len());
    starts
}

/// Offsets of the first minimum and the first maximum of the present values, in one pass (memory
/// bandwidth is the cost: the columns of an hour are 29 MB each).
fn first_extremes(values: &[u64]) -> Option<(usize, usize)> {
    let (mut min_at, mut min) = (0, MISSING);
    // Shifted by one so that MISSING (u64::MAX) becomes 0, below every present value.
    let (mut max_at, mut max_shifted) = (0, 0u64);
    for (i, &v) in values.iter().enumerate() {
        if v < min {
            min = v;
            min_at = i;
        }
        let shifted = v.wrapping_add(1);
        if shifted > max_shifted {
            max_shifted = shifted;
            max_at = i;
        }
    }
    (max_shifted > 0).then_some((min_at, max_at))
}

/// For each instant row where a counter has no value within [`Samples::MAX_LOOKBACK_ROWS`] rows
/// but does have an older one, keeps the lookback's rows, all missing, so that the thinned
/// lookback also ends empty instead of reaching the older value. One window per run of missing
/// cells suffices: later instants of the same run look back through it.
fn keep_lookback_windows(keep: &mut Keep, columns: &[Vec<u64>], instant_rows: &[usize]) {
    const LOOKBACK: usize = Samples::MAX_LOOKBACK_ROWS;
    for column in columns {
        if instant_rows.iter().all(|row| column[*row] != MISSING) {
            continue;
        }
        let mut last_present: Option<usize> = None;
        let mut scanned = 0;
        let mut windowed_after: Option<usize> = None;
        for &row in instant_rows {
            while scanned <= row {
                if column[scanned] != MISSING {
                    last_present = Some(scanned);
                }
                scanned += 1;
            }
            let Some(present) = last_present else {
                continue;
            };
            if row - present >= LOOKBACK && windowed_after != Some(present) {
                for r in row + 1 - LOOKBACK..=row {
                    keep.add(r);
                }
                windowed_after = Some(present);
            }
        }
    }
}

/// For each kept row and each counter missing there, keeps the row of the counter's latest earlier
/// value, so that any scan carrying the last known value forward sees the same value at every kept
/// row. Rows are visited from the last down, so rows added here get their own turn; each column is
/// scanned backwards at most once in total (a run of missing cells is remembered).
fn keep_carried_values(keep: &mut Keep, columns: &[Vec<u64>]) {
    // Per column: the start of the last run of missing cells scanned (usize::MAX: none yet).
    let mut run_start = vec![usize::MAX; columns.len()];
    for row in (0..keep.rows.len()).rev() {
        if !keep.rows[row] {
            continue;
        }
        for (c, column) in columns.iter().enumerate() {
            if column[row] != MISSING {
                continue;
            }
            // Rows visit in descending order, so `row` is below the run remembered; it is inside
            // it or below it.
            if row < run_start[c] {
                let mut start = row;
                while start > 0 && column[start - 1] == MISSING {
                    start -= 1;
                }
                run_start[c] = start;
            }
            if let Some(present) = run_start[c].checked_sub(1) {
                keep.add(present);
            }
        }
    }
}

/// The rows of `samples` flagged in `keep`, as a new table with the same columns.
fn select_rows(samples: &Samples, keep: &[bool]) -> Samples {
    let rows: Vec<usize> = (0..keep.len()).filter(|row| keep[*row]).collect();
    let all_times = samples.times_us();
    let times: Vec<u64> = rows.iter().map(|row| all_times.at(*row)).collect();
    let mut out = Samples::with_counters(samples.columns());
    let start = out.begin_block(&times);
    for (id, column) in columns(samples).into_iter().enumerate() {
        let target = out.column_for_block(CounterId(id as u32), start);
        target.extend(rows.iter().map(|row| column[*row]));
    }
    out.end_block();
    out
}

/// The result of [`fit`] and [`fit_to_size`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thinned {
    /// The encoded trace, as `fit`'s `pack` made it (deflated, in a report).
    pub trace_bytes: Vec<u8>,
    /// Sample rows in `trace_bytes`.
    pub rows_kept: usize,
    /// Sample rows in the original trace.
    pub rows_total: usize,
}

impl Thinned {
    /// True when rows were dropped (the viewer then says samples were thinned).
    pub fn is_thinned(&self) -> bool {
        self.rows_kept < self.rows_total
    }
}

/// What a copy must fit in; 0 is no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FitLimits {
    /// Bytes, as `pack` makes them.
    pub max_bytes: usize,
    /// Sample rows: what the page's read, decode, first chart and analysis scale with. A soft
    /// limit: the rows the analysis reads (the reading at every mark, each counter's extremes)
    /// are always kept, so a trace with more marks than this keeps more rows.
    pub max_rows: usize,
}

/// Encodes `trace` in at most `max_bytes` if it can, keeping as many sample rows as it can
/// ([`fit`] without packing or a row limit).
pub fn fit_to_size(trace: &Trace, max_bytes: usize) -> Result<Thinned, EncodeError> {
    fit(
        trace,
        FitLimits {
            max_bytes,
            max_rows: 0,
        },
        |bytes| bytes,
    )
}

/// Encodes `trace`, packs it with `pack` (a report deflates), and keeps as many sample rows as
/// `limits` allow (`max_rows` is soft: see [`FitLimits`]).
///
/// The whole trace is returned as it is when it is within both limits (`rows_kept ==
/// rows_total`). Otherwise it is thinned as [`thin_samples`] does, to `max_rows` when that copy
/// packs into `max_bytes`; else the size is searched: the packed size grows with the rows kept,
/// so each attempt interpolates between the largest copy that fitted and the smallest that did
/// not, until one fits within 7 % of `max_bytes` (at most [`FIT_ATTEMPTS`] attempts; the largest
/// that fitted is returned). Packing each attempt is what measures it: a thinned copy deflates
/// less well than the whole trace, and guessing that ratio once left copies holding the marks'
/// rows alone where several times as many would have fitted.
///
/// When even the mandatory rows alone do not fit (the other records take the space: a stage mark
/// with the allocator's statistics costs ~45 bytes), that smallest copy is returned anyway, larger than
/// `max_bytes`: the caller decides what to do with it.
pub fn fit(
    trace: &Trace,
    limits: FitLimits,
    pack: impl Fn(Vec<u8>) -> Vec<u8>,
) -> Result<Thinned, EncodeError> {
    let rows_total = trace.samples.len();
    let fits = |len: usize| limits.max_bytes == 0 || len <= limits.max_bytes;
    let max_rows = match limits.max_rows {
        0 => rows_total,
        n => n.min(rows_total),
    };
    let whole = |trace_bytes| Attempt {
        asked: rows_total,
        copy: Thinned {
            trace_bytes,
            rows_kept: rows_total,
            rows_total,
        },
    };
    let mut full = None;
    if max_rows == rows_total {
        let packed = pack(encode(trace)?);
        if fits(packed.len()) {
            return Ok(whole(packed).copy);
        }
        full = Some(packed);
    }
    let plan = RowPlan::new(trace);
    let attempt = |asked: usize| -> Result<Attempt, EncodeError> {
        let thinned = plan.thin(asked);
        let copy = Thinned {
            rows_kept: thinned.samples.len(),
            trace_bytes: pack(encode(&thinned)?),
            rows_total,
        };
        Ok(Attempt { asked, copy })
    };
    let smallest = attempt(0)?;
    let min_rows = smallest.copy.rows_kept;
    if !fits(smallest.copy.trace_bytes.len()) || min_rows >= max_rows {
        return Ok(smallest.copy);
    }
    // The most rows allowed: the whole trace, already packed and too large, or a copy.
    let largest = match full {
        Some(packed) => whole(packed),
        None => attempt(max_rows)?,
    };
    if fits(largest.copy.trace_bytes.len()) {
        return Ok(largest.copy);
    }
    let (mut below, mut above) = (smallest, largest);
    let goal = limits.max_bytes as f64 * 0.97;
    for _ in 0..FIT_ATTEMPTS {
        let (low_rows, high_rows) = (below.copy.rows_kept.max(below.asked), above.asked);
        if high_rows <= low_rows + 1 || below.size() >= limits.max_bytes as f64 * 0.93 {
            break;
        }
        let share = ((goal - below.size()) / (above.size() - below.size())).clamp(0.0, 1.0);
        let rows = (low_rows + (share * (high_rows - low_rows) as f64) as usize)
            .clamp(low_rows + 1, high_rows - 1);
        let next = attempt(rows)?;
        if !fits(next.copy.trace_bytes.len()) {
            above = next;
        } else if next.copy.rows_kept >= below.copy.rows_kept {
            // (The packed size does not grow with every row: keep the copy with the most.)
            below = next;
        } else {
            break;
        }
    }
    Ok(below.copy)
}

/// One copy [`fit`] tried: the rows it asked [`thin_samples`] for, and what it got.
struct Attempt {
    asked: usize,
    copy: Thinned,
}

impl Attempt {
    fn size(&self) -> f64 {
        self.copy.trace_bytes.len() as f64
    }
}

/// Copies [`fit`] packs at most, after the whole trace, the smallest and the largest.
pub const FIT_ATTEMPTS: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::decode;
    use oomscope_format::{CounterKind, Phase, StageMark};

    /// A trace with one counter and the given cells, one row per millisecond.
    fn one_counter(cells: &[u64]) -> (Trace, CounterId) {
        let mut trace = Trace::default();
        let id = trace.declare_counter(CounterKind::HostRss, None);
        for (i, v) in cells.iter().enumerate() {
            let row: &[(CounterId, u64)] = if *v == MISSING { &[] } else { &[(id, *v)] };
            trace.samples.push_row(i as u64 * 1000, row);
        }
        (trace, id)
    }

    fn mark_at(trace: &mut Trace, t_us: u64) {
        trace.marks.push(StageMark {
            t_us,
            name: "pre_forward".into(),
            step: trace.marks.len() as u64,
            phase: Phase::Train,
            ..StageMark::default()
        });
    }

    #[test]
    fn first_extremes_skip_missing_and_prefer_the_first() {
        assert_eq!(first_extremes(&[]), None);
        assert_eq!(first_extremes(&[MISSING, MISSING]), None);
        assert_eq!(
            first_extremes(&[MISSING, 5, 3, 5, 3, MISSING]),
            Some((2, 1))
        );
        assert_eq!(first_extremes(&[0, MISSING - 1]), Some((0, 1)));
    }

    #[test]
    fn buckets_cover_every_row_once() {
        let times = [0, 10, 10, 20, 35, 90, 100];
        let starts = bucket_starts(&times, 4);
        assert_eq!(starts, [0, 4, 5, 5, 7]);
        assert_eq!(bucket_starts(&[5, 5, 5], 3), [0, 0, 0, 3]);
    }

    #[test]
    fn small_traces_are_cloned() {
        let (trace, _) = one_counter(&[1, 2, 3]);
        assert_eq!(thin_samples(&trace, 3), trace);
    }

    #[test]
    fn a_mark_s_value_is_read_across_missing_cells() {
        // The mark's row is missing; its value comes from 10 rows back, which must be kept.
        let mut cells = vec![7u64; 1000];
        cells[500] = 9;
        cells[501..=510].fill(MISSING);
        let (mut trace, id) = one_counter(&cells);
        mark_at(&mut trace, 510_000);
        let thinned = thin_samples(&trace, 10);
        // A handful of rows, plus the floors the over-time trend reads (a trace without steps).
        let floors = oomscope_analysis::facts::BUCKETS;
        assert!(
            thinned.samples.len() < 20 + floors,
            "{}",
            thinned.samples.len()
        );
        assert_eq!(thinned.samples.value_at(id, 510_000), Some(9));
    }

    #[test]
    fn a_stale_counter_stays_stale_at_marks() {
        // Present up to row 99 (value 9 there), then dead: the mark at row 400 reads nothing, and
        // so must the thinned copy, although its last present value is then only a few rows back.
        let mut cells = vec![1u64; 100];
        cells[99] = 9;
        cells.resize(1000, MISSING);
        let (mut trace, id) = one_counter(&cells);
        mark_at(&mut trace, 400_000);
        mark_at(&mut trace, 600_000);
        assert_eq!(trace.samples.value_at(id, 400_000), None);
        let thinned = thin_samples(&trace, 10);
        assert_eq!(thinned.samples.value_at(id, 400_000), None);
        assert_eq!(thinned.samples.value_at(id, 600_000), None);
        // One window of lookback rows serves both marks.
        assert!(thinned.samples.len() < 90, "{}", thinned.samples.len());
    }

    #[test]
    fn encode_without_end_record_stays_unfinished() {
        let (mut trace, _) = one_counter(&[1, MISSING, 3]);
        let bytes = encode(&trace).unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!(decoded.trace.end_us, None);
        assert_eq!(decoded.warnings.len(), 1, "{:?}", decoded.warnings);
        assert!(
            decoded.warnings[0]
                .message
                .contains("did not finish cleanly")
        );
        trace.format_version = decoded.trace.format_version;
        assert_eq!(decoded.trace, trace);
    }
}

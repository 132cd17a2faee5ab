//! A memory along the run's unit, from the readings alone: for each repeat of the unit (a training
//! step, else a forward, else a window of time), its floor (the lowest reading in it: what the run
//! keeps) and its peak (the highest: what the repeat itself needs on top). Marks only cut the run
//! into repeats; their phases play no part, so an eval or a pause cannot hide what memory did.

use oomscope_format::{CounterId, MISSING, Phase, Trace};
use serde::Serialize;

use crate::marks::is_train;

/// The unit a symptom is read on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Training steps (the marks' step numbers: a sampled loop's every N steps are one repeat
    /// each, placed at its step).
    Step,
    /// Forwards of a run that never trains (a serving loop's requests).
    Forward,
    /// Seconds of a run without marks, read in [`TIME_WINDOWS`] windows.
    Second,
}

impl Unit {
    /// The unit in words: `step`, `forward`, `second`.
    pub fn word(self) -> &'static str {
        match self {
            Unit::Step => "step",
            Unit::Forward => "forward",
            Unit::Second => "second",
        }
    }
}

/// Windows a run without enough marks is read in.
pub const TIME_WINDOWS: usize = 100;

/// Repeats of the unit a symptom reads at most: more are read in blocks of consecutive repeats,
/// each its lowest floor and its highest peak (a day's 240 000 steps as 4 000 points).
pub const MAX_POINTS: usize = 4_000;

/// One repeat of the unit (or a block of them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitPoint {
    /// Its position on the unit: the step, the forward's ordinal, the window's second.
    pub at: u64,
    /// When it began and ended (run clock).
    pub from_us: u64,
    /// See `from_us`.
    pub to_us: u64,
    /// The lowest reading in it.
    pub floor_bytes: u64,
    /// The highest.
    pub peak_bytes: u64,
    /// Its marks were all an eval's (a training run's evaluation, between its steps).
    pub eval: bool,
    /// The sample rows of its floor and its peak (the first of each), when read from the
    /// samples: a thinned copy of the trace keeps them, and reads the same.
    pub rows: Option<(usize, usize)>,
}

/// Where each repeat begins: (time, position, all its marks eval so far).
fn starts(trace: &Trace) -> (Unit, Vec<(u64, u64, bool)>) {
    let marks = &trace.marks;
    let train = marks.iter().any(|m| is_train(m.phase));
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    if train {
        let mut last = None;
        for m in marks.iter() {
            let eval = m.phase == Phase::Eval;
            if last != Some(m.step) {
                out.push((m.t_us, m.step, eval));
                last = Some(m.step);
            } else if let Some(u) = out.last_mut() {
                u.2 &= eval;
            }
        }
        // Steps that go back often are several loops' (workers each counting their own): no
        // one clock of the run.
        let back = out.windows(2).filter(|w| w[1].1 < w[0].1).count();
        if out.len() >= 8 && back * 10 <= out.len() {
            return (Unit::Step, out);
        }
        out.clear();
    } else {
        let mut forwards = 0;
        for m in marks.iter().filter(|m| &*m.name == "pre_forward") {
            forwards += 1;
            out.push((m.t_us, forwards, false));
        }
        if out.len() >= 8 {
            return (Unit::Forward, out);
        }
    }
    // The windows span the marks when there are some (the loop, not its setup and teardown),
    // else the whole run.
    let (begin, end) = match (marks.iter().next(), marks.iter().last()) {
        (Some(a), Some(b)) if b.t_us > a.t_us && marks.len() >= 8 => (a.t_us, b.t_us),
        _ => (0, trace.duration_us()),
    };
    // A window is a second at least: its position is the second it begins in, and two windows
    // in one second would stand at one position (a rise "from second 8 to second 8"). A run
    // shorter than `MIN_POINTS` seconds then has too few windows for a shape.
    let width = ((end - begin) / TIME_WINDOWS as u64).max(1_000_000);
    let windows = (0..TIME_WINDOWS as u64)
        .map(|i| begin + i * width)
        .take_while(|&t| t < end.max(begin + 1))
        .map(|t| (t, t / 1_000_000, false))
        .collect();
    (Unit::Second, windows)
}

/// `counter` along the run's unit: one point per repeat (blocks of them past [`MAX_POINTS`]).
/// The last repeat ends a typical repeat's length after it began, or at the last mark when that
/// comes first (what follows the loop, its teardown, is not a repeat). `None` without readings.
pub fn unit_series(trace: &Trace, counter: CounterId) -> Option<(Unit, Vec<UnitPoint>)> {
    let column = trace.samples.column(counter)?;
    let times = trace.samples.times_us();
    if times.is_empty() {
        return None;
    }
    let (unit, starts) = starts(trace);
    let mut lengths: Vec<u64> = starts.windows(2).map(|w| w[1].0 - w[0].0).collect();
    lengths.sort_unstable();
    let typical = lengths.get(lengths.len() / 2).copied().unwrap_or(1_000_000);
    // The last repeat ends at the loop's last mark at the latest: a run that died inside it
    // (an out-of-memory error raised) frees its memory while it exits, and that fall is not
    // the floor the loop kept.
    let last_mark_us = trace.marks.iter().last().map(|m| m.t_us);
    let mut points = Vec::with_capacity(starts.len());
    let mut row = times.partition_point(|t| t < starts[0].0);
    for (i, &(from_us, at, eval)) in starts.iter().enumerate() {
        let to_us = starts.get(i + 1).map_or_else(
            || match (unit, last_mark_us) {
                (Unit::Second, _) | (_, None) => from_us + typical,
                (_, Some(last)) => (from_us + typical).min(last.max(from_us) + 1),
            },
            |s| s.0,
        );
        row = row.max(times.partition_point(|t| t < from_us));
        let (mut floor, mut peak) = (u64::MAX, 0u64);
        let (mut floor_row, mut peak_row) = (None, None);
        while row < times.len() && times.at(row) < to_us {
            let v = column.at(row);
            if v != MISSING {
                if v < floor {
                    (floor, floor_row) = (v, Some(row));
                }
                if v > peak || peak_row.is_none() {
                    (peak, peak_row) = (v, Some(row));
                }
            }
            row += 1;
        }
        if floor == u64::MAX {
            // No reading inside: the last one before it stands.
            let Some(v) = trace.samples.value_at(counter, from_us) else {
                continue;
            };
            (floor, peak) = (v, v);
        }
        points.push(UnitPoint {
            at,
            from_us,
            to_us,
            floor_bytes: floor,
            peak_bytes: peak,
            eval,
            rows: floor_row.zip(peak_row),
        });
    }
    if points.is_empty() {
        return None;
    }
    Some((unit, in_blocks(points)))
}

/// The allocator's allocated bytes along the run's unit, from the statistics the marks carry:
/// a device's memory in use where the program reads it at its marks (the process's memory on
/// the device also holds the allocator's cache, which grows to its high-water mark and stays).
/// `None` without such marks, or on the time clock.
pub fn unit_series_of_marks(trace: &Trace) -> Option<(Unit, Vec<UnitPoint>)> {
    let column = trace
        .marks
        .allocator_column(oomscope_format::AllocatorQuantity::Allocated)?;
    let (unit, starts) = starts(trace);
    if unit == Unit::Second || starts.is_empty() {
        return None;
    }
    let mut points: Vec<UnitPoint> = Vec::with_capacity(starts.len());
    let mut next = 0;
    for (i, m) in trace.marks.iter().enumerate() {
        while next < starts.len() && starts[next].0 <= m.t_us {
            let (from_us, at, eval) = starts[next];
            let to_us = starts.get(next + 1).map_or(from_us, |s| s.0);
            points.push(UnitPoint {
                at,
                from_us,
                to_us,
                floor_bytes: u64::MAX,
                peak_bytes: 0,
                eval,
                rows: None,
            });
            next += 1;
        }
        let v = column.at(i);
        if let Some(p) = points.last_mut()
            && v != MISSING
        {
            p.floor_bytes = p.floor_bytes.min(v);
            p.peak_bytes = p.peak_bytes.max(v);
            p.to_us = p.to_us.max(m.t_us);
        }
    }
    points.retain(|p| p.floor_bytes != u64::MAX);
    if points.is_empty() {
        return None;
    }
    Some((unit, in_blocks(points)))
}

/// The repeats of the unit in one point when a run has `repeats` of them: 1, or a block's
/// length past [`MAX_POINTS`].
pub fn block_len(repeats: usize) -> usize {
    repeats.div_ceil(MAX_POINTS).max(1)
}

/// `points` in blocks of consecutive ones when there are more than [`MAX_POINTS`].
fn in_blocks(points: Vec<UnitPoint>) -> Vec<UnitPoint> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    points
        .chunks(block_len(points.len()))
        .map(|block| {
            // The first lowest floor and the first highest peak, and their rows.
            let low = block
                .iter()
                .reduce(|a, b| if b.floor_bytes < a.floor_bytes { b } else { a });
            let high = block
                .iter()
                .reduce(|a, b| if b.peak_bytes > a.peak_bytes { b } else { a });
            UnitPoint {
                at: block[0].at,
                from_us: block[0].from_us,
                to_us: block[block.len() - 1].to_us,
                floor_bytes: low.map_or(0, |p| p.floor_bytes),
                peak_bytes: high.map_or(0, |p| p.peak_bytes),
                eval: block.iter().all(|p| p.eval),
                rows: low
                    .and_then(|p| p.rows)
                    .zip(high.and_then(|p| p.rows))
                    .map(|(l, h)| (l.0, h.1)),
            }
        })
        .collect()
}

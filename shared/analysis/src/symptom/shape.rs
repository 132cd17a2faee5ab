//! The shape of a memory's floor along the run's unit, read from the signal: whether it rose at
//! all beyond its noise, and then how: in a few stairs, up to a bound it stays at, following the
//! size of the input, or steadily (from the start or from where the rise began). A floor that did
//! not rise may still have peaks far above it (an eval, a save): a transient peak.
//!
//! Each threshold here was set on the first fresh set (`collector/tests/fresh/set1`, programs
//! written blind to this code: `scripts/fresh.py`) and is checked on the second
//! (`collector/tests/fresh/set2`), written after it by someone who had not seen it, and on the zoo.

use serde::Serialize;

use super::units::UnitPoint;
use crate::fit::least_squares;

/// A shape needs this many repeats read (after the warm-up): a shorter run's first steps (the
/// allocator's caches, the optimizer's first step) are all it has.
pub const MIN_POINTS: usize = 20;
/// The first repeats are the warm-up (allocations of the model, the optimizer's first step, the
/// allocator's caches): this share of them is not read.
pub const WARM_UP_SHARE: f64 = 0.05;
/// The floor's level at the start and at the end: the median of this share of the repeats there.
pub const LEVEL_SHARE: f64 = 0.1;
/// A rise counts when it is at least this many bytes...
pub const MIN_RISE_BYTES: u64 = 16 << 20;
/// ...and this share of the floor's level...
pub const MIN_RISE_SHARE: f64 = 0.01;
/// ...and this many times the floor's noise (its repeat-to-repeat wobble).
pub const NOISE_FACTOR: f64 = 4.0;
/// A stair: a repeat-to-repeat rise of this many times the noise...
pub const STAIR_NOISE_FACTOR: f64 = 5.0;
/// ...and at least this many bytes.
pub const STAIR_MIN_BYTES: u64 = 4 << 20;
/// A rise is a staircase when stairs make this share of it...
pub const STAIRS_SHARE: f64 = 0.7;
/// ...in at most this many stairs (more, regular ones: a steady rise in steps).
pub const MAX_STAIRS: usize = 16;
/// ...climbed over at least this share of the run (a rise in stairs over its first few repeats
/// that then stays is bounded).
pub const STAIRS_SPAN_SHARE: f64 = 0.3;
/// Stairs this many or more, their spacing this regular (its coefficient of variation)...
pub const CLOCK_STAIRS: usize = 8;
/// ...see [`CLOCK_STAIRS`]...
pub const CLOCK_SPACING_VARIATION: f64 = 0.25;
/// ...and going on into this last share of the run are a steady rise in steps.
pub const CLOCK_TAIL_SHARE: f64 = 0.25;
/// A rise is bounded when over the last this share of the run...
pub const LATE_SHARE: f64 = 0.3;
/// ...it rose at less than this share of its rate before.
pub const LATE_RATE_SHARE: f64 = 0.15;
/// Memory follows the input when the floor or the peak correlates with the input's size this
/// well...
pub const INPUT_CORRELATION: f64 = 0.9;
/// ...over inputs whose largest is at least this many times the smallest.
pub const INPUT_SPREAD: f64 = 1.5;
/// A transient peak: a repeat whose peak stands above its floor by this many times the typical
/// repeat's...
pub const PEAK_FACTOR: f64 = 3.0;
/// ...and by at least this many bytes.
pub const PEAK_MIN_BYTES: u64 = 64 << 20;

/// What the floor did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum Shape {
    /// It did not rise beyond its noise, and no repeat peaked far above it.
    None,
    /// It did not rise, but some repeats peaked far above it.
    TransientPeak {
        /// Repeats that did.
        peaks: usize,
        /// The highest above its floor.
        largest_bytes: u64,
        /// Where.
        at: u64,
    },
    /// It rose steadily from `from` to the end.
    LinearGrowth {
        /// Where the rise began (the first repeat past a tenth of it).
        from: u64,
        /// Its rate over that span, per unit.
        rate_bytes_per_unit: f64,
        /// It rose in stairs this many units apart, as regular as a clock.
        stairs_every: Option<u64>,
    },
    /// It rose in a few stairs.
    Staircase {
        /// Each stair: where and how much.
        stairs: Vec<Stair>,
        /// Its rate over the span of the stairs, per unit.
        rate_bytes_per_unit: f64,
    },
    /// It rose and then stayed.
    Bounded {
        /// The level it stayed at.
        bound_bytes: u64,
        /// Where it was reached (70% of the run).
        reached_at: u64,
        /// Its rate before, per unit.
        rate_bytes_per_unit: f64,
    },
    /// It followed the size of the input.
    FollowsInput {
        /// Bytes per element of the input, fitted.
        bytes_per_element: f64,
        /// How well (the correlation).
        correlation: f64,
    },
}

impl Shape {
    /// The shape's name, as `summary --json` writes it.
    pub fn name(&self) -> &'static str {
        match self {
            Shape::None => "none",
            Shape::TransientPeak { .. } => "transient_peak",
            Shape::LinearGrowth { .. } => "linear_growth",
            Shape::Staircase { .. } => "staircase",
            Shape::Bounded { .. } => "bounded",
            Shape::FollowsInput { .. } => "follows_input",
        }
    }

    /// The rate of a rise, per unit.
    pub fn rate_bytes_per_unit(&self) -> Option<f64> {
        match self {
            Shape::LinearGrowth {
                rate_bytes_per_unit,
                ..
            }
            | Shape::Staircase {
                rate_bytes_per_unit,
                ..
            }
            | Shape::Bounded {
                rate_bytes_per_unit,
                ..
            } => Some(*rate_bytes_per_unit),
            _ => None,
        }
    }

    /// Memory rose and goes on rising (the shapes a leak has).
    pub fn unbounded(&self) -> bool {
        matches!(self, Shape::LinearGrowth { .. } | Shape::Staircase { .. })
    }
}

/// One stair of a staircase.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Stair {
    /// The repeat it rose into.
    pub at: u64,
    /// How much.
    pub bytes: i64,
}

/// The numbers the shape was read from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Levels {
    /// The floor at the start (after the warm-up) and at the end.
    pub start_bytes: u64,
    /// See `start_bytes`.
    pub end_bytes: u64,
    /// `end - start`.
    pub rise_bytes: i64,
    /// The floor's repeat-to-repeat noise (robust standard deviation of its differences).
    pub noise_bytes: u64,
    /// The rise that counts here.
    pub need_bytes: u64,
}

/// The repeats of a series of `points` the shape does not read (the warm-up).
pub fn warm_up(points: usize) -> usize {
    ((points as f64 * WARM_UP_SHARE) as usize).max(1)
}

/// The shape of `points`' floor; `inputs`, each point's input size when the hooks recorded one.
pub fn read_shape(points: &[UnitPoint], inputs: &[Option<u64>]) -> Option<(Shape, Levels)> {
    let skip = warm_up(points.len());
    let points = points.get(skip..)?;
    let inputs = inputs.get(skip..).unwrap_or(&[]);
    let n = points.len();
    if n < MIN_POINTS {
        return None;
    }
    let y: Vec<f64> = points.iter().map(|p| p.floor_bytes as f64).collect();
    let x: Vec<f64> = points.iter().map(|p| p.at as f64).collect();
    let k = ((n as f64 * LEVEL_SHARE) as usize).max(3);
    let start = median(&y[..k]);
    let end = median(&y[n - k..]);
    let rise = end - start;
    let noise = noise_of(&y);
    let need = (MIN_RISE_BYTES as f64)
        .max(MIN_RISE_SHARE * median(&y))
        .max(NOISE_FACTOR * noise);
    let levels = Levels {
        start_bytes: start as u64,
        end_bytes: end as u64,
        rise_bytes: rise as i64,
        noise_bytes: noise as u64,
        need_bytes: need as u64,
    };
    if let Some(shape) = follows_input(points, inputs) {
        return Some((shape, levels));
    }
    if rise < need {
        return Some((transient(points), levels));
    }
    let slope = |a: usize, b: usize| {
        let xy: Vec<(f64, f64)> = x[a..b]
            .iter()
            .copied()
            .zip(y[a..b].iter().copied())
            .collect();
        least_squares(&xy).map_or(0.0, |l| l.slope)
    };
    let stairs = stairs_of(points, &y, noise);
    let in_stairs: f64 = stairs.iter().map(|s| s.bytes as f64).sum();
    let (first_at, last_at) = (points[0].at, points[n - 1].at);
    let span = last_at.saturating_sub(first_at).max(1) as f64;
    if let Some(every) = regular_to_the_end(&stairs, first_at, last_at) {
        // Stairs as regular as a clock, to the end: memory grows as long as the run does.
        let from = points
            .partition_point(|p| p.at < stairs[0].at)
            .saturating_sub(1);
        return Some((
            Shape::LinearGrowth {
                from: points[from].at,
                rate_bytes_per_unit: slope(from, n),
                stairs_every: Some(every),
            },
            levels,
        ));
    }
    let climbed = match (stairs.first(), stairs.last()) {
        (Some(a), Some(b)) => b.at.saturating_sub(a.at) as f64 / span,
        _ => 0.0,
    };
    if stairs.len() >= 2
        && stairs.len() <= MAX_STAIRS
        && in_stairs >= STAIRS_SHARE * rise
        && climbed >= STAIRS_SPAN_SHARE
    {
        let from = points
            .partition_point(|p| p.at < stairs[0].at)
            .saturating_sub(1);
        return Some((
            Shape::Staircase {
                rate_bytes_per_unit: slope(from, n),
                stairs,
            },
            levels,
        ));
    }
    let cut = ((n as f64) * (1.0 - LATE_SHARE)) as usize;
    let (early, late) = (slope(0, cut), slope(cut, n));
    if early > 0.0 && late < LATE_RATE_SHARE * early && y[cut] - start > (1.0 - LATE_SHARE) * rise {
        return Some((
            Shape::Bounded {
                bound_bytes: end as u64,
                reached_at: points[cut].at,
                rate_bytes_per_unit: early,
            },
            levels,
        ));
    }
    // Where the rise began: the first repeat whose floor (a median of five) passed a tenth of it.
    let target = start + 0.1 * rise;
    let from = (0..n)
        .find(|&i| median(&y[i.saturating_sub(2)..(i + 3).min(n)]) > target)
        .unwrap_or(0);
    Some((
        Shape::LinearGrowth {
            from: points[from].at,
            rate_bytes_per_unit: slope(from, n),
            stairs_every: None,
        },
        levels,
    ))
}

/// Repeats on each side a level is read over (its median), for a stair and for the noise.
pub const LEVEL_REPEATS: usize = 5;
/// A stair is climbed within two repeats: they carry at least this share of the level's shift
/// (a ramp that climbs for many repeats is a rise, not a stair); and it stays: the level two
/// spans later still stands this share above the level before.
pub const STAIR_STEEP_SHARE: f64 = 0.6;

/// The floor's noise: the robust standard deviation of its distance to its running median
/// ([`LEVEL_REPEATS`] repeats): what a repeat wobbles by, stairs and rises aside.
fn noise_of(y: &[f64]) -> f64 {
    let n = y.len();
    let h = LEVEL_REPEATS / 2;
    let residual: Vec<f64> = (0..n)
        .map(|i| y[i] - median(&y[i.saturating_sub(h)..(i + h + 1).min(n)]))
        .collect();
    robust_sd(&residual)
}

/// The stairs of a floor: where its level (the median of [`LEVEL_REPEATS`] repeats) after a
/// repeat stands above the level before by [`STAIR_NOISE_FACTOR`] times the noise and
/// [`STAIR_MIN_BYTES`], climbed within two repeats ([`STAIR_STEEP_SHARE`]); the largest shift of
/// its neighbourhood.
fn stairs_of(points: &[UnitPoint], y: &[f64], noise: f64) -> Vec<Stair> {
    let n = y.len();
    let m = LEVEL_REPEATS;
    let stair_min = (STAIR_NOISE_FACTOR * noise).max(STAIR_MIN_BYTES as f64);
    let shift = |i: usize| median(&y[i..(i + m).min(n)]) - median(&y[i.saturating_sub(m)..i]);
    let shifts: Vec<f64> = (1..n).map(shift).collect();
    let mut stairs: Vec<Stair> = Vec::new();
    for i in 1..n {
        let s = shifts[i - 1];
        let steep = (y[i] - y[i - 1]).max(y[(i + 1).min(n - 1)] - y[i - 1]);
        let neighbourhood = &shifts[i.saturating_sub(m).max(1) - 1..(i + m).min(n - 1)];
        let largest = neighbourhood.iter().all(|o| *o <= s);
        // It stays: the level two spans on still holds most of it.
        let later = median(&y[(i + m).min(n - 1)..(i + 2 * m).min(n)]);
        let stays = later - median(&y[i.saturating_sub(m)..i]) >= STAIR_STEEP_SHARE * s;
        if s > stair_min && steep >= STAIR_STEEP_SHARE * s && largest && stays {
            if stairs
                .last()
                .is_some_and(|last| points[i].at.saturating_sub(last.at) < m as u64)
            {
                continue;
            }
            stairs.push(Stair {
                at: points[i].at,
                bytes: s as i64,
            });
        }
    }
    stairs
}

/// The spacing of `stairs` when they are as regular as a clock and go on to the end of
/// `first_at..=last_at`: [`CLOCK_STAIRS`], [`CLOCK_SPACING_VARIATION`], [`CLOCK_TAIL_SHARE`].
fn regular_to_the_end(stairs: &[Stair], first_at: u64, last_at: u64) -> Option<u64> {
    if stairs.len() < CLOCK_STAIRS {
        return None;
    }
    // A stair the readings missed leaves a gap of two: the spacing's median and its median
    // deviation, not its mean and deviation.
    let gaps: Vec<f64> = stairs
        .windows(2)
        .map(|w| w[1].at.saturating_sub(w[0].at) as f64)
        .collect();
    let every = median(&gaps);
    let spread = median(&gaps.iter().map(|g| (g - every).abs()).collect::<Vec<_>>());
    let tail = last_at as f64 - CLOCK_TAIL_SHARE * last_at.saturating_sub(first_at) as f64;
    let last = stairs[stairs.len() - 1].at as f64;
    (every > 0.0 && spread <= CLOCK_SPACING_VARIATION * every && last >= tail)
        .then_some(every.round() as u64)
}

/// A flat floor's transient peaks, or none.
fn transient(points: &[UnitPoint]) -> Shape {
    let excess: Vec<f64> = points
        .iter()
        .map(|p| p.peak_bytes.saturating_sub(p.floor_bytes) as f64)
        .collect();
    let typical = median(&excess);
    let over = (PEAK_FACTOR * typical).max(PEAK_MIN_BYTES as f64);
    let peaks: Vec<(usize, f64)> = excess
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, e)| *e > over)
        .collect();
    match peaks.iter().max_by(|a, b| a.1.total_cmp(&b.1)) {
        Some(&(i, e)) => Shape::TransientPeak {
            peaks: peaks.len(),
            largest_bytes: e as u64,
            at: points[i].at,
        },
        None => Shape::None,
    }
}

/// Memory that follows the input's size: the floor's or the peak's correlation with it.
fn follows_input(points: &[UnitPoint], inputs: &[Option<u64>]) -> Option<Shape> {
    let pairs: Vec<(f64, &UnitPoint)> = inputs
        .iter()
        .zip(points)
        .filter_map(|(i, p)| Some((i.filter(|e| *e > 0)? as f64, p)))
        .collect();
    if pairs.len() < 8 {
        return None;
    }
    let smallest = pairs.iter().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let largest = pairs.iter().map(|p| p.0).fold(0.0, f64::max);
    if largest < INPUT_SPREAD * smallest {
        return None;
    }
    [
        |p: &UnitPoint| p.peak_bytes as f64,
        |p: &UnitPoint| p.floor_bytes as f64,
    ]
    .iter()
    .filter_map(|read| {
        let xy: Vec<(f64, f64)> = pairs.iter().map(|(e, p)| (*e, read(p))).collect();
        let line = least_squares(&xy)?;
        let r = line.r_squared.sqrt();
        (line.slope > 0.0 && r >= INPUT_CORRELATION).then_some(Shape::FollowsInput {
            bytes_per_element: line.slope,
            correlation: r,
        })
    })
    .next()
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

/// The standard deviation of `v`, from its median absolute deviation (a few stairs in it do not
/// make the noise).
fn robust_sd(v: &[f64]) -> f64 {
    let m = median(v);
    let dev: Vec<f64> = v.iter().map(|d| (d - m).abs()).collect();
    1.4826 * median(&dev)
}

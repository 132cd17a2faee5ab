//! Straight-line fits that shrug off a few wild points.
//!
//! Two questions oomscope asks are "does memory grow by a fixed amount every step?" (a leak) and
//! "how many bytes does one more sample in the batch cost?". Both are a slope. Training traces
//! are noisy in a particular way: most steps sit on a clean line and a few do not (the step that
//! ran eval, the step where the allocator flushed its cache, the first step that allocated
//! optimizer state). Plain least squares lets those few points bend the line, so
//! [`robust_line`] fits, drops points far from the line by the median absolute deviation of the
//! residuals, and fits again.

/// Scale factor that makes the median absolute deviation estimate a normal standard deviation.
const MAD_TO_SIGMA: f64 = 1.4826;

/// Points further than this many (MAD-estimated) standard deviations from the first fit are
/// dropped before the second fit.
const OUTLIER_SIGMAS: f64 = 3.0;

/// Rounds of outlier rejection at most (each is one O(n) pass).
pub const MAX_ROUNDS: usize = 4;

/// A fitted line `y = intercept + slope × x`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LineFit {
    /// Change of `y` per unit of `x`.
    pub slope: f64,
    /// Value of `y` at `x = 0`.
    pub intercept: f64,
    /// Coefficient of determination of the fit on the points it used: 1 is a perfect line. A
    /// perfectly flat series (no variance to explain, none left over) counts as 1.
    pub r_squared: f64,
    /// Points the fit used.
    pub points: usize,
}

impl LineFit {
    /// The fitted `y` at `x`.
    pub fn at(&self, x: f64) -> f64 {
        self.intercept + self.slope * x
    }
}

/// A [`LineFit`] after outlier rejection, with which points were kept.
#[derive(Debug, Clone, PartialEq)]
pub struct RobustFit {
    /// The fit on the kept points.
    pub line: LineFit,
    /// `kept[i]` is false when point `i` was dropped as an outlier.
    pub kept: Vec<bool>,
    /// How many points were dropped.
    pub dropped: usize,
}

/// Ordinary least squares over `(x, y)` points. `None` with fewer than two distinct `x` values
/// (no slope is defined) or non-finite input.
///
/// Sums are taken around the means, so byte counts in the tens of GiB against step numbers in
/// the tens of thousands lose no precision to cancellation.
pub fn least_squares(points: &[(f64, f64)]) -> Option<LineFit> {
    fit_where(points, |_| true)
}

/// Least squares, then drop points whose residual is more than 3 × 1.4826 × MAD from the median
/// residual, then least squares on the rest. The rejection is repeated against the new line (at
/// most [`MAX_ROUNDS`] times, points may come back) until the kept set settles, because a first
/// line bent by a cluster of wild points can hide some of them. With a MAD of zero (most points
/// exactly on the line) nothing more is dropped. `None` when no line is defined.
pub fn robust_line(points: &[(f64, f64)]) -> Option<RobustFit> {
    let mut line = least_squares(points)?;
    let mut kept = vec![true; points.len()];
    let mut residuals = vec![0.0; points.len()];
    let mut deviations = vec![0.0; points.len()];
    for _ in 0..MAX_ROUNDS {
        for (r, &(x, y)) in residuals.iter_mut().zip(points) {
            *r = y - line.at(x);
        }
        deviations.copy_from_slice(&residuals);
        let center = median(&mut deviations);
        for (d, r) in deviations.iter_mut().zip(&residuals) {
            *d = (r - center).abs();
        }
        let mad = median(&mut deviations);
        if mad <= 0.0 {
            break;
        }
        let limit = OUTLIER_SIGMAS * MAD_TO_SIGMA * mad;
        let next: Vec<bool> = residuals
            .iter()
            .map(|r| (r - center).abs() <= limit)
            .collect();
        if next == kept {
            break;
        }
        let Some(refit) = fit_where(points, |i| next[i]) else {
            break;
        };
        line = refit;
        kept = next;
    }
    let dropped = kept.iter().filter(|k| !**k).count();
    Some(RobustFit {
        line,
        kept,
        dropped,
    })
}

/// Least squares over the points whose index `keep` accepts.
fn fit_where(points: &[(f64, f64)], keep: impl Fn(usize) -> bool) -> Option<LineFit> {
    let selected: Vec<(f64, f64)> = points
        .iter()
        .enumerate()
        .filter(|(i, _)| keep(*i))
        .map(|(_, p)| *p)
        .collect();
    let n = selected.len();
    if n < 2
        || selected
            .iter()
            .any(|(x, y)| !x.is_finite() || !y.is_finite())
    {
        return None;
    }
    let nf = n as f64;
    let mean_x = selected.iter().map(|p| p.0).sum::<f64>() / nf;
    let mean_y = selected.iter().map(|p| p.1).sum::<f64>() / nf;
    let (mut sxx, mut sxy, mut syy) = (0.0, 0.0, 0.0);
    for &(x, y) in &selected {
        let (dx, dy) = (x - mean_x, y - mean_y);
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    if sxx <= 0.0 {
        return None;
    }
    let slope = sxy / sxx;
    let intercept = mean_y - slope * mean_x;
    // Residual sum of squares of the least-squares line, computed directly for accuracy.
    let ss_res: f64 = selected
        .iter()
        .map(|&(x, y)| {
            let r = y - (intercept + slope * x);
            r * r
        })
        .sum();
    let r_squared = if syy > 0.0 {
        (1.0 - ss_res / syy).clamp(0.0, 1.0)
    } else if ss_res == 0.0 {
        1.0
    } else {
        0.0
    };
    Some(LineFit {
        slope,
        intercept,
        r_squared,
        points: n,
    })
}

/// Median of `values` (reordered in place); 0 for an empty slice. Linear time on average.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    let (_, upper, _) = values.select_nth_unstable_by(n / 2, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return upper;
    }
    // The lower middle is the largest value left of the upper middle.
    let lower = values[..n / 2]
        .iter()
        .copied()
        .max_by(f64::total_cmp)
        .unwrap_or(upper);
    (lower + upper) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn exact_line_is_recovered_with_r_squared_one() {
        let points: Vec<(f64, f64)> = (0..10)
            .map(|x| (f64::from(x), 5.0 + 2.0 * f64::from(x)))
            .collect();
        let fit = least_squares(&points).unwrap();
        assert!((fit.slope - 2.0).abs() < 1e-12);
        assert!((fit.intercept - 5.0).abs() < 1e-9);
        assert!((fit.r_squared - 1.0).abs() < 1e-12);
        assert_eq!(fit.points, 10);
    }

    #[test]
    fn no_slope_without_two_distinct_x() {
        assert!(least_squares(&[]).is_none());
        assert!(least_squares(&[(1.0, 2.0)]).is_none());
        assert!(least_squares(&[(1.0, 2.0), (1.0, 3.0)]).is_none());
        assert!(least_squares(&[(0.0, f64::NAN), (1.0, 3.0)]).is_none());
    }

    #[test]
    fn flat_series_is_a_perfect_flat_fit() {
        let fit = least_squares(&[(0.0, 7.0), (1.0, 7.0), (2.0, 7.0)]).unwrap();
        assert_eq!(fit.slope, 0.0);
        assert_eq!(fit.r_squared, 1.0);
    }

    #[test]
    fn large_byte_values_keep_precision() {
        // 40 GiB baseline, 1 MiB per step, steps 10 000..10 100.
        let points: Vec<(f64, f64)> = (10_000..10_100)
            .map(|s| (f64::from(s), 40.0 * 1073741824.0 + 1048576.0 * f64::from(s)))
            .collect();
        let fit = least_squares(&points).unwrap();
        assert!((fit.slope - 1048576.0).abs() < 1e-3, "{}", fit.slope);
        assert!(fit.r_squared > 0.999_999);
    }

    #[test]
    fn robust_fit_ignores_a_few_wild_points() {
        let mut points: Vec<(f64, f64)> = (0..100)
            .map(|x| {
                (
                    f64::from(x),
                    1000.0 + 10.0 * f64::from(x) + if x % 2 == 0 { 1.0 } else { -1.0 },
                )
            })
            .collect();
        points[50].1 += 100_000.0;
        points[77].1 -= 50_000.0;
        let plain = least_squares(&points).unwrap();
        let robust = robust_line(&points).unwrap();
        assert!(
            (plain.slope - 10.0).abs() > 1.0,
            "outliers bend the plain fit"
        );
        assert!(
            (robust.line.slope - 10.0).abs() < 0.01,
            "{}",
            robust.line.slope
        );
        assert_eq!(robust.dropped, 2);
        assert!(!robust.kept[50] && !robust.kept[77]);
        assert!(robust.line.r_squared > 0.99);
    }

    #[test]
    fn zero_mad_drops_nothing() {
        // Five points at x=0 sit exactly on the first line, so the MAD is 0: the wild point at
        // (1, 100) stays, as the rule says (nothing to scale "far" by).
        let points = [
            (0.0, 0.0),
            (0.0, 0.0),
            (0.0, 0.0),
            (0.0, 0.0),
            (0.0, 0.0),
            (1.0, 1.0),
            (1.0, 1.0),
            (1.0, 100.0),
        ];
        let robust = robust_line(&points).unwrap();
        assert_eq!(robust.dropped, 0);
        assert_eq!(robust.line.slope, 34.0);
        let exact: Vec<(f64, f64)> = (0..20)
            .map(|x| (f64::from(x), 3.0 * f64::from(x)))
            .collect();
        assert_eq!(robust_line(&exact).unwrap().dropped, 0);
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&mut []), 0.0);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    }

    proptest! {
        /// A planted slope is recovered within 1% despite noise and a few gross outliers.
        #[test]
        fn robust_fit_recovers_planted_slope(
            slope in 1_000.0f64..50_000_000.0,
            intercept in 0.0f64..80e9,
            n in 30usize..400,
            noise_frac in 0.0f64..0.2,
            seed in any::<u64>(),
            outliers in proptest::collection::vec((any::<prop::sample::Index>(), -1000.0f64..1000.0), 0..4),
        ) {
            let mut state = seed | 1;
            let mut next = move || {
                // xorshift64*: deterministic noise in [-1, 1).
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                (state.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
            };
            // Noise up to a fifth of a step's growth: the line stays clearly visible.
            let mut points: Vec<(f64, f64)> = (0..n)
                .map(|i| (i as f64, intercept + slope * i as f64 + next() * noise_frac * slope))
                .collect();
            for (index, offset) in &outliers {
                let i = index.index(n);
                // A wild point 10 to 1 000 steps' worth of growth off the line.
                points[i].1 += offset.signum() * (offset.abs() + 10.0) * slope;
            }
            let fit = robust_line(&points).unwrap();
            let error = (fit.line.slope - slope).abs() / slope;
            prop_assert!(error < 0.01, "slope {} vs planted {}", fit.line.slope, slope);
        }
    }
}

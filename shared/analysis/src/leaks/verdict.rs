//! Whether a fit is a leak, and why not when it is not: the evidence a leak needs scales with
//! its strength (long and straight; short, very straight and sustained; or cut short by an
//! out-of-memory error of the same memory), and growth that is something else's (pages of
//! memory-mapped files, the heap's creep after evals, the workers' copies) is never one.

use super::growth_fit::{LeakEvidence, LeakVerdict, NotALeak};

/// Default for the least number of distinct steps a fit needs before it can be called a leak.
pub const DEFAULT_MIN_STEPS: usize = 20;

/// A fit must explain at least this share of the variance to be called a leak: growth must be
/// steady, not a few jumps.
pub const MIN_R_SQUARED: f64 = 0.8;

/// Growth below this over the fitted span is never called a leak (allocator rounding, small
/// caches warming up).
///
/// This floor and its variants (a fit's `min_leak_growth_bytes`) were set on this module's
/// simulated runs and `train.py --leak list` (python_hooks_findings.rs); checked on the zoo: its seven
/// leaking programs grow 1.4–9.5 times their floor, and the steady fits of its clean programs at
/// most 0.37 times it (`gnn_clean.py`; `scripts/zoo_thresholds.py`).
pub const MIN_GROWTH_BYTES: u64 = 64 << 20;

/// Growth below this share of the memory limit (device total, or host memory) is not a leak...
pub const MIN_GROWTH_FRACTION_OF_LIMIT: f64 = 0.01;

/// ...unless the growth is this steady (R²) over at least [`STEADY_MIN_STEPS`] distinct steps
/// and still rising in its second half (sustained): 4 MiB kept every step for 30 steps is a leak
/// on any machine, even though 120 MiB is under 1% of a 24 GiB host. Then only
/// [`MIN_GROWTH_BYTES`] applies.
pub const STEADY_R_SQUARED: f64 = 0.98;

/// See [`STEADY_R_SQUARED`]. Steps the fit kept: the robust fit drops a warm-up step or two, so
/// at 30 a real 30-step PyTorch loop keeping 4 MiB a step (R² 0.999, +116 MiB over 28 kept
/// steps, under both floors on a 24 GiB host) read "no leak across steps". 20 steps stay too
/// short to call steady.
pub const STEADY_MIN_STEPS: usize = 25;

/// A short run can show a leak too: most OOM runs die early. With at least this many distinct
/// steps, a fit with R² ≥ [`SHORT_R_SQUARED`] whose growth continues into its second half
/// ("sustained": not a warm-up that levelled off) and reaches [`SHORT_MIN_GROWTH_FRACTION_OF_LIMIT`]
/// of the limit (and [`MIN_GROWTH_BYTES`]) is a leak.
pub const SHORT_MIN_STEPS: usize = 8;

/// See [`SHORT_MIN_STEPS`].
pub const SHORT_R_SQUARED: f64 = 0.95;

/// See [`SHORT_MIN_STEPS`].
pub const SHORT_MIN_GROWTH_FRACTION_OF_LIMIT: f64 = 0.005;

/// A run that died of an out-of-memory error of the same memory (GPU for device metrics, host
/// for RSS) after sustained growth needs only this many steps, with R² ≥ [`MIN_R_SQUARED`] and
/// the short-run growth floor: the OOM is the evidence the growth mattered.
pub const BEFORE_OOM_MIN_STEPS: usize = 5;

/// See [`GrowthFit::file_backed_growth_bytes`].
pub const FILE_BACKED_MIN_SHARE: f64 = 0.5;

/// What a fit measured that its verdict reads.
#[derive(Debug, Clone, Copy)]
pub(super) struct Measured {
    /// The line and the training steps' own rate both rise.
    pub(super) rising: bool,
    /// At least [`FILE_BACKED_MIN_SHARE`] of the growth is pages of memory-mapped files.
    pub(super) file_backed: bool,
    /// The heap's creep after what the transitions kept (`split::staircase_creep`).
    pub(super) creep: bool,
    /// The growing workers' copies account for the growth.
    pub(super) copied_by_workers: bool,
    /// Distinct steps the fit stands for.
    pub(super) steps: usize,
    /// The least steps a long fit needs (the analysis's option, default [`DEFAULT_MIN_STEPS`]).
    pub(super) min_steps: usize,
    /// R² of the training steps' own series.
    pub(super) r_squared: f64,
    /// The second half of the points still rises.
    pub(super) sustained: bool,
    /// The fitted growth over the span.
    pub(super) growth_bytes: f64,
    /// The training steps' own growth over the span.
    pub(super) train_growth_bytes: f64,
    /// The growth a long fit needs.
    pub(super) long_floor_bytes: u64,
    /// The growth a short or cut-short fit needs.
    pub(super) short_floor_bytes: u64,
    /// The run died of an out-of-memory error of this memory.
    pub(super) died_of_oom: bool,
}

/// The verdict on what a fit measured (see [`super::leak_fits`] for the evidence each needs).
pub(super) fn judge(m: &Measured) -> LeakVerdict {
    let not = LeakVerdict::Not;
    if !m.rising {
        return not(NotALeak::NotRising);
    }
    if m.file_backed {
        return not(NotALeak::FileBacked);
    }
    if m.creep {
        return not(NotALeak::StaircaseCreep);
    }
    if m.copied_by_workers {
        return not(NotALeak::CopiedByWorkers);
    }
    let grows = |floor: u64| m.growth_bytes >= floor as f64 && m.train_growth_bytes >= floor as f64;
    if m.steps >= m.min_steps && m.r_squared >= MIN_R_SQUARED && grows(m.long_floor_bytes) {
        LeakVerdict::Leak(LeakEvidence::Long)
    } else if m.steps >= SHORT_MIN_STEPS
        && m.r_squared >= SHORT_R_SQUARED
        && m.sustained
        && grows(m.short_floor_bytes)
    {
        LeakVerdict::Leak(LeakEvidence::Short)
    } else if m.died_of_oom
        && m.steps >= BEFORE_OOM_MIN_STEPS
        && m.r_squared >= MIN_R_SQUARED
        && m.sustained
        && grows(m.short_floor_bytes)
    {
        LeakVerdict::Leak(LeakEvidence::BeforeOom)
    } else {
        not(NotALeak::TooLittleEvidence)
    }
}

/// The growth floor a verdict used: a short or cut-short leak's, else the long one's.
pub(super) fn floor_used(verdict: LeakVerdict, m: &Measured) -> u64 {
    match verdict {
        LeakVerdict::Leak(LeakEvidence::Short | LeakEvidence::BeforeOom) => m.short_floor_bytes,
        _ => m.long_floor_bytes,
    }
}

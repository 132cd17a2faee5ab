//! Memory that grows step after step: leaks, and when they will kill the run.
//!
//! A healthy training loop returns to the same memory at the same point of every step. A loop
//! that keeps something per step (a loss tensor appended to a list without `.item()`, a growing
//! cache, a hook that stores outputs) climbs a little each step and dies hours later. Comparing
//! the same stage across steps removes the within-step sawtooth, and a robust line fit
//! ([`robust_line`]) ignores the odd step that ran eval or flushed the cache. A fit is called a
//! leak only when it is long, straight, rising and large: see [`leak_fits`].
//!
//! Only training marks (`Train`, or `Unknown` when the program did not say) are fitted; eval
//! marks restart their own pattern and are analysed by the phase transitions. A run that never
//! trains (a serving or inference loop: every forward under `eval()`, `no_grad` or
//! `inference_mode`, no optimizer) has no steps; its clock is the forward ([`Clock`]): each
//! outermost forward counts one, and memory kept per request shows per forward.
//!
//! The parts: [`GrowthFit`] and its [`LeakVerdict`] (`growth_fit`), the fits themselves (`fit`),
//! the evidence a leak needs (`verdict`), the steps' growth split from the transitions'
//! (`split`), the epochs' clock (`epochs`), and when memory is full (`projection`).

mod epochs;
mod fit;
mod growth_fit;
mod points;
mod projection;
mod split;
mod verdict;

pub use crate::clocks::Clock;
pub use epochs::{EPOCH_COUNTED_SHARE, EPOCH_END_SHARE, EPOCH_MIN, EPOCH_R_SQUARED};
pub use fit::{headline_leak, leak_fits};
pub use growth_fit::{FullProjection, GrowthFit, LeakEvidence, LeakVerdict, LimitBasis, NotALeak};
pub use projection::{limit_of, limit_with_host};
pub use split::{
    PAUSE_FACTOR, PAUSE_KEPT_FACTOR, PAUSE_KEPT_MIN_BYTES, SETTLE_STEPS, SUSTAINED_SHARE,
};
pub use verdict::{
    BEFORE_OOM_MIN_STEPS, DEFAULT_MIN_STEPS, FILE_BACKED_MIN_SHARE, MIN_GROWTH_BYTES,
    MIN_GROWTH_FRACTION_OF_LIMIT, MIN_R_SQUARED, SHORT_MIN_GROWTH_FRACTION_OF_LIMIT,
    SHORT_MIN_STEPS, SHORT_R_SQUARED, STEADY_MIN_STEPS, STEADY_R_SQUARED,
};

#[cfg(test)]
mod tests;

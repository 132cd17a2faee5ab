//! Finding the largest batch that fits, and backing off on OOM.
//!
//! Batch-size finders that only grow-until-OOM pick sizes that barely fit and then OOM later on a
//! longer sequence or a fragmented cache (Lightning#20447, #21154). This search measures each
//! trial's peak, fits `peak = fixed + batch × per_sample` through the trials that fit (the same
//! fit `collector summary` makes from the trace, `oomscope_analysis::facts::BatchFit`), and
//! recommends the largest batch that stays within `(1 − margin)` of the memory limit.
//!
//! A trial's peak is the caching allocator's peak on CUDA (reset before each trial). On CPU it is
//! the process's peak resident memory (`VmHWM`, reset through `/proc/self/clear_refs`), so a CPU
//! search with [`BatchSearch::limit_bytes`] behaves like a device of that size.

use oomscope_analysis::facts::{TrialFit, fit_trials};
use oomscope_format::{BatchTrial, Record, TrialOutcome};

use super::allocator;
use super::session::Session;
use oomscope_format::protocol::Message;

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchSearch {
    /// First batch tried.
    pub start: u64,
    /// Largest batch tried.
    pub max: u64,
    /// Share of the limit kept free in the recommendation (default 10%).
    pub margin: f64,
    /// Memory limit: a trial whose peak exceeds it counts as out of memory. Default: the GPU's
    /// total memory on CUDA (real OOMs are caught too); required to search on CPU.
    pub limit_bytes: Option<u64>,
}

impl Default for BatchSearch {
    fn default() -> BatchSearch {
        BatchSearch {
            start: 1,
            max: 1 << 16,
            margin: oomscope_analysis::thresholds::DEFAULT_BATCH_MARGIN,
            limit_bytes: None,
        }
    }
}

/// What the search found.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSearchResult {
    /// Every trial, in order.
    pub trials: Vec<BatchTrial>,
    /// The largest batch that ran.
    pub largest_fit: Option<u64>,
    /// The smallest batch that did not.
    pub smallest_oom: Option<u64>,
    /// The memory limit used.
    pub limit_bytes: Option<u64>,
    /// The fitted memory model and the batch it predicts within the margin.
    pub fit: Option<TrialFit>,
    /// The batch to use: the prediction within the margin, never above the largest that ran.
    pub recommended: Option<u64>,
}

/// Peak memory of a trial.
enum PeakMeter {
    Cuda(usize),
    Host,
}

impl PeakMeter {
    fn reset(&self) {
        match self {
            PeakMeter::Cuda(device) => {
                let _ = allocator::empty_cache();
                let _ = allocator::reset_peak_stats(*device);
            }
            // "5" resets the peak resident set size (VmHWM) to the current one (Linux ≥ 4.0).
            PeakMeter::Host => {
                let _ = std::fs::write("/proc/self/clear_refs", "5");
            }
        }
    }

    fn peak_bytes(&self) -> Option<u64> {
        match self {
            PeakMeter::Cuda(device) => allocator::stats(*device)
                .ok()
                .map(|s| s.peak_allocated_bytes),
            PeakMeter::Host => {
                let status = std::fs::read_to_string("/proc/self/status").ok()?;
                let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib * 1024)
            }
        }
    }
}

impl Session {
    /// Finds the largest batch size that fits: doubles from `search.start` until a trial runs out
    /// of memory (or exceeds `search.limit_bytes`), then bisects. `trial(batch)` runs one
    /// training step at that batch; an OOM inside it is caught, recorded, and the cache emptied.
    /// Every trial goes into the trace.
    pub fn find_max_batch_size(
        &self,
        search: &BatchSearch,
        mut trial: impl FnMut(u64),
    ) -> BatchSearchResult {
        let runner = TrialRunner::new(self, search);
        let limit_bytes = runner.limit_bytes;
        let mut trials: Vec<BatchTrial> = Vec::new();
        let mut run = |batch: u64, trials: &mut Vec<BatchTrial>| -> bool {
            let record = runner.run(batch, &mut trial);
            let fits = record.outcome == TrialOutcome::Fit;
            self.record_trial(&record);
            trials.push(record);
            fits
        };
        let (mut low, mut high) = (None::<u64>, None::<u64>);
        let mut batch = search.start.max(1);
        while batch <= search.max {
            if run(batch, &mut trials) {
                low = Some(batch);
                batch = batch.saturating_mul(2);
            } else {
                high = Some(batch);
                break;
            }
        }
        if let (Some(mut lo), Some(mut hi)) = (low, high) {
            while hi - lo > 1 {
                let mid = lo + (hi - lo) / 2;
                if run(mid, &mut trials) {
                    lo = mid;
                } else {
                    hi = mid;
                }
            }
            low = Some(lo);
            high = Some(hi);
        }
        let fit = limit_bytes.and_then(|limit| fit_trials(&trials, limit, search.margin));
        let recommended = match (fit, low) {
            (Some(fit), Some(low)) => Some(fit.max_batch.min(low)),
            (None, low) => low,
            (Some(fit), None) => Some(fit.max_batch),
        };
        runner.meter.reset();
        BatchSearchResult {
            trials,
            largest_fit: low,
            smallest_oom: high,
            limit_bytes,
            fit,
            recommended,
        }
    }

    /// The plain scan the search is checked against: one trial at `search.start`, then at every
    /// next batch size, until one does not fit (or `search.max`). Returns the largest that ran.
    /// Trials are judged exactly as [`Session::find_max_batch_size`] judges them but are not
    /// recorded: the scan is a reference, not part of the run.
    pub fn scan_max_batch_size(
        &self,
        search: &BatchSearch,
        mut trial: impl FnMut(u64),
    ) -> Option<u64> {
        let runner = TrialRunner::new(self, search);
        let mut largest = None;
        for batch in search.start.max(1)..=search.max {
            if runner.run(batch, &mut trial).outcome != TrialOutcome::Fit {
                break;
            }
            largest = Some(batch);
        }
        runner.meter.reset();
        largest
    }

    /// Runs `step(batch)`, halving the batch after each OOM until it fits (or batch 1 fails too).
    /// Returns the batch that ran and its result.
    pub fn run_with_oom_backoff<T>(
        &self,
        initial: u64,
        mut step: impl FnMut(u64) -> T,
    ) -> Result<(u64, T), super::session::OomError> {
        let mut batch = initial.max(1);
        loop {
            match self.catch_oom(|| step(batch)) {
                Ok(value) => return Ok((batch, value)),
                Err(e) if batch == 1 => return Err(e),
                Err(_) => {
                    batch /= 2;
                    self.note(&format!("out of memory: retrying with batch {batch}"));
                }
            }
        }
    }

    fn record_trial(&self, trial: &BatchTrial) {
        self.send(Message::record(Record::Trial(*trial)));
    }

    /// Total memory of the CUDA device in use, from NVML.
    fn device_total_bytes(&self) -> Option<u64> {
        let device = u32::try_from(self.cuda_device()?).ok()?;
        let gpus = crate::gpu::Gpus::open(&crate::gpu::GpuSelection::Indices(vec![device])).ok()?;
        gpus.infos().first().map(|g| g.total_memory_bytes)
    }
}

/// Runs one trial the way the search and the scan both judge it: cache emptied and peak reset
/// first, OOMs caught, and a peak above the limit counted as out of memory.
struct TrialRunner<'a> {
    session: &'a Session,
    meter: PeakMeter,
    limit_bytes: Option<u64>,
}

impl<'a> TrialRunner<'a> {
    fn new(session: &'a Session, search: &BatchSearch) -> TrialRunner<'a> {
        let meter = match session.cuda_device() {
            Some(device) => PeakMeter::Cuda(device),
            None => PeakMeter::Host,
        };
        let limit_bytes = search.limit_bytes.or_else(|| session.device_total_bytes());
        TrialRunner {
            session,
            meter,
            limit_bytes,
        }
    }

    fn run(&self, batch: u64, trial: &mut impl FnMut(u64)) -> BatchTrial {
        self.meter.reset();
        let outcome = self.session.catch_oom(|| trial(batch));
        let peak = self.meter.peak_bytes();
        let fits = outcome.is_ok()
            && self
                .limit_bytes
                .zip(peak)
                .is_none_or(|(limit, peak)| peak <= limit);
        BatchTrial {
            t_us: 0,
            batch_size: batch,
            outcome: if fits {
                TrialOutcome::Fit
            } else {
                TrialOutcome::Oom
            },
            peak_bytes: if fits { peak } else { None },
        }
    }
}

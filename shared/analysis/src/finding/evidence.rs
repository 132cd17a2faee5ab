//! The numbers behind a finding, machine-readable ([`Evidence`]): what each is
//! ([`EvidenceKey`], one closed set, so a rule and a reader of its numbers name the same key or
//! fail to compile), its value and its [`Unit`]. `collector summary --json` writes each as
//! `{"label": "r_squared", "value": 0.98, "unit": "number"}`; the key's label is that string.

use serde::{Serialize, Serializer};

use crate::clocks::Clock;

/// The unit of an evidence value, so every layer formats it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Bytes (negative for a shrink).
    Bytes,
    /// A count of things (steps, records, elements, a batch size, a step number).
    Count,
    /// A share of a whole, 0–1.
    Share,
    /// A duration in microseconds.
    Micros,
    /// A plain number (a fit's R²).
    Number,
}

impl Unit {
    /// `bytes`, `count`, `share`, `micros`, `number` (as serialised).
    pub fn label(self) -> &'static str {
        match self {
            Unit::Bytes => "bytes",
            Unit::Count => "count",
            Unit::Share => "share",
            Unit::Micros => "micros",
            Unit::Number => "number",
        }
    }
}

macro_rules! evidence_keys {
    ($($name:ident => $label:literal,)*) => {
        /// What a number behind a finding is. Its label (`r_squared`, `full_at_step`) is the JSON
        /// contract; a key measured along a clock names the clock ([`EvidenceKey::FullAt`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[allow(missing_docs)]
        pub enum EvidenceKey {
            $($name,)*
            /// A leak's growth per unit of its clock (`slope_bytes_per_step`, `…_forward`,
            /// `…_epoch`).
            SlopePer(Clock),
            /// What the program's containers were counted gaining per unit of the clock
            /// (`held_bytes_per_step`, …).
            HeldPer(Clock),
            /// Where on the clock memory is full at the leak's rate (`full_at_step`,
            /// `full_at_forward`, `full_at_epoch`).
            FullAt(Clock),
        }

        impl EvidenceKey {
            /// The label `summary --json` writes.
            pub fn label(self) -> &'static str {
                match self {
                    $(EvidenceKey::$name => $label,)*
                    EvidenceKey::SlopePer(c) => match c {
                        Clock::Step => "slope_bytes_per_step",
                        Clock::Forward => "slope_bytes_per_forward",
                        Clock::Epoch => "slope_bytes_per_epoch",
                    },
                    EvidenceKey::HeldPer(c) => match c {
                        Clock::Step => "held_bytes_per_step",
                        Clock::Forward => "held_bytes_per_forward",
                        Clock::Epoch => "held_bytes_per_epoch",
                    },
                    EvidenceKey::FullAt(c) => match c {
                        Clock::Step => "full_at_step",
                        Clock::Forward => "full_at_forward",
                        Clock::Epoch => "full_at_epoch",
                    },
                }
            }

            /// Every key, the clock's ones on every clock (the labels' uniqueness is tested).
            pub fn all() -> Vec<EvidenceKey> {
                let mut all = vec![$(EvidenceKey::$name,)*];
                for c in [Clock::Step, Clock::Forward, Clock::Epoch] {
                    all.extend([
                        EvidenceKey::SlopePer(c),
                        EvidenceKey::HeldPer(c),
                        EvidenceKey::FullAt(c),
                    ]);
                }
                all
            }
        }
    };
}

evidence_keys! {
    AccumulationSteps => "accumulation_steps",
    ActivationsBytes => "activations_bytes",
    ActivationsShare => "activations_share",
    ActiveBytes => "active_bytes",
    AllocRetries => "alloc_retries",
    AllocatedBytes => "allocated_bytes",
    AvailableBytes => "available_bytes",
    Bytes => "bytes",
    BytesPerInputElement => "bytes_per_input_element",
    Collections => "collections",
    CurrentBatch => "current_batch",
    CurrentBytes => "current_bytes",
    DeviceFreeBytes => "device_free_bytes",
    DeviceTotalBytes => "device_total_bytes",
    EntryStep => "entry_step",
    EstimatedSavingBytes => "estimated_saving_bytes",
    EvalPeakBytes => "eval_peak_bytes",
    Evals => "evals",
    EvalsRemaining => "evals_remaining",
    ExcessBytes => "excess_bytes",
    FailedRequestBytes => "failed_request_bytes",
    FirstStep => "first_step",
    FixedBytes => "fixed_bytes",
    FreedBytes => "freed_bytes",
    FromStep => "from_step",
    FromUs => "from_us",
    GrowthBytes => "growth_bytes",
    InactiveSplitBytes => "inactive_split_bytes",
    InactiveSplitFraction => "inactive_split_fraction",
    InfElements => "inf_elements",
    InputElements => "input_elements",
    JumpBytes => "jump_bytes",
    KeptBlocks => "kept_blocks",
    KeptBytes => "kept_bytes",
    Killed => "killed",
    KilledPid => "killed_pid",
    LargestFitBatch => "largest_fit_batch",
    LargestFreeBlockBytes => "largest_free_block_bytes",
    LargestFreedBytes => "largest_freed_bytes",
    LargestRiseBytes => "largest_rise_bytes",
    LargestRiseStep => "largest_rise_step",
    LargestWorkerPid => "largest_worker_pid",
    LastStep => "last_step",
    LeakingFits => "leaking_fits",
    LimitBytes => "limit_bytes",
    LoopBytes => "loop_bytes",
    Margin => "margin",
    Marks => "marks",
    MaxBatch => "max_batch",
    MaxBytes => "max_bytes",
    MaxInactiveSplitBytes => "max_inactive_split_bytes",
    MaxOutsideBytes => "max_outside_bytes",
    MedianBytes => "median_bytes",
    MedianInputElements => "median_input_elements",
    MedianOutsideBytes => "median_outside_bytes",
    MedianPeakBytes => "median_peak_bytes",
    MedianProcessGpuBytes => "median_process_gpu_bytes",
    MedianReservedBytes => "median_reserved_bytes",
    MinAvailableBytes => "min_available_bytes",
    MinAvailableFraction => "min_available_fraction",
    NanElements => "nan_elements",
    NonFiniteSteps => "non_finite_steps",
    OomEvents => "oom_events",
    Ooms => "ooms",
    OptimizerShare => "optimizer_share",
    OptimizerStateBytes => "optimizer_state_bytes",
    OthersWaitedUs => "others_waited_us",
    ParametersBytes => "parameters_bytes",
    PeakAllocatedBytes => "peak_allocated_bytes",
    PeakBytes => "peak_bytes",
    PeakGapBytes => "peak_gap_bytes",
    PeakGapFraction => "peak_gap_fraction",
    PeakReservedBytes => "peak_reserved_bytes",
    PerEvalBytes => "per_eval_bytes",
    PerSampleBytes => "per_sample_bytes",
    PrivateGrowthBytes => "private_growth_bytes",
    RSquared => "r_squared",
    Rank => "rank",
    Ranks => "ranks",
    RecordedSteps => "recorded_steps",
    Records => "records",
    RequestedBytes => "requested_bytes",
    ReservedBytes => "reserved_bytes",
    RetainedBytes => "retained_bytes",
    RetainingEvals => "retaining_evals",
    RssAtKillBytes => "rss_at_kill_bytes",
    RssAtMinBytes => "rss_at_min_bytes",
    ShmPeakBytes => "shm_peak_bytes",
    ShmRunBytes => "shm_run_bytes",
    ShmSizeBytes => "shm_size_bytes",
    ShortfallBytes => "shortfall_bytes",
    SlopeBytesPerS => "slope_bytes_per_s",
    SmallestOomBatch => "smallest_oom_batch",
    SpreadOfRecording => "spread_of_recording",
    Step => "step",
    TUs => "t_us",
    Tensors => "tensors",
    TimeToFullUs => "time_to_full_us",
    TimesTheLimit => "times_the_limit",
    ToStep => "to_step",
    ToUs => "to_us",
    TotalRetainedBytes => "total_retained_bytes",
    TrainingPeakBytes => "training_peak_bytes",
    TrainingStepsGrowthBytes => "training_steps_growth_bytes",
    Trials => "trials",
    UntrainedModelsBytes => "untrained_models_bytes",
    UntrainedShare => "untrained_share",
    WithinEvalGrowthBytes => "within_eval_growth_bytes",
    Workers => "workers",
}

impl Serialize for EvidenceKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.label())
    }
}

/// A machine-readable number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Evidence {
    /// What it is (serialised as its label: `shortfall_bytes`, `r_squared`, `step`).
    #[serde(rename = "label")]
    pub key: EvidenceKey,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: Unit,
}

impl Evidence {
    /// Bytes.
    pub fn bytes(key: EvidenceKey, value: f64) -> Evidence {
        Evidence::new(key, value, Unit::Bytes)
    }

    /// A count.
    pub fn count(key: EvidenceKey, value: f64) -> Evidence {
        Evidence::new(key, value, Unit::Count)
    }

    /// A share of a whole (0–1).
    pub fn share(key: EvidenceKey, value: f64) -> Evidence {
        Evidence::new(key, value, Unit::Share)
    }

    /// A duration in microseconds.
    pub fn micros(key: EvidenceKey, value: f64) -> Evidence {
        Evidence::new(key, value, Unit::Micros)
    }

    /// A plain number.
    pub fn number(key: EvidenceKey, value: f64) -> Evidence {
        Evidence::new(key, value, Unit::Number)
    }

    fn new(key: EvidenceKey, value: f64, unit: Unit) -> Evidence {
        Evidence { key, value, unit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_is_snake_case_and_unique() {
        let mut labels: Vec<&str> = EvidenceKey::all()
            .into_iter()
            .map(EvidenceKey::label)
            .collect();
        for l in &labels {
            assert!(l.chars().all(|c| c.is_ascii_lowercase() || c == '_'), "{l}");
        }
        let n = labels.len();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), n);
        assert_eq!(
            serde_json::to_value(EvidenceKey::FullAt(Clock::Forward)).unwrap(),
            "full_at_forward"
        );
    }
}

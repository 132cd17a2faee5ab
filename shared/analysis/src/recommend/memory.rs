//! Rules about what fills GPU memory: the OOM itself, activations, optimizer state, batch size.
//!
//! They share the memory model of [`crate::batch_fit`], so the batch the `oom` finding
//! suggests is the batch `activations-dominate` and `batch-size` compute.

use super::rule::{Diagnose, RuleContext, critical_if, warning_if};
use crate::batch_fit::BatchFitMethod;
use crate::finding::{
    ActivationShare, BatchSearchResult, Detail, Evidence, EvidenceKey as K, FindingKind,
    FollowsInput, LoopPart, OptimizerShare, OutOfGpuMemory, Severity, StateGrowth,
};
use crate::oom::OomContext;
use crate::peaks::{ActivationsBasis, Peak, PeakComponents, memory_peak};
use oomscope_format::{OomKind, TrialOutcome};

/// Activations at or above this share of the peak are what to shrink first.
pub const ACTIVATIONS_MIN_SHARE: f64 = 0.5;

/// Optimizer state at or above this share of the peak is worth shrinking (Adam keeps two fp32
/// moments, 2× the fp32 parameters; at 30% it is a larger lever than most activation tricks).
pub const OPTIMIZER_MIN_SHARE: f64 = 0.30;

/// A peak at or above this share of the device counts as "near full": memory findings that would
/// otherwise be informational become warnings.
pub const NEAR_FULL_FRACTION: f64 = 0.90;

/// The memory peak and its components, when activations were computed for it.
fn peak_with_components<'a>(ctx: &RuleContext<'a>) -> Option<(&'a Peak, &'a PeakComponents)> {
    let peak = memory_peak(&ctx.analysis.peaks)?;
    Some((peak, peak.components.as_ref()?))
}

/// True when the run hit a GPU OOM.
fn had_gpu_oom(ctx: &RuleContext<'_>) -> bool {
    ctx.analysis.ooms.iter().any(|o| o.kind == OomKind::Gpu)
}

/// True when the peak came within [`NEAR_FULL_FRACTION`] of the device.
fn near_full(ctx: &RuleContext<'_>, peak: &Peak) -> bool {
    ctx.trace
        .gpu_total_bytes(peak.device)
        .is_some_and(|total| peak.bytes as f64 >= NEAR_FULL_FRACTION * total as f64)
}

/// `oom`: the run ran out of GPU memory.
#[derive(Debug, Clone, Copy, Default)]
pub struct Oom;

impl Diagnose for Oom {
    const KIND: FindingKind = FindingKind::Oom;
    type Diagnosis = OutOfGpuMemory;

    /// Detection: the first GPU OOM and where in the loop it struck; `None` without one.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<OutOfGpuMemory> {
        let gpu: Vec<&OomContext> = ctx
            .analysis
            .ooms
            .iter()
            .filter(|o| o.kind == OomKind::Gpu)
            .collect();
        // The OOM the run died of explains the run; without one, the first the program survived.
        let first = gpu.iter().find(|o| o.fatal).or(gpu.first()).copied()?;
        Some(OutOfGpuMemory {
            first: first.clone(),
            events: gpu.len(),
            part: LoopPart::running(first.event.stage.as_deref(), first.next_stage.as_deref()),
            fit: ctx.analysis.batch_fit.clone(),
            optimizer_state_bytes: peak_with_components(ctx)
                .map(|(_, c)| c.breakdown.optimizer_state_bytes),
            oom_trials: ctx
                .trace
                .batch_trials
                .iter()
                .filter(|t| t.outcome == TrialOutcome::Oom)
                .count(),
            run_up: ctx
                .analysis
                .run_up
                .clone()
                .filter(|r| r.kind == OomKind::Gpu && first.fatal),
            impossible: super::impossible::impossible(first).is_some(),
        })
    }

    /// Critical when the run died of it; a warning when the program caught it and went on.
    fn severity(&self, d: &OutOfGpuMemory) -> Severity {
        critical_if(d.first.fatal)
    }

    fn evidence(&self, d: &OutOfGpuMemory) -> Vec<Evidence> {
        let first = &d.first;
        let mut evidence = vec![Evidence::count(K::OomEvents, d.events as f64)];
        evidence.extend(first.event.step.map(|s| Evidence::count(K::Step, s as f64)));
        let optional_bytes = [
            (K::RequestedBytes, first.event.requested_bytes),
            (K::DeviceFreeBytes, first.event.device_free_bytes),
            (K::DeviceTotalBytes, first.event.device_total_bytes),
            (K::AllocatedBytes, first.allocated_bytes),
            (K::ReservedBytes, first.reserved_bytes),
        ];
        evidence.extend(
            optional_bytes
                .iter()
                .filter_map(|(k, v)| Some(Evidence::bytes(*k, (*v)? as f64))),
        );
        if let Some(s) = first.shortfall_bytes {
            evidence.push(Evidence::bytes(K::ShortfallBytes, s as f64));
        }
        evidence
    }

    fn detail(d: OutOfGpuMemory) -> Detail {
        Detail::Oom(d)
    }
}

/// `activations-dominate`: activations are most of the peak.
#[derive(Debug, Clone, Copy, Default)]
pub struct ActivationsDominate;

/// A memory whose floor or peak followed the input's size (its symptom): activations scale
/// with the input and the model's state does not, so they are what moves it; the peak is where
/// the largest input was.
fn following_the_input(ctx: &RuleContext<'_>) -> Option<ActivationShare> {
    let (s, bytes_per_element, correlation) =
        ctx.analysis.symptoms.iter().find_map(|s| match s.shape {
            crate::symptom::Shape::FollowsInput {
                bytes_per_element,
                correlation,
            } => Some((s, bytes_per_element, correlation)),
            _ => None,
        })?;
    let peak = crate::peaks::breakdown_peak(&ctx.analysis.peaks)
        .or_else(|| ctx.analysis.peaks.iter().find(|p| p.measure == s.metric))?;
    let model = peak
        .components
        .as_ref()
        .map_or(0, |c| c.breakdown.total_bytes());
    // What the input moved: the floor's rise over the run, at the least.
    let activations_bytes = s.levels.rise_bytes.max(0) as u64;
    Some(ActivationShare {
        peak: peak.clone(),
        activations_bytes,
        share: activations_bytes as f64 / peak.bytes.max(1) as f64,
        fit: ctx.analysis.batch_fit.clone(),
        pressed: activations_bytes > model && (had_gpu_oom(ctx) || near_full(ctx, peak)),
        follows_input: Some(FollowsInput {
            metric: s.metric,
            bytes_per_element,
            correlation,
        }),
    })
}

impl Diagnose for ActivationsDominate {
    const KIND: FindingKind = FindingKind::ActivationsDominate;
    type Diagnosis = ActivationShare;

    /// Detection: activations are at least [`ACTIVATIONS_MIN_SHARE`] of the peak, measured
    /// against the allocator, with no leak of the primary metric inflating the remainder.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<ActivationShare> {
        if let Some(d) = following_the_input(ctx) {
            return Some(d);
        }
        let (peak, components) = peak_with_components(ctx)?;
        // Only against the allocator's own numbers: a process-level remainder also holds the
        // cache and the CUDA context and would overstate activations.
        if components.activations_basis != Some(ActivationsBasis::AllocatorAllocated) {
            return None;
        }
        // With the primary metric leaking, the remainder is activations plus leaked memory: the
        // `leak` finding explains that instead.
        let primary = ctx.analysis.stage_table.primary_metric;
        if ctx.analysis.leaks().any(|f| Some(f.metric) == primary) {
            return None;
        }
        let activations_bytes = components.activations_bytes?;
        let share = activations_bytes as f64 / peak.bytes.max(1) as f64;
        (share >= ACTIVATIONS_MIN_SHARE).then(|| ActivationShare {
            peak: peak.clone(),
            activations_bytes,
            share,
            fit: ctx.analysis.batch_fit.clone(),
            pressed: had_gpu_oom(ctx) || near_full(ctx, peak),
            follows_input: None,
        })
    }

    /// A warning when memory was pressed or a smaller batch is the advice, else information.
    fn severity(&self, d: &ActivationShare) -> Severity {
        let smaller_batch = d.fit.as_ref().is_some_and(|f| f.accumulation().is_some());
        warning_if(d.pressed || smaller_batch)
    }

    fn evidence(&self, d: &ActivationShare) -> Vec<Evidence> {
        let mut evidence = vec![
            Evidence::bytes(K::ActivationsBytes, d.activations_bytes as f64),
            Evidence::bytes(K::PeakBytes, d.peak.bytes as f64),
            Evidence::share(K::ActivationsShare, d.share),
        ];
        if let Some(f) = &d.fit {
            evidence.push(Evidence::bytes(K::PerSampleBytes, f.per_sample_bytes));
            evidence.push(Evidence::count(K::MaxBatch, f.max_batch as f64));
            evidence.push(Evidence::share(K::Margin, f.margin));
            if let Some(b) = f.current_batch {
                evidence.push(Evidence::count(K::CurrentBatch, b as f64));
            }
            if let Some(k) = f.accumulation_steps {
                evidence.push(Evidence::count(K::AccumulationSteps, k as f64));
            }
        }
        evidence
    }

    fn detail(d: ActivationShare) -> Detail {
        Detail::ActivationsDominate(d)
    }
}

/// `optimizer-state-heavy`: optimizer state is a large share of the peak.
#[derive(Debug, Clone, Copy, Default)]
pub struct OptimizerStateHeavy;

impl Diagnose for OptimizerStateHeavy {
    const KIND: FindingKind = FindingKind::OptimizerStateHeavy;
    type Diagnosis = OptimizerShare;

    /// Detection: the optimizer's state is at least [`OPTIMIZER_MIN_SHARE`] of the peak, or
    /// its growth made most of a memory's rise ([`crate::recommend::EXPLAINED_SHARE`]).
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<OptimizerShare> {
        let grew_any = ctx.analysis.symptoms.iter().any(|s| {
            s.parts
                .iter()
                .any(|p| p.kind == crate::symptom::PartKind::OptimizerState && p.bytes > 0)
        });
        // Against the device's peak; where the state grew with a memory's rise, against the
        // peak of whichever memory has a breakdown (a CPU run's host).
        let (peak, components) = peak_with_components(ctx).or_else(|| {
            let p = crate::peaks::breakdown_peak(&ctx.analysis.peaks).filter(|_| grew_any)?;
            Some((p, p.components.as_ref()?))
        })?;
        let optimizer = components.breakdown.optimizer_state_bytes;
        let share = optimizer as f64 / peak.bytes.max(1) as f64;
        let grew = ctx.analysis.symptoms.iter().find_map(|s| {
            let rise = s.levels.rise_bytes;
            let part = s
                .parts
                .iter()
                .find(|p| p.kind == crate::symptom::PartKind::OptimizerState)?;
            (rise > 0 && part.bytes as f64 >= super::explained::EXPLAINED_SHARE * rise as f64)
                .then_some(StateGrowth {
                    metric: s.metric,
                    grew_bytes: part.bytes as u64,
                    rise_bytes: rise as u64,
                })
        });
        let device = !peak.measure.is_host();
        (optimizer > 0 && ((device && share >= OPTIMIZER_MIN_SHARE) || grew.is_some())).then(|| {
            OptimizerShare {
                grew,
                peak_bytes: peak.bytes,
                optimizer_state_bytes: optimizer,
                parameters_bytes: components.breakdown.parameters_bytes,
                share,
                // 8-bit moments take a quarter of fp32 ones.
                estimated_saving_bytes: optimizer - optimizer / 4,
                ranks: ctx.trace.metadata.world_size.filter(|w| *w > 1),
                pressed: had_gpu_oom(ctx) || near_full(ctx, peak),
            }
        })
    }

    fn severity(&self, d: &OptimizerShare) -> Severity {
        warning_if(d.pressed)
    }

    fn evidence(&self, d: &OptimizerShare) -> Vec<Evidence> {
        vec![
            Evidence::bytes(K::OptimizerStateBytes, d.optimizer_state_bytes as f64),
            Evidence::bytes(K::ParametersBytes, d.parameters_bytes as f64),
            Evidence::bytes(K::PeakBytes, d.peak_bytes as f64),
            Evidence::share(K::OptimizerShare, d.share),
            Evidence::bytes(K::EstimatedSavingBytes, d.estimated_saving_bytes as f64),
        ]
    }

    fn detail(d: OptimizerShare) -> Detail {
        Detail::OptimizerStateHeavy(d)
    }
}

/// `batch-size`: a batch-size search ran.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchSize;

impl Diagnose for BatchSize {
    const KIND: FindingKind = FindingKind::BatchSize;
    type Diagnosis = BatchSearchResult;

    /// Detection: a batch-size search ran; `None` otherwise.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<BatchSearchResult> {
        Some(BatchSearchResult {
            trials: ctx.analysis.batch_trials.clone()?,
            fit: ctx
                .analysis
                .batch_fit
                .clone()
                .filter(|f| f.method == BatchFitMethod::Trials),
        })
    }

    /// A warning when no batch size fit.
    fn severity(&self, d: &BatchSearchResult) -> Severity {
        warning_if(d.trials.largest_fit_batch.is_none())
    }

    fn evidence(&self, d: &BatchSearchResult) -> Vec<Evidence> {
        let trials = &d.trials;
        let mut evidence = vec![Evidence::count(K::Trials, trials.trials as f64)];
        evidence.extend(
            trials
                .largest_fit_batch
                .map(|b| Evidence::count(K::LargestFitBatch, b as f64)),
        );
        evidence.extend(
            trials
                .smallest_oom_batch
                .map(|b| Evidence::count(K::SmallestOomBatch, b as f64)),
        );
        if let Some(f) = &d.fit {
            evidence.push(Evidence::bytes(K::PerSampleBytes, f.per_sample_bytes));
            evidence.push(Evidence::bytes(K::FixedBytes, f.fixed_bytes));
            evidence.push(Evidence::count(K::MaxBatch, f.max_batch as f64));
            evidence.push(Evidence::share(K::Margin, f.margin));
        }
        evidence
    }

    fn detail(d: BatchSearchResult) -> Detail {
        Detail::BatchSize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::with_context;
    use super::*;
    use oomscope_testkit::run::Run;

    #[test]
    fn the_optimizer_step_is_the_part_of_the_loop_that_ran_out() {
        let mut trace = Run {
            oom_at_step: Some(30),
            oom_knows_stage: true,
            ..Run::default()
        }
        .build();
        trace.ooms[0].stage = Some("post_backward".into());
        let (events, step, part) = with_context(&trace, |ctx| {
            let d = Oom.detect(ctx).unwrap();
            (d.events, d.first.event.step, d.part)
        });
        assert_eq!((events, step, part), (1, Some(30), LoopPart::Optimizer));
    }
}

//! `model-copies`: models that are not trained (an EMA copy, a frozen encoder or teacher) hold a
//! large share of the peak. They need neither gradients nor optimizer state, which is why they
//! can move or shrink where the trained model cannot; a copy of the trained model is an EMA
//! copy in all but name, and its usual cure differs from a frozen encoder's.

use super::rule::{Diagnose, RuleContext, warning_if};
use crate::finding::{
    Detail, Evidence, EvidenceKey as K, FindingKind, Severity, UntrainedModel, UntrainedModels,
};
use crate::peaks::breakdown_peak;

/// Untrained models at or above this share of the peak are worth moving or shrinking.
pub const COPIES_MIN_SHARE: f64 = 0.20;

/// An untrained model within this fraction of the trained model's weights is a copy of it.
const COPY_TOLERANCE: f64 = 0.01;

/// The rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelCopies;

impl Diagnose for ModelCopies {
    const KIND: FindingKind = FindingKind::ModelCopies;
    type Diagnosis = UntrainedModels;

    /// Detection: the breakdown's untrained models (its extras) are at least
    /// [`COPIES_MIN_SHARE`] of the peak it belongs to. They press on memory (a warning) when
    /// they hold twice that share of a device peak whose activations were measured.
    fn detect(&self, ctx: &RuleContext<'_>) -> Option<UntrainedModels> {
        let peak = breakdown_peak(&ctx.analysis.peaks)?;
        let components = peak.components.as_ref()?;
        let b = &components.breakdown;
        let total: u64 = b.extras.iter().map(|e| e.bytes).sum();
        let share = total as f64 / peak.bytes.max(1) as f64;
        if total == 0 || share < COPIES_MIN_SHARE {
            return None;
        }
        let model = b.parameters_bytes.saturating_add(b.buffers_bytes) as f64;
        let mut models: Vec<UntrainedModel> = b
            .extras
            .iter()
            .map(|e| UntrainedModel {
                model: e.clone(),
                copy: model > 0.0 && (e.bytes as f64 - model).abs() <= COPY_TOLERANCE * model,
            })
            .collect();
        crate::sort::sort_by_key(&mut models, |m| std::cmp::Reverse(m.model.bytes));
        Some(UntrainedModels {
            peak_bytes: peak.bytes,
            metric: peak.metric,
            models,
            share,
            pressed: !peak.measure.is_host()
                && components.activations_basis.is_some()
                && share >= 2.0 * COPIES_MIN_SHARE,
        })
    }

    fn severity(&self, d: &UntrainedModels) -> Severity {
        warning_if(d.pressed)
    }

    fn evidence(&self, d: &UntrainedModels) -> Vec<Evidence> {
        vec![
            Evidence::bytes(K::UntrainedModelsBytes, d.total_bytes() as f64),
            Evidence::bytes(K::PeakBytes, d.peak_bytes as f64),
            Evidence::share(K::UntrainedShare, d.share),
        ]
    }

    fn detail(d: UntrainedModels) -> Detail {
        Detail::ModelCopies(d)
    }
}

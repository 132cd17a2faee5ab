//! `model-copies`: models that are not trained (an EMA copy, a frozen encoder or teacher) hold a
//! large share of the peak. They need neither gradients nor optimizer state, which is why they
//! can move or shrink where the trained model cannot; a copy of the trained model is an EMA
//! copy in all but name, and its usual cure differs from a frozen encoder's.

use super::rule::{Diagnose, RuleContext, finding};
use crate::finding::{Evidence, Finding, FindingKind, Severity};
use crate::peaks::{Peak, PeakComponents, breakdown_peak};
use oomscope_format::NamedBytes;
use oomscope_format::units::{format_bytes, format_percent};

/// Untrained models at or above this share of the peak are worth moving or shrinking.
pub const COPIES_MIN_SHARE: f64 = 0.20;

/// An untrained model within this fraction of the trained model's weights is a copy of it.
const COPY_TOLERANCE: f64 = 0.01;

/// The rule.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelCopies;

/// What [`ModelCopies`] detected.
#[derive(Debug, Clone)]
pub struct UntrainedModels<'a> {
    /// The peak they are a share of.
    pub peak: &'a Peak,
    /// Its components.
    pub components: &'a PeakComponents,
    /// The untrained models, largest first, each marked true when it is the trained model's size.
    pub models: Vec<(&'a NamedBytes, bool)>,
    /// Their bytes over the peak, at least [`COPIES_MIN_SHARE`].
    pub share: f64,
}

impl Diagnose for ModelCopies {
    const KIND: FindingKind = FindingKind::ModelCopies;
    type Diagnosis<'a> = UntrainedModels<'a>;

    /// Detection: the breakdown's untrained models (its extras) are at least
    /// [`COPIES_MIN_SHARE`] of the peak it belongs to.
    fn detect<'a>(&self, ctx: &RuleContext<'a>) -> Option<Self::Diagnosis<'a>> {
        let peak = breakdown_peak(&ctx.analysis.peaks)?;
        let components = peak.components.as_ref()?;
        let b = &components.breakdown;
        let total: u64 = b.extras.iter().map(|e| e.bytes).sum();
        let share = total as f64 / peak.bytes.max(1) as f64;
        if total == 0 || share < COPIES_MIN_SHARE {
            return None;
        }
        let model = b.parameters_bytes.saturating_add(b.buffers_bytes) as f64;
        let mut models: Vec<(&NamedBytes, bool)> = b
            .extras
            .iter()
            .map(|e| {
                let copy = model > 0.0 && (e.bytes as f64 - model).abs() <= COPY_TOLERANCE * model;
                (e, copy)
            })
            .collect();
        crate::sort::sort_by_key(&mut models, |(e, _)| std::cmp::Reverse(e.bytes));
        Some(UntrainedModels {
            peak,
            components,
            models,
            share,
        })
    }

    /// Wording.
    fn explain(&self, d: &Self::Diagnosis<'_>) -> Finding {
        let total: u64 = d.models.iter().map(|(e, _)| e.bytes).sum();
        let named: Vec<String> = d
            .models
            .iter()
            .map(|(e, copy)| {
                let what = if *copy {
                    "the size of the trained model"
                } else {
                    "not trained"
                };
                format!("{} {} ({what})", e.name, format_bytes(e.bytes))
            })
            .collect();
        let explanation = format!(
            "models that are not trained hold {} of the {} {} peak: {}; they need no gradients \
             or optimizer state, so they can live elsewhere or in less space without touching \
             training",
            format_bytes(total),
            format_bytes(d.peak.bytes),
            d.peak.metric.label(),
            named.join(", ")
        );
        let mut changes = Vec::new();
        if let Some((copy, _)) = d.models.iter().find(|(_, copy)| *copy) {
            changes.push(format!(
                "{} is a full copy of the trained model (an EMA copy): keep it on the CPU and \
                 update it every few steps, or in bfloat16 if it is float32 (halves it)",
                copy.name
            ));
        }
        if let Some((other, _)) = d.models.iter().find(|(_, copy)| !*copy) {
            changes.push(format!(
                "{} is not trained: bfloat16 halves it if it is float32, and if it only encodes \
                 the inputs (a VAE, a text encoder) its outputs can be computed once before \
                 training",
                other.name
            ));
        }
        let pressed = !d.peak.measure.is_host()
            && d.components.activations_basis.is_some()
            && d.share >= 2.0 * COPIES_MIN_SHARE;
        finding(
            self,
            if pressed {
                Severity::Warning
            } else {
                Severity::Info
            },
            format!(
                "Untrained models hold {} of peak memory",
                format_percent(d.share)
            ),
            explanation,
            changes.join("; "),
            vec![
                Evidence::bytes("untrained_models_bytes", total as f64),
                Evidence::bytes("peak_bytes", d.peak.bytes as f64),
                Evidence::share("untrained_share", d.share),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::find;
    use super::*;
    use oomscope_format::units::{GIB, MIB};
    use oomscope_testkit::run::Run;

    #[test]
    fn an_ema_copy_and_a_frozen_encoder_are_named_with_their_cures() {
        let mut trace = Run {
            parameters_bytes: 2 * GIB,
            grads_bytes: 2 * GIB,
            optimizer_bytes: 4 * GIB,
            activations_bytes: 2 * GIB,
            ..Run::default()
        }
        .build();
        for c in &mut trace.components {
            c.extras = vec![
                NamedBytes {
                    name: "ema".into(),
                    bytes: 2 * GIB,
                },
                NamedBytes {
                    name: "vae".into(),
                    bytes: 640 * MIB,
                },
            ];
        }
        let f = find(&trace, FindingKind::ModelCopies).expect("untrained models");
        assert_eq!(
            f.explanation,
            "models that are not trained hold 2.62 GiB of the 10.0 GiB peak_allocated peak: ema \
             2.00 GiB (the size of the trained model), vae 640 MiB (not trained); they need no \
             gradients or optimizer state, so they can live elsewhere or in less space without \
             touching training"
        );
        assert!(
            f.change
                .starts_with("ema is a full copy of the trained model")
        );
        assert!(
            f.change
                .contains("; vae is not trained: bfloat16 halves it")
        );
    }

    #[test]
    fn a_small_copy_says_nothing() {
        let mut trace = Run::default().build();
        for c in &mut trace.components {
            c.extras = vec![NamedBytes {
                name: "ema".into(),
                bytes: 64 * MIB,
            }];
        }
        assert!(find(&trace, FindingKind::ModelCopies).is_none());
    }
}

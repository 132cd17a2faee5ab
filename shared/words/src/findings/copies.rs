//! The words of `model-copies`: untrained models named, with their cures.

use super::finding_text::FindingText;
use oomscope_analysis::finding::UntrainedModels;
use oomscope_format::units::{format_bytes, format_percent};

/// `model-copies`.
pub(super) fn model_copies(d: &UntrainedModels) -> FindingText {
    let named: Vec<String> = d
        .models
        .iter()
        .map(|m| {
            let what = if m.copy {
                "the size of the trained model"
            } else {
                "not trained"
            };
            format!("{} {} ({what})", m.model.name, format_bytes(m.model.bytes))
        })
        .collect();
    let explanation = format!(
        "models that are not trained hold {} of the {} {} peak: {}; they need no gradients or \
         optimizer state, so they can live elsewhere or in less space without touching training",
        format_bytes(d.total_bytes()),
        format_bytes(d.peak_bytes),
        d.metric.label(),
        named.join(", ")
    );
    let mut changes = Vec::new();
    if let Some(copy) = d.models.iter().find(|m| m.copy) {
        changes.push(format!(
            "{} is a full copy of the trained model (an EMA copy): keep it on the CPU and update \
             it every few steps, or in bfloat16 if it is float32 (halves it)",
            copy.model.name
        ));
    }
    if let Some(other) = d.models.iter().find(|m| !m.copy) {
        changes.push(format!(
            "{} is not trained: bfloat16 halves it if it is float32, and if it only encodes the \
             inputs (a VAE, a text encoder) its outputs can be computed once before training",
            other.model.name
        ));
    }
    FindingText::new(
        format!(
            "Untrained models hold {} of peak memory",
            format_percent(d.share)
        ),
        explanation,
        changes,
    )
}

#[cfg(test)]
mod tests {
    use super::super::worded::test_support::find;
    use oomscope_analysis::finding::FindingKind;
    use oomscope_format::NamedBytes;
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

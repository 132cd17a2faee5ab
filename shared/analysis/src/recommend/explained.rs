//! What else a rise is explained by, measured: the share of a rising floor another measurement
//! must account for to leave the rise to it, and the model's own state (its parameters,
//! gradients and optimizer state from the hooks' breakdowns) as a part of a rise or of what an
//! eval kept. The leak, eval, cycles and optimizer rules all weigh their rises by it.

use crate::phases::PhaseTransition;
use crate::symptom::{PartKind, Symptom};

/// A share of a rising floor another measurement accounts for leaves it to that finding: the
/// evals' retention, the workers' copies.
pub const EXPLAINED_SHARE: f64 = 0.5;

/// The parameters' growth, at most this share of their gradients' and optimizer state's, is the
/// same model's: see [`state_of_the_same_model`].
pub const PARAMETERS_STILL_SHARE: f64 = 0.1;

/// Whether most of `s`'s rise ([`EXPLAINED_SHARE`]) is gradients and optimizer state while the
/// parameters stayed ([`PARAMETERS_STILL_SHARE`]): layers unfrozen, parameter groups added, an
/// optimizer's history filling. Gradients and optimizer state of the same parameters are bounded
/// by them (a gradient each, Adam's two moments), so this rise is bounded however straight its
/// line, and no leak; new models kept (a sweep's trials) bring their parameters with them.
/// The rest of the rise must be explained too: an unexplained half is not the model's to veto.
pub(super) fn state_of_the_same_model(s: &Symptom) -> bool {
    let (parameters, state, rise) = model_parts(s);
    rise > 0.0
        && state >= EXPLAINED_SHARE * rise
        && parameters <= PARAMETERS_STILL_SHARE * state
        && (s.unexplained_bytes as f64) < EXPLAINED_SHARE * rise
}

/// Whether most of `s`'s rise ([`EXPLAINED_SHARE`]) is models' state and their parameters grew
/// with it (beyond [`PARAMETERS_STILL_SHARE`]): new models, with their gradients and optimizers,
/// kept as the run goes: the parameters rose at [`MODELS_KEPT_MIN_RISES`] breakdowns or more
/// over the rise's span (one more model loaded once, a teacher or an EMA copy, is not a leak).
pub(super) fn models_kept(trace: &oomscope_format::Trace, s: &Symptom) -> bool {
    let (parameters, state, rise) = model_parts(s);
    let rises = trace
        .components
        .iter()
        .filter(|c| c.t_us >= s.from_us && c.t_us <= s.to_us)
        .map(|c| c.parameters_bytes)
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|w| w[1] > w[0])
        .count();
    rise > 0.0
        && parameters + state >= EXPLAINED_SHARE * rise
        && parameters > PARAMETERS_STILL_SHARE * state
        && rises >= MODELS_KEPT_MIN_RISES
}

/// Breakdowns at which the parameters rose, over a rise, for models kept (see [`models_kept`]).
pub const MODELS_KEPT_MIN_RISES: usize = 2;

/// The parameters' and the training state's (gradients, optimizer state) parts of `s`'s rise,
/// and the rise.
fn model_parts(s: &Symptom) -> (f64, f64, f64) {
    let part = |kind: PartKind| {
        s.parts
            .iter()
            .filter(|p| p.kind == kind)
            .map(|p| p.bytes.max(0) as f64)
            .sum::<f64>()
    };
    (
        part(PartKind::Parameters),
        part(PartKind::Gradients) + part(PartKind::OptimizerState),
        s.levels.rise_bytes.max(0) as f64,
    )
}

/// The model's lasting state (parameters and optimizer state) at the last breakdown the hooks
/// sent at or before `step`. Not its gradients: a breakdown sent as an eval begins, after
/// `zero_grad(set_to_none=True)`, has none, the next one in training has them all, and that
/// difference is no model made.
fn model_state_at(trace: &oomscope_format::Trace, step: u64) -> Option<u64> {
    let c = &trace.components;
    let i = c.partition_point(|x| x.step <= step);
    c.get(i.checked_sub(1)?)
        .map(|b| b.parameters_bytes.saturating_add(b.optimizer_state_bytes))
}

/// Whether the model's state that grew across the eval (from the step before it to the step its
/// retention is read at) is most of what it kept ([`EXPLAINED_SHARE`]): a model and its
/// optimizer made in between (a sweep's next trial, layers unfrozen after a validation), not
/// memory the eval kept.
pub(super) fn model_state_explains(trace: &oomscope_format::Trace, t: &PhaseTransition) -> bool {
    let (Some(before), Some(after), Some(kept)) = (t.before_step, t.after_step, t.retained_bytes)
    else {
        return false;
    };
    // The breakdown counts the model where it lives: the memory its state is in.
    if t.metric.is_host() != crate::symptom::model_on_host(trace) {
        return false;
    }
    let grew = match (model_state_at(trace, before), model_state_at(trace, after)) {
        (Some(a), Some(b)) => b as f64 - a as f64,
        _ => return false,
    };
    kept > 0 && grew >= EXPLAINED_SHARE * kept as f64
}

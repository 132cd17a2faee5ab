//! What a run measured beside what `collector estimate` says for the same model: the hooks'
//! breakdown carries the parameter counts, so the estimate runs on the very model the program
//! trained, with the precision its parameters have and the optimizer it made. Where the two
//! disagree is what a user planning the next run needs to know (state not made yet, frozen
//! parameters without gradients, an optimizer that keeps more than two moments). Computed in the
//! analysis and said by the words crate (its `estimate`), so the terminal and the report agree.

use oomscope_format::ComponentBreakdown;
use oomscope_format::units::MIB;
use serde::Serialize;

use super::calculator::{EstimateInput, Optimizer, Precision, estimate};

/// A difference under this share of the estimate (or under [`MIN_DIFFERENCE_BYTES`]) is
/// agreement.
const AGREE_SHARE: f64 = 0.10;

/// ...and under this many bytes.
const MIN_DIFFERENCE_BYTES: u64 = MIB;

/// One part, measured and estimated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Part {
    /// `weights`, `gradients` or `optimizer state`.
    pub part: &'static str,
    /// What the run measured.
    pub measured_bytes: u64,
    /// What the estimate says.
    pub estimated_bytes: u64,
    /// Why they differ, when they do and the reason is known.
    pub why: Option<Disagreement>,
}

/// Why a measured part differs from the estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Disagreement {
    /// Fewer gradients than trainable parameters: some had none when it was measured.
    MissingGradients,
    /// No optimizer state yet when it was measured: optimizers make it at their first step.
    NoStateYet,
    /// The optimizer keeps more than the estimate counts.
    MoreState,
    /// The optimizer keeps less than the estimate counts.
    LessState,
}

impl Part {
    /// The two agree within [`AGREE_SHARE`] (or [`MIN_DIFFERENCE_BYTES`]).
    pub fn agrees(&self) -> bool {
        let d = self.measured_bytes.abs_diff(self.estimated_bytes);
        d < MIN_DIFFERENCE_BYTES || (d as f64) <= AGREE_SHARE * self.estimated_bytes as f64
    }
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgainstEstimate {
    /// The `collector estimate` command that gives the estimated column.
    pub command: String,
    /// Step the breakdown was measured at.
    pub step: u64,
    /// Weights, gradients and (when its kind is known) optimizer state.
    pub parts: Vec<Part>,
}

/// The estimate's precision for parameters of this many bytes each: fp32 (which torch's AMP
/// also keeps: its 16-bit copies are made per operation, not kept), or pure 16-bit.
fn precision(bytes_per_parameter: f64) -> Option<(Precision, &'static str)> {
    if (3.5..=4.5).contains(&bytes_per_parameter) {
        Some((Precision::Fp32, "fp32"))
    } else if (1.75..=2.25).contains(&bytes_per_parameter) {
        Some((Precision::Bf16, "bf16"))
    } else {
        None
    }
}

/// The estimate's optimizer for the hooks' optimizer names (`opt:AdamW`, `Adam(Generator)`),
/// when they are all of one kind it knows.
fn optimizer(c: &ComponentBreakdown) -> Option<(Optimizer, &'static str)> {
    let mut kinds = c.optimizers.iter().map(|o| {
        let class = o.name.rsplit(':').next().unwrap_or_default();
        let class = class.split(['(', '#']).next().unwrap_or_default();
        let lower = class.to_ascii_lowercase();
        if lower.contains("8bit") {
            Some((Optimizer::Adam8bit, "adamw-8bit"))
        } else if lower.starts_with("adafactor") {
            Some((Optimizer::Adafactor, "adafactor"))
        } else if lower.contains("adam") {
            Some((Optimizer::Adam, "adamw"))
        } else if lower == "sgd" && c.optimizer_state_bytes > 0 {
            Some((Optimizer::SgdMomentum, "sgd-momentum"))
        } else if lower == "sgd" {
            Some((Optimizer::Sgd, "sgd"))
        } else {
            None
        }
    });
    let first = kinds.next()??;
    kinds.all(|k| k == Some(first)).then_some(first)
}

/// The comparison for one breakdown, when it carries the parameter counts and its parameters'
/// precision is one the estimate knows.
pub fn against_estimate(c: &ComponentBreakdown) -> Option<AgainstEstimate> {
    let parameters = c.parameter_count.filter(|n| *n > 0)?;
    let trainable = c.trainable_parameter_count.unwrap_or(parameters);
    let (precision, precision_flag) = precision(c.parameters_bytes as f64 / parameters as f64)?;
    let optimizer = optimizer(c);
    let mut input = EstimateInput::new(parameters);
    input.trainable_parameters = Some(trainable);
    input.precision = precision;
    input.optimizer = optimizer.map_or(Optimizer::Sgd, |(o, _)| o);
    let e = estimate(&input);
    let mut command =
        format!("collector estimate --params {parameters} --precision {precision_flag}");
    if trainable != parameters {
        command.push_str(&format!(" --trainable {trainable}"));
    }
    if let Some((_, flag)) = optimizer {
        command.push_str(&format!(" --optimizer {flag}"));
    }
    let mut parts = vec![
        Part {
            part: "weights",
            measured_bytes: c.parameters_bytes,
            estimated_bytes: e.weights_bytes + e.master_weights_bytes,
            why: None,
        },
        Part {
            part: "gradients",
            measured_bytes: c.gradients_bytes,
            estimated_bytes: e.gradients_bytes,
            why: (c.gradients_bytes < e.gradients_bytes).then_some(Disagreement::MissingGradients),
        },
    ];
    if optimizer.is_some() {
        let why = Some(if c.optimizer_state_bytes == 0 {
            Disagreement::NoStateYet
        } else if c.optimizer_state_bytes > e.optimizer_bytes {
            Disagreement::MoreState
        } else {
            Disagreement::LessState
        });
        parts.push(Part {
            part: "optimizer state",
            measured_bytes: c.optimizer_state_bytes,
            estimated_bytes: e.optimizer_bytes,
            why,
        });
    }
    for p in &mut parts {
        if p.agrees() {
            p.why = None;
        }
    }
    Some(AgainstEstimate {
        command,
        step: c.step,
        parts,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::NamedBytes;

    fn adamw_breakdown(state_bytes: u64) -> ComponentBreakdown {
        ComponentBreakdown {
            step: 1,
            parameters_bytes: 4_000_000,
            gradients_bytes: 4_000_000,
            optimizer_state_bytes: state_bytes,
            optimizers: vec![NamedBytes {
                name: "opt:AdamW".into(),
                bytes: state_bytes,
            }],
            parameter_count: Some(1_000_000),
            trainable_parameter_count: Some(1_000_000),
            ..ComponentBreakdown::default()
        }
    }

    #[test]
    fn an_fp32_adamw_model_agrees_with_its_estimate_to_the_byte() {
        let a = against_estimate(&adamw_breakdown(8_000_000)).unwrap();
        assert_eq!(
            a.command,
            "collector estimate --params 1000000 --precision fp32 --optimizer adamw"
        );
        let rows: Vec<(&str, u64, u64)> = a
            .parts
            .iter()
            .map(|p| (p.part, p.measured_bytes, p.estimated_bytes))
            .collect();
        assert_eq!(
            rows,
            [
                ("weights", 4_000_000, 4_000_000),
                ("gradients", 4_000_000, 4_000_000),
                ("optimizer state", 8_000_000, 8_000_000)
            ]
        );
        assert!(a.parts.iter().all(|p| p.agrees() && p.why.is_none()));
    }

    #[test]
    fn state_not_made_yet_and_frozen_parameters_are_told() {
        let a = against_estimate(&adamw_breakdown(0)).unwrap();
        let state = a.parts.last().unwrap();
        assert!(!state.agrees());
        assert_eq!(state.why, Some(Disagreement::NoStateYet));
        // A frozen half: the estimate knows it (--trainable), so gradients agree.
        let mut c = adamw_breakdown(4_000_000);
        c.gradients_bytes = 2_000_000;
        c.trainable_parameter_count = Some(500_000);
        let a = against_estimate(&c).unwrap();
        assert!(a.command.contains("--trainable 500000"));
        assert!(a.parts.iter().all(Part::agrees), "{a:?}");
    }

    #[test]
    fn unknown_precisions_and_optimizers_say_less_not_wrong() {
        let mut c = adamw_breakdown(8_000_000);
        c.parameter_count = None;
        assert!(against_estimate(&c).is_none());
        let mut c = adamw_breakdown(8_000_000);
        c.parameters_bytes = 3_000_000; // 3 bytes a parameter: no dtype the estimate knows
        assert!(against_estimate(&c).is_none());
        let mut c = adamw_breakdown(8_000_000);
        c.optimizers[0].name = "opt:Lion".into();
        let a = against_estimate(&c).unwrap();
        assert_eq!(
            a.parts.len(),
            2,
            "no optimizer row for an optimizer it does not know"
        );
        // Two optimizers of one kind (a GAN's two Adams): one estimate for all parameters.
        let mut c = adamw_breakdown(8_000_000);
        c.optimizers = vec![
            NamedBytes {
                name: "Adam(Sequential)".into(),
                bytes: 4_000_000,
            },
            NamedBytes {
                name: "Adam(Sequential)#2".into(),
                bytes: 4_000_000,
            },
        ];
        let a = against_estimate(&c).unwrap();
        assert!(a.command.ends_with("--optimizer adamw"));
        assert!(a.parts.iter().all(Part::agrees));
    }
}

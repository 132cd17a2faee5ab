//! The estimate itself: bytes per trainable parameter by precision, optimizer and sharding, the
//! activations, the CUDA context and the allocator's overhead, against the GPU (the table is in
//! the module docs of `estimate`).

use serde::Serialize;

use super::model_config::ModelConfig;

/// Share of the GPU's memory above which the estimate warns.
pub const WARN_FRACTION: f64 = 0.9;

/// The CUDA context of one process: about 300–650 MiB with lazy module loading (CUDA ≥ 11.7;
/// pytorch/pytorch#86509 measured 274 MiB lazy and 636 MiB eager), more once cuDNN, cuBLASLt,
/// NCCL and Triton kernels load. Outside the caching allocator: nvidia-smi shows it.
pub const DEFAULT_CUDA_CONTEXT_BYTES: u64 = 512 << 20;

/// The caching allocator reserves more than tensors hold (block rounding, split blocks,
/// fragmentation): this share of the allocator's part is added (5–15% is common).
pub const DEFAULT_ALLOCATOR_OVERHEAD: f64 = 0.10;

/// Bytes per parameter of 8-bit Adam's state (two 1-byte states, an fp32 scale per 256).
pub const ADAM_8BIT_STATE_BYTES: f64 = 2.0 + 8.0 / 256.0;

/// How the model is trained numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// 16-bit compute with fp32 master weights and optimizer state (AMP, DeepSpeed, Megatron).
    Mixed,
    /// Everything bf16.
    Bf16,
    /// Everything fp16.
    Fp16,
    /// Everything fp32.
    Fp32,
}

impl Precision {
    /// Bytes of one compute-dtype element (weights, gradients, activations).
    pub fn compute_bytes(self) -> f64 {
        match self {
            Precision::Fp32 => 4.0,
            _ => 2.0,
        }
    }

    /// Bytes of one optimizer-state element.
    fn state_bytes(self) -> f64 {
        match self {
            Precision::Mixed | Precision::Fp32 => 4.0,
            Precision::Bf16 | Precision::Fp16 => 2.0,
        }
    }
}

/// Optimizers whose state size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one buffer per parameter.
    SgdMomentum,
    /// Adam / AdamW: two moments per parameter.
    Adam,
    /// 8-bit Adam (bitsandbytes): two 1-byte moments plus block scales.
    Adam8bit,
    /// Adafactor: a factored second moment (rows + columns), no first moment.
    Adafactor,
}

impl Optimizer {
    /// State bytes per trainable parameter at `precision`.
    pub fn state_bytes_per_parameter(self, precision: Precision) -> f64 {
        let element = precision.state_bytes();
        match self {
            Optimizer::Sgd | Optimizer::Adafactor => 0.0,
            Optimizer::SgdMomentum => element,
            Optimizer::Adam => 2.0 * element,
            Optimizer::Adam8bit => ADAM_8BIT_STATE_BYTES,
        }
    }
}

/// How model state is split across data-parallel GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharding {
    /// Every GPU holds everything (DDP).
    None,
    /// ZeRO-1: optimizer state (and fp32 master weights) sharded.
    Zero1,
    /// ZeRO-2 / FSDP `SHARD_GRAD_OP`: gradients too.
    Zero2,
    /// ZeRO-3 / FSDP `FULL_SHARD`: weights too.
    Zero3,
}

/// Where the activations come from.
#[derive(Debug, Clone, PartialEq)]
pub enum Activations {
    /// Not known.
    Unknown,
    /// Measured bytes per sample (e.g. the post_forward growth `collector run` showed / batch).
    PerSample(u64),
    /// From a model config at a sequence length.
    FromConfig {
        /// The model.
        config: ModelConfig,
        /// Tokens per sample.
        seq_len: u64,
        /// Activation checkpointing on every layer.
        checkpointing: bool,
    },
}

/// What is known about the run to estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateInput {
    /// All parameters.
    pub parameters: u64,
    /// Parameters that train (the rest are frozen: weights only); `None`: all.
    pub trainable_parameters: Option<u64>,
    /// Numerics.
    pub precision: Precision,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Sharding of model state.
    pub sharding: Sharding,
    /// Data-parallel GPUs the state is sharded over (1 without sharding).
    pub gpus: u64,
    /// Samples per step per GPU.
    pub batch_size: Option<u64>,
    /// Activations.
    pub activations: Activations,
    /// The CUDA context.
    pub cuda_context_bytes: u64,
    /// The allocator's overhead, a share of the allocator's part.
    pub allocator_overhead: f64,
    /// GPU memory to compare against.
    pub gpu_memory_bytes: Option<u64>,
}

impl EstimateInput {
    /// An input with the defaults: mixed precision, AdamW, no sharding, one GPU, the default
    /// context and overhead, activations unknown.
    pub fn new(parameters: u64) -> EstimateInput {
        EstimateInput {
            parameters,
            trainable_parameters: None,
            precision: Precision::Mixed,
            optimizer: Optimizer::Adam,
            sharding: Sharding::None,
            gpus: 1,
            batch_size: None,
            activations: Activations::Unknown,
            cuda_context_bytes: DEFAULT_CUDA_CONTEXT_BYTES,
            allocator_overhead: DEFAULT_ALLOCATOR_OVERHEAD,
            gpu_memory_bytes: None,
        }
    }
}

/// The estimate, per GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// All parameters.
    pub parameters: u64,
    /// Trainable parameters.
    pub trainable_parameters: u64,
    /// Model-state bytes per trainable parameter before sharding (16 for mixed AdamW).
    pub bytes_per_trainable_parameter: f64,
    /// Weights in the compute dtype (trainable and frozen).
    pub weights_bytes: u64,
    /// Gradients.
    pub gradients_bytes: u64,
    /// fp32 master weights (mixed precision).
    pub master_weights_bytes: u64,
    /// Optimizer state.
    pub optimizer_bytes: u64,
    /// Activations of one step (and the logits, from a config).
    pub activations_bytes: Option<u64>,
    /// Of the activations, the logits the loss keeps (from a config).
    pub logits_bytes: Option<u64>,
    /// The CUDA context.
    pub cuda_context_bytes: u64,
    /// The caching allocator's overhead.
    pub allocator_overhead_bytes: u64,
    /// Everything above.
    pub total_bytes: u64,
    /// GPU memory compared against.
    pub gpu_memory_bytes: Option<u64>,
    /// `total / gpu_memory`.
    pub fraction_of_gpu: Option<f64>,
    /// The largest batch that keeps the total within 90% of the GPU, when activations per sample
    /// are known.
    pub max_batch_within_90_percent: Option<u64>,
    /// Warnings: over 90% of the GPU, activations unknown, a sequence longer than the model's.
    pub warnings: Vec<EstimateWarning>,
}

/// What an estimate warns of.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EstimateWarning {
    /// The sequence is longer than the model's positions (`max_position_embeddings`).
    LongerThanPositions {
        /// The sequence length asked for.
        seq_len: u64,
        /// The model's positions.
        max_positions: u64,
    },
    /// Activations are not included: neither a per-sample size nor a model config was given.
    NoActivations,
    /// The total is over [`WARN_FRACTION`] of the GPU: expect an out-of-memory error.
    NearlyFull {
        /// The total per GPU.
        total_bytes: u64,
        /// Its share of the GPU.
        fraction: f64,
        /// The GPU's memory.
        gpu_bytes: u64,
    },
}

/// Estimates the memory of a training step on one GPU.
pub fn estimate(input: &EstimateInput) -> Estimate {
    let precision = input.precision;
    let trainable = input
        .trainable_parameters
        .unwrap_or(input.parameters)
        .min(input.parameters);
    let frozen = input.parameters - trainable;
    let (t, f) = (trainable as f64, frozen as f64);
    let compute = precision.compute_bytes();
    let master = if precision == Precision::Mixed {
        4.0
    } else {
        0.0
    };
    let state = input.optimizer.state_bytes_per_parameter(precision);
    let n = input.gpus.max(1) as f64;
    let (weights_share, grads_share, state_share) = match input.sharding {
        Sharding::None => (1.0, 1.0, 1.0),
        Sharding::Zero1 => (1.0, 1.0, 1.0 / n),
        Sharding::Zero2 => (1.0, 1.0 / n, 1.0 / n),
        Sharding::Zero3 => (1.0 / n, 1.0 / n, 1.0 / n),
    };
    let bytes = |x: f64| x.round() as u64;
    let weights_bytes = bytes((t + f) * compute * weights_share);
    let gradients_bytes = bytes(t * compute * grads_share);
    let master_weights_bytes = bytes(t * master * state_share);
    let optimizer_bytes = bytes(t * state * state_share);
    let model_state = weights_bytes + gradients_bytes + master_weights_bytes + optimizer_bytes;

    let mut warnings = Vec::new();
    let (per_sample, logits_per_sample) = match &input.activations {
        Activations::Unknown => (None, None),
        Activations::PerSample(b) => (Some(*b as f64), None),
        Activations::FromConfig {
            config,
            seq_len,
            checkpointing,
        } => {
            if let Some(max) = config.max_positions.filter(|m| seq_len > m) {
                warnings.push(EstimateWarning::LongerThanPositions {
                    seq_len: *seq_len,
                    max_positions: max,
                });
            }
            (
                Some(config.activations_bytes(*seq_len, 1, compute, *checkpointing)),
                Some(config.logits_bytes(*seq_len, 1, compute)),
            )
        }
    };
    let batch = input.batch_size;
    let activations_bytes = per_sample.zip(batch).map(|(a, b)| bytes(a * b as f64));
    let logits_bytes = logits_per_sample
        .zip(batch)
        .map(|(a, b)| bytes(a * b as f64));
    let allocator_part = model_state + activations_bytes.unwrap_or(0);
    let allocator_overhead_bytes = bytes(allocator_part as f64 * input.allocator_overhead);
    let total_bytes = allocator_part + allocator_overhead_bytes + input.cuda_context_bytes;
    let fraction_of_gpu = input
        .gpu_memory_bytes
        .filter(|g| *g > 0)
        .map(|g| total_bytes as f64 / g as f64);
    let max_batch_within_90_percent = match (input.gpu_memory_bytes, per_sample) {
        (Some(gpu), Some(per_sample)) if per_sample > 0.0 => {
            let budget = gpu as f64 * WARN_FRACTION - input.cuda_context_bytes as f64;
            let fixed = model_state as f64 * (1.0 + input.allocator_overhead);
            let per = per_sample * (1.0 + input.allocator_overhead);
            Some(((budget - fixed) / per).max(0.0).floor() as u64)
        }
        _ => None,
    };
    if activations_bytes.is_none() {
        warnings.push(EstimateWarning::NoActivations);
    }
    if let (Some(fraction), Some(gpu)) = (fraction_of_gpu, input.gpu_memory_bytes)
        && fraction > WARN_FRACTION
    {
        warnings.push(EstimateWarning::NearlyFull {
            total_bytes,
            fraction,
            gpu_bytes: gpu,
        });
    }
    Estimate {
        parameters: input.parameters,
        trainable_parameters: trainable,
        bytes_per_trainable_parameter: 2.0 * compute + master + state,
        weights_bytes,
        gradients_bytes,
        master_weights_bytes,
        optimizer_bytes,
        activations_bytes,
        logits_bytes,
        cuda_context_bytes: input.cuda_context_bytes,
        allocator_overhead_bytes,
        total_bytes,
        gpu_memory_bytes: input.gpu_memory_bytes,
        fraction_of_gpu,
        max_batch_within_90_percent,
        warnings,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use oomscope_format::units::GIB;

    /// Model state only: no context, no overhead.
    fn states(parameters: u64, f: impl FnOnce(&mut EstimateInput)) -> Estimate {
        let mut input = EstimateInput::new(parameters);
        input.cuda_context_bytes = 0;
        input.allocator_overhead = 0.0;
        f(&mut input);
        estimate(&input)
    }

    #[test]
    fn mixed_precision_adamw_is_sixteen_bytes_per_parameter() {
        // The issue's example: 7B with the default (mixed precision AdamW) is 112 GB, 104 GiB,
        // which does not fit an 80 GiB GPU.
        let e = estimate(&EstimateInput {
            gpu_memory_bytes: Some(80 * GIB),
            ..EstimateInput::new(7_000_000_000)
        });
        assert_eq!(e.bytes_per_trainable_parameter, 16.0);
        assert_eq!(
            e.weights_bytes + e.gradients_bytes + e.master_weights_bytes + e.optimizer_bytes,
            112_000_000_000
        );
        assert!(e.fraction_of_gpu.unwrap() > 1.3);
        assert!(
            e.warnings
                .iter()
                .any(|w| matches!(w, EstimateWarning::NearlyFull { .. }))
        );
        // Pure bf16: 8 B; fp32: 16 B; 8-bit AdamW in mixed precision: 2 + 2 + 4 + 2.03.
        assert_eq!(
            states(1, |i| i.precision = Precision::Bf16).bytes_per_trainable_parameter,
            8.0
        );
        assert_eq!(
            states(1, |i| i.precision = Precision::Fp32).bytes_per_trainable_parameter,
            16.0
        );
        let eight = states(1, |i| i.optimizer = Optimizer::Adam8bit);
        assert_eq!(
            eight.bytes_per_trainable_parameter,
            8.0 + ADAM_8BIT_STATE_BYTES
        );
    }

    #[test]
    fn the_zero_paper_s_figure_one() {
        // Rajbhandari et al. 2020, Figure 1: 7.5B parameters, K = 12, Nd = 64, GB = 1e9 bytes.
        let per_gpu = |sharding| {
            let e = states(7_500_000_000, |i| {
                i.sharding = sharding;
                i.gpus = 64;
            });
            (e.weights_bytes + e.gradients_bytes + e.master_weights_bytes + e.optimizer_bytes)
                as f64
                / 1e9
        };
        assert_eq!(per_gpu(Sharding::None), 120.0);
        assert!((per_gpu(Sharding::Zero1) - 31.4).abs() < 0.05);
        assert!((per_gpu(Sharding::Zero2) - 16.6).abs() < 0.05);
        assert!((per_gpu(Sharding::Zero3) - 1.9).abs() < 0.05);
    }

    #[test]
    fn accelerate_s_bert_base_cased_training_figure() {
        // accelerate estimate-memory bert-base-cased: fp32 "Training using Adam" 1.61 GB (its GB
        // is GiB) = 4 × the fp32 model: 108 310 272 parameters (+ 8 KiB of buffers).
        let e = states(108_310_272, |i| i.precision = Precision::Fp32);
        let model_state = e.weights_bytes + e.gradients_bytes + e.optimizer_bytes;
        assert_eq!(model_state, 4 * 108_310_272 * 4);
        assert!(((model_state as f64 / GIB as f64) - 1.61).abs() < 0.005);
    }

    #[test]
    fn frozen_parameters_keep_only_their_weights() {
        // LoRA: 7B frozen in bf16, 40M trainable adapters in mixed precision.
        let e = states(7_000_000_000, |i| i.trainable_parameters = Some(40_000_000));
        assert_eq!(e.weights_bytes, 14_000_000_000);
        assert_eq!(e.gradients_bytes, 80_000_000);
        assert_eq!(e.optimizer_bytes + e.master_weights_bytes, 480_000_000);
    }

    #[test]
    fn context_overhead_and_the_batch_that_fits() {
        let mut input = EstimateInput::new(1_000_000_000);
        input.batch_size = Some(4);
        input.activations = Activations::PerSample(2 * GIB);
        input.gpu_memory_bytes = Some(80 * GIB);
        let e = estimate(&input);
        let state = 16_000_000_000u64;
        assert_eq!(e.activations_bytes, Some(8 * GIB));
        assert_eq!(
            e.allocator_overhead_bytes,
            ((state + 8 * GIB) as f64 * 0.1).round() as u64
        );
        assert_eq!(
            e.total_bytes,
            state + 8 * GIB + e.allocator_overhead_bytes + (512 << 20)
        );
        // (72 GiB − 0.5 GiB − 1.1 × 16 GB) / (1.1 × 2 GiB) = (77.31 − 0.54 − 17.6) GB / 2.36 GB
        // = 25.05 → 25.
        assert_eq!(e.max_batch_within_90_percent, Some(25));
    }

    #[test]
    fn activations_from_a_config_warn_past_the_model_s_positions() {
        let config = ModelConfig::from_json(
            r#"{"hidden_size": 4096, "intermediate_size": 11008, "max_position_embeddings": 4096,
            "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 32000}"#,
        )
        .unwrap();
        let mut input = EstimateInput::new(config.parameters());
        input.batch_size = Some(1);
        input.activations = Activations::FromConfig {
            config: config.clone(),
            seq_len: 8192,
            checkpointing: true,
        };
        let e = estimate(&input);
        assert_eq!(
            e.activations_bytes,
            Some(config.activations_bytes(8192, 1, 2.0, true).round() as u64)
        );
        assert_eq!(e.logits_bytes, Some((6 * 8192 * 32000) as u64));
        assert!(e.warnings.iter().any(|w| matches!(
            w,
            EstimateWarning::LongerThanPositions {
                max_positions: 4096,
                ..
            }
        )));
    }
}

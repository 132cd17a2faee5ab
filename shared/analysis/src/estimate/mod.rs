//! Memory needed to train a model, before running it (`collector estimate`): model state
//! (weights, gradients, fp32 master weights, optimizer state) by precision, optimizer and
//! sharding, activations (measured per sample, or from a model config), the CUDA context and the
//! allocator's overhead, against the GPU's memory.
//!
//! In the analysis, not the collector, because it is a number users see: the summary and the
//! report set a run's breakdown beside it (`measured`), and the viewer may offer the calculator.
//!
//! Bytes per trainable parameter (before sharding; the ZeRO paper's convention, Rajbhandari et
//! al. 2020 §3.1, where mixed-precision Adam is `2 + 2 + K` with `K = 12`):
//!
//! | precision | weights | gradients | fp32 master | AdamW | 8-bit AdamW | SGD + momentum |
//! |---|---|---|---|---|---|---|
//! | mixed (default: 16-bit compute, fp32 master and moments) | 2 | 2 | 4 | 8 | 2.03 | 4 |
//! | bf16 / fp16 (everything 16-bit) | 2 | 2 | 0 | 4 | 2.03 | 2 |
//! | fp32 | 4 | 4 | 0 | 8 | 2.03 | 4 |
//!
//! Mixed-precision AdamW is 16 B/parameter (PyTorch AMP keeps fp32 weights and gradients instead
//! of a 16-bit copy plus a master copy: also 16). 8-bit AdamW is bitsandbytes' two 1-byte states
//! plus an fp32 scale per 256-element block for each (2 + 8/256). Adafactor's factored second
//! moment is counted as nothing (it is rows + columns, not elements). Frozen parameters (LoRA,
//! `--trainable`) keep their weights only. Sharding over N GPUs divides, per GPU: ZeRO-1 the
//! master weights and optimizer state, ZeRO-2 (and FSDP `SHARD_GRAD_OP`) the gradients too,
//! ZeRO-3 (and FSDP `FULL_SHARD`) everything.

mod calculator;
mod measured;
mod model_config;
mod safetensors;

pub use calculator::*;

pub use measured::{AgainstEstimate, Disagreement, Part, against_estimate};

pub use model_config::{ConfigError, Family, ModelConfig};
pub use safetensors::{
    MAX_SAFETENSORS_HEADER_BYTES, SafetensorsError, SafetensorsSummary, dtype_bytes,
    parse_safetensors_header,
};

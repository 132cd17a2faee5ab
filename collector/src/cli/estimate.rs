//! `collector estimate`: the memory a model needs to train, before running it.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::ValueEnum;

use crate::gpu::GpuSelection;
use crate::ui::write_stdout;

/// Numerics for `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PrecisionArg {
    /// 16-bit compute with fp32 master weights and fp32 optimizer state (AMP, DeepSpeed,
    /// Megatron): 16 bytes per parameter with AdamW.
    Mixed,
    /// Everything bf16 (weights, gradients, optimizer state).
    Bf16,
    /// Everything fp16.
    Fp16,
    /// Everything fp32.
    Fp32,
}

/// Optimizers for `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OptimizerArg {
    /// Adam or AdamW: two moments per parameter.
    Adamw,
    /// Same as adamw.
    Adam,
    /// 8-bit AdamW (bitsandbytes).
    #[value(name = "adamw-8bit")]
    Adamw8bit,
    /// SGD with momentum.
    SgdMomentum,
    /// Plain SGD.
    Sgd,
    /// Adafactor (factored second moment, no first moment).
    Adafactor,
}

/// Model-state sharding for `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShardArg {
    /// Every GPU holds everything (DDP).
    None,
    /// ZeRO-1: optimizer state sharded.
    Zero1,
    /// ZeRO-2: gradients and optimizer state sharded.
    Zero2,
    /// ZeRO-3: weights, gradients and optimizer state sharded.
    Zero3,
    /// FSDP FULL_SHARD (as ZeRO-3).
    FsdpFull,
    /// FSDP SHARD_GRAD_OP (as ZeRO-2).
    FsdpGradOp,
}

/// `collector estimate`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("model").required(true).args(["params", "safetensors", "model_config"])))]
pub struct EstimateArgs {
    /// Parameters: a number, or with a suffix (`125M`, `7B`, `1.3B`).
    #[arg(long, value_parser = parse_count)]
    pub params: Option<u64>,
    /// A .safetensors file: the parameter count is read from its header (not its weights).
    #[arg(long)]
    pub safetensors: Option<PathBuf>,
    /// A Hugging Face config.json (Llama-, Mistral-, Qwen- or GPT-2-style): the parameter count,
    /// and with --seq-len and --batch the activations.
    #[arg(long)]
    pub model_config: Option<PathBuf>,
    /// Tokens per sample, for activations from --model-config.
    #[arg(long)]
    pub seq_len: Option<u64>,
    /// Activation checkpointing on every layer (with --model-config).
    #[arg(long)]
    pub checkpointing: bool,
    /// Numerics.
    #[arg(long, value_enum, default_value = "mixed", alias = "dtype")]
    pub precision: PrecisionArg,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// Trainable parameters (LoRA adapters, unfrozen layers); the rest keep weights only
    /// [default: all].
    #[arg(long, value_parser = parse_count)]
    pub trainable: Option<u64>,
    /// Model-state sharding across --gpus data-parallel GPUs.
    #[arg(long, value_enum, default_value = "none")]
    pub shard: ShardArg,
    /// Data-parallel GPUs the state is sharded over.
    #[arg(long, default_value_t = 1)]
    pub gpus: u64,
    /// Samples per step per GPU.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Activation bytes per sample (`310MiB`, `0.3GiB`, or bytes), e.g. the post_forward growth
    /// `collector run` measured divided by its batch.
    #[arg(long, value_parser = parse_bytes)]
    pub activation_bytes_per_sample: Option<u64>,
    /// The CUDA context per process.
    #[arg(long, value_parser = parse_bytes, default_value = "512MiB")]
    pub cuda_context: u64,
    /// GPU memory to compare with (`80GiB`) [default: GPU 0 as NVML reports it].
    #[arg(long, value_parser = parse_bytes)]
    pub gpu_memory: Option<u64>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn parse_count(text: &str) -> Result<u64, String> {
    let (number, scale) = match text.trim().char_indices().last() {
        Some((i, 'K' | 'k')) => (&text[..i], 1e3),
        Some((i, 'M' | 'm')) => (&text[..i], 1e6),
        Some((i, 'B' | 'b' | 'G' | 'g')) => (&text[..i], 1e9),
        Some((i, 'T' | 't')) => (&text[..i], 1e12),
        _ => (text, 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a count (e.g. 7B, 350M, 125000000)"))?;
    if !(value.is_finite() && value >= 0.0) {
        return Err(format!("`{text}` is not a count"));
    }
    Ok((value * scale).round() as u64)
}

fn parse_bytes(text: &str) -> Result<u64, String> {
    oomscope_format::units::parse_bytes(text)
        .ok_or_else(|| format!("`{text}` is not a size (e.g. 80GiB, 310MiB, 1073741824)"))
}

/// Reads a safetensors file's header: its parameter count and a description.
fn safetensors_parameters(path: &std::path::Path) -> Result<(u64, String)> {
    use oomscope_analysis::estimate::{MAX_SAFETENSORS_HEADER_BYTES, parse_safetensors_header};
    let mut file =
        std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let len = file.metadata()?.len();
    // Only the header is read: its length, then at most that many bytes.
    let mut prefix = vec![0u8; 8];
    std::io::Read::read_exact(&mut file, &mut prefix)
        .with_context(|| format!("{} is not a safetensors file", path.display()))?;
    let header_len = u64::from_le_bytes(prefix[..8].try_into().unwrap_or([0; 8]))
        .min(MAX_SAFETENSORS_HEADER_BYTES)
        .min(len.saturating_sub(8));
    prefix.resize(8 + header_len as usize, 0);
    std::io::Read::read_exact(&mut file, &mut prefix[8..])
        .with_context(|| format!("cannot read {}", path.display()))?;
    let s = parse_safetensors_header(&prefix, len)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let dtypes: Vec<&str> = s.parameters_by_dtype.keys().map(String::as_str).collect();
    let what = format!(
        "{} parameters in {} tensors ({}) from {}",
        oomscope_format::units::format_count(s.parameters),
        s.tensors,
        dtypes.join(", "),
        path.display()
    );
    Ok((s.parameters, what))
}

pub fn estimate(args: &EstimateArgs) -> Result<i32> {
    use oomscope_analysis::estimate::{
        Activations, EstimateInput, ModelConfig, Optimizer, Precision, Sharding, estimate,
    };
    let config = args
        .model_config
        .as_ref()
        .map(|path| -> Result<ModelConfig> {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            ModelConfig::from_json(&text).with_context(|| format!("cannot use {}", path.display()))
        })
        .transpose()?;
    let (parameters, mut what) = match (&args.safetensors, args.params, &config) {
        (Some(path), _, _) => safetensors_parameters(path)?,
        (None, Some(params), _) => (
            params,
            format!(
                "{} parameters",
                oomscope_format::units::format_count(params)
            ),
        ),
        (None, None, Some(c)) => (
            c.parameters(),
            format!(
                "{} parameters from {}",
                oomscope_format::units::format_count(c.parameters()),
                args.model_config
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            ),
        ),
        (None, None, None) => anyhow::bail!("give --params, --safetensors or --model-config"),
    };
    let activations = match (&config, args.seq_len, args.activation_bytes_per_sample) {
        (_, _, Some(bytes)) => Activations::PerSample(bytes),
        (Some(c), Some(seq_len), None) => Activations::FromConfig {
            config: c.clone(),
            seq_len,
            checkpointing: args.checkpointing,
        },
        // The parameter count alone; the estimate says activations are missing.
        (Some(_), None, None) => Activations::Unknown,
        (None, Some(_), None) => anyhow::bail!("--seq-len needs --model-config"),
        (None, None, None) => Activations::Unknown,
    };
    let precision = match args.precision {
        PrecisionArg::Mixed => Precision::Mixed,
        PrecisionArg::Bf16 => Precision::Bf16,
        PrecisionArg::Fp16 => Precision::Fp16,
        PrecisionArg::Fp32 => Precision::Fp32,
    };
    let optimizer = match args.optimizer {
        OptimizerArg::Adamw | OptimizerArg::Adam => Optimizer::Adam,
        OptimizerArg::Adamw8bit => Optimizer::Adam8bit,
        OptimizerArg::SgdMomentum => Optimizer::SgdMomentum,
        OptimizerArg::Sgd => Optimizer::Sgd,
        OptimizerArg::Adafactor => Optimizer::Adafactor,
    };
    let sharding = match args.shard {
        ShardArg::None => Sharding::None,
        ShardArg::Zero1 => Sharding::Zero1,
        ShardArg::Zero2 | ShardArg::FsdpGradOp => Sharding::Zero2,
        ShardArg::Zero3 | ShardArg::FsdpFull => Sharding::Zero3,
    };
    if args.gpus == 0 {
        anyhow::bail!("--gpus must be at least 1");
    }
    let gpu_memory_bytes = args.gpu_memory.or_else(|| {
        crate::gpu::Gpus::open(&GpuSelection::Indices(vec![0]))
            .ok()
            .and_then(|g| g.infos().first().map(|i| i.total_memory_bytes))
    });
    let e = estimate(&EstimateInput {
        trainable_parameters: args.trainable,
        precision,
        optimizer,
        sharding,
        gpus: args.gpus,
        batch_size: args.batch,
        activations,
        cuda_context_bytes: args.cuda_context,
        gpu_memory_bytes,
        ..EstimateInput::new(parameters)
    });
    let out = if args.json {
        serde_json::to_string_pretty(&e).context("encoding the estimate as JSON failed")? + "\n"
    } else {
        let name = |v: Option<clap::builder::PossibleValue>| {
            v.map(|v| v.get_name().to_owned()).unwrap_or_default()
        };
        what.push_str(&format!(
            ", {} precision, {} optimizer",
            name(args.precision.to_possible_value()),
            name(args.optimizer.to_possible_value())
        ));
        if args.shard != ShardArg::None {
            what.push_str(&format!(
                ", {} over {} GPUs",
                name(args.shard.to_possible_value()),
                args.gpus
            ));
        }
        if let Some(b) = args.batch {
            what.push_str(&format!(", batch {b}"));
        }
        if let Some(s) = args.seq_len {
            what.push_str(&format!(
                ", {s} tokens{}",
                if args.checkpointing {
                    ", checkpointing"
                } else {
                    ""
                }
            ));
        }
        oomscope_words::estimate::render_estimate(&e, &what)
    };
    write_stdout(out.as_bytes())?;
    Ok(0)
}

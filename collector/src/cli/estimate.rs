//! `collector estimate`: the memory a model needs to train, before running it.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::ValueEnum;
use oomscope_trace::text;

use super::write_stdout;
use crate::gpu::GpuSelection;

/// Weight dtypes for `estimate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DtypeArg {
    /// 4 bytes.
    Fp32,
    /// 2 bytes.
    Bf16,
    /// 2 bytes.
    Fp16,
    /// 1 byte.
    Fp8,
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
}

/// `collector estimate`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("model").required(true).args(["params", "safetensors"])))]
pub struct EstimateArgs {
    /// Trainable parameters: a number, or with a suffix (`125M`, `7B`, `1.3B`).
    #[arg(long, value_parser = parse_count)]
    pub params: Option<u64>,
    /// A .safetensors file: parameters and dtype are read from its header (not its weights).
    #[arg(long)]
    pub safetensors: Option<PathBuf>,
    /// Dtype of weights and gradients [default: the file's, else bf16].
    #[arg(long, value_enum)]
    pub dtype: Option<DtypeArg>,
    /// Optimizer.
    #[arg(long, value_enum, default_value = "adamw")]
    pub optimizer: OptimizerArg,
    /// Samples per step.
    #[arg(long)]
    pub batch: Option<u64>,
    /// Activation bytes per sample (`310MiB`, `0.3GiB`, or bytes), e.g. the post_forward growth
    /// `collector run` measured divided by its batch.
    #[arg(long, value_parser = parse_bytes)]
    pub activation_bytes_per_sample: Option<u64>,
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
    oomscope_trace::units::parse_bytes(text)
        .ok_or_else(|| format!("`{text}` is not a size (e.g. 80GiB, 310MiB, 1073741824)"))
}

pub fn estimate(args: &EstimateArgs) -> Result<i32> {
    use oomscope_trace::estimate::{
        EstimateInput, Optimizer, dtype_bytes, estimate, parse_safetensors_header,
    };
    let (parameters, weight_bytes, file_dtype_bytes, what) = match (&args.safetensors, args.params)
    {
        (Some(path), _) => {
            let mut file = std::fs::File::open(path)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let len = file.metadata()?.len();
            // Only the header is read: its length, then at most that many bytes.
            let mut prefix = vec![0u8; 8];
            std::io::Read::read_exact(&mut file, &mut prefix)
                .with_context(|| format!("{} is not a safetensors file", path.display()))?;
            let header_len = u64::from_le_bytes(prefix[..8].try_into().unwrap_or([0; 8]))
                .min(oomscope_trace::estimate::MAX_SAFETENSORS_HEADER_BYTES)
                .min(len.saturating_sub(8));
            prefix.resize(8 + header_len as usize, 0);
            std::io::Read::read_exact(&mut file, &mut prefix[8..])
                .with_context(|| format!("cannot read {}", path.display()))?;
            let s = parse_safetensors_header(&prefix, len)
                .with_context(|| format!("cannot read {}", path.display()))?;
            let dtypes: Vec<&str> = s.parameters_by_dtype.keys().map(String::as_str).collect();
            let what = format!(
                "{} parameters in {} tensors ({}) from {}",
                s.parameters,
                s.tensors,
                dtypes.join(", "),
                path.display()
            );
            (
                s.parameters,
                Some(s.data_bytes),
                s.dominant_dtype_bytes(),
                what,
            )
        }
        (None, Some(params)) => (
            params,
            None,
            None,
            format!("{} parameters", oomscope_trace::units::format_count(params)),
        ),
        (None, None) => anyhow::bail!("give --params or --safetensors"),
    };
    let dtype_bytes_value = match args.dtype {
        Some(DtypeArg::Fp32) => 4.0,
        Some(DtypeArg::Bf16 | DtypeArg::Fp16) => 2.0,
        Some(DtypeArg::Fp8) => 1.0,
        None => file_dtype_bytes
            .or_else(|| dtype_bytes("BF16"))
            .unwrap_or(2.0),
    };
    // An explicit dtype overrides the file's stored size.
    let weight_bytes = if args.dtype.is_some() {
        None
    } else {
        weight_bytes
    };
    let optimizer = match args.optimizer {
        OptimizerArg::Adamw | OptimizerArg::Adam => Optimizer::Adam,
        OptimizerArg::Adamw8bit => Optimizer::Adam8bit,
        OptimizerArg::SgdMomentum => Optimizer::SgdMomentum,
        OptimizerArg::Sgd => Optimizer::Sgd,
    };
    let gpu_memory_bytes = args.gpu_memory.or_else(|| {
        crate::gpu::Gpus::open(&GpuSelection::Indices(vec![0]))
            .ok()
            .and_then(|g| g.infos().first().map(|i| i.total_memory_bytes))
    });
    let e = estimate(&EstimateInput {
        parameters,
        weight_bytes,
        dtype_bytes: dtype_bytes_value,
        optimizer,
        batch_size: args.batch,
        activation_bytes_per_sample: args.activation_bytes_per_sample,
        gpu_memory_bytes,
    });
    let out = if args.json {
        serde_json::to_string_pretty(&e).context("encoding the estimate as JSON failed")? + "\n"
    } else {
        let what = format!(
            "{what}, {:?} optimizer, {} bytes per weight{}",
            args.optimizer,
            dtype_bytes_value,
            args.batch
                .map(|b| format!(", batch {b}"))
                .unwrap_or_default()
        );
        text::render_estimate(&e, &what)
    };
    write_stdout(out.as_bytes())?;
    Ok(0)
}

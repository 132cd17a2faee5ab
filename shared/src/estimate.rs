//! Memory needed to train a model, before running it: weights, gradients, optimizer state and
//! activations against the GPU's memory (`collector estimate`).
//!
//! Here rather than in the collector because it is a number users see, and the viewer may offer
//! the same calculator. The model's size comes from a parameter count or from a `.safetensors`
//! file's header (read without loading the weights).

use std::collections::BTreeMap;

use serde::Serialize;

/// Share of the GPU's memory above which the estimate warns.
pub const WARN_FRACTION: f64 = 0.9;

/// Largest safetensors header accepted (the format's own readers cap it at 100 MB).
pub const MAX_SAFETENSORS_HEADER_BYTES: u64 = 100_000_000;

/// Optimizers whose state size is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Optimizer {
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: one buffer per parameter.
    SgdMomentum,
    /// Adam / AdamW: two moments per parameter, in the parameters' dtype.
    Adam,
    /// 8-bit Adam (bitsandbytes): two 1-byte moments per parameter.
    Adam8bit,
}

impl Optimizer {
    /// State bytes per parameter, given the parameters' bytes per element.
    pub fn state_bytes_per_parameter(self, weight_bytes: f64) -> f64 {
        match self {
            Optimizer::Sgd => 0.0,
            Optimizer::SgdMomentum => weight_bytes,
            Optimizer::Adam => 2.0 * weight_bytes,
            Optimizer::Adam8bit => 2.0,
        }
    }
}

/// What is known about the run to estimate.
#[derive(Debug, Clone, PartialEq)]
pub struct EstimateInput {
    /// Trainable parameters.
    pub parameters: u64,
    /// Bytes of the weights as stored (from a safetensors file), or `None` to use
    /// `parameters × dtype_bytes`.
    pub weight_bytes: Option<u64>,
    /// Bytes per element of weights and gradients (4 for fp32, 2 for bf16/fp16).
    pub dtype_bytes: f64,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// Samples per step.
    pub batch_size: Option<u64>,
    /// Activation bytes per sample (e.g. measured by `collector run` as post_forward growth over
    /// the batch), when known.
    pub activation_bytes_per_sample: Option<u64>,
    /// GPU memory to compare against.
    pub gpu_memory_bytes: Option<u64>,
}

/// The estimate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    /// Trainable parameters.
    pub parameters: u64,
    /// Weights.
    pub weights_bytes: u64,
    /// Gradients (same dtype as the weights).
    pub gradients_bytes: u64,
    /// Optimizer state.
    pub optimizer_bytes: u64,
    /// Activations of one step, when the per-sample size and the batch are known.
    pub activations_bytes: Option<u64>,
    /// Everything above.
    pub total_bytes: u64,
    /// GPU memory compared against.
    pub gpu_memory_bytes: Option<u64>,
    /// `total / gpu_memory`.
    pub fraction_of_gpu: Option<f64>,
    /// The largest batch that keeps the total within 90% of the GPU, when activations per sample
    /// are known.
    pub max_batch_within_90_percent: Option<u64>,
    /// A warning when the total is above 90% of the GPU (or activations are unknown).
    pub warnings: Vec<String>,
}

/// Estimates the memory of a training step.
pub fn estimate(input: &EstimateInput) -> Estimate {
    use crate::units::format_bytes;
    let p = input.parameters as f64;
    let weights_bytes = input
        .weight_bytes
        .unwrap_or((p * input.dtype_bytes).round() as u64);
    let gradients_bytes = weights_bytes;
    let optimizer_bytes =
        (p * input.optimizer.state_bytes_per_parameter(input.dtype_bytes)).round() as u64;
    let activations_bytes = match (input.activation_bytes_per_sample, input.batch_size) {
        (Some(per_sample), Some(batch)) => Some(per_sample.saturating_mul(batch)),
        _ => None,
    };
    let fixed = weights_bytes
        .saturating_add(gradients_bytes)
        .saturating_add(optimizer_bytes);
    let total_bytes = fixed.saturating_add(activations_bytes.unwrap_or(0));
    let fraction_of_gpu = input
        .gpu_memory_bytes
        .filter(|g| *g > 0)
        .map(|g| total_bytes as f64 / g as f64);
    let max_batch_within_90_percent =
        match (input.gpu_memory_bytes, input.activation_bytes_per_sample) {
            (Some(gpu), Some(per_sample)) if per_sample > 0 => {
                let budget = (gpu as f64 * WARN_FRACTION) as u64;
                Some(budget.saturating_sub(fixed) / per_sample)
            }
            _ => None,
        };
    let mut warnings = Vec::new();
    if activations_bytes.is_none() {
        warnings.push(
            "activations are not included: give --batch and --activation-bytes-per-sample \
             (collector run measures them as the post_forward growth)"
                .to_owned(),
        );
    }
    if let (Some(fraction), Some(gpu)) = (fraction_of_gpu, input.gpu_memory_bytes)
        && fraction > WARN_FRACTION
    {
        warnings.push(format!(
            "the total, {}, is {:.0}% of the GPU's {}: expect an out-of-memory error (the CUDA \
             context and allocator fragmentation need room too)",
            format_bytes(total_bytes),
            fraction * 100.0,
            format_bytes(gpu)
        ));
    }
    Estimate {
        parameters: input.parameters,
        weights_bytes,
        gradients_bytes,
        optimizer_bytes,
        activations_bytes,
        total_bytes,
        gpu_memory_bytes: input.gpu_memory_bytes,
        fraction_of_gpu,
        max_batch_within_90_percent,
        warnings,
    }
}

/// What a safetensors header says about a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SafetensorsSummary {
    /// Tensors in the file.
    pub tensors: usize,
    /// Elements over all tensors.
    pub parameters: u64,
    /// Bytes of tensor data.
    pub data_bytes: u64,
    /// Elements per dtype (`F32`, `BF16`, ...).
    pub parameters_by_dtype: BTreeMap<String, u64>,
}

impl SafetensorsSummary {
    /// Bytes per element of the most common dtype.
    pub fn dominant_dtype_bytes(&self) -> Option<f64> {
        let (dtype, _) = self.parameters_by_dtype.iter().max_by_key(|(_, n)| **n)?;
        dtype_bytes(dtype)
    }
}

/// Bytes per element of a safetensors dtype name.
pub fn dtype_bytes(dtype: &str) -> Option<f64> {
    Some(match dtype {
        "F64" | "I64" | "U64" => 8.0,
        "F32" | "I32" | "U32" => 4.0,
        "F16" | "BF16" | "I16" | "U16" => 2.0,
        "F8_E4M3" | "F8_E5M2" | "I8" | "U8" | "BOOL" => 1.0,
        _ => return None,
    })
}

/// Why a safetensors file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// Shorter than its 8-byte header length.
    #[error("not a safetensors file: too short")]
    TooShort,
    /// The header length is larger than the file or the format allows.
    #[error("not a safetensors file: header length {0} is impossible")]
    BadLength(u64),
    /// The header is not the expected JSON.
    #[error("not a safetensors file: {0}")]
    BadHeader(String),
}

/// Reads the header at the start of a safetensors file (`prefix` needs only the header, not the
/// data; `file_len` is the whole file's length, to check the offsets).
pub fn parse_safetensors_header(
    prefix: &[u8],
    file_len: u64,
) -> Result<SafetensorsSummary, SafetensorsError> {
    #[derive(serde::Deserialize)]
    struct Entry {
        dtype: String,
        shape: Vec<u64>,
        data_offsets: [u64; 2],
    }
    let len_bytes: [u8; 8] = prefix
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(SafetensorsError::TooShort)?;
    let header_len = u64::from_le_bytes(len_bytes);
    if header_len > MAX_SAFETENSORS_HEADER_BYTES || header_len.saturating_add(8) > file_len {
        return Err(SafetensorsError::BadLength(header_len));
    }
    let header = prefix
        .get(8..8 + header_len as usize)
        .ok_or(SafetensorsError::BadLength(header_len))?;
    let map: BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(header).map_err(|e| SafetensorsError::BadHeader(e.to_string()))?;
    let data_len = file_len - 8 - header_len;
    let mut summary = SafetensorsSummary {
        tensors: 0,
        parameters: 0,
        data_bytes: 0,
        parameters_by_dtype: BTreeMap::new(),
    };
    for (name, value) in map {
        if name == "__metadata__" {
            continue;
        }
        let entry: Entry = serde_json::from_value(value)
            .map_err(|e| SafetensorsError::BadHeader(format!("tensor {name}: {e}")))?;
        let [start, end] = entry.data_offsets;
        if start > end || end > data_len {
            return Err(SafetensorsError::BadHeader(format!(
                "tensor {name}: data offsets out of the file"
            )));
        }
        let elements = entry.shape.iter().try_fold(1u64, |a, d| a.checked_mul(*d));
        let elements = elements.ok_or_else(|| {
            SafetensorsError::BadHeader(format!("tensor {name}: shape overflows"))
        })?;
        summary.tensors += 1;
        summary.parameters = summary.parameters.saturating_add(elements);
        summary.data_bytes = summary.data_bytes.saturating_add(end - start);
        *summary.parameters_by_dtype.entry(entry.dtype).or_default() += elements;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn seven_billion_parameters_in_bf16_with_adamw() {
        // Hand computed: 7e9 × 2 B = 14 GB weights, 14 GB gradients, 28 GB AdamW moments.
        let e = estimate(&EstimateInput {
            parameters: 7_000_000_000,
            weight_bytes: None,
            dtype_bytes: 2.0,
            optimizer: Optimizer::Adam,
            batch_size: Some(4),
            activation_bytes_per_sample: Some(2 * GIB),
            gpu_memory_bytes: Some(80 * GIB),
        });
        assert_eq!(e.weights_bytes, 14_000_000_000);
        assert_eq!(e.gradients_bytes, 14_000_000_000);
        assert_eq!(e.optimizer_bytes, 28_000_000_000);
        assert_eq!(e.activations_bytes, Some(8 * GIB));
        assert_eq!(e.total_bytes, 56_000_000_000 + 8 * GIB);
        // 90% of 80 GiB = 77 309 411 328 B; minus 56 GB fixed = 21 309 411 328 B → 9 samples of 2 GiB.
        assert_eq!(e.max_batch_within_90_percent, Some(9));
        assert!(e.warnings.is_empty(), "{:?}", e.warnings);
        // Batch 12 no longer fits in 90%.
        let e = estimate(&EstimateInput {
            parameters: 7_000_000_000,
            weight_bytes: None,
            dtype_bytes: 2.0,
            optimizer: Optimizer::Adam,
            batch_size: Some(12),
            activation_bytes_per_sample: Some(2 * GIB),
            gpu_memory_bytes: Some(80 * GIB),
        });
        assert_eq!(e.warnings.len(), 1);
        assert!(
            e.warnings[0].contains("% of the GPU's 80.0 GiB"),
            "{}",
            e.warnings[0]
        );
    }

    #[test]
    fn optimizer_state_sizes() {
        assert_eq!(Optimizer::Sgd.state_bytes_per_parameter(4.0), 0.0);
        assert_eq!(Optimizer::SgdMomentum.state_bytes_per_parameter(4.0), 4.0);
        assert_eq!(Optimizer::Adam.state_bytes_per_parameter(4.0), 8.0);
        assert_eq!(Optimizer::Adam8bit.state_bytes_per_parameter(2.0), 2.0);
    }

    fn safetensors(header: &str, data_len: usize) -> Vec<u8> {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header.as_bytes());
        bytes.resize(bytes.len() + data_len, 0);
        bytes
    }

    #[test]
    fn safetensors_headers_are_read_and_checked() {
        let header = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[1024,512],"data_offsets":[0,1048576]},"b":{"dtype":"F32","shape":[512],"data_offsets":[1048576,1050624]}}"#;
        let file = safetensors(header, 1_050_624);
        let s = parse_safetensors_header(&file, file.len() as u64).unwrap();
        assert_eq!(s.tensors, 2);
        assert_eq!(s.parameters, 1024 * 512 + 512);
        assert_eq!(s.data_bytes, 1_050_624);
        assert_eq!(s.dominant_dtype_bytes(), Some(2.0));
        // Damage is refused, never trusted.
        assert_eq!(
            parse_safetensors_header(&file[..4], 4),
            Err(SafetensorsError::TooShort)
        );
        let mut huge = file.clone();
        huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            parse_safetensors_header(&huge, huge.len() as u64),
            Err(SafetensorsError::BadLength(_))
        ));
        let short_data = safetensors(header, 1000);
        assert!(matches!(
            parse_safetensors_header(&short_data, short_data.len() as u64),
            Err(SafetensorsError::BadHeader(_))
        ));
        let not_json = safetensors("{not json", 0);
        assert!(matches!(
            parse_safetensors_header(&not_json, not_json.len() as u64),
            Err(SafetensorsError::BadHeader(_))
        ));
    }
}

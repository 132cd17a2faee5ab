//! The header of a `.safetensors` file: how many parameters a model has, in which dtypes, read
//! without loading the weights (the header is JSON at the start of the file).

use std::collections::BTreeMap;

use serde::Serialize;

/// Largest safetensors header accepted (the format's own readers cap it at 100 MB).
pub const MAX_SAFETENSORS_HEADER_BYTES: u64 = 100_000_000;

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
    /// A tensor's data offsets lie outside the file.
    #[error("not a safetensors file: tensor {0}: data offsets out of the file")]
    OffsetsOutside(String),
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
            return Err(SafetensorsError::OffsetsOutside(name.clone()));
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
            Err(SafetensorsError::OffsetsOutside(_))
        ));
        let not_json = safetensors("{not json", 0);
        assert!(matches!(
            parse_safetensors_header(&not_json, not_json.len() as u64),
            Err(SafetensorsError::BadHeader(_))
        ));
    }
}

//! Reading a trace file for `summary` and `export`, with one clear error per way it can fail.

use std::path::Path;

use anyhow::{Context, Result};
use oomscope_trace::{Decoded, decode};

/// Reads and decodes a trace; damage inside the file comes back as warnings, not errors.
pub fn read_trace(path: &Path) -> Result<Decoded> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    decode(&bytes).with_context(|| format!("cannot open {}", path.display()))
}

//! What the trace crate's integration tests share: size constants and the committed test files.
//!
//! Each test binary uses part of it (`mod support;`), hence the `dead_code` allowance.
#![allow(dead_code)]

/// A mebibyte.
pub const MIB: u64 = 1 << 20;
/// A gibibyte.
pub const GIB: u64 = 1 << 30;

/// The bytes of a committed file under `tests/data/` (`v1_0_oom.oomt`, `gpu/h100_gpt.oomt`).
pub fn data(path: &str) -> Vec<u8> {
    let path = format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

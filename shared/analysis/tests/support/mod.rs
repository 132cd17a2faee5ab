//! What the analysis crate's integration tests share: size constants and the committed traces.
//!
//! Each test binary uses part of it (`mod support;`), hence the `dead_code` allowance.
#![allow(dead_code)]

/// The bytes of a committed trace under the format crate's `tests/data/` (`v1_0_oom.oomt`,
/// `gpu/h100_gpt.oomt`).
pub fn data(path: &str) -> Vec<u8> {
    let path = format!(
        "{}/../format/tests/data/{path}",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The bytes of a committed memory snapshot (or its facts) under the snapshot crate's
/// `tests/data/` (`small_p4.pickle`, `small_p4.pickle.json`).
pub fn snapshot(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/../snapshot/tests/data/{name}",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

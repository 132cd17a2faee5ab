//! The committed test data every crate's tests read: traces under the format crate's
//! `tests/data/` (`v1_0_oom.oomt`, `gpu/h100_gpt.oomt`) and memory snapshots under the snapshot
//! crate's (`small_p4.pickle`, its facts `small_p4.pickle.json`). One place finds them, whichever
//! crate's test asks.

use std::path::{Path, PathBuf};

/// The path of a committed trace (`v1_0_oom.oomt`, `gpu/h100_gpt.oomt`).
pub fn trace_path(path: &str) -> PathBuf {
    shared().join("format/tests/data").join(path)
}

/// The bytes of a committed trace; panics with the path when it cannot be read.
pub fn trace(path: &str) -> Vec<u8> {
    read(&trace_path(path))
}

/// The bytes of a committed memory snapshot or of its facts (`small_p4.pickle`,
/// `small_p4.pickle.json`); panics with the path when it cannot be read.
pub fn snapshot(name: &str) -> Vec<u8> {
    read(&shared().join("snapshot/tests/data").join(name))
}

/// `shared/`, where the crates with data live.
fn shared() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

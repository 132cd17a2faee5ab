//! What the collector's integration tests share: the binary, scratch directories, the Python
//! helper's path, a collector command with NVML off, and reading traces back.
//!
//! Each test binary uses part of it (`mod support;`), hence the `dead_code` allowance.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use oomscope_trace::{Decoded, decode};

/// The `collector` binary cargo built for these tests.
pub const COLLECTOR: &str = env!("CARGO_BIN_EXE_collector");
/// A mebibyte.
pub const MIB: u64 = 1 << 20;

/// A scratch directory per test, removed on success (kept after a failure, to look at).
pub struct Scratch(PathBuf);

impl Scratch {
    /// A fresh, empty directory named after the test.
    pub fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("oomscope-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// A path inside it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes a file (a script) and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, body).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The test environment's Python (`OOMSCOPE_TORCH_VENV`, made by `scripts/setup-torch.sh`):
/// PyTorch, and DuckDB for the fleet export's queries.
pub fn torch_python() -> PathBuf {
    let venv = std::env::var_os("OOMSCOPE_TORCH_VENV").expect(
        "OOMSCOPE_TORCH_VENV is not set: run `source scripts/env.sh` after scripts/setup-torch.sh",
    );
    let python = Path::new(&venv).join("bin/python");
    assert!(
        python.exists(),
        "{} missing: run scripts/setup-torch.sh",
        python.display()
    );
    python
}

/// Where the Python helper (`oomscope_probe`) lives.
pub fn python_path() -> String {
    format!("{}/python", env!("CARGO_MANIFEST_DIR"))
}

/// `collector ARGS` with the Python helper importable and no GPU library (unless a test points
/// `OOMSCOPE_NVML_LIB` at the fake one).
pub fn collector(args: &[&str]) -> Command {
    let mut c = Command::new(COLLECTOR);
    c.args(args)
        .env("PYTHONPATH", python_path())
        .env("PYTHONUNBUFFERED", "1")
        .env("OOMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1");
    c
}

/// Runs `collector ARGS` to completion.
pub fn run(args: &[&str]) -> Output {
    collector(args).output().unwrap()
}

/// Decodes a trace file (it must be a trace).
pub fn read(path: &Path) -> Decoded {
    decode(&std::fs::read(path).unwrap()).unwrap()
}

/// A process's stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// An example binary: `cargo test` builds the examples next to the test binaries' directory.
pub fn example(name: &str) -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let exe = deps.parent().unwrap().join("examples").join(name);
    assert!(
        exe.exists(),
        "{} missing: cargo test builds examples",
        exe.display()
    );
    exe
}

//! What the collector's integration tests share: the binary, scratch directories, the Python
//! helper's path, a collector command with NVML off, and reading traces back.
//!
//! Each test binary uses part of it (`mod support;`), hence the `dead_code` allowance.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use oomscope_format::{Decoded, Trace, decode};
use oomscope_testkit::Scratch;

/// The `collector` binary cargo built for these tests.
pub const COLLECTOR: &str = env!("CARGO_BIN_EXE_collector");

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
    format!("{}/python", std::env::var("CARGO_MANIFEST_DIR").unwrap())
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

/// A program of `tests/torch_programs/` (real PyTorch programs that know nothing of oomscope).
pub fn torch_program(name: &str) -> String {
    format!(
        "{}/tests/torch_programs/{name}",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    )
}

/// `collector run -q -o TRACE [extra] -- CMD...` with one OpenMP thread: its output and the
/// trace it wrote (`t.oomt` in the scratch directory).
pub fn record(s: &Scratch, extra: &[&str], cmd: &[&str]) -> (Output, Trace) {
    let _side_by_side = RECORDINGS
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    recorded(s, extra, cmd)
}

/// Recordings of one test binary run side by side (cargo's test threads), but for those of
/// [`record_alone`]...
static RECORDINGS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// ...which waits for the others and runs by itself: for a test that asserts what the collector
/// sees of a program only when it gets the CPU a quiet machine gives (copy-on-write workers read
/// often enough to see their copies grow, on two cores shared with a torchrun test's four ranks).
pub fn record_alone(s: &Scratch, extra: &[&str], cmd: &[&str]) -> (Output, Trace) {
    let _alone = RECORDINGS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    recorded(s, extra, cmd)
}

fn recorded(s: &Scratch, extra: &[&str], cmd: &[&str]) -> (Output, Trace) {
    let trace = s.path("t.oomt");
    let mut args = vec!["run", "-q", "-o", trace.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(cmd);
    let out = collector(&args)
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    let t = read(&trace).trace;
    (out, t)
}

/// The same command without the collector, as `record` runs it (one OpenMP thread).
pub fn plain(cmd: &[&str]) -> Output {
    Command::new(cmd[0])
        .args(&cmd[1..])
        .env("OMP_NUM_THREADS", "1")
        .env("PYTHONUNBUFFERED", "1")
        .output()
        .unwrap()
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

//! The zero-code Python hooks: a bootstrap directory, embedded in the collector binary, written
//! into the run's private directory and put first on the child's `PYTHONPATH`.
//!
//! Why this way (the convention of `ddtrace-run` and `opentelemetry-instrument`): Python runs a
//! `sitecustomize` module found on its path before the program's own code, in every Python
//! process the program starts (torchrun's workers, multiprocessing's spawn children), with no
//! change to the program or its command line. The bootstrap chains a `sitecustomize` the user
//! already has, imports nothing heavy, and only when the program itself imports torch loads the
//! hooks (`collector/python/boot/_oomscope_torch.py`, whose module doc says what each hook does).
//! `python -I`, `-E` and `-S` skip `sitecustomize`: such runs are recorded without marks, like
//! any other program.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The files of the bootstrap directory: (name, contents).
const FILES: [(&str, &str); 6] = [
    (
        "sitecustomize.py",
        include_str!("../../python/boot/sitecustomize.py"),
    ),
    (
        "_oomscope_torch.py",
        include_str!("../../python/boot/_oomscope_torch.py"),
    ),
    (
        "_oomscope_breakdown.py",
        include_str!("../../python/boot/_oomscope_breakdown.py"),
    ),
    (
        "_oomscope_held.py",
        include_str!("../../python/boot/_oomscope_held.py"),
    ),
    // The helper (the wheel's `oomscope` package): the hooks send through it, and the program
    // can `import oomscope` (or `oomscope_probe`, its former name) without installing anything.
    (
        "oomscope/__init__.py",
        include_str!("../../python/oomscope/__init__.py"),
    ),
    (
        "oomscope_probe.py",
        include_str!("../../python/oomscope_probe.py"),
    ),
];

/// Set to `1` in the child's environment by `--oom-snapshot`: the hooks record the allocator's
/// history of live blocks (Python stacks) and send what was alive at an OOM, by source line.
pub const OOM_SNAPSHOT_ENV: &str = "OOMSCOPE_OOM_SNAPSHOT";

/// With `--oom-snapshot`: where each process saves the whole memory snapshot of its first OOM —
/// this prefix, its pid, `.pickle` (`run.oomt` gives `run.oom-4242.pickle`, next to the trace,
/// which notes the name: `collector report run.oomt` bakes the two together).
pub const OOM_SNAPSHOT_PREFIX_ENV: &str = "OOMSCOPE_OOM_SNAPSHOT_PREFIX";

/// The prefix of the snapshots saved next to the trace `out` ([`OOM_SNAPSHOT_PREFIX_ENV`]).
pub fn oom_snapshot_prefix(out: &Path) -> OsString {
    let mut prefix = out.with_extension("").into_os_string();
    prefix.push(".oom-");
    prefix
}

/// Writes the bootstrap into `run_dir/python` (the run's private 0700 directory) and returns it.
pub fn write_bootstrap(run_dir: &Path) -> Result<PathBuf> {
    let dir = run_dir.join("python");
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the Python bootstrap in {}", dir.display()))?;
    for (name, contents) in FILES {
        let path = dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(dir)
}

/// `PYTHONPATH` for the child: the bootstrap first, then whatever the user had.
pub fn python_path(bootstrap: &Path, existing: Option<OsString>) -> OsString {
    let mut value = bootstrap.as_os_str().to_owned();
    if let Some(existing) = existing.filter(|e| !e.is_empty()) {
        value.push(":");
        value.push(existing);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hooks_name_a_saved_snapshot_in_the_words_the_report_reads() {
        let hooks = include_str!("../../python/boot/_oomscope_torch.py");
        let declared = format!(
            "OOM_SNAPSHOT_NOTE = {:?}",
            oomscope_format::OOM_SNAPSHOT_NOTE
        );
        assert!(hooks.contains(&declared), "{declared}");
        for (name, words) in [
            (
                "EVAL_AUTOGRAD_ON_NOTE",
                oomscope_format::EVAL_AUTOGRAD_ON_NOTE,
            ),
            (
                "EVAL_AUTOGRAD_OFF_NOTE",
                oomscope_format::EVAL_AUTOGRAD_OFF_NOTE,
            ),
        ] {
            let declared = format!("{name} = {words:?}");
            assert!(hooks.contains(&declared), "{declared}");
        }
        let held = include_str!("../../python/boot/_oomscope_held.py");
        let declared = format!(
            "CYCLE_PREFIX = {:?}",
            oomscope_format::HeldTensors::CYCLE_PREFIX
        );
        assert!(held.contains(&declared), "{declared}");
        let [pre, post] = oomscope_format::CHECKPOINT_SAVE_STAGES;
        let declared = format!("PRE_SAVE, POST_SAVE = {pre:?}, {post:?}");
        assert!(hooks.contains(&declared), "{declared}");
        assert_eq!(
            oom_snapshot_prefix(Path::new("/runs/a.oomt")),
            OsString::from("/runs/a.oom-")
        );
    }

    #[test]
    fn the_bootstrap_goes_first_and_keeps_the_users_path() {
        let boot = Path::new("/run/x/python");
        assert_eq!(python_path(boot, None), "/run/x/python");
        assert_eq!(python_path(boot, Some("".into())), "/run/x/python");
        assert_eq!(
            python_path(boot, Some("/a:/b".into())),
            "/run/x/python:/a:/b"
        );
    }

    #[test]
    fn the_bootstrap_is_written_whole() {
        let dir = std::env::temp_dir().join(format!("oomscope-boot-test-{}", std::process::id()));
        let written = write_bootstrap(&dir).unwrap();
        for (name, contents) in FILES {
            assert_eq!(
                std::fs::read_to_string(written.join(name)).unwrap(),
                contents
            );
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_helper_skips_its_own_reading_as_the_collector_would() {
        // A mark sooner after the sender's last reading than the collector keeps carries none.
        let helper = include_str!("../../python/oomscope/__init__.py");
        let line = format!(
            "_READING_GAP_US = {}",
            crate::run::sampler::MIN_MARK_READING_GAP_US
        );
        assert!(
            helper.lines().any(|l| l == line),
            "collector/python/oomscope/__init__.py must say {line}"
        );
    }

    #[test]
    fn the_helper_says_the_collector_s_version() {
        let helper = include_str!("../../python/oomscope/__init__.py");
        let line = format!("__version__ = \"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(
            helper.lines().any(|l| l == line),
            "collector/python/oomscope/__init__.py must say {line}"
        );
    }
}

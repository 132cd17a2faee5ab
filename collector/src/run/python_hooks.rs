//! The zero-code Python hooks: a bootstrap directory, embedded in the collector binary, written
//! into the run's private directory and put first on the child's `PYTHONPATH`.
//!
//! Why this way (the convention of `ddtrace-run` and `opentelemetry-instrument`): Python runs a
//! `sitecustomize` module found on its path before the program's own code, in every Python
//! process the program starts (torchrun's workers, multiprocessing's spawn children), with no
//! change to the program or its command line. The bootstrap chains a `sitecustomize` the user
//! already has, imports nothing heavy, and only when the program itself imports torch loads the
//! hooks (the package `collector/python/oomscope/_hooks/`, whose module docs say what each hook
//! does).
//! `python -I`, `-E` and `-S` skip `sitecustomize`: such runs are recorded without marks, like
//! any other program.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// One file of the bootstrap: its path under the directory, and its contents (embedded from
/// `collector/python/`, where the path is the same but for `sitecustomize.py`, in `boot/`).
macro_rules! python_file {
    ($path:literal) => {
        ($path, include_str!(concat!("../../python/", $path)))
    };
}

/// The files of the bootstrap directory: (path, contents). The `oomscope` package is the wheel's
/// (the program can `import oomscope`, or `oomscope_probe`, its former name, without installing
/// anything), and the hooks inside it are imported by `sitecustomize.py` once torch is.
const FILES: [(&str, &str); 28] = [
    (
        "sitecustomize.py",
        include_str!("../../python/boot/sitecustomize.py"),
    ),
    python_file!("oomscope_probe.py"),
    python_file!("oomscope/__init__.py"),
    python_file!("oomscope/_notebook.py"),
    python_file!("oomscope/_traceback.py"),
    python_file!("oomscope/_probe.py"),
    python_file!("oomscope/_transport.py"),
    python_file!("oomscope/_hooks/__init__.py"),
    python_file!("oomscope/_hooks/backward.py"),
    python_file!("oomscope/_hooks/breakdown.py"),
    python_file!("oomscope/_hooks/budget.py"),
    python_file!("oomscope/_hooks/cuda.py"),
    python_file!("oomscope/_hooks/cycles.py"),
    python_file!("oomscope/_hooks/emit.py"),
    python_file!("oomscope/_hooks/epochs.py"),
    python_file!("oomscope/_hooks/errors.py"),
    python_file!("oomscope/_hooks/forward.py"),
    python_file!("oomscope/_hooks/held.py"),
    python_file!("oomscope/_hooks/inputs.py"),
    python_file!("oomscope/_hooks/memory.py"),
    python_file!("oomscope/_hooks/modules.py"),
    python_file!("oomscope/_hooks/objects.py"),
    python_file!("oomscope/_hooks/oom.py"),
    python_file!("oomscope/_hooks/optimizer.py"),
    python_file!("oomscope/_hooks/referrers.py"),
    python_file!("oomscope/_hooks/retainer.py"),
    python_file!("oomscope/_hooks/save.py"),
    python_file!("oomscope/_hooks/state.py"),
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

    /// The contents of one embedded file.
    fn file(path: &str) -> &'static str {
        FILES
            .iter()
            .find(|(p, _)| *p == path)
            .unwrap_or_else(|| panic!("{path} is not embedded"))
            .1
    }

    #[test]
    fn the_hooks_say_the_formats_words_for_kinds_and_stages() {
        let held = file("oomscope/_hooks/held.py");
        let labels: Vec<String> = oomscope_format::HeldKind::ALL
            .iter()
            .map(|k| format!("{:?}", k.label()))
            .collect();
        let declared = format!(
            "TENSORS, GRAPH, CYCLE, UNCONTAINED, OBJECTS = {}",
            labels.join(", ")
        );
        assert!(held.contains(&declared), "{declared}");
        let [pre, post] = oomscope_format::CHECKPOINT_SAVE_STAGES;
        let declared = format!("PRE_SAVE, POST_SAVE = {pre:?}, {post:?}");
        assert!(
            file("oomscope/_hooks/save.py").contains(&declared),
            "{declared}"
        );
        assert_eq!(
            oom_snapshot_prefix(Path::new("/runs/a.oomt")),
            OsString::from("/runs/a.oom-")
        );
    }

    #[test]
    fn every_python_file_of_the_package_is_embedded() {
        let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("python");
        let mut on_disk = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "py") {
                    let rel = path
                        .strip_prefix(&root)
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .to_owned();
                    on_disk.push(rel.strip_prefix("boot/").unwrap_or(&rel).to_owned());
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<&str> = FILES.iter().map(|(p, _)| *p).collect();
        embedded.sort_unstable();
        assert_eq!(on_disk, embedded);
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
        let helper = file("oomscope/_probe.py");
        let line = format!(
            "READING_GAP_US = {}",
            crate::run::sampler::MIN_MARK_READING_GAP_US
        );
        assert!(
            helper.lines().any(|l| l == line),
            "collector/python/oomscope/_probe.py must say {line}"
        );
    }

    #[test]
    fn the_helper_says_the_collector_s_version() {
        let helper = file("oomscope/__init__.py");
        let line = format!("__version__ = \"{}\"", env!("CARGO_PKG_VERSION"));
        assert!(
            helper.lines().any(|l| l == line),
            "collector/python/oomscope/__init__.py must say {line}"
        );
    }
}

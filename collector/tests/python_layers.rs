//! The Python side's structure (`python_layers.py`, read with `ast`): the package's arrows run
//! one way (hooks -> probe -> transport), no import circle, no module of ours reached through
//! `sys.modules` or loaded by path, no file past 500 lines. And the check itself fails when a
//! rule is broken: a copy of the package with an arrow turned round, a circle and a lookup.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use oomscope_testkit::Scratch;

/// The checker and the package, found at run time: a test binary cargo reuses from a clone
/// elsewhere (it hashes paths relative to the workspace) would look where that clone was.
fn checker() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("tests/python_layers.py")
}

fn package() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("python")
}

fn check(script: &Path) -> Output {
    Command::new("python3").arg(script).output().unwrap()
}

#[test]
fn the_python_package_imports_one_way_without_circles_and_no_file_is_long() {
    let out = check(&checker());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // Every module was read: the hooks, the probe, the transport, the public module.
    let listed = String::from_utf8_lossy(&out.stdout);
    for file in [
        "oomscope/__init__.py",
        "oomscope/_probe.py",
        "oomscope/_transport.py",
        "oomscope/_hooks/forward.py",
        "boot/sitecustomize.py",
    ] {
        assert!(listed.contains(file), "{file} not read:\n{listed}");
    }
}

#[test]
fn the_check_fails_on_a_wrong_arrow_a_circle_a_lookup_and_a_long_file() {
    let s = Scratch::new("python-layers");
    copy_dir(&package(), &s.path("python"));
    std::fs::create_dir_all(s.path("tests")).unwrap();
    let script = s.path("tests/python_layers.py");
    std::fs::copy(checker(), &script).unwrap();
    let append = |file: &str, text: &str| {
        let path = s.path("python").join(file);
        let mut source = std::fs::read_to_string(&path).unwrap();
        source.push_str(text);
        std::fs::write(&path, source).unwrap();
    };
    append(
        "oomscope/_transport.py",
        "\nfrom oomscope._hooks import state\n",
    );
    append(
        "oomscope/_hooks/state.py",
        "\nfrom oomscope._hooks import emit\n",
    );
    append(
        "oomscope/_probe.py",
        "\nimport sys\nsys.modules.get(\"oomscope._hooks\")\n",
    );
    append("oomscope/_hooks/save.py", &"\n".repeat(500));
    let out = check(&script);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    for expected in [
        "oomscope._transport imports oomscope._hooks.state: the arrow runs the wrong way",
        "oomscope._probe reaches a module of ours through sys.modules",
        "oomscope._hooks.save has 533 lines (at most 500)",
    ] {
        assert!(said.contains(expected), "{expected:?} not said:\n{said}");
    }
    assert!(
        said.lines().any(|l| l.starts_with("import circle: ")
            && l.contains("oomscope._hooks.state -> oomscope._hooks.emit")),
        "the circle through state and emit not said:\n{said}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_dir(&entry.path(), &target);
            }
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

//! The layers the re-cut of `shared` set, checked on every test run:
//! - the format crate (`oomscope-format`) and the snapshot reader (`oomscope-snapshot`) depend on
//!   nothing else of oomscope, so a change to the analysis rebuilds neither;
//! - inside this crate, the analysis never imports its rendering layer (`render/`): numbers and
//!   findings below, the terminal text, headline and verdict above; the phrases both use
//!   (`words.rs`) import nothing of either.
//!
//! Test modules (`#[cfg(test)]`) may reach across layers to compare what the analysis found with
//! what the text says; only the code above a file's test module counts.

use std::path::{Path, PathBuf};

fn shared(path: &str) -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("..")
        .join(path)
}

/// The `[dependencies]` table of a manifest, as lines (up to the next table).
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(manifest).unwrap();
    text.lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_format_and_the_snapshot_reader_depend_on_no_other_oomscope_crate() {
    for krate in ["format", "snapshot"] {
        let deps = dependencies(&shared(&format!("{krate}/Cargo.toml")));
        assert!(!deps.is_empty(), "{krate}: no [dependencies] table read");
        let ours: Vec<&String> = deps.iter().filter(|l| l.contains("oomscope")).collect();
        assert!(ours.is_empty(), "shared/{krate} depends on {ours:?}");
    }
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A file's code above its test module.
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[test]
fn the_analysis_never_imports_its_rendering_layer() {
    let src = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src");
    let render = src.join("render");
    let files = sources(&src);
    assert!(files.len() > 20, "read only {} files", files.len());
    let mut offenders = Vec::new();
    // The crate root declares `pub mod render;` (no path into it); every other file names none.
    for file in files.iter().filter(|f| !f.starts_with(&render)) {
        if code(file).contains("render::") {
            offenders.push(file.clone());
        }
    }
    assert!(
        offenders.is_empty(),
        "analysis modules that use the rendering layer: {offenders:?}"
    );
}

#[test]
fn the_phrases_import_only_the_format() {
    let words =
        code(&Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/words.rs"));
    for line in words.lines().filter(|l| l.starts_with("use ")) {
        assert!(
            line.starts_with("use oomscope_format") || line.starts_with("use std"),
            "words.rs: {line}"
        );
    }
}

//! The layers of `shared`, checked on every test run:
//! - the format crate (`oomscope-format`) and the snapshot reader (`oomscope-snapshot`) depend on
//!   nothing else of oomscope, so a change to the analysis rebuilds neither;
//! - the analysis (`oomscope-analysis`) depends on neither the words (`oomscope-words`) nor the
//!   report crate (`oomscope-report`), and the report crate not on the words: the compiler then
//!   refuses an arrow back up;
//! - the collector and the viewer depend on the shared crates, never on each other (their
//!   manifests, and no path into the other in their sources);
//! - only the words crate makes sentences: the analysis and the report crate hand on typed
//!   values, and a sentence made in them (a string literal of three words or more in their code)
//!   fails here. The checker is proven to bite on a copy of the analysis with one sentence added.
//!
//! Test modules (`#[cfg(test)]`) may say what they like; only the code above a file's test
//! module counts.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../..")
}

/// The `[dependencies]` table of a manifest, as lines (up to the next table).
fn dependencies(manifest: &Path) -> Vec<String> {
    let text =
        std::fs::read_to_string(manifest).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    text.lines()
        .skip_while(|l| l.trim() != "[dependencies]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .map(str::to_owned)
        .collect()
}

/// The oomscope crates a manifest's `[dependencies]` name.
fn ours(manifest: &str) -> Vec<String> {
    let deps = dependencies(&workspace().join(manifest));
    assert!(!deps.is_empty(), "{manifest}: no [dependencies] table read");
    deps.iter()
        .filter_map(|l| l.split('=').next())
        .map(str::trim)
        .filter(|name| name.starts_with("oomscope-"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_format_and_the_snapshot_reader_depend_on_no_other_oomscope_crate() {
    for krate in ["shared/format/Cargo.toml", "shared/snapshot/Cargo.toml"] {
        assert_eq!(ours(krate), Vec::<String>::new(), "{krate}");
    }
}

#[test]
fn the_analysis_depends_on_neither_the_words_nor_the_report_crate() {
    assert_eq!(
        ours("shared/analysis/Cargo.toml"),
        ["oomscope-format", "oomscope-snapshot"]
    );
    let report = ours("shared/report/Cargo.toml");
    assert!(!report.iter().any(|d| d == "oomscope-words"), "{report:?}");
    let words = ours("shared/words/Cargo.toml");
    assert!(!words.iter().any(|d| d == "oomscope-report"), "{words:?}");
}

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
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

/// A file's code above its test module (none of a module's `tests.rs`, a test module whole).
fn code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_owned(),
        None => text,
    }
}

#[test]
fn the_collector_and_the_viewer_depend_on_each_other_neither() {
    assert!(
        !ours("collector/Cargo.toml")
            .iter()
            .any(|d| d == "oomscope-viewer")
    );
    assert!(
        !ours("viewer/Cargo.toml")
            .iter()
            .any(|d| d == "oomscope-collector")
    );
    for (dir, other) in [
        ("collector/src", "oomscope_viewer"),
        ("viewer/src", "oomscope_collector"),
    ] {
        let files = sources(&workspace().join(dir));
        assert!(files.len() > 10, "{dir}: read only {} files", files.len());
        for f in files {
            assert!(!code(&f).contains(other), "{} names {other}", f.display());
        }
    }
}

/// A string literal in code: its line and its text (escapes as written).
#[derive(Debug, PartialEq)]
struct Literal {
    line: usize,
    text: String,
    /// Inside an attribute (`#[error("…")]`: an error's message is its type's Display).
    in_attribute: bool,
}

/// The string literals of Rust code, comments left out: a small lexer for what matters here
/// (line and block comments, plain and raw strings, char literals and lifetimes).
fn literals(code: &str) -> Vec<Literal> {
    let chars: Vec<char> = code.chars().collect();
    let (mut out, mut i, mut line) = (Vec::new(), 0, 1);
    // Open attributes' bracket depth (`#[` … `]`).
    let mut attribute: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match c {
            '\n' => line += 1,
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            '/' if next == Some('*') => {
                i += 2;
                while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
                i += 2;
                continue;
            }
            '#' if next == Some('[') => {
                depth += 1;
                attribute.push(depth);
                i += 2;
                continue;
            }
            '[' => depth += 1,
            ']' => {
                if attribute.last() == Some(&depth) {
                    attribute.pop();
                }
                depth = depth.saturating_sub(1);
            }
            'r' if matches!(next, Some('"' | '#'))
                && (i == 0 || !chars[i - 1].is_alphanumeric() && chars[i - 1] != '_') =>
            {
                let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                if chars.get(i + 1 + hashes) == Some(&'"') {
                    let start = i + 2 + hashes;
                    let mut j = start;
                    let closes = |j: usize| {
                        chars[j] == '"'
                            && chars[j + 1..]
                                .iter()
                                .take(hashes)
                                .filter(|&&h| h == '#')
                                .count()
                                == hashes
                    };
                    while j < chars.len() && !closes(j) {
                        j += 1;
                    }
                    let text: String = chars[start..j.min(chars.len())].iter().collect();
                    out.push(Literal {
                        line,
                        in_attribute: !attribute.is_empty(),
                        text: text.clone(),
                    });
                    line += text.matches('\n').count();
                    i = j + 1 + hashes;
                    continue;
                }
            }
            '\'' => {
                // A char literal ('a', '\n', '"'), else a lifetime.
                let close = if next == Some('\\') { i + 3 } else { i + 2 };
                let end = chars[i + 1..]
                    .iter()
                    .position(|&c| c == '\'')
                    .map(|p| p + i + 1);
                if end == Some(close) || (next == Some('\\') && end.is_some()) {
                    i = end.unwrap() + 1;
                    continue;
                }
            }
            '"' => {
                let mut j = i + 1;
                let mut text = String::new();
                while j < chars.len() && chars[j] != '"' {
                    if chars[j] == '\\' {
                        text.push(chars[j]);
                        j += 1;
                    }
                    text.push(chars[j]);
                    j += 1;
                }
                out.push(Literal {
                    line,
                    in_attribute: !attribute.is_empty(),
                    text: text.clone(),
                });
                line += text.matches('\n').count();
                i = j + 1;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Whether a literal reads as a sentence: three words or more in a row.
fn is_prose(text: &str) -> bool {
    // Line continuations (`\` then the next line's indent) join words like a space.
    let text = text.replace("\\\n", " ");
    let words: Vec<&str> = text.split(' ').collect();
    words.windows(3).any(|w| {
        w.iter()
            .all(|word| word.len() >= 2 && word.chars().all(|c| c.is_ascii_alphabetic()))
    })
}

/// Files whose literals are other programs' words, read, never said: the recogniser of OOM
/// error texts (PyTorch's, JAX's, the kernel's), whose every literal is a pattern it matches.
const READS_OTHERS_WORDS: [&str; 1] = ["oom_text.rs"];

/// The sentences made in the code under `dirs`: (file, line, literal).
fn sentences(dirs: &[PathBuf]) -> Vec<(PathBuf, usize, String)> {
    let mut found = Vec::new();
    for dir in dirs {
        for file in sources(dir) {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            if READS_OTHERS_WORDS.contains(&name.as_str()) {
                continue;
            }
            for l in literals(&code(&file)) {
                if !l.in_attribute && is_prose(&l.text) {
                    found.push((file.clone(), l.line, l.text));
                }
            }
        }
    }
    found
}

#[test]
fn only_the_words_crate_makes_sentences() {
    let dirs = [
        workspace().join("shared/analysis/src"),
        workspace().join("shared/report/src"),
    ];
    let found = sentences(&dirs);
    assert!(
        found.is_empty(),
        "sentences made outside the words crate (say them in oomscope-words from a typed \
         value): {found:#?}"
    );
    // The literals read are the code's: the lexer finds the analysis's labels and patterns.
    let lexed = literals(&code(&workspace().join("shared/analysis/src/oom_text.rs")));
    assert!(
        lexed.iter().any(|l| l.text == "CUDA out of memory"),
        "{lexed:?}"
    );
}

/// The check bites: a copy of the analysis with one sentence made in a rule fails it, and the
/// sentence is named by its line; the untouched copy passes.
#[test]
fn the_sentence_check_fails_on_a_copy_with_a_sentence() {
    let copy = std::env::temp_dir().join(format!("oomscope-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&copy);
    let src = workspace().join("shared/analysis/src");
    for file in sources(&src) {
        let to = copy.join(file.strip_prefix(&src).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&file, &to).unwrap();
    }
    assert!(sentences(std::slice::from_ref(&copy)).is_empty());
    let rule = copy.join("recommend/cycles.rs");
    let text = std::fs::read_to_string(&rule).unwrap();
    let broken = text.replacen(
        "/// The rule.",
        "pub fn said() -> String {\n    format!(\"memory is held by reference cycles\")\n}\n\n/// The rule.",
        1,
    );
    assert_ne!(text, broken);
    std::fs::write(&rule, broken).unwrap();
    let found = sentences(std::slice::from_ref(&copy));
    let _ = std::fs::remove_dir_all(&copy);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].2, "memory is held by reference cycles");
    // Comments, attributes and lifetimes are not sentences.
    let quiet = literals(
        "/// said in a doc comment\n#[error(\"a message of an error\")]\nfn f<'a>(x: &'a str) \
         -> char { let _ = \"one two\"; '\"' }",
    );
    assert!(
        quiet.iter().all(|l| l.in_attribute || !is_prose(&l.text)),
        "{quiet:?}"
    );
}

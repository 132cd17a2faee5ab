//! The documents lead somewhere. In README.md, ARCHITECTURE.md, BENCHMARKS.md, FORMAT.md,
//! collector/fake-nvml/README.md and docs/*.md:
//! - every relative markdown link (`[x](path)`, `[x](path#anchor)`, `![x](image)`, `[x]: path`)
//!   names a file or folder that exists, and its anchor a heading of the linked file, as GitHub
//!   makes heading anchors (a same-file `#anchor` too);
//! - every path in backticks that starts at one of the repository's top folders
//!   (`collector/src/run/sampler.rs`, `scripts/measure_*.py`, `shared/format/tests/data/`) exists,
//!   read from the repository's root or from the document's folder, with `*` and `{a,b}` read as
//!   the shell reads them. The dated benchmarks log is exempt from this one: it records what
//!   existed when it was written.
//!
//! Fenced code blocks are skipped (commands, sample output); links inside backticks are text.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// Where a path in backticks must start to be checked: the repository's top folders.
const TOP_FOLDERS: [&str; 7] = [
    "collector",
    "shared",
    "viewer",
    "tests",
    "scripts",
    "docs",
    "static",
];

/// Checked for links, but not for paths in backticks (a record of its time).
const LOG: &str = "docs/benchmarks-log.md";

fn repo_root() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .parent()
        .expect("the collector crate sits in the repository")
        .to_path_buf()
}

/// The documents checked, as paths relative to the root.
fn documents(root: &Path) -> Vec<String> {
    let mut docs: Vec<String> = [
        "README.md",
        "ARCHITECTURE.md",
        "BENCHMARKS.md",
        "shared/format/FORMAT.md",
        "collector/fake-nvml/README.md",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let mut in_docs: Vec<String> = fs::read_dir(root.join("docs"))
        .expect("docs/ is readable")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// The lines of a document outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((i + 1, line)),
            _ => {}
        }
    }
    out
}

/// The code spans of a line: (byte range including the backticks, content).
fn code_spans(line: &str) -> Vec<(std::ops::Range<usize>, &str)> {
    let bytes = line.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i] == b'`' {
            i += 1;
        }
        let run = i - start;
        // The closing run of exactly the same length.
        let mut j = i;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let k = j;
                while j < bytes.len() && bytes[j] == b'`' {
                    j += 1;
                }
                if j - k == run {
                    close = Some((k, j));
                    break;
                }
            } else {
                j += 1;
            }
        }
        match close {
            Some((k, end)) => {
                spans.push((start..end, line[i..k].trim()));
                i = end;
            }
            // An unmatched run is literal text.
            None => i = start + run,
        }
    }
    spans
}

/// The line with its code spans blanked out (links inside backticks are text).
fn without_code(line: &str) -> String {
    let mut out = line.to_owned();
    for (range, _) in code_spans(line).into_iter().rev() {
        out.replace_range(range.clone(), &" ".repeat(range.len()));
    }
    out
}

/// The targets of a line's links: inline `](target)` and reference definitions `[x]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let text = without_code(line);
    let mut targets = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(i);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let inside = after[..end].trim();
        // `<path>` and `path "title"` both name `path`.
        let target = inside
            .trim_start_matches('<')
            .split(['>', ' ', '\t'])
            .next()
            .unwrap_or("");
        if !target.is_empty() {
            targets.push(target.to_owned());
        }
        rest = &after[end..];
    }
    let trimmed = text.trim_start();
    if trimmed.starts_with('[')
        && let Some(close) = trimmed.find("]:")
        && !trimmed[1..close].contains(']')
        && let Some(target) = trimmed[close + 2..].split_whitespace().next()
    {
        targets.push(target.trim_matches(['<', '>']).to_owned());
    }
    targets
}

/// GitHub's anchor for a heading's text: inline markup dropped, lower case, letters, digits, `-`
/// and `_` kept, spaces made `-`, everything else dropped.
fn slug(heading: &str) -> String {
    // `[text](url)` reads as `text`.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](").map(|m| open + m) else {
            break;
        };
        let Some(close) = rest[mid..].find(')').map(|c| mid + c) else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..mid]);
        rest = &rest[close + 1..];
    }
    text.push_str(rest);
    let mut out = String::new();
    for c in text.chars().filter(|c| !matches!(c, '`' | '*')) {
        if c == ' ' {
            out.push('-');
        } else if c.is_alphanumeric() || c == '-' || c == '_' {
            out.extend(c.to_lowercase());
        }
    }
    out
}

/// The anchors of a markdown file's headings; a repeated heading gets `-1`, `-2`, … as on GitHub.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose_lines(text) {
        let trimmed = line.trim_start();
        let level = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&level) || !trimmed[level..].starts_with(' ') {
            continue;
        }
        let heading = trimmed[level..].trim().trim_end_matches('#').trim_end();
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `a/{b,c}/d` as the shell expands it.
fn expand_braces(pattern: &str) -> Vec<String> {
    let Some(open) = pattern.find('{') else {
        return vec![pattern.to_owned()];
    };
    let Some(close) = pattern[open..].find('}').map(|c| open + c) else {
        return vec![pattern.to_owned()];
    };
    pattern[open + 1..close]
        .split(',')
        .flat_map(|alt| {
            expand_braces(&format!(
                "{}{alt}{}",
                &pattern[..open],
                &pattern[close + 1..]
            ))
        })
        .collect()
}

/// Whether `name` matches `pattern`, where `*` is any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if parts.len() == 1 {
        return pattern == name;
    }
    if !name.starts_with(first) || !name[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// Whether something under `base` matches the path pattern (`*` within one component).
fn matches_something(base: &Path, pattern: &str) -> bool {
    let mut found = vec![base.to_path_buf()];
    for component in pattern.split('/').filter(|c| !c.is_empty() && *c != ".") {
        let mut next = Vec::new();
        for dir in &found {
            if component.contains('*') {
                let Ok(entries) = fs::read_dir(dir) else {
                    continue;
                };
                for entry in entries.filter_map(Result::ok) {
                    if entry
                        .file_name()
                        .to_str()
                        .is_some_and(|name| wildcard(component, name))
                    {
                        next.push(entry.path());
                    }
                }
            } else if dir.join(component).exists() {
                next.push(dir.join(component));
            }
        }
        if next.is_empty() {
            return false;
        }
        found = next;
    }
    true
}

/// A path in backticks worth checking: one that starts at a top folder and holds nothing but a
/// path's characters (so `collector run …` and `runs/{job}.oomt` are left alone).
fn repo_path(span: &str) -> Option<&str> {
    let (first, _) = span.split_once('/')?;
    let path_chars = span
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-/*{},".contains(c));
    (TOP_FOLDERS.contains(&first) && path_chars).then_some(span)
}

#[test]
fn every_link_and_path_in_the_documents_leads_somewhere() {
    let root = repo_root();
    let mut problems = Vec::new();
    let mut links = 0;
    let mut paths = 0;
    let mut anchor_cache: HashMap<PathBuf, Vec<String>> = HashMap::new();
    for doc in documents(&root) {
        let file = root.join(&doc);
        let text = fs::read_to_string(&file).unwrap_or_else(|e| panic!("{doc}: {e}"));
        let folder = file
            .parent()
            .expect("a document is in a folder")
            .to_path_buf();
        for (n, line) in prose_lines(&text) {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    folder.join(path)
                };
                if !linked.exists() {
                    problems.push(format!("{doc}:{n}: link to {target}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if linked.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let known = anchor_cache
                    .entry(linked.clone())
                    .or_insert_with(|| anchors(&fs::read_to_string(&linked).unwrap_or_default()));
                if !known.iter().any(|a| a == anchor) {
                    problems.push(format!(
                        "{doc}:{n}: link to {target}: no heading with the anchor #{anchor}"
                    ));
                }
            }
            if doc == LOG {
                continue;
            }
            for (_, span) in code_spans(line) {
                let Some(path) = repo_path(span) else {
                    continue;
                };
                paths += 1;
                for alternative in expand_braces(path) {
                    if !matches_something(&root, &alternative)
                        && !matches_something(&folder, &alternative)
                    {
                        let from = match folder.strip_prefix(&root) {
                            Ok(f) if f.as_os_str().is_empty() => String::new(),
                            Ok(f) => format!(" or from {}/", f.display()),
                            Err(_) => format!(" or from {}", folder.display()),
                        };
                        problems.push(format!(
                            "{doc}:{n}: `{path}`: nothing at {alternative} from the root{from}"
                        ));
                    }
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} of {links} links and {paths} paths lead nowhere:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // The check reads what it should (a parser gone blind passes everything).
    assert!(
        links > 20 && paths > 50,
        "only {links} links and {paths} paths found"
    );
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    let text = "# Benchmarks\n## Trace format (issue 2)\n```\n# not a heading\n```\n\
                ## The re-cut of `shared`, 2026-11-25\n## Trace format (issue 2)\n\
                ### [Links](x.md) and *emphasis* — µs\n";
    assert_eq!(
        anchors(text),
        [
            "benchmarks",
            "trace-format-issue-2",
            "the-re-cut-of-shared-2026-11-25",
            "trace-format-issue-2-1",
            "links-and-emphasis--µs",
        ]
    );
}

#[test]
fn links_paths_and_patterns_are_read_as_written() {
    assert_eq!(
        link_targets("see [a](docs/a.md#x) and ![b](img.png \"t\"), not `[c](d)`"),
        ["docs/a.md#x", "img.png"]
    );
    assert_eq!(
        link_targets("[label]: ../BENCHMARKS.md"),
        ["../BENCHMARKS.md"]
    );
    assert_eq!(
        code_spans("a `x` b ``y ` z`` c")
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>(),
        ["x", "y ` z"]
    );
    assert_eq!(
        repo_path("scripts/measure_*.py"),
        Some("scripts/measure_*.py")
    );
    assert_eq!(repo_path("collector run -- python"), None);
    assert_eq!(repo_path("runs/{job}.oomt"), None);
    assert_eq!(
        expand_braces("d/{a,b}/x{1,2}"),
        ["d/a/x1", "d/a/x2", "d/b/x1", "d/b/x2"]
    );
    assert!(wildcard("h100_v1_2_*.oomt", "h100_v1_2_gpt.oomt"));
    assert!(!wildcard("h100_*.oomt", "h200_x.oomt"));
    assert!(wildcard("*", "anything"));
}

//! No import circle, between files or between modules, in any crate of the workspace (beside
//! `layers.rs`, which checks the arrows between layers). A circle is where a reader cannot find
//! the bottom: two files (or a file and a folder of modules) that each need the other.
//!
//! Read from the sources (std only, no compiler): every path a file's code names — `use` trees,
//! and `crate::`, `super::`, `self::` or a child module's name in expressions — is resolved to
//! the file of the deepest module it reaches; declaring a child (`mod x;`) is not an arrow, but
//! re-exporting from it (`pub use x::Y`) is. Test code (`#[cfg(test)]` items) does not count.
//! Two views are checked: files, and in each folder its entries (the folder's own `mod.rs` or
//! `lib.rs`, each file, each subfolder taken whole).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The crates' source roots, from the workspace root, and their root files.
const CRATES: [(&str, &[&str]); 9] = [
    ("shared/format/src", &["lib.rs"]),
    ("shared/snapshot/src", &["lib.rs"]),
    ("shared/analysis/src", &["lib.rs"]),
    ("shared/words/src", &["lib.rs"]),
    ("shared/report/src", &["lib.rs"]),
    ("shared/testkit/src", &["lib.rs"]),
    ("collector/src", &["lib.rs", "main.rs"]),
    ("collector/fake-nvml/src", &["lib.rs"]),
    ("viewer/src", &["lib.rs", "main.rs"]),
];

fn workspace() -> PathBuf {
    Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("../..")
}

// --- reading a file -------------------------------------------------------------------------

/// The text with comments, string and character literals blanked out (lengths kept).
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, s: &[u8]| {
        out.extend(s.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0, 0);
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if (rest[0] == b'r' || rest.starts_with(b"br"))
            && !prev_is_ident(b, i)
            && raw_string_len(rest).is_some()
        {
            let n = raw_string_len(rest).unwrap();
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'"' {
            let mut j = 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let n = (j + 1).min(rest.len());
            blank(&mut out, &rest[..n]);
            i += n;
        } else if rest[0] == b'\'' {
            // A char literal ('a', '\n', '\u{1F600}'); a lifetime ('a) has no closing quote.
            let n = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)])
                    .ok()
                    .or_else(|| std::str::from_utf8(&rest[1..2]).ok())
                    .and_then(|s| s.chars().next())
                    .map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(ch + 2)
            };
            match n {
                Some(n) => {
                    blank(&mut out, &rest[..n]);
                    i += n;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br"…"`) at the start, if one is.
fn raw_string_len(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") { 2 } else { 1 };
    let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = start + hashes + 1;
    rest[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map(|p| body + p + close.len())
}

/// The code without test items: each `#[cfg(test)]` item (a module, a function, a `use`), or one
/// under `#[cfg(all(test, …))]`, is removed with its block.
fn without_tests(code: &str) -> String {
    let mut out = code.to_owned();
    loop {
        let found = ["#[cfg(test)]", "#[cfg(all(test,"]
            .iter()
            .filter_map(|m| out.find(m))
            .min();
        let Some(at) = found else {
            break;
        };
        let after = at + out[at..].find(']').map_or(0, |e| e + 1);
        let rest = &out[after..];
        let brace = rest.find('{');
        let semi = rest.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => after + s + 1,
            (Some(b), _) => {
                let mut depth = 0;
                let mut end = out.len();
                for (k, c) in out[after + b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = after + b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => after + s + 1,
            (None, None) => out.len(),
        };
        out.replace_range(at..end, "");
    }
    out
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Semi,
    Star,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Token::Ident(code[start..i].to_owned()));
            continue;
        }
        match c {
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push(Token::PathSep);
                i += 2;
                continue;
            }
            b'{' => out.push(Token::Open),
            b'}' => out.push(Token::Close),
            b',' => out.push(Token::Comma),
            b';' => out.push(Token::Semi),
            b'*' => out.push(Token::Star),
            c if c.is_ascii_whitespace() => {}
            _ => out.push(Token::Other),
        }
        i += 1;
    }
    out
}

/// The paths a `use` tree names, from `tokens[at]` (after `use`) to its `;`: each as segments
/// (`*` for a glob), and where the tree ends.
fn use_paths(tokens: &[Token], mut at: usize) -> (Vec<Vec<String>>, usize) {
    fn tree(tokens: &[Token], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            match tokens.get(*at) {
                Some(Token::Ident(name)) if name == "as" => {
                    *at += 2; // `as alias`
                }
                Some(Token::Ident(name)) => {
                    path.push(name.clone());
                    *at += 1;
                }
                Some(Token::PathSep) => *at += 1,
                Some(Token::Star) => {
                    path.push("*".to_owned());
                    *at += 1;
                }
                Some(Token::Open) => {
                    *at += 1;
                    loop {
                        tree(tokens, at, &path, out);
                        match tokens.get(*at) {
                            Some(Token::Comma) => *at += 1,
                            Some(Token::Close) => {
                                *at += 1;
                                break;
                            }
                            _ => break,
                        }
                        if tokens.get(*at) == Some(&Token::Close) {
                            *at += 1;
                            break;
                        }
                    }
                    return;
                }
                _ => {
                    if path.last().is_some_and(|l| l == "self") {
                        path.pop();
                    }
                    if path.len() > prefix.len() || (path.len() == prefix.len() && !path.is_empty())
                    {
                        out.push(path);
                    }
                    return;
                }
            }
        }
    }
    let mut out = Vec::new();
    tree(tokens, &mut at, &[], &mut out);
    while at < tokens.len() && tokens[at] != Token::Semi {
        at += 1;
    }
    (out, at)
}

/// One file's module path (segments after `crate`), its child modules and the paths it names.
struct Source {
    module: Vec<String>,
    children: BTreeSet<String>,
    uses: Vec<Vec<String>>,
    /// Paths in expressions and types (`crate::x::f`, `super::Y`, `child::g`).
    paths: Vec<Vec<String>>,
}

fn read_source(path: &Path, module: Vec<String>) -> Source {
    let code = without_tests(&strip(&std::fs::read_to_string(path).unwrap()));
    let tokens = tokens(&code);
    let mut source = Source {
        module,
        children: BTreeSet::new(),
        uses: Vec::new(),
        paths: Vec::new(),
    };
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Ident(w) if w == "mod" => {
                if let (Some(Token::Ident(name)), Some(Token::Semi)) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                {
                    source.children.insert(name.clone());
                }
                i += 1;
            }
            Token::Ident(w) if w == "use" => {
                let (paths, end) = use_paths(&tokens, i + 1);
                source.uses.extend(paths);
                i = end + 1;
            }
            Token::Ident(first) if tokens.get(i + 1) == Some(&Token::PathSep) => {
                // A path in code: identifiers joined by `::` (generic arguments end it).
                let preceded = i > 0 && tokens[i - 1] == Token::PathSep;
                let mut path = vec![first.clone()];
                let mut j = i + 1;
                while tokens.get(j) == Some(&Token::PathSep) {
                    match tokens.get(j + 1) {
                        Some(Token::Ident(next)) => {
                            path.push(next.clone());
                            j += 2;
                        }
                        _ => break,
                    }
                }
                if !preceded {
                    source.paths.push(path);
                }
                i = j;
            }
            _ => i += 1,
        }
    }
    source
}

// --- the graph ------------------------------------------------------------------------------

/// Every file of a crate with its module path (the root file's is empty).
fn crate_files(src: &Path, root: &str) -> Vec<(PathBuf, Vec<String>)> {
    fn walk(dir: &Path, module: &[String], out: &mut Vec<(PathBuf, Vec<String>)>, root: &str) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_name().unwrap().to_str().unwrap().to_owned();
            if path.is_dir() {
                let mut m = module.to_vec();
                m.push(name);
                walk(&path, &m, out, root);
            } else if let Some(stem) = name.strip_suffix(".rs") {
                let is_root = module.is_empty() && name == root;
                let is_crate_root = module.is_empty() && (name == "lib.rs" || name == "main.rs");
                if is_crate_root && !is_root {
                    continue;
                }
                let mut m = module.to_vec();
                if !is_root && stem != "mod" {
                    m.push(stem.to_owned());
                }
                out.push((path, m));
            }
        }
    }
    let mut out = Vec::new();
    walk(src, &[], &mut out, root);
    out
}

/// A crate's file graph: file -> the files it names.
fn file_graph(src: &Path, root: &str) -> BTreeMap<PathBuf, BTreeSet<PathBuf>> {
    let files = crate_files(src, root);
    let by_module: BTreeMap<Vec<String>, PathBuf> =
        files.iter().map(|(p, m)| (m.clone(), p.clone())).collect();
    let mut graph = BTreeMap::new();
    for (path, module) in &files {
        let source = read_source(path, module.clone());
        // Names a `use` brought in: the last segment -> the full path it stands for.
        let mut imported: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let absolute =
            |p: &[String], imported: &BTreeMap<String, Vec<String>>| resolve(p, &source, imported);
        let mut targets: Vec<Vec<String>> = Vec::new();
        for u in &source.uses {
            if let Some(full) = absolute(u, &BTreeMap::new()) {
                if let Some(last) = u.last().filter(|l| *l != "*" && *l != "self") {
                    imported.insert(last.clone(), full.clone());
                }
                targets.push(full);
            }
        }
        for p in &source.paths {
            if let Some(full) = absolute(p, &imported) {
                targets.push(full);
            }
        }
        let mut edges = BTreeSet::new();
        for full in targets {
            // The deepest module with a file that the path reaches.
            let mut deepest = None;
            for k in 0..=full.len() {
                if let Some(file) = by_module.get(&full[..k]) {
                    deepest = Some(file.clone());
                }
            }
            if let Some(file) = deepest.filter(|f| f != path) {
                edges.insert(file);
            }
        }
        graph.insert(path.clone(), edges);
    }
    graph
}

/// A path named in `source` as segments from the crate root, or `None` when it leaves the crate
/// (std, another crate, a local type's associated item).
fn resolve(
    path: &[String],
    source: &Source,
    imported: &BTreeMap<String, Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut out;
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" => out = Vec::new(),
        "self" => out = source.module.clone(),
        "super" => {
            out = source.module.clone();
            out.pop();
            while rest.first().is_some_and(|s| s == "super") {
                out.pop();
                rest = &rest[1..];
            }
        }
        name if source.children.contains(name) => {
            out = source.module.clone();
            out.push(name.to_owned());
        }
        name => {
            out = imported.get(name)?.clone();
        }
    }
    out.extend(rest.iter().filter(|s| *s != "*" && *s != "self").cloned());
    Some(out)
}

/// Each circle of a graph once, as the nodes around it.
fn circles<N: Ord + Clone>(graph: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Tarjan's strongly connected components: a component of two or more nodes is a circle.
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on_stack: BTreeSet<N>,
        next: usize,
        out: Vec<Vec<N>>,
    }
    fn visit<N: Ord + Clone>(n: &N, g: &BTreeMap<N, BTreeSet<N>>, s: &mut State<N>) {
        s.index.insert(n.clone(), s.next);
        s.low.insert(n.clone(), s.next);
        s.next += 1;
        s.stack.push(n.clone());
        s.on_stack.insert(n.clone());
        for m in g.get(n).into_iter().flatten() {
            if !s.index.contains_key(m) {
                visit(m, g, s);
                let low = s.low[n].min(s.low[m]);
                s.low.insert(n.clone(), low);
            } else if s.on_stack.contains(m) {
                let low = s.low[n].min(s.index[m]);
                s.low.insert(n.clone(), low);
            }
        }
        if s.low[n] == s.index[n] {
            let mut component = Vec::new();
            while let Some(m) = s.stack.pop() {
                s.on_stack.remove(&m);
                let done = &m == n;
                component.push(m);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for n in graph.keys() {
        if !s.index.contains_key(n) {
            visit(n, graph, &mut s);
        }
    }
    s.out
}

/// In each folder, its entries (its own root file, each file, each subfolder whole) and the
/// arrows between them: `folder -> {entry -> entries}`.
fn folder_graphs(
    src: &Path,
    files: &BTreeMap<PathBuf, BTreeSet<PathBuf>>,
) -> BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<PathBuf>>> {
    // The entry of `folder` a file belongs to (None: outside the folder).
    let entry = |folder: &Path, file: &Path| -> Option<PathBuf> {
        let rel = file.strip_prefix(folder).ok()?;
        let first = rel.components().next()?;
        Some(folder.join(first))
    };
    let mut folders: BTreeSet<PathBuf> = BTreeSet::new();
    for file in files.keys() {
        let mut dir = file.parent();
        while let Some(d) = dir {
            if !d.starts_with(src) {
                break;
            }
            folders.insert(d.to_path_buf());
            dir = d.parent();
        }
    }
    let mut out = BTreeMap::new();
    for folder in folders {
        let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for (from, tos) in files {
            let Some(a) = entry(&folder, from) else {
                continue;
            };
            for to in tos {
                if let Some(b) = entry(&folder, to).filter(|b| *b != a) {
                    graph.entry(a.clone()).or_default().insert(b);
                }
            }
        }
        out.insert(folder, graph);
    }
    out
}

fn shown(root: &Path, nodes: &[PathBuf]) -> String {
    nodes
        .iter()
        .map(|n| n.strip_prefix(root).unwrap_or(n).display().to_string())
        .collect::<Vec<_>>()
        .join(" <-> ")
}

/// Every circle in the workspace's crates, in words.
fn workspace_circles() -> Vec<String> {
    let root = workspace().canonicalize().unwrap();
    let mut found = Vec::new();
    for (src, roots) in CRATES {
        let src = root.join(src);
        for crate_root in roots {
            let files = file_graph(&src, crate_root);
            assert!(!files.is_empty(), "{} read no files", src.display());
            for circle in circles(&files) {
                found.push(format!("files: {}", shown(&root, &circle)));
            }
            for (folder, graph) in folder_graphs(&src, &files) {
                for circle in circles(&graph) {
                    let folder = folder.strip_prefix(&root).unwrap_or(&folder);
                    found.push(format!(
                        "modules in {}: {}",
                        folder.display(),
                        shown(&root, &circle)
                    ));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn no_crate_has_an_import_circle_between_files_or_modules() {
    let found = workspace_circles();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_reader_sees_uses_paths_children_and_skips_tests_comments_and_strings() {
    let text = r#"
//! crate::in_a_doc_comment
use crate::a::{b::{C, d}, e as f, self};
use super::*;
mod child;
pub use child::Thing;
fn g() { let _ = crate::x::y(); let s = "crate::in_a_string"; let c = '"'; other::z(); }
#[cfg(test)]
mod tests { use crate::only_in_tests; }
#[cfg(all(test, not(target_arch = "wasm32")))]
mod native_tests { use crate::only_in_native_tests; }
"#;
    let dir = std::env::temp_dir().join(format!("oomscope-circles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("m.rs");
    std::fs::write(&file, text).unwrap();
    let s = read_source(&file, vec!["top".into(), "m".into()]);
    std::fs::remove_dir_all(&dir).unwrap();
    let uses: Vec<String> = s.uses.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        uses,
        [
            "crate::a::b::C",
            "crate::a::b::d",
            "crate::a::e",
            "crate::a",
            "super::*",
            "child::Thing"
        ]
    );
    let paths: Vec<String> = s.paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(paths, ["crate::x::y", "other::z"]);
    assert_eq!(s.children, BTreeSet::from(["child".to_owned()]));
    let resolved = resolve(&s.uses[4], &s, &BTreeMap::new()).unwrap();
    assert_eq!(resolved, ["top"]);
}

#[test]
fn a_circle_is_found_between_files_and_between_a_file_and_a_folder() {
    let g: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::from([
        ("lib", BTreeSet::from(["a"])),
        ("a", BTreeSet::from(["b"])),
        ("b", BTreeSet::from(["a"])),
        ("c", BTreeSet::new()),
    ]);
    assert_eq!(circles(&g), [vec!["a", "b"]]);
    let g: BTreeMap<&str, BTreeSet<&str>> =
        BTreeMap::from([("a", BTreeSet::from(["b"])), ("b", BTreeSet::from(["c"]))]);
    assert!(circles(&g).is_empty());
}

//! Every numeric threshold the analysis decides by is in `thresholds.json` with where it came
//! from: its value as the source writes it, what it decides, the programs or tests it was set on,
//! and the different ones that check it (or, where none here can, why). A constant added to the
//! analysis without that entry, or a value changed without it, fails here; so does a named
//! program that does not exist, or one that both set and checks a threshold.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn table() -> Value {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("thresholds.json"))
            .expect("thresholds.json");
    serde_json::from_str(&text).expect("thresholds.json is JSON")
}

/// `(file, name, value)` of every `const` the analysis's sources declare outside their tests.
fn declared() -> Vec<(String, String, String)> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs")
                && p.file_name().is_some_and(|n| n != "tests.rs")
            {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("shared/analysis/src"), &mut files);
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // Test modules come last in a file: what follows `#[cfg(test)]\nmod` is left out.
        let code = match text.find("#[cfg(test)]\nmod ") {
            Some(at) => &text[..at],
            None => &text[..],
        };
        let rel = f
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace("shared/analysis/../../", "");
        for line in code.lines() {
            let t = line.trim_start();
            let t = t
                .strip_prefix("pub(crate) ")
                .or_else(|| t.strip_prefix("pub(super) "))
                .or_else(|| t.strip_prefix("pub "))
                .unwrap_or(t);
            let Some(rest) = t.strip_prefix("const ") else {
                continue;
            };
            let Some((name, rest)) = rest.split_once(':') else {
                continue;
            };
            if !name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                continue;
            }
            let value = rest
                .split_once('=')
                .map(|(_, v)| v.trim().trim_end_matches(';').trim().to_owned())
                .unwrap_or_default();
            out.push((rel.clone(), name.to_owned(), value));
        }
    }
    out
}

fn short(qualified: &str) -> &str {
    qualified.rsplit("::").next().unwrap_or(qualified)
}

#[test]
fn every_threshold_is_listed_with_its_value_and_where_it_came_from() {
    let t = table();
    let listed = t["thresholds"].as_array().unwrap();
    let not_deciding = t["not_deciding"].as_array().unwrap();
    let key = |v: &Value, name: &str| {
        (
            v["file"].as_str().unwrap().to_owned(),
            short(v[name].as_str().unwrap()).to_owned(),
        )
    };
    let known: BTreeSet<(String, String)> = listed
        .iter()
        .map(|v| key(v, "name"))
        .chain(not_deciding.iter().map(|v| key(v, "name")))
        .collect();
    let mut missing = Vec::new();
    for (file, name, value) in declared() {
        // Numbers only: a multi-line value (a table, a block), a path (`FindingKind::Leak`, a
        // metric), a string, is no threshold's.
        if value.is_empty()
            || value.ends_with('[')
            || value.ends_with('{')
            || value.contains("::")
            || value.contains('"')
        {
            continue;
        }
        if !known.contains(&(file.clone(), name.clone())) {
            missing.push(format!("{file}: {name} = {value}"));
        }
    }
    assert!(
        missing.is_empty(),
        "constants without an entry in shared/analysis/thresholds.json (a threshold: where it was \
         set and what checks it; else under not_deciding, with why):\n{}",
        missing.join("\n")
    );
    let declared: Vec<(String, String, String)> = declared();
    let mut problems = Vec::new();
    for v in listed {
        let (file, name) = key(v, "name");
        let value = v["value"].as_str().unwrap();
        if !declared
            .iter()
            .any(|(f, n, x)| *f == file && *n == name && x == value)
        {
            problems.push(format!("{file}: {name} is no longer `{value}`"));
        }
        let paths = |side: &str| -> Vec<String> {
            v[side]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|e| e["path"].as_str().map(str::to_owned))
                .collect()
        };
        let (set, checked) = (paths("set_on"), paths("checked_on"));
        if v["set_on"].as_array().unwrap().is_empty() {
            problems.push(format!("{name}: set on nothing named"));
        }
        if v["checked_on"].as_array().unwrap().is_empty() && v["unchecked"].as_str().is_none() {
            problems.push(format!("{name}: checked on nothing, and no reason why"));
        }
        for p in set.iter().chain(&checked) {
            if !root().join(p).exists() {
                problems.push(format!("{name}: {p} does not exist"));
            }
        }
        for p in &checked {
            if set.contains(p) {
                problems.push(format!("{name}: {p} both set and checks it"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn fewer_thresholds_go_unchecked_than_when_the_list_began() {
    // 46 of 111 when the list began (2026-12-07): GPU-only rules, ranks and nodes, runs without
    // marks, snapshots and the live view, which no zoo or fresh program here reaches. The count
    // may only fall.
    let t = table();
    let unchecked = t["thresholds"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["checked_on"].as_array().unwrap().is_empty())
        .count();
    assert!(unchecked <= 46, "{unchecked} thresholds checked on nothing");
}

//! The marker protocol's grammar is written for people twice, in docs/protocol.md and in the module
//! documentation of `protocol`; both must name every verb and every key that `protocol::keys`
//! declares (the parser reads by that table), so neither can drift from the code.

use oomscope_format::protocol::{VERBS, keys};

/// The first fenced text block after `after`, without the `//!` of module docs.
fn grammar(text: &str, after: &str) -> String {
    let start = text
        .find(after)
        .unwrap_or_else(|| panic!("{after} not found"));
    let rest = &text[start..];
    let open = rest.find("```text").expect("a text block") + "```text".len();
    let close = open + rest[open..].find("```").expect("the block ends");
    rest[open..close]
        .lines()
        .map(|l| l.trim_start_matches("//!").trim())
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(name: &str, block: &str) {
    for verb in VERBS {
        // A verb starts a line, or a column of a line that lists several short verbs.
        // (A verb without fields is a line or a column of its own.)
        let starts = |part: &str| {
            let part = part.trim();
            part == verb || part.starts_with(&format!("{verb} "))
        };
        assert!(
            block.lines().any(|l| l.split("  ").any(starts)),
            "{name}: no line for `{verb}` in\n{block}"
        );
        for key in keys(verb) {
            assert!(
                block.contains(&format!("{key}=")),
                "{name}: `{verb}` key `{key}=` missing from\n{block}"
            );
        }
    }
}

#[test]
fn the_documented_grammar_names_every_verb_and_key() {
    let readme = include_str!("../../../docs/protocol.md");
    check(
        "docs/protocol.md",
        &grammar(readme, "# Marking stages: the marker protocol"),
    );
}

#[test]
fn the_module_grammar_names_every_verb_and_key() {
    let module = include_str!("../src/protocol/mod.rs");
    check("protocol/mod.rs", &grammar(module, "//! Version 1."));
}

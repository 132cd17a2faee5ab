//! Every error text in `tests/data/oom_texts.md` (real out-of-memory errors from PyTorch, JAX,
//! TensorFlow, NCCL, numpy, Python, C++ and the kernel, and near misses) gives what its `expect:`
//! line says: `recognise_text` the kind, device and requested bytes, `kernel_kill` the killed pid.
//! The file's header describes the format.

use oomscope_analysis::oom_text::{kernel_kill, recognise, recognise_text};
use oomscope_format::OomKind;

/// One entry of the corpus.
struct Entry {
    id: String,
    provenance: Option<String>,
    kind: Option<String>,
    expect: Option<String>,
    text: String,
}

/// What an entry's `expect:` line says.
#[derive(Debug, PartialEq)]
enum Size {
    None,
    Exact(u64),
    /// Within 0.5%: the text prints a rounded figure.
    About(u64),
}

#[derive(Debug)]
struct Expect {
    kind: String,
    device: Option<u32>,
    requested: Size,
    pid: Option<u32>,
}

fn entries() -> Vec<Entry> {
    let path = format!(
        "{}/tests/data/oom_texts.md",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let file = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut entries: Vec<Entry> = Vec::new();
    // None: outside a text block; Some(lines): inside one.
    let mut text: Option<Vec<&str>> = None;
    let mut after_text_label = false;
    for line in file.lines() {
        if let Some(lines) = &mut text {
            if line == "~~~" {
                let entry = entries.last_mut().expect("a text block before any entry");
                assert!(entry.text.is_empty(), "{}: two text blocks", entry.id);
                entry.text = lines.join("\n");
                text = None;
            } else {
                lines.push(line);
            }
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ") {
            let (id, _title) = heading
                .split_once(": ")
                .unwrap_or_else(|| panic!("heading without a title: {line}"));
            entries.push(Entry {
                id: id.to_owned(),
                provenance: None,
                kind: None,
                expect: None,
                text: String::new(),
            });
            after_text_label = false;
            continue;
        }
        let Some(entry) = entries.last_mut() else {
            continue; // the header
        };
        if line == "~~~" {
            assert!(
                after_text_label,
                "{}: a text block without `text:`",
                entry.id
            );
            text = Some(Vec::new());
            after_text_label = false;
        } else if line == "text:" {
            after_text_label = true;
        } else if let Some(value) = line.strip_prefix("provenance: ") {
            entry.provenance = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("kind: ") {
            entry.kind = Some(value.to_owned());
        } else if let Some(value) = line.strip_prefix("expect: ") {
            entry.expect = Some(value.to_owned());
        }
    }
    assert!(text.is_none(), "the last text block is not closed");
    entries
}

fn parse_expect(id: &str, line: &str) -> Expect {
    let mut fields = std::collections::HashMap::new();
    for word in line.split_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            break; // the free words in parentheses
        };
        fields.insert(key, value);
    }
    let field = |key: &str| -> &str {
        fields
            .get(key)
            .unwrap_or_else(|| panic!("{id}: `expect:` without {key}="))
    };
    let number = |text: &str| -> u64 {
        text.parse()
            .unwrap_or_else(|_| panic!("{id}: not a number: {text}"))
    };
    let kind = field("kind").to_owned();
    assert!(
        ["gpu", "host", "kernel-kill", "none"].contains(&kind.as_str()),
        "{id}: kind={kind}"
    );
    let device = match field("device") {
        "-" => None,
        n => Some(u32::try_from(number(n)).unwrap()),
    };
    let requested = match field("requested") {
        "-" => Size::None,
        n => match n.strip_prefix('~') {
            Some(about) => Size::About(number(about)),
            None => Size::Exact(number(n)),
        },
    };
    let pid = fields.get("pid").map(|n| u32::try_from(number(n)).unwrap());
    assert_eq!(
        pid.is_some(),
        kind == "kernel-kill",
        "{id}: pid= goes with kind=kernel-kill, and only there"
    );
    Expect {
        kind,
        device,
        requested,
        pid,
    }
}

/// What is wrong with what the parser says about `entry`, if anything.
fn check(entry: &Entry, expect: &Expect) -> Option<String> {
    let got = recognise_text(&entry.text);
    let kills: Vec<_> = entry.text.lines().filter_map(kernel_kill).collect();
    match expect.kind.as_str() {
        "none" | "kernel-kill" => {
            if got.is_some() {
                return Some(format!("recognise_text gave {got:?}"));
            }
            // recognise_text stops at the first recognised line: no line may be one.
            if let Some(line) = entry.text.lines().find(|l| recognise(l).is_some()) {
                return Some(format!("recognise gave Some for {line:?}"));
            }
            let pids: Vec<u32> = kills.iter().map(|k| k.pid).collect();
            let want: Vec<u32> = expect.pid.into_iter().collect();
            (pids != want).then(|| format!("kernel_kill gave pids {pids:?}, expected {want:?}"))
        }
        kind => {
            let Some(oom) = got else {
                return Some("recognise_text gave None".to_owned());
            };
            let want_kind = if kind == "gpu" {
                OomKind::Gpu
            } else {
                OomKind::Host
            };
            let requested_ok = match (&expect.requested, oom.requested_bytes) {
                (Size::None, None) => true,
                (Size::Exact(want), Some(got)) => *want == got,
                (Size::About(want), Some(got)) => {
                    got.abs_diff(*want) as f64 <= *want as f64 * 0.005
                }
                _ => false,
            };
            let ok = oom.kind == want_kind
                && oom.device == expect.device
                && requested_ok
                && kills.is_empty();
            (!ok).then(|| format!("recognise_text gave {oom:?}; kernel_kill gave {kills:?}"))
        }
    }
}

#[test]
fn every_text_in_the_corpus_reads_as_its_expect_line_says() {
    let entries = entries();
    assert!(
        entries.len() >= 80,
        "only {} entries in the corpus",
        entries.len()
    );
    let mut ids = std::collections::HashSet::new();
    let mut failures = Vec::new();
    for entry in &entries {
        let id = &entry.id;
        assert!(ids.insert(id.clone()), "{id}: the id is not unique");
        assert!(
            entry
                .provenance
                .as_deref()
                .is_some_and(|p| !p.trim().is_empty()),
            "{id}: no provenance line"
        );
        let kind = entry
            .kind
            .as_deref()
            .unwrap_or_else(|| panic!("{id}: no kind line"));
        assert!(
            ["gpu", "host", "kernel-kill", "not-oom"].contains(&kind),
            "{id}: kind: {kind}"
        );
        assert!(!entry.text.is_empty(), "{id}: no text");
        let expect = parse_expect(
            id,
            entry
                .expect
                .as_deref()
                .unwrap_or_else(|| panic!("{id}: no expect line")),
        );
        // A near miss is expected to give nothing, a kill to be a kill; an error's kind may
        // differ from what the text can tell (its expect line says why).
        let consistent = match kind {
            "not-oom" => expect.kind == "none",
            "kernel-kill" => expect.kind == "kernel-kill",
            _ => expect.kind == "gpu" || expect.kind == "host",
        };
        if !consistent {
            failures.push(format!(
                "{id}: kind: {kind} but expect: kind={}\n",
                expect.kind
            ));
            continue;
        }
        if let Some(why) = check(entry, &expect) {
            failures.push(format!(
                "{id}: expected {expect:?}\n  {why}\n  text:\n{}\n",
                entry.text
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} entries read wrong:\n\n{}",
        failures.len(),
        entries.len(),
        failures.join("\n")
    );
}

#[test]
fn the_corpus_has_real_instances_of_every_kind() {
    let entries = entries();
    for kind in ["gpu", "host", "kernel-kill", "not-oom"] {
        let n = entries
            .iter()
            .filter(|e| e.kind.as_deref() == Some(kind))
            .count();
        assert!(n >= 2, "only {n} entries of kind {kind}");
    }
}

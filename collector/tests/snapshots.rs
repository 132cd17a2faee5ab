//! `collector summary` of PyTorch memory snapshots (pickles) through the real binary: the numbers
//! its JSON gives are the facts the generating script wrote, the text names the OOM's site and
//! the site that kept memory, and commands that take traces say what a snapshot is in one line.

use std::path::PathBuf;

mod support;

use oomscope_testkit::Scratch;
use support::{run, stderr};

fn data(name: &str) -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap())
        .join(format!("../shared/snapshot/tests/data/{name}"))
}

#[test]
fn a_snapshot_is_summarised_as_text_and_json() {
    let pickle = data("small_p5.pickle");
    let facts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("small_p5.pickle.json")).unwrap()).unwrap();
    let out = run(&["summary", pickle.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("Memory snapshot: "), "{text}");
    assert!(
        text.contains("[CRITICAL] Out of memory on GPU 1: a request of 20.0 GiB failed"),
        "{text}"
    );
    assert!(
        text.contains("the request came from train.py:52 (forward)"),
        "{text}"
    );
    assert!(
        text.contains("Memory kept across the recording at train.py:77 (train_step)"),
        "{text}"
    );

    let out = run(&["summary", "--json", pickle.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let device = &json["analysis"]["devices"][0];
    for (ours, theirs) in [
        ("peak_active_bytes", "peak_active_bytes"),
        ("active_bytes", "end_active_bytes"),
        ("events", "entries"),
    ] {
        assert_eq!(device[ours], facts[theirs], "{ours}");
    }
    assert_eq!(json["trace_entries"], facts["entries"]);
    assert_eq!(json["analysis"]["findings"][0]["id"], "oom");
}

#[test]
fn a_snapshot_exports_its_timeline_as_csv_and_chrome_json() {
    let s = Scratch::new("snapshot-export");
    let pickle = data("small_p4.pickle");
    let facts: serde_json::Value =
        serde_json::from_slice(&std::fs::read(data("small_p4.pickle.json")).unwrap()).unwrap();
    let out = run(&["export", pickle.to_str().unwrap(), "--format", "csv"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let csv = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        csv.lines().count() as u64,
        facts["entries"].as_u64().unwrap() + 1,
        "a header and a row per entry"
    );
    let json = s.path("snap.json");
    let out = run(&[
        "export",
        pickle.to_str().unwrap(),
        "--format",
        "chrome",
        "-o",
        json.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(out.stdout.is_empty());
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let peak = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["args"]["active"].as_u64())
        .max();
    assert_eq!(peak, facts["peak_active_bytes"].as_u64());
}

#[test]
fn snapshots_given_where_traces_go_and_damaged_ones_are_one_line() {
    let s = Scratch::new("snapshot-cli");
    let pickle = data("small_p4.pickle");
    let html = s.path("snap.html");
    // A report holds the snapshot whole; one that cannot fit says so in one line.
    let out = run(&[
        "report",
        pickle.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let page = std::fs::read(&html).unwrap();
    let embedded = oomscope_report::page::trace_in_report(&page)
        .unwrap()
        .unwrap();
    assert_eq!(embedded.bytes, std::fs::read(&pickle).unwrap());
    let out = run(&[
        "report",
        pickle.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--max-size-mb",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("does not fit in a report of"), "{err}");
    // Parquet tables are of traces: one line naming the formats that take a snapshot.
    let out = run(&[
        "export",
        pickle.to_str().unwrap(),
        "--format",
        "parquet",
        "-o",
        s.path("tables").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is a PyTorch memory snapshot"), "{err}");
    assert!(err.contains("--format csv|chrome"), "{err}");
    // A pickle of something else.
    let other = s.path("other.pickle");
    std::fs::write(
        &other,
        b"\x80\x04\x95\t\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02e.",
    )
    .unwrap();
    let out = run(&["summary", other.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not a memory snapshot"), "{err}");
    // Cut short: what was read, with a warning.
    let bytes = std::fs::read(&pickle).unwrap();
    let cut = s.path("cut.pickle");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = run(&["summary", cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("warning: the pickle ends at byte"), "{text}");
}

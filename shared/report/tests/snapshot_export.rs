//! A memory snapshot's timeline exported as CSV and Perfetto JSON: a row (an event) per entry,
//! each with the replayed active and reserved bytes the summary and the viewer show.

use oomscope_report::snapshot_export::{CSV_HEADER, write_chrome_json, write_csv};
use oomscope_snapshot::read_snapshot;
use oomscope_testkit::data;

fn facts(name: &str) -> serde_json::Value {
    serde_json::from_slice(&data::snapshot(&format!("{name}.json"))).unwrap()
}

fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn exports_hold_a_row_per_entry_with_the_replayed_memory() {
    let f = facts("small_p4.pickle");
    let snap = read_snapshot(&data::snapshot("small_p4.pickle")[..]).unwrap();
    let mut csv = Vec::new();
    write_csv(&snap, &mut csv).unwrap();
    let csv = String::from_utf8(csv).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some(CSV_HEADER));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, num(&f, "entries"));
    let column = |name: &str| CSV_HEADER.split(',').position(|c| c == name).unwrap();
    let active = column("active_bytes");
    let peak = rows.iter().map(|r| r[active].parse::<u64>().unwrap()).max();
    assert_eq!(peak, Some(num(&f, "peak_active_bytes")));
    let oom = rows.iter().find(|r| r[column("action")] == "oom").unwrap();
    assert_eq!(oom[column("addr")], "");
    assert_eq!(
        oom[column("device_free_bytes")].parse::<u64>().unwrap(),
        num(&f, "oom_device_free_bytes")
    );
    assert_eq!(
        oom[column("size_bytes")].parse::<u64>().unwrap(),
        num(&f, "oom_requested_bytes")
    );

    let mut chrome = Vec::new();
    write_chrome_json(&snap, &mut chrome).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&chrome).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let counters: Vec<u64> = events
        .iter()
        .filter(|e| e["ph"] == "C")
        .map(|e| e["args"]["active"].as_u64().unwrap())
        .collect();
    assert_eq!(
        counters.iter().max().copied(),
        Some(num(&f, "peak_active_bytes"))
    );
    let ooms: Vec<_> = events.iter().filter(|e| e["ph"] == "i").collect();
    assert_eq!(ooms.len(), 1);
    assert_eq!(
        ooms[0]["args"]["device_free_bytes"],
        num(&f, "oom_device_free_bytes")
    );
}

//! PyTorch memory snapshots read and analysed: pickles written by CPython's own `pickle` in
//! torch's structure and sharing pattern (`shared/snapshot/tests/data/make_snapshot.py`, which also
//! writes the facts each file holds, computed independently, to `NAME.pickle.json`), in
//! protocols 2 (torch's C++ pickler writes 2 too), 4 (Python ≤ 3.13's default) and 5 (3.14's).

use oomscope_analysis::snapshot::analysis::analyze_snapshot;
use oomscope_snapshot::{Action, read_snapshot};
use oomscope_words::findings::{Worded, worded_snapshot};

fn facts(name: &str) -> serde_json::Value {
    serde_json::from_slice(&oomscope_testkit::data::snapshot(&format!("{name}.json"))).unwrap()
}

fn num(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn protocols_2_4_and_5_read_to_the_facts_python_wrote() {
    let mut seen = Vec::new();
    for name in ["small_p2.pickle", "small_p4.pickle", "small_p5.pickle"] {
        let f = facts(name);
        let snap = read_snapshot(&oomscope_testkit::data::snapshot(name)[..]).unwrap();
        assert!(snap.warnings.is_empty(), "{name}: {:?}", snap.warnings);
        // Device 0 recorded nothing; device 1 everything.
        assert_eq!(snap.devices.len(), 2, "{name}");
        assert!(snap.devices[0].is_empty());
        let events = &snap.devices[1];
        assert_eq!(events.len() as u64, num(&f, "entries"), "{name}");
        assert_eq!(events[0].action, Action::SegmentAlloc);
        // The 9-byte stream pointer.
        assert_eq!(
            snap.streams[events[1].stream as usize],
            (1u64 << 63) + 0x1234
        );
        // Shared frame dicts are interned once each.
        assert_eq!(snap.frames.len() as u64, num(&f, "unique_frames"), "{name}");
        assert_eq!(snap.setting("expandable_segments"), Some("False"), "{name}");

        let a = analyze_snapshot(&snap);
        assert_eq!(a.devices.len(), 1);
        let d = &a.devices[0];
        assert_eq!(u64::from(d.device), num(&f, "device"));
        assert_eq!(d.peak_active_bytes, num(&f, "peak_active_bytes"), "{name}");
        assert_eq!(d.peak_time_us, num(&f, "peak_time_us"), "{name}");
        assert_eq!(d.active_bytes, num(&f, "end_active_bytes"), "{name}");
        assert_eq!(
            d.active_before_bytes, 0,
            "{name}: nothing fell out of the ring"
        );
        let leak = d
            .at_end
            .iter()
            .find(|s| s.site == f["leak_site"].as_str().unwrap())
            .unwrap_or_else(|| panic!("{name}: {:?}", d.at_end));
        assert_eq!(leak.bytes, num(&f, "leak_bytes"));
        assert_eq!(d.ooms.len(), 1);
        assert_eq!(d.ooms[0].requested_bytes, num(&f, "oom_requested_bytes"));
        assert_eq!(
            d.ooms[0].device_free_bytes,
            Some(num(&f, "oom_device_free_bytes"))
        );
        // The OOM first (its request larger than all the process had), then the site that kept
        // a block per step; no fragmentation claimed where the free memory is one block.
        let findings: Vec<Worded> = a.findings().iter().map(worded_snapshot).collect();
        let kinds: Vec<&str> = findings.iter().map(|f| f.kind.id()).collect();
        assert_eq!(kinds, ["oom", "leak"], "{name}: {findings:#?}");
        assert!(findings[0].change.contains("train.py:52 (forward)"));
        assert_eq!(d.kept.len(), 1);
        assert_eq!(d.kept[0].site, f["leak_site"].as_str().unwrap());
        assert_eq!(d.kept[0].bytes, num(&f, "leak_bytes"));
        seen.push(format!("{a:?}"));
    }
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "every protocol reads the same"
    );
}

#[test]
fn a_ring_buffer_that_overflowed_places_the_older_memory_before_the_window() {
    let f = facts("ring.pickle");
    let snap = read_snapshot(&oomscope_testkit::data::snapshot("ring.pickle")[..]).unwrap();
    assert_eq!(snap.devices[1].len() as u64, num(&f, "entries"));
    let d = &analyze_snapshot(&snap).devices[0];
    assert!(d.active_before_bytes > 1 << 30, "{}", d.active_before_bytes);
    assert_eq!(d.peak_active_bytes, num(&f, "peak_active_bytes"));
    assert_eq!(d.active_bytes, num(&f, "end_active_bytes"));
    assert!(
        d.at_peak
            .iter()
            .any(|s| s.site == "(allocated before the recorded window)"),
        "{:?}",
        d.at_peak
    );
}

#[test]
fn a_cut_short_snapshot_keeps_what_was_read_and_never_panics() {
    let bytes = oomscope_testkit::data::snapshot("small_p4.pickle");
    let entries = num(&facts("small_p4.pickle"), "entries") as usize;
    let mut kept_some = 0;
    for cut in (0..bytes.len()).step_by(13) {
        match read_snapshot(&bytes[..cut]) {
            Ok(snap) => {
                assert!(!snap.warnings.is_empty(), "cut at {cut} says so");
                assert!(snap.events() <= entries);
                if snap.events() > 0 {
                    kept_some += 1;
                    // The entries read are device 1's, in order.
                    assert_eq!(snap.devices.len(), 2, "cut at {cut}");
                    assert_eq!(snap.devices[1][0].action, Action::SegmentAlloc);
                }
                let _ = analyze_snapshot(&snap);
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    assert!(
        kept_some > 50,
        "cuts inside the entries keep their prefix ({kept_some})"
    );
}

#[test]
fn other_pickles_are_one_clear_error() {
    // pickle.dumps([1, 2], protocol=4)
    let list = b"\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02e.";
    let e = read_snapshot(&list[..]).unwrap_err().to_string();
    assert!(e.contains("not a memory snapshot"), "{e}");
    // pickle.dumps({"model": torch.nn.Linear}) would hold a GLOBAL.
    let global = b"\x80\x02}q\x00X\x05\x00\x00\x00modelq\x01ctorch.nn\nLinear\nq\x02s.";
    let e = read_snapshot(&global[..]).unwrap_err().to_string();
    assert!(e.contains("GLOBAL"), "{e}");
    // pickle.dumps({"a": 1}, protocol=4): a dict, but no snapshot.
    let dict = b"\x80\x04\x95\n\x00\x00\x00\x00\x00\x00\x00}\x94\x8c\x01a\x94K\x01s.";
    let e = read_snapshot(&dict[..]).unwrap_err().to_string();
    assert!(e.contains("neither `segments` nor `device_traces`"), "{e}");
}

#[test]
fn the_summary_reads_as_reviewed() {
    let snap = read_snapshot(&oomscope_testkit::data::snapshot("small_p4.pickle")[..]).unwrap();
    let a = analyze_snapshot(&snap);
    insta::assert_snapshot!(
        "snapshot_small_p4",
        oomscope_words::snapshot::render_snapshot("small_p4.pickle", &snap, &a)
    );
}

#[test]
fn inputs_the_fuzzer_found_read_or_fail_without_panicking() {
    // Sizes and times chosen to overflow u64 arithmetic in the analysis; an event whose frames
    // are the list it is being appended to (read while that list was borrowed to append).
    for name in ["fuzz_overflow.pickle", "fuzz_frames_being_appended.pickle"] {
        if let Ok(snap) = read_snapshot(&oomscope_testkit::data::snapshot(name)[..]) {
            let a = analyze_snapshot(&snap);
            let _ = oomscope_words::snapshot::render_snapshot(name, &snap, &a);
        }
    }
}

#[test]
fn the_stacked_timeline_and_the_alive_list_add_up_to_the_replayed_memory() {
    use oomscope_snapshot::timeline::{
        BEFORE_WINDOW, StackedPoint, alive_at, entry_at, events_of, replay, stacked_by_site, start,
    };
    for name in ["small_p4.pickle", "ring.pickle"] {
        let f = facts(name);
        let snap = read_snapshot(&oomscope_testkit::data::snapshot(name)[..]).unwrap();
        let device = num(&f, "device") as u32;
        let events = events_of(&snap, device);
        let active: Vec<u64> = replay(events, start(&snap, device))
            .map(|s| s.active_bytes)
            .collect();
        // Every band sums to the active bytes after its entry.
        let stacked = stacked_by_site(&snap, device, 4, 50);
        assert!(
            stacked.points.len() <= 50 && !stacked.points.is_empty(),
            "{name}"
        );
        assert_eq!(stacked.bands.last().unwrap().label, BEFORE_WINDOW);
        assert!(stacked.bands.len() <= 4 + 2, "{name}: {:?}", stacked.bands);
        for p in &stacked.points {
            assert_eq!(p.active_bytes(), active[p.index], "{name} at {}", p.index);
        }
        // Thinning keeps the peak.
        let top = stacked.points.iter().map(StackedPoint::active_bytes).max();
        assert_eq!(top, Some(num(&f, "peak_active_bytes")), "{name}");
        // At the peak: the alive blocks and what came before the window make the peak.
        let at = entry_at(events, num(&f, "peak_time_us")).unwrap();
        let alive = alive_at(&snap, device, at);
        let placed: u64 = alive.blocks.iter().map(|b| b.size).sum();
        assert_eq!(placed + alive.before_bytes, alive.active_bytes, "{name}");
        assert_eq!(alive.active_bytes, num(&f, "peak_active_bytes"), "{name}");
        assert!(alive.blocks.windows(2).all(|w| w[0].size >= w[1].size));
        // After the last entry: the dump's end state.
        let alive = alive_at(&snap, device, events.len() - 1);
        assert_eq!(alive.active_bytes, *active.last().unwrap(), "{name}");
    }
}

#[test]
fn a_snapshot_handed_over_in_slices_reads_as_the_whole_file() {
    use oomscope_snapshot::SnapshotParser;
    for name in [
        "small_p2.pickle",
        "small_p4.pickle",
        "small_p5.pickle",
        "ring.pickle",
    ] {
        let bytes = oomscope_testkit::data::snapshot(name);
        let whole = read_snapshot(&bytes[..]).unwrap();
        // Slices of 1, 7 and 4 096 bytes: every opcode and operand is cut somewhere.
        for slice in [1, 7, 4096] {
            let mut parser = SnapshotParser::default();
            let mut done = None;
            for chunk in bytes.chunks(slice) {
                assert!(done.is_none(), "{name}: read before its end");
                parser.push(chunk.to_vec());
                done = parser.resume();
                assert!(parser.bytes_read() <= bytes.len() as u64);
            }
            let snap = done
                .or_else(|| {
                    parser.finish();
                    parser.resume()
                })
                .unwrap()
                .unwrap();
            assert_eq!(snap.devices, whole.devices, "{name} in slices of {slice}");
            assert_eq!(snap.frames, whole.frames, "{name}");
            assert_eq!(snap.stacks, whole.stacks, "{name}");
            assert_eq!(snap.segments, whole.segments, "{name}");
            assert_eq!(analyze_snapshot(&snap), analyze_snapshot(&whole), "{name}");
        }
        // What the viewer reads a pickle held in memory with.
        let held = SnapshotParser::read_bytes(&bytes).unwrap();
        assert_eq!(held.devices, whole.devices, "{name}");
        assert_eq!(analyze_snapshot(&held), analyze_snapshot(&whole), "{name}");
    }
    // Cut short: once told there is no more, the prefix as `read_snapshot` keeps it.
    let bytes = oomscope_testkit::data::snapshot("small_p4.pickle");
    let cut = &bytes[..bytes.len() * 2 / 3];
    let mut parser = SnapshotParser::default();
    for chunk in cut.chunks(1000) {
        parser.push(chunk.to_vec());
        assert!(parser.resume().is_none());
    }
    assert!(parser.bytes_read() > 0);
    parser.finish();
    let snap = parser.resume().unwrap().unwrap();
    let direct = read_snapshot(cut).unwrap();
    assert!(snap.truncated);
    assert_eq!(snap.devices, direct.devices);
    assert_eq!(snap.warnings, direct.warnings);
    let held = SnapshotParser::read_bytes(cut).unwrap();
    assert_eq!(held.devices, direct.devices);
    assert_eq!(held.warnings, direct.warnings);
    assert!(SnapshotParser::read_bytes(b"").is_err());
    assert!(SnapshotParser::read_bytes(b"\x80\x04not a pickle").is_err());
}

/// A real CUDA snapshot: `collector run --oom-snapshot` around the GPU proof's `train.py` on an
/// NVIDIA H200 (torch 2.11.0+cu130, 2026-11-26), which asked for 1.5× the free memory at step 6.
/// The figures are the allocator's own at the failure (docs/benchmarks-log.md, 2026-11-26, the
/// H200 session): torch's text said
/// "Tried to allocate 206.40 GiB ... 1.10 GiB is allocated by PyTorch, and 119.09 MiB is reserved
/// by PyTorch but unallocated".
#[test]
fn a_real_cuda_snapshot_from_an_h200_reads_its_oom() {
    let snap = read_snapshot(&oomscope_testkit::data::snapshot("h200_oom.pickle")[..]).unwrap();
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);
    assert_eq!(snap.segments.len(), 43);
    let a = analyze_snapshot(&snap);
    let [d] = a.devices.as_slice() else {
        panic!("{:?}", a.devices)
    };
    assert_eq!(d.device, 0);
    let [oom] = d.ooms.as_slice() else {
        panic!("{:?}", d.ooms)
    };
    assert_eq!(oom.requested_bytes, 221_615_161_344);
    assert_eq!(oom.device_free_bytes, Some(148_018_167_808));
    assert_eq!(oom.active_bytes, 1_179_556_864);
    assert_eq!(oom.reserved_bytes, 1_304_428_544);
    let cached_mib = (oom.reserved_bytes - oom.active_bytes) as f64 / f64::from(1 << 20);
    assert!(
        (cached_mib - 119.09).abs() <= 0.005,
        "torch's 119.09 MiB, to its two decimals: {cached_mib}"
    );
    let findings = a.findings();
    let kinds: Vec<&str> = findings.iter().map(|f| f.kind().id()).collect();
    assert_eq!(kinds, ["oom"], "{findings:#?}");
}

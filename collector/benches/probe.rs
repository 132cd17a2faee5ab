//! What a training loop pays per mark: `Probe::mark` with no collector (disabled), and sending
//! to a live socket that a thread drains as the collector's sampler does.
//!
//! `cargo bench -p oomscope-collector --bench probe`

use std::os::unix::net::UnixDatagram;

use divan::{Bencher, black_box};
use oomscope_collector::probe::Probe;
use oomscope_format::{AllocatorStats, Phase};

fn main() {
    // A stand-in collector: a bound socket drained by a thread.
    let dir = std::env::temp_dir().join(format!("oomscope-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("markers.sock");
    let _ = std::fs::remove_file(&path);
    let server = UnixDatagram::bind(&path).unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while server.recv(&mut buf).is_ok() {}
    });
    // SAFETY: set before any other thread reads the environment.
    unsafe {
        std::env::set_var("OOMSCOPE_SOCKET", &path);
    }
    divan::main();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Outside `collector run`: one branch.
#[divan::bench]
fn mark_disabled(bencher: Bencher) {
    let probe = Probe::disabled();
    bencher.bench_local(|| probe.mark(black_box("post_forward")));
}

/// A plain mark to a live collector socket.
#[divan::bench]
fn mark_enabled(bencher: Bencher) {
    let probe = Probe::from_env();
    assert!(probe.is_enabled());
    bencher.bench_local(|| probe.mark(black_box("post_forward")));
}

/// A mark carrying the allocator's statistics (what the tch instrumentation sends).
#[divan::bench]
fn mark_with_snapshot_enabled(bencher: Bencher) {
    let probe = Probe::from_env();
    let snapshot = AllocatorStats {
        allocated_bytes: 9 << 30,
        reserved_bytes: 12 << 30,
        active_bytes: 9 << 30,
        inactive_split_bytes: 1 << 28,
        peak_allocated_bytes: 14 << 30,
        peak_reserved_bytes: 15 << 30,
        num_alloc_retries: 3,
        num_ooms: 0,
    };
    let mut step = 0u64;
    bencher.bench_local(|| {
        step += 1;
        probe.mark_with(
            "post_forward",
            Some(step),
            Some(Phase::Train),
            Some(&snapshot),
        );
    });
}

//! The batch-size search, OOM backoff and allocation measurement on CPU, in one test in a binary
//! of its own: they read this process's resident memory, which tests running beside it would
//! disturb.
#![cfg(feature = "tch")]

use oomscope_collector::torch::{BatchSearch, Session};
use tch::{Device, Kind, Tensor};

mod support;

use oomscope_format::units::MIB;

fn peak_rss_after_reset() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
    peak_rss_after_reset_value()
}

/// The peak resident memory since the last reset.
fn peak_rss_after_reset_value() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// One "training step": activations of 16 MiB per sample, written so they are resident.
fn step(batch: u64) -> f64 {
    let activations = Tensor::ones([(batch * 16 * MIB / 4) as i64], (Kind::Float, Device::Cpu));
    activations.sum(Kind::Float).double_value(&[])
}

#[test]
fn the_batch_search_and_the_oom_backoff() {
    // glibc raises its mmap threshold after large frees, so later blocks come from a heap it may
    // keep: peaks would depend on what ran before. A fixed threshold makes every large block an
    // mmap that is returned on free, so each trial's peak is its own.
    // SAFETY: mallopt with a valid parameter, before any other thread allocates here.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
    let session = Session::from_env();
    step(1); // warm up libtorch's allocator and kernels before measuring the baseline
    let base = peak_rss_after_reset();
    // A "device" with 200 MiB free above what the process holds. Each step needs 16 MiB per
    // sample plus libtorch's own working memory.
    let limit = base + 200 * MIB;
    let exact = BatchSearch {
        limit_bytes: Some(limit),
        margin: 0.0,
        ..BatchSearch::default()
    };
    let r = session.find_max_batch_size(&exact, |b| {
        step(b);
    });
    // The right batch, found independently: each batch's peak measured on its own, in order.
    let truth = (1..=16u64)
        .take_while(|b| {
            peak_rss_after_reset();
            step(*b);
            peak_rss_after_reset_value() <= limit
        })
        .last()
        .unwrap();
    assert!((8..16).contains(&truth), "{truth}");
    let tried: Vec<u64> = r.trials.iter().map(|t| t.batch_size).collect();
    assert_eq!(&tried[..5], [1, 2, 4, 8, 16], "doubles until out of memory");
    assert!(tried.len() <= 8, "then bisects between 8 and 16: {tried:?}");
    assert_eq!(
        (r.largest_fit, r.smallest_oom),
        (Some(truth), Some(truth + 1)),
        "{tried:?}"
    );
    let fit = r.fit.expect("a line through the trials that fit");
    assert!(
        (fit.per_sample_bytes - (16 * MIB) as f64).abs() < MIB as f64,
        "{fit:?}"
    );
    assert_eq!(r.recommended, Some(truth));
    // With the default 10% margin the recommendation leaves room: 0.9 × limit.
    let margin = session.find_max_batch_size(
        &BatchSearch {
            limit_bytes: Some(limit),
            ..BatchSearch::default()
        },
        |b| {
            step(b);
        },
    );
    let expected = ((0.9 * limit as f64 - fit.fixed_bytes) / fit.per_sample_bytes).floor() as u64;
    assert!(
        margin.recommended.unwrap().abs_diff(expected.min(12)) <= 1,
        "{margin:?}"
    );
    assert!(margin.recommended.unwrap() < 12);

    // Backoff: batches above 4 fail to allocate for real (petabytes), and the run goes on at 4.
    let (batch, value) = session
        .run_with_oom_backoff(64, |b| {
            let per_sample = if b > 4 { 1i64 << 48 } else { 1024 };
            Tensor::zeros([b as i64 * per_sample], (Kind::Float, Device::Cpu)).numel()
        })
        .unwrap();
    assert_eq!((batch, value), (4, 4 * 1024));

    // What a step keeps (e.g. optimizer moments created at the first step): 64 MiB of f32.
    let (kept, delta) =
        session.measure_allocation(|| Tensor::ones([16 << 20], (Kind::Float, Device::Cpu)));
    let delta = delta.expect("resident memory is readable");
    assert!((delta - (64 << 20)).abs() < 4 << 20, "{delta}");
    drop(kept);
}

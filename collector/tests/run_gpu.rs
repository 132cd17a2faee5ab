//! `collector run` end to end on GPUs without a GPU: the NVML test double (`fake-nvml`) plays
//! devices and their processes, and each rank's GPU memory is its own, a process's growth is
//! followed within the second, and GPU memory reaches `summary`, CSV and Chrome's trace format.
//! Beside them, `collector estimate`'s GPU memory from a safetensors header, against figures
//! computed by hand.
//!
//! One of three targets of `collector run`'s tests (`run.rs`, `run_marks.rs`, `run_gpu.rs`), split
//! by what they test so that each reads in one sitting.

use std::path::{Path, PathBuf};
use std::process::Output;

use oomscope_analysis::analyze;
use oomscope_format::CounterKind;

mod support;

use oomscope_testkit::Scratch;
use support::{collector, read, run, stderr};

/// `collector run -o TRACE -- python3 PROGRAM` with the NVML test double playing `script`.
fn record_python_on_fake_gpus(program: &Path, script: &Path, trace: &Path) -> Output {
    collector(&[
        "run",
        "-q",
        "-o",
        trace.to_str().unwrap(),
        "--",
        "python3",
        program.to_str().unwrap(),
    ])
    .env("OOMSCOPE_NVML_LIB", fake_nvml())
    .env("OOMSCOPE_FAKE_NVML_SCRIPT", script)
    .output()
    .unwrap()
}

/// The NVML test double, built next to the test binaries (a dev-dependency of this crate).
fn fake_nvml() -> PathBuf {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .unwrap()
        .to_path_buf();
    let lib = deps.join("libfake_nvml.so");
    assert!(
        lib.exists(),
        "{} missing: build the oomscope-fake-nvml dev-dependency",
        lib.display()
    );
    lib
}

#[test]
fn each_rank_s_gpu_memory_from_nvml_is_its_own_and_the_heavier_rank_is_named() {
    // Two ranks under a launcher (RANK in their environment, as torchrun starts them), each on
    // its GPU; NVML (the test double) lists rank 0 with 2 GiB and rank 1 with 3 GiB.
    let s = Scratch::new("fakenvml-ranks");
    let device = |i: u32, rank_bytes: u64| {
        format!(
            r#"{{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-fake-{i}", "total_bytes": 85899345920,
               "used_bytes": {}, "processes": [{{"match": {{"rank": {i}}}, "used_bytes": {rank_bytes}}}]}}"#,
            rank_bytes + (512 << 20)
        )
    };
    let script = s.script(
        "nvml.json",
        &format!(
            r#"{{"devices": [{}, {}]}}"#,
            device(0, 2 << 30),
            device(1, 3 << 30)
        ),
    );
    let launcher = s.script(
        "launcher.py",
        r#"
import os, subprocess, sys
RANK_CODE = """
import time, oomscope_probe as oom
for step in range(12):
    oom.mark("pre_forward", step=step)
    time.sleep(0.1)
    oom.mark("post_forward", step=step)
    time.sleep(0.1)
"""
ranks = [subprocess.Popen([sys.executable, "-c", RANK_CODE],
                          env={**os.environ, "RANK": str(r), "LOCAL_RANK": str(r), "WORLD_SIZE": "2"})
         for r in range(2)]
sys.exit(max(p.wait() for p in ranks))
"#,
    );
    let trace = s.path("t.oomt");
    let out = record_python_on_fake_gpus(&launcher, &script, &trace);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let t = read(&trace).trace;
    // One per-process GPU counter per rank, on its device, with its own bytes.
    let rank_of = |pid: u32| {
        t.processes
            .iter()
            .rev()
            .find(|p| p.pid == pid)
            .and_then(|p| p.rank)
    };
    let mut per_rank: Vec<(Option<u32>, Option<u32>, u64)> = t
        .counters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == CounterKind::PidGpu)
        .map(|(i, c)| {
            let peak = t
                .samples
                .points(oomscope_format::CounterId(i as u32))
                .map(|(_, v)| v)
                .max()
                .unwrap_or(0);
            (rank_of(c.pid.unwrap()), c.device, peak)
        })
        .collect();
    per_rank.sort_unstable();
    assert_eq!(
        per_rank,
        [(Some(0), Some(0), 2 << 30), (Some(1), Some(1), 3 << 30)],
        "{:?}",
        t.counters
    );
    // The analysis reads each rank's own device memory and names the heavier one.
    let a = analyze(&t, &Default::default());
    let r = a.ranks.expect("two ranks");
    let device: Vec<Option<u64>> = r.ranks.iter().map(|x| x.peak_device_bytes).collect();
    assert_eq!(device, [Some(2 << 30), Some(3 << 30)]);
    let (worst, spread, on_device) = r.worst().unwrap();
    assert_eq!((worst.rank, spread, on_device), (1, 1 << 30, true));
}

#[test]
fn per_process_gpu_memory_follows_a_growth_within_the_second() {
    // The allocator grows once, 0.5 s in, and the program ends 0.4 s later: a query once a
    // second (at 0 s and 1 s) would never see the growth, and the memory outside the allocator
    // at the peak would go unsaid (the H200 GPU proof). The device's use moved, so the poller asks
    // again within ~0.1 s; while nothing moves it asks once a second.
    let s = Scratch::new("requery");
    let script = s.script(
        "nvml.json",
        r#"{
  "devices": [{
    "name": "NVIDIA H200",
    "uuid": "GPU-fake-0",
    "total_bytes": 150109880320,
    "reserved_bytes": 644939776,
    "used_bytes": [[0, 1073741824], [500, 1073741824], [500, 3221225472]],
    "processes": [{"match": "children_of_caller", "used_bytes": [[0, 1073741824], [500, 1073741824], [500, 3221225472]]}]
  }]
}"#,
    );
    let child = s.script("child.py", "import time\ntime.sleep(0.9)\n");
    let trace = s.path("t.oomt");
    let out = record_python_on_fake_gpus(&child, &script, &trace);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decoded = read(&trace);
    let t = &decoded.trace;
    let used = t.counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let process = t.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
    let grew_us = t
        .samples
        .points(used)
        .find(|(_, v)| *v == 3 << 30)
        .expect("the device's growth sampled")
        .0;
    let seen_us = t
        .samples
        .points(process)
        .find(|(_, v)| *v == 3 << 30)
        .expect("the per-process figure never saw the growth")
        .0;
    assert!(
        seen_us - grew_us <= 250_000,
        "seen {seen_us} µs, grown at {grew_us} µs"
    );
    let mut values: Vec<u64> = t.samples.points(process).map(|(_, v)| v).collect();
    values.dedup();
    assert_eq!(values, [1 << 30, 3 << 30]);
}

#[test]
fn gpu_memory_from_nvml_appears_in_summary_csv_and_chrome_export() {
    let s = Scratch::new("fakenvml");
    let script = s.script(
        "nvml.json",
        r#"{
  "driver_version": "580.65.06",
  "cuda_driver_version": 13000,
  "devices": [{
    "name": "NVIDIA H100 80GB HBM3",
    "uuid": "GPU-fake-0",
    "total_bytes": 85899345920,
    "reserved_bytes": 536870912,
    "used_bytes": [[0, 1073741824], [1500, 10737418240]],
    "processes": [{"match": "children_of_caller", "used_bytes": [[0, 536870912], [1500, 9663676416]]}]
  }]
}"#,
    );
    let child = s.script(
        "child.py",
        r#"
import time, oomscope_probe as oom
for step in range(8):
    oom.mark("pre_forward", step=step)
    time.sleep(0.12)
    oom.mark("post_forward", step=step)
    time.sleep(0.12)
"#,
    );
    let trace = s.path("t.oomt");
    let out = record_python_on_fake_gpus(&child, &script, &trace);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let decoded = read(&trace);
    let t = &decoded.trace;
    assert_eq!(t.metadata.gpus.len(), 1);
    assert_eq!(t.metadata.gpus[0].name, "NVIDIA H100 80GB HBM3");
    assert_eq!(t.metadata.gpus[0].total_memory_bytes, 85_899_345_920);
    assert_eq!(t.metadata.gpus[0].driver_version, "580.65.06");
    let used = t.counter(CounterKind::GpuUsed, Some(0)).unwrap();
    let process = t.counter(CounterKind::ProcessGpu, Some(0)).unwrap();
    let used_values: Vec<u64> = t.samples.points(used).map(|(_, v)| v).collect();
    let max_used = *used_values.iter().max().unwrap();
    assert_eq!(
        max_used,
        10 << 30,
        "the schedule tops out at 10 GiB after 1.5 s"
    );
    assert!(used_values[0] < 2 << 30);
    // Two speeds: device memory every 10 ms; the per-process query, which holds the driver's
    // lock, once a second, and while the device's use moves (it ramps for 1.5 s here) at most
    // every 100 ms.
    let mut process_values: Vec<u64> = t.samples.points(process).map(|(_, v)| v).collect();
    assert!(
        !process_values.is_empty(),
        "the child's GPU memory was never read"
    );
    process_values.dedup();
    let mut distinct_used = used_values.clone();
    distinct_used.dedup();
    assert!(distinct_used.len() > 30, "{}", distinct_used.len());
    let seconds = t.samples.points(used).last().unwrap().0 as f64 / 1e6;
    assert!(
        process_values.len() >= 5 && (process_values.len() as f64) <= seconds / 0.1 + 2.0,
        "the per-process query follows the ramp at most every 100 ms ({seconds:.2} s): {process_values:?}"
    );

    let summary = run(&["summary", trace.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&summary.stdout);
    assert!(text.contains("NVIDIA H100 80GB HBM3"), "{text}");
    assert!(
        text.contains("gpu0.used") && text.contains("10.0 GiB"),
        "{text}"
    );
    assert!(text.contains("gpu0.process"), "{text}");

    let csv =
        String::from_utf8(run(&["export", trace.to_str().unwrap(), "--format", "csv"]).stdout)
            .unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = header.iter().position(|h| *h == "gpu0.process").unwrap();
    assert!(
        csv.lines()
            .skip(1)
            .any(|l| !l.split(',').nth(col).unwrap().is_empty())
    );
    assert!(header.contains(&"gpu0.used") && header.contains(&"gpu0.total"));

    let chrome: serde_json::Value = serde_json::from_slice(
        &run(&["export", trace.to_str().unwrap(), "--format", "chrome"]).stdout,
    )
    .unwrap();
    let gpu_events: Vec<&serde_json::Value> = chrome["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "gpu0 memory (bytes)")
        .collect();
    assert!(gpu_events.iter().any(|e| e["args"]["process"].is_u64()));
    assert!(gpu_events.iter().any(|e| e["args"]["used"] == 10u64 << 30));
}

#[test]
fn estimate_reads_a_safetensors_header_and_matches_hand_computed_figures() {
    let s = Scratch::new("estimate");
    // Two tensors: 4096 × 1024 bf16 and 1024 f32; the data is zeros (only the header is read).
    let header = r#"{"__metadata__":{"format":"pt"},"layer.weight":{"dtype":"BF16","shape":[4096,1024],"data_offsets":[0,8388608]},"layer.bias":{"dtype":"F32","shape":[1024],"data_offsets":[8388608,8392704]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + 8_392_704, 0);
    let file = s.path("model.safetensors");
    std::fs::write(&file, &bytes).unwrap();
    let out = run(&[
        "estimate",
        "--safetensors",
        file.to_str().unwrap(),
        "--precision",
        "bf16",
        "--cuda-context",
        "0",
        "--batch",
        "8",
        "--activation-bytes-per-sample",
        "2MiB",
        "--gpu-memory",
        "64MiB",
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // By hand: 4 194 304 + 1 024 parameters, everything bf16: weights and gradients 2 B each
    // (8 390 656 B), AdamW moments 4 B (16 781 312 B); activations 8 × 2 MiB = 16 777 216 B;
    // the allocator's 10% on top of those 50 339 840 B: 5 033 984 B; total 55 373 824 B.
    assert_eq!(e["parameters"], 4_195_328);
    assert_eq!(e["weights_bytes"], 8_390_656);
    assert_eq!(e["gradients_bytes"], 8_390_656);
    assert_eq!(e["master_weights_bytes"], 0);
    assert_eq!(e["optimizer_bytes"], 16_781_312);
    assert_eq!(e["activations_bytes"], 16_777_216);
    assert_eq!(e["allocator_overhead_bytes"], 5_033_984);
    assert_eq!(e["total_bytes"], 55_373_824);
    // (90% of 64 MiB − 1.1 × 33 562 624 B) / (1.1 × 2 MiB) = 10.2 → 10 samples.
    assert_eq!(e["max_batch_within_90_percent"], 10);
    assert_eq!(e["warnings"].as_array().unwrap().len(), 0);
    // The default is mixed precision: 16 bytes per parameter (fp32 master weights and moments).
    let out = run(&[
        "estimate",
        "--params",
        "7B",
        "--gpu-memory",
        "80GiB",
        "--json",
    ]);
    let e: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["bytes_per_trainable_parameter"], 16.0);
    assert!(e["fraction_of_gpu"].as_f64().unwrap() > 1.3, "{e}");
    // Past 90% it warns, in the table too.
    let out = run(&[
        "estimate",
        "--safetensors",
        file.to_str().unwrap(),
        "--batch",
        "16",
        "--activation-bytes-per-sample",
        "2MiB",
        "--gpu-memory",
        "64MiB",
    ]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("warning: the total"), "{table}");
    // A file that is not safetensors is one clear error.
    let bad = s.script("bad.safetensors", "definitely not a model");
    let out = run(&["estimate", "--safetensors", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: cannot read"),
        "{}",
        stderr(&out)
    );
}

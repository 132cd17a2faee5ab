//! Decode throughput of the 1-hour 1 kHz benchmark trace inside the browser, for BENCHMARKS.md
//! (beside the native figure from `cargo run --release -p oomscope-analysis --example measure`).
//! Ignored by default (it is a measurement, and slow in debug builds); run it in release:
//!
//! `CHROMEDRIVER=/usr/bin/chromedriver cargo test --release -p oomscope-viewer --target wasm32-unknown-unknown --test decode_speed -- --include-ignored --nocapture`
#![cfg(target_arch = "wasm32")]

use oomscope_format::decode;
use oomscope_testkit::synth::TrainingRun;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn now_ms() -> f64 {
    web_sys::window().unwrap().performance().unwrap().now()
}

#[wasm_bindgen_test]
#[ignore]
fn decode_the_hour_in_the_browser() {
    let bytes = TrainingRun::hour_at_1khz().to_bytes();
    let mut best_ms = f64::INFINITY;
    let mut values = 0usize;
    for _ in 0..5 {
        let start = now_ms();
        let d = decode(&bytes).unwrap();
        let ms = now_ms() - start;
        assert!(d.warnings.is_empty());
        values = d.trace.samples.len() * d.trace.counters.len();
        best_ms = best_ms.min(ms);
        drop(d);
    }
    assert_eq!(
        values, 21_600_000,
        "the benchmark trace is 3.6 M rows × 6 counters"
    );
    let start = now_ms();
    let d = decode(&bytes).unwrap();
    let decoded_ms = now_ms() - start;
    let a = oomscope_viewer::load::analyse(&d.trace);
    let analysis_ms = now_ms() - start - decoded_ms;
    assert!(!a.stage_table.rows.is_empty());
    console_log!(
        "wasm decode of the hour: {} bytes, {values} values, best of 5 {best_ms:.1} ms = {:.0} M values/s; analysis {analysis_ms:.0} ms",
        bytes.len(),
        values as f64 / best_ms / 1e3
    );
}

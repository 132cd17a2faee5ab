//! Fuzzes the PyTorch memory snapshot reader (the streaming unpickler underneath it): any input
//! must read or be refused, never panic, hang, recurse without bound or allocate out of
//! proportion; whatever reads must also survive the analysis and the summary.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(snap) = oomscope_snapshot::read_snapshot(data) {
        let analysis = oomscope_analysis::snapshot::analysis::analyze_snapshot(&snap);
        let _ = oomscope_words::snapshot::render_snapshot("fuzz", &snap, &analysis);
    }
});

//! Fuzzes the trace reader: any input must decode or be refused, never panic, hang, or allocate
//! out of proportion; whatever decodes must also survive the analysis.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oomscope_format::codec::MAGIC;

fuzz_target!(|data: &[u8]| {
    // Half the time, graft the input onto a valid header so the fuzzer explores the body.
    let mut grafted;
    let input = if data.first().is_some_and(|b| b & 1 == 1) {
        grafted = Vec::with_capacity(data.len() + 16);
        grafted.extend_from_slice(&MAGIC);
        grafted.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        grafted.extend_from_slice(&data[1..]);
        &grafted[..]
    } else {
        data
    };
    if let Ok(decoded) = oomscope_format::decode(input) {
        let analysis = oomscope_analysis::analyze(
            &decoded.trace,
            &oomscope_analysis::AnalysisOptions::default(),
        );
        let _ = oomscope_words::summary::render(&decoded.trace, &analysis);
    }
});

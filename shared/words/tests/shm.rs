//! `/dev/shm` over a run (format 1.13): what it held, and the finding when it was full.

use oomscope_analysis::finding::FindingKind;
use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_format::units::MIB;
use oomscope_format::{
    CounterKind, ExitStatus, Metadata, ProcessExit, Record, Trace, TraceWriter, decode,
};
use oomscope_words::findings::FindingWords as _;

/// A run whose `/dev/shm` of `size` held `start` when it began and rose evenly over ten
/// readings to `peak`, ending with `exit`.
fn run(size: u64, start: u64, peak: u64, exit: i32) -> Trace {
    let readings: Vec<u64> = (0..10u64).map(|t| start + (peak - start) * t / 9).collect();
    run_of(size, &readings, exit)
}

/// A run whose `/dev/shm` of `size` read `readings`, ending with `exit`.
fn run_of(size: u64, readings: &[u64], exit: i32) -> Trace {
    said(size, readings, exit, None)
}

/// [`run_of`], with a note of the program's stderr at 50 ms.
fn said(size: u64, readings: &[u64], exit: i32, note: Option<&str>) -> Trace {
    let mut w = TraceWriter::new(Vec::new(), &Metadata::default()).unwrap();
    let rss = w.declare_counter(CounterKind::HostRss, None).unwrap();
    let used = w.declare_counter(CounterKind::ShmUsed, None).unwrap();
    let total = w.declare_counter(CounterKind::ShmSize, None).unwrap();
    for (tick, in_shm) in readings.iter().enumerate() {
        w.sample(
            tick as u64 * 10_000,
            &[(rss, 600 * MIB), (used, *in_shm), (total, size)],
        )
        .unwrap();
    }
    if let Some(text) = note {
        w.write(&Record::Note(oomscope_format::Note {
            t_us: 50_000,
            text: text.into(),
        }))
        .unwrap();
    }
    w.write(&Record::Exit(ProcessExit {
        t_us: 100_000,
        status: ExitStatus::Code(exit),
        probable_host_oom: false,
    }))
    .unwrap();
    decode(&w.finish(100_000).unwrap()).unwrap().trace
}

#[test]
fn a_full_dev_shm_is_told_with_its_size_its_share_and_the_fix() {
    let t = decode(&oomscope_testkit::data::trace("v1_13_shm.oomt"))
        .unwrap()
        .trace;
    let a = analyze(&t, &AnalysisOptions::default());
    let shm = a.shared_memory.unwrap();
    assert_eq!(
        (shm.size_bytes, shm.start_bytes, shm.peak_bytes),
        (64 * MIB, MIB, 63 * MIB)
    );
    let f = a
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::ShmPressure)
        .unwrap();
    assert_eq!(f.title(), "/dev/shm was full: 63.0 MiB of its 64.0 MiB");
    assert!(
        f.explanation()
            .contains("62.0 MiB of it since the run began")
            && f.explanation().ends_with("; the run then failed"),
        "{}",
        f.explanation()
    );
    assert!(f.change().contains("--shm-size"), "{}", f.change());
    let text = oomscope_words::summary::render(&t, &a);
    assert!(
        text.contains("shared memory (/dev/shm): at most 63.0 MiB of its 64.0 MiB (98%)"),
        "{text}"
    );
}

#[test]
fn dev_shm_below_full_or_filled_before_the_run_is_no_finding() {
    let find = |t: &Trace| {
        analyze(t, &AnalysisOptions::default())
            .findings
            .iter()
            .any(|f| f.kind() == FindingKind::ShmPressure)
    };
    // 89% is not full while what is left (7 MiB) holds the largest rise (6.22 MiB a tick)...
    assert!(!find(&run(64 * MIB, MIB, 57 * MIB, 0)));
    assert!(find(&run(64 * MIB, MIB, 58 * MIB, 0)));
    // ... but 64% is full when the next rise of the size seen does not fit: 40 MiB at once,
    // 23 MiB left.
    let jump = [MIB, MIB, MIB, 41 * MIB, 41 * MIB];
    assert!(find(&run_of(64 * MIB, &jump, 1)));
    assert!(!find(&run_of(128 * MIB, &jump, 1)));
    // Full before the run began, and no fuller: not the run's doing.
    assert!(!find(&run(64 * MIB, 60 * MIB, 60 * MIB, 1)));
    // A clean run that filled it: a warning, not critical.
    let a = analyze(
        &run(64 * MIB, MIB, 62 * MIB, 0),
        &AnalysisOptions::default(),
    );
    let f = a
        .findings
        .iter()
        .find(|f| f.kind() == FindingKind::ShmPressure)
        .unwrap();
    assert_eq!(f.severity, oomscope_analysis::finding::Severity::Warning);
}

#[test]
fn pytorch_s_words_that_dev_shm_ran_out_are_quoted_and_count_when_the_readings_missed_it() {
    let words = "RuntimeError: unable to allocate shared memory(shm) for file \
                 </torch_5617_3366040453_0>: Resource temporarily unavailable (11)";
    // Half full at every reading: the handover that filled it came between two.
    let half = [MIB, 30 * MIB, 32 * MIB, 32 * MIB];
    let finding = |t: &Trace| {
        analyze(t, &AnalysisOptions::default())
            .findings
            .into_iter()
            .find(|f| f.kind() == FindingKind::ShmPressure)
    };
    assert!(finding(&said(64 * MIB, &half, 1, None)).is_none());
    let f = finding(&said(64 * MIB, &half, 1, Some(words))).unwrap();
    assert_eq!(
        f.title(),
        "/dev/shm ran out, PyTorch said: 32.0 MiB of its 64.0 MiB at the most read"
    );
    assert!(
        f.explanation().ends_with(&format!(
            "; at 50.0 ms the program said so: \"{words}\"; the run then failed"
        )),
        "{}",
        f.explanation()
    );
    // Other words in a note are not PyTorch's about /dev/shm.
    let other = "unable to open shared memory object </torch_1_2_3> in read-write mode: Too many \
                 open files (24)";
    assert!(finding(&said(64 * MIB, &half, 1, Some(other))).is_none());
}

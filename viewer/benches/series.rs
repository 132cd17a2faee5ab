//! The charts' decimation (`series`) on the 1-hour 1 kHz workload (3.6 M rows × 6 counters): what
//! each redraw of a chart costs the page.
//!
//! Run with `cargo bench -p oomscope-viewer --bench series`.

// Natively only (divan is a native dev-dependency): a wasm32 build of the viewer's targets gets
// an empty main.
#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::sync::LazyLock;

    use divan::{Bencher, black_box};
    use oomscope_format::{CounterKind, Trace, decode};
    use oomscope_testkit::synth::TrainingRun;
    use oomscope_viewer::series;

    pub fn main() {
        divan::main();
    }

    static HOUR: LazyLock<Trace> = LazyLock::new(|| {
        decode(&TrainingRun::hour_at_1khz().to_bytes())
            .unwrap()
            .trace
    });

    /// One chart redraw of the whole hour at 1 200 pixel buckets.
    #[divan::bench(sample_count = 20)]
    fn decimate_hour_to_1200_buckets(bencher: Bencher) {
        let trace = &*HOUR;
        let id = trace.counter(CounterKind::HostRss, None).unwrap();
        let end = trace.duration_us();
        bencher.bench(|| series::decimate(&trace.samples, id, 0, black_box(end), 1200));
    }

    /// The same redraw through the block index (what the viewer does).
    #[divan::bench(sample_count = 20)]
    fn decimate_hour_to_1200_buckets_indexed(bencher: Bencher) {
        let trace = &*HOUR;
        let id = trace.counter(CounterKind::HostRss, None).unwrap();
        let index = series::BlockIndex::new(&trace.samples, id);
        let end = trace.duration_us();
        bencher.bench(|| series::decimate_indexed(&trace.samples, &index, 0, black_box(end), 1200));
    }

    /// Building the block index of one counter of the hour (once per trace and counter).
    #[divan::bench(sample_count = 10)]
    fn block_index_of_the_hour(bencher: Bencher) {
        let trace = &*HOUR;
        let id = trace.counter(CounterKind::HostRss, None).unwrap();
        bencher.bench(|| series::BlockIndex::new(&trace.samples, black_box(id)));
    }

    /// A zoomed redraw: one minute of the hour at 1 200 buckets.
    #[divan::bench(sample_count = 50)]
    fn decimate_one_minute_to_1200_buckets(bencher: Bencher) {
        let trace = &*HOUR;
        let id = trace.counter(CounterKind::HostRss, None).unwrap();
        bencher.bench(|| {
            series::decimate(
                &trace.samples,
                id,
                1_800_000_000,
                black_box(1_860_000_000),
                1200,
            )
        });
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

#[cfg(target_arch = "wasm32")]
fn main() {}

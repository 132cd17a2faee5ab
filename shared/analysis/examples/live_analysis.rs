//! A live view's analysis of a long trace (BENCHMARKS.md, issue 43): the trace read up to its
//! last 1%, what its marks read prepared (`Prepared`), then the rest appended in five pieces;
//! after each, the live analysis (`analyze_prepared`: the kept preparation brought up to date),
//! the live state a watcher shows of it (`live::with_analysis`: its chart and findings) and the whole
//! analysis (`analyze`) are timed in turn, and the two analyses and their live states checked to
//! agree.
//!
//! `cargo run --release -p oomscope-analysis --example live_analysis -- TRACE`
//! (the day: `cargo run --release -p oomscope-words --example demo -- --day day.oomt`)

use std::time::Instant;

use oomscope_analysis::facts::host_in_use;
use oomscope_analysis::live::{live_state, readings, with_analysis};
use oomscope_analysis::{AnalysisOptions, Prepared, analyze, analyze_prepared};
use oomscope_format::Follower;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: live_analysis TRACE")?;
    let bytes = std::fs::read(&path)?;
    let cut = bytes.len() * 99 / 100;
    let mut follower = Follower::default();
    follower.push(&bytes[..cut])?;
    let options = AnalysisOptions::default();
    let mut prepared = Prepared::new(follower.trace().ok_or("no header")?);
    let piece = (bytes.len() - cut).div_ceil(5);
    let ms = |start: Instant| start.elapsed().as_secs_f64() * 1e3;
    let (mut live_ms, mut state_ms, mut whole_ms) = (Vec::new(), Vec::new(), Vec::new());
    for rest in bytes[cut..].chunks(piece) {
        follower.push(rest)?;
        let trace = follower.trace().ok_or("no header")?;
        let start = Instant::now();
        let live = analyze_prepared(trace, &options, &mut prepared);
        live_ms.push(ms(start));
        // What a watcher shows of it: the readings now, the analysis's findings and its chart.
        let start = Instant::now();
        let now = readings(trace, host_in_use(trace));
        let state = with_analysis(now, trace, &live, Some(&prepared));
        state_ms.push(ms(start));
        let start = Instant::now();
        let whole = analyze(trace, &options);
        whole_ms.push(ms(start));
        if serde_json::to_string(&live)? != serde_json::to_string(&whole)? {
            return Err("the live analysis differs from the whole one".into());
        }
        if state != live_state(trace, &whole) {
            return Err("the live state differs from the whole analysis's".into());
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // The example's one line of output.
    #[allow(clippy::print_stdout)]
    {
        println!(
            "{}: {:.1} MB, {} marks; after each 0.2% appended (median of {}): live {:.1} ms, \
             its live state {:.1} ms, whole {:.0} ms",
            path,
            bytes.len() as f64 / 1e6,
            follower.trace().map_or(0, |t| t.marks.len()),
            live_ms.len(),
            median(&mut live_ms),
            median(&mut state_ms),
            median(&mut whole_ms)
        );
    }
    Ok(())
}

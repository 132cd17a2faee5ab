//! The serde-pickle side of BENCHMARKS.md's snapshot table: reads a snapshot pickle with
//! serde-pickle 1.2 (the Rust crate for pickles) into its generic `Value`, as a tool built on
//! it would, and says how long it took and whether the shared frames survived — torch shares
//! each frame dict between stacks, and serde-pickle's memo handling is where it goes wrong: with
//! its default options it stops with "recursive structure found", and with
//! `replace_recursive_structures` every shared frame comes out as `{None: None}`.
//!
//! `cargo run --release -p oomscope-snapshot --example serde_pickle_baseline -- big.pickle`
//! (peak memory: `/usr/bin/time -v` around the built example).

// It prints its measurements: that is its output.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use serde_pickle::{DeOptions, HashableValue, Value};

/// Reads a snapshot with serde-pickle.
#[derive(Parser)]
struct Args {
    /// The pickle.
    path: PathBuf,
}

fn main() {
    let args = Args::parse();
    // As it comes, then with the option that lets it past shared objects.
    for (what, options) in [
        ("default options", DeOptions::new()),
        (
            "replace_recursive_structures",
            DeOptions::new().replace_recursive_structures(),
        ),
    ] {
        print!("{what}: ");
        read(&args.path, options);
    }
}

fn read(path: &std::path::Path, options: DeOptions) {
    let started = Instant::now();
    let file = std::io::BufReader::new(std::fs::File::open(path).expect("open"));
    let read = serde_pickle::value_from_reader(file, options);
    let secs = started.elapsed().as_secs_f64();
    match read {
        Err(e) => println!("serde-pickle failed after {secs:.1} s: {e}"),
        Ok(Value::Dict(top)) => {
            let key = |k: &str| HashableValue::String(k.to_owned());
            let entries = match top.get(&key("device_traces")) {
                Some(Value::List(devices)) => devices
                    .iter()
                    .map(|d| match d {
                        Value::List(e) => e.len(),
                        _ => 0,
                    })
                    .sum(),
                _ => 0,
            };
            // Frames with no filename: shared frame dicts that came out empty.
            let (mut frames, mut empty) = (0u64, 0u64);
            if let Some(Value::List(devices)) = top.get(&key("device_traces")) {
                for e in devices.iter().filter_map(|d| match d {
                    Value::List(e) => Some(e),
                    _ => None,
                }) {
                    for entry in e {
                        let Value::Dict(entry) = entry else { continue };
                        let Some(Value::List(stack)) = entry.get(&key("frames")) else {
                            continue;
                        };
                        for f in stack {
                            frames += 1;
                            let named = matches!(f, Value::Dict(f)
                                if matches!(f.get(&key("filename")), Some(Value::String(_))));
                            empty += u64::from(!named);
                        }
                    }
                }
            }
            println!(
                "serde-pickle read it in {secs:.1} s: {entries} entries, {frames} frame references, \
                 {empty} of them without a filename"
            );
        }
        Ok(_) => println!("serde-pickle read it in {secs:.1} s, but the top level is not a dict"),
    }
}

//! The pattern zoo (`collector/tests/zoo/`): small real programs, each stating in its docstring
//! what the summary must and must not say and measuring its own truth (its storages' bytes, its
//! resident bytes, its step and eval counts) without oomscope; `scripts/zoo.py` runs each under
//! the collector and scores it right, partial or wrong. Every program must come out right.
//!
//! The programs run one after another (one test; the other only reads a file), with one OpenMP
//! thread; the suite's other binaries may run beside them, as on a loaded machine. The
//! thresholds the analysis decides by are checked on them, each on programs other than those it
//! was set on (`scripts/zoo_thresholds.py`).

mod support;

use std::process::Command;

use support::{COLLECTOR, torch_python};

#[test]
fn every_program_of_the_zoo_comes_out_right() {
    let root = format!("{}/..", std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = Command::new(torch_python())
        .arg(format!("{root}/scripts/zoo.py"))
        .arg("--json")
        .env("COLLECTOR", COLLECTOR)
        .env("PYTHON", torch_python())
        .env("OMP_NUM_THREADS", "1")
        .env("OOMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "zoo.py failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let card: serde_json::Value = serde_json::from_str(&text).unwrap();
    let programs = card["programs"].as_object().unwrap();
    assert!(programs.len() >= 30, "{text}");
    // A program that needs a memory cgroup is skipped where none can be made (not root, no
    // memory controller to write), with why: the one thing this test prints.
    for (name, r) in programs.iter().filter(|(_, r)| r["verdict"] == "skipped") {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("SKIPPED {name}: {}", r["why"]);
        }
    }
    // Each threshold was set on other programs (scripts/zoo_thresholds.py names them) and is
    // checked here on at least one program it decides, with room to spare.
    let thresholds = card["thresholds"].as_object().unwrap();
    for name in thresholds.keys() {
        let checked: Vec<&String> = programs
            .iter()
            .filter(|(_, r)| r["thresholds"].get(name).is_some())
            .map(|(p, _)| p)
            .collect();
        assert!(!checked.is_empty(), "no zoo program checks {name}: {text}");
    }
    let not_right: Vec<String> = programs
        .iter()
        .filter(|(_, r)| r["verdict"] != "right" && r["verdict"] != "skipped")
        .map(|(name, r)| format!("{name}: {} ({})", r["verdict"], r["why"]))
        .collect();
    // Every threshold `shared/analysis/thresholds.json` says a zoo program checks was checked:
    // a program naming it came out right (not skipped).
    let table: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{root}/shared/analysis/thresholds.json")).unwrap(),
    )
    .unwrap();
    for t in table["thresholds"].as_array().unwrap() {
        let zoo_checks = t["checked_on"].as_array().unwrap().iter().any(|c| {
            c["path"]
                .as_str()
                .is_some_and(|p| p.starts_with("collector/tests/zoo"))
        });
        if !zoo_checks {
            continue;
        }
        let name = &t["name"];
        let checked = programs.values().any(|r| {
            r["verdict"] == "right"
                && r["checks"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|x| x == name))
        });
        assert!(
            checked,
            "no zoo program came out right checking {name}:\n{}",
            not_right.join("\n")
        );
    }
    assert!(not_right.is_empty(), "{}", not_right.join("\n"));
}

/// The analysis's thresholds that `scripts/zoo_thresholds.py` measures the programs against are
/// the analysis's own.
#[test]
fn the_zoo_measures_the_analysis_s_own_thresholds() {
    let text = std::fs::read_to_string(format!(
        "{}/../scripts/zoo_thresholds.py",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    for line in [
        format!(
            "WORKERS_EXPLAIN_FRACTION = {}",
            oomscope_analysis::thresholds::WORKERS_EXPLAIN_FRACTION
        ),
        format!(
            "EVAL_STAIRCASE_MIN_BYTES = {} * MIB",
            oomscope_analysis::thresholds::EVAL_STAIRCASE_MIN_BYTES >> 20
        ),
        format!(
            "EVAL_STAIRCASE_REPEATS = {}",
            oomscope_analysis::thresholds::EVAL_STAIRCASE_REPEATS
        ),
        format!(
            "MIN_R_SQUARED = {}",
            oomscope_analysis::thresholds::MIN_R_SQUARED
        ),
    ] {
        assert!(
            text.contains(&line),
            "scripts/zoo_thresholds.py lacks `{line}`"
        );
    }
}

//! `collector export --format parquet`: the tables of several traces, read back by DuckDB (the
//! `duckdb` wheel from PyPI in the test environment, `scripts/setup-torch.sh`), answer the fleet
//! questions of docs/distributed.md with the numbers the traces hold.
#![cfg(feature = "parquet")]

mod support;

use std::path::Path;
use std::process::Command;

use oomscope_analysis::{AnalysisOptions, analyze};
use oomscope_collector::fleet;
use oomscope_format::units::MIB;
use oomscope_format::{CounterId, CounterKind};
use oomscope_testkit::Scratch;
use oomscope_testkit::synth::TrainingRun;
use serde_json::Value;
use support::{read, run, stderr, torch_python};

/// Runs SQL in DuckDB over `root`'s tables; each query's rows come back as JSON arrays.
fn duckdb(root: &Path, queries: &[&str]) -> Vec<Vec<Value>> {
    let script = r#"
import json, sys, duckdb
root, queries = sys.argv[1], json.loads(sys.argv[2])
con = duckdb.connect()
for table in ["runs", "samples", "marks", "ooms", "ranks", "peaks", "findings", "evidence", "fits", "components"]:
    con.sql(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{root}/{table}/*/*.parquet', hive_partitioning = true, union_by_name = true)")
out = [[list(row) for row in con.sql(q).fetchall()] for q in queries]
print(json.dumps(out, default=str))
"#;
    let output = Command::new(torch_python())
        .args(["-c", script, root.to_str().unwrap()])
        .arg(serde_json::to_string(queries).unwrap())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "duckdb failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn int(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("{v} is not an integer"))
}

#[test]
fn duckdb_answers_fleet_questions_from_several_exported_traces() {
    let s = Scratch::new("fleet-export");
    let traces = s.path("traces");
    std::fs::create_dir_all(traces.join("nodes")).unwrap();
    // Three runs of one model, leaking 0, 4 and 48 MiB a step, on three hosts…
    let leaks = [("a", 0), ("b", 4 * MIB), ("c", 48 * MIB)];
    for (host, leak) in leaks {
        let trace = TrainingRun {
            steps: 60,
            leak_bytes_per_step: leak,
            host: format!("node-{host}"),
            ..TrainingRun::default()
        };
        std::fs::write(traces.join(format!("{host}.oomt")), trace.to_bytes()).unwrap();
    }
    // …and a two-rank torchrun trace, in a subdirectory.
    let ranks_trace = format!(
        "{}/../shared/format/tests/data/v1_5_ranks.oomt",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    std::fs::copy(ranks_trace, traces.join("nodes/node0.oomt")).unwrap();

    let out = s.path("fleet");
    let export = || {
        run(&[
            "export",
            "--format",
            "parquet",
            "-o",
            out.to_str().unwrap(),
            traces.to_str().unwrap(),
        ])
    };
    let o = export();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("wrote 4 runs"), "{}", stderr(&o));
    // Exporting again replaces each run's files: no row is counted twice.
    let o = export();
    assert!(o.status.success(), "{}", stderr(&o));

    // What the traces hold, computed here from the traces themselves.
    let decoded: Vec<_> = ["a", "b", "c", "nodes/node0"]
        .iter()
        .map(|n| read(&traces.join(format!("{n}.oomt"))).trace)
        .collect();
    let ids: Vec<String> = decoded.iter().map(|t| fleet::run_id(&t.metadata)).collect();
    let samples: usize = decoded
        .iter()
        .map(|t| {
            (0..t.counters.len())
                .map(|i| t.samples.points(CounterId(i as u32)).count())
                .sum::<usize>()
        })
        .sum();
    let marks: usize = decoded.iter().map(|t| t.marks.len()).sum();
    let ranks = &decoded[3];
    let mut rank_peaks: Vec<(u32, u64)> = ranks
        .counters
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == CounterKind::PidRss)
        .map(|(i, c)| {
            let rank = ranks
                .processes
                .iter()
                .rev()
                .find(|p| Some(p.pid) == c.pid)
                .and_then(|p| p.rank)
                .unwrap();
            let peak = ranks
                .samples
                .points(CounterId(i as u32))
                .map(|(_, v)| v)
                .max()
                .unwrap();
            (rank, peak)
        })
        .collect();
    rank_peaks.sort_unstable();
    assert_eq!(rank_peaks.len(), 2, "the golden trace has two ranks");

    let rank_rows = format!(
        "SELECT rank, peak_host_rss_bytes, first_failure FROM ranks WHERE run_id = '{}' ORDER BY rank",
        ids[3]
    );
    let rows = duckdb(
        &out,
        &[
            "SELECT count(*), count(DISTINCT run_id), min(schema_version) FROM runs",
            "SELECT count(*) FROM samples",
            "SELECT count(*) FROM marks",
            // The peak host memory of every rank of the fleet.
            "SELECT run_id, rank, max(value) FROM samples WHERE kind = 'pid_rss' GROUP BY ALL ORDER BY ALL",
            // Runs whose memory grows more than 16 MiB a step.
            "SELECT DISTINCT run_id FROM fits WHERE is_leak AND slope_bytes_per_step > 16 * 1024 * 1024 ORDER BY ALL",
            // The hive partition names the run too.
            "SELECT count(*) FROM marks WHERE run <> run_id",
            // Wall-clock time of the first mark of each run.
            "SELECT r.run_id, epoch_us(min(r.start_unix_us + to_microseconds(m.t_us))) FROM runs r JOIN marks m USING (run_id) GROUP BY ALL ORDER BY ALL",
            &rank_rows,
            // The model's memory by category, over the fleet.
            "SELECT category, sum(bytes) FROM components GROUP BY ALL ORDER BY ALL",
        ],
    );
    assert_eq!(int(&rows[0][0][0]), 4);
    assert_eq!(int(&rows[0][0][1]), 4);
    assert_eq!(int(&rows[0][0][2]), fleet::SCHEMA_VERSION);
    assert_eq!(int(&rows[1][0][0]) as usize, samples);
    assert_eq!(int(&rows[2][0][0]) as usize, marks);
    let peaks: Vec<(String, u32, u64)> = rows[3]
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_owned(),
                int(&r[1]) as u32,
                int(&r[2]) as u64,
            )
        })
        .collect();
    let expected: Vec<(String, u32, u64)> = rank_peaks
        .iter()
        .map(|(rank, peak)| (ids[3].clone(), *rank, *peak))
        .collect();
    assert_eq!(peaks, expected);
    let leaking: Vec<&str> = rows[4].iter().map(|r| r[0].as_str().unwrap()).collect();
    assert_eq!(leaking, [ids[2].as_str()], "only the 48 MiB/step run");
    assert_eq!(int(&rows[5][0][0]), 0);
    assert_eq!(rows[6].len(), 4);
    for row in &rows[6] {
        let i = ids
            .iter()
            .position(|id| id == row[0].as_str().unwrap())
            .unwrap();
        let t = &decoded[i];
        let first_mark_us = t.marks.iter().map(|m| m.t_us).min().unwrap();
        assert_eq!(
            int(&row[1]) as u64,
            t.metadata.start_unix_ns / 1000 + first_mark_us
        );
    }
    let parts: Vec<(String, u64)> = rows[8]
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_owned(), int(&r[1]) as u64))
        .collect();
    let sum = |f: fn(&oomscope_format::ComponentBreakdown) -> u64| -> u64 {
        decoded.iter().flat_map(|t| &t.components).map(f).sum()
    };
    let want: Vec<(String, u64)> = [
        ("buffers", sum(|c| c.buffers_bytes)),
        ("gradients", sum(|c| c.gradients_bytes)),
        ("optimizer_state", sum(|c| c.optimizer_state_bytes)),
        ("parameters", sum(|c| c.parameters_bytes)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert!(
        sum(|c| c.parameters_bytes) > 0,
        "the synthetic runs carry breakdowns"
    );
    assert_eq!(parts, want);
    // The ranks table says what the summary says.
    let analysis = analyze(ranks, &AnalysisOptions::default());
    let compared = analysis.ranks.expect("two ranks");
    for (row, rank) in rows[7].iter().zip(&compared.ranks) {
        assert_eq!(int(&row[0]) as u32, rank.rank);
        assert_eq!(int(&row[1]) as u64, rank.peak_host_bytes.unwrap());
        assert_eq!(
            row[2].as_bool().unwrap(),
            compared.first_failure.as_ref().map(|f| f.rank) == Some(rank.rank)
        );
    }

    // Delta encoding keeps a sample (time and value, 16 bytes as plain integers) to a few bytes;
    // BENCHMARKS.md has the figure for an hour-long trace.
    fn size_of(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .map(|e| match e.path() {
                p if p.is_dir() => size_of(&p),
                _ => e.metadata().unwrap().len(),
            })
            .sum()
    }
    let samples_bytes = size_of(&out.join("samples"));
    assert!(
        samples_bytes < 4 * samples as u64,
        "{samples_bytes} bytes for {samples} samples"
    );
}

#[test]
fn parquet_export_refuses_what_it_cannot_do_in_one_line() {
    let golden = format!(
        "{}/../shared/format/tests/data/v1_5_ranks.oomt",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let o = run(&["export", "--format", "parquet", &golden]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o).trim(),
        "error: --format parquet writes a directory of tables: name it with -o DIR"
    );
    let o = run(&["export", "--format", "csv", &golden, &golden]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--format csv exports one trace (2 named)"),
        "{}",
        stderr(&o)
    );
    let s = Scratch::new("fleet-export-bad");
    let o = run(&[
        "export",
        "--format",
        "parquet",
        "-o",
        s.path("out").to_str().unwrap(),
        s.dir().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no trace (*.oomt) in"),
        "{}",
        stderr(&o)
    );
}

/// The SQL statements of the first ```sql block after `heading` in docs/distributed.md, comments
/// dropped, each without its `;`.
fn docs_sql(heading: &str) -> Vec<String> {
    let docs = std::fs::read_to_string(format!(
        "{}/../docs/distributed.md",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    ))
    .unwrap();
    let at = docs
        .find(heading)
        .unwrap_or_else(|| panic!("docs/distributed.md lacks `{heading}`"));
    let block = &docs[at..];
    let start = block.find("```sql\n").unwrap() + "```sql\n".len();
    let end = start + block[start..].find("```").unwrap();
    block[start..end]
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .split(';')
        .map(|q| q.trim().to_owned())
        .filter(|q| !q.is_empty())
        .collect()
}

/// Runs the docs' DuckDB statements (its views read `fleet/`, here `root`) and their Spark SQL
/// versions (pyspark in local mode, the tables read as the docs read them) over one fleet; each
/// answer's rows as JSON arrays, timestamps as microseconds since the epoch (UTC).
fn duckdb_and_spark(root: &Path, duck: &[String], spark: &[String]) -> (Value, Value) {
    let script = r#"
import datetime, decimal, json, sys
root, duck, spark_sql = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])

def plain(v):
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=datetime.timezone.utc)
        return round(v.timestamp() * 1e6)
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v

import duckdb
con = duckdb.connect()
duck_out = []
for q in duck:
    if q.upper().startswith("CREATE VIEW"):
        con.sql(q.replace("'fleet/", "'" + root + "/"))
    else:
        duck_out.append([[plain(v) for v in row] for row in con.sql(q).fetchall()])

from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("oomscope-fleet-test")
         .config("spark.sql.session.timeZone", "UTC").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
for table in ["runs", "samples", "marks", "ooms", "ranks", "peaks", "findings", "evidence", "fits", "components"]:
    spark.read.parquet(f"{root}/{table}").createOrReplaceTempView(table)
spark_out = [[[plain(v) for v in row] for row in spark.sql(q).collect()] for q in spark_sql]
types = {t: dict(spark.table(t).dtypes) for t in ["runs", "samples", "marks", "fits"]}
spark.stop()
print(json.dumps({"duckdb": duck_out, "spark": spark_out, "types": types}, default=str))
"#;
    let venv = std::env::var("OOMSCOPE_SPARK_VENV").expect(
        "OOMSCOPE_SPARK_VENV is not set: source scripts/env.sh after scripts/setup-spark.sh",
    );
    let output = Command::new(Path::new(&venv).join("bin/python"))
        .args(["-c", script, root.to_str().unwrap()])
        .arg(serde_json::to_string(duck).unwrap())
        .arg(serde_json::to_string(spark).unwrap())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the queries failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut out: Value = serde_json::from_slice(&output.stdout).unwrap();
    (
        out["duckdb"].take(),
        serde_json::json!({"answers": out["spark"].take(), "types": out["types"].take()}),
    )
}

/// Rows as comparable text, sorted (the engines break ties among equal keys and order NULLs
/// apart), numbers to 9 significant digits.
fn answer_rows(rows: &Value) -> Vec<String> {
    let mut out: Vec<String> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| match v.as_f64() {
                    Some(x) if !v.is_i64() && !v.is_u64() => format!("{x:.9e}"),
                    _ => v.to_string(),
                })
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect();
    out.sort();
    out
}

#[test]
fn spark_answers_the_docs_fleet_questions_as_duckdb_does() {
    // Every committed trace (real recordings on CPU and on H100/H200 GPUs, and synthetic runs)
    // as one fleet.
    let s = Scratch::new("fleet-spark");
    let data = format!(
        "{}/../shared/format/tests/data",
        std::env::var("CARGO_MANIFEST_DIR").unwrap()
    );
    let out = s.path("fleet");
    let o = run(&[
        "export",
        "--format",
        "parquet",
        "-o",
        out.to_str().unwrap(),
        &data,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let duck = docs_sql("With DuckDB");
    let spark = docs_sql("The same questions in Spark SQL");
    let questions = duck
        .iter()
        .filter(|q| !q.to_uppercase().starts_with("CREATE VIEW"))
        .count();
    assert_eq!(questions, 3, "{duck:?}");
    assert_eq!(
        spark.len(),
        questions,
        "one Spark query per DuckDB question"
    );
    let (duck_answers, spark_out) = duckdb_and_spark(&out, &duck, &spark);
    for (i, (d, sp)) in duck_answers
        .as_array()
        .unwrap()
        .iter()
        .zip(spark_out["answers"].as_array().unwrap())
        .enumerate()
    {
        assert!(
            !d.as_array().unwrap().is_empty(),
            "question {i} has an answer in the fleet"
        );
        assert_eq!(
            answer_rows(d),
            answer_rows(sp),
            "question {i}: {}",
            spark[i]
        );
    }
    // What a Spark user reads: the partition column, plain types, the start as a timestamp.
    let types = &spark_out["types"];
    for table in ["runs", "samples", "marks", "fits"] {
        assert_eq!(types[table]["run"], "string", "{table}: {types}");
        assert_eq!(types[table]["run_id"], "string", "{table}: {types}");
    }
    assert_eq!(types["runs"]["start_unix_us"], "timestamp", "{types}");
    assert_eq!(types["samples"]["value"], "bigint", "{types}");
    assert_eq!(types["fits"]["slope_bytes_per_step"], "double", "{types}");
    assert_eq!(types["fits"]["is_leak"], "boolean", "{types}");
}

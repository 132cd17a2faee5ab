//! A trace as flat tables for fleet queries: runs, samples, marks, OOMs, ranks, peaks, findings,
//! evidence, growth fits and the model's memory by component, one row per fact, every row
//! carrying its `run_id`.
//!
//! Questions across hundreds of runs ("the peak of every rank", "runs whose leak exceeds 10 MiB
//! a step") are aggregates that DuckDB, Polars or Spark answer well over Parquet; a timeline
//! viewer does not. The collector writes these tables as Parquet (`collector export --format
//! parquet`); the tables themselves are declared once (`schema`): their names, column types,
//! encodings and meanings ([`TABLES`]), which is also what `docs/fleet-schema.md` prints
//! ([`schema_markdown`], held equal by a test). Building the rows is pure and has no Parquet in
//! it, so `shared` stays light and builds for the browser; the viewer does not export Parquet
//! (the writer alone would quadruple its size).
//!
//! The schema is versioned ([`SCHEMA_VERSION`], in every `runs` row): columns are only ever
//! added; a column's name, type and meaning never change.

use std::sync::Arc;

use oomscope_analysis::facts::GrowthFit;
use oomscope_analysis::facts::{RankSummary, summarize};
use oomscope_analysis::finding::Finding;
use oomscope_analysis::{Analysis, AnalysisOptions};
use oomscope_format::{CounterId, ExitStatus, Metadata, Trace};

mod schema;
mod table;

pub use schema::{
    COMPONENTS, ColumnSpec, ColumnType, EVIDENCE, Encoding, FINDINGS, FITS, MARKS, OOMS, PEAKS,
    RANKS, RUNS, SAMPLES, SCHEMA_VERSION, TABLES, TableSpec, schema_markdown,
};
pub use table::{Cell, Table, Values};
use table::{int, opt_int, opt_text, text};

/// The run's id: `<host>-<pid>-<start, UTC, YYYYMMDDTHHMMSS.mmm>`, with any character outside
/// `[A-Za-z0-9._-]` of the host name replaced by `_` (it names a directory). A job's tasks start
/// within the same second on one node; their pids and milliseconds tell them apart.
pub fn run_id(metadata: &Metadata) -> String {
    let host: String = metadata
        .host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let host = if host.is_empty() { "unknown" } else { &host };
    let secs = metadata.start_unix_ns / 1_000_000_000;
    let millis = metadata.start_unix_ns / 1_000_000 % 1000;
    let (y, m, d, hh, mm, ss) = crate::clock::utc(secs);
    format!(
        "{host}-{}-{y:04}{m:02}{d:02}T{hh:02}{mm:02}{ss:02}.{millis:03}",
        metadata.pid
    )
}

/// Every table of one trace but `samples` ([`sample_chunks`] gives those), in [`TABLES`] order.
/// `source` names the trace file; `analysis` is the trace's own (`analysis::analyze` with
/// `options`, which also analyse a single-rank trace's rank).
pub fn tables(
    trace: &Trace,
    source: &str,
    analysis: &Analysis,
    options: &AnalysisOptions,
) -> Vec<Table> {
    let id = run_id(&trace.metadata);
    // Ranks: the analysis compared them when there were several; a trace of one rank is that
    // rank (srun per task).
    let single_rank;
    let rank_rows: &[RankSummary] = match &analysis.ranks {
        Some(r) => &r.ranks,
        None => {
            single_rank = summarize(trace, source, 0, &mut |_, v| {
                oomscope_analysis::rank_own(v, options)
            });
            &single_rank
        }
    };
    let first_failure = analysis
        .ranks
        .as_ref()
        .and_then(|r| r.first_failure.as_ref())
        .map(|f| f.rank);
    // A trace of one rank: the whole run's findings are that rank's.
    let scope = match &analysis.ranks {
        Some(_) => Scope {
            whole_rank: None,
            ranks: rank_rows,
        },
        None => Scope {
            whole_rank: rank_rows.first().map(|r| r.rank),
            ranks: &[],
        },
    };
    vec![
        runs(trace, source, analysis, &id, rank_rows.len()),
        marks(trace, &id),
        ooms(trace, &id),
        ranks_table(rank_rows, &id, first_failure),
        peaks(analysis, &id),
        findings(analysis, scope, &id),
        evidence(analysis, scope, &id),
        fits(analysis, scope, &id),
        components(trace, &id),
    ]
}

fn components(trace: &Trace, id: &str) -> Table {
    let mut t = Table::new(&COMPONENTS);
    for c in &trace.components {
        let fixed = [
            ("parameters", c.parameters_bytes),
            ("buffers", c.buffers_bytes),
            ("gradients", c.gradients_bytes),
            ("optimizer_state", c.optimizer_state_bytes),
        ]
        .map(|(category, bytes)| (category, None, bytes));
        let rows = fixed.into_iter().chain(
            [("untrained_model", &c.extras), ("optimizer", &c.optimizers)]
                .into_iter()
                .flat_map(|(category, list)| {
                    list.iter()
                        .map(move |n| (category, Some(n.name.as_ref()), n.bytes))
                }),
        );
        for (category, name, bytes) in rows {
            t.push([
                text(id),
                int(c.t_us),
                int(c.step),
                text(category),
                opt_text(name),
                int(bytes),
            ]);
        }
    }
    t
}

fn exit_cells(status: Option<ExitStatus>) -> [Cell; 2] {
    match status {
        Some(ExitStatus::Code(c)) => [Cell::Int(Some(i64::from(c))), Cell::Int(None)],
        Some(ExitStatus::Signal(s)) => [Cell::Int(None), Cell::Int(Some(i64::from(s)))],
        None => [Cell::Int(None), Cell::Int(None)],
    }
}

fn runs(trace: &Trace, source: &str, analysis: &Analysis, id: &str, ranks: usize) -> Table {
    let mut t = Table::new(&RUNS);
    let m = &trace.metadata;
    let [exit_code, exit_signal] = exit_cells(trace.exit.map(|e| e.status));
    let gpu = m.gpus.first();
    let peak = |pred: &dyn Fn(&oomscope_analysis::facts::Peak) -> bool| {
        analysis
            .peaks
            .iter()
            .filter(|p| pred(p))
            .map(|p| p.bytes)
            .max()
    };
    use oomscope_analysis::facts::MetricKey;
    use oomscope_format::CounterKind;
    let peak_gpu = peak(&|p| {
        matches!(
            p.metric,
            MetricKey::Counter {
                kind: CounterKind::GpuUsed,
                ..
            }
        )
    })
    .or_else(|| peak(&|p| p.metric == MetricKey::RESERVED));
    let peak_rss = peak(&|p| {
        matches!(
            p.metric,
            MetricKey::Counter {
                kind: CounterKind::HostRss,
                ..
            }
        )
    });
    let o = &analysis.overview;
    t.push([
        text(id),
        Cell::Int(Some(SCHEMA_VERSION)),
        text(source),
        text(&m.host),
        int(m.pid.into()),
        text(&m.command.join(" ")),
        int(m.start_unix_ns / 1000),
        int(trace.duration_us()),
        Cell::Bool(Some(trace.end_us.is_some())),
        exit_code,
        exit_signal,
        text(&m.collector_version),
        text(&format!(
            "{}.{}",
            trace.format_version.0, trace.format_version.1
        )),
        int(m.sample_interval_us),
        int(m.gpus.len() as u64),
        opt_text(gpu.map(|g| g.name.as_str())),
        opt_int(gpu.map(|g| g.total_memory_bytes)),
        opt_int(
            m.world_size
                .or_else(|| trace.processes.iter().rev().find_map(|p| p.world_size)),
        ),
        int(ranks as u64),
        int(o.marks as u64),
        int(o.steps as u64),
        int(trace.ooms.len() as u64),
        opt_int(peak_gpu),
        opt_int(peak_rss),
        int(analysis.findings.len() as u64),
        opt_text(analysis.findings.first().map(|f| f.kind().id())),
    ]);
    t
}

/// The `samples` table of a trace in pieces of at most `rows` rows (counter by counter, each in
/// time order): a long trace has tens of millions of values, and a writer holding them all at
/// once would need gigabytes.
pub fn sample_chunks<'a>(
    trace: &'a Trace,
    run_id: &'a str,
    rows: usize,
) -> impl Iterator<Item = Table> + 'a {
    let process_ranks = oomscope_analysis::facts::ranks_of(trace);
    let ranks: Vec<Option<u32>> = trace
        .counters
        .iter()
        .map(|c| {
            c.pid.and_then(|pid| {
                // The latest record of the pid says who it is.
                trace
                    .processes
                    .iter()
                    .rev()
                    .find(|p| p.pid == pid)
                    .and_then(|p| p.rank)
                    .or_else(|| {
                        process_ranks
                            .iter()
                            .find(|r| r.pid == Some(pid))
                            .map(|r| r.rank)
                    })
            })
        })
        .collect();
    let times = trace.samples.times_us();
    // Each row repeats these: one allocation each, shared.
    let run_id: Arc<str> = Arc::from(run_id);
    let names: Vec<(Arc<str>, Arc<str>)> = trace
        .counters
        .iter()
        .map(|c| (Arc::from(c.name.as_str()), Arc::from(c.kind.label())))
        .collect();
    // (counter, row) of the next value to take.
    let mut at = (0usize, 0usize);
    std::iter::from_fn(move || {
        let mut t = Table::new(&SAMPLES);
        while t.rows() < rows.max(1) {
            let (counter, row) = at;
            let Some(c) = trace.counters.get(counter) else {
                break;
            };
            let column = trace.samples.column(CounterId(counter as u32));
            if row
                >= column
                    .map_or(0, oomscope_format::Column::len)
                    .min(times.len())
            {
                at = (counter + 1, 0);
                if counter + 1 >= trace.counters.len() {
                    break;
                }
                continue;
            }
            at.1 += 1;
            let value = column.and_then(|c| c.get(row));
            let Some(value) = value.filter(|v| *v != oomscope_format::MISSING) else {
                continue;
            };
            let (name, kind) = &names[counter];
            t.push([
                Cell::Text(Some(run_id.clone())),
                Cell::Text(Some(name.clone())),
                Cell::Text(Some(kind.clone())),
                opt_int(c.device),
                opt_int(c.pid),
                opt_int(ranks[counter]),
                int(times.at(row)),
                int(value),
            ]);
        }
        (t.rows() > 0).then_some(t)
    })
}

fn marks(trace: &Trace, id: &str) -> Table {
    let mut t = Table::new(&MARKS);
    for (m, stats) in trace.marks.iter().zip(trace.marks.allocator_iter()) {
        let s = stats.map(|s| s.values());
        let f = |i: usize| opt_int(s.map(|s| s[i]));
        t.push([
            text(id),
            int(m.t_us),
            text(&m.name),
            int(m.step),
            int(m.epoch.into()),
            text(m.phase.label()),
            opt_int(m.pid),
            opt_int(m.rank),
            f(0),
            f(1),
            f(2),
            f(3),
            f(4),
            f(5),
            f(6),
            f(7),
        ]);
    }
    t
}

fn ooms(trace: &Trace, id: &str) -> Table {
    let mut t = Table::new(&OOMS);
    for o in &trace.ooms {
        t.push([
            text(id),
            int(o.t_us),
            text(o.source.label()),
            Cell::Bool(Some(o.source.is_host())),
            opt_text(o.stage.as_deref()),
            opt_int(o.step),
            opt_int(o.requested_bytes),
            opt_int(o.device),
            opt_int(o.device_free_bytes),
            opt_int(o.device_total_bytes),
            opt_int(o.pid),
            opt_int(o.rank),
            text(&o.message),
        ]);
    }
    t
}

fn ranks_table(ranks: &[RankSummary], id: &str, first_failure: Option<u32>) -> Table {
    let mut t = Table::new(&RANKS);
    for r in ranks {
        let [exit_code, exit_signal] = exit_cells(r.exit);
        t.push([
            text(id),
            int(r.rank.into()),
            opt_int(r.local_rank),
            opt_int(r.pid),
            int(r.marks as u64),
            opt_int(r.last_step),
            opt_int(r.peak_host_bytes),
            opt_int(r.peak_device_bytes),
            opt_int(r.oom.as_ref().map(|o| o.t_us)),
            exit_code,
            exit_signal,
            Cell::Bool(Some(first_failure == Some(r.rank))),
            int(r.findings.len() as u64),
        ]);
    }
    t
}

fn peaks(analysis: &Analysis, id: &str) -> Table {
    let mut t = Table::new(&PEAKS);
    for p in &analysis.peaks {
        t.push([
            text(id),
            text(&p.metric.label()),
            opt_int(p.device),
            int(p.bytes),
            int(p.t_us),
            opt_text(p.stage.as_ref().map(|s| s.stage.as_str())),
            opt_int(p.stage.as_ref().map(|s| s.step)),
        ]);
    }
    t
}

/// Whose findings: the whole run's (of `whole_rank` when the trace is one rank's), then each
/// compared rank's.
#[derive(Debug, Clone, Copy)]
struct Scope<'a> {
    whole_rank: Option<u32>,
    ranks: &'a [RankSummary],
}

impl<'a> Scope<'a> {
    fn lists<T>(
        self,
        whole: &'a [T],
        of_rank: impl Fn(&'a RankSummary) -> &'a [T],
    ) -> impl Iterator<Item = (Option<u32>, &'a [T])> {
        std::iter::once((self.whole_rank, whole))
            .chain(self.ranks.iter().map(move |r| (Some(r.rank), of_rank(r))))
    }
}

fn findings(analysis: &Analysis, scope: Scope<'_>, id: &str) -> Table {
    let mut t = Table::new(&FINDINGS);
    for (rank, list) in scope.lists(&analysis.findings, |r| &r.findings) {
        for (position, f) in list.iter().enumerate() {
            let f: &Finding = f;
            let words = oomscope_words::findings::text(f);
            t.push([
                text(id),
                opt_int(rank),
                int(position as u64),
                text(f.kind().id()),
                text(f.severity.label()),
                text(&words.title),
                text(&words.explanation),
                text(&words.change()),
            ]);
        }
    }
    t
}

fn evidence(analysis: &Analysis, scope: Scope<'_>, id: &str) -> Table {
    let mut t = Table::new(&EVIDENCE);
    for (rank, list) in scope.lists(&analysis.findings, |r| &r.findings) {
        for (position, f) in list.iter().enumerate() {
            for e in &f.evidence {
                t.push([
                    text(id),
                    opt_int(rank),
                    int(position as u64),
                    text(f.kind().id()),
                    text(e.key.label()),
                    Cell::Float(Some(e.value)),
                    text(e.unit.label()),
                ]);
            }
        }
    }
    t
}

fn fits(analysis: &Analysis, scope: Scope<'_>, id: &str) -> Table {
    let mut t = Table::new(&FITS);
    for (rank, list) in scope.lists(&analysis.leak_fits, |r| &r.leak_fits) {
        for f in list {
            let f: &GrowthFit = f;
            t.push([
                text(id),
                opt_int(rank),
                text(&f.stage),
                text(&f.metric.label()),
                Cell::Bool(Some(f.host_memory)),
                Cell::Float(Some(f.slope_bytes_per_step)),
                Cell::Float(Some(f.r_squared)),
                int(f.steps as u64),
                int(f.first_step),
                int(f.last_step),
                Cell::Int(Some(f.growth_bytes)),
                Cell::Bool(Some(f.is_leak())),
            ]);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_analysis::analyze;
    use oomscope_format::AllocatorStats;
    use oomscope_format::decode;
    use oomscope_format::{CounterKind, OomEvent, OomSource, StageMark};
    use oomscope_testkit::synth::TrainingRun;

    #[test]
    fn run_ids_name_host_pid_and_utc_start() {
        let m = Metadata {
            host: "node 7/a".into(),
            pid: 4101,
            // 2026-11-23T08:30:05Z
            start_unix_ns: 1_795_422_605_000_000_123,
            ..Metadata::default()
        };
        assert_eq!(run_id(&m), "node_7_a-4101-20261123T083005.000");
    }

    #[test]
    fn every_table_follows_its_spec() {
        let trace = decode(
            &TrainingRun {
                steps: 40,
                leak_bytes_per_step: 64 << 20,
                ..TrainingRun::default()
            }
            .to_bytes(),
        )
        .unwrap()
        .trace;
        let options = AnalysisOptions::default();
        let analysis = analyze(&trace, &options);
        let mut tables = tables(&trace, "a.oomt", &analysis, &options);
        assert_eq!(tables.len(), TABLES.len() - 1);
        // The samples in pieces of 1000 rows: every piece full but the last.
        let id = run_id(&trace.metadata);
        let chunks: Vec<Table> = sample_chunks(&trace, &id, 1000).collect();
        assert!(chunks.len() > 1);
        assert!(chunks[..chunks.len() - 1].iter().all(|c| c.rows() == 1000));
        let mut samples = chunks[0].clone();
        for c in &chunks[1..] {
            for (all, part) in samples.columns.iter_mut().zip(&c.columns) {
                match (all, part) {
                    (Values::Int(a), Values::Int(b)) => a.extend_from_slice(b),
                    (Values::Text(a), Values::Text(b)) => a.extend_from_slice(b),
                    _ => unreachable!("samples hold integers and text"),
                }
            }
        }
        tables.insert(1, samples);
        for (t, spec) in tables.iter().zip(TABLES) {
            assert_eq!(t.spec, spec);
            assert_eq!(t.columns.len(), spec.columns.len());
            assert!(
                t.columns.iter().all(|c| c.len() == t.rows()),
                "{}",
                spec.name
            );
        }
        let by = |name: &str| tables.iter().find(|t| t.spec.name == name).unwrap();
        assert_eq!(by("runs").rows(), 1);
        assert_eq!(by("marks").rows(), trace.marks.len());
        // Long format: one row per value read.
        let values: usize = (0..trace.counters.len())
            .map(|i| trace.samples.points(CounterId(i as u32)).count())
            .sum();
        assert_eq!(by("samples").rows(), values);
        assert_eq!(by("findings").rows(), analysis.findings.len());
        assert_eq!(by("fits").rows(), analysis.leak_fits.len());
        assert!(
            analysis.leaks().next().is_some(),
            "the planted leak is fitted"
        );
        let evidence: usize = analysis.findings.iter().map(|f| f.evidence.len()).sum();
        assert_eq!(by("evidence").rows(), evidence);
    }

    #[test]
    fn a_breakdown_is_one_row_per_part_with_untrained_models_and_optimizers_named() {
        let mut trace = Trace::default();
        trace.components.push(oomscope_format::ComponentBreakdown {
            t_us: 500,
            step: 4,
            parameters_bytes: 40,
            buffers_bytes: 2,
            gradients_bytes: 40,
            optimizer_state_bytes: 80,
            extras: vec![oomscope_format::NamedBytes {
                name: "ema".into(),
                bytes: 42,
            }],
            optimizers: vec![oomscope_format::NamedBytes {
                name: "opt:AdamW".into(),
                bytes: 80,
            }],
            ..Default::default()
        });
        let t = components(&trace, "run");
        let Values::Text(categories) = &t.columns[3] else {
            panic!("category is text")
        };
        let Values::Text(names) = &t.columns[4] else {
            panic!("name is text")
        };
        let Values::Int(bytes) = &t.columns[5] else {
            panic!("bytes are integers")
        };
        let rows: Vec<(&str, Option<&str>, i64)> = categories
            .iter()
            .zip(names)
            .zip(bytes)
            .map(|((c, n), b)| (c.as_deref().unwrap(), n.as_deref(), b.unwrap()))
            .collect();
        assert_eq!(
            rows,
            [
                ("parameters", None, 40),
                ("buffers", None, 2),
                ("gradients", None, 40),
                ("optimizer_state", None, 80),
                ("untrained_model", Some("ema"), 42),
                ("optimizer", Some("opt:AdamW"), 80),
            ]
        );
    }

    #[test]
    fn the_marks_allocator_columns_are_the_allocator_s_fields() {
        let names: Vec<&str> = MARKS.columns[8..].iter().map(|c| c.name).collect();
        assert_eq!(names, AllocatorStats::FIELD_NAMES);
    }

    #[test]
    fn per_process_samples_and_marks_carry_their_rank() {
        let mut trace = Trace::default();
        trace.processes.push(oomscope_format::ProcessInfo {
            pid: 77,
            role: oomscope_format::ProcessRole::Rank,
            rank: Some(3),
            ..Default::default()
        });
        trace.counters.push(oomscope_format::Counter {
            kind: CounterKind::PidRss,
            device: None,
            name: "pid77.rss".into(),
            pid: Some(77),
        });
        trace.samples = oomscope_format::Samples::with_counters(1);
        trace.samples.push_row(10, &[(CounterId(0), 5 << 20)]);
        trace.marks.push(StageMark {
            t_us: 20,
            name: "post_step".into(),
            pid: Some(77),
            rank: Some(3),
            ..StageMark::default()
        });
        let mut oom = OomEvent::new(30, OomSource::HostError, "Cannot allocate memory".into());
        oom.rank = Some(3);
        trace.ooms.push(oom);
        let options = AnalysisOptions::default();
        let analysis = analyze(&trace, &options);
        let mut tables = tables(&trace, "x.oomt", &analysis, &options);
        let id = run_id(&trace.metadata);
        tables.extend(sample_chunks(&trace, &id, 10));
        let column = |table: &str, name: &str| {
            let t = tables.iter().find(|t| t.spec.name == table).unwrap();
            let i = t.spec.columns.iter().position(|c| c.name == name).unwrap();
            t.columns[i].clone()
        };
        assert_eq!(column("samples", "rank"), Values::Int(vec![Some(3)]));
        assert_eq!(column("samples", "value"), Values::Int(vec![Some(5 << 20)]));
        assert_eq!(column("marks", "rank"), Values::Int(vec![Some(3)]));
        assert_eq!(
            column("ooms", "host_memory"),
            Values::Bool(vec![Some(true)])
        );
        // One process with a rank is that rank.
        assert_eq!(column("ranks", "rank"), Values::Int(vec![Some(3)]));
    }

    #[test]
    fn columns_have_units_in_their_names_and_unique_names() {
        for t in TABLES {
            let mut names: Vec<&str> = t.columns.iter().map(|c| c.name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), t.columns.len(), "{}", t.name);
            assert_eq!(t.columns[0].name, "run_id", "{}", t.name);
        }
    }
}

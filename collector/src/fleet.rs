//! A trace as flat tables for fleet queries: runs, samples, marks, OOMs, ranks, peaks, findings,
//! evidence, growth fits and the model's memory by component, one row per fact, every row
//! carrying its `run_id`.
//!
//! Questions across hundreds of runs ("the peak of every rank", "runs whose leak exceeds 10 MiB
//! a step") are aggregates that DuckDB, Polars or Spark answer well over Parquet; a timeline
//! viewer does not. The collector writes these tables as Parquet (`collector export --format
//! parquet`); the tables themselves are declared here, once: their names, column types,
//! encodings and meanings ([`TABLES`]), which is also what `FORMAT.md` prints
//! ([`schema_markdown`], held equal by a test). Building the rows is pure and has no Parquet in
//! it, so `shared` stays light and builds for the browser; the viewer does not export Parquet
//! (the writer alone would quadruple its size).
//!
//! The schema is versioned ([`SCHEMA_VERSION`], in every `runs` row): columns are only ever
//! added; a column's name, type and meaning never change.

use std::sync::Arc;

use oomscope_analysis::leaks::GrowthFit;
use oomscope_analysis::ranks::{self, RankSummary};
use oomscope_analysis::recommend::Finding;
use oomscope_analysis::{Analysis, AnalysisOptions};
use oomscope_format::{CounterId, ExitStatus, Metadata, Trace};

/// The export schema's version, written in every `runs` row.
pub const SCHEMA_VERSION: i64 = 1;

/// A column's logical type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// A signed 64-bit integer (bytes, microseconds, counts, pids, ranks).
    Int64,
    /// A 64-bit float (fitted slopes, R², evidence values).
    Float64,
    /// True or false.
    Bool,
    /// UTF-8 text.
    Text,
    /// Microseconds since the Unix epoch, UTC (a Parquet `TIMESTAMP(MICROS, true)`).
    TimestampUs,
}

impl ColumnType {
    /// The name the schema documentation uses (DuckDB's word for it).
    pub fn sql_name(self) -> &'static str {
        match self {
            Int64 => "BIGINT",
            Float64 => "DOUBLE",
            Bool => "BOOLEAN",
            Text => "VARCHAR",
            TimestampUs => "TIMESTAMP WITH TIME ZONE",
        }
    }
}

/// How a column is best stored: what a writer should ask its format for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Differences between neighbours, bit-packed (Parquet `DELTA_BINARY_PACKED`): times and
    /// counter values, which change little from one row to the next.
    Delta,
    /// A dictionary of distinct values (Parquet's default): names, labels, small ids.
    Dictionary,
    /// As they are: free text and floats.
    Plain,
}

/// One column of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnSpec {
    /// Its name, with its unit (`_bytes`, `_us`).
    pub name: &'static str,
    /// Its type.
    pub ty: ColumnType,
    /// Whether it may be empty (SQL `NULL`).
    pub nullable: bool,
    /// How to store it.
    pub encoding: Encoding,
    /// What it holds.
    pub doc: &'static str,
}

/// One table: a name, what a row is, its columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSpec {
    /// Its name (the export's directory).
    pub name: &'static str,
    /// What one row is.
    pub doc: &'static str,
    /// Its columns, in order.
    pub columns: &'static [ColumnSpec],
}

const fn col(
    name: &'static str,
    ty: ColumnType,
    nullable: bool,
    encoding: Encoding,
    doc: &'static str,
) -> ColumnSpec {
    ColumnSpec {
        name,
        ty,
        nullable,
        encoding,
        doc,
    }
}

use ColumnType::{Bool, Float64, Int64, Text, TimestampUs};
use Encoding::{Delta, Dictionary, Plain};

const RUN_ID: ColumnSpec = col(
    "run_id",
    Text,
    false,
    Dictionary,
    "The run: `<host>-<pid>-<start, UTC, YYYYMMDDTHHMMSS.mmm>` of the recording.",
);
const RANK: ColumnSpec = col(
    "rank",
    Int64,
    true,
    Dictionary,
    "The global rank it belongs to; empty for the whole run or a process without a rank.",
);
const T_US: ColumnSpec = col(
    "t_us",
    Int64,
    false,
    Delta,
    "Microseconds since the run's start (`runs.start_unix_us` + `t_us` is wall-clock time).",
);

/// The `runs` table.
#[rustfmt::skip]
pub const RUNS: TableSpec = TableSpec {
    name: "runs",
    doc: "One row per trace: who, where, what, how it ended, and its headline numbers.",
    columns: &[
        RUN_ID,
        col("schema_version", Int64, false, Dictionary, "This schema's version (1)."),
        col("source", Text, false, Plain, "The trace file as it was named to the export."),
        col("host", Text, false, Dictionary, "The host (node) it was recorded on."),
        col("pid", Int64, false, Plain, "The recorded program's pid."),
        col("command", Text, false, Plain, "The recorded command line, joined by spaces."),
        col("start_unix_us", TimestampUs, false, Plain, "When the recording started (UTC)."),
        col("duration_us", Int64, false, Plain, "How long it was recorded."),
        col("complete", Bool, false, Plain, "The recorder finished the trace (false: crash, kill, truncation)."),
        col("exit_code", Int64, true, Plain, "The program's exit code, when it exited."),
        col("exit_signal", Int64, true, Plain, "The signal that killed the program, when one did."),
        col("collector_version", Text, false, Dictionary, "The collector that recorded it."),
        col("format_version", Text, false, Dictionary, "The trace format (`1.6`)."),
        col("sample_interval_us", Int64, false, Plain, "The sampling period."),
        col("gpus", Int64, false, Plain, "GPUs recorded."),
        col("gpu_name", Text, true, Dictionary, "The first GPU's name."),
        col("gpu_total_bytes", Int64, true, Plain, "The first GPU's memory."),
        col("world_size", Int64, true, Plain, "Ranks in the job, when known."),
        col("ranks", Int64, false, Plain, "Ranks recorded in this trace."),
        col("marks", Int64, false, Plain, "Stage marks."),
        col("steps", Int64, false, Plain, "Distinct steps marked."),
        col("ooms", Int64, false, Plain, "Out-of-memory events."),
        col("peak_gpu_bytes", Int64, true, Plain, "Highest device memory in use (NVML `used`, any GPU), else the allocator's highest reserved."),
        col("peak_host_rss_bytes", Int64, true, Plain, "Highest RSS of the watched process tree."),
        col("findings", Int64, false, Plain, "Findings of the whole run."),
        col("top_finding", Text, true, Dictionary, "The first (most severe) finding's id (`oom`, `leak`, …)."),
    ],
};

/// The `samples` table.
#[rustfmt::skip]
pub const SAMPLES: TableSpec = TableSpec {
    name: "samples",
    doc: "One row per counter value read (long format: missing readings have no row), ordered by counter then time.",
    columns: &[
        RUN_ID,
        col("counter", Text, false, Dictionary, "The counter's name as recorded (`gpu0.used`, `host.rss`, `pid4101.rss`)."),
        col("kind", Text, false, Dictionary, "What it measures: `gpu_used`, `gpu_free`, `process_gpu`, `allocated`, `reserved`, `host_rss`, `host_available`, `host_pss`, `pid_rss`, `pid_gpu`, …"),
        col("device", Int64, true, Dictionary, "The GPU, for device counters."),
        col("pid", Int64, true, Dictionary, "The one process a per-process counter (`pid_rss`, `pid_gpu`) measures."),
        RANK,
        T_US,
        col("value", Int64, false, Delta, "The value (bytes for every memory kind)."),
    ],
};

/// The `marks` table.
#[rustfmt::skip]
pub const MARKS: TableSpec = TableSpec {
    name: "marks",
    doc: "One row per stage mark, with the allocator's statistics when the program sent them.",
    columns: &[
        RUN_ID,
        T_US,
        col("stage", Text, false, Dictionary, "The stage (`post_forward`, `post_step`, …)."),
        col("step", Int64, false, Delta, "The step."),
        col("epoch", Int64, false, Dictionary, "The epoch."),
        col("phase", Text, false, Dictionary, "`train`, `eval` or `unknown`."),
        col("pid", Int64, true, Dictionary, "The process that sent it."),
        RANK,
        col("allocated_bytes", Int64, true, Delta, "Allocator: bytes in live tensors."),
        col("reserved_bytes", Int64, true, Delta, "Allocator: bytes held in segments."),
        col("active_bytes", Int64, true, Delta, "Allocator: bytes in active blocks."),
        col("inactive_split_bytes", Int64, true, Delta, "Allocator: bytes in inactive split blocks (fragmentation)."),
        col("peak_allocated_bytes", Int64, true, Delta, "Allocator: highest allocated since the last reset."),
        col("peak_reserved_bytes", Int64, true, Delta, "Allocator: highest reserved since the last reset."),
        col("num_alloc_retries", Int64, true, Delta, "Allocator: cache flushes to satisfy a request."),
        col("num_ooms", Int64, true, Delta, "Allocator: out-of-memory errors so far."),
    ],
};

/// The `ooms` table.
#[rustfmt::skip]
pub const OOMS: TableSpec = TableSpec {
    name: "ooms",
    doc: "One row per out-of-memory event.",
    columns: &[
        RUN_ID,
        T_US,
        col("source", Text, false, Dictionary, "How it was learnt: `stderr`, `allocator`, `marker`, `host_kill`, `host_error`, `launcher_kill`."),
        col("host_memory", Bool, false, Plain, "About host memory (not device)."),
        col("stage", Text, true, Dictionary, "The stage running then."),
        col("step", Int64, true, Plain, "The step then."),
        col("requested_bytes", Int64, true, Plain, "The request that failed."),
        col("device", Int64, true, Plain, "The GPU."),
        col("device_free_bytes", Int64, true, Plain, "Free device memory then."),
        col("device_total_bytes", Int64, true, Plain, "The device's memory."),
        col("pid", Int64, true, Plain, "The process it happened in."),
        RANK,
        col("message", Text, false, Plain, "The error's text."),
    ],
};

/// The `ranks` table.
#[rustfmt::skip]
pub const RANKS: TableSpec = TableSpec {
    name: "ranks",
    doc: "One row per rank the trace holds (none for a run without ranks).",
    columns: &[
        RUN_ID,
        col("rank", Int64, false, Plain, "The global rank."),
        col("local_rank", Int64, true, Plain, "Its rank on the node."),
        col("pid", Int64, true, Plain, "Its process."),
        col("marks", Int64, false, Plain, "Its stage marks."),
        col("last_step", Int64, true, Plain, "The highest step it marked."),
        col("peak_host_rss_bytes", Int64, true, Plain, "Its highest RSS."),
        col("peak_device_bytes", Int64, true, Plain, "Its highest device memory (NVML per process, summed over GPUs), else the allocator's."),
        col("oom_t_us", Int64, true, Plain, "When it first ran out of memory."),
        col("exit_code", Int64, true, Plain, "Its exit code, as its launcher said."),
        col("exit_signal", Int64, true, Plain, "The signal that ended it, as its launcher said."),
        col("first_failure", Bool, false, Plain, "It is the job's first failure on the common clock."),
        col("findings", Int64, false, Plain, "Its own findings."),
    ],
};

/// The `peaks` table.
#[rustfmt::skip]
pub const PEAKS: TableSpec = TableSpec {
    name: "peaks",
    doc: "One row per memory quantity of the whole run: its highest value, when, and at which stage.",
    columns: &[
        RUN_ID,
        col("metric", Text, false, Dictionary, "What peaked (`gpu0.used`, `host.rss`, `peak_allocated`, …)."),
        col("device", Int64, true, Dictionary, "The GPU, for device quantities."),
        col("peak_bytes", Int64, false, Plain, "The peak."),
        T_US,
        col("stage", Text, true, Dictionary, "The stage running then (empty before the first mark or after the last)."),
        col("step", Int64, true, Plain, "The step then."),
    ],
};

/// The `findings` table.
#[rustfmt::skip]
pub const FINDINGS: TableSpec = TableSpec {
    name: "findings",
    doc: "One row per finding, of the whole run (`rank` empty) and of each rank, most severe first.",
    columns: &[
        RUN_ID,
        RANK,
        col("position", Int64, false, Plain, "Its place among the findings of the same run and rank, from 0."),
        col("id", Text, false, Dictionary, "What it is about (`oom`, `leak`, `rank-imbalance`, …)."),
        col("severity", Text, false, Dictionary, "`critical`, `warning` or `info`."),
        col("title", Text, false, Plain, "One line."),
        col("explanation", Text, false, Plain, "What was measured and what it means."),
        col("change", Text, false, Plain, "The change to try."),
    ],
};

/// The `evidence` table.
#[rustfmt::skip]
pub const EVIDENCE: TableSpec = TableSpec {
    name: "evidence",
    doc: "One row per number behind a finding (join on `run_id`, `rank`, `position`).",
    columns: &[
        RUN_ID,
        RANK,
        col("position", Int64, false, Plain, "The finding's `position`."),
        col("id", Text, false, Dictionary, "The finding's id."),
        col("label", Text, false, Dictionary, "What the number is (`slope_bytes_per_step`, `shortfall_bytes`, …)."),
        col("value", Float64, false, Plain, "The number."),
        col("unit", Text, false, Dictionary, "`bytes`, `count`, `share`, `micros` or `number`."),
    ],
};

/// The `fits` table.
#[rustfmt::skip]
pub const FITS: TableSpec = TableSpec {
    name: "fits",
    doc: "One row per growth fit (a stage's memory against its step), leaks or not, of the whole run and of each rank.",
    columns: &[
        RUN_ID,
        RANK,
        col("stage", Text, false, Dictionary, "The stage."),
        col("metric", Text, false, Dictionary, "What was fitted (`allocated`, `host.rss`, …)."),
        col("host_memory", Bool, false, Plain, "The metric is host memory."),
        col("slope_bytes_per_step", Float64, false, Plain, "Fitted growth per step."),
        col("r_squared", Float64, false, Plain, "How well a line fits (1 = exactly)."),
        col(
            "steps",
            Int64,
            false,
            Plain,
            "Distinct steps used (of a stage with more than 4 096 marks, fitted on the last of each block of steps: the steps its points stand for).",
        ),
        col("first_step", Int64, false, Plain, "The first step used."),
        col("last_step", Int64, false, Plain, "The last step used."),
        col("growth_bytes", Int64, false, Plain, "Fitted growth from the first to the last step."),
        col("is_leak", Bool, false, Plain, "The analysis calls it a leak."),
    ],
};

/// The `components` table.
#[rustfmt::skip]
pub const COMPONENTS: TableSpec = TableSpec {
    name: "components",
    doc: "One row per part of each breakdown of the model's memory (the zero-code hooks measure one at iterations 1, 4, 16, 64, … when it changed; the tch Session and the helper's components() send their own).",
    columns: &[
        RUN_ID,
        T_US,
        col("step", Int64, false, Plain, "The step it was measured at."),
        col("category", Text, false, Dictionary, "`parameters`, `buffers`, `gradients`, `optimizer_state`, `untrained_model` (an EMA copy, a frozen encoder: `name` says which) or `optimizer` (one optimizer's share of `optimizer_state`: `name` says which, `opt_d:Adam` or `Adam(Generator)`)."),
        col("name", Text, true, Dictionary, "The untrained model's or the optimizer's name; null for the other categories."),
        col("bytes", Int64, false, Plain, "Its bytes, each storage counted once."),
    ],
};

/// Every table, in export order.
pub const TABLES: [&TableSpec; 10] = [
    &RUNS,
    &SAMPLES,
    &MARKS,
    &OOMS,
    &RANKS,
    &PEAKS,
    &FINDINGS,
    &EVIDENCE,
    &FITS,
    &COMPONENTS,
];

/// One value of a row, in its column's place.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// An integer (or a timestamp), or empty.
    Int(Option<i64>),
    /// A float, or empty.
    Float(Option<f64>),
    /// A boolean, or empty.
    Bool(Option<bool>),
    /// Text, or empty (shared: a long table repeats a few names millions of times).
    Text(Option<Arc<str>>),
}

fn int(v: u64) -> Cell {
    Cell::Int(Some(i64::try_from(v).unwrap_or(i64::MAX)))
}

fn opt_int<T: Into<u64>>(v: Option<T>) -> Cell {
    match v {
        Some(v) => int(v.into()),
        None => Cell::Int(None),
    }
}

fn text(v: &str) -> Cell {
    Cell::Text(Some(Arc::from(v)))
}

fn opt_text(v: Option<&str>) -> Cell {
    Cell::Text(v.map(Arc::from))
}

/// A column's values.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    /// [`ColumnType::Int64`] and [`ColumnType::TimestampUs`].
    Int(Vec<Option<i64>>),
    /// [`ColumnType::Float64`].
    Float(Vec<Option<f64>>),
    /// [`ColumnType::Bool`].
    Bool(Vec<Option<bool>>),
    /// [`ColumnType::Text`]; equal neighbours usually share one allocation.
    Text(Vec<Option<Arc<str>>>),
}

impl Values {
    fn of(ty: ColumnType) -> Values {
        match ty {
            Int64 | TimestampUs => Values::Int(Vec::new()),
            Float64 => Values::Float(Vec::new()),
            Bool => Values::Bool(Vec::new()),
            Text => Values::Text(Vec::new()),
        }
    }

    /// How many values.
    pub fn len(&self) -> usize {
        match self {
            Values::Int(v) => v.len(),
            Values::Float(v) => v.len(),
            Values::Bool(v) => v.len(),
            Values::Text(v) => v.len(),
        }
    }

    /// No values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A table's rows, column by column, in its spec's column order.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// What it is.
    pub spec: &'static TableSpec,
    /// One entry per column of the spec.
    pub columns: Vec<Values>,
}

impl Table {
    fn new(spec: &'static TableSpec) -> Table {
        Table {
            spec,
            columns: spec.columns.iter().map(|c| Values::of(c.ty)).collect(),
        }
    }

    /// How many rows.
    pub fn rows(&self) -> usize {
        self.columns.first().map_or(0, Values::len)
    }

    /// Appends a row: one cell per column, in order, of the column's type. A cell of the wrong
    /// type, or an empty cell in a column that may not be empty, is a bug in this module (the
    /// tests build every table).
    fn push<const N: usize>(&mut self, row: [Cell; N]) {
        assert_eq!(N, self.columns.len(), "{}: row length", self.spec.name);
        for ((values, cell), spec) in self.columns.iter_mut().zip(row).zip(self.spec.columns) {
            let empty = match (values, cell) {
                (Values::Int(v), Cell::Int(c)) => {
                    v.push(c);
                    c.is_none()
                }
                (Values::Float(v), Cell::Float(c)) => {
                    v.push(c);
                    c.is_none()
                }
                (Values::Bool(v), Cell::Bool(c)) => {
                    v.push(c);
                    c.is_none()
                }
                (Values::Text(v), Cell::Text(c)) => {
                    let empty = c.is_none();
                    v.push(c);
                    empty
                }
                (_, cell) => panic!(
                    "{}.{}: {cell:?} is of another type",
                    self.spec.name, spec.name
                ),
            };
            assert!(
                spec.nullable || !empty,
                "{}.{} may not be empty",
                self.spec.name,
                spec.name
            );
        }
    }
}

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
            single_rank = ranks::summarize(trace, source, 0, &|v| {
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
    let peak = |pred: &dyn Fn(&oomscope_analysis::peaks::Peak) -> bool| {
        analysis
            .peaks
            .iter()
            .filter(|p| pred(p))
            .map(|p| p.bytes)
            .max()
    };
    use oomscope_analysis::metrics::MetricKey;
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
        opt_text(analysis.findings.first().map(|f| f.kind.id())),
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
    let process_ranks = oomscope_analysis::rank_views::ranks_of(trace);
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
            t.push([
                text(id),
                opt_int(rank),
                int(position as u64),
                text(f.kind.id()),
                text(f.severity.label()),
                text(&f.title),
                text(&f.explanation),
                text(&f.change),
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
                    text(f.kind.id()),
                    text(&e.label),
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
                Cell::Bool(Some(f.is_leak)),
            ]);
        }
    }
    t
}

/// The schema as Markdown: a section per table, a row per column. `FORMAT.md` holds exactly
/// this text between its `fleet-schema` markers (a test compares them).
pub fn schema_markdown() -> String {
    let mut out = String::new();
    for table in TABLES {
        out.push_str(&format!("#### `{}`\n\n{}\n\n", table.name, table.doc));
        out.push_str("| column | type | empty? | meaning |\n|---|---|---|---|\n");
        for c in table.columns {
            out.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                c.name,
                c.ty.sql_name(),
                if c.nullable { "may be" } else { "never" },
                c.doc
            ));
        }
        out.push('\n');
    }
    out
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

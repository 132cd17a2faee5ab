//! The export's tables declared once ([`TABLES`]): each table's name, its columns' types,
//! encodings and meanings, and the schema's version. What the Parquet writer follows and
//! docs/fleet-schema.md prints ([`schema_markdown`], held equal by a test).

use ColumnType::{Bool, Float64, Int64, Text, TimestampUs};
use Encoding::{Delta, Dictionary, Plain};

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

/// The schema as Markdown: a section per table, a row per column. `docs/fleet-schema.md` holds exactly
/// this text between its `fleet-schema` markers (a test compares them).
pub fn schema_markdown() -> String {
    let mut out = String::new();
    for table in TABLES {
        out.push_str(&format!("## `{}`\n\n{}\n\n", table.name, table.doc));
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

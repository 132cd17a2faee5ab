//! Writes the fleet tables of `crate::fleet` as Parquet files, one per table and run, in
//! hive-partitioned directories: `OUT/<table>/run=<run_id>/part-0.parquet`.
//!
//! Only the low-level Parquet writer is used (no arrow): the tables arrive column by column
//! already, and the arrow crates would triple the build. Columns get the encoding their spec asks
//! for: `DELTA_BINARY_PACKED` for times and counter values (dictionary off, so the deltas are
//! what is stored), dictionaries for names and labels, snappy on top. Each file is written beside
//! its final name and renamed into place, so a reader never sees half a file and exporting a run
//! again replaces its files.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::fleet::{ColumnSpec, ColumnType, Encoding as Enc, Table, TableSpec, Values};
use anyhow::{Context, Result};
use parquet::basic::{Compression, Encoding, LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::{ColumnPath, Type};

/// Rows per row group (and per piece of the samples table built at a time): large enough for
/// tight column chunks, small enough that engines read a big table in parallel and the export's
/// memory stays bounded.
pub const ROW_GROUP_ROWS: usize = 1 << 20;

/// Where a table of a run goes under `out`.
pub fn table_path(out: &Path, table: &str, run_id: &str) -> PathBuf {
    out.join(table)
        .join(format!("run={run_id}"))
        .join("part-0.parquet")
}

/// Writes one table of one run from its pieces (each a row group; a table written whole is one
/// piece); returns the file written and its rows.
pub fn write_table(
    out: &Path,
    run_id: &str,
    spec: &'static TableSpec,
    pieces: impl IntoIterator<Item = Table>,
) -> Result<(PathBuf, usize)> {
    let path = table_path(out, spec.name, run_id);
    let dir = path.parent().expect("a table path has a directory");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let partial = dir.join(".part-0.parquet.partial");
    let file =
        File::create(&partial).with_context(|| format!("cannot write {}", partial.display()))?;
    let rows =
        write(file, spec, pieces).with_context(|| format!("cannot write {}", path.display()))?;
    std::fs::rename(&partial, &path)
        .with_context(|| format!("cannot move {} into place", path.display()))?;
    Ok((path, rows))
}

fn write(
    file: File,
    spec: &'static TableSpec,
    pieces: impl IntoIterator<Item = Table>,
) -> Result<usize> {
    let fields = spec
        .columns
        .iter()
        .map(|c| Ok(Arc::new(field(c)?)))
        .collect::<Result<Vec<_>>>()?;
    let schema = Arc::new(
        Type::group_type_builder("schema")
            .with_fields(fields)
            .build()?,
    );
    let mut props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_created_by(format!("oomscope collector {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "oomscope.schema_version".to_owned(),
            crate::fleet::SCHEMA_VERSION.to_string(),
        )]));
    for c in spec.columns {
        let path = ColumnPath::from(c.name);
        props = match c.encoding {
            Enc::Delta => props
                .set_column_dictionary_enabled(path.clone(), false)
                .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED),
            Enc::Dictionary => props.set_column_dictionary_enabled(path, true),
            Enc::Plain => props.set_column_dictionary_enabled(path, false),
        };
    }
    let mut writer = SerializedFileWriter::new(file, schema, Arc::new(props.build()))?;
    // An empty table is still a file with its schema (and no row group), so a glob over a fleet
    // finds every table of every run.
    let mut total = 0;
    for table in pieces {
        debug_assert_eq!(table.spec.name, spec.name, "pieces of one table");
        let rows = table.rows();
        let mut start = 0;
        while start < rows {
            let end = (start + ROW_GROUP_ROWS).min(rows);
            let mut group = writer.next_row_group()?;
            let mut columns = table.columns.iter().zip(spec.columns);
            while let Some(mut column) = group.next_column()? {
                let (values, c) = columns.next().expect("one writer per column");
                write_column(&mut column, values, c.nullable, start..end)?;
                column.close()?;
            }
            group.close()?;
            start = end;
        }
        total += rows;
    }
    writer.close()?;
    Ok(total)
}

fn field(c: &ColumnSpec) -> Result<Type> {
    let (physical, logical) = match c.ty {
        ColumnType::Int64 => (Physical::INT64, Some(LogicalType::integer(64, true))),
        ColumnType::TimestampUs => (
            Physical::INT64,
            Some(LogicalType::timestamp(true, TimeUnit::MICROS)),
        ),
        ColumnType::Float64 => (Physical::DOUBLE, None),
        ColumnType::Bool => (Physical::BOOLEAN, None),
        ColumnType::Text => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
    };
    Ok(Type::primitive_type_builder(c.name, physical)
        .with_repetition(if c.nullable {
            Repetition::OPTIONAL
        } else {
            Repetition::REQUIRED
        })
        .with_logical_type(logical)
        .build()?)
}

/// The present values of `rows` and, for a nullable column, the definition levels (1 present,
/// 0 empty).
fn present<T: Clone>(
    cells: &[Option<T>],
    nullable: bool,
    rows: std::ops::Range<usize>,
) -> (Vec<T>, Option<Vec<i16>>) {
    let cells = &cells[rows];
    let values = cells.iter().flatten().cloned().collect();
    let levels = nullable.then(|| cells.iter().map(|c| i16::from(c.is_some())).collect());
    (values, levels)
}

fn write_column(
    column: &mut parquet::file::writer::SerializedColumnWriter<'_>,
    values: &Values,
    nullable: bool,
    rows: std::ops::Range<usize>,
) -> Result<()> {
    match values {
        Values::Int(cells) => {
            let (v, levels) = present(cells, nullable, rows);
            column
                .typed::<Int64Type>()
                .write_batch(&v, levels.as_deref(), None)?;
        }
        Values::Float(cells) => {
            let (v, levels) = present(cells, nullable, rows);
            column
                .typed::<DoubleType>()
                .write_batch(&v, levels.as_deref(), None)?;
        }
        Values::Bool(cells) => {
            let (v, levels) = present(cells, nullable, rows);
            column
                .typed::<BoolType>()
                .write_batch(&v, levels.as_deref(), None)?;
        }
        Values::Text(cells) => {
            let cells = &cells[rows];
            // Neighbours sharing one allocation (a counter's name on each of its samples) share
            // one buffer too: a clone of `ByteArray` is a reference count.
            let mut last: Option<(&Arc<str>, ByteArray)> = None;
            let v: Vec<ByteArray> = cells
                .iter()
                .flatten()
                .map(|s| match &last {
                    Some((prev, bytes)) if Arc::ptr_eq(prev, s) => bytes.clone(),
                    _ => {
                        let bytes = ByteArray::from(s.as_bytes().to_vec());
                        last = Some((s, bytes.clone()));
                        bytes
                    }
                })
                .collect();
            let levels: Option<Vec<i16>> =
                nullable.then(|| cells.iter().map(|c| i16::from(c.is_some())).collect());
            column
                .typed::<ByteArrayType>()
                .write_batch(&v, levels.as_deref(), None)?;
        }
    }
    Ok(())
}

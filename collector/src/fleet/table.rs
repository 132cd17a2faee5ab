//! A table's rows as the export builds them ([`Table`]): typed columns of [`Values`], each cell
//! checked against its column's declared type.

use std::sync::Arc;

use super::schema::{ColumnType, TableSpec};
use ColumnType::{Bool, Float64, Int64, Text, TimestampUs};

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

pub(super) fn int(v: u64) -> Cell {
    Cell::Int(Some(i64::try_from(v).unwrap_or(i64::MAX)))
}

pub(super) fn opt_int<T: Into<u64>>(v: Option<T>) -> Cell {
    match v {
        Some(v) => int(v.into()),
        None => Cell::Int(None),
    }
}

pub(super) fn text(v: &str) -> Cell {
    Cell::Text(Some(Arc::from(v)))
}

pub(super) fn opt_text(v: Option<&str>) -> Cell {
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
    pub(super) fn new(spec: &'static TableSpec) -> Table {
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
    pub(super) fn push<const N: usize>(&mut self, row: [Cell; N]) {
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

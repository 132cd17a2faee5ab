//! Each metric's highest value at the marks and its largest rise from one mark to the next
//! ([`ColumnScan`]), as a fold over the marks: the peaks read the first (the allocator's
//! statistics' peaks are the highest a mark reported), the largest growth the second.
//!
//! Why a fold: both are one pass over every mark's value, and a live view keeps the scan from one
//! analysis of a trace still being written to the next (`crate::Prepared`), adding only the
//! marks whose values are settled and reading the rest afresh each time; a day's three allocator
//! columns and its primary metric were a fifth of its live analysis.

use crate::metrics::{MarkValues, MetricKey};
use oomscope_format::Trace;

/// Each metric's highest value and largest rise over the marks read, by metric number.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnScan {
    /// Marks read.
    marks: usize,
    /// The metrics read, in the values' order.
    keys: Vec<MetricKey>,
    metrics: Vec<ColumnFold>,
}

/// One metric's scan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct ColumnFold {
    /// The mark of the highest value and the value, the first of equals.
    first_max: Option<(usize, u64)>,
    /// The mark a value rose most at, from the mark before (both with values), and by how much,
    /// the first of equals.
    largest_rise: Option<(usize, u64)>,
    /// The last mark's value.
    last_value: Option<u64>,
}

impl ColumnScan {
    /// The metrics of `values`, the values at the marks of `trace`, scanned over every mark.
    pub fn new(trace: &Trace, values: &MarkValues) -> ColumnScan {
        ColumnScan::default().completed(trace, values)
    }

    /// Marks read so far.
    pub fn marks(&self) -> usize {
        self.marks
    }

    /// The marks from the last read up to (not including) mark `to` read; all from the first
    /// when `values` holds other metrics than those read.
    pub fn add(&mut self, values: &MarkValues, to: usize) {
        if values.keys() != self.keys {
            *self = ColumnScan {
                marks: 0,
                keys: values.keys().to_vec(),
                metrics: vec![ColumnFold::default(); values.keys().len()],
            };
        }
        let from = self.marks;
        if to <= from {
            return;
        }
        for (index, fold) in self.metrics.iter_mut().enumerate() {
            let column = values.column(index).range(from..to);
            for (i, value) in column.iter().enumerate() {
                let mark = from + i;
                if let Some(v) = value {
                    if fold.first_max.is_none_or(|(_, b)| v > b) {
                        fold.first_max = Some((mark, v));
                    }
                    if let Some(before) = fold.last_value
                        && v > before
                        && fold.largest_rise.is_none_or(|(_, b)| v - before > b)
                    {
                        fold.largest_rise = Some((mark, v - before));
                    }
                }
                fold.last_value = value;
            }
        }
        self.marks = to;
    }

    /// This scan with the marks after it read too (`values` at the marks of `trace`, those it
    /// read grown).
    pub fn completed(&self, trace: &Trace, values: &MarkValues) -> ColumnScan {
        let mut all = self.clone();
        all.add(values, trace.marks.len());
        all
    }

    /// The mark of metric number `index`'s highest value and the value (the first of equals).
    pub fn first_max(&self, index: usize) -> Option<(usize, u64)> {
        self.metrics.get(index)?.first_max
    }

    /// The mark at which metric number `index` rose most from the mark before (both with values)
    /// and by how much (the first of equals).
    pub fn largest_rise(&self, index: usize) -> Option<(usize, u64)> {
        self.metrics.get(index)?.largest_rise
    }
}

impl crate::fold::Fold for ColumnScan {
    fn clear(&mut self, _: &crate::fold::FoldInput<'_>) {
        *self = ColumnScan::default();
    }

    fn extend(&mut self, input: &crate::fold::FoldInput<'_>) {
        self.add(input.values, input.settled);
    }

    fn stale(&self, changed: usize) -> bool {
        crate::fold::values_changed(self.marks(), changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_testkit::run::Run;

    #[test]
    fn read_in_pieces_it_is_the_scan_of_every_mark() {
        let trace = Run {
            steps: 300,
            leak_bytes_per_step: 1 << 20,
            eval_every: Some(40),
            ..Run::default()
        }
        .build();
        let values = MarkValues::new(&trace);
        let whole = ColumnScan::new(&trace, &values);
        let mut pieces = ColumnScan::default();
        for to in (0..=trace.marks.len()).step_by(97) {
            pieces.add(&values, to);
        }
        assert_eq!(pieces.completed(&trace, &values), whole);
        for index in 0..values.keys().len() {
            let column: Vec<Option<u64>> = values.column(index).iter().collect();
            let mut highest: Option<(usize, u64)> = None;
            for (i, v) in column.iter().enumerate() {
                if let Some(v) = *v
                    && highest.is_none_or(|(_, b)| v > b)
                {
                    highest = Some((i, v));
                }
            }
            assert_eq!(whole.first_max(index), highest);
            let rise = column
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| Some((i + 1, w[1]?.checked_sub(w[0]?).filter(|d| *d > 0)?)))
                .fold(None, |best: Option<(usize, u64)>, (i, d)| {
                    if best.is_none_or(|(_, b)| d > b) {
                        Some((i, d))
                    } else {
                        best
                    }
                });
            assert_eq!(whole.largest_rise(index), rise);
        }
        assert!(whole.largest_rise(0).is_some());
    }
}

//! A trace's stage marks, with the allocator's statistics beside them as packed columns.
//!
//! Why not a `Vec<StageMark>`: a mark as recorded carries the caching allocator's eight
//! statistics (72 of its 128 bytes), and a day's run has a million marks. Kept as columns of
//! [`PackedColumn`] (a few bits a mark: they move little from one mark to the next) the marks of
//! a day take 70 MB rather than 154. The marks themselves are [`Mark`]s, read as a slice. The
//! vocabulary of a mark (its phase, the allocator's quantities) is declared here with it.

use std::ops::{Deref, Index, IndexMut};
use std::slice::SliceIndex;

use serde::Serialize;

use super::growth::reserve_gently;
use super::name::Name;
use super::packed::{Column, MISSING, PackedColumn};

/// Training or evaluation: marks carry the phase so analysis can see eval's effect on memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The program did not say.
    #[default]
    Unknown,
    /// Training steps.
    Train,
    /// Evaluation / validation.
    Eval,
}

impl Phase {
    /// The code written to the trace.
    pub fn code(self) -> u8 {
        match self {
            Phase::Unknown => 0,
            Phase::Train => 1,
            Phase::Eval => 2,
        }
    }

    /// The phase for a code; unknown codes read as [`Phase::Unknown`].
    pub fn from_code(code: u8) -> Phase {
        match code {
            1 => Phase::Train,
            2 => Phase::Eval,
            _ => Phase::Unknown,
        }
    }

    /// `train`, `eval` or `unknown`.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Unknown => "unknown",
            Phase::Train => "train",
            Phase::Eval => "eval",
        }
    }

    /// What a stage name carries in tables when its mark was in eval: `" (eval)"`, else `""`.
    pub fn suffix(self) -> &'static str {
        if self == Phase::Eval { " (eval)" } else { "" }
    }
}

/// One of the CUDA caching allocator's own quantities (libtorch `getDeviceStats`), however it
/// was read: at a mark ([`AllocatorStats`], the MARK record) or sampled
/// ([`CounterKind::Allocator`](crate::CounterKind::Allocator)). The one vocabulary of the allocator's memory: the analysis
/// names a metric read from marks by it, the counters and the protocol's fields by its words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocatorQuantity {
    /// Bytes in live tensors.
    Allocated,
    /// Bytes in segments the allocator holds (what it took from the device).
    Reserved,
    /// Bytes in active blocks (allocated plus blocks waiting on streams).
    Active,
    /// Bytes in inactive, split blocks: fragmentation that cannot serve large requests.
    InactiveSplit,
    /// Peak allocated since the last peak reset.
    PeakAllocated,
    /// Peak reserved since the last peak reset.
    PeakReserved,
    /// Times the allocator freed its cache and retried an allocation (a sign of pressure).
    AllocRetries,
    /// Out-of-memory errors the allocator has raised.
    Ooms,
}

impl AllocatorQuantity {
    /// Every quantity, in the order of the MARK record (FORMAT.md), the marker protocol and the
    /// CSV export.
    pub const ALL: [AllocatorQuantity; 8] = [
        AllocatorQuantity::Allocated,
        AllocatorQuantity::Reserved,
        AllocatorQuantity::Active,
        AllocatorQuantity::InactiveSplit,
        AllocatorQuantity::PeakAllocated,
        AllocatorQuantity::PeakReserved,
        AllocatorQuantity::AllocRetries,
        AllocatorQuantity::Ooms,
    ];

    /// Its field in the protocol and the CSV export (`allocated_bytes`, `num_ooms`).
    pub const fn field_name(self) -> &'static str {
        match self {
            AllocatorQuantity::Allocated => "allocated_bytes",
            AllocatorQuantity::Reserved => "reserved_bytes",
            AllocatorQuantity::Active => "active_bytes",
            AllocatorQuantity::InactiveSplit => "inactive_split_bytes",
            AllocatorQuantity::PeakAllocated => "peak_allocated_bytes",
            AllocatorQuantity::PeakReserved => "peak_reserved_bytes",
            AllocatorQuantity::AllocRetries => "num_alloc_retries",
            AllocatorQuantity::Ooms => "num_ooms",
        }
    }

    /// Its label as a metric and a counter's last word (`allocated`, `peak_reserved`).
    pub const fn label(self) -> &'static str {
        match self {
            AllocatorQuantity::Allocated => "allocated",
            AllocatorQuantity::Reserved => "reserved",
            AllocatorQuantity::Active => "active",
            AllocatorQuantity::InactiveSplit => "inactive_split",
            AllocatorQuantity::PeakAllocated => "peak_allocated",
            AllocatorQuantity::PeakReserved => "peak_reserved",
            AllocatorQuantity::AllocRetries => "num_alloc_retries",
            AllocatorQuantity::Ooms => "num_ooms",
        }
    }

    /// Whether it is bytes (else a count of events).
    pub fn is_bytes(self) -> bool {
        !matches!(
            self,
            AllocatorQuantity::AllocRetries | AllocatorQuantity::Ooms
        )
    }

    /// The quantity whose running peak this is (`PeakAllocated` is allocated's), else itself.
    pub fn peak_of(self) -> AllocatorQuantity {
        match self {
            AllocatorQuantity::PeakAllocated => AllocatorQuantity::Allocated,
            AllocatorQuantity::PeakReserved => AllocatorQuantity::Reserved,
            other => other,
        }
    }

    /// Its counter's code (COUNTER's `kind`): 6–10 since v1.0, 17–19 since v1.11.
    pub(crate) const fn counter_code(self) -> u16 {
        match self {
            AllocatorQuantity::Allocated => 6,
            AllocatorQuantity::Reserved => 7,
            AllocatorQuantity::Active => 8,
            AllocatorQuantity::PeakAllocated => 9,
            AllocatorQuantity::PeakReserved => 10,
            AllocatorQuantity::InactiveSplit => 17,
            AllocatorQuantity::AllocRetries => 18,
            AllocatorQuantity::Ooms => 19,
        }
    }
}

/// The CUDA caching allocator's own statistics at one instant (libtorch `getDeviceStats`): every
/// [`AllocatorQuantity`], as a mark carries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AllocatorStats {
    /// Bytes in live tensors.
    pub allocated_bytes: u64,
    /// Bytes in segments the allocator holds.
    pub reserved_bytes: u64,
    /// Bytes in active blocks (allocated plus blocks waiting on streams).
    pub active_bytes: u64,
    /// Bytes in inactive, split blocks: fragmentation that cannot serve large requests.
    pub inactive_split_bytes: u64,
    /// Peak allocated since the last peak reset.
    pub peak_allocated_bytes: u64,
    /// Peak reserved since the last peak reset.
    pub peak_reserved_bytes: u64,
    /// Times the allocator freed its cache and retried an allocation (a sign of pressure).
    pub num_alloc_retries: u64,
    /// Out-of-memory errors the allocator has raised.
    pub num_ooms: u64,
}

impl AllocatorStats {
    /// The fields' names, in [`AllocatorQuantity::ALL`] order.
    pub const FIELD_NAMES: [&'static str; 8] = {
        let mut names = [""; 8];
        let mut i = 0;
        while i < 8 {
            names[i] = AllocatorQuantity::ALL[i].field_name();
            i += 1;
        }
        names
    };

    /// One quantity.
    pub fn get(&self, quantity: AllocatorQuantity) -> u64 {
        match quantity {
            AllocatorQuantity::Allocated => self.allocated_bytes,
            AllocatorQuantity::Reserved => self.reserved_bytes,
            AllocatorQuantity::Active => self.active_bytes,
            AllocatorQuantity::InactiveSplit => self.inactive_split_bytes,
            AllocatorQuantity::PeakAllocated => self.peak_allocated_bytes,
            AllocatorQuantity::PeakReserved => self.peak_reserved_bytes,
            AllocatorQuantity::AllocRetries => self.num_alloc_retries,
            AllocatorQuantity::Ooms => self.num_ooms,
        }
    }

    /// The values, in [`AllocatorQuantity::ALL`] order.
    pub fn values(&self) -> [u64; 8] {
        AllocatorQuantity::ALL.map(|q| self.get(q))
    }

    /// Statistics from values in [`AllocatorQuantity::ALL`] order.
    pub fn from_values(v: [u64; 8]) -> AllocatorStats {
        AllocatorStats {
            allocated_bytes: v[0],
            reserved_bytes: v[1],
            active_bytes: v[2],
            inactive_split_bytes: v[3],
            peak_allocated_bytes: v[4],
            peak_reserved_bytes: v[5],
            num_alloc_retries: v[6],
            num_ooms: v[7],
        }
    }
}

/// A stage marker: the program said "I am at `name` of step `step`". As recorded (the record,
/// the probe's message) it carries the allocator's statistics; a [`Trace`](crate::Trace) keeps them in columns
/// beside its marks ([`Marks`]), and its marks are [`Mark`]s (`A` is `()`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageMark<A = Option<AllocatorStats>> {
    /// When.
    pub t_us: u64,
    /// Stage name (e.g. `post_forward`).
    pub name: Name,
    /// Training step (global, monotone in a normal run).
    pub step: u64,
    /// Epoch.
    pub epoch: u32,
    /// Train or eval.
    pub phase: Phase,
    /// The caching allocator's statistics at the mark, when the program could read them.
    pub allocator: A,
    /// The process that sent the mark, when it said: several processes can share one
    /// collector (torchrun's workers under one `collector run`).
    pub pid: Option<u32>,
    /// The sender's distributed rank (`RANK`), when it has one.
    pub rank: Option<u32>,
}

impl<A> StageMark<A> {
    /// The mark with other statistics.
    pub fn with_allocator<B>(self, allocator: B) -> StageMark<B> {
        self.split_with(allocator).0
    }

    /// The mark as a trace keeps it, and its statistics.
    pub fn split(self) -> (Mark, A) {
        self.split_with(())
    }

    /// The mark with `allocator` in place of its statistics, and those.
    fn split_with<B>(self, allocator: B) -> (StageMark<B>, A) {
        let StageMark {
            t_us,
            name,
            step,
            epoch,
            phase,
            allocator: kept,
            pid,
            rank,
        } = self;
        let mark = StageMark {
            t_us,
            name,
            step,
            epoch,
            phase,
            allocator,
            pid,
            rank,
        };
        (mark, kept)
    }
}

/// A mark as a trace keeps it: its statistics are in [`Marks::allocator`].
pub type Mark = StageMark<()>;

/// The marks of a trace, in time order once decoded: a slice of [`Mark`] (through `Deref`), and
/// each mark's allocator statistics by its index.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    marks: Vec<Mark>,
    /// One column per [`AllocatorQuantity`], in [`AllocatorQuantity::ALL`] order, and last
    /// whether the mark carried statistics (1) or not (0); empty until a mark carries them.
    allocator: Vec<PackedColumn>,
}

/// Columns [`Marks`] keeps once a mark carries statistics: the quantities and whether present.
const COLUMNS: usize = AllocatorQuantity::ALL.len() + 1;

impl Marks {
    /// No marks.
    pub fn new() -> Marks {
        Marks::default()
    }

    /// Appends a mark as recorded.
    pub fn push(&mut self, mark: StageMark) {
        let (mark, stats) = mark.split();
        reserve_gently(&mut self.marks, 1);
        self.marks.push(mark);
        if stats.is_some() && self.allocator.is_empty() {
            let before = self.marks.len() - 1;
            self.allocator = (0..COLUMNS)
                .map(|column| {
                    if column == COLUMNS - 1 {
                        PackedColumn::from_values(vec![0; before])
                    } else {
                        PackedColumn::missing(before)
                    }
                })
                .collect();
        }
        if self.allocator.is_empty() {
            return;
        }
        let values = stats.map_or([MISSING; 8], |s| s.values());
        for (column, value) in self.allocator.iter_mut().zip(values) {
            column.push(value);
        }
        self.allocator[COLUMNS - 1].push(u64::from(stats.is_some()));
    }

    /// The allocator's statistics at mark `index`, when it carried them.
    pub fn allocator(&self, index: usize) -> Option<AllocatorStats> {
        let present = self.allocator.last()?.get(index)?;
        (present == 1).then(|| {
            let mut values = [0; 8];
            for (value, column) in values.iter_mut().zip(&self.allocator) {
                *value = column.get(index).unwrap_or(MISSING);
            }
            AllocatorStats::from_values(values)
        })
    }

    /// Whether any mark carried the allocator's statistics.
    pub fn has_allocator(&self) -> bool {
        // The columns are made when the first mark with statistics arrives, and only then.
        !self.allocator.is_empty()
    }

    /// Each mark's `quantity`, [`MISSING`] where the mark carried no statistics (a recorded
    /// `u64::MAX` reads as absent here; [`Marks::allocator`] keeps it); `None` when no mark did.
    pub fn allocator_column(&self, quantity: AllocatorQuantity) -> Option<Column<'_>> {
        let i = AllocatorQuantity::ALL.iter().position(|q| *q == quantity)?;
        Some(self.allocator.get(i)?.view())
    }

    /// Every mark's statistics in order, read a column at a time (a scan of the marks).
    pub fn allocator_iter(&self) -> impl Iterator<Item = Option<AllocatorStats>> + '_ {
        self.allocator_iter_from(0)
    }

    /// [`Marks::allocator_iter`] from mark `start` on (a fold taking in the marks appended).
    pub fn allocator_iter_from(
        &self,
        start: usize,
    ) -> impl Iterator<Item = Option<AllocatorStats>> + '_ {
        let end = self.marks.len();
        let mut columns: Vec<_> = self
            .allocator
            .iter()
            .map(|c| c.view().range(start.min(c.len())..c.len()))
            .collect();
        (start.min(end)..end).map(move |_| {
            let mut values = [MISSING; COLUMNS];
            for (value, column) in values.iter_mut().zip(&mut columns) {
                *value = column.next()?;
            }
            let [quantities @ .., present] = values;
            (present == 1).then(|| AllocatorStats::from_values(quantities))
        })
    }

    /// Mark `index` as recorded, its statistics with it.
    pub fn recorded(&self, index: usize) -> Option<StageMark> {
        let mark = self.marks.get(index)?.clone();
        Some(mark.with_allocator(self.allocator(index)))
    }

    /// The marks as recorded, in order.
    pub fn iter_recorded(&self) -> impl Iterator<Item = StageMark> + '_ {
        (0..self.marks.len()).filter_map(|i| self.recorded(i))
    }

    /// The marks `keep` accepts, with their statistics.
    pub fn filter(&self, keep: impl Fn(&Mark) -> bool) -> Marks {
        (0..self.marks.len())
            .filter(|&i| keep(&self.marks[i]))
            .filter_map(|i| self.recorded(i))
            .collect()
    }

    /// Puts the marks in time order (stable), their statistics with them.
    pub fn sort_by_time(&mut self) {
        if self.marks.is_sorted_by_key(|m| m.t_us) {
            return;
        }
        let mut order: Vec<usize> = (0..self.marks.len()).collect();
        order.sort_by_key(|&i| self.marks[i].t_us);
        *self = order.into_iter().filter_map(|i| self.recorded(i)).collect();
    }

    /// Changes every mark as recorded, statistics and all (a test's edits; the marks are made
    /// again).
    pub fn edit(&mut self, mut f: impl FnMut(&mut StageMark)) {
        self.edit_indexed(|_, m| f(m));
    }

    /// [`Marks::edit`], told each mark's index.
    pub fn edit_indexed(&mut self, mut f: impl FnMut(usize, &mut StageMark)) {
        *self = self
            .iter_recorded()
            .enumerate()
            .map(|(i, mut m)| {
                f(i, &mut m);
                m
            })
            .collect();
    }

    /// Each mark's own fields, to change in place.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, Mark> {
        self.marks.iter_mut()
    }

    /// Removes every mark.
    pub fn clear(&mut self) {
        *self = Marks::default();
    }

    /// Gives back what the marks reserved beyond their length.
    pub fn shrink_to_fit(&mut self) {
        self.marks.shrink_to_fit();
        self.allocator
            .iter_mut()
            .for_each(PackedColumn::shrink_to_fit);
    }
}

impl Deref for Marks {
    type Target = [Mark];

    fn deref(&self) -> &[Mark] {
        &self.marks
    }
}

/// A mark's own fields can be changed in place, one mark at a time (its statistics through
/// [`Marks::edit`]). No `DerefMut`: a slice's `sort` or `swap` would move the marks and leave
/// their statistics behind.
impl<I: SliceIndex<[Mark]>> Index<I> for Marks {
    type Output = I::Output;

    fn index(&self, index: I) -> &I::Output {
        &self.marks[index]
    }
}

impl IndexMut<usize> for Marks {
    fn index_mut(&mut self, index: usize) -> &mut Mark {
        &mut self.marks[index]
    }
}

impl FromIterator<StageMark> for Marks {
    fn from_iter<I: IntoIterator<Item = StageMark>>(marks: I) -> Marks {
        let mut out = Marks::new();
        marks.into_iter().for_each(|m| out.push(m));
        out.shrink_to_fit();
        out
    }
}

impl From<Vec<StageMark>> for Marks {
    fn from(marks: Vec<StageMark>) -> Marks {
        marks.into_iter().collect()
    }
}

impl<'a> IntoIterator for &'a Marks {
    type Item = &'a Mark;
    type IntoIter = std::slice::Iter<'a, Mark>;

    fn into_iter(self) -> Self::IntoIter {
        self.marks.iter()
    }
}

impl<'a> IntoIterator for &'a mut Marks {
    type Item = &'a mut Mark;
    type IntoIter = std::slice::IterMut<'a, Mark>;

    fn into_iter(self) -> Self::IntoIter {
        self.marks.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mark(t_us: u64, stats: Option<AllocatorStats>) -> StageMark {
        StageMark {
            t_us,
            name: "pre_forward".into(),
            step: t_us / 10,
            allocator: stats,
            ..StageMark::default()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Marks read back as recorded, statistics and all, whichever marks carry them and
        /// however large they are; and in time order once sorted.
        #[test]
        fn marks_read_back_as_recorded(
            marks in proptest::collection::vec(
                (0u64..1_000, proptest::option::of(proptest::array::uniform8(
                    prop_oneof![0u64..1 << 20, any::<u64>()],
                ))),
                0..9_000,
            ),
        ) {
            let recorded: Vec<StageMark> = marks
                .iter()
                .map(|(t, s)| mark(*t, s.map(AllocatorStats::from_values)))
                .collect();
            let mut kept = Marks::from(recorded.clone());
            prop_assert_eq!(kept.len(), recorded.len());
            prop_assert_eq!(kept.iter_recorded().collect::<Vec<_>>(), recorded.clone());
            let stats: Vec<_> = recorded.iter().map(|m| m.allocator).collect();
            prop_assert_eq!(kept.allocator_iter().collect::<Vec<_>>(), stats.clone());
            // From any mark on, packed runs (4 096 marks) cut through or not.
            for from in [1, stats.len() / 3, 4_095, 4_096, 4_097, stats.len(), stats.len() + 5] {
                let rest = stats.get(from..).unwrap_or_default().to_vec();
                prop_assert_eq!(kept.allocator_iter_from(from).collect::<Vec<_>>(), rest);
            }
            prop_assert_eq!(kept.has_allocator(), stats.iter().any(Option::is_some));
            let odd = kept.filter(|m| m.t_us % 2 == 1);
            let want: Vec<StageMark> =
                recorded.iter().filter(|m| m.t_us % 2 == 1).cloned().collect();
            prop_assert_eq!(odd.iter_recorded().collect::<Vec<_>>(), want);
            let mut sorted = recorded.clone();
            sorted.sort_by_key(|m| m.t_us);
            kept.sort_by_time();
            prop_assert_eq!(kept.iter_recorded().collect::<Vec<_>>(), sorted);
        }
    }

    #[test]
    fn statistics_that_first_come_after_full_runs_of_marks_without_them() {
        let stats = |t: u64| AllocatorStats::from_values([t, 2 * t, 0, 0, 0, 0, 0, 1]);
        let recorded: Vec<StageMark> = (0..9_000)
            .map(|t| mark(t, (t >= 8_200 && t % 3 == 0).then(|| stats(t))))
            .collect();
        let kept = Marks::from(recorded.clone());
        assert!(kept.has_allocator());
        assert_eq!(kept.allocator(8_191), None);
        assert_eq!(kept.allocator(8_203), None);
        assert_eq!(kept.allocator(8_205), Some(stats(8_205)));
        let column = kept.allocator_column(AllocatorQuantity::Reserved).unwrap();
        assert_eq!(column.get(8_205), Some(2 * 8_205));
        assert_eq!(column.get(100), Some(MISSING));
        assert_eq!(kept.iter_recorded().collect::<Vec<_>>(), recorded);
        assert!(!Marks::from(vec![mark(1, None)]).has_allocator());
    }

    #[test]
    fn a_kept_mark_is_less_than_half_a_recorded_one() {
        assert_eq!(size_of::<StageMark>(), 128);
        assert_eq!(size_of::<Mark>(), 56);
    }

    #[test]
    fn marks_without_statistics_keep_no_columns() {
        let kept: Marks = (0..5_000).map(|t| mark(t, None)).collect();
        assert!(kept.allocator.is_empty());
        assert_eq!(kept.allocator(3), None);
        // Statistics that move a little from mark to mark take a few bits a mark.
        let stats = |t: u64| {
            AllocatorStats::from_values([(40 << 30) + (t % 4) * 512, 48 << 30, 0, 0, 0, 0, 0, 0])
        };
        let kept: Marks = (0..8_192).map(|t| mark(t, Some(stats(t)))).collect();
        let words: usize = kept.allocator.iter().map(PackedColumn::heap_words).sum();
        assert!(words < 8_192 / 8, "{words} words");
        assert_eq!(kept.allocator(8_000), Some(stats(8_000)));
    }
}

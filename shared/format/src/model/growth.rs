//! How the trace's long vectors grow.
//!
//! Why not by doubling: a trace followed for a day grows its columns and marks a block at a time,
//! and doubling would leave up to half of a watcher's largest allocations unused.

/// Makes room for `additional` more items, growing by an eighth of the length (not doubling),
/// and by at least 4 KiB: a trace followed for a day grows its columns a block at a time, and
/// doubling would leave up to half of the largest allocation of a watcher unused. Large vectors
/// are moved by the allocator's remapping, not copied, so the extra growths cost little; a small
/// trace (a job's many ranks) keeps small vectors.
pub(crate) fn reserve_gently<T>(v: &mut Vec<T>, additional: usize) {
    if v.capacity() - v.len() < additional {
        let floor = 4096 / size_of::<T>().max(1);
        v.reserve_exact(additional.max(v.len() / 8).max(floor));
    }
}

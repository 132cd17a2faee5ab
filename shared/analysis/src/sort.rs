//! A stable sort compiled once, for the short lists the analysis and the viewer order (findings,
//! ranks, sites, stages).
//!
//! Why: each `sort_by` with its own closure is its own copy of the standard library's driftsort,
//! about 3 KB of WASM each, and the viewer had 25 of them (75 KB before compression) against a
//! 600 KB budget. Here the items' order is found by sorting their indices through a comparator
//! behind `&dyn` (one copy of the sort for every caller), and the items are then moved into
//! place by swaps (a few instructions for each caller). The price is an indirect call per
//! comparison and a `Vec<usize>` per sort, nothing for lists of thousands; a hot sort of numbers
//! keeps `sort_unstable` on its own type.

use std::cmp::Ordering;

/// Sorts `items` stably by `compare`, as `<[T]>::sort_by` does.
pub fn sort_by<T>(items: &mut [T], compare: impl Fn(&T, &T) -> Ordering) {
    let mut order: Vec<usize> = (0..items.len()).collect();
    sort_indices(&mut order, &|a, b| compare(&items[a], &items[b]));
    for (a, b) in swaps(&mut order) {
        items.swap(a, b);
    }
}

/// Sorts `items` stably by the key `key` gives, as `<[T]>::sort_by_key` does.
pub fn sort_by_key<T, K: Ord>(items: &mut [T], key: impl Fn(&T) -> K) {
    sort_by(items, |a, b| key(a).cmp(&key(b)));
}

/// The one compiled sort: indices ordered by `compare`, ties kept in index order.
#[inline(never)]
fn sort_indices(order: &mut [usize], compare: &dyn Fn(usize, usize) -> Ordering) {
    order.sort_by(|a, b| compare(*a, *b));
}

/// The swaps that turn a list into its sorted order, where `order[i]` is the index (in the
/// unsorted list) of the item that belongs at `i`: each cycle of the permutation is walked once,
/// carrying its first item along. `order` is used up (each visited place is marked).
#[inline(never)]
fn swaps(order: &mut [usize]) -> Vec<(usize, usize)> {
    const DONE: usize = usize::MAX;
    let mut out = Vec::new();
    for start in 0..order.len() {
        let mut at = start;
        while order[at] != DONE {
            let from = order[at];
            order[at] = DONE;
            if from == start {
                break;
            }
            out.push((at, from));
            at = from;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sorts_as_the_standard_stable_sort(keys in proptest::collection::vec(0u8..6, 0..80)) {
            // Pairs of (key, original place): a stable sort keeps the places of equal keys rising.
            let items: Vec<(u8, usize)> = keys.iter().copied().zip(0..).collect();
            let mut expected = items.clone();
            expected.sort_by_key(|p| p.0);
            let mut got = items.clone();
            sort_by_key(&mut got, |p| p.0);
            prop_assert_eq!(&got, &expected);
            let mut descending = items;
            sort_by(&mut descending, |a, b| b.0.cmp(&a.0));
            expected.sort_by_key(|b| std::cmp::Reverse(b.0));
            prop_assert_eq!(descending, expected);
        }
    }

    #[test]
    fn moves_items_that_own_memory() {
        let mut names: Vec<String> = ["c", "a", "b", "a"].map(String::from).to_vec();
        sort_by(&mut names, Ord::cmp);
        assert_eq!(names, ["a", "a", "b", "c"]);
    }
}

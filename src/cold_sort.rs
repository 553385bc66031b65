//! One sort for short lists read rarely (a schema's renamed fields, the
//! conflicts shown, the runs found at open).
//!
//! Every `sort_unstable_by` is its own copy of the sort in the wasm, one per
//! element type and comparator (about 4 KB each). These lists are sorted by
//! their positions instead, through one comparator object, so one copy
//! serves them all; the hot sorts (query answers, index entries) keep theirs.

use std::cmp::Ordering;

/// The positions `0..n`, sorted by `cmp` (unstable: `cmp` is a total order
/// wherever the order of equal items would matter).
fn order(n: usize, cmp: &dyn Fn(usize, usize) -> Ordering) -> Vec<usize> {
    let mut at: Vec<usize> = (0..n).collect();
    at.sort_unstable_by(|a, b| cmp(*a, *b));
    at
}

/// `items` sorted by `cmp` of two of them, through [`order`].
pub(crate) fn sorted_by<T>(items: Vec<T>, cmp: impl Fn(&T, &T) -> Ordering) -> Vec<T> {
    let at = order(items.len(), &|a, b| cmp(&items[a], &items[b]));
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    at.into_iter().filter_map(|i| slots.get_mut(i).and_then(Option::take)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_the_standard_sort() {
        let items = vec![(3, "c"), (1, "a"), (2, "b"), (1, "z"), (0, "y")];
        let mut want = items.clone();
        want.sort_unstable();
        assert_eq!(sorted_by(items, |a, b| a.cmp(b)), want);
        assert_eq!(sorted_by(Vec::<u8>::new(), |a, b| a.cmp(b)), Vec::<u8>::new());
    }
}

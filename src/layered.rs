//! Two sequences in one order read as one, the upper hiding the lower
//! where both hold a key: fresh rows over packed ones, pending edits over
//! base rows, an index's recent entries over its packed runs. Written once.

use std::cmp::Ordering;

/// An item of [`layered`]: from the layer below, or the one over it.
pub enum Layer<U, O> {
    /// From below.
    Under(U),
    /// From over it.
    Over(O),
}

/// Two iterators in one key order as one: where both hold a key (`cmp`
/// says equal), the item over it stands and the one under it is skipped.
/// For a walk in descending order, give iterators that descend and a
/// `cmp` that is reversed.
pub fn layered<U, O>(
    under: impl Iterator<Item = U>,
    over: impl Iterator<Item = O>,
    cmp: impl Fn(&U, &O) -> Ordering,
) -> impl Iterator<Item = Layer<U, O>> {
    let (mut under, mut over) = (under.peekable(), over.peekable());
    std::iter::from_fn(move || {
        let order = match (under.peek(), over.peek()) {
            (None, None) => return None,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some(u), Some(o)) => cmp(u, o),
        };
        if order == Ordering::Equal {
            under.next();
        }
        if order == Ordering::Less {
            under.next().map(Layer::Under)
        } else {
            over.next().map(Layer::Over)
        }
    })
}

//! Reading old spellings as the newest version spells them (PROTOCOL §3b).
//!
//! One rule for ops and rows: a name a table gave up means its newest name
//! (a rename, its value and mark carried over) or nothing (retired: ignored).
//! Names are never reused, so the rule needs no version, and a stored row
//! needs none either: the same row read twice reads the same.
//!
//! The op's version only breaks one tie: an op that sets one field under two
//! of its names (an old app that sends back `weight`, pulled from a newer
//! app, beside its own `weightKg`). The name the op's own version used wins.

use std::borrow::Cow;

use super::history::Alias;
use crate::order::merge_cell;
use crate::protocol::{Fields, Row, Value};

/// An op's fields as the newest version spells them.
pub(crate) enum Spelled<'a> {
    /// Nothing to rename or drop: the op's own fields.
    Same(&'a Fields),
    /// Renamed and filtered, one entry per name.
    Mapped(Vec<(&'a str, &'a Value)>),
}

impl<'a> Spelled<'a> {
    /// Spells `fields`, written under `version`, with `aliases` of their table.
    pub(crate) fn new(aliases: &'a [Alias], fields: &'a Fields, version: u32) -> Spelled<'a> {
        if aliases.is_empty() || !fields.keys().any(|k| find(aliases, k).is_some()) {
            return Spelled::Same(fields);
        }
        // (newest name, value, the version that gave up the name the op used,
        // the field's place: the order is total, so an unstable sort is
        // the stable one, without a second sort in the wasm).
        let mut out: Vec<(&'a str, &'a Value, u32, usize)> = Vec::with_capacity(fields.len());
        for (i, (name, value)) in fields.iter().enumerate() {
            match find(aliases, name) {
                Some(Alias { to: None, .. }) => {}
                Some(Alias { to: Some(to), died, .. }) => out.push((to.as_str(), value, *died, i)),
                None => out.push((name.as_str(), value, u32::MAX, i)),
            }
        }
        let mut out = crate::cold_sort::sorted_by(out, |a, b| {
            a.0.cmp(b.0).then_with(|| rank(a.2, version).cmp(&rank(b.2, version))).then(a.3.cmp(&b.3))
        });
        out.dedup_by(|later, first| later.0 == first.0);
        Spelled::Mapped(out.into_iter().map(|(k, v, _, _)| (k, v)).collect())
    }

    /// Each (name, value), names distinct.
    pub(crate) fn pairs(&self) -> Pairs<'a, '_> {
        match self {
            Spelled::Same(f) => Pairs::Same(f, 0),
            Spelled::Mapped(v) => Pairs::Mapped(v.iter()),
        }
    }
}

/// The iterator of [`Spelled::pairs`] (no allocation: the judge's hot path).
pub(crate) enum Pairs<'a, 's> {
    Same(&'a Fields, usize),
    Mapped(std::slice::Iter<'s, (&'a str, &'a Value)>),
}

impl<'a> Iterator for Pairs<'a, '_> {
    type Item = (&'a str, &'a Value);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Pairs::Same(f, i) => {
                let (k, v) = f.get_indexed(*i)?;
                *i += 1;
                Some((k.as_str(), v))
            }
            Pairs::Mapped(i) => i.next().copied(),
        }
    }
}

/// Among names of one field in one op, which wins (lowest first): the name
/// the op's version used (given up soonest after that version), else the
/// most recently given-up one. The newest name counts as given up "never".
fn rank(died: u32, version: u32) -> (u8, u32) {
    if died > version {
        (0, died)
    } else {
        (1, u32::MAX - died)
    }
}

fn find<'a>(aliases: &'a [Alias], name: &str) -> Option<&'a Alias> {
    aliases.iter().find(|a| a.old == name)
}

/// `row` with its cells under their newest names; retired cells left out.
/// Two cells landing on one name keep the newer mark (the one merge).
pub(crate) fn upgrade_row<'r>(aliases: &[Alias], row: &'r Row) -> Cow<'r, Row> {
    if aliases.is_empty() || !row.cells.iter().any(|(k, _)| find(aliases, k).is_some()) {
        return Cow::Borrowed(row);
    }
    let mut out = Row::default();
    for (name, cell) in row.cells.iter() {
        let name = match find(aliases, name) {
            Some(Alias { to: None, .. }) => continue,
            Some(Alias { to: Some(to), .. }) => to.as_str(),
            None => name.as_str(),
        };
        merge_cell(&mut out, name, &cell.value, &cell.mark);
    }
    Cow::Owned(out)
}

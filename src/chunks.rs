//! Base rows as compacted snapshot chunks: the encoding and the folding rules
//! of the browser store, with no IndexedDB in them (pure, tested natively).
//!
//! A chunk is one record holding many rows, sorted by key. Its IndexedDB key
//! is its first row's `[table, rowId]` (`[table, rowId, space]` in a shared
//! space), so the chunk keys alone tell which chunk a row belongs to: the
//! chunk with the greatest first key at or below the row's key (or the
//! first chunk).
//!
//! Encoding 4 (written now): the bytes `FF 04`, then a [postcard] sequence of
//! rows `(table, rowId, space, [(at, opId, [(field, value), …]), …])` — the
//! cells one op set share one mark (one opId allocation once decoded);
//! strings are length-prefixed, numbers binary, so decoding is a copy, not a
//! parse. A row with no cell is a removal ([`Row::is_gone`]): folding drops it.
//! Still read, their rows in the personal space: encoding 3 (`FF 03`, the
//! same without the space), encoding 2 (the UTF-8 bytes of encoding 3's shape
//! as a JSON array) and encoding 1 (JSON text, one `[field, value, at, opId]`
//! per cell).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{Cell, Cells, Mark, OpId, Row, RowKey, Value};
use crate::store::StoreError;

/// The first two bytes of an encoding-4 chunk (never the start of JSON text).
pub const MAGIC: [u8; 2] = [0xFF, 0x04];
/// The first two bytes of an encoding-3 chunk, still read.
const MAGIC_V3: [u8; 2] = [0xFF, 0x03];

/// A chunk is split once it holds more rows than this.
pub const MAX_ROWS: usize = 2_000;
/// A chunk is split once its encoding is longer than this (bytes).
pub const MAX_BYTES: usize = 1 << 20;
/// Chunks born of a split are filled to about half the limits, so that rows
/// added later rewrite one chunk instead of splitting again at once.
const FILL_ROWS: usize = MAX_ROWS / 2;
const FILL_BYTES: usize = MAX_BYTES / 2;

/// A field value in encoding 3 (postcard needs a tagged enum).
#[derive(Serialize, Deserialize)]
enum ValueBin<'a> {
    Null,
    Bool(bool),
    Number(f64),
    String(#[serde(borrow)] Cow<'a, str>),
}

#[derive(Serialize, Deserialize)]
struct GroupBin<'a>(u64, #[serde(borrow)] Cow<'a, str>, #[serde(borrow)] Vec<(Cow<'a, str>, ValueBin<'a>)>);

#[derive(Serialize, Deserialize)]
struct RowBin<'a>(
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Cow<'a, str>,
    #[serde(borrow)] Vec<GroupBin<'a>>,
);

/// Reads one encoded row (a [`RowBin`]) without collecting it: its key is
/// returned borrowed, and each cell is handed to `f` as it is read — the
/// row's groups and cells are never put in vectors. What the checks at
/// open and the reads of an index's values do for each of many rows.
struct Visit<'f, 'de>(&'f mut dyn FnMut(&'de str, ValueBin<'de>));

/// What a [`Visit`] gives back: the row's key.
type KeyOf<'de> = (&'de str, &'de str, &'de str);

impl<'de> serde::de::DeserializeSeed<'de> for Visit<'_, 'de> {
    type Value = KeyOf<'de>;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_tuple(4, self)
    }
}

impl<'de> serde::de::Visitor<'de> for Visit<'_, 'de> {
    type Value = KeyOf<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a row")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        use serde::de::Error;
        let mut part = || -> Result<&'de str, A::Error> { seq.next_element()?.ok_or_else(|| A::Error::custom("a row cut short")) };
        let key = (part()?, part()?, part()?);
        seq.next_element_seed(Groups(self.0))?.ok_or_else(|| A::Error::custom("a row cut short"))?;
        Ok(key)
    }
}

/// The groups of a row, visited.
struct Groups<'f, 'de>(&'f mut dyn FnMut(&'de str, ValueBin<'de>));

impl<'de> serde::de::DeserializeSeed<'de> for Groups<'_, 'de> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Groups<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("groups of cells")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        // A group: (at, opId, cells); only the cells are visited.
        while let Some(()) = seq.next_element_seed(Group(&mut *self.0))? {}
        Ok(())
    }
}

/// One group of a row, its cells visited.
struct Group<'f, 'de>(&'f mut dyn FnMut(&'de str, ValueBin<'de>));

impl<'de> serde::de::DeserializeSeed<'de> for Group<'_, 'de> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_tuple(3, self)
    }
}

impl<'de> serde::de::Visitor<'de> for Group<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a group of cells")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let short = || A::Error::custom("a group cut short");
        let _at: u64 = seq.next_element()?.ok_or_else(short)?;
        let _op_id: &'de str = seq.next_element()?.ok_or_else(short)?;
        seq.next_element_seed(CellList(self.0))?.ok_or_else(short)
    }
}

/// A group's cells, each handed on as read.
struct CellList<'f, 'de>(&'f mut dyn FnMut(&'de str, ValueBin<'de>));

impl<'de> serde::de::DeserializeSeed<'de> for CellList<'_, 'de> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for CellList<'_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cells")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some((name, value)) = seq.next_element::<(&'de str, ValueBin<'de>)>()? {
            (self.0)(name, value);
        }
        Ok(())
    }
}

/// Visits one encoded row: its key, each cell handed to `f`; and the bytes after it.
fn visit_row<'de>(bytes: &'de [u8], f: &mut dyn FnMut(&'de str, ValueBin<'de>)) -> Result<(KeyOf<'de>, &'de [u8]), StoreError> {
    let mut d = postcard::Deserializer::from_bytes(bytes);
    let key = serde::de::DeserializeSeed::deserialize(Visit(f), &mut d).map_err(corrupt)?;
    let rest = d.finalize().map_err(corrupt)?;
    Ok((key, rest))
}

/// Encoding 3, still read: a row with no space.
#[derive(Deserialize)]
struct RowV3<'a>(#[serde(borrow)] Cow<'a, str>, #[serde(borrow)] Cow<'a, str>, #[serde(borrow)] Vec<GroupBin<'a>>);

/// Encoding 2, still read.
#[derive(Deserialize)]
struct GroupV2<'a>(u64, #[serde(borrow)] Cow<'a, str>, Vec<(String, Value)>);

#[derive(Deserialize)]
struct RowV2<'a>(String, String, #[serde(borrow)] Vec<GroupV2<'a>>);

/// Encoding 1, still read.
#[derive(Deserialize)]
struct CellV1(String, Value, u64, OpId);

#[derive(Deserialize)]
struct RowV1(String, String, Vec<CellV1>);

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("base chunk: {e}"))
}

/// The encoding of one row (an element of a chunk's sequence).
fn encode_row(key: &RowKey, row: &Row) -> Result<Vec<u8>, StoreError> {
    encode_into(key, row, Vec::new())
}

/// The encoding of one row, appended to `out`.
fn encode_into(key: &RowKey, row: &Row, out: Vec<u8>) -> Result<Vec<u8>, StoreError> {
    let mut groups: Vec<GroupBin<'_>> = Vec::new();
    for (f, c) in &row.cells {
        let value = match &c.value {
            Value::Null => ValueBin::Null,
            Value::Bool(b) => ValueBin::Bool(*b),
            Value::Number(n) => ValueBin::Number(*n),
            Value::String(s) => ValueBin::String(Cow::Borrowed(s)),
        };
        match groups.iter_mut().find(|g| g.0 == c.mark.at && g.1 == c.mark.op_id.as_str()) {
            Some(g) => g.2.push((Cow::Borrowed(f), value)),
            None => groups.push(GroupBin(c.mark.at, Cow::Borrowed(c.mark.op_id.as_str()), vec![(Cow::Borrowed(f), value)])),
        }
    }
    postcard::to_extend(&RowBin(Cow::Borrowed(&key.table), Cow::Borrowed(&key.row_id), Cow::Borrowed(&key.space), groups), out)
        .map_err(corrupt)
}

/// Joins encoded rows into one chunk: the magic bytes, the count, the rows.
fn join(rows: &[Vec<u8>]) -> Result<Vec<u8>, StoreError> {
    let count = postcard::to_allocvec(&rows.len()).map_err(corrupt)?;
    let mut out = Vec::with_capacity(MAGIC.len() + count.len() + rows.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&count);
    for r in rows {
        out.extend_from_slice(r);
    }
    Ok(out)
}

/// Encodes sorted rows as one chunk with no size limit (a snapshot).
pub fn encode_snapshot(rows: &[(RowKey, Row)]) -> Result<Vec<u8>, StoreError> {
    join(&rows.iter().map(|(k, r)| encode_row(k, r)).collect::<Result<Vec<_>, _>>()?)
}

/// Decodes a chunk stored as bytes (encoding 4, 3 or 2) into its rows, in stored order.
pub fn decode_chunk(bytes: &[u8]) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let rows: Vec<RowBin<'_>> = if let Some(body) = bytes.strip_prefix(&MAGIC) {
        postcard::from_bytes(body).map_err(corrupt)?
    } else if let Some(body) = bytes.strip_prefix(&MAGIC_V3) {
        let v3: Vec<RowV3<'_>> = postcard::from_bytes(body).map_err(corrupt)?;
        v3.into_iter().map(|RowV3(t, r, g)| RowBin(t, r, Cow::Borrowed(""), g)).collect()
    } else {
        return decode_chunk_v2(bytes);
    };
    rows.into_iter().map(row_from_bin).collect()
}

fn row_from_bin(RowBin(table, row_id, space, groups): RowBin<'_>) -> Result<(RowKey, Row), StoreError> {
    let row = cells_from_bin(groups)?;
    Ok((RowKey { table: table.into_owned(), row_id: row_id.into_owned(), space: space.into_owned() }, row))
}

fn cells_from_bin(groups: Vec<GroupBin<'_>>) -> Result<Row, StoreError> {
    let fields = groups.iter().map(|g| g.2.len()).sum();
    let groups = groups
        .into_iter()
        .map(|GroupBin(at, op_id, fields)| (at, op_id, fields.into_iter().map(|(f, v)| value_of(v).map(|v| (f.into_owned(), v)))));
    cells_of(fields, groups)
}

/// The encoding of one row alone, as it sits in an encoding-4 chunk (what
/// [`split_chunk`] finds and [`decode_row`] reads back), appended to `out`.
pub fn encode_one(key: &RowKey, row: &Row, out: Vec<u8>) -> Result<Vec<u8>, StoreError> {
    encode_into(key, row, out)
}

/// Decodes one row of an encoding-4 chunk (its bytes as [`split_chunk`] bounds them).
pub fn decode_row(bytes: &[u8]) -> Result<(RowKey, Row), StoreError> {
    row_from_bin(postcard::from_bytes(bytes).map_err(corrupt)?)
}

/// [`decode_row`] without its key (a read by key knows it).
pub fn decode_cells(bytes: &[u8]) -> Result<Row, StoreError> {
    let RowBin(_, _, _, groups) = postcard::from_bytes(bytes).map_err(corrupt)?;
    cells_from_bin(groups)
}

/// The values of `names` in one encoded row (`Null` where it has none),
/// and whether the row is deleted — without decoding the rest of it: what
/// filling an index reads of each of a table's packed rows (a decode
/// allocates every name, value and opId of the row).
pub fn project(bytes: &[u8], names: &[&str], out: &mut Vec<Value>) -> Result<bool, StoreError> {
    out.clear();
    out.resize(names.len(), Value::Null);
    let mut deleted = false;
    let mut bad = false;
    visit_row(bytes, &mut |f, v| {
        if f == crate::protocol::DELETED {
            deleted = matches!(v, ValueBin::Bool(true));
        }
        if let Some(i) = names.iter().position(|n| *n == f) {
            match value_of(v) {
                Ok(v) => out[i] = v,
                Err(_) => bad = true,
            }
        }
    })?;
    if bad {
        return Err(corrupt("a number is not finite"));
    }
    Ok(deleted)
}

/// A row's key as its bytes: table, rowId, space.
pub type KeyBytes<'a> = (&'a [u8], &'a [u8], &'a [u8]);

/// [`key_of`] as bytes: UTF-8 sorts as its bytes do, so a search compares
/// them without checking them again.
pub fn key_bytes_of(bytes: &[u8]) -> Result<KeyBytes<'_>, StoreError> {
    postcard::take_from_bytes::<KeyBytes<'_>>(bytes).map(|(k, _)| k).map_err(corrupt)
}

/// The key of one encoded row — table, rowId, space — borrowed from its
/// bytes: a search among packed rows reads no more than this.
pub fn key_of(bytes: &[u8]) -> Result<(&str, &str, &str), StoreError> {
    postcard::take_from_bytes::<(&str, &str, &str)>(bytes).map(|(k, _)| k).map_err(corrupt)
}

/// Where the rows of an encoding-4 chunk start, so that they can be kept
/// as they are stored and read one at a time. Every row is checked here —
/// its values, that it is a row and not a removal, that keys strictly
/// increase — so that reading one later cannot fail. `Ok(None)`: the chunk
/// is of an earlier encoding, or its rows are not so (decode it instead).
pub fn split_chunk(bytes: &[u8]) -> Result<Option<Vec<u32>>, StoreError> {
    let Some(body) = bytes.strip_prefix(&MAGIC) else { return Ok(None) };
    let (count, mut rest) = postcard::take_from_bytes::<usize>(body).map_err(corrupt)?;
    let mut starts = Vec::with_capacity(count.min(rest.len()));
    let mut last: Option<(&str, &str, &str)> = None;
    for _ in 0..count {
        let at = bytes.len() - rest.len();
        let (mut cells, mut finite) = (0usize, true);
        let (key, tail) = visit_row(rest, &mut |_, v| {
            cells += 1;
            finite &= !matches!(v, ValueBin::Number(n) if !n.is_finite());
        })?;
        let ordered = last.is_none_or(|l| l < key);
        if cells == 0 || !finite || !ordered {
            return Ok(None);
        }
        last = Some(key);
        starts.push(u32::try_from(at).map_err(corrupt)?);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(corrupt("bytes after the last row"));
    }
    Ok(Some(starts))
}

/// A field value of encoding 3; numbers must be finite, as on the wire.
fn value_of(v: ValueBin<'_>) -> Result<Value, StoreError> {
    Ok(match v {
        ValueBin::Null => Value::Null,
        ValueBin::Bool(b) => Value::Bool(b),
        ValueBin::Number(n) if n.is_finite() => Value::Number(n),
        ValueBin::Number(_) => return Err(corrupt("a number is not finite")),
        ValueBin::String(s) => Value::String(s.into_owned()),
    })
}

/// One decoded row from its groups of cells (the cells of a group share one
/// mark, so one opId allocation), whatever the encoding. `fields` is how
/// many cells the groups hold: the row is allocated at its size once (a
/// growing vector would leave a row of three fields room for four — a
/// quarter more of the device's largest allocation, every row it holds).
fn row_of<'a, G, F>(table: String, row_id: String, fields: usize, groups: G) -> Result<(RowKey, Row), StoreError>
where
    G: IntoIterator<Item = (u64, Cow<'a, str>, F)>,
    F: IntoIterator<Item = Result<(String, Value), StoreError>>,
{
    Ok((RowKey::new(table, row_id), cells_of(fields, groups)?))
}

fn cells_of<'a, G, F>(fields: usize, groups: G) -> Result<Row, StoreError>
where
    G: IntoIterator<Item = (u64, Cow<'a, str>, F)>,
    F: IntoIterator<Item = Result<(String, Value), StoreError>>,
{
    let mut cells = Cells::with_capacity(fields);
    for (at, op_id, fields) in groups {
        let op_id = OpId::new(op_id.as_ref());
        for field in fields {
            let (f, value) = field?;
            cells.insert(f, Cell { value, mark: Mark { at, op_id: op_id.clone() } });
        }
    }
    Ok(Row { cells, notes: None })
}

/// Decodes a chunk in encoding 2 (the UTF-8 bytes of a JSON array). Read
/// as text, as every other JSON is in the wasm: serde_json's reader of
/// bytes is a second copy of its parser there.
fn decode_chunk_v2(bytes: &[u8]) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let text = std::str::from_utf8(bytes).map_err(corrupt)?;
    let rows: Vec<RowV2<'_>> = crate::json::from_str(text).map_err(corrupt)?;
    rows.into_iter()
        .map(|RowV2(table, row_id, groups)| {
            row_of(
                table,
                row_id,
                groups.iter().map(|g| g.2.len()).sum(),
                groups.into_iter().map(|GroupV2(at, op_id, fields)| (at, op_id, fields.into_iter().map(Ok))),
            )
        })
        .collect()
}

/// Decodes a chunk stored as JSON text in the first encoding.
pub fn decode_chunk_v1(text: &str) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let rows: Vec<RowV1> = crate::json::from_str(text).map_err(corrupt)?;
    Ok(rows
        .into_iter()
        .map(|RowV1(table, row_id, cells_v1)| {
            // Inserted, not collected: a collect sorts, one more sort in the wasm.
            let mut cells = crate::protocol::Cells::new();
            for CellV1(f, value, at, op_id) in cells_v1 {
                cells.insert(f, Cell { value, mark: Mark { at, op_id } });
            }
            (RowKey::new(table, row_id), Row { cells, notes: None })
        })
        .collect())
}

/// One chunk to store: its key (its first row's) and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkOut {
    /// The first row's key.
    pub first: RowKey,
    /// The encoded chunk.
    pub bytes: Vec<u8>,
}

/// Encodes sorted rows as one chunk, or as several when they exceed the
/// limits. Returns no chunk for no rows.
pub fn encode_chunks(rows: &[(RowKey, Row)]) -> Result<Vec<ChunkOut>, StoreError> {
    let encoded = rows.iter().map(|(k, r)| encode_row(k, r)).collect::<Result<Vec<_>, _>>()?;
    let total: usize = encoded.iter().map(Vec::len).sum();
    let (max_rows, max_bytes) = if rows.len() <= MAX_ROWS && total <= MAX_BYTES { (MAX_ROWS, MAX_BYTES) } else { (FILL_ROWS, FILL_BYTES) };
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < rows.len() && (end == start || (end - start < max_rows && bytes + encoded[end].len() <= max_bytes)) {
            bytes += encoded[end].len();
            end += 1;
        }
        out.push(ChunkOut { first: rows[start].0.clone(), bytes: join(&encoded[start..end])? });
        start = end;
    }
    Ok(out)
}

/// Which stored chunk a row belongs to: the index, in `chunks` (sorted by
/// their first keys, which `first` reads), of the chunk with the greatest
/// first key at or below `key`; the first chunk for keys below all of them.
/// `None` when there are no chunks. (The replica's packed runs are found
/// the same way.)
pub fn chunk_of<T>(chunks: &[T], key: &RowKey, first: impl Fn(&T) -> &RowKey) -> Option<usize> {
    if chunks.is_empty() {
        return None;
    }
    Some(chunks.partition_point(|c| first(c) <= key).saturating_sub(1))
}

/// Folds `deltas` (latest wins; a removal drops the row) into the rows of
/// one chunk; returns all rows sorted.
pub fn fold(chunk: Vec<(RowKey, Row)>, deltas: impl IntoIterator<Item = (RowKey, Row)>) -> Vec<(RowKey, Row)> {
    // Inserted, not collected: a collect sorts, one more sort in the wasm for each type.
    let mut rows: BTreeMap<RowKey, Row> = BTreeMap::new();
    rows.extend(chunk);
    rows.extend(deltas);
    rows.into_iter().filter(|(_, r)| !r.is_gone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[(&str, Value, u64, &str)]) -> Row {
        Row {
            cells: cells
                .iter()
                .map(|(f, v, at, op)| (f.to_string(), Cell { value: v.clone(), mark: Mark { at: *at, op_id: OpId::new(*op) } }))
                .collect(),
            notes: None,
        }
    }

    fn sample(n: usize) -> Vec<(RowKey, Row)> {
        let mut rows: Vec<_> = (0..n)
            .map(|i| {
                let r = row(&[
                    ("exercise", Value::from(format!("squat é ✓ \"{i}\"")), 7, "a:1"),
                    ("weightKg", Value::Number(82.5 + i as f64), 9, "b:2"),
                    ("reps", Value::Number(-0.0), 7, "a:1"),
                    ("note", Value::Null, 9, "b:2"),
                    ("_deleted", Value::Bool(i % 2 == 0), 9_007_199_254_740_991, "c:3"),
                ]);
                (RowKey::new(if i % 3 == 0 { "sets" } else { "notes" }, format!("r{i}")), r)
            })
            .collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    }

    #[test]
    fn a_chunk_decodes_to_exactly_the_rows_encoded() {
        let rows = sample(50);
        let chunks = encode_chunks(&rows).unwrap();
        assert_eq!(chunks.len(), 1);
        assert!(chunks[0].bytes.starts_with(&MAGIC));
        assert_eq!(chunks[0].first, rows[0].0);
        assert_eq!(decode_chunk(&chunks[0].bytes).unwrap(), rows);
        assert_eq!(decode_chunk(&encode_snapshot(&rows).unwrap()).unwrap(), rows);
        assert_eq!(decode_chunk(&encode_snapshot(&[]).unwrap()).unwrap(), vec![]);
    }

    #[test]
    fn chunks_split_past_the_limits_and_keep_every_row_in_order() {
        let rows = sample(MAX_ROWS + 1);
        let chunks = encode_chunks(&rows).unwrap();
        assert!(chunks.len() >= 2, "{} chunks", chunks.len());
        assert!(chunks.iter().all(|c| c.bytes.len() <= MAX_BYTES + 16));
        let back: Vec<_> = chunks.iter().flat_map(|c| decode_chunk(&c.bytes).unwrap()).collect();
        assert_eq!(back, rows);
        let firsts: Vec<_> = chunks.iter().map(|c| c.first.clone()).collect();
        for (k, _) in &rows {
            let i = chunk_of(&firsts, k, |f| f).unwrap();
            assert!(decode_chunk(&chunks[i].bytes).unwrap().iter().any(|(x, _)| x == k), "{k:?} not in the chunk chunk_of names");
        }
    }

    #[test]
    fn rows_keep_their_space_and_a_removal_folds_the_row_away() {
        let shared = RowKey::in_space("team", "sets", "r1");
        let mine = RowKey::new("sets", "r1");
        let r = row(&[("reps", Value::Number(5.0), 5, "a:1")]);
        let mut rows = vec![(shared.clone(), r.clone()), (mine.clone(), r.clone())];
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(rows[0].0, mine, "the personal copy sorts first, the shared one next to it");
        assert_eq!(decode_chunk(&encode_snapshot(&rows).unwrap()).unwrap(), rows);
        let gone = (shared.clone(), Row::default());
        assert_eq!(decode_chunk(&encode_snapshot(std::slice::from_ref(&gone)).unwrap()).unwrap(), vec![gone.clone()]);
        assert_eq!(fold(rows.clone(), [gone.clone()]), vec![(mine.clone(), r.clone())]);
    }

    #[test]
    fn the_earlier_encodings_still_read() {
        // Encoding 3: no space, so the personal space.
        let v3 = vec![(
            Cow::Borrowed("sets"),
            Cow::Borrowed("r1"),
            vec![GroupBin(5, Cow::Borrowed("a:1"), vec![(Cow::Borrowed("reps"), ValueBin::Number(5.0))])],
        )];
        let mut bytes = MAGIC_V3.to_vec();
        bytes.extend(postcard::to_allocvec(&v3).unwrap());
        assert_eq!(decode_chunk(&bytes).unwrap(), vec![(RowKey::new("sets", "r1"), row(&[("reps", Value::Number(5.0), 5, "a:1")]))]);
        let v2 = br#"[["sets","r1",[[5,"a:1",[["exercise","squat"],["reps",5]]],[6,"b:1",[["weightKg",80.5]]]]]]"#;
        let expected = vec![(
            RowKey::new("sets", "r1"),
            row(&[
                ("exercise", "squat".into(), 5, "a:1"),
                ("reps", Value::Number(5.0), 5, "a:1"),
                ("weightKg", Value::Number(80.5), 6, "b:1"),
            ]),
        )];
        assert_eq!(decode_chunk(v2).unwrap(), expected);
        let v1 = r#"[["sets","r1",[["exercise","squat",5,"a:1"],["reps",5,5,"a:1"],["weightKg",80.5,6,"b:1"]]]]"#;
        assert_eq!(decode_chunk_v1(v1).unwrap(), expected);
    }

    #[test]
    fn damaged_bytes_are_an_error_not_a_panic() {
        let bytes = encode_snapshot(&sample(3)).unwrap();
        for cut in 0..bytes.len() {
            let _ = decode_chunk(&bytes[..cut]);
        }
        assert!(matches!(decode_chunk(&bytes[..bytes.len() - 1]), Err(StoreError::Corrupt(_))));
        let mut nan = encode_snapshot(&[(RowKey::new("t", "r"), row(&[("x", Value::Number(1.0), 1, "a:1")]))]).unwrap();
        let at = nan.len() - 8;
        nan[at..].copy_from_slice(&f64::NAN.to_le_bytes());
        assert!(matches!(decode_chunk(&nan), Err(StoreError::Corrupt(_))));
    }
}

//! Base rows as compacted snapshot chunks: the encoding and the folding rules
//! of [`super::idb_store`], with no IndexedDB in them.
//!
//! A chunk is one record holding many rows, sorted by key, encoded as the
//! UTF-8 bytes of a JSON array of `[table, rowId, [[at, opId, [[field,
//! value], …]], …]]`: no repeated object keys, and the cells one op set share
//! one mark (and one opId allocation once decoded). Its IndexedDB key is its first row's `[table, rowId]`, so the
//! chunk keys alone tell which chunk a row belongs to: the chunk with the
//! greatest first key at or below the row's key (or the first chunk).

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{Cell, Mark, OpId, Row, RowKey, Value};
use crate::store::StoreError;

/// A chunk is split once it holds more rows than this.
pub const MAX_ROWS: usize = 2_000;
/// A chunk is split once its encoding is longer than this (UTF-8 bytes).
pub const MAX_BYTES: usize = 1 << 20;
/// Chunks born of a split are filled to about half the limits, so that rows
/// added later rewrite one chunk instead of splitting again at once.
const FILL_ROWS: usize = MAX_ROWS / 2;
const FILL_BYTES: usize = MAX_BYTES / 2;

#[derive(Serialize)]
struct GroupOut<'a>(u64, &'a OpId, Vec<(&'a str, &'a Value)>);

#[derive(Serialize)]
struct RowOut<'a>(&'a str, &'a str, Vec<GroupOut<'a>>);

#[derive(Deserialize)]
struct GroupIn<'a>(u64, #[serde(borrow)] Cow<'a, str>, Vec<(String, Value)>);

#[derive(Deserialize)]
struct RowIn<'a>(String, String, #[serde(borrow)] Vec<GroupIn<'a>>);

/// The first encoding (one `[field, value, at, opId]` per cell), still read.
#[derive(Deserialize)]
struct CellV1(String, Value, u64, OpId);

#[derive(Deserialize)]
struct RowV1(String, String, Vec<CellV1>);

fn corrupt(e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt(format!("base chunk: {e}"))
}

/// The compact encoding of one row (an element of a chunk's array).
pub fn encode_row(key: &RowKey, row: &Row) -> Result<String, StoreError> {
    let mut groups: Vec<GroupOut<'_>> = Vec::new();
    for (f, c) in &row.cells {
        match groups.iter_mut().find(|g| g.0 == c.mark.at && *g.1 == c.mark.op_id) {
            Some(g) => g.2.push((f, &c.value)),
            None => groups.push(GroupOut(c.mark.at, &c.mark.op_id, vec![(f, &c.value)])),
        }
    }
    serde_json::to_string(&RowOut(&key.table, &key.row_id, groups)).map_err(corrupt)
}

/// Decodes a chunk (the UTF-8 bytes of its JSON array) into its rows, in stored order.
pub fn decode_chunk(bytes: &[u8]) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let rows: Vec<RowIn<'_>> = serde_json::from_slice(bytes).map_err(corrupt)?;
    let mut out = Vec::with_capacity(rows.len());
    for RowIn(table, row_id, groups) in rows {
        let mut cells = BTreeMap::new();
        for GroupIn(at, op_id, fields) in groups {
            let op_id = OpId::new(op_id.as_ref());
            for (f, value) in fields {
                cells.insert(f, Cell { value, mark: Mark { at, op_id: op_id.clone() } });
            }
        }
        out.push((RowKey { table, row_id }, Row { cells }));
    }
    Ok(out)
}

/// Decodes a chunk stored as JSON text in the first encoding.
pub fn decode_chunk_v1(text: &str) -> Result<Vec<(RowKey, Row)>, StoreError> {
    let rows: Vec<RowV1> = serde_json::from_str(text).map_err(corrupt)?;
    Ok(rows
        .into_iter()
        .map(|RowV1(table, row_id, cells)| {
            let cells = cells.into_iter().map(|CellV1(f, value, at, op_id)| (f, Cell { value, mark: Mark { at, op_id } })).collect();
            (RowKey { table, row_id }, Row { cells })
        })
        .collect())
}

/// One chunk to store: its key (its first row's) and its JSON text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkOut {
    /// The first row's key.
    pub first: RowKey,
    /// The JSON array of encoded rows.
    pub text: String,
}

/// Encodes sorted rows as one chunk, or as several when they exceed the
/// limits. Returns no chunk for no rows.
pub fn encode_chunks(rows: &[(RowKey, Row)]) -> Result<Vec<ChunkOut>, StoreError> {
    let encoded = rows.iter().map(|(k, r)| encode_row(k, r)).collect::<Result<Vec<_>, _>>()?;
    let total: usize = encoded.iter().map(|s| s.len() + 1).sum();
    let (max_rows, max_bytes) = if rows.len() <= MAX_ROWS && total <= MAX_BYTES { (MAX_ROWS, MAX_BYTES) } else { (FILL_ROWS, FILL_BYTES) };
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows.len() {
        let mut end = start;
        let mut bytes = 2;
        while end < rows.len() && (end == start || (end - start < max_rows && bytes + encoded[end].len() + 1 <= max_bytes)) {
            bytes += encoded[end].len() + 1;
            end += 1;
        }
        let mut text = String::with_capacity(bytes);
        text.push('[');
        text.push_str(&encoded[start..end].join(","));
        text.push(']');
        out.push(ChunkOut { first: rows[start].0.clone(), text });
        start = end;
    }
    Ok(out)
}

/// Which stored chunk a row belongs to: the index, in `firsts` (sorted), of
/// the chunk with the greatest first key at or below `key`; the first chunk
/// for keys below all of them. `None` when there are no chunks.
pub fn chunk_of(firsts: &[RowKey], key: &RowKey) -> Option<usize> {
    if firsts.is_empty() {
        return None;
    }
    Some(firsts.partition_point(|f| f <= key).saturating_sub(1))
}

/// Folds `deltas` (latest wins) into the rows of one chunk; returns all rows sorted.
pub fn fold(chunk: Vec<(RowKey, Row)>, deltas: impl IntoIterator<Item = (RowKey, Row)>) -> Vec<(RowKey, Row)> {
    let mut rows: BTreeMap<RowKey, Row> = chunk.into_iter().collect();
    rows.extend(deltas);
    rows.into_iter().collect()
}

/// Base rows as loaded at open: every chunk row unless a delta replaces it, then the deltas.
pub fn overlay(chunks: Vec<(RowKey, Row)>, deltas: Vec<(RowKey, Row)>) -> Vec<(RowKey, Row)> {
    if deltas.is_empty() {
        return chunks;
    }
    let newer: BTreeMap<RowKey, Row> = deltas.into_iter().collect();
    let mut base: Vec<(RowKey, Row)> = chunks.into_iter().filter(|(k, _)| !newer.contains_key(k)).collect();
    base.extend(newer);
    base
}

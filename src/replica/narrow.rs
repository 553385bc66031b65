//! A read narrowed to what is wanted (PROTOCOL §7, "Queries over indexes
//! on disk"): a query that needs a few rows of many chunks keeps those
//! rows, not their chunks.

use crate::protocol::RowKey;
use crate::store::{spans, Provided, ProvidedRows, StoreError, Want};

/// Of what a store read, only the spans `wants` names, each row decoded:
/// a query that needs a few rows of many chunks keeps those rows, not
/// their chunks (PROTOCOL §7, "Queries over indexes on disk"). Each want
/// is answered for exactly where a read answered for it.
pub fn narrow(provided: Vec<Provided>, wants: &[Want]) -> Result<Vec<Provided>, StoreError> {
    let mut out = Vec::new();
    for p in provided {
        let meets: Vec<&Want> = wants.iter().filter(|w| w.meets(&p.from, p.to.as_ref())).collect();
        if meets.is_empty() {
            continue;
        }
        // The rows of the read: an encoding-4 chunk is searched as stored
        // (each row checked, only the wanted ones decoded); else decoded.
        let (bytes, starts, decoded) = match p.rows {
            ProvidedRows::Chunk(bytes) => match crate::chunks::split_chunk(&bytes)? {
                Some(starts) => (bytes, starts, Vec::new()),
                None => (Vec::new(), Vec::new(), crate::chunks::decode_chunk(&bytes)?),
            },
            ProvidedRows::Rows(rows) => (Vec::new(), Vec::new(), rows),
        };
        let n = if starts.is_empty() { decoded.len() } else { starts.len() };
        let key_at = |i: usize| -> Result<RowKey, StoreError> {
            if starts.is_empty() {
                return Ok(decoded[i].0.clone());
            }
            let (t, r, s) = crate::chunks::key_of(&bytes[starts[i] as usize..])?;
            Ok(RowKey { table: t.to_owned(), row_id: r.to_owned(), space: s.to_owned() })
        };
        for w in meets {
            let from = if w.from > p.from { w.from.clone() } else { p.from.clone() };
            let to = match (&w.to, &p.to) {
                (Some(a), Some(b)) => Some(if a < b { a.clone() } else { b.clone() }),
                (a, b) => a.clone().or_else(|| b.clone()),
            };
            // The first row at or past `from`, by bisection.
            let (mut lo, mut hi) = (0, n);
            while lo < hi {
                let mid = (lo + hi) / 2;
                if key_at(mid)? < from {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            let mut rows = Vec::new();
            for i in lo..n {
                let key = key_at(i)?;
                if !spans(&from, to.as_ref(), &key) {
                    break;
                }
                rows.push(if starts.is_empty() {
                    decoded[i].clone()
                } else {
                    let end = starts.get(i + 1).map_or(bytes.len(), |e| *e as usize);
                    crate::chunks::decode_row(&bytes[starts[i] as usize..end])?
                });
            }
            out.push(Provided { from, to, rows: ProvidedRows::Rows(rows) });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{OpId, Row};

    #[test]
    fn a_read_narrowed_keeps_the_wanted_rows_alone_and_answers_where_it_read() {
        let row = |n: f64| {
            let mut r = Row::default();
            r.cells.insert(
                "reps".into(),
                crate::protocol::Cell {
                    value: crate::protocol::Value::Number(n),
                    mark: crate::protocol::Mark { at: 1, op_id: OpId::new("s:1") },
                },
            );
            r
        };
        let keys: Vec<RowKey> = ["a", "b", "c", "d", "e"].iter().map(|id| RowKey::new("sets", *id)).collect();
        let rows: Vec<(RowKey, Row)> = keys.iter().enumerate().map(|(i, k)| (k.clone(), row(i as f64))).collect();
        let chunk = crate::chunks::encode_snapshot(&rows).unwrap();
        let read = |r: ProvidedRows| vec![Provided { from: RowKey::new("", ""), to: Some(RowKey::new("sets", "d")), rows: r }];
        let wants = [Want::row(&keys[1]), Want { from: keys[2].clone(), to: None }, Want::row(&RowKey::new("sets", "bb"))];
        for provided in [read(ProvidedRows::Chunk(chunk.clone())), read(ProvidedRows::Rows(rows.clone()))] {
            let got = narrow(provided, &wants).unwrap();
            let spans: Vec<(String, Option<String>, Vec<String>)> = got
                .iter()
                .map(|p| {
                    let ids = match &p.rows {
                        ProvidedRows::Rows(r) => r.iter().map(|(k, _)| k.row_id.clone()).collect(),
                        ProvidedRows::Chunk(_) => panic!("decoded"),
                    };
                    (p.from.row_id.clone(), p.to.as_ref().map(|t| t.row_id.clone()), ids)
                })
                .collect();
            assert_eq!(
                spans,
                [
                    ("b".into(), Some("b".into()), vec!["b".into()]),
                    ("c".into(), Some("d".into()), vec!["c".into()]),
                    ("bb".into(), Some("bb".into()), vec![]),
                ],
                "one row; a span cut where the read ended (d, e unread); a row that is not there"
            );
        }
    }
}

//! Rows to and from their two JSON text columns, seqs to and from bigint.

use marksync::protocol::{fields_of, marks_of, unique_fields, unique_marks, Row, MAX_SAFE_INTEGER};

use super::error::DbError;

/// A row as its `fields` and `marks` JSON texts.
pub(crate) fn encode_row(row: &Row) -> Result<(String, String), DbError> {
    let f = serde_json::to_string(&fields_of(row)).map_err(|e| DbError::Corrupt(format!("encode fields: {e}")))?;
    let m = serde_json::to_string(&marks_of(row)).map_err(|e| DbError::Corrupt(format!("encode marks: {e}")))?;
    Ok((f, m))
}

/// A row from its `fields` and `marks` JSON texts.
pub(crate) fn decode_row(fields: &str, marks: &str) -> Result<Row, DbError> {
    let f = whole(fields, |d| unique_fields(d)).map_err(|e| DbError::Corrupt(format!("stored fields: {e}")))?;
    let m = whole(marks, |d| unique_marks(d)).map_err(|e| DbError::Corrupt(format!("stored marks: {e}")))?;
    Row::from_wire(f, m).map_err(DbError::Corrupt)
}

/// `text` read by `read`, nothing after it (what `serde_json::from_str` checks).
fn whole<'a, T>(
    text: &'a str,
    read: impl FnOnce(&mut serde_json::Deserializer<serde_json::de::StrRead<'a>>) -> serde_json::Result<T>,
) -> serde_json::Result<T> {
    let mut d = serde_json::Deserializer::from_str(text);
    let v = read(&mut d)?;
    d.end()?;
    Ok(v)
}

/// A stored bigint seq as the protocol's integer.
pub(crate) fn seq_from_db(seq: i64) -> Result<u64, DbError> {
    u64::try_from(seq)
        .ok()
        .filter(|s| *s <= MAX_SAFE_INTEGER)
        .ok_or_else(|| DbError::Corrupt(format!("seq {seq} out of range")))
}

/// A protocol seq as a bigint.
pub(crate) fn seq_to_db(seq: u64) -> Result<i64, DbError> {
    i64::try_from(seq).map_err(|_| DbError::Corrupt(format!("seq {seq} out of range")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use marksync::protocol::{Cell, Mark, OpId, Value};

    #[test]
    fn a_row_round_trips_through_its_columns() {
        let mut row = Row::default();
        let mark = Mark { at: (1 << 53) - 1, op_id: OpId::new("d:1") };
        row.cells.insert("reps".into(), Cell { value: Value::Number(5.0), mark: mark.clone() });
        row.cells.insert("note".into(), Cell { value: Value::String("é\"x".into()), mark });
        let (f, m) = encode_row(&row).unwrap();
        assert_eq!(f, r#"{"note":"é\"x","reps":5}"#);
        assert!(m.contains(r#""at":9007199254740991"#), "{m}");
        assert_eq!(decode_row(&f, &m).unwrap(), row);
        assert!(decode_row(&f, "{}").is_err());
    }

    #[test]
    fn seqs_are_checked() {
        assert_eq!(seq_from_db(17).unwrap(), 17);
        assert!(seq_from_db(-1).is_err());
        assert_eq!(seq_to_db(17).unwrap(), 17);
    }
}

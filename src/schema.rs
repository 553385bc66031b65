//! The app schema the server validates rows against (PROTOCOL §3, step 1).
//!
//! The row **after** the op is checked, never the op alone: an op that sets
//! only `reps` on a row that already has `exercise` and `weightKg` is valid.
//! Tombstones (`_deleted: true`) are checked like any row, except that they
//! need no required field: a delete is `{"_deleted": true}` and nothing else.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::protocol::{Row, Value, DELETED};

/// The schema file: `{"version": 1, "tables": {"sets": {"fields": {…}}}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Schema {
    /// The newest op `schema` version the server accepts.
    pub version: u32,
    /// Table name → its rules.
    pub tables: BTreeMap<String, TableRules>,
}

/// The rules of one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TableRules {
    /// Field name → its rule. Fields not named here are `unknown_field`.
    pub fields: BTreeMap<String, FieldRule>,
}

/// The type a field's value must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// A string.
    String,
    /// Any finite number.
    Number,
    /// A number without fraction.
    Integer,
    /// true or false.
    Boolean,
}

/// The rule of one field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRule {
    /// The value's type (null is always allowed for a field that is not required).
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// Whether the row must have a non-null value.
    #[serde(default)]
    pub required: bool,
    /// Longest string, in Unicode code points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// Smallest number allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest number allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// Why a row is refused: a machine code and a human reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    /// Machine code (see [`RefusalCode`]).
    pub code: RefusalCode,
    /// Human reason, stable word for word for the same row and schema.
    pub reason: String,
}

/// The rejection codes of the reference schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalCode {
    /// A required field is missing (or null); the reason names every one.
    MissingFields,
    /// A value has the wrong type.
    WrongType,
    /// A number is below `min` or above `max`.
    OutOfRange,
    /// A string is longer than `maxLength`.
    TooLong,
    /// The row has a field the table does not define.
    UnknownField,
    /// The table is not in the schema.
    UnknownTable,
}

impl RefusalCode {
    /// The code on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalCode::MissingFields => "missing_fields",
            RefusalCode::WrongType => "wrong_type",
            RefusalCode::OutOfRange => "out_of_range",
            RefusalCode::TooLong => "too_long",
            RefusalCode::UnknownField => "unknown_field",
            RefusalCode::UnknownTable => "unknown_table",
        }
    }
}

fn refuse(code: RefusalCode, reason: String) -> Result<(), Refusal> {
    Err(Refusal { code, reason })
}

/// Formats a number for a reason: `100`, not `100.0`.
fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

impl Schema {
    /// The workout diary of the demo: `sets` with exercise, weightKg and reps.
    pub fn workout() -> Schema {
        let json = r#"{"version": 1, "tables": {"sets": {"fields": {
            "exercise": {"type": "string", "required": true, "maxLength": 100},
            "weightKg": {"type": "number", "required": true, "min": 0, "max": 1000},
            "reps": {"type": "integer", "required": true, "min": 1, "max": 100}}}}}"#;
        // The text above is a constant checked by the `workout_schema_parses` test.
        serde_json::from_str(json).unwrap_or_else(|_| Schema { version: 1, tables: BTreeMap::new() })
    }

    /// Parses a schema file.
    pub fn from_json(text: &str) -> Result<Schema, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// Checks a row of `table` after an op. Checks, in order: the table exists;
    /// no unknown field; no missing required field (not on a tombstone); then
    /// each field's type, range and length, in field-name order.
    pub fn check_row(&self, table: &str, row: &Row) -> Result<(), Refusal> {
        let Some(rules) = self.tables.get(table) else {
            return refuse(RefusalCode::UnknownTable, format!("unknown table: {table}"));
        };
        for name in row.cells.keys() {
            if name != DELETED && !rules.fields.contains_key(name) {
                return refuse(RefusalCode::UnknownField, format!("unknown field: {name}"));
            }
        }
        // A tombstone once let unknown fields of any size through: now only
        // the required fields are spared, everything present is checked.
        let missing: Vec<&str> = rules
            .fields
            .iter()
            .filter(|_| !row.is_deleted())
            .filter(|(name, rule)| rule.required && matches!(row.get(name), None | Some(Value::Null)))
            .map(|(name, _)| name.as_str())
            .collect();
        if !missing.is_empty() {
            let s = if missing.len() == 1 { "" } else { "s" };
            return refuse(RefusalCode::MissingFields, format!("missing field{s}: {}", missing.join(", ")));
        }
        for (name, rule) in &rules.fields {
            match row.get(name) {
                None | Some(Value::Null) => {}
                Some(value) => rule.check(name, value)?,
            }
        }
        Ok(())
    }
}

impl FieldRule {
    fn check(&self, name: &str, value: &Value) -> Result<(), Refusal> {
        let wrong = |what: &str| refuse(RefusalCode::WrongType, format!("{name} must be {what}"));
        match (self.kind, value) {
            (FieldType::String, Value::String(s)) => {
                if let Some(max) = self.max_length {
                    if s.chars().count() > max {
                        return refuse(RefusalCode::TooLong, format!("{name} must be at most {max} characters"));
                    }
                }
                Ok(())
            }
            (FieldType::Number, Value::Number(n)) => self.check_range(name, *n),
            (FieldType::Integer, Value::Number(n)) if n.fract() == 0.0 => self.check_range(name, *n),
            (FieldType::Boolean, Value::Bool(_)) => Ok(()),
            (FieldType::String, _) => wrong("a string"),
            (FieldType::Number, _) => wrong("a number"),
            (FieldType::Integer, _) => wrong("an integer"),
            (FieldType::Boolean, _) => wrong("true or false"),
        }
    }

    fn check_range(&self, name: &str, n: f64) -> Result<(), Refusal> {
        if let Some(min) = self.min {
            if n < min {
                return refuse(RefusalCode::OutOfRange, format!("{name} must be at least {}", num(min)));
            }
        }
        if let Some(max) = self.max {
            if n > max {
                return refuse(RefusalCode::OutOfRange, format!("{name} must be at most {}", num(max)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Cell, Mark, OpId};

    fn row(fields: &[(&str, Value)]) -> Row {
        let mark = Mark { at: 1, op_id: OpId::new("d:1") };
        Row { cells: fields.iter().map(|(k, v)| (k.to_string(), Cell { value: v.clone(), mark: mark.clone() })).collect() }
    }

    fn full() -> Vec<(&'static str, Value)> {
        vec![("exercise", "squat".into()), ("weightKg", 82.5.into()), ("reps", 5i64.into())]
    }

    #[test]
    fn workout_schema_parses() {
        let s = Schema::workout();
        assert_eq!(s.version, 1);
        assert_eq!(s.tables["sets"].fields.len(), 3);
    }

    #[test]
    fn a_full_row_passes() {
        Schema::workout().check_row("sets", &row(&full())).unwrap();
    }

    #[test]
    fn every_code_and_reason() {
        let s = Schema::workout();
        let check = |fields: Vec<(&str, Value)>| s.check_row("sets", &row(&fields)).unwrap_err();
        let e = check(vec![("reps", 5i64.into())]);
        assert_eq!((e.code, e.reason.as_str()), (RefusalCode::MissingFields, "missing fields: exercise, weightKg"));
        let mut f = full();
        f[2].1 = 101i64.into();
        let e = check(f);
        assert_eq!((e.code, e.reason.as_str()), (RefusalCode::OutOfRange, "reps must be at most 100"));
        let mut f = full();
        f[2].1 = 5.5.into();
        assert_eq!(check(f).code, RefusalCode::WrongType);
        let mut f = full();
        f[1].1 = "heavy".into();
        assert_eq!(check(f).reason, "weightKg must be a number");
        let mut f = full();
        f[0].1 = "x".repeat(101).into();
        assert_eq!(check(f).code, RefusalCode::TooLong);
        let mut f = full();
        f.push(("mood", "ok".into()));
        assert_eq!(check(f).reason, "unknown field: mood");
        let e = s.check_row("runs", &row(&full())).unwrap_err();
        assert_eq!(e.code, RefusalCode::UnknownTable);
        let mut f = full();
        f[1].1 = Value::Null;
        assert_eq!(check(f).code, RefusalCode::MissingFields);
    }

    #[test]
    fn tombstones_need_no_required_field_but_are_checked_otherwise() {
        let s = Schema::workout();
        s.check_row("sets", &row(&[(DELETED, true.into())])).unwrap();
        assert!(s.check_row("sets", &row(&[(DELETED, false.into())])).is_err());
        let e = s.check_row("sets", &row(&[(DELETED, true.into()), ("junk", "x".repeat(4096).into())])).unwrap_err();
        assert_eq!((e.code, e.reason.as_str()), (RefusalCode::UnknownField, "unknown field: junk"));
        let e = s.check_row("sets", &row(&[(DELETED, true.into()), ("reps", 500i64.into())])).unwrap_err();
        assert_eq!(e.code, RefusalCode::OutOfRange);
        s.check_row("sets", &row(&[(DELETED, true.into()), ("reps", 5i64.into())])).unwrap();
    }
}

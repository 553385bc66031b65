//! The one order of values a query sorts, ranges and pages by — the same
//! in every engine, written once: `null < false < true < numbers < strings`,
//! numbers by value, strings by UTF-16 code units (as JavaScript's `<`).
//!
//! A range keeps to its bound's kind: `{ lt: 10 }` matches numbers below
//! 10, never `null`, a missing field or a string; booleans are one kind.

use std::cmp::Ordering;

use crate::protocol::Value;

/// The kinds of values, in their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `null` (and a missing field).
    Null,
    /// `false`, `true`.
    Bool,
    /// A finite number.
    Number,
    /// A string.
    String,
}

/// The kind of a value.
pub fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
    }
}

/// Strings by UTF-16 code units, as JavaScript compares them (UTF-8 bytes
/// order code points, which differs above U+FFFF).
pub fn cmp_text(a: &str, b: &str) -> Ordering {
    if a.is_ascii() && b.is_ascii() {
        return a.cmp(b);
    }
    a.encode_utf16().cmp(b.encode_utf16())
}

/// The total order of values.
pub fn cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        // Values are finite, so `partial_cmp` always answers (and -0 == 0).
        (Value::Number(x), Value::Number(y)) => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        (Value::String(x), Value::String(y)) => cmp_text(x, y),
        _ => kind(a).cmp(&kind(b)),
    }
}

/// A value in an index key, with the two ends every value sits between
/// (bounds of a range scan, never stored).
#[derive(Debug, Clone)]
pub enum Key {
    /// Below every value.
    Bottom,
    /// A value.
    Val(Value),
    /// Above every value.
    Top,
}

impl Key {
    /// The value, `None` for an end.
    pub fn value(&self) -> Option<&Value> {
        match self {
            Key::Val(v) => Some(v),
            _ => None,
        }
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Key::Val(a), Key::Val(b)) => cmp(a, b),
            (Key::Bottom, Key::Bottom) | (Key::Top, Key::Top) => Ordering::Equal,
            (Key::Bottom, _) | (_, Key::Top) => Ordering::Less,
            (Key::Top, _) | (_, Key::Bottom) => Ordering::Greater,
        }
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Key {}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: &str) -> Value {
        Value::String(x.into())
    }

    #[test]
    fn kinds_come_in_one_order_and_strings_compare_as_javascript_does() {
        let sorted = [
            Value::Null,
            Value::Bool(false),
            Value::Bool(true),
            Value::Number(-1e300),
            Value::Number(0.0),
            Value::Number(2.5),
            s(""),
            s("B"),
            s("a"),
        ];
        for (i, a) in sorted.iter().enumerate() {
            for (j, b) in sorted.iter().enumerate() {
                assert_eq!(cmp(a, b), i.cmp(&j), "{a:?} vs {b:?}");
            }
        }
        // U+FF61 is one UTF-16 unit; U+1F600 is a surrogate pair (0xD83D…): JS puts the emoji first.
        assert_eq!(cmp_text("\u{1F600}", "\u{FF61}"), Ordering::Less);
        assert_eq!("\u{1F600}".cmp("\u{FF61}"), Ordering::Greater, "bytes would say the opposite");
        assert_eq!(cmp(&Value::Number(-0.0), &Value::Number(0.0)), Ordering::Equal);
    }

    #[test]
    fn the_ends_hold_every_value_between_them() {
        for v in [Value::Null, Value::Bool(true), Value::Number(f64::MAX), s("\u{10FFFF}")] {
            assert!(Key::Bottom < Key::Val(v.clone()) && Key::Val(v) < Key::Top);
        }
    }
}

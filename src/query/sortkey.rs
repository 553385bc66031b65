//! Index entries as bytes whose byte order is the order of values
//! (`value.rs`): `null < false < true < numbers < strings`, strings by
//! UTF-16 code units, ties by rowId then space.
//!
//! Why bytes: an entry is one allocation compared with `memcmp`, where a
//! tuple of values and two strings was four or more allocations compared
//! value by value (an index of 100k rows held ~330 bytes per row, now ~110).
//! And bytes are what a store that keeps its index on disk orders by —
//! IndexedDB compares binary keys byte by byte — so the one order of
//! values has one encoding, written here and nowhere else.
//!
//! Each part is self-delimiting (no encoding is a prefix of another), so a
//! sequence of parts compares part by part:
//! - the ends: `00` below every value, `FF` above every value;
//! - `null` `10`; `false` `20`, `true` `21`;
//! - a number `30` + 8 bytes: the IEEE-754 bits, sign bit flipped for a
//!   positive number, every bit flipped for a negative one (so the bytes
//!   order as the numbers do; `-0` is written as `0`, which it equals);
//! - a string `40` + its text + `00 01`;
//! - a row `01` + rowId's text + `00 01` + space's text + `00 01`.
//!
//! Text is UTF-8 with two changes: `00` is written `00 FF` (so the
//! terminator `00 01` sorts below every character and a string below its
//! extensions), and the lead bytes `EE`/`EF` (U+E000–U+FFFF) are written
//! `F5`/`F6`, above the four-byte leads `F0`–`F4`: in UTF-16, U+E000–U+FFFF
//! come after the surrogate pairs of U+10000 and above, where UTF-8 puts
//! them before.

use super::value::Key;
use crate::protocol::Value;

const BOTTOM: u8 = 0x00;
const ROW: u8 = 0x01;
const NULL: u8 = 0x10;
const FALSE: u8 = 0x20;
const TRUE: u8 = 0x21;
const NUMBER: u8 = 0x30;
const STRING: u8 = 0x40;
const TOP: u8 = 0xFF;

/// Appends a text's encoding and its terminator.
fn text(out: &mut Vec<u8>, s: &str) {
    for &b in s.as_bytes() {
        match b {
            0x00 => out.extend_from_slice(&[0x00, 0xFF]),
            0xEE => out.push(0xF5),
            0xEF => out.push(0xF6),
            b => out.push(b),
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

/// Appends a value's encoding.
pub fn value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.push(NULL),
        Value::Bool(false) => out.push(FALSE),
        Value::Bool(true) => out.push(TRUE),
        Value::Number(n) => {
            // -0 == 0 in the order of values: one encoding for both.
            let bits = if *n == 0.0 { 0 } else { n.to_bits() };
            let ordered = if bits >> 63 == 1 { !bits } else { bits | (1 << 63) };
            out.push(NUMBER);
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        Value::String(s) => {
            out.push(STRING);
            text(out, s);
        }
    }
}

/// Appends a key's encoding: a value or an end.
pub fn key(out: &mut Vec<u8>, k: &Key) {
    match k {
        Key::Bottom => out.push(BOTTOM),
        Key::Val(v) => value(out, v),
        Key::Top => out.push(TOP),
    }
}

/// Appends a row's place in the tie-break order.
pub fn row(out: &mut Vec<u8>, row_id: &str, space: &str) {
    out.push(ROW);
    text(out, row_id);
    text(out, space);
}

/// Appends the end below every row.
pub fn bottom(out: &mut Vec<u8>) {
    out.push(BOTTOM);
}

/// Appends the end above every row.
pub fn top(out: &mut Vec<u8>) {
    out.push(TOP);
}

/// The length of the part at the start of `bytes` (`None` if it is cut short).
fn part_len(bytes: &[u8]) -> Option<usize> {
    match *bytes.first()? {
        BOTTOM | TOP | NULL | FALSE | TRUE => Some(1),
        NUMBER => (bytes.len() >= 9).then_some(9),
        STRING => text_len(&bytes[1..]).map(|n| n + 1),
        _ => None,
    }
}

/// The length of an encoded text at the start of `bytes`, terminator included.
fn text_len(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    loop {
        match bytes.get(i)? {
            0x00 => match bytes.get(i + 1)? {
                0x01 => return Some(i + 2),
                _ => i += 2,
            },
            _ => i += 1,
        }
    }
}

/// Decodes a text at the start of `bytes`: the text and the bytes after it.
fn decode_text(bytes: &[u8]) -> Option<(String, &[u8])> {
    let n = text_len(bytes)?;
    let mut out = Vec::with_capacity(n - 2);
    let mut i = 0;
    while i < n - 2 {
        match bytes[i] {
            0x00 => {
                out.push(0x00);
                i += 2;
            }
            0xF5 => {
                out.push(0xEE);
                i += 1;
            }
            0xF6 => {
                out.push(0xEF);
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    Some((String::from_utf8(out).ok()?, &bytes[n..]))
}

/// The row (rowId, space) an entry of `fields` values ends with; `None`
/// for an entry that ends with an end (a bound) or does not decode.
pub fn row_of(entry: &[u8], fields: usize) -> Option<(String, String)> {
    tie_of(entry, fields).and_then(|tie| {
        let rest = tie.strip_prefix(&[ROW])?;
        let (id, rest) = decode_text(rest)?;
        let (space, rest) = decode_text(rest)?;
        rest.is_empty().then_some((id, space))
    })
}

/// The bytes of an entry after its `fields` values: its tie.
pub fn tie_of(entry: &[u8], fields: usize) -> Option<&[u8]> {
    let mut at = 0;
    for _ in 0..fields {
        at += part_len(entry.get(at..)?)?;
    }
    entry.get(at..)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::query::value::cmp;
    use proptest::prelude::*;
    use std::cmp::Ordering;

    fn enc(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        value(&mut out, v);
        out
    }

    fn texts() -> impl Strategy<Value = String> {
        // Characters where the encodings differ: NUL, ASCII, two-byte, the
        // last before the surrogates, the private-use area (EE), the top of
        // the BMP (EF) and beyond it (four bytes).
        let chars = prop::sample::select(vec![
            '\0',
            '\u{1}',
            'a',
            'b',
            'é',
            '\u{D7FF}',
            '\u{E000}',
            '\u{FF61}',
            '\u{FFFF}',
            '\u{10000}',
            '\u{1F600}',
            '\u{10FFFF}',
        ]);
        prop::collection::vec(chars, 0..5).prop_map(|cs| cs.into_iter().collect())
    }

    fn values() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            prop::sample::select(vec![f64::MIN, -1e300, -2.5, -1.0, -f64::MIN_POSITIVE, -0.0, 0.0, 5e-324, 1.0, 2.5, 1e300, f64::MAX])
                .prop_map(Value::Number),
            any::<f64>().prop_filter("finite", |n| n.is_finite()).prop_map(Value::Number),
            texts().prop_map(Value::String),
        ]
    }

    proptest! {
        /// The rule: bytes order as values do, for single values and for
        /// entries (values, then a row) compared part by part.
        #[test]
        fn bytes_order_as_values_do(a in values(), b in values()) {
            prop_assert_eq!(enc(&a).cmp(&enc(&b)), cmp(&a, &b), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn entries_order_as_their_parts_do(a in prop::collection::vec(values(), 2), b in prop::collection::vec(values(), 2), ra in texts(), rb in texts(), sa in texts(), sb in texts()) {
            let entry = |vs: &[Value], r: &str, s: &str| {
                let mut out = Vec::new();
                vs.iter().for_each(|v| value(&mut out, v));
                row(&mut out, r, s);
                out
            };
            let by_parts = cmp(&a[0], &b[0])
                .then_with(|| cmp(&a[1], &b[1]))
                .then_with(|| crate::query::value::cmp_text(&ra, &rb))
                .then_with(|| crate::query::value::cmp_text(&sa, &sb));
            let (ea, eb) = (entry(&a, &ra, &sa), entry(&b, &rb, &sb));
            prop_assert_eq!(ea.cmp(&eb), by_parts);
            prop_assert_eq!(row_of(&ea, 2), Some((ra.clone(), sa.clone())), "the row decodes back");
        }

        #[test]
        fn the_ends_hold_every_value(v in values()) {
            let (mut lo, mut hi) = (Vec::new(), Vec::new());
            key(&mut lo, &Key::Bottom);
            key(&mut hi, &Key::Top);
            prop_assert!(lo < enc(&v) && enc(&v) < hi);
        }
    }

    /// Every pair of one- and two-character strings over the characters
    /// where the encodings differ, in both orders: not left to sampling.
    #[test]
    fn every_pair_of_short_strings_orders_as_javascript_does() {
        let cs = ['\0', 'a', 'é', '\u{D7FF}', '\u{E000}', '\u{EFFF}', '\u{F000}', '\u{FFFF}', '\u{10000}', '\u{10FFFF}'];
        let mut strings: Vec<String> = cs.iter().map(|c| c.to_string()).collect();
        for a in cs {
            for b in cs {
                strings.push([a, b].iter().collect());
            }
        }
        for a in &strings {
            for b in &strings {
                let (va, vb) = (Value::String(a.clone()), Value::String(b.clone()));
                assert_eq!(enc(&va).cmp(&enc(&vb)), cmp(&va, &vb), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn javascript_order_of_strings_not_utf8_order() {
        let (emoji, halfwidth) = (Value::String("\u{1F600}".into()), Value::String("\u{FF61}".into()));
        assert_eq!(enc(&emoji).cmp(&enc(&halfwidth)), Ordering::Less);
        assert_eq!(enc(&Value::Number(-0.0)), enc(&Value::Number(0.0)));
        assert_eq!(enc(&Value::String("a".into())).cmp(&enc(&Value::String("a\0".into()))), Ordering::Less);
    }

    #[test]
    fn a_bound_has_no_row() {
        let mut out = Vec::new();
        value(&mut out, &Value::Null);
        top(&mut out);
        assert_eq!(row_of(&out, 1), None);
        assert_eq!(row_of(&[NUMBER, 1], 1), None, "cut short");
    }
}

//! Reading JSON text into the protocol's types, objects as objects.
//!
//! serde_json reads a struct from an object *or* from an array of its
//! fields in order, and serde's derive writes both readers for every
//! struct; nothing marksync writes or is sent is such an array, yet the
//! wasm carried the second reader of each struct (10.4 KB gzip of the
//! package, measured with serde_json's array arm taken out; BENCHMARKS.md,
//! "The package, step by step"). [`from_str`] reads through `Objects`, a
//! deserializer that asks serde_json for a map wherever a struct is
//! wanted, at every depth, so the array reader is never built. A struct
//! written as an array is refused ("invalid type: sequence, expected
//! struct …"), as the protocol's shapes say it must be.
//!
//! Every other call is passed through unchanged; `Objects` only wraps
//! what it hands on (visitors, the map's and the sequence's accessors, the
//! seeds they deserialize with) so that the rule holds inside them too.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor};

/// `T` read from JSON text, every struct of it from an object (see the
/// module's doc). Same errors, positions and trailing-text check as
/// `serde_json::from_str`.
pub fn from_str<'a, T: de::Deserialize<'a>>(text: &'a str) -> Result<T, serde_json::Error> {
    whole(serde_json::Deserializer::from_str(text))
}

/// [`from_str`] of bytes (a request's body).
pub fn from_slice<'a, T: de::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, serde_json::Error> {
    whole(serde_json::Deserializer::from_slice(bytes))
}

/// The one value of `de`'s input, nothing after it (what serde_json's own
/// `from_str` checks).
fn whole<'a, R: serde_json::de::Read<'a>, T: de::Deserialize<'a>>(mut de: serde_json::Deserializer<R>) -> Result<T, serde_json::Error> {
    let value = T::deserialize(Objects(&mut de))?;
    de.end()?;
    Ok(value)
}

/// A deserializer that reads structs as maps (see the module's doc).
struct Objects<D>(D);

/// A visitor, accessor or seed whose inner deserializers are `Objects`.
struct Wrap<X>(X);

macro_rules! forward {
    ($($method:ident)*) => {
        $(fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.0.$method(Wrap(visitor))
        })*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Objects<D> {
    type Error = D::Error;

    forward! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64
        deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64 deserialize_char deserialize_str deserialize_string
        deserialize_bytes deserialize_byte_buf deserialize_option deserialize_unit deserialize_seq
        deserialize_map deserialize_identifier deserialize_ignored_any
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_unit_struct(name, Wrap(visitor))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_newtype_struct(name, Wrap(visitor))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple(len, Wrap(visitor))
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(self, name: &'static str, len: usize, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_tuple_struct(name, len, Wrap(visitor))
    }

    /// The one change: a struct is asked for as a map.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(Wrap(visitor))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(name, variants, Wrap(visitor))
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! visit {
    ($($method:ident: $t:ty)*) => {
        $(fn $method<E: de::Error>(self, v: $t) -> Result<V::Value, E> {
            self.0.$method(v)
        })*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.expecting(f)
    }

    visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64 visit_i128: i128
        visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64 visit_u128: u128
        visit_f32: f32 visit_f64: f64 visit_char: char visit_str: &str visit_borrowed_str: &'de str
        visit_string: String visit_bytes: &[u8] visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.0.visit_unit()
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_some(Objects(d))
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.0.visit_newtype_struct(Objects(d))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.0.visit_seq(Wrap(seq))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.0.visit_map(Wrap(map))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.0.visit_enum(Wrap(data))
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(Objects(d))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, A::Error> {
        self.0.next_element_seed(Wrap(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        self.0.next_key_seed(Wrap(seed))
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.0.next_value_seed(Wrap(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.0.size_hint()
    }
}

impl<'de, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<A> {
    type Error = A::Error;
    type Variant = Wrap<A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<(T::Value, Self::Variant), A::Error> {
        self.0.variant_seed(Wrap(seed)).map(|(v, variant)| (v, Wrap(variant)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.0.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.0.newtype_variant_seed(Wrap(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.0.tuple_variant(len, Wrap(visitor))
    }

    /// A struct variant's content is an object too: read as a newtype's
    /// content, asked for as a map (serde_json's own `struct_variant` asks
    /// for a struct, building the array reader again).
    fn struct_variant<V: Visitor<'de>>(self, _fields: &'static [&'static str], visitor: V) -> Result<V::Value, A::Error> {
        self.0.newtype_variant_seed(AsMap(visitor))
    }
}

/// A seed that reads its value as a map with the visitor it holds.
struct AsMap<V>(V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for AsMap<V> {
    type Value = V::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_map(Wrap(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{Op, PushRequest, Value};

    const OP: &str = r#"{"opId":"d:1","table":"sets","rowId":"d-1","fields":{"reps":5,"note":"é\"x"},"at":10}"#;

    #[test]
    fn objects_are_read_at_every_depth_as_serde_json_reads_them() {
        let body = format!(r#"{{"attemptKey":"a1","batch":[{OP},{OP}]}}"#);
        let ours: PushRequest = from_str(&body).unwrap();
        assert_eq!(ours, serde_json::from_str::<PushRequest>(&body).unwrap());
        assert_eq!(ours.batch[1].fields.get("note"), Some(&Value::String("é\"x".into())));
        assert_eq!(from_slice::<PushRequest>(body.as_bytes()).unwrap(), ours);
        // Options, numbers, strings, enums: a whole op, and text after the value refused.
        assert_eq!(from_str::<Option<Op>>("null").unwrap(), None);
        assert!(from_str::<Op>(&format!("{OP} x")).is_err());
    }

    #[test]
    fn a_struct_written_as_an_array_is_refused_at_every_depth() {
        // serde_json alone takes these (a struct from its fields in order).
        let top = r#"["d:1","sets","d-1",{"reps":5},10]"#;
        let nested = format!(r#"{{"attemptKey":"a1","batch":[{top}]}}"#);
        assert!(serde_json::from_str::<Op>(top).is_ok() && serde_json::from_str::<PushRequest>(&nested).is_ok());
        let e = from_str::<Op>(top).unwrap_err().to_string();
        assert!(e.starts_with("invalid type: sequence, expected struct Op"), "{e}");
        let e = from_str::<PushRequest>(&nested).unwrap_err().to_string();
        assert!(e.contains("invalid type: sequence, expected struct Op"), "{e}");
        let e = from_str::<PushRequest>(r#"["a1",[]]"#).unwrap_err().to_string();
        assert!(e.contains("expected struct PushRequest"), "{e}");
    }

    #[test]
    fn a_struct_variant_is_read_from_an_object_only() {
        use crate::schema::Step;
        let step: Step = from_str(r#"{"renameField": {"table": "sets", "from": "a", "to": "b"}}"#).unwrap();
        assert_eq!(step, Step::RenameField { table: "sets".into(), from: "a".into(), to: "b".into() });
        let array = r#"{"renameField": ["sets", "a", "b"]}"#;
        assert!(serde_json::from_str::<Step>(array).is_ok());
        let e = from_str::<Step>(array).unwrap_err().to_string();
        assert!(e.starts_with("invalid type: sequence, expected struct variant Step::RenameField"), "{e}");
        let e = from_str::<Step>(r#"{"renameField": {"table": "sets", "from": "a", "to": "b", "x": 1}}"#).unwrap_err();
        assert!(e.to_string().starts_with("unknown field `x`"), "{e}");
    }

    #[test]
    fn every_number_is_read_back_as_the_very_double_written() {
        // Two a fast parser reads one ULP off: a value the server stores and
        // sends on would differ from the device's, under the same mark, and
        // 1000.0000000000001 would pass a bound of 1000.
        let mut xs = vec![406.881_374_020_916_27, 1_000.000_000_000_000_1, 5e-324, f64::MAX, -0.1, 0.1 + 0.2];
        // And doubles across the whole range, from a fixed seed (xorshift).
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        while xs.len() < 10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let f = f64::from_bits(x);
            if f.is_finite() {
                xs.push(f);
                xs.push((x % 1_000_000_000) as f64 / 1e6);
            }
        }
        for f in xs {
            let text = serde_json::to_string(&Value::Number(f)).unwrap();
            match from_str::<Value>(&text).unwrap() {
                Value::Number(g) => assert_eq!(g.to_bits(), if f == 0.0 { 0.0f64.to_bits() } else { f.to_bits() }, "{text}"),
                v => panic!("{text} read as {v:?}"),
            }
        }
    }

    #[test]
    fn errors_say_where_as_serde_json_says_it() {
        let bad = r#"{"opId":"d:1","table":"sets","rowId":"d-1","fields":{"reps":5},"at":"10"}"#;
        let e = from_str::<Op>(bad).unwrap_err().to_string();
        assert_eq!(e, serde_json::from_str::<Op>(bad).unwrap_err().to_string());
        assert!(e.contains("line 1 column"), "{e}");
    }
}

//! Enums written as one word (a code, a role, a field's type): serde reads
//! and writes them through the enum's own `as_str` and `parse`, so the word
//! is spelled once — not once there and again in a `rename_all` that could
//! drift from it — and the wasm carries one match per enum, not serde's
//! generated variant visitors for each format (issue 21, "The package").

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserializer, Visitor};
use serde::Serializer;

/// An enum every value of which is one word.
pub trait Word: Sized + Copy + 'static {
    /// Every word, for the error that names what was expected.
    const WORDS: &'static [&'static str];
    /// The value's word.
    fn word(self) -> &'static str;
    /// The value written `s`, if any.
    fn from_word(s: &str) -> Option<Self>;
}

/// `Serialize` for a [`Word`] (the body of the one `words!` writes).
pub fn serialize<W: Word, S: Serializer>(w: &W, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(w.word())
}

/// `Deserialize` for a [`Word`]: a string that is one of its words, else
/// serde's own "unknown variant `x`, expected one of …".
pub fn deserialize<'de, W: Word, D: Deserializer<'de>>(d: D) -> Result<W, D::Error> {
    d.deserialize_str(WordVisitor(PhantomData))
}

struct WordVisitor<W>(PhantomData<W>);

impl<W: Word> Visitor<'_> for WordVisitor<W> {
    type Value = W;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("one of ")?;
        for (i, w) in W::WORDS.iter().enumerate() {
            f.write_str(if i == 0 { "`" } else { ", `" })?;
            f.write_str(w)?;
            f.write_str("`")?;
        }
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<W, E> {
        W::from_word(v).ok_or_else(|| E::unknown_variant(v, W::WORDS))
    }
}

/// An enum of words, each variant with its word written once beside it:
/// its `ALL`, `as_str` and `parse`, its [`Word`], and serde through them.
macro_rules! words {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $($(#[$doc:meta])* $variant:ident = $text:literal,)* }
    ) => {
        $(#[$meta])*
        pub enum $name {
            $($(#[$doc])* $variant,)*
        }

        impl $name {
            /// Every value, in the order declared: whoever counts or lists
            /// them (the server's metrics) follows a new one without a change.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The value as it is written on the wire and stored.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The value written `s`, if it is one.
            pub fn parse(s: &str) -> Option<$name> {
                match s {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl $crate::protocol::word::Word for $name {
            const WORDS: &'static [&'static str] = &[$($text,)*];
            fn word(self) -> &'static str {
                self.as_str()
            }
            fn from_word(s: &str) -> Option<$name> {
                $name::parse(s)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $crate::protocol::word::serialize(self, s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::protocol::word::deserialize(d)
            }
        }
    };
}
pub(crate) use words;

#[cfg(test)]
mod tests {
    use super::Word;
    use crate::protocol::space::Role;
    use crate::protocol::Code;
    use crate::schema::FieldType;

    fn reads_back_each_word<W: Word + PartialEq + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned>() {
        for w in W::WORDS {
            let v = W::from_word(w).unwrap();
            assert_eq!(v.word(), *w);
            assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{w}\""));
            assert_eq!(serde_json::from_str::<W>(&format!("\"{w}\"")).unwrap(), v);
        }
    }

    #[test]
    fn every_word_is_its_value_on_the_wire_and_back() {
        reads_back_each_word::<Role>();
        reads_back_each_word::<FieldType>();
        reads_back_each_word::<Code>();
        // Each value its own word, as the wire and the database spell it.
        let roles = [Role::Owner, Role::Editor, Role::Viewer].map(Role::as_str);
        assert_eq!(roles, ["owner", "editor", "viewer"]);
        let types = [FieldType::String, FieldType::Number, FieldType::Integer, FieldType::Boolean].map(Word::word);
        assert_eq!(types, ["string", "number", "integer", "boolean"]);
        assert_eq!((Code::WrongUser.as_str(), Code::MissingFields.word()), ("wrong_user", "missing_fields"));
    }

    #[test]
    fn a_word_that_is_none_is_refused_naming_the_words_there_are() {
        let e = serde_json::from_str::<Role>("\"admin\"").unwrap_err().to_string();
        assert!(e.starts_with("unknown variant `admin`, expected one of `owner`, `editor`, `viewer`"), "{e}");
        let e = serde_json::from_str::<FieldType>("3").unwrap_err().to_string();
        assert!(e.starts_with("invalid type: integer `3`, expected one of `string`, `number`"), "{e}");
        // Case counts: the words are the wire's, exactly.
        assert!(serde_json::from_str::<Role>("\"Owner\"").is_err());
    }
}

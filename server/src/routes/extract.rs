//! What handlers read from a request besides the user: a body within its
//! limit, decoded as JSON — checked first for a key that appears twice in
//! any object, which is a 400 naming its path, never "the last one wins" —
//! and the query string.

use std::collections::HashMap;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use marksync::protocol::ErrorCode;

use super::REQUEST_ENCODINGS;
use crate::error::ApiError;

/// A request body's coding, checked before the body is decoded (PROTOCOL
/// §5a): one coding the server takes, written in any case (codings are
/// case-insensitive, RFC 9110 §8.4.1) and passed on in the lowercase the
/// decoder matches. Any other — several, stacked, unknown — is a 415
/// `unsupported_encoding` in the API's own words (the decoder's own 415
/// has no body, so no code a client could act on).
pub(crate) async fn codings(mut req: Request, next: Next) -> Response {
    let mut said = req.headers().get_all(header::CONTENT_ENCODING).iter();
    let (Some(first), None) = (said.next(), said.next()) else {
        if req.headers().contains_key(header::CONTENT_ENCODING) {
            return unsupported("several Content-Encoding headers");
        }
        return next.run(req).await;
    };
    let coding = first.to_str().unwrap_or_default().trim().to_ascii_lowercase();
    if coding != "identity" && !REQUEST_ENCODINGS.split(',').any(|c| c.trim() == coding) {
        let shown: String = first.to_str().unwrap_or("(not text)").chars().take(40).collect();
        return unsupported(&format!("Content-Encoding {shown:?}"));
    }
    if let Ok(v) = HeaderValue::from_str(&coding) {
        req.headers_mut().insert(header::CONTENT_ENCODING, v);
    }
    next.run(req).await
}

fn unsupported(what: &str) -> Response {
    let message = format!("{what}: the server decodes a body sent plain or in one of {REQUEST_ENCODINGS}");
    ApiError::new(ErrorCode::UnsupportedEncoding, message).into_response()
}

/// Whether the request's device reads the cells' notes inside marks
/// (PROTOCOL §2a): a device older than them names nothing, and gets rows
/// without them, which its strict reader takes.
pub(crate) fn reads_notes(headers: &HeaderMap) -> bool {
    let h = headers.get(marksync::protocol::ACCEPT_HEADER).and_then(|v| v.to_str().ok());
    marksync::protocol::accepts(h, marksync::protocol::ACCEPT_NOTES)
}

/// Drops the answer's notes unless the request reads them ([`reads_notes`]).
pub(crate) fn for_reader<T: marksync::protocol::DropNotes>(headers: &HeaderMap, mut answer: T) -> T {
    if !reads_notes(headers) {
        answer.drop_notes();
    }
    answer
}

/// A query string as axum hands it over: its pairs in order, or why it does
/// not parse (a 400 of ours, not axum's).
pub(crate) type QueryParams = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// How much of a too-large body is still read (and thrown away) before the 413
/// is sent, as a multiple of the limit: a client that is still sending when the
/// server answers and closes gets a broken pipe instead of the 413. Beyond
/// this (or after [`DRAIN_TIME`]) the server answers anyway and closes.
const DRAIN_FACTOR: u64 = 16;
/// The longest time spent draining a too-large body.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Reads the body, counting the bytes actually received (never trusting
/// Content-Length alone): more than `limit` is 413 `payload_too_large`.
pub(crate) async fn read_body(headers: &HeaderMap, mut body: Body, limit: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::new(ErrorCode::PayloadTooLarge, format!("the body is larger than {limit} bytes"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let drain_cap = (limit as u64).saturating_mul(DRAIN_FACTOR);
    if declared.is_some_and(|n| n > drain_cap) {
        return Err(too_large());
    }
    let mut buf: Vec<u8> = Vec::with_capacity(declared.map_or(8192, |n| n.min(limit as u64) as usize));
    let mut seen: u64 = 0;
    let drain_until = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let next = if seen > limit as u64 {
            match tokio::time::timeout_at(drain_until, body.frame()).await {
                Ok(f) => f,
                Err(_) => return Err(too_large()),
            }
        } else {
            body.frame().await
        };
        let Some(frame) = next else { break };
        let frame = frame.map_err(|_| ApiError::bad_request("the body could not be read"))?;
        if let Ok(data) = frame.into_data() {
            seen += data.len() as u64;
            if seen > drain_cap {
                return Err(too_large());
            }
            if seen <= limit as u64 {
                buf.extend_from_slice(&data);
            }
        }
    }
    if seen > limit as u64 {
        return Err(too_large());
    }
    Ok(Bytes::from(buf))
}

/// Reads a body within the limit and decodes it as `what` (a 400 names
/// it): every route's JSON body comes through here.
pub(crate) async fn read_json<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    what: &str,
) -> Result<T, ApiError> {
    let bytes = read_body(headers, body, limit).await?;
    checked_json(&bytes, what)
}

/// Decodes `bytes` as `what`, refusing a key twice in any object (the path named).
pub(crate) fn checked_json<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, ApiError> {
    let refused = |e: serde_json::Error| ApiError::bad_request(format!("the body is not {what}: {e}"));
    let mut de = serde_json::Deserializer::from_slice(bytes);
    match serde::de::DeserializeSeed::deserialize(unique::Keys { at: &unique::At::Root }, &mut de) {
        Ok(()) => {}
        // Malformed JSON: the typed decoding below says where, in its words.
        Err(e) if !e.is_data() => {}
        Err(e) => return Err(refused(e)),
    }
    marksync::json::from_slice(bytes).map_err(refused)
}

/// The query string's parameters, or a 400.
pub(crate) fn query(q: QueryParams) -> Result<HashMap<String, String>, ApiError> {
    let Query(pairs) = q.map_err(|_| ApiError::bad_request("the query string does not parse"))?;
    crate::params::by_name(pairs)
}

/// A walk over any JSON value that fails at the first object key seen twice.
/// It allocates nothing on the way (keys borrowed from the body, the path a
/// chain on the stack, written out only for the error): a 1000-op push is
/// walked once more than it is decoded, and that walk should cost little.
mod unique {
    use std::borrow::Cow;
    use std::collections::HashSet;
    use std::fmt;

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

    /// Where a value sits in the body: the chain up to the root.
    #[derive(Clone, Copy)]
    pub(super) enum At<'p> {
        Root,
        Key(&'p At<'p>, &'p str),
        Index(&'p At<'p>, usize),
    }

    impl fmt::Display for At<'_> {
        fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
            match *self {
                At::Root => Ok(()),
                At::Index(up, i) => write!(f, "{up}[{i}]"),
                At::Key(up, key) => {
                    let plain = key.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                        && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
                    if !plain {
                        return write!(f, "{up}[{}]", serde_json::Value::from(key));
                    }
                    match up {
                        At::Root => f.write_str(key),
                        _ => write!(f, "{up}.{key}"),
                    }
                }
            }
        }
    }

    /// The value at `at`.
    pub(super) struct Keys<'p> {
        pub at: &'p At<'p>,
    }

    impl<'de> DeserializeSeed<'de> for Keys<'_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    /// Keys seen in one object: a short list searched in place, a set past it
    /// (a pull's `spaces` may name 10,000).
    enum Seen<'de> {
        Few(Vec<Cow<'de, str>>),
        Many(HashSet<Cow<'de, str>>),
    }

    impl<'de> Seen<'de> {
        /// Whether `key` was new.
        fn insert(&mut self, key: Cow<'de, str>) -> bool {
            match self {
                Seen::Few(keys) if keys.contains(&key) => false,
                Seen::Few(keys) if keys.len() < 16 => {
                    keys.push(key);
                    true
                }
                Seen::Few(keys) => {
                    let mut set: HashSet<_> = keys.drain(..).collect();
                    set.insert(key);
                    *self = Seen::Many(set);
                    true
                }
                Seen::Many(set) => set.insert(key),
            }
        }
    }

    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("JSON")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            let mut seen = Seen::Few(Vec::new());
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                let at = At::Key(self.at, &key);
                // A borrowed key's clone is free; only a key with escapes was copied.
                if !seen.insert(key.clone()) {
                    return Err(de::Error::custom(format_args!("{at}: the key appears twice")));
                }
                map.next_value_seed(Keys { at: &at })?;
            }
            Ok(())
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0usize;
            loop {
                let at = At::Index(self.at, i);
                if seq.next_element_seed(Keys { at: &at })?.is_none() {
                    return Ok(());
                }
                i += 1;
            }
        }

        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_none<E>(self) -> Result<(), E> {
            Ok(())
        }
        fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(IgnoredAny).map(|_| ())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(body: &str) -> Option<String> {
        checked_json::<serde_json::Value>(body.as_bytes(), "x").err().map(|e| e.message)
    }

    #[test]
    fn a_key_twice_anywhere_is_refused_with_its_path() {
        assert_eq!(problem(r#"{"a": 1, "b": [{"c": {}}]}"#), None);
        let p = problem(r#"{"spaces": {"gym": {"cursor": 1}, "gym": {"cursor": 0}}}"#).unwrap();
        assert!(p.contains("spaces.gym: the key appears twice"), "{p}");
        let p = problem(r#"{"batch": [{}, {"fields": {"reps": 1, "reps": 2}}]}"#).unwrap();
        assert!(p.contains("batch[1].fields.reps: the key appears twice"), "{p}");
        let p = problem(r#"{"spaces": {"~a b": {}, "~a b": {}}}"#).unwrap();
        assert!(p.contains(r#"spaces["~a b"]: the key appears twice"#), "{p}");
        let p = problem(r#"{"a": 1, "a": 1}"#).unwrap();
        assert!(p.contains("a: the key appears twice"), "{p}");
        // Past 16 keys the seen keys move to a set: a key twice is still found.
        let many: Vec<String> = (0..40).map(|i| format!("\"s{i}\": {{}}")).collect();
        assert_eq!(problem(&format!("{{\"spaces\": {{{}}}}}", many.join(","))), None);
        let p = problem(&format!("{{\"spaces\": {{{}, \"s3\": {{}}}}}}", many.join(","))).unwrap();
        assert!(p.contains("spaces.s3: the key appears twice"), "{p}");
        // Escapes decode first: "\u0061" is "a".
        assert!(problem(r#"{"a": 1, "a": 2}"#).is_some());
    }
}

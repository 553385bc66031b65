//! Reading the arguments of the public API from JS values.
//!
//! Every public method takes its arguments as `JsValue` and reads them here,
//! so that a number where a string belongs, a `bigint`, a lone surrogate or a
//! function never reaches the wasm as something else: the caller gets an
//! `Error` with code `bad_input` that names the argument and its JS type, and
//! nothing is recorded (no id is spent). What JSON cannot say is refused, not
//! bent: `undefined` field values are skipped as `JSON.stringify` skips them.

use js_sys::{Array, JsString, Reflect};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};

use super::js_error;
use crate::protocol::{Code, Fields, Value, DELETED};

// Reading an argument may run the caller's code — a getter, a Proxy's trap —
// and what that code throws must come back here as a value: an exception
// unwinding through the wasm skips its destructors and leaves the engine
// borrowed for the life of the page (every later edit then aborts). js-sys's
// `Array.isArray`, `Object.keys` and its reads of an array's items do not
// catch; these do, and every read of an argument goes through them or
// through `Reflect`, which does.
#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = Array, js_name = isArray, catch)]
    fn is_array_or_throw(v: &JsValue) -> Result<bool, JsValue>;
    #[wasm_bindgen(js_namespace = Object, js_name = keys, catch)]
    fn keys_or_throw(v: &JsValue) -> Result<Array, JsValue>;
    #[wasm_bindgen(js_namespace = Array, js_name = from, catch)]
    fn from_or_throw(v: &JsValue) -> Result<Array, JsValue>;
    #[wasm_bindgen(js_name = String, catch)]
    fn string_or_throw(v: &JsValue) -> Result<JsString, JsValue>;
}

/// `String(v)` as JS says it, or its type when even that throws.
pub fn shown(v: &JsValue) -> String {
    string_or_throw(v).map_or_else(|_| js_type(v), String::from)
}

/// The JS type of a value, for error messages: `typeof`, with `null` and `array` told apart.
pub fn js_type(v: &JsValue) -> String {
    if v.is_null() {
        "null".into()
    } else if is_array_or_throw(v).unwrap_or(false) {
        "array".into()
    } else {
        v.js_typeof().as_string().unwrap_or_else(|| "unknown".into())
    }
}

fn bad(message: String) -> JsValue {
    js_error(Code::BadInput.as_str(), &message)
}

/// `bad_input` for an argument whose reading threw, in the words it threw.
fn unreadable(what: &str, thrown: &JsValue) -> JsValue {
    let why = Reflect::get(thrown, &"message".into()).ok().and_then(|m| m.as_string()).or_else(|| thrown.as_string());
    bad(format!("{what} could not be read: it threw {}", why.map_or_else(|| js_type(thrown), |w| format!("{w:?}"))))
}

/// Whether `v` is an array (`what` names it if asking throws: a revoked Proxy).
pub fn is_array(v: &JsValue, what: &str) -> Result<bool, JsValue> {
    is_array_or_throw(v).map_err(|e| unreadable(what, &e))
}

/// The items of `v` if it is an array, read once into a list of our own
/// (so no getter or trap runs while they are read); `None` if it is not one.
pub fn list(v: &JsValue, what: &str) -> Result<Option<Vec<JsValue>>, JsValue> {
    if !is_array(v, what)? {
        return Ok(None);
    }
    Ok(Some(from_or_throw(v).map_err(|e| unreadable(what, &e))?.iter().collect()))
}

/// The own enumerable keys of object `v`, each well-formed text.
pub fn keys(v: &JsValue, what: &str) -> Result<Vec<String>, JsValue> {
    let keys = keys_or_throw(v).map_err(|e| unreadable(what, &e))?;
    keys.iter().map(|k| text(&k, &format!("a key of {what}"))).collect()
}

/// Whether `v` is a plain object: an object, not an array nor a function.
pub fn plain_object(v: &JsValue, what: &str) -> Result<bool, JsValue> {
    Ok(v.is_object() && !v.is_function() && !is_array(v, what)?)
}

/// A string argument: a JS string of well-formed UTF-16 (a lone surrogate
/// would become U+FFFD on the way in, silently).
pub fn text(v: &JsValue, what: &str) -> Result<String, JsValue> {
    let Some(s) = v.dyn_ref::<JsString>() else {
        return Err(bad(format!("{what} must be a string (got {})", js_type(v))));
    };
    if !s.is_valid_utf16() {
        return Err(bad(format!("{what} must be well-formed text (it holds a lone UTF-16 surrogate)")));
    }
    Ok(String::from(s))
}

/// An optional string: `undefined`/`null` are `None`.
pub fn opt_text(v: &JsValue, what: &str) -> Result<Option<String>, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    text(v, what).map(Some)
}

/// A table name argument: text, and a name a table may have (a read of a
/// name no edit could write is a mistake, never an empty answer).
pub fn table(v: &JsValue, what: &str) -> Result<String, JsValue> {
    let t = text(v, what)?;
    crate::protocol::check_table(&t).map_err(|p| bad(format!("{what} {p} (got {})", shown(v))))?;
    Ok(t)
}

/// An object's keys are all among `known` (one undefined is as absent): a
/// misspelt key is refused, never read as left out.
pub fn only_keys(v: &JsValue, what: &str, known: &[&str]) -> Result<(), JsValue> {
    for k in keys(v, what)? {
        if !known.contains(&k.as_str()) && !get(v, &k)?.is_undefined() {
            return Err(bad(format!("{what}.{k} is not one of its keys ({})", known.join(", "))));
        }
    }
    Ok(())
}

/// Property `k` of an options object (`undefined` when there is no object);
/// a getter that throws is `bad_input`, never read as absent.
pub fn get(options: &JsValue, k: &str) -> Result<JsValue, JsValue> {
    if !options.is_object() {
        return Ok(JsValue::UNDEFINED);
    }
    Reflect::get(options, &k.into()).map_err(|e| unreadable(k, &e))
}

/// An options argument: absent, or an object.
pub fn options(v: &JsValue, what: &str) -> Result<(), JsValue> {
    if v.is_undefined() || v.is_null() || plain_object(v, what)? {
        return Ok(());
    }
    Err(bad(format!("{what} must be an object (got {})", js_type(v))))
}

/// An optional boolean option.
pub fn opt_bool(options: &JsValue, k: &str, what: &str) -> Result<Option<bool>, JsValue> {
    let v = get(options, k)?;
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    v.as_bool().map(Some).ok_or_else(|| bad(format!("{what}.{k} must be true or false (got {})", js_type(&v))))
}

/// An optional integer option within `min..=max` (a JS number, never a string or a bigint).
pub fn opt_int(options: &JsValue, k: &str, what: &str, min: f64, max: f64) -> Result<Option<f64>, JsValue> {
    let v = get(options, k)?;
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    match v.as_f64() {
        Some(n) if n.fract() == 0.0 && n >= min && n <= max => Ok(Some(n)),
        Some(n) => Err(bad(format!("{what}.{k} must be a whole number from {min} to {max} (got {n})"))),
        None => Err(bad(format!("{what}.{k} must be a number (got {})", js_type(&v)))),
    }
}

/// What an edit's fields may echo of the row it edits: a spread of a row
/// from `rows()` carries `_id`, `_space` and maybe `_deleted: false`, and
/// those are dropped when they say what the row already is.
pub struct Echo<'a> {
    /// The row's id.
    pub row_id: &'a str,
    /// The name of the space the row is shown in (`_space`), `None` for the personal space.
    pub space: Option<&'a str>,
}

/// An edit's fields: a plain object of field → string, finite number,
/// boolean or null. `undefined` values are skipped; anything JSON has no
/// word for (a bigint, NaN, an object, a function, a lone surrogate) is
/// `bad_input`, as is a `_`-field that does not echo the row.
pub fn fields(v: &JsValue, what: &str, echo: &Echo<'_>) -> Result<Fields, JsValue> {
    if !plain_object(v, what)? {
        return Err(bad(format!("{what} must be an object of field → value (got {})", js_type(v))));
    }
    let mut out = Fields::new();
    for name in keys(v, what)? {
        let at = format!("{what}.{name}");
        let value = Reflect::get(v, &JsValue::from_str(&name)).map_err(|e| unreadable(&at, &e))?;
        if value.is_undefined() {
            continue;
        }
        match name.as_str() {
            "_id" => {
                if value.as_string().as_deref() == Some(echo.row_id) {
                    continue;
                }
                return Err(bad(format!("{at} is the row's id ({:?}) and cannot be changed", echo.row_id)));
            }
            "_space" => {
                if value.as_string().as_deref() == echo.space {
                    continue;
                }
                return Err(bad(format!(
                    "{at} is the space the row lives in and cannot be changed here (name a space with options.space)"
                )));
            }
            DELETED => {
                if value.as_bool() == Some(false) {
                    continue;
                }
                return Err(bad(format!("{at}: delete a row with remove(), bring it back with restore()")));
            }
            _ => {}
        }
        out.insert(name, scalar(&value, &at)?);
    }
    Ok(out)
}

/// One field value.
pub fn scalar(v: &JsValue, at: &str) -> Result<Value, JsValue> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    if let Some(b) = v.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Some(n) = v.as_f64() {
        if !n.is_finite() {
            return Err(bad(format!("{at} must be a finite number (got {n})")));
        }
        return Ok(Value::Number(n));
    }
    if v.is_string() {
        return text(v, at).map(Value::String);
    }
    if v.is_bigint() {
        return Err(bad(format!("{at} is a bigint: give a number (JSON has no bigint)")));
    }
    Err(bad(format!("{at} must be a string, a number, a boolean or null (got {})", js_type(v))))
}

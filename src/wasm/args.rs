//! Reading the arguments of the public API from JS values.
//!
//! Every public method takes its arguments as `JsValue` and reads them here,
//! so that a number where a string belongs, a `bigint`, a lone surrogate or a
//! function never reaches the wasm as something else: the caller gets an
//! `Error` with code `bad_input` that names the argument and its JS type, and
//! nothing is recorded (no id is spent). What JSON cannot say is refused, not
//! bent: `undefined` field values are skipped as `JSON.stringify` skips them.

use js_sys::{Array, JsString, Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

use super::js_error;
use crate::protocol::{Code, Fields, Value, DELETED};

/// The JS type of a value, for error messages: `typeof`, with `null` and `array` told apart.
pub fn js_type(v: &JsValue) -> String {
    if v.is_null() {
        "null".into()
    } else if Array::is_array(v) {
        "array".into()
    } else {
        v.js_typeof().as_string().unwrap_or_else(|| "unknown".into())
    }
}

fn bad(message: String) -> JsValue {
    js_error(Code::BadInput.as_str(), &message)
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

/// Property `k` of an options object (`undefined` when there is no object).
pub fn get(options: &JsValue, k: &str) -> JsValue {
    if !options.is_object() {
        return JsValue::UNDEFINED;
    }
    Reflect::get(options, &k.into()).unwrap_or(JsValue::UNDEFINED)
}

/// An options argument: absent, or an object.
pub fn options(v: &JsValue, what: &str) -> Result<(), JsValue> {
    if v.is_undefined() || v.is_null() || (v.is_object() && !Array::is_array(v) && !v.is_function()) {
        return Ok(());
    }
    Err(bad(format!("{what} must be an object (got {})", js_type(v))))
}

/// An optional boolean option.
pub fn opt_bool(options: &JsValue, k: &str, what: &str) -> Result<Option<bool>, JsValue> {
    let v = get(options, k);
    if v.is_undefined() || v.is_null() {
        return Ok(None);
    }
    v.as_bool().map(Some).ok_or_else(|| bad(format!("{what}.{k} must be true or false (got {})", js_type(&v))))
}

/// An optional integer option within `min..=max` (a JS number, never a string or a bigint).
pub fn opt_int(options: &JsValue, k: &str, what: &str, min: f64, max: f64) -> Result<Option<f64>, JsValue> {
    let v = get(options, k);
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
    if !v.is_object() || Array::is_array(v) || v.is_function() {
        return Err(bad(format!("{what} must be an object of field → value (got {})", js_type(v))));
    }
    let obj: &Object = v.unchecked_ref();
    let mut out = Fields::new();
    for key in Object::keys(obj).iter() {
        let name = text(&key, &format!("a field name of {what}"))?;
        let value = Reflect::get(obj, &key).unwrap_or(JsValue::UNDEFINED);
        if value.is_undefined() {
            continue;
        }
        let at = format!("{what}.{name}");
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

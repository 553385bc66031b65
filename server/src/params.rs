//! A query string's parameters by name: a name given twice is a 400 naming
//! it, as a key twice in a body is — never "the last one wins"
//! (`?cursor=0&cursor=9` could read either way, and `?user=` is a check the
//! last one could dodge). The API's guard and every handler read them so.

use std::collections::HashMap;

use crate::error::ApiError;

/// `pairs`, in the order they came, by name; a name twice is a 400.
pub(crate) fn by_name(pairs: Vec<(String, String)>) -> Result<HashMap<String, String>, ApiError> {
    let mut map = HashMap::with_capacity(pairs.len());
    for (name, value) in pairs {
        if map.contains_key(&name) {
            let shown: String = name.chars().take(40).collect();
            return Err(ApiError::bad_request(format!("the query parameter {shown:?} appears twice")));
        }
        map.insert(name, value);
    }
    Ok(map)
}

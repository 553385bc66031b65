//! A sorted set of names — tables, spaces — kept in a vector.
//!
//! Why not a `BTreeSet<String>`: in the wasm every tree is one copy of its
//! insert, search and removal code per key type, several KB of the package
//! each, and the sets here hold a handful of names (the tables with an
//! index, the spaces a device left or holds rows of: at most the spaces a
//! user may be in). A binary search over a vector serves them as well.

use serde::{Deserialize, Deserializer, Serialize};

/// Names in order, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Names(Vec<String>);

impl Names {
    /// No names.
    pub const fn new() -> Names {
        Names(Vec::new())
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|n| n.as_str().cmp(name))
    }

    /// Whether `name` is in the set.
    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// Adds `name`; `false` if it was there (nothing allocated then).
    pub fn insert(&mut self, name: &str) -> bool {
        match self.find(name) {
            Ok(_) => false,
            Err(at) => {
                self.0.insert(at, name.to_owned());
                true
            }
        }
    }

    /// Takes `name` out; `false` if it was not there.
    pub fn remove(&mut self, name: &str) -> bool {
        match self.find(name) {
            Ok(at) => {
                self.0.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    /// The names in order.
    pub fn iter(&self) -> std::slice::Iter<'_, String> {
        self.0.iter()
    }

    /// How many names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Takes every name out.
    pub fn clear(&mut self) {
        self.0.clear();
    }
}

impl<'a> IntoIterator for &'a Names {
    type Item = &'a String;
    type IntoIter = std::slice::Iter<'a, String>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<S: AsRef<str>> Extend<S> for Names {
    fn extend<I: IntoIterator<Item = S>>(&mut self, names: I) {
        for n in names {
            self.insert(n.as_ref());
        }
    }
}

impl<S: AsRef<str>> FromIterator<S> for Names {
    fn from_iter<I: IntoIterator<Item = S>>(names: I) -> Names {
        let mut set = Names::new();
        set.extend(names);
        set
    }
}

impl<const N: usize> From<[&str; N]> for Names {
    fn from(names: [&str; N]) -> Names {
        names.into_iter().collect()
    }
}

/// Read as a list in any order, a name twice kept once (as a set read it).
impl<'de> Deserialize<'de> for Names {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Names, D::Error> {
        Ok(Vec::<String>::deserialize(d)?.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_in_order_each_once() {
        let mut s: Names = ["b", "a", "c", "a"].into();
        assert_eq!(s.iter().map(String::as_str).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert!(!s.insert("b") && s.insert("0"));
        assert!(s.remove("a") && !s.remove("a"));
        assert!(s.contains("c") && !s.contains("a"));
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn read_from_a_list_in_any_order() {
        let s: Names = serde_json::from_str(r#"["z","y","z"]"#).unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"["y","z"]"#);
    }
}

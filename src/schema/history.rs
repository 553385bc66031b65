//! The schema file's history: a base version and, for each later version, the
//! steps from the one before (PROTOCOL §3b).
//!
//! Loading replays the steps over the base, checking each one against the
//! tables it meets, so a file whose steps do not compose is refused with the
//! version and step named. Replaying also records every name a table ever
//! gave up (renamed away or retired): [`Alias`]es, which is all an upgrade needs.

use serde::{Deserialize, Deserializer, Serialize};

use super::{FieldRule, FieldRules, FieldType, TableRules, Tables};
use crate::protocol::{check_field_key, check_table, Value, DELETED};

/// The schema file as written: `version`, and either `tables` alone (a schema
/// with no history) or `history` (and optionally `tables`, checked against it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct SchemaFile {
    pub(crate) version: u32,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::protocol::opt_map_of",
        deserialize_with = "super::unique_tables"
    )]
    pub(crate) tables: Option<Tables>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) history: Vec<Release>,
}

/// One version in a schema's history. The first release is the base: it
/// holds `tables` and no steps. Every later one holds the `steps` that make
/// it from the version just before it (versions go up by one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Release {
    /// The version this release makes.
    pub version: u32,
    /// The base's tables (first release only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "crate::protocol::opt_map_of",
        deserialize_with = "super::unique_tables"
    )]
    pub tables: Option<Tables>,
    /// The steps from the version before (every release but the first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<Step>,
}

/// One change from a version to the next. Names are never reused: a field
/// renamed away or retired keeps its old name to itself forever, because
/// stored rows and old apps still spell it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Step {
    /// A new table. Old ops never name it, so nothing is upgraded.
    AddTable {
        /// Its name (`[a-z][a-z0-9_]{0,63}`).
        table: String,
        /// Its fields.
        #[serde(serialize_with = "crate::protocol::map_of", deserialize_with = "crate::protocol::unique_fields")]
        fields: FieldRules,
    },
    /// A new field: optional, or required with a `default` in its rule, which
    /// rows and ops that lack the field are read with (never stored, never marked).
    AddField {
        /// The table.
        table: String,
        /// The new field's name.
        field: String,
        /// Its rule; `default` must be valid under it.
        rule: FieldRule,
    },
    /// A field takes a new name; its values and their marks follow it.
    RenameField {
        /// The table.
        table: String,
        /// The name it had.
        from: String,
        /// The name it has from this version on.
        to: String,
    },
    /// A limit of a field changes (a number sets it, `null` removes it); the
    /// new limit judges every op from then on, whatever version wrote it.
    ChangeLimit {
        /// The table.
        table: String,
        /// The field.
        field: String,
        /// The new smallest number.
        #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
        min: Option<Option<f64>>,
        /// The new largest number.
        #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
        max: Option<Option<f64>>,
        /// The new longest string.
        #[serde(rename = "maxLength", default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
        max_length: Option<Option<usize>>,
    },
    /// A field leaves the schema: from this version on its values, in ops of
    /// any version and in stored rows, are ignored.
    RetireField {
        /// The table.
        table: String,
        /// The field.
        field: String,
    },
}

/// A key that is present (its value possibly `null`) is `Some`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

impl Step {
    /// The step's kind as the file spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::AddTable { .. } => "addTable",
            Step::AddField { .. } => "addField",
            Step::RenameField { .. } => "renameField",
            Step::ChangeLimit { .. } => "changeLimit",
            Step::RetireField { .. } => "retireField",
        }
    }
}

/// Why a schema file is refused. Every variant names where the problem is.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The text is not JSON of the schema file's shape.
    #[error("the schema file does not parse: {0}")]
    Json(#[from] serde_json::Error),
    /// A step does not apply to the tables of the version before it.
    #[error("version {version}, step {step} ({kind}): {problem}")]
    Step {
        /// The version the step belongs to.
        version: u32,
        /// The step's number in that version's `steps`, from 1.
        step: usize,
        /// The step's kind (`renameField`…).
        kind: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// Something outside the steps is wrong: the versions, a table's rules.
    #[error("{at}: {problem}")]
    Invalid {
        /// Where (`version`, `history[0]`, `tables.sets.reps`…).
        at: String,
        /// What is wrong.
        problem: String,
    },
}

fn invalid(at: impl Into<String>, problem: impl Into<String>) -> SchemaError {
    SchemaError::Invalid { at: at.into(), problem: problem.into() }
}

/// A name a table gave up: renamed (`to` is the newest name) or retired
/// (`to` is `None`) by the step of version `died`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Alias {
    pub(crate) old: String,
    pub(crate) to: Option<String>,
    pub(crate) died: u32,
}

/// What loading a file makes: the newest tables and every table's aliases.
pub(crate) struct Replayed {
    pub(crate) tables: Tables,
    pub(crate) aliases: litemap::LiteMap<String, Vec<Alias>>,
}

/// Checks the file and replays its history.
pub(crate) fn replay(file: &SchemaFile) -> Result<Replayed, SchemaError> {
    if file.version == 0 {
        return Err(invalid("version", "must be at least 1 (ops carry schema 1 when they name none)"));
    }
    let Some(base) = file.history.first() else {
        let Some(tables) = &file.tables else {
            return Err(invalid("tables", "missing: a schema needs `tables` or a `history`"));
        };
        check_tables("tables", tables)?;
        return Ok(Replayed { tables: tables.clone(), aliases: litemap::LiteMap::new() });
    };
    let Some(base_tables) = &base.tables else {
        return Err(invalid("history[0]", "the first release is the base: it needs `tables`"));
    };
    if !base.steps.is_empty() {
        return Err(invalid("history[0]", "the first release is the base: it has `tables`, not `steps`"));
    }
    if base.version == 0 {
        return Err(invalid("history[0].version", "must be at least 1"));
    }
    check_tables("history[0].tables", base_tables)?;
    let mut state = State { tables: base_tables.clone(), aliases: litemap::LiteMap::new() };
    let mut previous = base.version;
    for (i, release) in file.history.iter().enumerate().skip(1) {
        let at = format!("history[{i}]");
        if release.version != previous.saturating_add(1) {
            return Err(invalid(
                format!("{at}.version"),
                format!("is {}, but must follow version {previous} (versions go up by one)", release.version),
            ));
        }
        if release.tables.is_some() {
            return Err(invalid(&at, "only the first release holds `tables`; later ones hold `steps`"));
        }
        if release.steps.is_empty() {
            return Err(invalid(&at, "a release after the base needs at least one step"));
        }
        for (n, step) in release.steps.iter().enumerate() {
            state.apply(step, release.version).map_err(|problem| SchemaError::Step {
                version: release.version,
                step: n + 1,
                kind: step.kind(),
                problem,
            })?;
        }
        previous = release.version;
    }
    if file.version != previous {
        return Err(invalid("version", format!("is {}, but the history ends at version {previous}", file.version)));
    }
    if let Some(given) = &file.tables {
        if let Some(diff) = first_difference(given, &state.tables) {
            return Err(invalid("tables", format!("differ from the tables the history makes, at {diff}")));
        }
    }
    Ok(Replayed { tables: state.tables, aliases: state.aliases })
}

/// Where two sets of tables first differ (`sets.reps`), or `None`: the first
/// table in name order whose fields differ, then its first field that does.
fn first_difference(a: &Tables, b: &Tables) -> Option<String> {
    let table = first_unequal(a, b, |x, y| x.fields == y.fields)?;
    let (Some(x), Some(y)) = (a.get(table), b.get(table)) else { return Some(table.clone()) };
    let field = first_unequal(&x.fields, &y.fields, |p, q| p == q)?;
    Some(format!("{table}.{field}"))
}

/// The first name, in order, that one map has and the other has not, or
/// that both have with values not `same`. Both maps are sorted, so the first
/// such name of each side's walk is a candidate: the smaller one is it.
fn first_unequal<'m, V>(
    a: &'m litemap::LiteMap<String, V>,
    b: &'m litemap::LiteMap<String, V>,
    same: impl Fn(&V, &V) -> bool,
) -> Option<&'m String> {
    let in_a = a.iter().find(|(k, x)| b.get(*k).is_none_or(|y| !same(x, y))).map(|(k, _)| k);
    let only_in_b = b.iter().find(|(k, _)| !a.contains_key(*k)).map(|(k, _)| k);
    match (in_a, only_in_b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

fn check_tables(at: &str, tables: &Tables) -> Result<(), SchemaError> {
    for (table, rules) in tables {
        check_table(table).map_err(|p| invalid(format!("{at}.{table}"), format!("table name {p}")))?;
        for (field, rule) in &rules.fields {
            check_field_name(field).map_err(|p| invalid(format!("{at}.{table}.{field}"), p))?;
            check_rule(field, rule).map_err(|p| invalid(format!("{at}.{table}.{field}"), p))?;
        }
        for (i, fields) in rules.indexes.iter().enumerate() {
            let here = format!("{at}.{table}.indexes[{i}]");
            if fields.is_empty() {
                return Err(invalid(here, "an index names at least one field"));
            }
            for (j, f) in fields.iter().enumerate() {
                if !rules.fields.contains_key(f) {
                    return Err(invalid(here, format!("{table} has no field {f}")));
                }
                if fields[..j].contains(f) {
                    return Err(invalid(here, format!("names {f} twice")));
                }
            }
        }
    }
    Ok(())
}

fn check_field_name(field: &str) -> Result<(), String> {
    check_field_key(field).map_err(str::to_owned)?;
    if field == DELETED {
        return Err(format!("{DELETED} is the protocol's, not a schema field"));
    }
    Ok(())
}

/// A rule's limits fit its type, `min ≤ max`, and its default obeys it.
fn check_rule(field: &str, rule: &FieldRule) -> Result<(), String> {
    let numeric = matches!(rule.kind, FieldType::Number | FieldType::Integer);
    if rule.max_length.is_some() && rule.kind != FieldType::String {
        return Err("maxLength applies to strings only".into());
    }
    if (rule.min.is_some() || rule.max.is_some()) && !numeric {
        return Err("min and max apply to numbers and integers only".into());
    }
    if let (Some(min), Some(max)) = (rule.min, rule.max) {
        if min > max {
            return Err(format!("min {} is above max {}", super::num(min), super::num(max)));
        }
        // A field no value can satisfy would refuse every edit that sets it.
        if rule.kind == FieldType::Integer && min.ceil() > max.floor() {
            return Err(format!("no integer lies between min {} and max {}", super::num(min), super::num(max)));
        }
    }
    if let Some(default) = &rule.default {
        if *default == Value::Null {
            return Err("a default cannot be null".into());
        }
        rule.check(field, default).map_err(|r| format!("the default {} breaks the rule: {}", shown(default), r.reason))?;
    }
    Ok(())
}

fn shown(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| v.type_name().to_owned())
}

/// The tables while the steps are replayed, and the names each gave up.
struct State {
    tables: Tables,
    aliases: litemap::LiteMap<String, Vec<Alias>>,
}

impl State {
    fn table(&mut self, table: &str) -> Result<&mut TableRules, String> {
        self.tables.get_mut(table).ok_or_else(|| format!("there is no table {table}"))
    }

    /// A name `table` may take: well formed, not in use, never given up.
    fn fresh_name(&self, table: &str, field: &str) -> Result<(), String> {
        check_field_name(field)?;
        if self.tables.get(table).is_some_and(|t| t.fields.contains_key(field)) {
            return Err(format!("table {table} already has a field {field}"));
        }
        if let Some(a) = self.aliases.get(table).and_then(|a| a.iter().find(|a| a.old == field)) {
            let what = if a.to.is_some() { "renamed away" } else { "retired" };
            return Err(format!(
                "{table}.{field} was {what} in version {}: a name is never used twice (stored rows and old apps still spell it)",
                a.died
            ));
        }
        Ok(())
    }

    /// Records that `old` is given up by version `version` (`to`: its new name).
    fn give_up(&mut self, table: &str, old: &str, to: Option<&str>, version: u32) {
        let aliases = self.aliases.entry(table.to_owned()).or_default();
        for a in aliases.iter_mut() {
            if a.to.as_deref() == Some(old) {
                a.to = to.map(str::to_owned);
            }
        }
        aliases.push(Alias { old: old.to_owned(), to: to.map(str::to_owned), died: version });
    }

    fn apply(&mut self, step: &Step, version: u32) -> Result<(), String> {
        match step {
            Step::AddTable { table, fields } => {
                check_table(table).map_err(|p| format!("table name {p}"))?;
                if self.tables.contains_key(table) {
                    return Err(format!("there already is a table {table}"));
                }
                if fields.is_empty() {
                    return Err(format!("table {table} needs at least one field"));
                }
                for (field, rule) in fields {
                    check_field_name(field).map_err(|p| format!("{table}.{field}: {p}"))?;
                    check_rule(field, rule).map_err(|p| format!("{table}.{field}: {p}"))?;
                }
                self.tables.insert(table.clone(), TableRules { fields: fields.clone(), indexes: Vec::new(), own_rows: false });
            }
            Step::AddField { table, field, rule } => {
                self.table(table)?;
                self.fresh_name(table, field)?;
                check_rule(field, rule).map_err(|p| format!("{table}.{field}: {p}"))?;
                if rule.required && rule.default.is_none() {
                    return Err(format!(
                        "{table}.{field} is required but has no default: rows and ops written before version {version} lack it"
                    ));
                }
                self.table(table)?.fields.insert(field.clone(), rule.clone());
            }
            Step::RenameField { table, from, to } => {
                let rule = self.table(table)?.fields.get(from).cloned();
                let Some(rule) = rule else { return Err(format!("table {table} has no field {from}")) };
                self.fresh_name(table, to)?;
                let rules = self.table(table)?;
                rules.fields.remove(from);
                rules.fields.insert(to.clone(), rule);
                for f in rules.indexes.iter_mut().flatten().filter(|f| *f == from) {
                    *f = to.clone();
                }
                self.give_up(table, from, Some(to), version);
            }
            Step::ChangeLimit { table, field, min, max, max_length } => {
                let rules = self.table(table)?;
                let Some(rule) = rules.fields.get_mut(field) else {
                    return Err(format!("table {table} has no field {field}"));
                };
                if min.is_none() && max.is_none() && max_length.is_none() {
                    return Err("names no limit to change (min, max or maxLength)".into());
                }
                let mut changed = rule.clone();
                if let Some(v) = min {
                    changed.min = *v;
                }
                if let Some(v) = max {
                    changed.max = *v;
                }
                if let Some(v) = max_length {
                    changed.max_length = *v;
                }
                check_rule(field, &changed).map_err(|p| format!("{table}.{field}: {p}"))?;
                *rule = changed;
            }
            Step::RetireField { table, field } => {
                let rules = self.table(table)?;
                if rules.fields.remove(field).is_none() {
                    return Err(format!("table {table} has no field {field}"));
                }
                rules.indexes.retain(|ix| !ix.contains(field));
                self.give_up(table, field, None, version);
            }
        }
        Ok(())
    }
}

//! The app schema the server validates rows against (PROTOCOL §3, step 1),
//! its history of versions (PROTOCOL §3b), and the one rule that says what
//! the server answers for the row after an edit: [`Schema::edit`].
//!
//! The row **after** the op is checked, never the op alone: an op that sets
//! only `reps` on a row that already has `exercise` and `weightKg` is valid.
//! Tombstones (`_deleted: true`) are checked like any row, except that they
//! need no required field: a delete is `{"_deleted": true}` and nothing else.
//!
//! The judge ([`crate::judge::decide`]) and a device checking an edit offline
//! ([`Schema::check_edit`]) call the same [`Schema::edit`], so a device
//! shows the server's own words before it sends anything.

mod history;
mod upgrade;

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::order::merge_fields;
use crate::protocol::{Cell, Fields, Mark, Op, OpId, Row, Value, CREATED_BY, DELETED, MAX_SAFE_INTEGER};
use crate::space::Role;

use history::{Alias, SchemaFile};
pub use history::{Release, SchemaError, Step};
use upgrade::Spelled;

/// The largest row an op may make, in bytes of its encoded `fields` and
/// `marks` ([`crate::protocol::Row::encoded_len`]): one user's row can never
/// grow without bound. Every server judges by it, and a device checks by it.
pub const MAX_ROW_BYTES: usize = 64 * 1024;

/// A schema: its newest version's tables, and the history that leads there.
///
/// The file is `{"version": 1, "tables": {"sets": {"fields": {…}}}}` (a
/// schema with no history), or `{"version": 2, "history": [base, steps…]}`
/// (PROTOCOL §3b). Parsing checks that the history composes; a `Schema`
/// that exists is valid. Serializes to the file form, with `tables`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "SchemaFile", into = "SchemaFile")]
pub struct Schema {
    /// The newest op `schema` version the server accepts.
    pub version: u32,
    /// Table name → its rules, as of `version`.
    pub tables: Tables,
    /// The releases from the base to `version` (empty: no history; every op
    /// version up to `version` is read as it is).
    pub history: Vec<Release>,
    /// Per table, the names it gave up (renamed or retired), from the history.
    aliases: litemap::LiteMap<String, Vec<Alias>>,
}

/// Table name → its rules (a handful: a sorted vector, not a tree).
pub type Tables = litemap::LiteMap<String, TableRules>;

/// Field name → its rule.
pub type FieldRules = litemap::LiteMap<String, FieldRule>;

/// A `tables` object, when there is one, no name twice.
pub(crate) fn unique_tables<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Tables>, D::Error> {
    crate::protocol::unique_map(d, "tables").map(Some)
}

/// The rules of one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TableRules {
    /// Field name → its rule. Fields not named here are `unknown_field`.
    #[serde(serialize_with = "crate::protocol::map_of", deserialize_with = "crate::protocol::unique_fields")]
    pub fields: FieldRules,
    /// Indexes the devices keep of this table: each a list of its fields.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub indexes: Vec<Vec<String>>,
    /// In a shared space an editor may change or delete only the rows they
    /// created (`own_rows`); owners may change any. The judge remembers who
    /// created a row in its [`CREATED_BY`] cell.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_rows: bool,
}

crate::protocol::word::words! {
    /// The type a field's value must have.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FieldType {
        /// A string.
        String = "string",
        /// Any finite number.
        Number = "number",
        /// A number without fraction.
        Integer = "integer",
        /// true or false.
        Boolean = "boolean",
    }
}

/// The rule of one field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FieldRule {
    /// The value's type (null is always allowed for a field that is not required).
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// Whether the row must have a non-null value.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    /// Longest string, in Unicode code points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_length: Option<usize>,
    /// Smallest number allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest number allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// The value a row that lacks the field is read with (a field added by a
    /// later version). Never stored and never marked: an edit that sets the
    /// field always wins over it. An explicit `null` is not "lacking".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    /// Once a row holds a non-null value of the field, no op may change it
    /// (`write_once`): a name given at creation, a recorded result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub write_once: bool,
    /// Only an owner of the row's space may set the field (`owners_only`);
    /// in a personal space its user is the owner.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owners_only: bool,
}

/// Why a row is refused: a machine code, a human reason and the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{reason}")]
pub struct Refusal {
    /// Machine code (see [`RefusalCode`]), as the verdict's `code`.
    pub code: RefusalCode,
    /// Human reason, word for word the verdict's `reason` for the same row and schema.
    pub reason: String,
    /// The field the reason is about (the first, for `missing_fields`); `None`
    /// for a whole-row reason (`unknown_table`, `row_too_large`…). Not on the
    /// wire: a device uses it to point at the input.
    pub field: Option<String>,
}

/// Why the schema refuses an edit: a [`Code`] (`missing_fields`, `out_of_range`, …).
pub type RefusalCode = crate::protocol::Code;

fn refuse<T>(code: RefusalCode, reason: String, field: Option<&str>) -> Result<T, Refusal> {
    Err(Refusal { code, reason, field: field.map(str::to_owned) })
}

/// Formats a number for a reason: `100`, not `100.0`.
fn num(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// An edit to decide: an op's fields, written under `version`, with its mark.
#[derive(Debug, Clone, Copy)]
pub struct Edit<'a> {
    /// The table of the row.
    pub table: &'a str,
    /// Field name → value, as the edit's version spells them.
    pub fields: &'a Fields,
    /// The schema version the edit was written under.
    pub version: u32,
    /// The mark's `at`.
    pub at: u64,
    /// The mark's opId.
    pub op_id: &'a OpId,
}

impl<'a> Edit<'a> {
    /// The edit an op makes.
    pub fn of(op: &'a Op) -> Edit<'a> {
        Edit { table: &op.table, fields: &op.fields, version: op.schema, at: op.at, op_id: &op.op_id }
    }
}

/// An accepted edit: the row after it (newest names) and whether a mark moved.
#[derive(Debug, Clone, PartialEq)]
pub struct Edited {
    /// The row after the edit, as the newest version spells it.
    pub row: Row,
    /// Whether any mark moved (only then does the server write the row).
    pub moved: bool,
}

/// The mark [`Schema::check_edit`] gives an edit: the latest `at` and the
/// longest, greatest opId, so the edit wins every field (a device's next edit
/// does: its `at` is above every mark it has seen) and the row bound is
/// checked with the largest mark an op can carry. `later`: how many edits
/// checked together come after this one (each gets a mark above the one
/// before it, so it wins over it too).
pub fn check_mark(later: u64) -> (u64, OpId) {
    (MAX_SAFE_INTEGER - later, OpId::new("z".repeat(128)))
}

impl Schema {
    /// The workout diary of the demo: `sets` with exercise, weightKg and reps (version 1).
    pub fn workout() -> Schema {
        let json = r#"{"version": 1, "tables": {"sets": {"fields": {
            "exercise": {"type": "string", "required": true, "maxLength": 100},
            "weightKg": {"type": "number", "required": true, "min": 0, "max": 1000},
            "reps": {"type": "integer", "required": true, "min": 1, "max": 100}}}}}"#;
        // The text above is a constant checked by the `workout_schema_parses` test.
        Schema::from_json(json).unwrap_or_else(|_| Schema::empty(1))
    }

    /// The worked example of PROTOCOL §3b: [`Schema::workout`] and version 2,
    /// which adds `rpe` (an optional integer 1..10) and renames `weightKg` to `weight`.
    pub fn workout_v2() -> Schema {
        // A constant checked by the `the_worked_example_parses` test.
        Schema::from_json(include_str!("workout-v2.json")).unwrap_or_else(|_| Schema::empty(2))
    }

    /// The worked example one version further (every step kind at least once):
    /// version 3 adds the table `notes` and `sets.unit` (required, default
    /// `"kg"`), lets `reps` go up to 200 and retires `rpe`.
    pub fn workout_v3() -> Schema {
        Schema::from_json(include_str!("workout-v3.json")).unwrap_or_else(|_| Schema::empty(3))
    }

    fn empty(version: u32) -> Schema {
        Schema { version, tables: Tables::new(), history: Vec::new(), aliases: litemap::LiteMap::new() }
    }

    /// Parses and checks a schema file: a history whose steps do not compose
    /// is refused with the version and step named ([`SchemaError::Step`]).
    pub fn from_json(text: &str) -> Result<Schema, SchemaError> {
        // A byte-order mark, as some editors save JSON, is not the file's text.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let file: SchemaFile = crate::json::from_str(text)?;
        Schema::try_from(file)
    }

    /// The schema as its file (`GET /v1/schema` sends this text; a device
    /// stores it and parses it back with [`Schema::from_json`]).
    pub fn to_json(&self) -> String {
        // A schema is maps of strings, numbers and booleans: it always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// A fingerprint of [`Schema::to_json`] (64-bit FNV-1a, hex): the same
    /// schema gives the same text on every server and device, across releases
    /// of this crate, so it serves as `GET /v1/schema`'s `ETag`.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.to_json().bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }

    fn aliases(&self, table: &str) -> &[Alias] {
        self.aliases.get(table).map_or(&[], Vec::as_slice)
    }

    /// An op written under an older version, as the newest version spells
    /// it: renamed fields under their new names, retired fields left out,
    /// `schema` set to [`Schema::version`]. Pure; the judge reads ops this
    /// way without building them (upgrading then judging = judging).
    pub fn upgrade_op(&self, op: &Op) -> Op {
        let spelled = Spelled::new(self.aliases(&op.table), &op.fields, op.schema);
        let fields: Fields = spelled.pairs().map(|(k, v)| (k.to_owned(), v.clone())).collect();
        Op { fields, schema: self.version.max(op.schema), ..op.clone() }
    }

    /// A row stored (or pulled) under any older version, as the newest
    /// version spells it: each cell under its field's newest name with its
    /// mark, retired fields left out, unknown fields kept. Borrowed when
    /// nothing changes. Stored rows are read this way, never migrated.
    pub fn upgrade_row<'r>(&self, table: &str, row: &'r Row) -> Cow<'r, Row> {
        upgrade::upgrade_row(self.aliases(table), row)
    }

    /// How an app written for `version` spells this table's fields that were
    /// renamed since: newest name → the name at `version` (the oldest name
    /// still alive then). Empty when nothing was renamed after `version`.
    pub fn names_at(&self, version: u32, table: &str) -> litemap::LiteMap<String, String> {
        let mut names: litemap::LiteMap<String, (u32, String)> = litemap::LiteMap::new();
        for a in self.aliases(table) {
            let Some(to) = &a.to else { continue };
            if a.died <= version {
                continue;
            }
            let slot = names.entry(to.clone()).or_insert((a.died, a.old.clone()));
            if a.died < slot.0 {
                *slot = (a.died, a.old.clone());
            }
        }
        let mut out = litemap::LiteMap::with_capacity(names.len());
        for (newest, (_, old)) in names {
            out.insert(newest, old);
        }
        out
    }

    /// Whether an app written for `version` sees every row of `table` as it
    /// is stored ([`Schema::row_at`] gives the row itself): it knows every
    /// name, and no field of the table has a `default` to show.
    pub fn seen_as_stored_at(&self, version: u32, table: &str) -> bool {
        version >= self.version && !self.has_defaults(table)
    }

    fn has_defaults(&self, table: &str) -> bool {
        self.tables.get(table).is_some_and(|t| t.fields.values().any(|r| r.default.is_some()))
    }

    /// A row as an app written for `version` spells it: cells under their
    /// newest names first (two names of one field keep the newer mark), the
    /// `default` of every field it lacks (PROTOCOL §3b: read, never
    /// stored — a cell with no mark, `at` 0, that any edit wins over), then
    /// renamed fields under the app's names. Fields the app does not know
    /// (added later) are kept as they are. Borrowed when nothing changes.
    pub fn row_at<'r>(&self, version: u32, table: &str, row: &'r Row) -> Cow<'r, Row> {
        if self.seen_as_stored_at(version, table) {
            return Cow::Borrowed(row);
        }
        let names = self.names_at(version, table);
        let mut newest = self.upgrade_row(table, row);
        self.show_defaults(table, &mut newest);
        if names.is_empty() || !newest.cells.keys().any(|k| names.contains_key(k)) {
            return newest;
        }
        let mut out = Row::default();
        for (name, cell) in newest.cells.iter() {
            let name = names.get(name).unwrap_or(name);
            out.cells.insert(name.clone(), cell.clone());
        }
        Cow::Owned(out)
    }

    /// The `default` of every field of `table` that `row` (a live one, in
    /// the newest names) lacks, as a cell with no mark.
    fn show_defaults(&self, table: &str, row: &mut Cow<'_, Row>) {
        let Some(rules) = self.tables.get(table) else { return };
        if row.is_deleted() {
            return;
        }
        for (name, rule) in &rules.fields {
            if let Some(d) = rule.default.as_ref().filter(|_| !row.cells.contains_key(name)) {
                let mark = Mark { at: 0, op_id: OpId::new("") };
                row.to_mut().cells.insert(name.clone(), Cell { value: d.clone(), mark });
            }
        }
    }

    /// What an app of the newest version shows of a row:
    /// [`Schema::upgrade_row`]'s fields, plus the `default` of every field
    /// the row lacks ([`Schema::row_at`]'s fields).
    pub fn view(&self, table: &str, row: &Row) -> Fields {
        let mut row = self.upgrade_row(table, row);
        self.show_defaults(table, &mut row);
        row.fields()
    }

    /// The one rule for an edit (PROTOCOL §3 step 1 and §3b): read the
    /// current row and the edit as the newest version spells them, merge; if
    /// the row existed and no mark moved, accept without validation; else the
    /// row after the edit must pass [`Schema::check_row`] and not grow past
    /// `max_row_bytes` ([`MAX_ROW_BYTES`] on every server).
    pub fn edit(&self, edit: &Edit<'_>, current: Option<&Row>, max_row_bytes: usize) -> Result<Edited, Refusal> {
        if edit.version > self.version {
            let reason = format!("op schema {} is newer than the server's schema {}", edit.version, self.version);
            return refuse(RefusalCode::SchemaTooNew, reason, None);
        }
        let current = current.map(|r| self.upgrade_row(edit.table, r));
        let mut row = current.as_deref().cloned().unwrap_or_default();
        let spelled = Spelled::new(self.aliases(edit.table), edit.fields, edit.version);
        let moved = merge_fields(&mut row, spelled.pairs(), edit.at, edit.op_id);
        if current.is_some() && !moved {
            return Ok(Edited { row, moved });
        }
        self.check_row(edit.table, &row)?;
        if let Some(before) = current.as_deref() {
            self.check_write_once(edit.table, before, &row)?;
        }
        // A row stored before the bound existed may be larger: an edit that
        // does not grow it further is still judged on the schema alone. A
        // row whose bound is within the limit is (most rows): not serialized.
        if row.encoded_len_bound() <= max_row_bytes {
            return Ok(Edited { row, moved });
        }
        let bytes = row.encoded_len();
        if bytes > max_row_bytes && bytes > current.as_deref().map_or(0, Row::encoded_len) {
            let reason = format!("the row would be {bytes} bytes, more than the limit of {max_row_bytes} bytes");
            return refuse(RefusalCode::RowTooLarge, reason, None);
        }
        Ok(Edited { row, moved })
    }

    /// `writeOnce`: no field that `before` holds a value of (not null)
    /// changes in `after`.
    fn check_write_once(&self, table: &str, before: &Row, after: &Row) -> Result<(), Refusal> {
        let Some(rules) = self.tables.get(table) else { return Ok(()) };
        for (name, _) in rules.fields.iter().filter(|(_, r)| r.write_once) {
            match before.get(name) {
                None | Some(Value::Null) => {}
                Some(was) if after.get(name) == Some(was) => {}
                Some(_) => {
                    let reason = format!("{table}.{name} can be written only once, and it is already set");
                    return refuse(RefusalCode::WriteOnce, reason, Some(name));
                }
            }
        }
        Ok(())
    }

    /// The declared rules that need the sender (PROTOCOL §3, "Rules beyond
    /// the schema"), in the judge's order: `ownersOnly`, then `ownRows`
    /// (`stored`: the row as the server holds it). `writeOnce` needs only
    /// the row, and is [`Schema::edit`]'s. The judge's rule, and the
    /// device's before it records an edit.
    pub fn check_sender(&self, edit: &Edit<'_>, space: &str, role: Option<Role>, user: &str, stored: Option<&Row>) -> Result<(), Refusal> {
        self.check_owners(edit, space, role)?;
        self.check_own_row(edit.table, space, role, user, stored)
    }

    /// `ownersOnly` (PROTOCOL §3, "Rules"): an edit that names a field only
    /// owners may set is refused unless `role` is `Owner` in `space` (a
    /// personal space's user is its owner). The judge's rule, and the
    /// device's before it records an edit.
    fn check_owners(&self, edit: &Edit<'_>, space: &str, role: Option<Role>) -> Result<(), Refusal> {
        if role == Some(Role::Owner) {
            return Ok(());
        }
        let Some(rules) = self.tables.get(edit.table) else { return Ok(()) };
        if !rules.fields.values().any(|r| r.owners_only) {
            return Ok(());
        }
        let spelled = Spelled::new(self.aliases(edit.table), edit.fields, edit.version);
        for (name, _) in spelled.pairs() {
            if rules.fields.get(name).is_some_and(|r| r.owners_only) {
                let reason = format!("only owners of space {space} may set {}.{name}", edit.table);
                return refuse(RefusalCode::OwnersOnly, reason, Some(name));
            }
        }
        Ok(())
    }

    /// `ownRows`: in a shared `space`, an editor (`role`) may change only a
    /// row `user` created — `stored` is the row as the server holds it
    /// (`None`: a new row, which `user` creates). Owners, and everyone in a
    /// personal space, may change any row.
    fn check_own_row(&self, table: &str, space: &str, role: Option<Role>, user: &str, stored: Option<&Row>) -> Result<(), Refusal> {
        if role != Some(Role::Editor) || crate::space::personal_owner(space).is_some() {
            return Ok(());
        }
        let (Some(rules), Some(row)) = (self.tables.get(table), stored) else { return Ok(()) };
        if !rules.own_rows || matches!(row.get(CREATED_BY), Some(Value::String(by)) if by == user) {
            return Ok(());
        }
        refuse(RefusalCode::OwnRows, format!("in space {space}, editors may change only the rows they created"), None)
    }

    /// Marks a row `user` just created by `mark` as theirs, when its table
    /// keeps `ownRows` and the space is shared.
    pub fn mark_creator(&self, table: &str, space: &str, user: &str, mark: &Mark, row: &mut Row) {
        if self.tables.get(table).is_some_and(|t| t.own_rows) && crate::space::personal_owner(space).is_none() {
            row.cells.insert(CREATED_BY.to_owned(), Cell { value: Value::String(user.to_owned()), mark: mark.clone() });
        }
    }

    /// `db.check`: what the server would answer, in its own words, for the
    /// row after this device's next edit of `fields` (spelled as the newest
    /// version) on `current` (the row as the device has it; `None`: a new
    /// row). The edit wins every field, as a device's next edit does. The
    /// server's clock bound (`clock_ahead`) is not checked; the row bound is
    /// checked with the largest mark an op can carry, so an edit this lets
    /// through is never refused for its size.
    pub fn check_edit(&self, table: &str, current: Option<&Row>, fields: &Fields) -> Result<(), Refusal> {
        self.check_edit_at(self.version, table, current, fields)
    }

    /// [`Schema::check_edit`] for an app that writes ops under `version`
    /// (an app older than this schema spells fields its own way).
    pub fn check_edit_at(&self, version: u32, table: &str, current: Option<&Row>, fields: &Fields) -> Result<(), Refusal> {
        let (at, op_id) = check_mark(0);
        let edit = Edit { table, fields, version, at, op_id: &op_id };
        self.edit(&edit, current, MAX_ROW_BYTES).map(|_| ())
    }

    /// What the server's schema and row bound answer for `op` on `current`:
    /// exactly the judge's words, its mark included (the clock bound aside).
    pub fn check_op(&self, op: &Op, current: Option<&Row>) -> Result<(), Refusal> {
        self.edit(&Edit::of(op), current, MAX_ROW_BYTES).map(|_| ())
    }

    /// Checks a row of `table` (read as the newest version spells it).
    /// Checks, in order: the table exists; no unknown field; no missing
    /// required field (not on a tombstone; a field with a `default` is not
    /// missing when absent); then each field's type, range and length, in
    /// field-name order.
    pub fn check_row(&self, table: &str, row: &Row) -> Result<(), Refusal> {
        let Some(rules) = self.tables.get(table) else {
            return refuse(RefusalCode::UnknownTable, format!("unknown table: {table}"), None);
        };
        let row = self.upgrade_row(table, row);
        let unknown = |name: &str| refuse(RefusalCode::UnknownField, format!("unknown field: {name}"), Some(name));
        let named = |name: &str| name == DELETED || name == CREATED_BY;
        // A tombstone once let unknown fields of any size through: now only
        // the required fields are spared, everything present is checked.
        // One pass over the rules and the cells together (both sorted by
        // name): the first unknown field is refused at once; missing fields
        // are named before any value's refusal.
        let deleted = row.is_deleted();
        let mut missing: Vec<&str> = Vec::new();
        let mut refused: Option<Refusal> = None;
        let mut cells = row.cells.iter().peekable();
        for (name, rule) in &rules.fields {
            let mut value = None;
            while let Some((k, cell)) = cells.peek() {
                match k.as_str().cmp(name.as_str()) {
                    std::cmp::Ordering::Less if !named(k) => return unknown(k),
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => value = Some(&cell.value),
                    std::cmp::Ordering::Greater => break,
                }
                cells.next();
                if value.is_some() {
                    break;
                }
            }
            match value {
                None if rule.required && rule.default.is_none() && !deleted => missing.push(name),
                Some(Value::Null) if rule.required && !deleted => missing.push(name),
                None | Some(Value::Null) => {}
                Some(value) => {
                    if refused.is_none() && missing.is_empty() {
                        refused = rule.check(name, value).err();
                    }
                }
            }
        }
        if let Some((k, _)) = cells.find(|(k, _)| !named(k)) {
            return unknown(k);
        }
        if let Some(first) = missing.first() {
            let s = if missing.len() == 1 { "" } else { "s" };
            return refuse(RefusalCode::MissingFields, format!("missing field{s}: {}", missing.join(", ")), Some(first));
        }
        if let Some(refusal) = refused {
            return Err(refusal);
        }
        Ok(())
    }
}

impl TryFrom<SchemaFile> for Schema {
    type Error = SchemaError;
    fn try_from(file: SchemaFile) -> Result<Schema, SchemaError> {
        let replayed = history::replay(&file)?;
        Ok(Schema { version: file.version, tables: replayed.tables, history: file.history, aliases: replayed.aliases })
    }
}

impl From<Schema> for SchemaFile {
    fn from(s: Schema) -> SchemaFile {
        SchemaFile { version: s.version, tables: Some(s.tables), history: s.history }
    }
}

impl FieldRule {
    fn check(&self, name: &str, value: &Value) -> Result<(), Refusal> {
        let wrong = |what: &str| refuse(RefusalCode::WrongType, format!("{name} must be {what}"), Some(name));
        match (self.kind, value) {
            (FieldType::String, Value::String(s)) => {
                if let Some(max) = self.max_length {
                    if s.chars().count() > max {
                        return refuse(RefusalCode::TooLong, format!("{name} must be at most {max} characters"), Some(name));
                    }
                }
                Ok(())
            }
            (FieldType::Number, Value::Number(n)) => self.check_range(name, *n),
            (FieldType::Integer, Value::Number(n)) if n.fract() == 0.0 => self.check_range(name, *n),
            (FieldType::Boolean, Value::Bool(_)) => Ok(()),
            (FieldType::String, _) => wrong("a string"),
            (FieldType::Number, _) => wrong("a number"),
            (FieldType::Integer, _) => wrong("an integer"),
            (FieldType::Boolean, _) => wrong("true or false"),
        }
    }

    fn check_range(&self, name: &str, n: f64) -> Result<(), Refusal> {
        if let Some(min) = self.min {
            if n < min {
                return refuse(RefusalCode::OutOfRange, format!("{name} must be at least {}", num(min)), Some(name));
            }
        }
        if let Some(max) = self.max {
            if n > max {
                return refuse(RefusalCode::OutOfRange, format!("{name} must be at most {}", num(max)), Some(name));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! The schema on the device: edits checked before they are recorded, by the
//! judge's own rule ([`Schema::edit`], what [`crate::judge::decide`] runs)
//! against the schema the server published, so that a refusal on the device
//! is word for word the one the server would send.

use super::{Draft, Engine};
use crate::judge::MAX_ROW_BYTES;
use crate::known_schema::KnownSchema;
use crate::protocol::{Row, RowKey};
use crate::schema::{check_mark, Edit, Refusal, Schema};
use crate::store::Txn;

impl Engine {
    /// The server's schema as this device knows it, if it ever fetched one:
    /// the file as fetched, and the schema it parses to.
    pub fn known_schema(&self) -> Option<(&KnownSchema, &Schema)> {
        self.schema.as_ref().map(|(k, s)| (k, s))
    }

    /// A pull answer named the server's schema: its version, and the `ETag`
    /// it is fetched under now (absent from older servers).
    pub fn saw_schema(&mut self, version: u32, tag: Option<&str>) {
        self.server_schema = Some(version);
        if let Some(tag) = tag {
            self.server_schema_tag = Some(tag.to_owned());
        }
    }

    /// Whether the schema should be fetched, and the `ETag` to send with
    /// it: when none is known, or the server named another version or
    /// another tag — a file changed in place under the same version is a
    /// schema all the same, and a device checking edits by the old one
    /// would refuse what the server now takes, or the reverse, for ever.
    pub fn schema_wanted(&self) -> Option<Option<&str>> {
        let (k, s) = match &self.schema {
            None => return Some(None),
            Some(known) => known,
        };
        let other_version = self.server_schema.is_some_and(|v| v != s.version);
        let other_tag = self.server_schema_tag.as_deref().is_some_and(|t| k.etag.as_deref() != Some(t));
        (other_version || other_tag).then_some(k.etag.as_deref())
    }

    /// Learns a schema fetched from the server; returns the step that stores
    /// it. `None` (nothing learned, nothing stored) when it does not parse.
    pub fn learn_schema(&mut self, text: String, etag: Option<String>) -> Option<Txn> {
        let (known, schema) = KnownSchema::parse(text, etag)?;
        self.server_schema = Some(schema.version);
        self.server_schema_tag.clone_from(&known.etag);
        self.schema = Some((known.clone(), schema));
        Some(Txn { schema: Some(known), ..Txn::default() })
    }

    /// Takes a schema another context learned.
    pub(super) fn absorb_schema(&mut self, known: &KnownSchema) {
        if let Some((k, s)) = KnownSchema::parse(known.text.clone(), known.etag.clone()) {
            self.schema = Some((k, s));
        }
    }

    /// [`Engine::app_row`] of a row that may be owned already (a base row
    /// is decoded from its packed run when read): no second copy either way.
    pub fn app_cow<'r>(&self, table: &str, row: std::borrow::Cow<'r, Row>) -> std::borrow::Cow<'r, Row> {
        match row {
            std::borrow::Cow::Borrowed(r) => self.app_row(table, r),
            std::borrow::Cow::Owned(r) => {
                let renamed = match self.app_row(table, &r) {
                    std::borrow::Cow::Owned(x) => Some(x),
                    std::borrow::Cow::Borrowed(_) => None,
                };
                std::borrow::Cow::Owned(renamed.unwrap_or(r))
            }
        }
    }

    /// A visible row as the app spells it ([`Schema::row_at`] for the app's
    /// version): an app older than the known schema sees renamed fields under
    /// its own names, and fields it does not know passed through. Borrowed
    /// (no copy) whenever nothing is renamed.
    pub fn app_row<'r>(&self, table: &str, row: &'r Row) -> std::borrow::Cow<'r, Row> {
        match &self.schema {
            Some((_, schema)) => schema.row_at(self.config.schema, table, row),
            None => std::borrow::Cow::Borrowed(row),
        }
    }

    /// Whether the app sees every row of `table` as stored
    /// ([`Engine::app_row`] is the row itself): no schema known, or the app
    /// writes its newest version and no field of the table has a default.
    pub fn sees_as_stored(&self, table: &str) -> bool {
        self.schema.as_ref().is_none_or(|(_, s)| s.seen_as_stored_at(self.config.schema, table))
    }

    /// The schema edits are checked against: the known one, unless the app
    /// writes a newer version than it (the server will answer 409 and wait;
    /// the newer server judges those edits, not this schema).
    fn checking_schema(&self) -> Option<&Schema> {
        let (_, schema) = self.schema.as_ref()?;
        (self.config.schema <= schema.version).then_some(schema)
    }

    /// The row as the server will have it when it judges the next edit: the
    /// last row pulled, then this device's queued ops in order, each taken
    /// only if the schema accepts it — as the judge will take them. (The
    /// visible row may hold a queued op the server will refuse; an edit of
    /// another field is not refused for it.)
    fn row_as_judged(&self, schema: &Schema, key: &RowKey) -> Option<Row> {
        let mut row = self.replica.base(key);
        for op in self.outbox.on_row(key) {
            if let Ok(after) = schema.edit(&Edit::of(op), row.as_ref(), MAX_ROW_BYTES) {
                row = Some(after.row);
            }
        }
        row
    }

    /// What the server would answer for the row after this edit, by the
    /// schema the device knows: `Ok` (or no schema known yet) or the
    /// refusal, in the server's words. Changes nothing.
    pub fn check(&self, table: &str, row_id: &str, fields: &crate::protocol::Fields) -> Result<(), Refusal> {
        let space = self.locate(table, row_id).map(|k| k.space).filter(|s| !s.is_empty());
        let draft = Draft { space, table: table.into(), row_id: row_id.into(), fields: fields.clone() };
        self.check_drafts(std::slice::from_ref(&draft)).map_err(|(_, e)| e)
    }

    /// [`Engine::check`] for edits recorded together, in order: each is
    /// judged on the row the edits before it made. The index of the first
    /// refused edit, with its refusal.
    pub fn check_drafts(&self, drafts: &[Draft]) -> Result<(), (usize, Refusal)> {
        let Some(schema) = self.checking_schema() else { return Ok(()) };
        let mut after: std::collections::BTreeMap<RowKey, Row> = std::collections::BTreeMap::new();
        // The edits are the newest writes of their rows, each newer than the
        // one before it: the marks `Schema::check_edit` gives.
        for (i, d) in drafts.iter().enumerate() {
            let key = d.place();
            let current = match after.remove(&key) {
                Some(row) => Some(row),
                None => self.row_as_judged(schema, &key),
            };
            let (at, op_id) = check_mark((drafts.len() - 1 - i) as u64);
            let edit = Edit { table: &d.table, fields: &d.fields, version: self.config.schema, at, op_id: &op_id };
            // The sender's role as this device last learned it; unknown: the server's to judge.
            if let Some(local) = d.space.as_deref().filter(|l| !l.is_empty()) {
                if let Some(role) = self.following.role(local) {
                    let name = self.following.name(local).unwrap_or(local);
                    // Who created the row, as the server last said (its base row).
                    let me = self.following.personal.as_deref().and_then(crate::space::personal_owner).unwrap_or_default();
                    schema.check_sender(&edit, name, Some(role), me, self.replica.base(&key).as_ref()).map_err(|r| (i, r))?;
                }
            }
            match schema.edit(&edit, current.as_ref(), MAX_ROW_BYTES) {
                Ok(done) => {
                    after.insert(key, done.row);
                }
                Err(refusal) => return Err((i, refusal)),
            }
        }
        Ok(())
    }
}

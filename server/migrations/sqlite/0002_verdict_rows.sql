-- A rejected verdict remembers the row its op edits, so POST /v1/verdicts can
-- recall the rejection with that row's current state. Null for applied
-- verdicts (they carry no row) and for rejections remembered before this migration.
ALTER TABLE verdicts ADD COLUMN table_name TEXT;
ALTER TABLE verdicts ADD COLUMN row_id TEXT;

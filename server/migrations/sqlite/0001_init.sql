-- marksync server, SQLite: verdicts remembered forever, rows with their last seq, one head per user.
-- Text compares by bytes (BINARY collation); no statement orders opIds or marks.
CREATE TABLE IF NOT EXISTS verdicts (
    user_id    TEXT    NOT NULL,
    op_id      TEXT    NOT NULL,
    status     TEXT    NOT NULL CHECK (status IN ('applied', 'rejected')),
    reason     TEXT,
    code       TEXT,
    decided_at INTEGER NOT NULL, -- milliseconds since the Unix epoch
    PRIMARY KEY (user_id, op_id)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS rows (
    user_id    TEXT    NOT NULL,
    table_name TEXT    NOT NULL,
    row_id     TEXT    NOT NULL,
    fields     TEXT    NOT NULL, -- JSON object: field -> value
    marks      TEXT    NOT NULL, -- JSON object: field -> {at, opId}
    seq        INTEGER NOT NULL, -- the seq of the row's latest change
    PRIMARY KEY (user_id, table_name, row_id)
);
CREATE INDEX IF NOT EXISTS rows_user_seq ON rows (user_id, seq);

CREATE TABLE IF NOT EXISTS heads (
    user_id TEXT    NOT NULL PRIMARY KEY, -- the per-user lock
    seq     INTEGER NOT NULL
);

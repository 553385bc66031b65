-- marksync server, PostgreSQL: verdicts remembered forever, rows with their last seq, one head per user.
-- Keys are COLLATE "C" (byte equality, cheap index compares). No statement orders opIds or
-- marks: ordering is the core's `newer`, in Rust, whatever the database's collation.
-- Every key starts with user_id, so the tables shard by user (e.g. Citus distributed by user_id).
CREATE TABLE IF NOT EXISTS verdicts (
    user_id    text COLLATE "C" NOT NULL,
    op_id      text COLLATE "C" NOT NULL,
    status     text   NOT NULL CHECK (status IN ('applied', 'rejected')),
    reason     text,
    code       text,
    decided_at bigint NOT NULL, -- milliseconds since the Unix epoch
    PRIMARY KEY (user_id, op_id)
);

CREATE TABLE IF NOT EXISTS rows (
    user_id    text COLLATE "C" NOT NULL,
    table_name text COLLATE "C" NOT NULL,
    row_id     text COLLATE "C" NOT NULL,
    fields     text   NOT NULL, -- JSON object: field -> value
    marks      text   NOT NULL, -- JSON object: field -> {at, opId}
    seq        bigint NOT NULL, -- the seq of the row's latest change
    PRIMARY KEY (user_id, table_name, row_id)
);
CREATE INDEX IF NOT EXISTS rows_user_seq ON rows (user_id, seq);

CREATE TABLE IF NOT EXISTS heads (
    user_id text COLLATE "C" NOT NULL PRIMARY KEY, -- the per-user lock
    seq     bigint NOT NULL
);

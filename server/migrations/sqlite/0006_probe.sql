-- The readiness probe (/readyz): the server proves it can still write by
-- writing this one row. A database that can be read but not written (a full
-- disk, a read-only file, a replica) is not ready.
CREATE TABLE IF NOT EXISTS marksync_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    at INTEGER NOT NULL
);

-- Webhook deliveries not yet answered 2xx: a transactional outbox. A push that
-- moved rows writes one delivery per space in its own transaction, so a
-- committed change always has its delivery and a rolled-back one never does.
-- Deliveries of a space go out in the order of its head, one space's at a time
-- from its queue, which says when the space may next be tried (ms): a lease
-- while a sender holds it, a backoff after a failure. A space's queue is gone
-- once its last delivery is.
CREATE TABLE IF NOT EXISTS deliveries (
    id TEXT PRIMARY KEY,
    space_id TEXT NOT NULL,
    head INTEGER NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_order ON deliveries (space_id, head);
CREATE TABLE IF NOT EXISTS delivery_queues (
    space_id TEXT PRIMARY KEY,
    next_at INTEGER NOT NULL,
    failures INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS delivery_queues_due ON delivery_queues (next_at);

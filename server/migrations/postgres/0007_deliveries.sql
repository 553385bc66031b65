-- Webhook deliveries not yet answered 2xx: a transactional outbox. A push that
-- moved rows writes one delivery per space in its own transaction, so a
-- committed change always has its delivery and a rolled-back one never does.
-- Deliveries of a space go out in the order of its head, one space's at a time
-- from its queue, which says when the space may next be tried (ms): a lease
-- while a sender holds it (two server processes never claim one: FOR UPDATE
-- SKIP LOCKED), a backoff after a failure. A space's queue is gone once its
-- last delivery is (decided under the space's lock, so no push slips between).
CREATE TABLE IF NOT EXISTS deliveries (
    id         text PRIMARY KEY,
    space_id   text COLLATE "C" NOT NULL,
    head       bigint NOT NULL,
    body       text NOT NULL,
    created_at bigint NOT NULL
);
CREATE UNIQUE INDEX IF NOT EXISTS deliveries_order ON deliveries (space_id, head);
CREATE TABLE IF NOT EXISTS delivery_queues (
    space_id   text COLLATE "C" PRIMARY KEY,
    next_at    bigint NOT NULL,
    failures   integer NOT NULL DEFAULT 0,
    last_error text
);
CREATE INDEX IF NOT EXISTS delivery_queues_due ON delivery_queues (next_at);

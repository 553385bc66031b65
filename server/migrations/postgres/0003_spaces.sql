-- Shared spaces (PROTOCOL §3c). Rows and heads belong to a space, no longer to a
-- user: every user's rows so far become their personal space's, named '~' || user id.
-- No user id has a control character, so the detour through chr(1) makes every new
-- name unique at every step (a user "~a" and a user "a" never meet half way).
ALTER TABLE rows RENAME COLUMN user_id TO space_id;
UPDATE rows SET space_id = chr(1) || space_id;
UPDATE rows SET space_id = '~' || substr(space_id, 2);
ALTER INDEX IF EXISTS rows_user_seq RENAME TO rows_space_seq;

ALTER TABLE heads RENAME COLUMN user_id TO space_id; -- the per-space lock
UPDATE heads SET space_id = chr(1) || space_id;
UPDATE heads SET space_id = '~' || substr(space_id, 2);

-- Verdicts stay the sender's (user_id); a rejection also names the space of its row
-- (null: the sender's personal space, as every op before spaces).
ALTER TABLE verdicts ADD COLUMN IF NOT EXISTS space_id text COLLATE "C";

-- Shared spaces; a personal space has no row here (its user owns it, always).
CREATE TABLE IF NOT EXISTS spaces (
    space_id   text COLLATE "C" NOT NULL PRIMARY KEY,
    created_by text   NOT NULL,
    created_at bigint NOT NULL
);

-- Who may do what where. Changed only under the space's lock (its heads row), so a
-- membership change and a push of that space are ordered one way or the other.
CREATE TABLE IF NOT EXISTS members (
    space_id   text COLLATE "C" NOT NULL,
    user_id    text COLLATE "C" NOT NULL,
    role       text   NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
    changed_at bigint NOT NULL,
    PRIMARY KEY (space_id, user_id)
);
CREATE INDEX IF NOT EXISTS members_user ON members (user_id, space_id);

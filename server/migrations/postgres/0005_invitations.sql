-- Consent (PROTOCOL §3c): an owner's adding of another user to a space is an
-- invitation, a membership only once the invitee accepts it. Until then it costs
-- the invitee nothing: no pull, event or list of spaces reads this table. Changed
-- under the space's lock, like members; an invitation past expires_at (ms) is no
-- longer pending, and is deleted when its invitee's or inviter's invitations are next counted.
CREATE TABLE IF NOT EXISTS invitations (
    space_id   text COLLATE "C" NOT NULL,
    user_id    text COLLATE "C" NOT NULL,
    role       TEXT    NOT NULL CHECK (role IN ('owner', 'editor', 'viewer')),
    invited_by text COLLATE "C" NOT NULL,
    expires_at bigint NOT NULL,
    PRIMARY KEY (space_id, user_id)
);
CREATE INDEX IF NOT EXISTS invitations_user ON invitations (user_id, space_id);
CREATE INDEX IF NOT EXISTS invitations_by ON invitations (invited_by, expires_at);

-- Verdicts are remembered forever (PROTOCOL §3): a device may ask about an op at any
-- later time, and a forgotten verdict would let the op be judged twice. No statement
-- of the server deletes one; this makes any that ever would fail, loudly.
CREATE TRIGGER IF NOT EXISTS verdicts_are_kept BEFORE DELETE ON verdicts
BEGIN
    SELECT RAISE(ABORT, 'verdicts are never deleted');
END;

-- Verdicts are remembered forever (PROTOCOL §3): a device may ask about an op at any
-- later time, and a forgotten verdict would let the op be judged twice. No statement
-- of the server deletes one; this makes any that ever would (DELETE or TRUNCATE) fail, loudly.
CREATE OR REPLACE FUNCTION marksync_verdicts_are_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'verdicts are never deleted';
END
$$;
DROP TRIGGER IF EXISTS verdicts_are_kept ON verdicts;
CREATE TRIGGER verdicts_are_kept BEFORE DELETE ON verdicts
    FOR EACH ROW EXECUTE FUNCTION marksync_verdicts_are_kept();
DROP TRIGGER IF EXISTS verdicts_are_never_truncated ON verdicts;
CREATE TRIGGER verdicts_are_never_truncated BEFORE TRUNCATE ON verdicts
    FOR EACH STATEMENT EXECUTE FUNCTION marksync_verdicts_are_kept();

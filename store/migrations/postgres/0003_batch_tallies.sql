-- Loop sub-batches count their rows in a narrow row of their own, not in the
-- batch's wide one: the fenced count that commits with every loop sub-batch
-- then rewrites three numbers instead of a whole batch row (its cursors, its
-- error, its constraints).
--
-- The invariant the fence rests on: a tally row exists exactly while its
-- batch is `running`, and carries that claim's lease epoch. The triggers
-- below keep it so on every write that changes a batch's status or epoch,
-- whichever statement makes it: a claim (or a takeover) replaces the tally
-- with one for the new epoch; any other change of status removes it. What a
-- removed tally counted is added to the batch's `rows_affected`, except when
-- the batch succeeds: its count is then the runtime's exact total.
--
-- A loop sub-batch under a lost lease finds no tally row with its epoch
-- (removed, or replaced by the new holder's), so it records nothing and,
-- its change being conditioned on the record, changes nothing. When the two
-- race, the row lock on the tally orders them: the new holder's claim waits
-- for the late sub-batch to commit and counts it, or the late sub-batch waits
-- for the claim and finds its tally gone.

CREATE TABLE sluice_batch_tallies (
    batch_id BIGINT PRIMARY KEY REFERENCES sluice_batches (id) ON DELETE CASCADE,
    lease_epoch BIGINT NOT NULL,
    rows_affected BIGINT NOT NULL DEFAULT 0
);

-- Before a batch's status or epoch changes: fold its tally into the row.
CREATE FUNCTION sluice_batch_tally_fold() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    counted BIGINT;
BEGIN
    DELETE FROM sluice_batch_tallies WHERE batch_id = OLD.id RETURNING rows_affected INTO counted;
    IF NEW.status <> 'succeeded' THEN
        NEW.rows_affected := NEW.rows_affected + COALESCE(counted, 0);
    END IF;
    RETURN NEW;
END
$$;

-- After a batch is written running under an epoch: open its tally.
CREATE FUNCTION sluice_batch_tally_open() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sluice_batch_tallies (batch_id, lease_epoch) VALUES (NEW.id, NEW.lease_epoch);
    RETURN NULL;
END
$$;

CREATE TRIGGER sluice_batch_tally_fold
    BEFORE UPDATE OF status, lease_epoch ON sluice_batches
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease_epoch IS DISTINCT FROM NEW.lease_epoch)
    EXECUTE FUNCTION sluice_batch_tally_fold();

CREATE TRIGGER sluice_batch_tally_open_on_insert
    AFTER INSERT ON sluice_batches
    FOR EACH ROW
    WHEN (NEW.status = 'running')
    EXECUTE FUNCTION sluice_batch_tally_open();

CREATE TRIGGER sluice_batch_tally_open_on_update
    AFTER UPDATE OF status, lease_epoch ON sluice_batches
    FOR EACH ROW
    WHEN (NEW.status = 'running' AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.lease_epoch IS DISTINCT FROM NEW.lease_epoch))
    EXECUTE FUNCTION sluice_batch_tally_open();

-- Batches running when this migration runs get their tallies now.
INSERT INTO sluice_batch_tallies (batch_id, lease_epoch)
    SELECT id, lease_epoch FROM sluice_batches WHERE status = 'running';

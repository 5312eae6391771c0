-- Loop sub-batches count their rows in their batch's own row again, as every
-- other sub-batch does: a paired benchmark could not tell the narrow tally
-- row from the batch row, so the tally table and its triggers go. What a
-- running batch's tally counted joins the batch's count first.

UPDATE sluice_batches b SET rows_affected = b.rows_affected + t.rows_affected
    FROM sluice_batch_tallies t WHERE t.batch_id = b.id;

DROP TRIGGER sluice_batch_tally_open_on_update ON sluice_batches;
DROP TRIGGER sluice_batch_tally_open_on_insert ON sluice_batches;
DROP TRIGGER sluice_batch_tally_fold ON sluice_batches;
DROP FUNCTION sluice_batch_tally_open();
DROP FUNCTION sluice_batch_tally_fold();
DROP TABLE sluice_batch_tallies;

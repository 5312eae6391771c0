-- A partition drop that commits on its own (MySQL's `ALTER TABLE … DROP
-- PARTITION`) is recorded in two steps: its intent here before the drop
-- (`{"partition": …, "rows": …}`, fenced by the batch's lease and
-- progress), cleared with the rows added after it. A worker that takes
-- the batch over finds an intent left by one that died and settles it
-- from the table's catalogue: dropped, the rows count; not, nothing does.

ALTER TABLE sluice_batches ADD COLUMN pending_drop TEXT;

-- What the session that enqueued an operation read its SQL with, recorded
-- by the columns' defaults in that session as the row is inserted: the
-- schemas it resolved names through (`current_schemas(false)` as a JSON
-- array) and its role (row-level security shows each role its own rows).
-- A worker whose sessions would resolve a name to another table, or see
-- other rows of a table with row-level security, refuses the operation.
-- Operations enqueued before this migration record neither and are not
-- checked.

ALTER TABLE sluice_operations ADD COLUMN search_path TEXT NULL;
ALTER TABLE sluice_operations ADD COLUMN enqueued_by TEXT NULL;
ALTER TABLE sluice_operations ALTER COLUMN search_path SET DEFAULT to_json(current_schemas(false))::text;
ALTER TABLE sluice_operations ALTER COLUMN enqueued_by SET DEFAULT current_user;

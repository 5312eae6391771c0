-- The schemas through which the session that enqueued an operation resolved
-- the names in its SQL (`current_schemas(false)` as a JSON array), recorded
-- by the column's default in that session as the row is inserted. A worker
-- whose sessions resolve names through other schemas would find another
-- table of the same name, so it refuses to run the operation. Operations
-- enqueued before this migration have none, and are not checked.

ALTER TABLE sluice_operations ADD COLUMN search_path TEXT NULL;
ALTER TABLE sluice_operations ALTER COLUMN search_path SET DEFAULT to_json(current_schemas(false))::text;

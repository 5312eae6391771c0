-- An operation may work on a database other than the store's own
-- (`enqueue --target`): its URL without a password, its name, and the
-- fleet of operations (one per target) it was enqueued in, with how many
-- of them may run at once. And the store's own
-- name, random and fixed, which the progress records it keeps in such a
-- database carry, so two stores sharing a target never read each other's.

ALTER TABLE sluice_operations ADD COLUMN target_url TEXT;
ALTER TABLE sluice_operations ADD COLUMN target_name TEXT;
ALTER TABLE sluice_operations ADD COLUMN fleet TEXT;
ALTER TABLE sluice_operations ADD COLUMN fleet_cap BIGINT;

CREATE TABLE sluice_coordinator (id TEXT NOT NULL PRIMARY KEY);
INSERT INTO sluice_coordinator (id) VALUES (lower(hex(randomblob(16))));

//! MySQL's and MariaDB's core statements (operations, events, batches, leases).

use super::Statements;

/// MySQL's and MariaDB's statements: PostgreSQL's (rows read for a write
/// locked with `FOR UPDATE`), with the claims and the prune in MySQL's
/// words. Inserts read their ids back (MySQL 8 has no `INSERT …
/// RETURNING`). Claims skip rows another node holds (`SKIP LOCKED`, MariaDB 10.6
/// and MySQL 8.0 on), locking the batches alone (a locking read does not
/// lock what its subquery reads); a statement that limits the rows it then
/// changes picks them in a derived table, which MySQL allows where it
/// refuses `LIMIT` in an `IN`; a duplicate active identity is refused by
/// the unique index, not skipped (no partial index to name).
pub(crate) const STATEMENTS: Statements = Statements {
    on_active_identity: "",
    fleet_head_locked: "SELECT id FROM sluice_operations WHERE fleet = $1 ORDER BY id LIMIT 1 FOR UPDATE",
    insert_batch: "INSERT INTO sluice_batches \
        (operation_id, ordinal, start_cursor, end_cursor, batch_size, sub_batch_size, status, created_at, \
         claimed_by, lease_epoch, attempts, lease_expires_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)",
    last_insert_id: Some("SELECT CAST(LAST_INSERT_ID() AS SIGNED)"),
    claimable_operations: "SELECT * FROM sluice_operations \
        WHERE (status = 'pending' OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < $1))) \
        AND ($3 IS NULL OR JSON_CONTAINS($3, JSON_QUOTE(kind))) \
        AND NOT EXISTS (SELECT 1 FROM sluice_switches s WHERE s.scope = kind OR s.scope = '*') \
        ORDER BY CASE WHEN origin = 'user' OR created_at < $4 THEN 0 ELSE 1 END, priority DESC, id LIMIT $2 \
        FOR UPDATE SKIP LOCKED",
    claimable_batches: "SELECT b.id FROM sluice_batches b \
        WHERE b.operation_id IN (SELECT o.id FROM sluice_operations o WHERE o.status = 'running') \
        AND ($1 IS NULL OR b.operation_id = $1) \
        AND (b.status = 'pending' OR (b.status = 'running' AND b.lease_expires_at < $2)) \
        ORDER BY b.operation_id, b.ordinal LIMIT $3 FOR UPDATE SKIP LOCKED",
    prune_batches: "DELETE FROM sluice_batches WHERE id IN (SELECT id FROM (\
          SELECT b.id FROM sluice_batches b JOIN sluice_operations o ON o.id = b.operation_id \
          WHERE o.status IN ('finished', 'cancelled') AND o.finished_at < $1 LIMIT $2) AS chosen)",
    ..super::postgres::STATEMENTS
};

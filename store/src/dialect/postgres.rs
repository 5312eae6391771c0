//! PostgreSQL's core statements (operations, events, batches, leases).

use super::Statements;

/// PostgreSQL's statements: SQLite's, but rows read for a write are locked
/// (`FOR UPDATE`), claims skip rows another node is claiming (`SKIP
/// LOCKED`), and parameters compared with `NULL` are typed.
pub(crate) const STATEMENTS: Statements = Statements {
    begin_write: "BEGIN",
    operation_locked: "SELECT * FROM sluice_operations WHERE id = $1 FOR UPDATE",
    fleet_head_locked: "SELECT id FROM sluice_operations WHERE fleet = $1 ORDER BY id LIMIT 1 FOR UPDATE",
    claimable_operations: "SELECT * FROM sluice_operations \
        WHERE (status = 'pending' OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < $1))) \
        AND ($3::TEXT IS NULL OR kind IN (SELECT jsonb_array_elements_text($3::JSONB))) \
        AND NOT EXISTS (SELECT 1 FROM sluice_switches s WHERE s.scope = kind OR s.scope = '*') \
        ORDER BY CASE WHEN origin = 'user' OR created_at < $4 THEN 0 ELSE 1 END, priority DESC, id LIMIT $2 \
        FOR UPDATE SKIP LOCKED",
    claimable_batches: "SELECT b.id FROM sluice_batches b JOIN sluice_operations o ON o.id = b.operation_id \
        WHERE o.status = 'running' AND ($1::BIGINT IS NULL OR b.operation_id = $1) \
        AND (b.status = 'pending' OR (b.status = 'running' AND b.lease_expires_at < $2)) \
        ORDER BY b.operation_id, b.ordinal LIMIT $3 FOR UPDATE OF b SKIP LOCKED",
    held_batch_locked: "SELECT * FROM sluice_batches \
        WHERE id = $1 AND lease_epoch = $2 AND status = 'running' FOR UPDATE",
    ..super::sqlite::STATEMENTS
};

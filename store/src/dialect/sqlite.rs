//! SQLite's core statements (operations, events, batches, leases).

use super::Statements;

/// SQLite's statements: writers are serialised by the database lock, so no
/// statement locks rows.
pub(crate) const STATEMENTS: Statements = Statements {
    on_active_identity: " ON CONFLICT (unique_key) WHERE status IN ('pending', 'running', 'paused') \
        DO NOTHING",
    begin_write: "BEGIN IMMEDIATE",
    active_operation: "SELECT id FROM sluice_operations \
        WHERE unique_key = $1 AND status IN ('pending', 'running', 'paused')",
    operation: "SELECT * FROM sluice_operations WHERE id = $1",
    operation_locked: "SELECT * FROM sluice_operations WHERE id = $1",
    fleet_head_locked: "SELECT id FROM sluice_operations WHERE fleet = $1 ORDER BY id LIMIT 1",
    list_operations: "SELECT * FROM sluice_operations \
        WHERE ($1 IS NULL OR status = $1) AND ($2 IS NULL OR kind = $2) AND ($3 IS NULL OR id > $3) \
        ORDER BY id LIMIT $4",
    list_operations_newest: "SELECT * FROM sluice_operations \
        WHERE ($1 IS NULL OR status = $1) AND ($2 IS NULL OR kind = $2) AND ($3 IS NULL OR id < $3) \
        ORDER BY id DESC LIMIT $4",
    events_after: "SELECT operation_id, seq, kind, recorded_at, format_version, payload \
        FROM sluice_events WHERE operation_id = $1 AND seq > $2 ORDER BY seq",
    claimable_operations: "SELECT * FROM sluice_operations \
        WHERE (status = 'pending' OR (status = 'running' AND (lease_expires_at IS NULL OR lease_expires_at < $1))) \
        AND ($3 IS NULL OR kind IN (SELECT value FROM json_each($3))) \
        AND NOT EXISTS (SELECT 1 FROM sluice_switches s WHERE s.scope = kind OR s.scope = '*') \
        ORDER BY CASE WHEN origin = 'user' OR created_at < $4 THEN 0 ELSE 1 END, priority DESC, id LIMIT $2",
    renew_operation_lease: "UPDATE sluice_operations SET lease_expires_at = $4 \
        WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3",
    insert_event: "INSERT INTO sluice_events \
        (operation_id, seq, kind, recorded_at, format_version, payload) \
        VALUES ($1, $2, $3, $4, $5, $6)",
    insert_batch: "INSERT INTO sluice_batches \
        (operation_id, ordinal, start_cursor, end_cursor, batch_size, sub_batch_size, status, created_at, \
         claimed_by, lease_epoch, attempts, lease_expires_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11) RETURNING *",
    last_insert_id: None,
    claimable_batches: "SELECT b.id FROM sluice_batches b JOIN sluice_operations o ON o.id = b.operation_id \
        WHERE o.status = 'running' AND ($1 IS NULL OR b.operation_id = $1) \
        AND (b.status = 'pending' OR (b.status = 'running' AND b.lease_expires_at < $2)) \
        ORDER BY b.operation_id, b.ordinal LIMIT $3",
    claim_batch: "UPDATE sluice_batches SET status = $2, claimed_by = $3, lease_epoch = lease_epoch + 1, \
        attempts = attempts + 1, lease_expires_at = $4 WHERE id = $1",
    batch: "SELECT * FROM sluice_batches WHERE id = $1",
    release_batch: "UPDATE sluice_batches SET status = $3, lease_expires_at = NULL, attempts = attempts - 1 \
        WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
    renew_batch_lease: "UPDATE sluice_batches SET lease_expires_at = $3 \
        WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
    complete_batch: "UPDATE sluice_batches SET status = $6, rows_affected = $3, duration_ms = $4, \
        finished_at = $5, lease_expires_at = NULL \
        WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
    fail_batch: "UPDATE sluice_batches SET status = $3, last_error = $4, lease_expires_at = NULL, \
        sub_batch_size = COALESCE($5, sub_batch_size), finished_at = CASE WHEN $3 = 'failed' THEN $6 END \
        WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
    set_batch_status: "UPDATE sluice_batches SET status = $2, finished_at = NULL WHERE id = $1",
    held_batch_locked: "SELECT * FROM sluice_batches \
        WHERE id = $1 AND lease_epoch = $2 AND status = 'running'",
    shorten_batch: "UPDATE sluice_batches SET end_cursor = $2, batch_size = $3, sub_batch_size = $4, \
        last_error = $5, status = $6, attempts = 0, lease_expires_at = NULL WHERE id = $1",
    insert_split_batch: "INSERT INTO sluice_batches \
        (operation_id, ordinal, start_cursor, end_cursor, batch_size, sub_batch_size, status, created_at) \
        VALUES ($1, $2, $3, $4, $5, $6, $8, $7)",
    requeue_failed_batches: "UPDATE sluice_batches SET status = $2, finished_at = NULL \
        WHERE operation_id = $1 AND status = 'failed'",
    batches: "SELECT * FROM sluice_batches WHERE operation_id = $1 ORDER BY ordinal",
    prune_batches: "DELETE FROM sluice_batches WHERE id IN (\
          SELECT b.id FROM sluice_batches b JOIN sluice_operations o ON o.id = b.operation_id \
          WHERE o.status IN ('finished', 'cancelled') AND o.finished_at < $1 LIMIT $2)",
};

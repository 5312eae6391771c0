//! The store's core statements (operations, events, batches, leases), one
//! named statement each, for each SQL dialect. A [`Statements`] value is one
//! dialect's set: [`SQLITE`] writes every statement out, and [`POSTGRES`]
//! only those it words differently (row locks, typed parameters), taking
//! the rest from SQLite's. A new dialect is one more value: the compiler
//! names every statement it still lacks.
//!
//! Every statement uses `$N` placeholders, which SQLite and PostgreSQL
//! accept and [`crate::positional`] turns into MySQL's `?`. The statements that write a whole projection are derived from its
//! columns ([`crate::operation_row`]); the sub-batch statements, built around
//! an operation's own, live with the sub-batches ([`crate::sub_batch`]).

/// One dialect's statements. Each field's comment says what its statement
/// guarantees and what it binds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Statements {
    /// What an operation's `INSERT` does when an active operation has its
    /// identity: nothing (and no id returned), or, where empty, fail on the
    /// unique index (MySQL, which has no partial index to name; the store
    /// reads that failure as the same "nothing").
    pub on_active_identity: &'static str,
    /// Begins a write transaction; on SQLite it takes the database's write
    /// lock at once, so nothing read inside it is changed by another writer.
    pub begin_write: &'static str,
    /// The active (pending, running, paused) operation with unique key `$1`.
    pub active_operation: &'static str,
    /// Operation `$1`.
    pub operation: &'static str,
    /// Operation `$1`, locked for the rest of the transaction (PostgreSQL).
    pub operation_locked: &'static str,
    /// Operations of status `$1` and kind `$2` (either `NULL`: any) with an
    /// id above `$3` (`NULL`: any), by id, at most `$4`.
    pub list_operations: &'static str,
    /// The same newest first: ids below `$3`, highest first, at most `$4`.
    pub list_operations_newest: &'static str,
    /// Operation `$1`'s events after sequence number `$2`, in order.
    pub events_after: &'static str,
    /// Up to `$2` claimable operations at time `$1` — pending, or running
    /// under a lapsed lease; of the kinds in JSON array `$3` (`NULL`: any);
    /// none a kill switch stops — user-made or older than `$4` first, then
    /// by priority and id; rows other transactions hold are skipped
    /// (PostgreSQL).
    pub claimable_operations: &'static str,
    /// Extends operation `$1`'s lease to `$4`, only while node `$2` holds it
    /// under epoch `$3`.
    pub renew_operation_lease: &'static str,
    /// Inserts the event of operation `$1` at sequence `$2` (kind `$3`, time
    /// `$4`, format `$5`, payload `$6`); the primary key refuses a second
    /// event at one sequence number.
    pub insert_event: &'static str,
    /// Inserts batch `$2` of operation `$1` (cursors `$3`–`$4`, sizes
    /// `$5`–`$6`, status `$7`, time `$8`), claimed by `$9` under epoch and
    /// attempt `$10` until `$11` when those are set; returns it, unless
    /// the dialect reads inserted rows back ([`Statements::last_insert_id`]).
    pub insert_batch: &'static str,
    /// Where an `INSERT` cannot return what it wrote (MySQL 8 has no
    /// `INSERT … RETURNING`; MariaDB has): the id the connection's last
    /// `INSERT` gave, read right after it in the same transaction. `None`:
    /// the dialect's inserts return their rows.
    pub last_insert_id: Option<&'static str>,
    /// Up to `$3` claimable batches of running operations (of operation
    /// `$1`, or any): pending, or running under a claim that lapsed before
    /// `$2`; oldest first; their ids, the rows locked for the rest of the
    /// transaction, rows other transactions hold skipped (PostgreSQL,
    /// MySQL).
    pub claimable_batches: &'static str,
    /// Claims batch `$1` for node `$3` until `$4`: status `$2`, a new
    /// epoch, one more attempt.
    pub claim_batch: &'static str,
    /// Batch `$1`.
    pub batch: &'static str,
    /// Gives batch `$1` back (status `$3`, the attempt not counted), only
    /// while epoch `$2` holds it.
    pub release_batch: &'static str,
    /// Extends batch `$1`'s claim to `$3`, only while epoch `$2` holds it.
    pub renew_batch_lease: &'static str,
    /// Records batch `$1` done (status `$6`, `$3` rows in `$4` ms at `$5`),
    /// only while epoch `$2` holds it.
    pub complete_batch: &'static str,
    /// Records batch `$1`'s failed attempt (status `$3`, error `$4`, the
    /// sub-batch size `$5` if set, finished at `$6` if failed for good),
    /// only while epoch `$2` holds it.
    pub fail_batch: &'static str,
    /// Sets batch `$1`'s status to `$2`, unfinished (the decision re-taken
    /// once its operation was read, in the same transaction).
    pub set_batch_status: &'static str,
    /// Batch `$1` while epoch `$2` holds it, locked for the rest of the
    /// transaction (PostgreSQL).
    pub held_batch_locked: &'static str,
    /// Shortens batch `$1` to end at `$2` with size `$3`, sub-batch size
    /// `$4`, error `$5` and status `$6`; its attempts start afresh and its
    /// committed progress stays.
    pub shorten_batch: &'static str,
    /// Inserts the second half of a split: batch `$2` of operation `$1` over
    /// `$3`–`$4`, sizes `$5`–`$6`, status `$8`, planned at `$7`.
    pub insert_split_batch: &'static str,
    /// Operation `$1`'s failed batches set to status `$2`, unfinished.
    pub requeue_failed_batches: &'static str,
    /// Operation `$1`'s batches, in order.
    pub batches: &'static str,
    /// Deletes up to `$2` batches of operations that finished or were
    /// cancelled before `$1`.
    pub prune_batches: &'static str,
}

/// SQLite's statements: writers are serialised by the database lock, so no
/// statement locks rows.
pub(crate) const SQLITE: Statements = Statements {
    on_active_identity: " ON CONFLICT (unique_key) WHERE status IN ('pending', 'running', 'paused') \
        DO NOTHING",
    begin_write: "BEGIN IMMEDIATE",
    active_operation: "SELECT id FROM sluice_operations \
        WHERE unique_key = $1 AND status IN ('pending', 'running', 'paused')",
    operation: "SELECT * FROM sluice_operations WHERE id = $1",
    operation_locked: "SELECT * FROM sluice_operations WHERE id = $1",
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

/// PostgreSQL's statements: SQLite's, but rows read for a write are locked
/// (`FOR UPDATE`), claims skip rows another node is claiming (`SKIP
/// LOCKED`), and parameters compared with `NULL` are typed.
pub(crate) const POSTGRES: Statements = Statements {
    begin_write: "BEGIN",
    operation_locked: "SELECT * FROM sluice_operations WHERE id = $1 FOR UPDATE",
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
    ..SQLITE
};

/// MySQL's and MariaDB's statements: PostgreSQL's (rows read for a write
/// locked with `FOR UPDATE`), with the claims and the prune in MySQL's
/// words. Inserts read their ids back (MySQL 8 has no `INSERT …
/// RETURNING`). Claims skip rows another node holds (`SKIP LOCKED`, MariaDB 10.6
/// and MySQL 8.0 on), locking the batches alone (a locking read does not
/// lock what its subquery reads); a statement that limits the rows it then
/// changes picks them in a derived table, which MySQL allows where it
/// refuses `LIMIT` in an `IN`; a duplicate active identity is refused by
/// the unique index, not skipped (no partial index to name).
pub(crate) const MYSQL: Statements = Statements {
    on_active_identity: "",
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
    ..POSTGRES
};

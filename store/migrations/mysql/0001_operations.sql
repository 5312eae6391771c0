-- Sluice's durable state on MySQL and MariaDB (InnoDB: transactions, row
-- locks, SKIP LOCKED). The same tables as the other dialects: times are
-- epoch milliseconds (BIGINT), cursors JSON arrays as text. Text is
-- compared byte for byte (utf8mb4_bin), as the other dialects compare it.

CREATE TABLE sluice_operations (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    unique_key VARCHAR(64) NOT NULL,
    kind VARCHAR(255) NOT NULL CHECK (length(kind) > 0),
    target_table TEXT NOT NULL CHECK (length(target_table) > 0),
    batching_columns TEXT NOT NULL,
    arguments LONGTEXT NOT NULL,
    tenant_id TEXT,
    origin VARCHAR(16) NOT NULL CHECK (origin IN ('user', 'schedule')),
    priority INTEGER NOT NULL,
    min_cursor TEXT,
    max_cursor TEXT,
    `cursor` TEXT,
    batch_size BIGINT NOT NULL CHECK (batch_size > 0),
    sub_batch_size BIGINT NOT NULL CHECK (sub_batch_size > 0),
    pause_ms BIGINT NOT NULL CHECK (pause_ms >= 0),
    max_runtime_ms BIGINT CHECK (max_runtime_ms > 0),
    max_rows_per_run BIGINT CHECK (max_rows_per_run > 0),
    estimated_rows BIGINT CHECK (estimated_rows >= 0),
    trace_context TEXT,
    status VARCHAR(16) NOT NULL CHECK (status IN ('pending', 'running', 'paused', 'failed', 'finished', 'cancelled')),
    health VARCHAR(16) NOT NULL CHECK (health IN ('normal', 'throttled', 'stopped')),
    health_percent INTEGER CHECK (health_percent BETWEEN 1 AND 99),
    health_reason TEXT,
    rows_done BIGINT NOT NULL CHECK (rows_done >= 0),
    batches_planned BIGINT NOT NULL CHECK (batches_planned >= 0),
    batches_succeeded BIGINT NOT NULL CHECK (batches_succeeded >= 0),
    batch_failures BIGINT NOT NULL CHECK (batch_failures >= 0),
    last_error TEXT,
    node TEXT,
    created_at BIGINT NOT NULL,
    started_at BIGINT,
    updated_at BIGINT NOT NULL,
    finished_at BIGINT,
    last_seq BIGINT NOT NULL CHECK (last_seq >= 1),
    lease_owner TEXT,
    lease_epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    -- Uniqueness: one active (pending, running, paused) operation per
    -- identity. MySQL has no partial index, so the key is kept only while
    -- the operation is active, and a unique index ignores the NULLs.
    active_key VARCHAR(64) GENERATED ALWAYS AS
        (CASE WHEN status IN ('pending', 'running', 'paused') THEN unique_key END) STORED,
    UNIQUE KEY sluice_operations_active_identity (active_key),
    KEY sluice_operations_by_status (status, origin, priority, id),
    KEY sluice_operations_by_kind (kind, status),
    -- A table constraint: MySQL 8 lets a column's CHECK name that column alone.
    CHECK (batches_succeeded <= batches_planned),
    CHECK ((status IN ('failed', 'finished', 'cancelled')) = (finished_at IS NOT NULL)),
    CHECK ((health = 'throttled') = (health_percent IS NOT NULL)),
    CHECK (lease_owner IS NULL OR status = 'running')
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE sluice_events (
    operation_id BIGINT NOT NULL,
    seq BIGINT NOT NULL CHECK (seq >= 1),
    kind VARCHAR(64) NOT NULL,
    recorded_at BIGINT NOT NULL,
    format_version INTEGER NOT NULL,
    payload LONGBLOB NOT NULL,
    PRIMARY KEY (operation_id, seq),
    FOREIGN KEY (operation_id) REFERENCES sluice_operations (id) ON DELETE CASCADE
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE sluice_batches (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    operation_id BIGINT NOT NULL,
    ordinal BIGINT NOT NULL CHECK (ordinal >= 1),
    start_cursor TEXT,
    end_cursor TEXT,
    progress_cursor TEXT,
    batch_size BIGINT NOT NULL CHECK (batch_size > 0),
    sub_batch_size BIGINT NOT NULL CHECK (sub_batch_size > 0),
    status VARCHAR(16) NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    rows_affected BIGINT NOT NULL DEFAULT 0 CHECK (rows_affected >= 0),
    duration_ms BIGINT,
    last_error TEXT,
    claimed_by TEXT,
    lease_epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    created_at BIGINT NOT NULL,
    finished_at BIGINT,
    UNIQUE KEY sluice_batches_ordinal (operation_id, ordinal),
    KEY sluice_batches_claimable (status, operation_id, ordinal),
    FOREIGN KEY (operation_id) REFERENCES sluice_operations (id) ON DELETE CASCADE,
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

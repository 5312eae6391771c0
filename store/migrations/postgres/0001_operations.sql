-- Sluice's durable state. Times are epoch milliseconds (BIGINT) in every
-- dialect: exact, sortable, and identical on replay. Cursors are JSON arrays.

CREATE TABLE sluice_operations (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    unique_key TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (length(kind) > 0),
    target_table TEXT NOT NULL CHECK (length(target_table) > 0),
    batching_columns TEXT NOT NULL,
    arguments TEXT NOT NULL,
    tenant_id TEXT,
    origin TEXT NOT NULL CHECK (origin IN ('user', 'schedule')),
    priority INTEGER NOT NULL,
    min_cursor TEXT,
    max_cursor TEXT,
    cursor TEXT,
    batch_size BIGINT NOT NULL CHECK (batch_size > 0),
    sub_batch_size BIGINT NOT NULL CHECK (sub_batch_size > 0),
    pause_ms BIGINT NOT NULL CHECK (pause_ms >= 0),
    max_runtime_ms BIGINT CHECK (max_runtime_ms > 0),
    max_rows_per_run BIGINT CHECK (max_rows_per_run > 0),
    estimated_rows BIGINT CHECK (estimated_rows >= 0),
    trace_context TEXT,
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'paused', 'failed', 'finished', 'cancelled')),
    health TEXT NOT NULL CHECK (health IN ('normal', 'throttled', 'stopped')),
    health_percent INTEGER CHECK (health_percent BETWEEN 1 AND 99),
    health_reason TEXT,
    rows_done BIGINT NOT NULL CHECK (rows_done >= 0),
    batches_planned BIGINT NOT NULL CHECK (batches_planned >= 0),
    batches_succeeded BIGINT NOT NULL CHECK (batches_succeeded >= 0 AND batches_succeeded <= batches_planned),
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
    CHECK ((status IN ('failed', 'finished', 'cancelled')) = (finished_at IS NOT NULL)),
    CHECK ((health = 'throttled') = (health_percent IS NOT NULL)),
    CHECK (lease_owner IS NULL OR status = 'running')
);

-- Uniqueness: one active (pending, running, paused) operation per identity.
CREATE UNIQUE INDEX sluice_operations_active_identity
    ON sluice_operations (unique_key) WHERE status IN ('pending', 'running', 'paused');
CREATE INDEX sluice_operations_by_status ON sluice_operations (status, origin, priority, id);
CREATE INDEX sluice_operations_by_kind ON sluice_operations (kind, status);

CREATE TABLE sluice_events (
    operation_id BIGINT NOT NULL REFERENCES sluice_operations (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL CHECK (seq >= 1),
    kind TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    format_version INTEGER NOT NULL,
    payload BYTEA NOT NULL,
    PRIMARY KEY (operation_id, seq)
);

CREATE TABLE sluice_batches (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operation_id BIGINT NOT NULL REFERENCES sluice_operations (id) ON DELETE CASCADE,
    ordinal BIGINT NOT NULL CHECK (ordinal >= 1),
    start_cursor TEXT,
    end_cursor TEXT,
    progress_cursor TEXT,
    batch_size BIGINT NOT NULL CHECK (batch_size > 0),
    sub_batch_size BIGINT NOT NULL CHECK (sub_batch_size > 0),
    status TEXT NOT NULL CHECK (status IN ('pending', 'running', 'succeeded', 'failed')),
    attempts INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    rows_affected BIGINT NOT NULL DEFAULT 0 CHECK (rows_affected >= 0),
    duration_ms BIGINT,
    last_error TEXT,
    claimed_by TEXT,
    lease_epoch BIGINT NOT NULL DEFAULT 0,
    lease_expires_at BIGINT,
    created_at BIGINT NOT NULL,
    finished_at BIGINT,
    UNIQUE (operation_id, ordinal),
    CHECK ((status = 'running') = (lease_expires_at IS NOT NULL))
);

CREATE INDEX sluice_batches_claimable ON sluice_batches (status, operation_id, ordinal);

-- Recurring operations, their fires, and the kill switches.

CREATE TABLE sluice_schedules (
    name TEXT PRIMARY KEY CHECK (length(name) > 0),
    kind TEXT NOT NULL CHECK (length(kind) > 0),
    arguments TEXT NOT NULL,
    options TEXT NOT NULL,
    cron TEXT NOT NULL,
    time_zone TEXT NOT NULL,
    jitter_ms BIGINT NOT NULL CHECK (jitter_ms >= 0),
    enabled BOOLEAN NOT NULL,
    -- The cron time of the next fire, and when it fires (that plus its jitter).
    due_at BIGINT NOT NULL,
    fire_at BIGINT NOT NULL CHECK (fire_at >= due_at),
    last_operation_id BIGINT,
    created_at BIGINT NOT NULL
);
CREATE INDEX sluice_schedules_by_fire_at ON sluice_schedules (enabled, fire_at);

CREATE TABLE sluice_schedule_fires (
    id BIGSERIAL PRIMARY KEY,
    schedule TEXT NOT NULL,
    due_at BIGINT NOT NULL,
    fired_at BIGINT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('enqueued', 'skipped', 'refused')),
    operation_id BIGINT,
    reason TEXT,
    UNIQUE (schedule, due_at)
);

CREATE TABLE sluice_switches (
    scope TEXT PRIMARY KEY CHECK (length(scope) > 0),
    reason TEXT NOT NULL,
    set_at BIGINT NOT NULL
);

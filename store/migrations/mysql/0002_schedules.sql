-- Recurring operations, their fires, and the kill switches.

CREATE TABLE sluice_schedules (
    name VARCHAR(255) NOT NULL PRIMARY KEY CHECK (length(name) > 0),
    kind VARCHAR(255) NOT NULL CHECK (length(kind) > 0),
    arguments LONGTEXT NOT NULL,
    options LONGTEXT NOT NULL,
    cron TEXT NOT NULL,
    time_zone TEXT NOT NULL,
    jitter_ms BIGINT NOT NULL CHECK (jitter_ms >= 0),
    enabled BOOLEAN NOT NULL,
    -- The cron time of the next fire, and when it fires (that plus its jitter).
    due_at BIGINT NOT NULL,
    fire_at BIGINT NOT NULL CHECK (fire_at >= due_at),
    last_operation_id BIGINT,
    created_at BIGINT NOT NULL,
    KEY sluice_schedules_by_fire_at (enabled, fire_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE sluice_schedule_fires (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    schedule VARCHAR(255) NOT NULL,
    due_at BIGINT NOT NULL,
    fired_at BIGINT NOT NULL,
    outcome VARCHAR(16) NOT NULL CHECK (outcome IN ('enqueued', 'skipped', 'refused')),
    operation_id BIGINT,
    reason TEXT,
    UNIQUE KEY sluice_schedule_fires_once (schedule, due_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE sluice_switches (
    scope VARCHAR(255) NOT NULL PRIMARY KEY CHECK (length(scope) > 0),
    reason TEXT NOT NULL,
    set_at BIGINT NOT NULL
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

-- One row: the time (epoch milliseconds) a worker watching replicas last
-- wrote here. Read on each replica, it says how far behind the replica is.

CREATE TABLE sluice_heartbeat (
    id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
    beat_ms BIGINT NOT NULL
) ENGINE = InnoDB;

INSERT INTO sluice_heartbeat (id, beat_ms) VALUES (1, 0);

-- Run windows (`--window 00:00-06:00 --time-zone Europe/Paris`): the daily
-- local hours in which `target` (`operation:<id>`, `kind:<kind>` or `*`)
-- may work. Outside them no sub-batch starts, and each worker's scheduler
-- pauses the target until the next opening.

CREATE TABLE sluice_windows (
    target TEXT PRIMARY KEY CHECK (length(target) > 0),
    run_window TEXT NOT NULL,
    time_zone TEXT NOT NULL
);

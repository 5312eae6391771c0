-- Latency budgets (`enqueue --latency-budget`, `sluice limit
-- --latency-budget`): the foreground latency `target` (`operation:<id>`,
-- `kind:<kind>` or `*`) may cost, as the canary's p99 in microseconds
-- (-1: auto, from the p99 measured before the work; 0: off). The most
-- specific one set applies; with none, auto.
--
-- Canaries: each worker's latest measure of the foreground latency on a
-- target table (a point read of it and this row's write, in its own
-- transaction, timed end to end): the rolling p99, the budget it was held
-- to, and when, so `show`, `list` and the console say what binds.

CREATE TABLE sluice_latency_budgets (
    target TEXT PRIMARY KEY CHECK (length(target) > 0),
    budget_us BIGINT NOT NULL CHECK (budget_us >= -1)
);

CREATE TABLE sluice_canaries (
    table_name TEXT PRIMARY KEY CHECK (length(table_name) > 0),
    p99_us BIGINT NOT NULL,
    budget_us BIGINT,
    samples BIGINT NOT NULL,
    measured_at BIGINT NOT NULL
);

-- Rate limits (`enqueue --max-rate`, `sluice limit`): rows per second for
-- `target` (`operation:<id>`, `kind:<kind>` or `*`), shared by every
-- worker through one token bucket per row: a worker takes a sub-batch's
-- rows from `tokens` (refilled at `rows_per_second` since `refilled_at`,
-- epoch milliseconds, up to one second's worth) before it runs it, and
-- waits out a debt.

CREATE TABLE sluice_rate_limits (
    target TEXT PRIMARY KEY CHECK (length(target) > 0),
    rows_per_second BIGINT NOT NULL CHECK (rows_per_second > 0),
    tokens DOUBLE PRECISION NOT NULL,
    refilled_at BIGINT NOT NULL
);

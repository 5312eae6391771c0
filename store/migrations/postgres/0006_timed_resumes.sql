-- Pauses with an end (`sluice pause --until`): `target` is `operation:<id>`,
-- `kind:<kind>` or `*`; a worker's scheduler resumes it once `resume_at`
-- (epoch milliseconds) has passed, and any pause or resume of the same
-- target removes the row.

CREATE TABLE sluice_resumes (
    target TEXT PRIMARY KEY CHECK (length(target) > 0),
    resume_at BIGINT NOT NULL
);

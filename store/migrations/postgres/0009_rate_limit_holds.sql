-- Which rate limit binds now: a worker that takes rows from the buckets and
-- must wait stamps the bucket deepest in debt with the end of its wait
-- (epoch milliseconds), so `show` and `list` can say which limit holds an
-- operation back without asking the worker that runs it.

ALTER TABLE sluice_rate_limits ADD COLUMN held_until BIGINT NULL;

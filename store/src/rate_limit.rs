//! Rate limits shared by every worker on one store: one token bucket per
//! limit (`operation:<id>`, `fleet:<key>`, `kind:<kind>` or `*`), refilled and debited in
//! the store, so four workers together keep one limit. A worker that must
//! wait stamps the limit that holds it, so anyone reading the store can
//! say which limit binds an operation now.

use serde::Serialize;

use crate::error::StoreError;
use crate::schedule::{kind_target, operation_target};

/// How a fleet's rate limit names it (`fleet:<key>`): one bucket for every
/// operation of the fleet ([`crate::OperationSpec::fleet`]).
pub fn fleet_target(fleet: &str) -> String {
    format!("fleet:{fleet}")
}

/// The targets of the limits an operation obeys besides everyone's: its
/// own, its fleet's (its own again when it has none) and its kind's.
fn limited_as(id: i64, kind: &str, fleet: Option<&str>) -> [String; 3] {
    let own = operation_target(id);
    let fleet = fleet.map_or_else(|| own.clone(), fleet_target);
    [own, fleet, kind_target(kind)]
}
use crate::store::Store;
use sluice_target::on_pool;

/// A rate limit as stored: `target` (`operation:<id>`, `kind:<kind>` or
/// `*`) may change at most `rows_per_second` rows a second, all workers
/// together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct RateLimit {
    /// What it applies to.
    pub target: String,
    /// The limit.
    pub rows_per_second: i64,
}

/// What taking rows from the rate limits found: how long to wait before
/// the rows may start, and the limit that set it (the one deepest in debt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowsTaken {
    /// Zero when the rows may start now.
    pub wait: std::time::Duration,
    /// The binding limit, when there is a wait.
    pub binding: Option<RateLimit>,
}

impl Store {
    /// Sets `target`'s rate limit, its bucket full (one second's worth) and
    /// holding nothing yet (a changed limit has made no worker wait).
    pub async fn set_rate_limit(
        &self,
        target: &str,
        rows_per_second: i64,
    ) -> Result<(), StoreError> {
        const UPSERT: &str = "INSERT INTO sluice_rate_limits (target, rows_per_second, tokens, refilled_at) \
             VALUES ($1, $2, $2, $3) ON CONFLICT (target) DO UPDATE SET \
             rows_per_second = excluded.rows_per_second, tokens = excluded.tokens, \
             refilled_at = excluded.refilled_at, held_until = NULL";
        const MYSQL_UPSERT: &str = "INSERT INTO sluice_rate_limits (target, rows_per_second, tokens, refilled_at) \
             VALUES ($1, $2, $2, $3) ON DUPLICATE KEY UPDATE \
             rows_per_second = VALUES(rows_per_second), tokens = VALUES(tokens), \
             refilled_at = VALUES(refilled_at), held_until = NULL";
        let upsert = self.upsert(UPSERT, MYSQL_UPSERT);
        let now = self.clock().now_ms();
        on_pool!(self, |pool| sqlx::query(upsert)
            .bind(target)
            .bind(rows_per_second)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Removes `target`'s rate limit; false when it had none.
    pub async fn clear_rate_limit(&self, target: &str) -> Result<bool, StoreError> {
        const DELETE: &str = "DELETE FROM sluice_rate_limits WHERE target = $1";
        self.delete_by_key(DELETE, target).await
    }

    /// The rate limits operation `id` of `kind` (in `fleet`, if it is in
    /// one) obeys: its own, its fleet's, its kind's and the one for
    /// everything, those that are set.
    pub async fn rate_limits_for(
        &self,
        id: i64,
        kind: &str,
        fleet: Option<&str>,
    ) -> Result<Vec<RateLimit>, StoreError> {
        const SELECT: &str = "SELECT target, rows_per_second FROM sluice_rate_limits \
             WHERE target IN ($1, $2, $3, '*') ORDER BY target";
        let [own, fleet, kinds] = limited_as(id, kind, fleet);
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(&own)
            .bind(&fleet)
            .bind(&kinds)
            .fetch_all(pool)
            .await?))
    }

    /// Takes `rows` from the buckets of operation `id` of `kind` (each
    /// refilled first at its rate for the time since its last refill, up to
    /// one second's worth), in one transaction, so workers sharing a limit
    /// never take the same tokens. A bucket may go into debt: the wait is
    /// the time its rate takes to pay the deepest debt back. Rows started
    /// only after their wait are, over any span `t`, at most one second's
    /// worth plus `t` times the limit. The refill is computed in floating
    /// point, so no rate and no idle time overflows it. The bucket that sets a wait is
    /// stamped with its end, in the same transaction, for
    /// [`Store::binding_rate_limits`].
    pub async fn take_rows(
        &self,
        id: i64,
        kind: &str,
        fleet: Option<&str>,
        rows: i64,
    ) -> Result<RowsTaken, StoreError> {
        const TAKE: &str = "UPDATE sluice_rate_limits SET \
             tokens = LEAST(rows_per_second, tokens + GREATEST(0, $1 - refilled_at) * (rows_per_second / 1000.0)) - $2, \
             refilled_at = GREATEST(refilled_at, $1) WHERE target IN ($3, $4, $5, '*')";
        const SQLITE_TAKE: &str = "UPDATE sluice_rate_limits SET \
             tokens = MIN(rows_per_second, tokens + MAX(0, $1 - refilled_at) * (rows_per_second / 1000.0)) - $2, \
             refilled_at = MAX(refilled_at, $1) WHERE target IN ($3, $4, $5, '*')";
        const READ: &str = "SELECT target, rows_per_second, tokens FROM sluice_rate_limits \
             WHERE target IN ($1, $2, $3, '*')";
        const HOLD: &str = "UPDATE sluice_rate_limits SET held_until = $1 WHERE target = $2";
        let take = self.backend().dialect().scalar_extremes(TAKE, SQLITE_TAKE);
        let now = self.clock().now_ms();
        let [own, fleet, kinds] = limited_as(id, kind, fleet);
        Ok(on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(take)
                .bind(now)
                .bind(rows)
                .bind(&own)
                .bind(&fleet)
                .bind(&kinds)
                .execute(&mut *tx)
                .await?;
            let buckets: Vec<(String, i64, f64)> = sqlx::query_as(READ)
                .bind(&own)
                .bind(&fleet)
                .bind(&kinds)
                .fetch_all(&mut *tx)
                .await?;
            let taken = deepest_debt(buckets);
            if let Some(binding) = &taken.binding {
                let wait_ms = i64::try_from(taken.wait.as_millis()).unwrap_or(i64::MAX);
                sqlx::query(HOLD)
                    .bind(now.saturating_add(wait_ms))
                    .bind(&binding.target)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            taken
        }))
    }

    /// The rate limits that made a worker wait within the last
    /// [`HOLD_GRACE_MS`] (or make one wait now), lowest rate first: the
    /// limits binding the operations they apply to. Pick one operation's
    /// with [`binding_limit`].
    pub async fn binding_rate_limits(&self) -> Result<Vec<RateLimit>, StoreError> {
        const SELECT: &str = "SELECT target, rows_per_second FROM sluice_rate_limits \
             WHERE held_until >= $1 ORDER BY rows_per_second, target";
        let since = self.clock().now_ms() - HOLD_GRACE_MS;
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(since)
            .fetch_all(pool)
            .await?))
    }
}

/// How long after a wait it set a rate limit still counts as binding: a
/// worker takes the next sub-batch's rows only once the last one ran.
pub const HOLD_GRACE_MS: i64 = 5_000;

/// Of `binding` (from [`Store::binding_rate_limits`], lowest rate first),
/// the limit holding operation `id` of `kind` (in `fleet`) back: its own,
/// its fleet's, its kind's or everyone's, whichever is lowest.
pub fn binding_limit<'a>(
    binding: &'a [RateLimit],
    id: i64,
    kind: &str,
    fleet: Option<&str>,
) -> Option<&'a RateLimit> {
    let limited = limited_as(id, kind, fleet);
    binding
        .iter()
        .find(|l| limited.contains(&l.target) || l.target == "*")
}

/// The wait the deepest debt among `buckets` (target, rate, tokens) sets,
/// and its limit.
fn deepest_debt(buckets: Vec<(String, i64, f64)>) -> RowsTaken {
    let deepest = buckets
        .into_iter()
        .filter(|(_, _, tokens)| *tokens < 0.0)
        .map(|(target, rate, tokens)| (-tokens * 1000.0 / rate as f64, target, rate))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match deepest {
        Some((ms, target, rows_per_second)) => RowsTaken {
            wait: std::time::Duration::from_micros((ms * 1000.0).ceil() as u64),
            binding: Some(RateLimit {
                target,
                rows_per_second,
            }),
        },
        None => RowsTaken {
            wait: std::time::Duration::ZERO,
            binding: None,
        },
    }
}

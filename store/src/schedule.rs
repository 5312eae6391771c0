//! Recurring operations and kill switches, as the store keeps them.
//!
//! A [`Schedule`] is a stored recipe (kind, arguments, enqueue options, a cron
//! expression) with the time of its next fire. The store does not read cron:
//! the runtime's scheduler computes due times and moves a schedule on with
//! [`Store::claim_fire`], a compare-and-set on the due time it read, so of
//! several nodes looking at the same due schedule exactly one fires it. Every
//! fire is recorded as a [`ScheduleFire`] (enqueued, skipped, or refused with
//! the reason); `(schedule, due_at)` is unique, so a tick is recorded once.
//!
//! A [`Switch`] turns a kind (or, with scope `*`, everything) off: the
//! reconciler claims no operation of a switched-off kind, and scheduled fires
//! of it are refused. Switches are rows, so every node sees them.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::store::Store;
use sluice_target::on_pool;

/// A recurring operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Schedule {
    /// Unique name, chosen by the operator.
    pub name: String,
    /// The operation kind each fire enqueues.
    pub kind: String,
    /// The kind's arguments, as JSON text (resolved at each fire, so a
    /// relative age such as `older_than` is measured from the fire).
    pub arguments: String,
    /// The enqueue options (sizes, pause, limits), as JSON text.
    pub options: String,
    /// The cron expression: five fields, or six with seconds first.
    pub cron: String,
    /// The IANA time zone the expression is read in (`UTC` unless given).
    pub time_zone: String,
    /// Fires start at a point spread uniformly over this many milliseconds
    /// after the due time.
    pub jitter_ms: i64,
    /// A disabled schedule does not fire.
    pub enabled: bool,
    /// The cron time of the next fire, epoch milliseconds.
    pub due_at: i64,
    /// When the next fire happens: `due_at` plus its jitter offset.
    pub fire_at: i64,
    /// The operation its last enqueued fire created.
    pub last_operation_id: Option<i64>,
    /// When it was added.
    pub created_at: i64,
}

/// What one fire of a schedule did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ScheduleFire {
    /// The fire's id.
    pub id: i64,
    /// The schedule's name.
    pub schedule: String,
    /// The cron time it fired for.
    pub due_at: i64,
    /// When it fired.
    pub fired_at: i64,
    /// A [`FireOutcome`]'s name: `enqueued`, `skipped` or `refused`.
    pub outcome: String,
    /// The operation enqueued (or the active one that made it a no-op).
    pub operation_id: Option<i64>,
    /// Why it was skipped or refused.
    pub reason: Option<String>,
}

/// What a fire did; stored as its [`FireOutcome::as_str`] name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FireOutcome {
    /// A new operation was enqueued.
    Enqueued,
    /// A recorded no-op: the schedule's previous operation, or one with the
    /// same identity, is still pending, running or paused.
    Skipped,
    /// Not enqueued: the kind is switched off, or the enqueue checks refused it.
    Refused,
}

impl FireOutcome {
    /// The name stored in `sluice_schedule_fires.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            FireOutcome::Enqueued => "enqueued",
            FireOutcome::Skipped => "skipped",
            FireOutcome::Refused => "refused",
        }
    }
}

/// A kill switch: operations of `scope` (a kind, or `*` for all) neither
/// start nor fire while it is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct Switch {
    /// A kind, or `*`.
    pub scope: String,
    /// Why it was set.
    pub reason: String,
    /// When, epoch milliseconds.
    pub set_at: i64,
}

/// How the rows of one operation's timed resume, run window and rate limit
/// name it (`operation:<id>`; a kind's are `kind:<kind>`, everything's `*`).
pub fn operation_target(id: i64) -> String {
    format!("operation:{id}")
}

/// How the rows of a kind's timed resume, run window and rate limit name
/// it (`kind:<kind>`).
pub fn kind_target(kind: &str) -> String {
    format!("kind:{kind}")
}

/// A pause with an end: `target` (`operation:<id>`, `kind:<kind>` or `*`)
/// is resumed once `resume_at` has passed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct TimedResume {
    /// What is resumed.
    pub target: String,
    /// When, epoch milliseconds.
    pub resume_at: i64,
}

/// A run window as stored: `target` (`operation:<id>`, `kind:<kind>` or
/// `*`) works only within `run_window` (`00:00-06:00`) local to `time_zone`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct StoredWindow {
    /// What it applies to.
    pub target: String,
    /// The daily hours, `HH:MM-HH:MM`.
    pub run_window: String,
    /// The IANA time zone they are read in.
    pub time_zone: String,
}

impl Store {
    /// Stores a new schedule.
    ///
    /// Errors: [`StoreError::ScheduleExists`] when the name is taken (nothing
    /// is written).
    pub async fn add_schedule(&self, schedule: &Schedule) -> Result<(), StoreError> {
        const INSERT: &str = "INSERT INTO sluice_schedules (name, kind, arguments, options, cron, time_zone, \
             jitter_ms, enabled, due_at, fire_at, last_operation_id, created_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
        // One form on every dialect: the name's unique index refuses a taken
        // name, read as "exists" (the statement is on its own, not in a
        // transaction it could abort).
        let inserted = on_pool!(self, |pool| sqlx::query(INSERT)
            .bind(&schedule.name)
            .bind(&schedule.kind)
            .bind(&schedule.arguments)
            .bind(&schedule.options)
            .bind(&schedule.cron)
            .bind(&schedule.time_zone)
            .bind(schedule.jitter_ms)
            .bind(schedule.enabled)
            .bind(schedule.due_at)
            .bind(schedule.fire_at)
            .bind(schedule.last_operation_id)
            .bind(schedule.created_at)
            .execute(pool)
            .await
            .map(|done| done.rows_affected()));
        match inserted {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(StoreError::ScheduleExists(schedule.name.clone()))
            }
            other => other.map(drop).map_err(StoreError::from),
        }
    }

    /// Every schedule, by name.
    pub async fn schedules(&self) -> Result<Vec<Schedule>, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_schedules ORDER BY name";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .fetch_all(pool)
            .await?))
    }

    /// The schedule named `name`. Errors: [`StoreError::UnknownSchedule`].
    pub async fn schedule(&self, name: &str) -> Result<Schedule, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_schedules WHERE name = $1";
        let found: Option<Schedule> = on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(name)
            .fetch_optional(pool)
            .await?);
        found.ok_or_else(|| StoreError::UnknownSchedule(name.to_owned()))
    }

    /// Removes a schedule (its recorded fires stay).
    /// Errors: [`StoreError::UnknownSchedule`].
    pub async fn remove_schedule(&self, name: &str) -> Result<(), StoreError> {
        const DELETE: &str = "DELETE FROM sluice_schedules WHERE name = $1";
        let removed = on_pool!(self, |pool| sqlx::query(DELETE)
            .bind(name)
            .execute(pool)
            .await?
            .rows_affected());
        if removed == 0 {
            return Err(StoreError::UnknownSchedule(name.to_owned()));
        }
        Ok(())
    }

    /// Enables or disables a schedule; enabling sets its next fire (the
    /// caller computes it from now, so missed ticks are not fired).
    /// Errors: [`StoreError::UnknownSchedule`].
    pub async fn set_schedule_enabled(
        &self,
        name: &str,
        enabled: bool,
        next: Option<(i64, i64)>,
    ) -> Result<(), StoreError> {
        const UPDATE: &str = "UPDATE sluice_schedules SET enabled = $2, \
             due_at = COALESCE($3, due_at), fire_at = COALESCE($4, fire_at) WHERE name = $1";
        let changed = on_pool!(self, |pool| sqlx::query(UPDATE)
            .bind(name)
            .bind(enabled)
            .bind(next.map(|n| n.0))
            .bind(next.map(|n| n.1))
            .execute(pool)
            .await?
            .rows_affected());
        if changed == 0 {
            return Err(StoreError::UnknownSchedule(name.to_owned()));
        }
        Ok(())
    }

    /// Enabled schedules whose fire time has come at `now_ms`, earliest first.
    pub async fn due_schedules(&self, now_ms: i64) -> Result<Vec<Schedule>, StoreError> {
        const SELECT: &str =
            "SELECT * FROM sluice_schedules WHERE enabled AND fire_at <= $1 ORDER BY fire_at, name";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(now_ms)
            .fetch_all(pool)
            .await?))
    }

    /// Takes the fire of `schedule` due at `due_at` by moving the schedule
    /// on to its next due time and fire time. True for exactly one caller:
    /// another node that read the same due time finds it moved and gets
    /// false, and must not fire.
    pub async fn claim_fire(
        &self,
        schedule: &str,
        due_at: i64,
        next_due_at: i64,
        next_fire_at: i64,
    ) -> Result<bool, StoreError> {
        const UPDATE: &str = "UPDATE sluice_schedules SET due_at = $3, fire_at = $4 \
             WHERE name = $1 AND due_at = $2 AND enabled";
        let moved = on_pool!(self, |pool| sqlx::query(UPDATE)
            .bind(schedule)
            .bind(due_at)
            .bind(next_due_at)
            .bind(next_fire_at)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(moved == 1)
    }

    /// Records what a claimed fire did (and, when it enqueued, remembers the
    /// operation on the schedule).
    pub async fn record_fire(
        &self,
        schedule: &str,
        due_at: i64,
        outcome: FireOutcome,
        operation_id: Option<i64>,
        reason: Option<&str>,
    ) -> Result<(), StoreError> {
        const INSERT: &str = "INSERT INTO sluice_schedule_fires (schedule, due_at, fired_at, outcome, operation_id, reason) \
             VALUES ($1, $2, $3, $4, $5, $6)";
        const REMEMBER: &str = "UPDATE sluice_schedules SET last_operation_id = $2 WHERE name = $1";
        let now = self.clock().now_ms();
        on_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(INSERT)
                .bind(schedule)
                .bind(due_at)
                .bind(now)
                .bind(outcome.as_str())
                .bind(operation_id)
                .bind(reason)
                .execute(&mut *tx)
                .await?;
            if outcome == FireOutcome::Enqueued {
                sqlx::query(REMEMBER)
                    .bind(schedule)
                    .bind(operation_id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// The recorded fires of `schedule`, oldest first.
    pub async fn fires(&self, schedule: &str) -> Result<Vec<ScheduleFire>, StoreError> {
        const SELECT: &str =
            "SELECT * FROM sluice_schedule_fires WHERE schedule = $1 ORDER BY due_at, id";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(schedule)
            .fetch_all(pool)
            .await?))
    }

    /// Sets the kill switch for `scope` (a kind, or `*`); setting it again
    /// replaces the reason.
    pub async fn set_switch(&self, scope: &str, reason: &str) -> Result<(), StoreError> {
        const UPSERT: &str = "INSERT INTO sluice_switches (scope, reason, set_at) VALUES ($1, $2, $3) \
             ON CONFLICT (scope) DO UPDATE SET reason = excluded.reason, set_at = excluded.set_at";
        const MYSQL_UPSERT: &str = "INSERT INTO sluice_switches (scope, reason, set_at) VALUES ($1, $2, $3) \
             ON DUPLICATE KEY UPDATE reason = VALUES(reason), set_at = VALUES(set_at)";
        let upsert = self.upsert(UPSERT, MYSQL_UPSERT);
        let now = self.clock().now_ms();
        on_pool!(self, |pool| sqlx::query(upsert)
            .bind(scope)
            .bind(reason)
            .bind(now)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Lifts the kill switch for `scope`; false when none was set.
    pub async fn clear_switch(&self, scope: &str) -> Result<bool, StoreError> {
        const DELETE: &str = "DELETE FROM sluice_switches WHERE scope = $1";
        self.delete_by_key(DELETE, scope).await
    }

    /// Every kill switch set.
    pub async fn switches(&self) -> Result<Vec<Switch>, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_switches ORDER BY scope";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .fetch_all(pool)
            .await?))
    }

    /// The switch that turns `kind` off (its own, else the global one), if any.
    pub async fn switch_for(&self, kind: &str) -> Result<Option<Switch>, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_switches WHERE scope = $1 OR scope = '*' \
             ORDER BY CASE WHEN scope = '*' THEN 1 ELSE 0 END LIMIT 1";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(kind)
            .fetch_optional(pool)
            .await?))
    }

    /// Sets `target` to be resumed at `resume_at` (epoch milliseconds),
    /// replacing an earlier time.
    pub async fn set_timed_resume(&self, target: &str, resume_at: i64) -> Result<(), StoreError> {
        const UPSERT: &str = "INSERT INTO sluice_resumes (target, resume_at) VALUES ($1, $2) \
             ON CONFLICT (target) DO UPDATE SET resume_at = excluded.resume_at";
        const MYSQL_UPSERT: &str = "INSERT INTO sluice_resumes (target, resume_at) VALUES ($1, $2) \
             ON DUPLICATE KEY UPDATE resume_at = VALUES(resume_at)";
        let upsert = self.upsert(UPSERT, MYSQL_UPSERT);
        on_pool!(self, |pool| sqlx::query(upsert)
            .bind(target)
            .bind(resume_at)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Forgets `target`'s timed resume; false when it had none.
    pub async fn clear_timed_resume(&self, target: &str) -> Result<bool, StoreError> {
        const DELETE: &str = "DELETE FROM sluice_resumes WHERE target = $1";
        self.delete_by_key(DELETE, target).await
    }

    /// The timed resume of `target`, if one is set.
    pub async fn timed_resume(&self, target: &str) -> Result<Option<TimedResume>, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_resumes WHERE target = $1";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(target)
            .fetch_optional(pool)
            .await?))
    }

    /// The timed resumes whose time has come by the store's clock, earliest
    /// first.
    pub async fn due_timed_resumes(&self) -> Result<Vec<TimedResume>, StoreError> {
        const SELECT: &str =
            "SELECT * FROM sluice_resumes WHERE resume_at <= $1 ORDER BY resume_at, target";
        let now = self.clock().now_ms();
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(now)
            .fetch_all(pool)
            .await?))
    }

    /// Sets `target`'s run window, replacing an earlier one. The caller
    /// checks the window and zone parse.
    pub async fn set_window(
        &self,
        target: &str,
        run_window: &str,
        time_zone: &str,
    ) -> Result<(), StoreError> {
        const UPSERT: &str = "INSERT INTO sluice_windows (target, run_window, time_zone) \
             VALUES ($1, $2, $3) ON CONFLICT (target) DO UPDATE \
             SET run_window = excluded.run_window, time_zone = excluded.time_zone";
        const MYSQL_UPSERT: &str = "INSERT INTO sluice_windows (target, run_window, time_zone) \
             VALUES ($1, $2, $3) ON DUPLICATE KEY UPDATE \
             run_window = VALUES(run_window), time_zone = VALUES(time_zone)";
        let upsert = self.upsert(UPSERT, MYSQL_UPSERT);
        on_pool!(self, |pool| sqlx::query(upsert)
            .bind(target)
            .bind(run_window)
            .bind(time_zone)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// Removes `target`'s run window; false when it had none.
    pub async fn clear_window(&self, target: &str) -> Result<bool, StoreError> {
        const DELETE: &str = "DELETE FROM sluice_windows WHERE target = $1";
        self.delete_by_key(DELETE, target).await
    }

    /// Every run window set.
    pub async fn windows(&self) -> Result<Vec<StoredWindow>, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_windows ORDER BY target";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .fetch_all(pool)
            .await?))
    }

    /// The run window operation `id` of `kind` obeys: its own, else its
    /// kind's, else the one for everything.
    pub async fn window_for(
        &self,
        id: i64,
        kind: &str,
    ) -> Result<Option<StoredWindow>, StoreError> {
        const SELECT: &str = "SELECT * FROM sluice_windows WHERE target IN ($1, $2, '*') \
             ORDER BY CASE WHEN target = '*' THEN 2 WHEN target = $2 THEN 1 ELSE 0 END LIMIT 1";
        Ok(on_pool!(self, |pool| sqlx::query_as(SELECT)
            .bind(operation_target(id))
            .bind(kind_target(kind))
            .fetch_optional(pool)
            .await?))
    }

    /// `generic` (`ON CONFLICT … DO UPDATE`, SQLite and PostgreSQL), or
    /// `mysql` (`ON DUPLICATE KEY UPDATE`) on MySQL.
    pub(crate) fn upsert(&self, generic: &'static str, mysql: &'static str) -> &'static str {
        self.backend().dialect().upsert(generic, mysql)
    }

    /// Runs `delete` (one `$1` key) with `key`; true when a row went.
    pub(crate) async fn delete_by_key(
        &self,
        delete: &'static str,
        key: &str,
    ) -> Result<bool, StoreError> {
        Ok(on_pool!(self, |pool| sqlx::query(delete)
            .bind(key)
            .execute(pool)
            .await?
            .rows_affected())
            > 0)
    }
}

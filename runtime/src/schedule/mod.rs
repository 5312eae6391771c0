//! Recurring operations: adding and changing schedules, and firing the due
//! ones.
//!
//! A schedule's cron expression (five fields, or six with seconds first; read
//! in its IANA time zone, UTC unless given) is parsed by `croner`. Its next
//! fire is stored as the cron due time plus a jitter offset spread uniformly
//! over the jitter window (derived from the schedule's name and due time, so
//! a thousand schedules due at midnight start at a thousand different
//! moments, and a node that restarts computes the same moment).
//!
//! [`fire_due`] is what the scheduler actor runs every tick, on every node.
//! For each due schedule it first moves the schedule on to its next due time
//! with a compare-and-set on the due time it read ([`Store::claim_fire`]):
//! of several nodes, exactly one wins and fires. The next due time is the
//! first one after *now*, so after downtime one catch-up fire happens, not
//! one per missed tick. The fire is then recorded as one of:
//! - `refused`: its kind is switched off (kill switch), or enqueueing failed;
//! - `skipped`: the operation of its previous fire is still pending, running
//!   or paused (two never run at once);
//! - `enqueued`: a new operation, origin `schedule`.
//!
//! A node that dies between winning a fire and recording it loses that one
//! fire (the schedule has moved on): schedules are at-most-once per tick; the
//! operations they enqueue are durable as always.
//!
//! The module holds what schedules are (adding, enabling, firing: plain
//! functions over the store, usable without a runtime) and, in its `actor`
//! submodule,
//! the [`Scheduler`] actor that runs [`fire_due`] on every node each tick.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use sluice_operations::{EnqueueOptions, OperationError, Registry, builtin::enqueue_kind};
use sluice_store::{FireOutcome, OperationStatus, Origin, Schedule, Store, StoreError};

mod actor;

pub use actor::{Scheduler, SchedulerMessage};

/// A schedule as an operator or a host application gives it.
#[derive(Debug, Clone)]
pub struct ScheduleSpec {
    /// Unique name: letters, digits, `-`, `_`, `.`; at most 100 characters.
    pub name: String,
    /// The operation kind each fire enqueues.
    pub kind: String,
    /// The kind's arguments (resolved at each fire: see
    /// [`sluice_operations::Operation::arguments_at`]).
    pub arguments: serde_json::Value,
    /// The cron expression.
    pub cron: String,
    /// The IANA time zone, `UTC` when `None`.
    pub time_zone: Option<String>,
    /// The window each fire's start is spread over.
    pub jitter: Duration,
    /// How each fire's operation runs (its origin is always `schedule`,
    /// whatever is given here).
    pub options: EnqueueOptions,
}

/// Why a schedule could not be added or changed. Nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The name is empty, too long, or has characters other than letters,
    /// digits, `-`, `_` and `.`.
    #[error("invalid schedule name `{0}`: use 1 to 100 letters, digits, `-`, `_` or `.`")]
    InvalidName(String),
    /// The cron expression does not parse.
    #[error("invalid cron expression `{expression}`: {reason}")]
    InvalidCron {
        /// The expression.
        expression: String,
        /// The parser's reason.
        reason: String,
    },
    /// The time zone is not an IANA name.
    #[error("unknown time zone `{0}` (use an IANA name such as `UTC` or `Europe/Berlin`)")]
    InvalidTimeZone(String),
    /// The expression never fires (say, February 30th).
    #[error("cron expression `{0}` never fires")]
    NeverFires(String),
    /// The jitter does not fit in milliseconds.
    #[error("jitter {0:?} is too large")]
    JitterTooLarge(Duration),
    /// The kind or its arguments were refused.
    #[error(transparent)]
    Operation(#[from] OperationError),
    /// The store failed, or the schedule does not exist / already exists.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ScheduleError {
    /// True when the caller's input is at fault (nothing was changed).
    pub fn is_bad_input(&self) -> bool {
        match self {
            ScheduleError::Operation(e) => e.is_bad_input(),
            ScheduleError::Store(e) => e.is_bad_input(),
            _ => true,
        }
    }
}

/// What one fire did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fired {
    /// The schedule.
    pub schedule: String,
    /// The cron time fired for.
    pub due_at: i64,
    /// What it did.
    pub outcome: FireOutcome,
    /// The operation enqueued, or the active one that made it a no-op.
    pub operation_id: Option<i64>,
    /// Why it was skipped or refused.
    pub reason: Option<String>,
}

/// Checks and stores a new schedule; its first fire is the first due time
/// after now. Returns it as stored.
///
/// Errors (nothing is stored): [`ScheduleError::InvalidName`],
/// [`ScheduleError::InvalidCron`], [`ScheduleError::InvalidTimeZone`],
/// [`ScheduleError::NeverFires`], an unknown kind, arguments the kind
/// refuses or a target [`sluice_operations::enqueue()`] would refuse
/// ([`ScheduleError::Operation`]), a taken name
/// ([`StoreError::ScheduleExists`]).
pub async fn add_schedule(
    store: &Store,
    registry: &Registry,
    spec: &ScheduleSpec,
) -> Result<Schedule, ScheduleError> {
    check_name(&spec.name)?;
    let time_zone = spec.time_zone.clone().unwrap_or_else(|| "UTC".into());
    let when = When::parse(&spec.cron, &time_zone)?;
    let jitter_ms = i64::try_from(spec.jitter.as_millis())
        .map_err(|_| ScheduleError::JitterTooLarge(spec.jitter))?;
    let now = store.clock().now_ms();
    // The arguments must make an operation of the kind today.
    let resolved = registry
        .arguments_at(&spec.kind, store, spec.arguments.clone(), at(now))
        .await?;
    // Checked as an enqueue of it would be (table, columns, engines, key,
    // plan), so a schedule that could never enqueue is not stored.
    sluice_operations::check(store, registry, &spec.kind, &resolved, &spec.options).await?;
    let due_at = when.next_after(now)?;
    let schedule = Schedule {
        name: spec.name.clone(),
        kind: spec.kind.clone(),
        arguments: spec.arguments.to_string(),
        options: serde_json::to_string(&spec.options).expect("options always serialise"),
        cron: spec.cron.clone(),
        time_zone,
        jitter_ms,
        enabled: true,
        due_at,
        fire_at: due_at + jitter_offset(&spec.name, due_at, jitter_ms),
        last_operation_id: None,
        created_at: now,
    };
    store.add_schedule(&schedule).await?;
    Ok(schedule)
}

/// Enables (next fire: the first due time after now) or disables a schedule.
pub async fn set_enabled(store: &Store, name: &str, enabled: bool) -> Result<(), ScheduleError> {
    let schedule = store.schedule(name).await?;
    let next = if enabled {
        let when = When::parse(&schedule.cron, &schedule.time_zone)?;
        let due_at = when.next_after(store.clock().now_ms())?;
        Some((
            due_at,
            due_at + jitter_offset(name, due_at, schedule.jitter_ms),
        ))
    } else {
        None
    };
    Ok(store.set_schedule_enabled(name, enabled, next).await?)
}

/// Fires every schedule due at the store clock's now that this node wins
/// (see the module docs), and returns what each fire did.
pub async fn fire_due(store: &Store, registry: &Registry) -> Result<Vec<Fired>, StoreError> {
    let now = store.clock().now_ms();
    let mut fired = Vec::new();
    for schedule in store.due_schedules(now).await? {
        let next_due =
            When::parse(&schedule.cron, &schedule.time_zone).and_then(|when| when.next_after(now));
        let Ok(next_due) = next_due else {
            // Stored by an earlier check, so this only happens if the cron
            // library changed its mind: take it out of rotation, loudly.
            tracing::error!(schedule = %schedule.name, cron = %schedule.cron, "schedule no longer parses; disabling it");
            store
                .set_schedule_enabled(&schedule.name, false, None)
                .await?;
            continue;
        };
        let next_fire = next_due + jitter_offset(&schedule.name, next_due, schedule.jitter_ms);
        if !store
            .claim_fire(&schedule.name, schedule.due_at, next_due, next_fire)
            .await?
        {
            continue; // another node fired it
        }
        let fire = fire(store, registry, &schedule, now).await?;
        store
            .record_fire(
                &fire.schedule,
                fire.due_at,
                fire.outcome,
                fire.operation_id,
                fire.reason.as_deref(),
            )
            .await?;
        tracing::info!(schedule = %fire.schedule, outcome = fire.outcome.as_str(), operation = ?fire.operation_id, reason = ?fire.reason, "schedule fired");
        fired.push(fire);
    }
    Ok(fired)
}

/// One won fire: refuse, skip or enqueue.
async fn fire(
    store: &Store,
    registry: &Registry,
    schedule: &Schedule,
    now: i64,
) -> Result<Fired, StoreError> {
    let outcome = |outcome, operation_id, reason: Option<String>| Fired {
        schedule: schedule.name.clone(),
        due_at: schedule.due_at,
        outcome,
        operation_id,
        reason,
    };
    if let Some(switch) = store.switch_for(&schedule.kind).await? {
        let scope = if switch.scope == "*" {
            "all operations are".to_owned()
        } else {
            format!("kind `{}` is", switch.scope)
        };
        let reason = format!("{scope} switched off: {}", switch.reason);
        return Ok(outcome(FireOutcome::Refused, None, Some(reason)));
    }
    if let Some(previous) = schedule.last_operation_id
        && let Ok(record) = store.operation(previous).await
        && record.state.status.is_active()
    {
        let reason = format!(
            "operation {previous} of this schedule is still {}",
            record.state.status.as_str()
        );
        return Ok(outcome(FireOutcome::Skipped, Some(previous), Some(reason)));
    }
    let stored: serde_json::Value =
        serde_json::from_str(&schedule.arguments).unwrap_or(serde_json::Value::Null);
    let options = EnqueueOptions {
        origin: Origin::Schedule,
        ..serde_json::from_str(&schedule.options).unwrap_or_default()
    };
    let enqueued = async {
        let arguments = registry
            .arguments_at(&schedule.kind, store, stored, at(now))
            .await?;
        enqueue_kind(store, registry, &schedule.kind, &arguments, &options).await
    }
    .await;
    Ok(match enqueued {
        Ok(enqueued) if enqueued.created => outcome(FireOutcome::Enqueued, Some(enqueued.id), None),
        Ok(existing) => {
            let status = store
                .operation(existing.id)
                .await
                .map_or(OperationStatus::Pending, |r| r.state.status);
            let reason = format!(
                "operation {} with the same kind and arguments is still {}",
                existing.id,
                status.as_str()
            );
            outcome(FireOutcome::Skipped, Some(existing.id), Some(reason))
        }
        Err(OperationError::Store(e)) if e.is_transient() => return Err(e),
        Err(e) => outcome(FireOutcome::Refused, None, Some(e.to_string())),
    })
}

/// A parsed cron expression in its time zone.
#[derive(Debug, Clone)]
pub struct When {
    cron: Cron,
    zone: Tz,
    expression: String,
}

impl When {
    /// Parses `expression` (five fields, or six with seconds first) in `time_zone`.
    pub fn parse(expression: &str, time_zone: &str) -> Result<When, ScheduleError> {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| ScheduleError::InvalidCron {
                expression: expression.to_owned(),
                reason: e.to_string(),
            })?;
        let zone = Tz::from_str(time_zone)
            .map_err(|_| ScheduleError::InvalidTimeZone(time_zone.to_owned()))?;
        Ok(When {
            cron,
            zone,
            expression: expression.to_owned(),
        })
    }

    /// The first due time strictly after `after_ms`, epoch milliseconds.
    pub fn next_after(&self, after_ms: i64) -> Result<i64, ScheduleError> {
        let local = self.zone.from_utc_datetime(&at(after_ms).naive_utc());
        self.cron
            .find_next_occurrence(&local, false)
            .map(|next| next.with_timezone(&Utc).timestamp_millis())
            .map_err(|_| ScheduleError::NeverFires(self.expression.clone()))
    }
}

/// Where in the jitter window a schedule's fire for `due_at` starts:
/// uniform over `[0, jitter_ms]`, the same on every node.
pub fn jitter_offset(name: &str, due_at: i64, jitter_ms: i64) -> i64 {
    if jitter_ms <= 0 {
        return 0;
    }
    let mut hasher = DefaultHasher::new();
    (name, due_at).hash(&mut hasher);
    (hasher.finish() % (jitter_ms as u64 + 1)) as i64
}

fn check_name(name: &str) -> Result<(), ScheduleError> {
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if name.is_empty() || name.len() > 100 || !plain {
        return Err(ScheduleError::InvalidName(name.to_owned()));
    }
    Ok(())
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

//! How operations and events appear in the API: the projection's counters,
//! status and health, without the values an operation was given or has
//! reached (arguments, cursors, trace context), which may be rows' data;
//! errors and reasons with the values a database quoted hidden
//! ([`without_values`]).

use serde_json::{Value, json};

use crate::redact::without_values;
use sluice_store::{Batch, Event, Health, OperationRecord, RecordedEvent, Schedule, Switch};

/// An operation: what it is, where it stands, and who runs it. Times are
/// epoch milliseconds.
/// One operation of a fleet, as an operation's page lists its fleet: its
/// target, where it is and how it fares.
pub(crate) fn fleet_member(record: &OperationRecord) -> Value {
    let s = &record.state;
    json!({
        "id": record.id,
        "target": s.target_name.as_ref().or(s.target.as_ref()),
        "status": s.status.as_str(),
        "percent_done": s.percent_done(),
        "rows_done": s.rows_done,
        "health": health(s.health).0,
        "health_reason": s.health_reason.as_deref().map(without_values),
    })
}

pub(crate) fn operation(record: &OperationRecord) -> Value {
    let s = &record.state;
    let (health, health_percent) = health(s.health);
    // An indicator that cannot be read gives a signal that says so.
    let health = match &s.health_reason {
        Some(reason) if reason.starts_with("health unknown") => "unknown",
        _ => health,
    };
    json!({
        "id": record.id,
        "kind": s.kind,
        "table": s.table,
        "target": s.target_name.as_ref().or(s.target.as_ref()),
        "target_url": s.target,
        "fleet": s.fleet,
        "status": s.status.as_str(),
        "origin": s.origin.as_str(),
        "priority": s.priority,
        "tenant_id": s.tenant_id,
        "percent_done": s.percent_done(),
        "rows_done": s.rows_done,
        "estimated_rows": s.estimated_rows,
        "batches_planned": s.batches_planned,
        "batches_succeeded": s.batches_succeeded,
        "batch_failures": s.batch_failures,
        "batch_size": s.batch_size,
        "sub_batch_size": s.sub_batch_size,
        "pause_ms": s.pause_ms,
        "health": health,
        "health_percent": health_percent,
        "health_reason": s.health_reason.as_deref().map(without_values),
        "last_error": s.last_error.as_deref().map(without_values),
        "node": record.lease.as_ref().map(|l| &l.node).or(s.node.as_ref()),
        "running_here": record.lease.is_some(),
        "created_at": s.created_at,
        "started_at": s.started_at,
        "updated_at": s.updated_at,
        "finished_at": s.finished_at,
        "events": s.last_seq,
        "undo": s.kind != "revert" && keeps_undo(&s.arguments),
        "reverts": reverts(&s.kind, &s.arguments),
    })
}

/// True when the operation's arguments name an undo table: run with
/// `--undo`, a revert may put back what it changed (a revert's own name
/// the table it reads).
fn keeps_undo(arguments: &str) -> bool {
    serde_json::from_str::<Value>(arguments)
        .is_ok_and(|a| a.get("undo_table").is_some_and(Value::is_string))
}

/// For a revert, the operation it puts back.
fn reverts(kind: &str, arguments: &str) -> Option<i64> {
    (kind == "revert")
        .then(|| {
            serde_json::from_str::<Value>(arguments)
                .ok()?
                .get("of")?
                .as_i64()
        })
        .flatten()
}

/// An event: its place, time and kind; the reason an operator or the
/// runtime gave; and its counts (a batch's ordinal, size, rows and
/// duration, a health change's speed) — not batch bounds or split points,
/// which are key values.
pub(crate) fn event(recorded: &RecordedEvent) -> Value {
    let mut value = json!({
        "seq": recorded.seq,
        "recorded_at": recorded.recorded_at,
        "kind": recorded.event.kind(),
    });
    let detail = match &recorded.event {
        Event::Paused { reason } | Event::Cancelled { reason } | Event::Yielded { reason } => {
            json!({"reason": reason})
        }
        Event::Started { node } => json!({"node": node}),
        Event::Throttled { health: h, reason } => {
            let (health, percent) = health(*h);
            json!({"reason": reason.as_deref().map(without_values), "health": health, "health_percent": percent})
        }
        Event::BatchFailed {
            ordinal,
            attempt,
            error,
            ..
        } => {
            json!({"ordinal": ordinal, "attempt": attempt, "reason": without_values(error)})
        }
        Event::Failed { error } => json!({"reason": without_values(error)}),
        Event::BatchPlanned { ordinal, size, .. } => json!({"ordinal": ordinal, "size": size}),
        Event::BatchSucceeded {
            ordinal,
            rows,
            duration_ms,
            ..
        } => json!({"ordinal": ordinal, "rows": rows, "duration_ms": duration_ms}),
        Event::BatchSplit {
            ordinal,
            new_ordinal,
            ..
        } => json!({"ordinal": ordinal, "new_ordinal": new_ordinal}),
        _ => json!({}),
    };
    if let (Some(object), Value::Object(detail)) = (value.as_object_mut(), detail) {
        object.extend(detail);
    }
    value
}

/// A batch: its place, state and counts, without its bounds.
pub(crate) fn batch(batch: &Batch) -> Value {
    json!({
        "ordinal": batch.ordinal,
        "status": batch.status.as_str(),
        "attempts": batch.attempts,
        "batch_size": batch.batch_size,
        "sub_batch_size": batch.sub_batch_size,
        "rows": batch.rows_affected,
        "duration_ms": batch.duration_ms,
        "last_error": batch.last_error.as_deref().map(without_values),
        "node": batch.claimed_by,
        "created_at": batch.created_at,
        "finished_at": batch.finished_at,
    })
}

/// A schedule: when it fires, without the arguments it enqueues with.
pub(crate) fn schedule(schedule: &Schedule) -> Value {
    json!({
        "name": schedule.name,
        "kind": schedule.kind,
        "cron": schedule.cron,
        "time_zone": schedule.time_zone,
        "jitter_ms": schedule.jitter_ms,
        "enabled": schedule.enabled,
        "next_fire_at": schedule.enabled.then_some(schedule.fire_at),
        "last_operation_id": schedule.last_operation_id,
    })
}

/// A kill switch: the kind (or `*`, every kind) it holds and why.
pub(crate) fn switch(switch: &Switch) -> Value {
    json!({"scope": switch.scope, "reason": switch.reason, "set_at": switch.set_at})
}

/// A health signal as a name and a speed percentage.
fn health(health: Health) -> (&'static str, u8) {
    match health {
        Health::Normal => ("normal", 100),
        Health::Throttled { percent } => ("throttled", percent),
        Health::Stopped => ("stopped", 0),
    }
}

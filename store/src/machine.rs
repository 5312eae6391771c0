//! The operation state machine: a pure function from (projection, event) to
//! the next projection and the effects the runtime must perform.
//!
//! [`apply`] never panics and never ignores an event: an event that is not
//! legal in the current state is an [`IllegalTransition`]. The store runs
//! every append through it inside the appending transaction, so no code path
//! can write a state this module would refuse, and replaying an event log
//! through it rebuilds exactly the projection stored beside the log.
//!
//! Legal transitions (every other pair is illegal):
//!
//! | from                              | event            | to        |
//! |-----------------------------------|------------------|-----------|
//! | (nothing)                         | `Created`        | pending   |
//! | pending                           | `Started`        | running   |
//! | running                           | `Started`        | running (another node took over an expired lease) |
//! | running                           | `BatchPlanned`   | running   |
//! | any but finished                  | `BatchSucceeded` | unchanged (a batch in flight records its outcome) |
//! | any but finished                  | `BatchFailed`    | unchanged (a failed operation keeps the error it failed with) |
//! | running                           | `BatchSplit`     | running (a failing range batch becomes two) |
//! | running                           | `Throttled`      | running   |
//! | running                           | `Yielded`        | pending   |
//! | pending, running                  | `Paused`         | paused    |
//! | paused                            | `Resumed`        | pending   |
//! | running (all planned batches done)| `Finished`       | finished  |
//! | pending, running                  | `Failed`         | failed    |
//! | pending, running, paused, failed  | `Cancelled`      | cancelled |
//! | failed                            | `Retried`        | pending   |
//!
//! `finished` and `cancelled` are terminal; `failed` is terminal until an
//! operator retries it.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use crate::event::Event;
pub use crate::event::Health;
use crate::spec::{Limits, Origin};
use sluice_target::cursor::Cursor;

mod batches;
mod status;
pub use status::OperationStatus;

use batches::{check_known_batch, plan_batch, split_batch};

/// The current state of one operation: everything the `operations` table
/// stores about it except its lease. It is a pure fold of the event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    /// The registered operation kind.
    pub kind: String,
    /// The table the operation walks.
    pub table: String,
    /// Batching columns, in walking order (empty for loop-based operations).
    pub batching_columns: Vec<String>,
    /// The kind's arguments, canonical JSON.
    pub arguments: String,
    /// Tenant, if any.
    pub tenant_id: Option<String>,
    /// User- or schedule-triggered.
    pub origin: Origin,
    /// Priority within the origin class.
    pub priority: i32,
    /// Lower bound of the walk, inclusive.
    pub min_cursor: Option<Cursor>,
    /// Upper bound of the walk, inclusive.
    pub max_cursor: Option<Cursor>,
    /// The upper bound of the last planned batch: the next batch starts after it.
    pub cursor: Option<Cursor>,
    /// Current rows per batch (adapted by the runtime).
    pub batch_size: i64,
    /// Current rows per sub-batch.
    pub sub_batch_size: i64,
    /// Pause between sub-batches, milliseconds.
    pub pause_ms: i64,
    /// Per-run limits.
    pub limits: Limits,
    /// Expected rows in total, when known.
    pub estimated_rows: Option<i64>,
    /// Persisted trace context of the operation's trace.
    pub trace_context: Option<String>,
    /// The database it works on when not the store's own: its URL without
    /// a password ([`crate::OperationSpec::target`]).
    pub target: Option<String>,
    /// The target's name in its fleet ([`crate::OperationSpec::target_name`]).
    pub target_name: Option<String>,
    /// The fleet it belongs to ([`crate::OperationSpec::fleet`]).
    pub fleet: Option<String>,
    /// How many of its fleet may run at once ([`crate::OperationSpec::fleet_cap`]).
    pub fleet_cap: Option<i64>,
    /// Where the operation is in its life.
    pub status: OperationStatus,
    /// Last recorded health signal.
    pub health: Health,
    /// Why the health signal is what it is.
    pub health_reason: Option<String>,
    /// Rows processed by succeeded batches.
    pub rows_done: i64,
    /// Batches planned so far (the last planned batch's ordinal).
    pub batches_planned: i64,
    /// Batches that succeeded.
    pub batches_succeeded: i64,
    /// Failed batch attempts, in all.
    pub batch_failures: i64,
    /// The last error recorded (a failed batch attempt or the operation's failure).
    pub last_error: Option<String>,
    /// The node named by the last `Started` event.
    pub node: Option<String>,
    /// When `Created` was recorded (epoch milliseconds).
    pub created_at: i64,
    /// When the operation first started.
    pub started_at: Option<i64>,
    /// When the last event was recorded.
    pub updated_at: i64,
    /// When it became finished, failed or cancelled.
    pub finished_at: Option<i64>,
    /// Sequence number of the last applied event (the log's length).
    pub last_seq: i64,
}

/// Something that must follow from an applied event, as data so the state
/// machine stays pure and its tests can assert on them. Each is read: the
/// store releases the lease and requeues failed batches in the append's
/// transaction; the runtime wakes a waiter on a terminal status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// The holder gives up its lease: the operation is not running here any more.
    ReleaseLease,
    /// Failed batches go back to pending so they are run again.
    RequeueFailedBatches,
    /// The operation reached a terminal status; wake whoever waits for it.
    NotifyTerminal(OperationStatus),
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IllegalTransition {
    /// The first event of a log must be `Created`.
    #[error("the operation does not exist yet: its first event must be `created`, not `{event}`")]
    NotCreated {
        /// The refused event's kind.
        event: &'static str,
    },
    /// `Created` on an operation that already exists.
    #[error("the operation already exists")]
    AlreadyCreated,
    /// The event is not legal in the current status.
    #[error("`{event}` is not allowed while the operation is {from:?}")]
    WrongStatus {
        /// The current status.
        from: OperationStatus,
        /// The refused event's kind.
        event: &'static str,
    },
    /// A planned batch does not continue from the cursor, or does not move it forward.
    #[error("batch {ordinal} breaks cursor order: {detail}")]
    CursorOrder {
        /// The batch.
        ordinal: i64,
        /// What is wrong.
        detail: String,
    },
    /// A batch ordinal is out of sequence or names a batch that was never planned.
    #[error("batch {ordinal} is out of sequence ({planned} planned)")]
    BatchOrdinal {
        /// The batch.
        ordinal: i64,
        /// Batches planned so far.
        planned: i64,
    },
    /// More batches succeeded than were planned.
    #[error("batch {ordinal} succeeded but all {planned} planned batches already had")]
    TooManySuccesses {
        /// The batch.
        ordinal: i64,
        /// Batches planned so far.
        planned: i64,
    },
    /// `Finished` while planned batches are not all done.
    #[error("cannot finish: {succeeded} of {planned} planned batches succeeded")]
    UnfinishedBatches {
        /// Succeeded batches.
        succeeded: i64,
        /// Planned batches.
        planned: i64,
    },
    /// A number in the event is out of range.
    #[error("invalid `{event}` event: {detail}")]
    InvalidValue {
        /// The event's kind.
        event: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// Applies one event recorded at `at` (epoch milliseconds) to the current
/// projection (`None` before `Created`), returning the next projection and
/// the effects to perform. Pure: the same inputs always give the same output.
pub fn apply(
    state: Option<&Projection>,
    event: &Event,
    at: i64,
) -> Result<(Projection, Vec<Effect>), IllegalTransition> {
    let Some(current) = state else {
        return match event {
            Event::Created(spec) => Ok((created(spec, at), Vec::new())),
            other => Err(IllegalTransition::NotCreated {
                event: other.kind(),
            }),
        };
    };
    let mut next = current.clone();
    let effects = transition(&mut next, event, at)?;
    next.updated_at = at;
    next.last_seq = current.last_seq + 1;
    Ok((next, effects))
}

/// Folds a whole log (events with their recording times) into a projection.
pub fn replay<'a>(
    events: impl IntoIterator<Item = (&'a Event, i64)>,
) -> Result<Option<Projection>, IllegalTransition> {
    let mut state: Option<Projection> = None;
    for (event, at) in events {
        state = Some(apply(state.as_ref(), event, at)?.0);
    }
    Ok(state)
}

impl Event {
    /// The statuses this event may be applied in: the one transition table,
    /// used by [`apply`] and by anything that must know in advance which
    /// operations an event applies to (an operator's bulk pause, say).
    /// Empty for `Created`, which is only legal as the first event of a log.
    pub fn legal_from(&self) -> &'static [OperationStatus] {
        use OperationStatus::*;
        match self {
            Event::Created(_) => &[],
            Event::Started { .. } => &[Pending, Running],
            Event::BatchPlanned { .. }
            | Event::BatchSplit { .. }
            | Event::Throttled { .. }
            | Event::Yielded { .. }
            | Event::Finished => &[Running],
            Event::BatchSucceeded { .. } | Event::BatchFailed { .. } => {
                &[Pending, Running, Paused, Failed, Cancelled]
            }
            Event::Paused { .. } | Event::Failed { .. } => &[Pending, Running],
            Event::Resumed => &[Paused],
            Event::Cancelled { .. } => &[Pending, Running, Paused, Failed],
            Event::Retried => &[Failed],
            Event::Reverted { .. } => &[Finished, Cancelled],
        }
    }
}

impl Projection {
    /// Estimated completion in percent (0–100), when a total is known.
    pub fn percent_done(&self) -> Option<f64> {
        if self.status == OperationStatus::Finished {
            return Some(100.0);
        }
        let total = self.estimated_rows.filter(|t| *t > 0)?;
        Some((self.rows_done as f64 / total as f64 * 100.0).min(100.0))
    }
}

fn created(spec: &crate::spec::OperationSpec, at: i64) -> Projection {
    Projection {
        kind: spec.kind.clone(),
        table: spec.table.clone(),
        batching_columns: spec.batching_columns.clone(),
        arguments: spec.arguments.clone(),
        tenant_id: spec.tenant_id.clone(),
        origin: spec.origin,
        priority: spec.priority,
        min_cursor: spec.min_cursor.clone(),
        max_cursor: spec.max_cursor.clone(),
        cursor: None,
        batch_size: spec.batch_size,
        sub_batch_size: spec.sub_batch_size,
        pause_ms: spec.pause_ms,
        limits: spec.limits,
        estimated_rows: spec.estimated_rows,
        trace_context: spec.trace_context.clone(),
        target: spec.target.clone(),
        target_name: spec.target_name.clone(),
        fleet: spec.fleet.clone(),
        fleet_cap: spec.fleet_cap,
        status: OperationStatus::Pending,
        health: Health::Normal,
        health_reason: None,
        rows_done: 0,
        batches_planned: 0,
        batches_succeeded: 0,
        batch_failures: 0,
        last_error: None,
        node: None,
        created_at: at,
        started_at: None,
        updated_at: at,
        finished_at: None,
        last_seq: 1,
    }
}

fn transition(
    next: &mut Projection,
    event: &Event,
    at: i64,
) -> Result<Vec<Effect>, IllegalTransition> {
    use OperationStatus::*;
    let from = next.status;
    if !matches!(event, Event::Created(_)) && !event.legal_from().contains(&from) {
        return Err(IllegalTransition::WrongStatus {
            from,
            event: event.kind(),
        });
    }
    match event {
        Event::Created(_) => Err(IllegalTransition::AlreadyCreated),
        Event::Started { node } => {
            next.status = Running;
            next.node = Some(node.clone());
            next.started_at.get_or_insert(at);
            Ok(Vec::new())
        }
        Event::BatchPlanned {
            ordinal,
            start,
            end,
            size,
        } => {
            plan_batch(next, *ordinal, start.as_ref(), end.as_ref(), *size)?;
            Ok(Vec::new())
        }
        Event::BatchSucceeded {
            ordinal,
            rows,
            next_batch_size,
            ..
        } => {
            check_known_batch(next, *ordinal)?;
            if next.batches_succeeded >= next.batches_planned {
                return Err(IllegalTransition::TooManySuccesses {
                    ordinal: *ordinal,
                    planned: next.batches_planned,
                });
            }
            non_negative("batch_succeeded", "rows", *rows)?;
            next.rows_done += rows;
            next.batches_succeeded += 1;
            if let Some(size) = next_batch_size {
                positive("batch_succeeded", "next_batch_size", *size)?;
                next.batch_size = *size;
            }
            Ok(Vec::new())
        }
        Event::BatchFailed {
            ordinal,
            error,
            next_sub_batch_size,
            ..
        } => {
            check_known_batch(next, *ordinal)?;
            next.batch_failures += 1;
            // A failed operation keeps the error it failed with: a batch
            // still in flight elsewhere (a helper's) may report after it.
            if from != Failed {
                next.last_error = Some(error.clone());
            }
            if let Some(size) = next_sub_batch_size {
                positive("batch_failed", "next_sub_batch_size", *size)?;
                next.sub_batch_size = *size;
            }
            Ok(Vec::new())
        }
        Event::BatchSplit {
            ordinal,
            at,
            new_ordinal,
        } => {
            split_batch(next, *ordinal, at, *new_ordinal)?;
            Ok(Vec::new())
        }
        Event::Throttled { health, reason } => {
            if let Health::Throttled { percent } = health
                && !(1..=99).contains(percent)
            {
                return Err(IllegalTransition::InvalidValue {
                    event: event.kind(),
                    detail: format!("throttle percent must be 1 to 99, got {percent}"),
                });
            }
            next.health = *health;
            next.health_reason = reason.clone();
            Ok(Vec::new())
        }
        Event::Yielded { .. } => {
            next.status = Pending;
            Ok(vec![Effect::ReleaseLease])
        }
        Event::Paused { .. } => {
            next.status = Paused;
            Ok(vec![Effect::ReleaseLease])
        }
        Event::Resumed => {
            next.status = Pending;
            Ok(Vec::new())
        }
        Event::Finished => {
            if next.batches_succeeded != next.batches_planned {
                return Err(IllegalTransition::UnfinishedBatches {
                    succeeded: next.batches_succeeded,
                    planned: next.batches_planned,
                });
            }
            terminate(next, Finished, at);
            Ok(vec![Effect::ReleaseLease, Effect::NotifyTerminal(Finished)])
        }
        Event::Failed { error } => {
            next.last_error = Some(error.clone());
            terminate(next, Failed, at);
            Ok(vec![Effect::ReleaseLease, Effect::NotifyTerminal(Failed)])
        }
        Event::Cancelled { .. } => {
            terminate(next, Cancelled, at);
            Ok(vec![
                Effect::ReleaseLease,
                Effect::NotifyTerminal(Cancelled),
            ])
        }
        Event::Retried => {
            next.status = Pending;
            next.finished_at = None;
            Ok(vec![Effect::RequeueFailedBatches])
        }
        // A note in the log: the operation has ended and stays as it is.
        Event::Reverted { .. } => Ok(Vec::new()),
    }
}

fn terminate(next: &mut Projection, status: OperationStatus, at: i64) {
    next.status = status;
    next.finished_at = Some(at);
}

fn positive(event: &'static str, field: &str, value: i64) -> Result<(), IllegalTransition> {
    if value <= 0 {
        return Err(IllegalTransition::InvalidValue {
            event,
            detail: format!("{field} must be positive, got {value}"),
        });
    }
    Ok(())
}

fn non_negative(event: &'static str, field: &str, value: i64) -> Result<(), IllegalTransition> {
    if value < 0 {
        return Err(IllegalTransition::InvalidValue {
            event,
            detail: format!("{field} must not be negative, got {value}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

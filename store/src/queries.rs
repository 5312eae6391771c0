//! The store's core operations (operations, events, batches, leases) as
//! transactions over the named statements of [`crate::statements`],
//! compiled for each backend (`sqlite`, `postgres`) by the [`backend!`]
//! macro, so the two cannot drift apart: each backend module differs only
//! in its sqlx database type and its dialect's statements. (Statements
//! without per-dialect transactions — schedules, switches, target tables —
//! run the same code on either pool through `on_pool!`.)
//!
//! Locking: on PostgreSQL an append locks the operation row (`FOR UPDATE`) and
//! claims skip rows other nodes hold (`FOR UPDATE SKIP LOCKED`); on SQLite
//! every write transaction is `BEGIN IMMEDIATE`, so writers are serialised
//! by the database lock (waiting up to the busy timeout) and a read inside the
//! transaction can never be invalidated by another writer.

use sqlx::{AssertSqlSafe, Row as _};

use crate::batch_machine::{BatchChange, next_status};
use crate::clock::millis;
use crate::cursor::Cursor;
use crate::error::StoreError;
use crate::event::{self, Event, FORMAT_VERSION};
use crate::machine::{self, Effect, OperationStatus};
use crate::operation_row::{self, OperationRow, PROJECTION_COLUMNS, bind_columns};
use crate::record::{
    Batch, BatchLease, BatchRow, BatchStatus, EventRow, Lease, NextBatch, OperationRecord,
};
use crate::spec::OperationSpec;
use crate::statements::{self, Statements};

/// What an append expects the log's last sequence number to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// Whatever it is: the append is serialised after every earlier one.
    /// For facts that are true regardless of what happened meanwhile
    /// (a batch's outcome).
    Any,
    /// Exactly this: otherwise [`StoreError::Conflict`] and nothing is written.
    /// For decisions taken on a state the caller read.
    Exactly(i64),
}

/// A schedule-triggered operation waiting this long is claimed with the
/// user-triggered ones (oldest first), so a stream of user operations
/// cannot starve it.
pub const PROMOTE_AFTER_MS: i64 = 10 * 60 * 1_000;

/// The lease columns an append writes beside the projection.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LeaseColumns {
    owner: Option<String>,
    epoch: i64,
    expires_at: Option<i64>,
}

/// The outcome of an append: the new record and the effects the runtime must perform.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The operation after the append.
    pub record: OperationRecord,
    /// Effects of the appended events, in order.
    pub effects: Vec<Effect>,
}

/// Defines one backend module over a sqlx database type.
macro_rules! backend {
    ($module:ident, $db:ty, $statements:expr) => {
        pub(crate) mod $module {
            use super::*;

            pub(crate) type Pool = sqlx::Pool<$db>;
            type Tx = sqlx::Transaction<'static, $db>;
            /// This backend's statements.
            const S: Statements = $statements;

            /// Begins a transaction that holds the write lock from its first statement on SQLite.
            pub(crate) async fn begin_write(pool: &Pool) -> Result<Tx, sqlx::Error> {
                pool.begin_with(S.begin_write).await
            }

            pub(crate) async fn enqueue(
                pool: &Pool,
                spec: &OperationSpec,
                now: i64,
            ) -> Result<(i64, bool), StoreError> {
                // A conflicting operation can turn terminal between our insert and our
                // look-up; then the insert succeeds on the next round.
                loop {
                    let mut tx = begin_write(pool).await?;
                    let enqueued = enqueue_in(&mut tx, spec, now).await?;
                    tx.commit().await?;
                    if let Some(enqueued) = enqueued {
                        return Ok(enqueued);
                    }
                }
            }

            /// Writes `specs` with their `created` events in one transaction, row
            /// by row (SQLite: local, and serialised by the write lock anyway;
            /// PostgreSQL uses [`crate::bulk_enqueue`]). Per spec: `(id, created)`,
            /// or `None` when the active operation it collided with ended
            /// meanwhile.
            #[allow(
                dead_code,
                reason = "PostgreSQL writes its chunks with crate::bulk_enqueue"
            )]
            pub(crate) async fn enqueue_each(
                pool: &Pool,
                specs: &[OperationSpec],
                now: i64,
            ) -> Result<Vec<Option<(i64, bool)>>, StoreError> {
                let mut tx = begin_write(pool).await?;
                let mut outcomes = Vec::with_capacity(specs.len());
                for spec in specs {
                    outcomes.push(enqueue_in(&mut tx, spec, now).await?);
                }
                tx.commit().await?;
                Ok(outcomes)
            }

            /// Inserts one operation and its `created` event inside `tx`, or finds
            /// the active one with the same identity; `None` when neither
            /// (the conflicting one ended between the two statements).
            async fn enqueue_in(
                tx: &mut Tx,
                spec: &OperationSpec,
                now: i64,
            ) -> Result<Option<(i64, bool)>, StoreError> {
                let created = Event::Created(Box::new(spec.clone()));
                let (projection, _) =
                    machine::apply(None, &created, now).expect("created is legal on nothing");
                let unique_key = spec.unique_key();
                let insert =
                    sqlx::query(AssertSqlSafe(operation_row::insert_operation())).bind(&unique_key);
                let inserted = bind_columns!(insert, &PROJECTION_COLUMNS, &projection)
                    .fetch_optional(&mut **tx)
                    .await?
                    .map(|row| row.try_get::<i64, _>(0))
                    .transpose()?;
                if let Some(id) = inserted {
                    insert_events(tx, id, 1, std::slice::from_ref(&created), now).await?;
                    return Ok(Some((id, true)));
                }
                let existing: Option<i64> = sqlx::query_scalar(S.active_operation)
                    .bind(&unique_key)
                    .fetch_optional(&mut **tx)
                    .await?;
                Ok(existing.map(|id| (id, false)))
            }

            pub(crate) async fn operation(
                pool: &Pool,
                id: i64,
            ) -> Result<OperationRecord, StoreError> {
                let row: Option<OperationRow> = sqlx::query_as(S.operation)
                    .bind(id)
                    .fetch_optional(pool)
                    .await?;
                row.ok_or(StoreError::NotFound(id))?.try_into()
            }

            pub(crate) async fn list(
                pool: &Pool,
                status: Option<OperationStatus>,
                kind: Option<&str>,
                limit: i64,
            ) -> Result<Vec<OperationRecord>, StoreError> {
                let rows: Vec<OperationRow> = sqlx::query_as(S.list_operations)
                    .bind(status.map(OperationStatus::as_str))
                    .bind(kind)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?;
                rows.into_iter().map(OperationRecord::try_from).collect()
            }

            pub(crate) async fn event_rows(
                pool: &Pool,
                id: i64,
                after_seq: i64,
            ) -> Result<Vec<EventRow>, StoreError> {
                Ok(sqlx::query_as(S.events_after)
                    .bind(id)
                    .bind(after_seq)
                    .fetch_all(pool)
                    .await?)
            }

            pub(crate) async fn append(
                pool: &Pool,
                id: i64,
                expected: Expected,
                fence: Option<&Lease>,
                events: &[Event],
                now: i64,
            ) -> Result<Appended, StoreError> {
                let mut tx = begin_write(pool).await?;
                let record = load_locked(&mut tx, id).await?;
                let appended =
                    append_loaded(&mut tx, record, expected, fence, None, events, now).await?;
                tx.commit().await?;
                Ok(appended)
            }

            pub(crate) async fn claim_operations(
                pool: &Pool,
                node: &str,
                kinds: Option<String>,
                limit: i64,
                ttl_ms: i64,
                now: i64,
            ) -> Result<Vec<Appended>, StoreError> {
                let mut tx = begin_write(pool).await?;
                // The claimable rows themselves, locked (PostgreSQL) or under the
                // write lock (SQLite): no second read per claimed operation.
                let rows: Vec<OperationRow> = sqlx::query_as(S.claimable_operations)
                    .bind(now)
                    .bind(limit)
                    .bind(kinds)
                    .bind(now - PROMOTE_AFTER_MS)
                    .fetch_all(&mut *tx)
                    .await?;
                let mut claimed = Vec::with_capacity(rows.len());
                for row in rows {
                    let record = OperationRecord::try_from(row)?;
                    let epoch = record.lease_epoch + 1;
                    let lease = Lease {
                        operation_id: record.id,
                        node: node.to_owned(),
                        epoch,
                        expires_at: now + ttl_ms,
                    };
                    let started = [Event::Started {
                        node: node.to_owned(),
                    }];
                    claimed.push(
                        append_loaded(
                            &mut tx,
                            record,
                            Expected::Any,
                            None,
                            Some(&lease),
                            &started,
                            now,
                        )
                        .await?,
                    );
                }
                tx.commit().await?;
                Ok(claimed)
            }

            pub(crate) async fn renew_lease(
                pool: &Pool,
                lease: &Lease,
                ttl_ms: i64,
                now: i64,
            ) -> Result<Lease, StoreError> {
                let expires_at = now + ttl_ms;
                let renewed = sqlx::query(S.renew_operation_lease)
                    .bind(lease.operation_id)
                    .bind(&lease.node)
                    .bind(lease.epoch)
                    .bind(expires_at)
                    .execute(pool)
                    .await?;
                if renewed.rows_affected() == 0 {
                    return Err(lease_lost(lease));
                }
                Ok(Lease {
                    expires_at,
                    ..lease.clone()
                })
            }

            pub(crate) async fn plan_batch(
                pool: &Pool,
                lease: &Lease,
                end: Option<Cursor>,
                size: i64,
                claim_ttl: Option<std::time::Duration>,
                now: i64,
            ) -> Result<(Batch, Appended), StoreError> {
                let mut tx = begin_write(pool).await?;
                let record = load_locked(&mut tx, lease.operation_id).await?;
                let planned = PlannedBatch::after(&record, end, size);
                // The row is locked and was read just now: the lease fence is the guard.
                let appended = append_loaded(
                    &mut tx,
                    record,
                    Expected::Any,
                    Some(lease),
                    None,
                    &[planned.event()],
                    now,
                )
                .await?;
                let claim = claim_ttl.map(|ttl| (lease.node.as_str(), now + millis(ttl)));
                let batch = insert_batch(&mut tx, lease.operation_id, &planned, claim, now).await?;
                tx.commit().await?;
                Ok((batch, appended))
            }

            pub(crate) async fn claim_batches(
                pool: &Pool,
                node: &str,
                operation_id: Option<i64>,
                limit: i64,
                ttl_ms: i64,
                now: i64,
            ) -> Result<Vec<Batch>, StoreError> {
                let rows: Vec<BatchRow> = sqlx::query_as(S.claim_batches)
                    .bind(node)
                    .bind(now + ttl_ms)
                    .bind(operation_id)
                    .bind(now)
                    .bind(limit)
                    .bind(
                        next_status(
                            Some(BatchStatus::Pending),
                            BatchChange::Claimed {
                                lease_lapsed: false,
                            },
                        )?
                        .as_str(),
                    )
                    .fetch_all(pool)
                    .await?;
                let mut batches = rows
                    .into_iter()
                    .map(Batch::try_from)
                    .collect::<Result<Vec<_>, _>>()?;
                batches.sort_by_key(|b| (b.operation_id, b.ordinal));
                Ok(batches)
            }

            pub(crate) async fn release_batch(
                pool: &Pool,
                lease: &BatchLease,
            ) -> Result<(), StoreError> {
                let released = sqlx::query(S.release_batch)
                    .bind(lease.batch_id)
                    .bind(lease.epoch)
                    .bind(next_status(Some(BatchStatus::Running), BatchChange::Released)?.as_str())
                    .execute(pool)
                    .await?;
                if released.rows_affected() == 0 {
                    return Err(batch_lease_lost(lease));
                }
                Ok(())
            }

            pub(crate) async fn renew_batch_lease(
                pool: &Pool,
                lease: &BatchLease,
                ttl_ms: i64,
                now: i64,
            ) -> Result<(), StoreError> {
                let renewed = sqlx::query(S.renew_batch_lease)
                    .bind(lease.batch_id)
                    .bind(lease.epoch)
                    .bind(now + ttl_ms)
                    .execute(pool)
                    .await?;
                if renewed.rows_affected() == 0 {
                    return Err(batch_lease_lost(lease));
                }
                Ok(())
            }

            pub(crate) async fn complete_batch(
                pool: &Pool,
                batch: &BatchLease,
                done: &BatchDone,
                then: Option<(&Lease, &NextBatch)>,
                now: i64,
            ) -> Result<(Appended, Option<Batch>), StoreError> {
                let mut tx = begin_write(pool).await?;
                let updated = sqlx::query(S.complete_batch)
                    .bind(batch.batch_id)
                    .bind(batch.epoch)
                    .bind(done.rows)
                    .bind(done.duration_ms)
                    .bind(now)
                    .bind(next_status(Some(BatchStatus::Running), BatchChange::Completed)?.as_str())
                    .execute(&mut *tx)
                    .await?;
                if updated.rows_affected() == 0 {
                    return Err(batch_lease_lost(batch));
                }
                let succeeded = Event::BatchSucceeded {
                    ordinal: batch.ordinal,
                    rows: done.rows,
                    duration_ms: done.duration_ms,
                    next_batch_size: done.next_batch_size,
                };
                let record = load_locked(&mut tx, batch.operation_id).await?;
                // The next batch goes with it only while `lease` still holds the
                // operation and its state machine takes the plan (not, say, once
                // an operator paused it): otherwise the outcome is recorded alone.
                let next = then
                    .filter(|(lease, _)| holds(&record, lease))
                    .map(|(lease, next)| {
                        (
                            lease,
                            PlannedBatch::after(&record, next.end.clone(), next.size),
                            next.ttl,
                        )
                    })
                    .filter(|(_, planned, _)| {
                        legal_after(&record.state, &succeeded, &planned.event(), now)
                    });
                let mut events = vec![succeeded];
                events.extend(next.as_ref().map(|(_, planned, _)| planned.event()));
                let appended =
                    append_loaded(&mut tx, record, Expected::Any, None, None, &events, now).await?;
                let planned = match next {
                    Some((lease, planned, ttl)) => {
                        let claim = Some((lease.node.as_str(), now + millis(ttl)));
                        Some(insert_batch(&mut tx, batch.operation_id, &planned, claim, now).await?)
                    }
                    None => None,
                };
                tx.commit().await?;
                Ok((appended, planned))
            }

            pub(crate) async fn fail_batch(
                pool: &Pool,
                lease: &BatchLease,
                error: &str,
                retry: bool,
                next_sub_batch_size: Option<i64>,
                fail_operation: Option<&str>,
                now: i64,
            ) -> Result<Appended, StoreError> {
                let mut tx = begin_write(pool).await?;
                // Decided as if the operation went on; decided again below
                // once its row is read (locked after the batch's, as every
                // batch write does).
                let attempt_failed = |operation| BatchChange::AttemptFailed {
                    last: !retry,
                    operation,
                };
                let written = next_status(
                    Some(BatchStatus::Running),
                    attempt_failed(OperationStatus::Running),
                )?;
                let failed = sqlx::query(S.fail_batch)
                    .bind(lease.batch_id)
                    .bind(lease.epoch)
                    .bind(written.as_str())
                    .bind(error)
                    .bind(next_sub_batch_size)
                    .bind(now)
                    .execute(&mut *tx)
                    .await?;
                if failed.rows_affected() == 0 {
                    return Err(batch_lease_lost(lease));
                }
                let event = Event::BatchFailed {
                    ordinal: lease.ordinal,
                    attempt: lease.attempt,
                    error: error.to_owned(),
                    next_sub_batch_size,
                };
                let record = load_locked(&mut tx, lease.operation_id).await?;
                // The operation's failure goes with it while its state machine
                // takes one (not once it failed already, say by another node's
                // batch, or an operator paused or cancelled it).
                let operation_failed = fail_operation
                    .map(|error| Event::Failed {
                        error: error.to_owned(),
                    })
                    .filter(|failed| legal_after(&record.state, &event, failed, now));
                let decided = next_status(
                    Some(BatchStatus::Running),
                    attempt_failed(record.state.status),
                )?;
                if decided != written {
                    sqlx::query(S.set_batch_status)
                        .bind(lease.batch_id)
                        .bind(decided.as_str())
                        .execute(&mut *tx)
                        .await?;
                }
                let mut events = vec![event];
                events.extend(operation_failed);
                let appended =
                    append_loaded(&mut tx, record, Expected::Any, None, None, &events, now).await?;
                tx.commit().await?;
                Ok(appended)
            }

            pub(crate) async fn split_batch(
                pool: &Pool,
                lease: &BatchLease,
                at: &Cursor,
                error: &str,
                next_sub_batch_size: Option<i64>,
                now: i64,
            ) -> Result<Appended, StoreError> {
                let mut tx = begin_write(pool).await?;
                let row: Option<BatchRow> = sqlx::query_as(S.held_batch_locked)
                    .bind(lease.batch_id)
                    .bind(lease.epoch)
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(row) = row else {
                    return Err(batch_lease_lost(lease));
                };
                let batch = Batch::try_from(row)?;
                let from = batch.progress.as_ref().or(batch.start.as_ref());
                let Some(end) = batch
                    .end
                    .clone()
                    .filter(|end| at < end && from.is_none_or(|f| at > f))
                else {
                    return Err(StoreError::Illegal {
                        operation_id: lease.operation_id,
                        source: machine::IllegalTransition::CursorOrder {
                            ordinal: lease.ordinal,
                            detail: format!(
                                "split point {at} is not inside the batch's remaining range"
                            ),
                        },
                    });
                };
                let record = load_locked(&mut tx, lease.operation_id).await?;
                let new_ordinal = record.state.batches_planned + 1;
                let events = [
                    Event::BatchFailed {
                        ordinal: lease.ordinal,
                        attempt: lease.attempt,
                        error: error.to_owned(),
                        next_sub_batch_size,
                    },
                    Event::BatchSplit {
                        ordinal: lease.ordinal,
                        at: at.clone(),
                        new_ordinal,
                    },
                ];
                let appended =
                    append_loaded(&mut tx, record, Expected::Any, None, None, &events, now).await?;
                let remaining = (batch.batch_size - batch.rows_affected).max(2);
                let sub_batch_size = next_sub_batch_size.unwrap_or(batch.sub_batch_size);
                // The first half starts its attempts afresh; its committed progress stays.
                sqlx::query(S.shorten_batch)
                    .bind(lease.batch_id)
                    .bind(at.to_json())
                    .bind(batch.rows_affected + remaining / 2)
                    .bind(sub_batch_size)
                    .bind(error)
                    .bind(next_status(Some(BatchStatus::Running), BatchChange::Split)?.as_str())
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(S.insert_split_batch)
                    .bind(lease.operation_id)
                    .bind(new_ordinal)
                    .bind(at.to_json())
                    .bind(end.to_json())
                    .bind(remaining - remaining / 2)
                    .bind(sub_batch_size)
                    .bind(now)
                    .bind(next_status(None, BatchChange::PlannedAhead)?.as_str())
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(appended)
            }

            pub(crate) async fn batches(
                pool: &Pool,
                operation_id: i64,
            ) -> Result<Vec<Batch>, StoreError> {
                let rows: Vec<BatchRow> = sqlx::query_as(S.batches)
                    .bind(operation_id)
                    .fetch_all(pool)
                    .await?;
                rows.into_iter().map(Batch::try_from).collect()
            }

            pub(crate) async fn prune_batches(
                pool: &Pool,
                cutoff: i64,
                chunk: i64,
            ) -> Result<u64, StoreError> {
                let mut total = 0;
                loop {
                    let deleted = sqlx::query(S.prune_batches)
                        .bind(cutoff)
                        .bind(chunk)
                        .execute(pool)
                        .await?
                        .rows_affected();
                    total += deleted;
                    if deleted < chunk as u64 {
                        return Ok(total);
                    }
                }
            }

            async fn load_locked(tx: &mut Tx, id: i64) -> Result<OperationRecord, StoreError> {
                let row: Option<OperationRow> = sqlx::query_as(S.operation_locked)
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?;
                row.ok_or(StoreError::NotFound(id))?.try_into()
            }

            /// Applies `events` to a locked record, writes the new projection and the
            /// events, and performs the effects that are the store's own.
            /// `take` installs a new lease (a claim); otherwise the lease is kept,
            /// or cleared when an event releases it.
            async fn append_loaded(
                tx: &mut Tx,
                record: OperationRecord,
                expected: Expected,
                fence: Option<&Lease>,
                take: Option<&Lease>,
                events: &[Event],
                now: i64,
            ) -> Result<Appended, StoreError> {
                let id = record.id;
                if let Expected::Exactly(seq) = expected
                    && seq != record.state.last_seq
                {
                    return Err(StoreError::Conflict {
                        operation_id: id,
                        expected: seq,
                        actual: record.state.last_seq,
                    });
                }
                if let Some(fence) = fence
                    && !holds(&record, fence)
                {
                    return Err(lease_lost(fence));
                }
                let first_seq = record.state.last_seq + 1;
                let mut state = record.state;
                let mut effects = Vec::new();
                for event in events {
                    let (next, more) =
                        machine::apply(Some(&state), event, now).map_err(|source| {
                            StoreError::Illegal {
                                operation_id: id,
                                source,
                            }
                        })?;
                    state = next;
                    effects.extend(more);
                }
                let mut lease = match take {
                    Some(new) => Some(new.clone()),
                    None => record.lease.clone(),
                };
                if effects.contains(&Effect::ReleaseLease) {
                    lease = None;
                }
                let columns = LeaseColumns {
                    owner: lease.as_ref().map(|l| l.node.clone()),
                    epoch: take.map_or(record.lease_epoch, |new| new.epoch),
                    expires_at: lease.as_ref().map(|l| l.expires_at),
                };
                let update = sqlx::query(AssertSqlSafe(operation_row::update_operation())).bind(id);
                bind_columns!(update, operation_row::changing_columns(), &state)
                    .bind(columns.owner)
                    .bind(columns.epoch)
                    .bind(columns.expires_at)
                    .execute(&mut **tx)
                    .await?;
                if effects.contains(&Effect::RequeueFailedBatches) {
                    sqlx::query(S.requeue_failed_batches)
                        .bind(id)
                        .bind(
                            next_status(Some(BatchStatus::Failed), BatchChange::Requeued)?.as_str(),
                        )
                        .execute(&mut **tx)
                        .await?;
                }
                insert_events(tx, id, first_seq, events, now).await?;
                let lease_epoch = columns.epoch;
                Ok(Appended {
                    record: OperationRecord {
                        id,
                        state,
                        lease,
                        lease_epoch,
                    },
                    effects,
                })
            }

            /// Inserts a planned batch: pending, or running under a first claim by
            /// `claim`'s node until its expiry (what [`claim_batches`] would make of it).
            async fn insert_batch(
                tx: &mut Tx,
                operation_id: i64,
                planned: &PlannedBatch,
                claim: Option<(&str, i64)>,
                now: i64,
            ) -> Result<Batch, StoreError> {
                let row: BatchRow = sqlx::query_as(S.insert_batch)
                    .bind(operation_id)
                    .bind(planned.ordinal)
                    .bind(planned.start.as_ref().map(Cursor::to_json))
                    .bind(planned.end.as_ref().map(Cursor::to_json))
                    .bind(planned.size)
                    .bind(planned.sub_batch_size)
                    .bind(
                        next_status(
                            None,
                            if claim.is_some() {
                                BatchChange::PlannedClaimed
                            } else {
                                BatchChange::PlannedAhead
                            },
                        )?
                        .as_str(),
                    )
                    .bind(now)
                    .bind(claim.map(|(node, _)| node))
                    .bind(i32::from(claim.is_some()))
                    .bind(claim.map(|(_, expires_at)| expires_at))
                    .fetch_one(&mut **tx)
                    .await?;
                row.try_into()
            }

            async fn insert_events(
                tx: &mut Tx,
                id: i64,
                first_seq: i64,
                events: &[Event],
                now: i64,
            ) -> Result<(), StoreError> {
                for (seq, event) in (first_seq..).zip(events) {
                    sqlx::query(S.insert_event)
                        .bind(id)
                        .bind(seq)
                        .bind(event.kind())
                        .bind(now)
                        .bind(FORMAT_VERSION)
                        .bind(event::encode(event))
                        .execute(&mut **tx)
                        .await?;
                }
                Ok(())
            }
        }
    };
}

backend!(sqlite, sqlx::Sqlite, statements::SQLITE);
backend!(postgres, sqlx::Postgres, statements::POSTGRES);

/// What a batch that succeeded reports ([`Event::BatchSucceeded`]).
pub(crate) struct BatchDone {
    pub(crate) rows: i64,
    pub(crate) duration_ms: i64,
    pub(crate) next_batch_size: Option<i64>,
}

impl BatchDone {
    /// `rows` changed in `duration`, setting the batch size to `next_batch_size`.
    pub(crate) fn new(
        rows: i64,
        duration: std::time::Duration,
        next_batch_size: Option<i64>,
    ) -> Self {
        BatchDone {
            rows,
            duration_ms: millis(duration),
            next_batch_size,
        }
    }
}

/// The batch an owner plans next: from the operation's cursor to the end it
/// asked for, numbered after the last one planned.
struct PlannedBatch {
    ordinal: i64,
    start: Option<Cursor>,
    end: Option<Cursor>,
    size: i64,
    sub_batch_size: i64,
}

impl PlannedBatch {
    fn after(record: &OperationRecord, end: Option<Cursor>, size: i64) -> Self {
        PlannedBatch {
            ordinal: record.state.batches_planned + 1,
            start: record.state.cursor.clone(),
            end,
            size,
            sub_batch_size: record.state.sub_batch_size.min(size),
        }
    }

    fn event(&self) -> Event {
        Event::BatchPlanned {
            ordinal: self.ordinal,
            start: self.start.clone(),
            end: self.end.clone(),
            size: self.size,
        }
    }
}

/// Whether the state machine takes `then` right after `first` on `state`:
/// the trial run before a second event is appended with the first, so a
/// refused one is left out rather than refusing both.
fn legal_after(state: &machine::Projection, first: &Event, then: &Event, now: i64) -> bool {
    machine::apply(Some(state), first, now)
        .and_then(|(state, _)| machine::apply(Some(&state), then, now))
        .is_ok()
}

/// Whether `lease` is the lease `record` is held under.
fn holds(record: &OperationRecord, lease: &Lease) -> bool {
    record
        .lease
        .as_ref()
        .is_some_and(|held| held.node == lease.node && held.epoch == lease.epoch)
}

/// The error for a write refused because `lease` no longer holds its batch.
pub(crate) fn batch_lease_lost(lease: &BatchLease) -> StoreError {
    StoreError::BatchLeaseLost {
        batch_id: lease.batch_id,
        epoch: lease.epoch,
    }
}

fn lease_lost(lease: &Lease) -> StoreError {
    StoreError::LeaseLost {
        operation_id: lease.operation_id,
        node: lease.node.clone(),
        epoch: lease.epoch,
    }
}

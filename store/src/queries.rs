//! The store's operation transactions (enqueue, read, append, claim, renew)
//! over the named statements of [`crate::dialect`] (the batches' are
//! [`crate::batch_queries`], built on this module's `append_loaded`),
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

use std::collections::HashMap;

use sqlx::{AssertSqlSafe, Row as _};

use crate::batch_machine::{BatchChange, next_status};
use crate::dialect::{self, Statements};
use crate::error::StoreError;
use crate::event::{self, Event, FORMAT_VERSION};
use crate::machine::{self, Effect, OperationStatus};
use crate::operation_row::{self, OperationRow, PROJECTION_COLUMNS, bind_columns};
use crate::record::{BatchStatus, EventRow, Lease, OperationRecord};
use crate::spec::OperationSpec;

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
        backend!($module, $db, $statements, ::sqlx);
    };
    ($module:ident, $db:ty, $statements:expr, $sqlx:path) => {
        pub(crate) mod $module {
            use super::*;
            /// sqlx, or on MySQL its `$N`-placeholder front ([`sluice_target::positional`]).
            use $sqlx as sqlx;

            pub(crate) type Pool = sqlx::Pool<$db>;
            pub(crate) type Tx = sqlx::Transaction<'static, $db>;
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
                // Looked up first, so a repeated enqueue takes no id from
                // PostgreSQL's sequence (an insert that conflicts would); two
                // enqueues racing past the look-up are still made one by the
                // unique index below.
                let existing: Option<i64> = sqlx::query_scalar(S.active_operation)
                    .bind(&unique_key)
                    .fetch_optional(&mut **tx)
                    .await?;
                if let Some(id) = existing {
                    return Ok(Some((id, false)));
                }
                let insert = sqlx::query(AssertSqlSafe(operation_row::insert_operation(
                    S.on_active_identity,
                    S.last_insert_id.is_none(),
                )))
                .bind(&unique_key);
                let insert = bind_columns!(insert, &PROJECTION_COLUMNS, &projection);
                let inserted = match S.last_insert_id {
                    None => insert
                        .fetch_optional(&mut **tx)
                        .await
                        .map(|row| row.map(|row| row.try_get::<i64, _>(0))),
                    Some(last_insert_id) => match insert.execute(&mut **tx).await {
                        Ok(_) => {
                            let id: Result<i64, _> = sqlx::query_scalar(last_insert_id)
                                .fetch_one(&mut **tx)
                                .await;
                            id.map(|id| Some(Ok(id)))
                        }
                        Err(e) => Err(e),
                    },
                };
                let inserted = match inserted {
                    // MySQL: the active identity's unique index refused the
                    // row (the transaction goes on: MySQL undoes only the
                    // statement).
                    Err(sqlx::Error::Database(e))
                        if S.on_active_identity.is_empty() && e.is_unique_violation() =>
                    {
                        None
                    }
                    other => other?.transpose()?,
                };
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
                filter: &crate::store::ListFilter,
            ) -> Result<Vec<OperationRecord>, StoreError> {
                let statement = if filter.newest_first {
                    S.list_operations_newest
                } else {
                    S.list_operations
                };
                let rows: Vec<OperationRow> = sqlx::query_as(statement)
                    .bind(filter.status.map(OperationStatus::as_str))
                    .bind(filter.kind.as_deref())
                    .bind(filter.after)
                    .bind(filter.limit.unwrap_or(1_000))
                    .fetch_all(pool)
                    .await?;
                rows.into_iter().map(OperationRecord::try_from).collect()
            }

            pub(crate) async fn fleet(
                pool: &Pool,
                fleet: &str,
            ) -> Result<Vec<OperationRecord>, StoreError> {
                const FLEET: &str = "SELECT * FROM sluice_operations WHERE fleet = $1 ORDER BY id";
                let rows: Vec<OperationRow> =
                    sqlx::query_as(FLEET).bind(fleet).fetch_all(pool).await?;
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
                let mut claimed_in: HashMap<String, i64> = HashMap::new();
                for row in rows {
                    let record = OperationRecord::try_from(row)?;
                    // A fleet with a cap: its running operations (and those
                    // claimed here) counted under its first one's lock.
                    if let (Some(fleet), Some(cap)) = (&record.state.fleet, record.state.fleet_cap) {
                        const RUNNING: &str = "SELECT COUNT(*) FROM sluice_operations \
                             WHERE fleet = $1 AND status = 'running' AND lease_expires_at >= $2";
                        let _: Option<i64> = sqlx::query_scalar(S.fleet_head_locked)
                            .bind(fleet)
                            .fetch_optional(&mut *tx)
                            .await?;
                        let running: i64 = sqlx::query_scalar(RUNNING)
                            .bind(fleet)
                            .bind(now)
                            .fetch_one(&mut *tx)
                            .await?;
                        let here = claimed_in.entry(fleet.clone()).or_default();
                        if running + *here >= cap {
                            continue;
                        }
                        *here += 1;
                    }
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

            pub(crate) async fn load_locked(
                tx: &mut Tx,
                id: i64,
            ) -> Result<OperationRecord, StoreError> {
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
            pub(crate) async fn append_loaded(
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

backend!(sqlite, sqlx::Sqlite, dialect::SQLITE);
backend!(postgres, sqlx::Postgres, dialect::POSTGRES);
backend!(
    mysql,
    sqlx::MySql,
    dialect::MYSQL,
    sluice_target::positional
);

/// Whether `lease` is the lease `record` is held under.
pub(crate) fn holds(record: &OperationRecord, lease: &Lease) -> bool {
    record
        .lease
        .as_ref()
        .is_some_and(|held| held.node == lease.node && held.epoch == lease.epoch)
}

fn lease_lost(lease: &Lease) -> StoreError {
    StoreError::LeaseLost {
        operation_id: lease.operation_id,
        node: lease.node.clone(),
        epoch: lease.epoch,
    }
}

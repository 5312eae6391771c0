//! The store's batch transactions (plan, claim, release, renew, complete,
//! fail, split, list, prune) over the named statements of
//! [`crate::dialect`], compiled for each backend by [`batch_backend!`]
//! as [`crate::queries`] compiles the operation's. Each one that records an
//! event appends it through that module's `append_loaded`, in the same
//! transaction as the batch row it writes; every batch status it writes is
//! the one [`next_status`] decides.

use crate::batch_machine::{BatchChange, next_status};
use crate::clock::millis;
use crate::dialect::{self, Statements};
use crate::error::StoreError;
use crate::event::Event;
use crate::machine::{self, OperationStatus};
use crate::queries::{Appended, Expected, holds};
use crate::record::{Batch, BatchLease, BatchRow, BatchStatus, Lease, NextBatch, OperationRecord};
use sluice_target::cursor::Cursor;

mod records;

pub(crate) use records::{BatchDone, batch_lease_lost};
use records::{PlannedBatch, legal_after};

/// Defines one backend's batch module beside its [`crate::queries`] module.
macro_rules! batch_backend {
    ($module:ident, $statements:expr) => {
        batch_backend!($module, $statements, ::sqlx);
    };
    ($module:ident, $statements:expr, $sqlx:path) => {
        pub(crate) mod $module {
            use super::*;
            use crate::queries::$module::{Pool, Tx, append_loaded, begin_write, load_locked};
            /// sqlx, or on MySQL its `$N`-placeholder front ([`sluice_target::positional`]).
            use $sqlx as sqlx;

            /// This backend's statements.
            const S: Statements = $statements;

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
                let claimed = next_status(
                    Some(BatchStatus::Pending),
                    BatchChange::Claimed {
                        lease_lapsed: false,
                    },
                )?;
                let mut tx = begin_write(pool).await?;
                let ids: Vec<i64> = sqlx::query_scalar(S.claimable_batches)
                    .bind(operation_id)
                    .bind(now)
                    .bind(limit)
                    .fetch_all(&mut *tx)
                    .await?;
                let mut rows: Vec<BatchRow> = Vec::with_capacity(ids.len());
                for id in ids {
                    sqlx::query(S.claim_batch)
                        .bind(id)
                        .bind(claimed.as_str())
                        .bind(node)
                        .bind(now + ttl_ms)
                        .execute(&mut *tx)
                        .await?;
                    rows.push(sqlx::query_as(S.batch).bind(id).fetch_one(&mut *tx).await?);
                }
                tx.commit().await?;
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

            /// Inserts a planned batch: pending, or running under a first claim by
            /// `claim`'s node until its expiry (what [`claim_batches`] would make of it).
            async fn insert_batch(
                tx: &mut Tx,
                operation_id: i64,
                planned: &PlannedBatch,
                claim: Option<(&str, i64)>,
                now: i64,
            ) -> Result<Batch, StoreError> {
                let status = next_status(
                    None,
                    if claim.is_some() {
                        BatchChange::PlannedClaimed
                    } else {
                        BatchChange::PlannedAhead
                    },
                )?
                .as_str();
                macro_rules! bound {
                    ($query:expr) => {
                        $query
                            .bind(operation_id)
                            .bind(planned.ordinal)
                            .bind(planned.start.as_ref().map(Cursor::to_json))
                            .bind(planned.end.as_ref().map(Cursor::to_json))
                            .bind(planned.size)
                            .bind(planned.sub_batch_size)
                            .bind(status)
                            .bind(now)
                            .bind(claim.map(|(node, _)| node))
                            .bind(i32::from(claim.is_some()))
                            .bind(claim.map(|(_, expires_at)| expires_at))
                    };
                }
                let row: BatchRow = match S.last_insert_id {
                    None => {
                        bound!(sqlx::query_as(S.insert_batch))
                            .fetch_one(&mut **tx)
                            .await?
                    }
                    Some(last_insert_id) => {
                        bound!(sqlx::query(S.insert_batch))
                            .execute(&mut **tx)
                            .await?;
                        let id: i64 = sqlx::query_scalar(last_insert_id)
                            .fetch_one(&mut **tx)
                            .await?;
                        sqlx::query_as(S.batch)
                            .bind(id)
                            .fetch_one(&mut **tx)
                            .await?
                    }
                };
                row.try_into()
            }
        }
    };
}

batch_backend!(sqlite, dialect::SQLITE);
batch_backend!(postgres, dialect::POSTGRES);
batch_backend!(mysql, dialect::MYSQL, sluice_target::positional);

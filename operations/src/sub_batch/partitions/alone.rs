//! Dropping a partition where the drop commits on its own (MySQL's
//! `ALTER TABLE … DROP PARTITION`), so it cannot commit with its record:
//! on a connection of its own, closed afterwards, the whole table is
//! locked (waiting for it no more than the database must), the partition's rows are checked
//! and counted, the drop's intent is recorded in the store (fenced by the
//! batch's lease and progress), the partition is dropped and the lock
//! released, and the intent is settled with the rows
//! ([`sluice_store::DropIntent`]).
//!
//! A worker that dies between the intent and its settling leaves the
//! intent in the batch: whoever holds the batch next settles it first
//! ([`settle_pending`]), under the same table lock, so never while a drop
//! is under way — the partition gone, its rows count once; still there,
//! nothing counts and it may be dropped again.

use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};

use sluice_store::DropIntent;
use sluice_target::LockedPartitionDrop;

use super::*;

/// The claims (batch, epoch) this process found no intent pending in, or
/// settled: each claim is read once.
static SETTLED: LazyLock<Mutex<HashSet<(i64, i64)>>> = LazyLock::new(Default::default);

/// Settles the drop intent a worker left in the batch `request` holds, if
/// any, from whether the table still has the partition; once per claim.
/// When it was dropped, the settling is this sub-batch: its outcome counts
/// the partition's rows (the batch's count in the store grew by them too),
/// and ends the batch as a drop does.
///
/// Errors: the table's lock not granted in time (transient: the sub-batch
/// is tried again), the lease lost, the store failing.
pub(super) async fn settle_pending(
    session: &SubBatchSession,
    shape: &Shape,
    request: &SubBatchRequest,
) -> Result<Option<SubBatchOutcome>, OperationError> {
    let claim = (request.lease.batch_id, request.lease.epoch);
    if settled(|s| s.contains(&claim)) {
        return Ok(None);
    }
    let store = session.store().clone();
    let Some(intent) = store.pending_drop(&request.lease).await? else {
        settled(|s| s.insert(claim));
        return Ok(None);
    };
    let table = shape.table();
    let statements = Ident::parse(&intent.partition)
        .ok()
        .and_then(|p| store.target().dialect().partition_drop_alone(table, &p))
        .ok_or_else(|| {
            OperationError::Arguments(format!(
                "batch {} records a drop of partition `{}` of `{table}`, which Sluice cannot \
                 check",
                request.lease.batch_id, intent.partition
            ))
        })?;
    let mut connection = locked(&store, &statements, request.timeout).await?;
    let listed = connection
        .fetch_cursor(&statements.listed, 1)
        .await
        .map_err(StoreError::from)?;
    let dropped = !still_listed(listed.as_ref());
    store.settle_drop(&request.lease, &intent, dropped).await?;
    let _ = connection.execute(&statements.unlock).await;
    settled(|s| s.insert(claim));
    tracing::info!(
        table = %table,
        partition = %intent.partition,
        dropped,
        rows = intent.rows,
        "settled a partition drop a worker recorded before it stopped"
    );
    Ok(dropped.then(|| SubBatchOutcome {
        rows: u64::try_from(intent.rows).unwrap_or(0),
        reached: None,
        last: false,
        dropped: Some(intent.partition),
    }))
}

/// Under the table's lock: checks and counts the rows of `partition`,
/// records the intent, drops it, and settles the intent with its rows.
/// Returns the rows dropped.
pub(super) async fn drop_partition(
    session: &SubBatchSession,
    shape: &Shape,
    request: &SubBatchRequest,
    partition: &Ident,
    statements: LockedPartitionDrop,
) -> Result<i64, NotDropped> {
    let failed = |e: StoreError| NotDropped::Failed(e.into());
    let store = session.store().clone();
    let counts = super::partition_counts(store.target().dialect(), shape, partition);
    let claim = (request.lease.batch_id, request.lease.epoch);
    let work = async {
        let mut connection = locked(&store, &statements, request.timeout)
            .await
            .map_err(NotDropped::Failed)?;
        let counted = connection
            .fetch_cursor(&counts, 2)
            .await
            .map_err(|e| failed(e.into()))?;
        let all = super::all_in_scope(counted)?;
        let intent = DropIntent {
            partition: partition.to_string(),
            rows: all,
        };
        // Read again if the drop is not settled below.
        settled(|s| s.remove(&claim));
        store
            .intend_drop(&request.lease, request.from.as_ref(), &intent)
            .await
            .map_err(failed)?;
        if let Err(error) = connection.execute(&statements.drop).await {
            // Still under the lock, whether it went after all; a connection
            // that cannot say leaves the intent to the next sub-batch.
            if let Ok(listed) = connection.fetch_cursor(&statements.listed, 1).await {
                let gone = !still_listed(listed.as_ref());
                store
                    .settle_drop(&request.lease, &intent, gone)
                    .await
                    .map_err(failed)?;
                if gone {
                    settled(|s| s.insert(claim));
                    return Ok(all);
                }
            }
            return Err(failed(error.into()));
        }
        let _ = connection.execute(&statements.unlock).await;
        store
            .settle_drop(&request.lease, &intent, true)
            .await
            .map_err(failed)?;
        settled(|s| s.insert(claim));
        Ok(all)
    };
    // Cancelled midway, the connection closes and its lock goes with it.
    super::super::run::within(request.timeout, work)
        .await
        .unwrap_or_else(|e| Err(NotDropped::Failed(e)))
}

/// How many times a table lock not free at once is asked for, and how
/// long apart, before the drop gives way, where the lock does not wait
/// (MariaDB): no query queues behind it, but a table busy with short
/// statements is seldom free at one given instant. Where the lock waits
/// (MySQL, a second at the least), it is asked for once.
const LOCK_ATTEMPTS: u32 = 10;
const LOCK_ATTEMPTS_APART: Duration = Duration::from_millis(10);

/// A connection of its own holding `statements.lock`, closed when dropped;
/// the lock asked for up to [`LOCK_ATTEMPTS`] times while it is not free.
async fn locked(
    store: &sluice_store::Store,
    statements: &LockedPartitionDrop,
    timeout: Duration,
) -> Result<sluice_target::TargetConnection, OperationError> {
    let mut connection = store
        .target()
        .sub_batch_connection(timeout)
        .await
        .map_err(StoreError::from)?;
    connection.close_on_drop();
    connection
        .execute(&statements.lock_timeout)
        .await
        .map_err(StoreError::from)?;
    let waits = connection
        .fetch_cursor(&statements.lock_wait, 1)
        .await
        .map_err(StoreError::from)?;
    let attempts = match waits.as_ref().map(|c| c.0.as_slice()) {
        Some([CursorValue::Int(0)]) => LOCK_ATTEMPTS,
        _ => 1,
    };
    let mut attempt = 1;
    loop {
        match connection.execute(&statements.lock).await {
            Ok(_) => return Ok(connection),
            Err(error) if error.is_transient() && attempt < attempts => {
                attempt += 1;
                tokio::time::sleep(LOCK_ATTEMPTS_APART).await;
            }
            Err(error) => return Err(StoreError::from(error).into()),
        }
    }
}

/// True when [`LockedPartitionDrop::listed`] found the partition.
fn still_listed(listed: Option<&Cursor>) -> bool {
    matches!(
        listed.map(|c| c.0.as_slice()),
        Some([CursorValue::Int(1..)])
    )
}

/// `work` on the claims settled.
fn settled<T>(work: impl FnOnce(&mut HashSet<(i64, i64)>) -> T) -> T {
    let mut claims = SETTLED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if claims.len() > 100_000 {
        claims.clear(); // read again, at one query a claim
    }
    work(&mut claims)
}

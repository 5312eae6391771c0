//! A loop sub-batch that drops a whole partition in place of deleting its
//! rows one by one ([`Shape::drop_partitions`]): on a table partitioned by
//! ranges of a column the scope keeps below a bound, a partition whose whole
//! range lies below it is detached and dropped in the sub-batch's
//! transaction, with the batch's progress record, once a check under its
//! lock finds every row of it in scope — so the drop and its record commit
//! together or not at all, and no row outside the scope goes with it.
//!
//! Each drop waits for its locks a short while only (`lock_timeout`): a
//! drop that would queue behind a long transaction — and make every query
//! on the table queue behind it — gives way, and the sub-batch deletes rows
//! one by one as it would have without partitions; the drop is tried again
//! after a backoff. A partition holding a row outside the scope, or that
//! the database will not drop, is left to the row-by-row way for good.
//!
//! Where a drop commits on its own (MySQL), it is recorded in two steps
//! instead, under a lock on the table ([`alone`]).

use std::collections::{HashMap, HashSet};
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

use sluice_target::{KeptPartitions, RangeBound};

use super::*;

mod alone;

/// The longest a partition whose lock was not granted waits before it is
/// tried again.
const LONGEST_BACKOFF: Duration = Duration::from_secs(60);

/// How long the partitions found below the bound are taken as they were
/// before the catalogue is read again: reading it costs a few
/// milliseconds, paid by every sub-batch while a drop waits for its lock.
/// A partition gone since is refused by its drop, under its lock.
const CATALOGUE_READ_EVERY: Duration = Duration::from_secs(10);

/// What this process learnt of the partition drops of the operations it
/// runs, by table and scope.
static DROPS: LazyLock<Mutex<HashMap<String, Drops>>> = LazyLock::new(Default::default);

#[derive(Debug, Default)]
struct Drops {
    /// Nothing forbids the drops: checked once.
    allowed: bool,
    /// No partition is left to drop: sub-batches delete rows one by one.
    done: bool,
    /// Partitions left to the row-by-row way: they hold rows outside the
    /// scope, or the database refused to drop them.
    refused: HashSet<String>,
    /// Partitions whose locks were not granted in time: when to try again,
    /// and the attempts so far.
    waiting: HashMap<String, (Instant, u32)>,
    /// Every partition left is waiting: no catalogue is read before then.
    quiet_until: Option<Instant>,
    /// The partitions below the bound as last read, and when.
    candidates: Option<(Instant, Vec<Ident>)>,
}

/// Why a drop did not happen.
enum NotDropped {
    /// Rows of the partition outside the scope, by count.
    OutsideScope(i64),
    /// The database's error.
    Failed(OperationError),
}

/// Drops one partition wholly in scope, if the shape allows it and one is
/// left, as this sub-batch; `None` when the sub-batch is to delete rows as
/// usual.
///
/// Errors: the lease lost or the store failing while the drop commits; a
/// drop refused or timed out is not an error but a `None`.
pub(super) async fn drop_a_partition(
    session: &mut SubBatchSession,
    shape: &Shape,
    request: &SubBatchRequest,
) -> Result<Option<SubBatchOutcome>, OperationError> {
    // On a target apart from the store, rows go one by one: a drop's
    // record (and MySQL's intent) is kept in the store's batch row today.
    if !shape.drops_partitions() || session.store().target_apart().is_some() {
        return Ok(None);
    }
    let store = session.store().clone();
    let table = shape.table();
    let dialect = store.target().dialect();
    let keeps = shape.partitions_kept_in().is_some();
    if !dialect.drops_partitions() || (keeps && !dialect.keeps_partitions()) {
        return Ok(None);
    }
    // MySQL: a drop that commits alone, under a lock on the whole table.
    let alone = dialect.partition_drop_alone(table, table).is_some();
    if alone && let Some(settled) = alone::settle_pending(session, shape, request).await? {
        return Ok(Some(settled));
    }
    // By table and scope: once no drop is left, or while every one left
    // waits, no catalogue is read.
    let key = format!("{table} {:?}", shape.filter());
    let now = Instant::now();
    let (done, allowed) = remembered(&key, |d| {
        let quiet = d.quiet_until.is_some_and(|until| now < until);
        (d.done || quiet, d.allowed)
    });
    if done {
        return Ok(None);
    }
    let cached = remembered(&key, |d| {
        d.candidates
            .as_ref()
            .filter(|(at, _)| now.saturating_duration_since(*at) < CATALOGUE_READ_EVERY)
            .map(|(_, candidates)| candidates.clone())
    });
    let candidates = match cached {
        Some(candidates) => candidates,
        None => match below_the_bound(&store, shape, &key, allowed).await? {
            Some(candidates) => {
                remembered(&key, |d| d.candidates = Some((now, candidates.clone())));
                candidates
            }
            None => {
                remembered(&key, |d| d.done = true);
                return Ok(None);
            }
        },
    };
    let next = remembered(&key, |d| {
        let open: Vec<&Ident> = candidates
            .iter()
            .filter(|p| !d.refused.contains(&p.to_string()))
            .collect();
        if open.is_empty() {
            d.done = true;
        }
        let next = open
            .iter()
            .find(|p| {
                d.waiting
                    .get(&p.to_string())
                    .is_none_or(|(at, _)| *at <= now)
            })
            .map(|p| (*p).clone());
        d.quiet_until = match next {
            Some(_) => None,
            None => d.waiting.values().map(|(at, _)| *at).min(),
        };
        next
    });
    let Some(partition) = next else {
        return Ok(None);
    };
    let name = partition.to_string();
    let dropped = match dialect.partition_drop_alone(table, &partition) {
        _ if keeps => drop_partition(session, shape, request, &partition).await,
        Some(statements) => {
            alone::drop_partition(session, shape, request, &partition, statements).await
        }
        None => drop_partition(session, shape, request, &partition).await,
    };
    match dropped {
        Ok(rows) => {
            remembered(&key, |d| {
                d.waiting.remove(&name);
                if let Some((_, candidates)) = &mut d.candidates {
                    candidates.retain(|p| p != &partition);
                }
            });
            match shape.partitions_kept_in() {
                Some(undo) => tracing::info!(table = %table, partition = %name, rows, undo = %undo,
                    "detached and kept a partition wholly in scope"),
                None => tracing::info!(table = %table, partition = %name, rows,
                    "dropped a partition wholly in scope"),
            }
            Ok(Some(SubBatchOutcome {
                rows: u64::try_from(rows).unwrap_or(0),
                reached: None,
                last: false,
                dropped: Some(name),
            }))
        }
        Err(NotDropped::OutsideScope(outside)) => {
            tracing::warn!(
                table = %table,
                partition = %name,
                "partition `{name}` holds {outside} rows the operation does not delete, so it is \
                 not dropped: its rows in scope are deleted one by one"
            );
            remembered(&key, |d| d.refused.insert(name));
            Ok(None)
        }
        Err(NotDropped::Failed(error)) if is_lease_lost(&error) => Err(error),
        Err(NotDropped::Failed(error)) if is_waiting(&error) => {
            let attempts = remembered(&key, |d| {
                let attempts = d.waiting.get(&name).map_or(0, |(_, n)| *n) + 1;
                let backoff = Duration::from_secs(1)
                    .saturating_mul(1 << attempts.min(6))
                    .min(LONGEST_BACKOFF);
                d.waiting.insert(name.clone(), (now + backoff, attempts));
                if alone {
                    // The lock was the whole table's: no partition's is free.
                    d.quiet_until = Some(now + backoff);
                }
                attempts
            });
            tracing::info!(
                table = %table,
                partition = %name,
                attempts,
                "a partition drop gave way to the table's other locks; rows are deleted one by one meanwhile"
            );
            Ok(None)
        }
        Err(NotDropped::Failed(error)) => {
            tracing::warn!(
                table = %table,
                partition = %name,
                "partition `{name}` could not be dropped ({error}): its rows are deleted one by one"
            );
            remembered(&key, |d| d.refused.insert(name));
            Ok(None)
        }
    }
}

/// The partitions of the shape's table wholly below its scope's bound, as
/// the catalogue lists them now; `None` when there are none to drop, ever:
/// the table is not partitioned by the bounded column, or (checked once,
/// unless `allowed`) something forbids the drops.
async fn below_the_bound(
    store: &sluice_store::Store,
    shape: &Shape,
    key: &str,
    allowed: bool,
) -> Result<Option<Vec<Ident>>, OperationError> {
    let table = shape.table();
    let Some(layout) = store.target().range_partitions(table).await? else {
        return Ok(None);
    };
    let Some(bound) = shape.filter().below(&layout.column) else {
        return Ok(None);
    };
    if !allowed {
        if let Some(reason) = store.target().partition_drop_blocker(table).await? {
            tracing::warn!(
                table = %table,
                "the partitions of `{table}` are not dropped, their rows are deleted one by one: {reason}"
            );
            return Ok(None);
        }
        remembered(key, |d| d.allowed = true);
    }
    Ok(Some(store.target().partitions_below(&layout, bound).await?))
}

/// In the sub-batch's transaction: bound lock waits, lock the partition
/// against writes, count its rows and those in scope, and unless they
/// differ detach and drop it — or, where the shape keeps partitions, read
/// its bound, detach it, rename it beside the undo table and record it —
/// and commit with the batch's record. Returns the rows taken out.
async fn drop_partition(
    session: &mut SubBatchSession,
    shape: &Shape,
    request: &SubBatchRequest,
    partition: &Ident,
) -> Result<i64, NotDropped> {
    let failed = |e: StoreError| NotDropped::Failed(e.into());
    let dialect = session.store().target().dialect();
    let Some(statements) = dialect.partition_drop(shape.table(), partition) else {
        return Err(NotDropped::OutsideScope(0));
    };
    let counts = partition_counts(dialect, shape, partition);
    let kept = match shape.partitions_kept_in() {
        Some(undo) => Some(
            KeptPartitions::of(shape.table(), undo)
                .map_err(|e| NotDropped::Failed(OperationError::from(e)))?,
        ),
        None => None,
    };
    let mut connection = session.connection(request.timeout).await.map_err(failed)?;
    // Opened outside the timer, as `run_sub_batch` opens its transactions.
    let done = match connection
        .begin_sub_batch(&request.lease, request.from.as_ref(), request.timeout)
        .await
    {
        Err(e) => Err(failed(e)),
        Ok(mut tx) => {
            let work = async {
                tx.execute(&statements.lock_timeout).await.map_err(failed)?;
                tx.execute(&statements.hold).await.map_err(failed)?;
                let all = all_in_scope(tx.fetch_cursor(&counts, 2).await.map_err(failed)?)?;
                let keep = match &kept {
                    Some(kept) => {
                        let described = KeptPartitions::describe(partition);
                        let described = tx.fetch_cursor(&described, 2).await.map_err(failed)?;
                        Some(keep_statements(kept, partition, described, all)?)
                    }
                    None => None,
                };
                tx.execute(&statements.detach).await.map_err(failed)?;
                for statement in keep
                    .as_ref()
                    .map_or(std::slice::from_ref(&statements.drop), |k| k)
                {
                    tx.execute(statement).await.map_err(failed)?;
                }
                tx.commit(None, all).await.map_err(failed)?;
                Ok(all)
            };
            super::run::within(request.timeout, work)
                .await
                .unwrap_or_else(|e| Err(NotDropped::Failed(e)))
        }
    };
    session.put_back(connection, done.is_ok());
    done
}

/// The statements that rename `partition` beside the undo table and record
/// it, from its object id and bound as [`KeptPartitions::describe`] read
/// them before its detach.
fn keep_statements(
    kept: &KeptPartitions,
    partition: &Ident,
    described: Option<Cursor>,
    rows: i64,
) -> Result<[Statement; 2], NotDropped> {
    let refused = |why: String| NotDropped::Failed(OperationError::Failed(why));
    let Some([CursorValue::Int(oid), CursorValue::Text(bound)]) =
        described.as_ref().map(|c| c.0.as_slice())
    else {
        return Err(refused(format!(
            "partition `{partition}` has no bound the catalogue names"
        )));
    };
    // Kept only when it can be attached back as it was.
    if RangeBound::parse(bound).is_none() {
        return Err(refused(format!(
            "partition `{partition}` has a bound a revert could not attach it back with: {bound}"
        )));
    }
    let name = kept
        .kept_name(partition, *oid)
        .map_err(|e| refused(e.to_string()))?;
    Ok(kept.keep(partition, &name, bound, rows))
}

/// `SELECT COUNT(*), COUNT(CASE WHEN 1 = 1 AND <scope> THEN 1 END) FROM
/// <partition>`: its rows, and those in scope, in one read.
fn partition_counts(dialect: &dyn Dialect, shape: &Shape, partition: &Ident) -> Statement {
    let counts = shape
        .filter()
        .and_to(Statement::new("SELECT COUNT(*), COUNT(CASE WHEN 1 = 1"))
        .push(" THEN 1 END) FROM ");
    dialect.partition_rows(counts, shape.table(), partition)
}

/// The rows [`partition_counts`] counted, when every one is in scope.
fn all_in_scope(counted: Option<Cursor>) -> Result<i64, NotDropped> {
    match counted.as_ref().map(|c| c.0.as_slice()) {
        Some([CursorValue::Int(all), CursorValue::Int(in_scope)]) if all == in_scope => Ok(*all),
        Some([CursorValue::Int(all), CursorValue::Int(in_scope)]) => {
            Err(NotDropped::OutsideScope(all - in_scope))
        }
        _ => Err(NotDropped::OutsideScope(0)),
    }
}

/// `work` on the memory of the drops under `key`.
fn remembered<T>(key: &str, work: impl FnOnce(&mut Drops) -> T) -> T {
    let mut drops = DROPS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    work(drops.entry(key.to_owned()).or_default())
}

/// A lock not granted in time, or a deadlock the database broke: the drop
/// waits and is tried again.
fn is_waiting(error: &OperationError) -> bool {
    matches!(error, OperationError::Store(e) if e.is_transient()) || error.is_timeout()
}

fn is_lease_lost(error: &OperationError) -> bool {
    matches!(
        error,
        OperationError::Store(StoreError::BatchLeaseLost { .. } | StoreError::ProgressMoved { .. })
    )
}

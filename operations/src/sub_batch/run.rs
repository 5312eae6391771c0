//! Running one sub-batch: where its rows lie, the statement or transaction
//! it commits with its record, bounded in time and traced as the database's
//! statements.

use super::*;

/// Runs one sub-batch of `operation`: finds where the sub-batch ends, runs
/// the operation's change and commits it with the batch's progress. On any
/// error nothing is kept.
///
/// A range sub-batch ends at the row `size` rows past the batch's progress
/// (or at the batch's end), read just before the change; a row inserted
/// meanwhile inside that range is changed with the others, and the progress
/// recorded is the range's end either way. An SQLite loop sub-batch opens
/// its transaction and picks its rows by rowid before the operation runs
/// (`SubBatch::pick_by_rowid`). Otherwise, when the operation gives its
/// sub-batch as one statement ([`crate::Operation::sub_batch_statement`]),
/// the change and its record go to the store as one statement on
/// `session` ([`SubBatchSession::run_loop_sub_batch_statement`] for a loop,
/// [`SubBatchSession::run_sub_batch_statement`] for a range); otherwise a
/// transaction is opened and [`crate::Operation::run`] runs in it.
pub async fn run_sub_batch(
    session: &mut SubBatchSession,
    operation: &dyn PreparedOperation,
    request: &SubBatchRequest,
) -> Result<SubBatchOutcome, OperationError> {
    if let Some(dropped) = partitions::drop_a_partition(session, operation.shape(), request).await?
    {
        return Ok(dropped);
    }
    let store = session.store().clone();
    let store = &store;
    let system = store.target().dialect().name();
    let dialect = store.target().dialect();
    // PostgreSQL bounds a one-statement sub-batch itself
    // (`statement_timeout`); SQLite's statements have no such setting.
    let timed_here = !dialect.bounds_statements_in_session();
    let table = operation.shape().table().name();
    let rows = SubBatchRows::new(
        operation.shape(),
        bounds(session, operation.shape(), request).await?,
        dialect.loop_pick(),
    );
    // An SQLite loop picks its rows by rowid in its transaction first
    // (`SubBatch::pick_by_rowid`), so it is never one statement.
    let picks_first = dialect.picks_loop_rows_first() && matches!(rows.bounds, Bounds::Loop { .. });
    let reached = match &rows.bounds {
        Bounds::Range { end, .. } => Some(end.clone()),
        Bounds::Loop { seek, .. } => seek.as_ref().map(|seek| seek.to.clone()),
    };
    let statement = match picks_first {
        true => None,
        false => operation.sub_batch_statement(&rows)?,
    };
    let changed = match statement {
        Some(statement) => {
            // One statement: the change and its record (its text is the change's).
            let span = statement_span(system, table, statement.text().as_str());
            let one = async {
                match &rows.bounds {
                    // A loop's count is known before it runs, but for the last one.
                    Bounds::Loop { limit, seek: None } => {
                        session
                            .run_loop_sub_batch_statement(
                                &request.lease,
                                &statement,
                                request.from.as_ref(),
                                *limit,
                                request.timeout,
                            )
                            .await
                    }
                    // A seeking loop's records where it stopped, as a range.
                    Bounds::Range { .. } | Bounds::Loop { seek: Some(_), .. } => {
                        session
                            .run_sub_batch_statement(
                                &request.lease,
                                &statement,
                                request.from.as_ref(),
                                reached.as_ref(),
                                request.timeout,
                            )
                            .await
                    }
                }
            }
            .instrument(span.clone());
            let changed = if timed_here {
                within(request.timeout, one).await?
            } else {
                one.await
            };
            traced(&span, changed)?
        }
        None => {
            // On the session's connection (kept from one sub-batch to the
            // next, as for one statement). The transaction is opened outside
            // the timer: a future dropped while its `BEGIN` is in flight
            // leaves the connection inside a transaction nothing rolls back
            // (sqlx 0.9 counts the transaction only once `BEGIN` is
            // answered). One dropped after that (an error, the timer) is
            // rolled back and its connection is not kept but goes back to
            // the pool, as when the whole sub-batch is dropped (a stopping
            // worker).
            let mut connection = session.connection(request.timeout).await?;
            let tx = connection
                .begin_sub_batch(&request.lease, request.from.as_ref(), request.timeout)
                .await?;
            let done = within(request.timeout, async {
                let mut sub_batch = SubBatch {
                    tx,
                    rows: rows.clone(),
                    system,
                    dialect,
                };
                if picks_first {
                    sub_batch.pick_by_rowid().await?;
                }
                let changed = operation.run(&mut sub_batch).await?;
                let record = statement_span(system, "sluice_batches", SubBatchTx::RECORD);
                let committed = sub_batch
                    .tx
                    .commit(reached.as_ref(), changed as i64)
                    .instrument(record.clone())
                    .await;
                traced(&record, committed.map(|()| 1))?;
                Ok::<_, OperationError>(changed)
            })
            .await;
            session.put_back(connection, matches!(done, Ok(Ok(_))));
            done??
        }
    };
    let last = match &rows.bounds {
        Bounds::Range { end, .. } => Some(end) == request.end.as_ref(),
        Bounds::Loop { limit, seek } => seek.is_none() && (changed as i64) < *limit,
    };
    Ok(SubBatchOutcome {
        rows: changed,
        reached,
        last,
        dropped: None,
    })
}

/// The rows of the sub-batch `request` asks for: a loop takes up to `size`
/// rows in scope; a range runs from the batch's progress to the row `size`
/// rows on in the batching order, or to the batch's end if that is nearer.
async fn bounds(
    session: &mut SubBatchSession,
    shape: &Shape,
    request: &SubBatchRequest,
) -> Result<Bounds, OperationError> {
    let store = session.store().clone();
    let store = &store;
    match shape.strategy() {
        Strategy::Loop { .. } => {
            let seek = match (
                store.target().dialect().loop_pick(),
                shape.seek_column(),
                shape.strategy(),
            ) {
                (LoopPick::Limit, Some(column), Strategy::Loop { key }) => {
                    let probe =
                        seek_end(shape, column, &key[0], request.from.as_ref(), request.size);
                    let found = probed(session, shape, &probe, 3, request.timeout).await?;
                    found.map(|Cursor(mut values)| {
                        let greatest = Cursor(values.split_off(2));
                        let least = Cursor(values.split_off(1));
                        Seek {
                            from: request.from.clone(),
                            to: Cursor(values),
                            keys: Some((least, greatest)),
                        }
                    })
                }
                _ => None,
            };
            Ok(Bounds::Loop {
                limit: request.size,
                seek,
            })
        }
        Strategy::Keyset(columns) => {
            let end = request.end.clone().ok_or_else(|| {
                OperationError::Arguments("a range batch has no end cursor".into())
            })?;
            let probe = nth_after(
                shape,
                columns,
                request.from.as_ref(),
                Some(&end),
                request.size,
            );
            let found = probed(session, shape, &probe, columns.len(), request.timeout).await?;
            Ok(Bounds::Range {
                start: request.from.clone(),
                end: found.unwrap_or(end),
            })
        }
    }
}

/// The cursor of `width` columns `probe` reads on `session`'s connection,
/// traced as a statement.
async fn probed(
    session: &mut SubBatchSession,
    shape: &Shape,
    probe: &Statement,
    width: usize,
    timeout: Duration,
) -> Result<Option<Cursor>, OperationError> {
    let span = statement_span(
        session.store().target().dialect().name(),
        shape.table().name(),
        probe.text().as_str(),
    );
    let found = session
        .fetch_cursor(probe, width, timeout)
        .instrument(span.clone())
        .await;
    Ok(traced(&span, found.map(|f| (f, u64::from(true))))?.0)
}

/// `work` bounded by `timeout`: [`OperationError::TimedOut`] when it runs over.
pub(super) async fn within<T>(
    timeout: Duration,
    work: impl Future<Output = T>,
) -> Result<T, OperationError> {
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| OperationError::TimedOut(timeout))
}

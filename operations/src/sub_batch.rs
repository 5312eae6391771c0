//! One sub-batch: the slice of a batch an operation's code sees, and the
//! runner that opens its transaction, finds its bounds, runs the operation
//! and commits the change with the batch's progress.
//!
//! Guarantee: a sub-batch's data change and the record that it is done are
//! one transaction in the store's database ([`sluice_store::SubBatchTx`]).
//! If the batch was re-claimed by another node meanwhile, or the operation's
//! code fails, or the time limit passes, nothing of it is kept.

use std::time::Duration;

use sluice_store::{
    BatchLease, Cursor, Dialect, Ident, SqlValue, Statement, SubBatchSession, SubBatchTx,
};
use tracing::{Instrument, Span};

use crate::batching::{
    LoopPick, Seek, loop_rows, nth_after, picked_rows, range_rows, rowid_pick, seek_end,
};
use crate::error::OperationError;
use crate::operation::PreparedOperation;
use crate::shape::{Shape, Strategy};

/// The rows of one sub-batch, and helpers that change exactly those rows,
/// inside the sub-batch's transaction.
pub struct SubBatch<'a> {
    tx: SubBatchTx<'a>,
    rows: SubBatchRows<'a>,
    system: &'static str,
    dialect: &'static dyn Dialect,
}

/// Which rows one sub-batch covers, and the statements that change exactly
/// those rows (for [`crate::Operation::sub_batch_statement`]).
#[derive(Debug, Clone)]
pub struct SubBatchRows<'a> {
    shape: &'a Shape,
    bounds: Bounds,
    pick: LoopPick,
    /// A loop's rows picked by rowid inside the sub-batch's transaction
    /// (SQLite, [`SubBatch::pick_by_rowid`]): its statements then name
    /// exactly those rows.
    picked: Option<PickedRows>,
}

/// The rows an SQLite loop sub-batch picked in its transaction: the name
/// that reaches their rowids, and the rowids as a JSON array.
#[derive(Debug, Clone)]
struct PickedRows {
    rowid: &'static str,
    rowids: String,
}

/// Which rows a sub-batch covers.
#[derive(Debug, Clone, PartialEq)]
pub enum Bounds {
    /// The rows in scope in `(start, end]` of the batching order (`start`
    /// `None`: from the beginning).
    Range {
        /// Exclusive lower bound.
        start: Option<Cursor>,
        /// Inclusive upper bound.
        end: Cursor,
    },
    /// Up to `limit` rows in scope, whichever the database finds first.
    Loop {
        /// The most rows this sub-batch may touch.
        limit: i64,
        /// For a seeking loop ([`Shape::seek_by`]) with at least `limit`
        /// rows left past where it stopped: between which values of the
        /// seek column they lie. `None`: the whole scope.
        seek: Option<Seek>,
    },
}

/// What the runner needs to run one sub-batch.
#[derive(Debug, Clone)]
pub struct SubBatchRequest {
    /// The batch's claim; the commit is fenced by it.
    pub lease: BatchLease,
    /// Where the batch's progress is (its start, or how far earlier
    /// sub-batches got); for a loop, where a seeking one last stopped.
    pub from: Option<Cursor>,
    /// The batch's inclusive end (`None` for a loop batch).
    pub end: Option<Cursor>,
    /// Rows per sub-batch.
    pub size: i64,
    /// The longest the sub-batch may take, statements and commit included.
    pub timeout: Duration,
}

/// What one committed sub-batch did.
#[derive(Debug, Clone, PartialEq)]
pub struct SubBatchOutcome {
    /// Rows the operation changed.
    pub rows: u64,
    /// The cursor the batch's progress moved to (`None` for a loop, but a
    /// seeking loop's bounded sub-batch: the value it stopped at).
    pub reached: Option<Cursor>,
    /// Range: the batch's end was reached. Loop: fewer rows than the limit
    /// matched a sub-batch not bounded by a seek, so the scope is exhausted.
    pub last: bool,
}

impl<'a> SubBatchRows<'a> {
    /// The rows `bounds` covers in `shape`, picked (for a loop) as `pick` says.
    pub(crate) fn new(shape: &'a Shape, bounds: Bounds, pick: LoopPick) -> Self {
        SubBatchRows {
            shape,
            bounds,
            pick,
            picked: None,
        }
    }

    /// The rows this sub-batch covers.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// The operation's table.
    pub fn table(&self) -> &Ident {
        self.shape.table()
    }

    /// Appends ` WHERE …` selecting exactly this sub-batch's rows (its
    /// bounds and the operation's scope) to `head`, e.g.
    /// `Statement::new("UPDATE ").ident(table).push(" SET x = 1")`.
    pub fn rows_where(&self, head: Statement) -> Statement {
        if let Some(picked) = &self.picked {
            return picked_rows(picked.rowid, &picked.rowids, head);
        }
        match (&self.bounds, self.shape.strategy()) {
            (Bounds::Range { start, end }, Strategy::Keyset(columns)) => {
                range_rows(self.shape, columns, start.as_ref(), end, head)
            }
            (Bounds::Loop { limit, seek }, Strategy::Loop { key }) => {
                loop_rows(self.shape, key, *limit, self.pick, seek.as_ref(), head)
            }
            // The runner builds bounds from the strategy; they always agree.
            _ => unreachable!("sub-batch bounds do not match the strategy"),
        }
    }

    /// `DELETE` of this sub-batch's rows.
    pub fn delete_statement(&self) -> Statement {
        self.rows_where(Statement::new("DELETE FROM ").ident(self.shape.table()))
    }

    /// `UPDATE` setting columns of this sub-batch's rows to bound values.
    ///
    /// Errors: [`OperationError::Unsafe`] for a column that is not a plain
    /// identifier, [`OperationError::Arguments`] for no column at all or one
    /// the shape walks by ([`Shape::check_update`]).
    pub fn update_statement(
        &self,
        assignments: &[(&str, SqlValue)],
    ) -> Result<Statement, OperationError> {
        if assignments.is_empty() {
            return Err(OperationError::Arguments(
                "an update needs at least one column to set".into(),
            ));
        }
        let written: Vec<&str> = assignments.iter().map(|(c, _)| *c).collect();
        self.shape.check_update(&written)?;
        let mut statement = Statement::new("UPDATE ")
            .ident(self.shape.table())
            .push(" SET ");
        for (i, (column, value)) in assignments.iter().enumerate() {
            if i > 0 {
                statement = statement.push(", ");
            }
            statement = statement
                .ident(&Ident::parse(column)?)
                .push(" = ")
                .value(value.clone());
        }
        Ok(self.rows_where(statement))
    }

    /// `UPDATE table SET <set> WHERE <this sub-batch's rows>` with an
    /// operator's own SET expression (`update-in-batches --set`).
    ///
    /// Errors: [`OperationError::Expression`] when `set` is not one SET
    /// list, [`OperationError::Arguments`] when it writes a column the shape
    /// walks by ([`Shape::check_update`]).
    pub fn update_expression_statement(&self, set: &str) -> Result<Statement, OperationError> {
        let set = self.shape.checked_set(set)?;
        let statement = Statement::new("UPDATE ")
            .ident(self.shape.table())
            .push(" SET ")
            .operator_assignments(&set);
        Ok(self.rows_where(statement))
    }
}

impl<'a> SubBatch<'a> {
    /// The rows this sub-batch covers.
    pub fn bounds(&self) -> &Bounds {
        self.rows.bounds()
    }

    /// The operation's table.
    pub fn table(&self) -> &Ident {
        self.rows.table()
    }

    /// The batch's claim: its ordinal and attempt number.
    pub fn lease(&self) -> &BatchLease {
        self.tx.lease()
    }

    /// The SQL dialect the sub-batch's statements are written in.
    pub fn dialect(&self) -> &'static dyn Dialect {
        self.dialect
    }

    /// The rows, and the statements that change exactly them.
    pub fn rows(&self) -> &SubBatchRows<'a> {
        &self.rows
    }

    /// Appends ` WHERE …` selecting exactly this sub-batch's rows to `head`
    /// ([`SubBatchRows::rows_where`]).
    pub fn rows_where(&self, head: Statement) -> Statement {
        self.rows.rows_where(head)
    }

    /// On SQLite, for a loop: picks the rows of this sub-batch by rowid
    /// inside its transaction ([`rowid_pick`]), so that its statements name
    /// those rows alone ([`picked_rows`]). A table without a rowid keeps
    /// the loop's own form.
    async fn pick_by_rowid(&mut self) -> Result<(), OperationError> {
        let Bounds::Loop { limit, seek: None } = self.rows.bounds else {
            return Ok(());
        };
        let Some(rowid) = self.tx.rowid_name(self.rows.table()).await? else {
            return Ok(());
        };
        let pick = rowid_pick(self.rows.shape, rowid, limit);
        let span = statement_span(self.system, self.rows.table().name(), pick.text().as_str());
        let rowids = self.tx.fetch_text(&pick).instrument(span.clone()).await;
        let rowids = traced(&span, rowids.map(|r| (r, 1)))?.0;
        self.rows.picked = Some(PickedRows {
            rowid,
            rowids: rowids.unwrap_or_else(|| "[]".to_owned()),
        });
        Ok(())
    }

    /// Deletes this sub-batch's rows; returns how many.
    pub async fn delete(&mut self) -> Result<u64, OperationError> {
        let statement = self.rows.delete_statement();
        self.execute(&statement).await
    }

    /// Sets columns of this sub-batch's rows to bound values; returns how
    /// many rows changed.
    ///
    /// Errors: [`OperationError::Unsafe`] for a column that is not a plain
    /// identifier (nothing runs).
    pub async fn update(
        &mut self,
        assignments: &[(&str, SqlValue)],
    ) -> Result<u64, OperationError> {
        let statement = self.rows.update_statement(assignments)?;
        self.execute(&statement).await
    }

    /// Runs `UPDATE table SET <set> WHERE <this sub-batch's rows>` with an
    /// operator's own SET expression (`update-in-batches --set`).
    pub async fn update_expression(&mut self, set: &str) -> Result<u64, OperationError> {
        let statement = self.rows.update_expression_statement(set)?;
        self.execute(&statement).await
    }

    /// Runs any statement in the sub-batch's transaction; returns rows affected.
    pub async fn execute(&mut self, statement: &Statement) -> Result<u64, OperationError> {
        let span = statement_span(
            self.system,
            self.rows.table().name(),
            statement.text().as_str(),
        );
        traced(
            &span,
            self.tx.execute(statement).instrument(span.clone()).await,
        )
    }

    /// Reads the first column of the first row `statement` returns, as
    /// text (`None` for no row or `NULL`), in the sub-batch's transaction:
    /// what its changes so far and the locks they took let it see.
    pub async fn fetch_text(
        &mut self,
        statement: &Statement,
    ) -> Result<Option<String>, OperationError> {
        let span = statement_span(
            self.system,
            self.rows.table().name(),
            statement.text().as_str(),
        );
        let read = self.tx.fetch_text(statement).instrument(span.clone()).await;
        Ok(traced(&span, read.map(|text| (text, 1)))?.0)
    }
}

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
    let store = session.store().clone();
    let store = &store;
    let system = store.backend().dialect().name();
    let dialect = store.backend().dialect();
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
                store.backend().dialect().loop_pick(),
                shape.seek_column(),
                shape.strategy(),
            ) {
                (LoopPick::Limit, Some(column), Strategy::Loop { key }) => {
                    let probe = seek_end(shape, column, key, request.from.as_ref(), request.size);
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
        session.store().backend().dialect().name(),
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
async fn within<T>(timeout: Duration, work: impl Future<Output = T>) -> Result<T, OperationError> {
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| OperationError::TimedOut(timeout))
}

/// A client span for one SQL statement, after OpenTelemetry's database
/// conventions: named `<OPERATION> <table>`, with `db.system`,
/// `db.operation.name`, `db.collection.name` and `db.query.text` (the text
/// with its `$n` placeholders: values are never in it), and the rows it
/// affected once it ran.
fn statement_span(system: &'static str, table: &str, text: &str) -> Span {
    let operation = text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    tracing::info_span!(
        "db.statement",
        otel.name = %format!("{operation} {table}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        db.system = system,
        db.operation.name = %operation,
        db.collection.name = table,
        db.query.text = text,
        sluice.rows_affected = tracing::field::Empty,
    )
}

/// Records on a statement's span how it went, and passes the outcome on.
fn traced<T: Rows, E: std::fmt::Display>(
    span: &Span,
    outcome: Result<T, E>,
) -> Result<T, OperationError>
where
    OperationError: From<E>,
{
    match &outcome {
        Ok(done) => {
            span.record("sluice.rows_affected", done.rows());
        }
        Err(error) => {
            span.record("otel.status_code", "error");
            span.record("otel.status_description", error.to_string());
        }
    }
    Ok(outcome?)
}

/// What a statement's outcome says about rows.
trait Rows {
    fn rows(&self) -> u64;
}

impl Rows for u64 {
    fn rows(&self) -> u64 {
        *self
    }
}

impl<T> Rows for (T, u64) {
    fn rows(&self) -> u64 {
        self.1
    }
}

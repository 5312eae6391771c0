//! One sub-batch: the slice of a batch an operation's code sees, and the
//! runner that opens its transaction, finds its bounds, runs the operation
//! and commits the change with the batch's progress.
//!
//! Guarantee: a sub-batch's data change and the record that it is done are
//! one transaction in the store's database ([`sluice_store::SubBatchTx`]).
//! If the batch was re-claimed by another node meanwhile, or the operation's
//! code fails, or the time limit passes, nothing of it is kept.

use std::time::Duration;

use sluice_store::{BatchLease, Cursor, Ident, SqlValue, Statement, Store, SubBatchTx};

use crate::batching::{loop_rows, nth_after, range_rows};
use crate::error::OperationError;
use crate::operation::PreparedOperation;
use crate::shape::{Shape, Strategy, check_expression};

/// The rows of one sub-batch, and helpers that change exactly those rows.
pub struct SubBatch<'a> {
    tx: &'a mut SubBatchTx,
    shape: &'a Shape,
    bounds: Bounds,
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
    },
}

/// What the runner needs to run one sub-batch.
#[derive(Debug, Clone)]
pub struct SubBatchRequest {
    /// The batch's claim; the commit is fenced by it.
    pub lease: BatchLease,
    /// Where the batch's progress is (its start, or how far earlier
    /// sub-batches got). Ignored for a loop.
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
    /// The cursor the batch's progress moved to (`None` for a loop).
    pub reached: Option<Cursor>,
    /// Range: the batch's end was reached. Loop: fewer rows than the limit
    /// matched, so the scope is exhausted.
    pub last: bool,
}

impl<'a> SubBatch<'a> {
    /// The rows this sub-batch covers.
    pub fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    /// The operation's table.
    pub fn table(&self) -> &Ident {
        self.shape.table()
    }

    /// The batch's claim: its ordinal and attempt number.
    pub fn lease(&self) -> &BatchLease {
        self.tx.lease()
    }

    /// Appends ` WHERE …` selecting exactly this sub-batch's rows (its
    /// bounds and the operation's scope) to `head`, e.g.
    /// `Statement::new("UPDATE ").ident(table).push(" SET x = 1")`.
    pub fn rows_where(&self, head: Statement) -> Statement {
        match (&self.bounds, self.shape.strategy()) {
            (Bounds::Range { start, end }, Strategy::Keyset(columns)) => {
                range_rows(self.shape, columns, start.as_ref(), end, head)
            }
            (Bounds::Loop { limit }, Strategy::Loop { key }) => {
                loop_rows(self.shape, key, *limit, head)
            }
            // The runner builds bounds from the strategy; they always agree.
            _ => unreachable!("sub-batch bounds do not match the strategy"),
        }
    }

    /// Deletes this sub-batch's rows; returns how many.
    pub async fn delete(&mut self) -> Result<u64, OperationError> {
        let statement = self.rows_where(Statement::new("DELETE FROM ").ident(self.shape.table()));
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
        if assignments.is_empty() {
            return Err(OperationError::Arguments(
                "an update needs at least one column to set".into(),
            ));
        }
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
        let statement = self.rows_where(statement);
        self.execute(&statement).await
    }

    /// Runs `UPDATE table SET <set> WHERE <this sub-batch's rows>` with an
    /// operator's own SET expression (`update-in-batches --set`).
    pub async fn update_expression(&mut self, set: &str) -> Result<u64, OperationError> {
        check_expression("SET", set).map_err(OperationError::Arguments)?;
        let statement = Statement::new("UPDATE ")
            .ident(self.shape.table())
            .push(" SET ")
            .operator_assignments(set);
        let statement = self.rows_where(statement);
        self.execute(&statement).await
    }

    /// Runs any statement in the sub-batch's transaction; returns rows affected.
    pub async fn execute(&mut self, statement: &Statement) -> Result<u64, OperationError> {
        Ok(self.tx.execute(statement).await?)
    }
}

/// Runs one sub-batch of `operation`: opens the transaction, finds where the
/// sub-batch ends (inside the transaction, so the rows found are the rows
/// changed), runs the operation's code, and commits the change with the
/// batch's progress. On any error nothing is kept.
pub async fn run_sub_batch(
    store: &Store,
    operation: &dyn PreparedOperation,
    request: &SubBatchRequest,
) -> Result<SubBatchOutcome, OperationError> {
    match tokio::time::timeout(request.timeout, run_within(store, operation, request)).await {
        Ok(outcome) => outcome,
        Err(_) => Err(OperationError::TimedOut(request.timeout)),
    }
}

async fn run_within(
    store: &Store,
    operation: &dyn PreparedOperation,
    request: &SubBatchRequest,
) -> Result<SubBatchOutcome, OperationError> {
    let shape = operation.shape();
    let mut tx = store
        .begin_sub_batch_within(&request.lease, Some(request.timeout))
        .await?;
    let bounds = match shape.strategy() {
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
            let sub_end = tx.fetch_cursor(&probe, columns.len()).await?.unwrap_or(end);
            Bounds::Range {
                start: request.from.clone(),
                end: sub_end,
            }
        }
        Strategy::Loop { .. } => Bounds::Loop {
            limit: request.size,
        },
    };
    let mut sub_batch = SubBatch {
        tx: &mut tx,
        shape,
        bounds,
    };
    let rows = operation.run(&mut sub_batch).await?;
    let (reached, last) = match sub_batch.bounds {
        Bounds::Range { end, .. } => {
            let last = Some(&end) == request.end.as_ref();
            (Some(end), last)
        }
        Bounds::Loop { limit } => (None, (rows as i64) < limit),
    };
    tx.commit(reached.as_ref(), rows as i64).await?;
    Ok(SubBatchOutcome {
        rows,
        reached,
        last,
    })
}

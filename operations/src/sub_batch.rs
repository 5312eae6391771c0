//! One sub-batch: the slice of a batch an operation's code sees, and the
//! runner that opens its transaction, finds its bounds, runs the operation
//! and commits the change with the batch's progress.
//!
//! Guarantee: a sub-batch's data change and the record that it is done are
//! one transaction in the store's database ([`sluice_store::SubBatchTx`]).
//! If the batch was re-claimed by another node meanwhile, or the operation's
//! code fails, or the time limit passes, nothing of it is kept.

use std::time::Duration;

use sluice_store::{BatchLease, StoreError, SubBatchSession, SubBatchTx};
use sluice_target::{Cursor, CursorValue, Dialect, Ident, SqlValue, Statement};
use tracing::{Instrument, Span};

use crate::batching::{
    LoopPick, Seek, loop_rows, nth_after, picked_rows, range_rows, rowid_pick, seek_end,
};
use crate::error::OperationError;
use crate::operation::PreparedOperation;
use crate::shape::{Shape, Strategy};

mod partitions;
mod run;

pub use run::run_sub_batch;

/// The rows of one sub-batch, and helpers that change exactly those rows,
/// inside the sub-batch's transaction.
///
/// ```no_run
/// use sluice_operations::{OperationError, SubBatch};
/// use sluice_target::{SqlValue, Statement};
///
/// // An operation's `run`: mark the sub-batch's rows, then count them.
/// async fn run(batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
///     let archived = batch.update(&[("archived", SqlValue::Bool(true))]).await?;
///     let marked = batch.rows_where(Statement::new("SELECT COUNT(*) FROM todos"));
///     batch.fetch_text(&marked).await?;
///     Ok(archived)
/// }
/// ```
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
    /// The partition this sub-batch dropped whole, its rows counted in
    /// `rows`, in place of deleting rows one by one
    /// ([`Shape::drop_partitions`]).
    pub dropped: Option<String>,
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

    /// The operation's shape (its table, batching and scope).
    pub fn shape(&self) -> &Shape {
        self.shape
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

/// What a statement's outcome says about rows.
trait Rows {
    fn rows(&self) -> u64;
}

impl<T> Rows for (T, u64) {
    fn rows(&self) -> u64 {
        self.1
    }
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

impl Rows for u64 {
    fn rows(&self) -> u64 {
        *self
    }
}

//! Exactly-once sub-batches: a transaction in the store's database in which an
//! operation's data change and the record that the sub-batch is done commit
//! together.
//!
//! [`SubBatchTx::commit`] advances the batch's progress cursor and row count
//! conditioned on the batch lease (`WHERE lease_epoch = $n AND status =
//! 'running'`); if the batch was re-claimed by another node meanwhile, the
//! whole transaction — data change included — rolls back and the caller gets
//! [`StoreError::BatchLeaseLost`]. So when the target table lives in the same
//! database as the store, every sub-batch's change is applied exactly once,
//! whatever crashes or takeovers happen around it.

use sqlx::{Postgres, Sqlite};

use crate::cursor::Cursor;
use crate::error::StoreError;
use crate::queries;
use crate::record::BatchLease;
use crate::sql::{Statement, bind_values};
use crate::store::{Backend, Store};
use crate::target_table::row_cursor;

/// An open sub-batch transaction. Dropping it without [`SubBatchTx::commit`] rolls back.
#[derive(Debug)]
pub struct SubBatchTx {
    tx: Tx,
    lease: BatchLease,
}

#[derive(Debug)]
enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

impl Store {
    /// Opens a sub-batch transaction for a batch this node holds.
    pub async fn begin_sub_batch(&self, lease: &BatchLease) -> Result<SubBatchTx, StoreError> {
        self.begin_sub_batch_within(lease, None).await
    }

    /// Like [`Store::begin_sub_batch`], bounding every statement of the
    /// transaction to `timeout` on PostgreSQL (`SET LOCAL statement_timeout`,
    /// sent with the `BEGIN` in one round trip; a statement over it fails
    /// with SQLSTATE 57014). SQLite has no such setting: the runtime bounds
    /// the whole sub-batch with a timer instead.
    pub async fn begin_sub_batch_within(
        &self,
        lease: &BatchLease,
        timeout: Option<std::time::Duration>,
    ) -> Result<SubBatchTx, StoreError> {
        let tx = match (self.backend(), timeout) {
            (Backend::Sqlite(pool), _) => Tx::Sqlite(queries::sqlite::begin_write(pool).await?),
            (Backend::Postgres(pool), None) => {
                Tx::Postgres(queries::postgres::begin_write(pool).await?)
            }
            (Backend::Postgres(pool), Some(timeout)) => {
                // A number this code formats, not input: safe to inline.
                let ms = timeout.as_millis().clamp(1, i32::MAX as u128);
                let begin = format!("BEGIN; SET LOCAL statement_timeout = {ms}");
                Tx::Postgres(pool.begin_with(sqlx::AssertSqlSafe(begin)).await?)
            }
        };
        Ok(SubBatchTx {
            tx,
            lease: lease.clone(),
        })
    }
}

/// Runs the same sqlx code on whichever transaction the sub-batch has.
macro_rules! on_tx {
    ($sub_batch:expr, |$tx:ident| $body:expr) => {
        match &mut $sub_batch.tx {
            Tx::Sqlite($tx) => $body,
            Tx::Postgres($tx) => $body,
        }
    };
}

impl SubBatchTx {
    /// The batch this transaction works for.
    pub fn lease(&self) -> &BatchLease {
        &self.lease
    }

    /// Runs a data-changing statement inside the transaction; returns the rows affected.
    pub async fn execute(&mut self, statement: &Statement) -> Result<u64, StoreError> {
        Ok(on_tx!(self, |tx| bind_values!(
            sqlx::query(statement.text().to_sqlx()),
            statement.params()
        )
        .execute(&mut **tx)
        .await?
        .rows_affected()))
    }

    /// Like [`Store::fetch_cursor`], inside the transaction (so the rows it
    /// reads are the rows the transaction then changes).
    pub async fn fetch_cursor(
        &mut self,
        statement: &Statement,
        width: usize,
    ) -> Result<Option<Cursor>, StoreError> {
        on_tx!(self, |tx| bind_values!(
            sqlx::query(statement.text().to_sqlx()),
            statement.params()
        )
        .fetch_optional(&mut **tx)
        .await?
        .map_or(Ok(None), |r| row_cursor(&r, width)))
    }

    /// Records the sub-batch as done (the batch's progress moves to `progress`,
    /// its row count grows by `rows`) and commits it with the data change.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was re-claimed
    /// since; then nothing of the transaction is kept.
    pub async fn commit(self, progress: Option<&Cursor>, rows: i64) -> Result<(), StoreError> {
        const RECORD: &str = "UPDATE sluice_batches SET progress_cursor = COALESCE($3, progress_cursor), \
             rows_affected = rows_affected + $4 WHERE id = $1 AND lease_epoch = $2 AND status = 'running'";
        let progress = progress.map(Cursor::to_json);
        let lease = self.lease;
        // Record first, commit only if the record was accepted: the data change
        // and its record are kept together or not at all.
        macro_rules! record_then_commit {
            ($tx:expr) => {{
                let mut tx = $tx;
                let n = sqlx::query(RECORD)
                    .bind(lease.batch_id)
                    .bind(lease.epoch)
                    .bind(progress)
                    .bind(rows)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n == 1 {
                    tx.commit().await?;
                }
                n
            }};
        }
        let recorded = match self.tx {
            Tx::Sqlite(tx) => record_then_commit!(tx),
            Tx::Postgres(tx) => record_then_commit!(tx),
        };
        if recorded != 1 {
            return Err(StoreError::BatchLeaseLost {
                batch_id: lease.batch_id,
                epoch: lease.epoch,
            });
        }
        Ok(())
    }
}

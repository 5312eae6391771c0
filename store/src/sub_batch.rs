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

use sqlx::{MySql, Postgres, Sqlite};

use crate::batch_queries::batch_lease_lost;
use crate::connection::{on_pool, statement_timeout_ms};
use crate::cursor::Cursor;
use crate::error::StoreError;
use crate::record::BatchLease;
use crate::sql::{Ident, Statement, bind_values};
use crate::store::Store;
use crate::target_table::row_cursor;

/// Records a sub-batch done in transaction `$tx` (moved in; the batch's
/// progress moves from `$from` to `$progress`, its row count grows by
/// `$rows`) and commits only if the record was accepted, so the data change
/// and its record are kept together or not at all. Evaluates to
/// `Result<(), StoreError>`: [`StoreError::BatchLeaseLost`] when the batch
/// was re-claimed since, [`StoreError::ProgressMoved`] when its progress is
/// no longer `$from` (the transaction is then dropped, rolled back).
macro_rules! record_then_commit {
    ($tx:expr, $lease:expr, $from:expr, $progress:expr, $rows:expr) => {{
        let mut tx = $tx;
        let lease: &BatchLease = $lease;
        let recorded = sqlx::query(SubBatchTx::RECORD)
            .bind(lease.batch_id)
            .bind(lease.epoch)
            .bind($progress.map(Cursor::to_json))
            .bind($rows)
            .bind($from.map(Cursor::to_json))
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if recorded == 1 {
            tx.commit().await?;
            Ok(())
        } else {
            let held: i64 = sqlx::query_scalar(HELD_BATCH)
                .bind(lease.batch_id)
                .bind(lease.epoch)
                .fetch_one(&mut *tx)
                .await?;
            // At once, not when the connection is next used: the refused
            // record may hold the batch row's lock (InnoDB locks the rows an
            // UPDATE reads), and whoever claims the batch next skips a
            // locked row. A connection that fails here is closed, which
            // rolls back as well.
            let _ = tx.rollback().await;
            Err(record_refused(lease, held == 1))
        }
    }};
}

/// `1` while batch `$1` is running under epoch `$2`, else `0`.
pub(crate) const HELD_BATCH: &str = "SELECT COUNT(*) FROM sluice_batches \
     WHERE id = $1 AND lease_epoch = $2 AND status = 'running'";

/// Why a sub-batch's record matched no batch row: the batch was claimed
/// again, or (still `held`) its progress moved on.
pub(crate) fn record_refused(lease: &BatchLease, held: bool) -> StoreError {
    match held {
        true => StoreError::ProgressMoved {
            batch_id: lease.batch_id,
        },
        false => batch_lease_lost(lease),
    }
}

/// An open sub-batch transaction, on a connection from the store's pool
/// (`'static`: [`Store::begin_sub_batch`]) or on one a session lent out
/// (borrowed for `'c`: [`crate::SessionConnection::begin_sub_batch`]). Dropping it
/// without [`SubBatchTx::commit`] rolls back.
#[derive(Debug)]
pub struct SubBatchTx<'c> {
    tx: Tx<'c>,
    lease: BatchLease,
    /// Where the batch's progress was when the sub-batch started: its
    /// record is accepted only while it is still there.
    from: Option<Cursor>,
}

/// The transaction of a sub-batch, on its store's backend.
#[derive(Debug)]
pub(crate) enum Tx<'c> {
    Sqlite(sqlx::Transaction<'c, Sqlite>),
    Postgres(sqlx::Transaction<'c, Postgres>),
    MySql(sqlx::Transaction<'c, MySql>),
}

impl Store {
    /// Opens a sub-batch transaction for a batch this node holds, whose
    /// progress is at `from` (its start, or where earlier sub-batches got).
    pub async fn begin_sub_batch(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
    ) -> Result<SubBatchTx<'static>, StoreError> {
        self.begin_sub_batch_within(lease, from, None).await
    }

    /// Like [`Store::begin_sub_batch`], bounding every statement of the
    /// transaction to `timeout` on PostgreSQL (`SET LOCAL statement_timeout`,
    /// sent with the `BEGIN` in one round trip; a statement over it fails
    /// with SQLSTATE 57014). SQLite has no such setting: the runtime bounds
    /// the whole sub-batch with a timer instead.
    pub async fn begin_sub_batch_within(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
        timeout: Option<std::time::Duration>,
    ) -> Result<SubBatchTx<'static>, StoreError> {
        let tx = self.backend().begin_sub_batch(timeout).await?;
        Ok(SubBatchTx::new(tx, lease, from))
    }
}

impl Store {
    /// `statement` and its record in one write transaction (bounded by
    /// `timeout` on PostgreSQL): the exact path every backend has.
    pub(crate) async fn sub_batch_in_transaction(
        &self,
        lease: &BatchLease,
        statement: &Statement,
        from: Option<&Cursor>,
        progress: Option<&Cursor>,
        timeout: std::time::Duration,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .begin_sub_batch_within(lease, from, Some(timeout))
            .await?;
        let rows = tx.execute(statement).await?;
        tx.commit(progress, i64::try_from(rows).unwrap_or(i64::MAX))
            .await?;
        Ok(rows)
    }

    /// True while the batch `lease` names has its progress at `from` (its
    /// start until a sub-batch commits).
    pub(crate) async fn batch_progress_is(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
    ) -> Result<bool, StoreError> {
        const AT: &str = "SELECT COUNT(*) FROM sluice_batches WHERE id = $1 \
             AND COALESCE(progress_cursor, start_cursor, '') = COALESCE($2, '')";
        let at: i64 = on_pool!(self, |pool| sqlx::query_scalar(AT)
            .bind(lease.batch_id)
            .bind(from.map(Cursor::to_json))
            .fetch_one(pool)
            .await?);
        Ok(at == 1)
    }

    /// True while `lease` still holds its batch.
    pub(crate) async fn holds_batch(&self, lease: &BatchLease) -> Result<bool, StoreError> {
        let held: i64 = on_pool!(self, |pool| sqlx::query_scalar(HELD_BATCH)
            .bind(lease.batch_id)
            .bind(lease.epoch)
            .fetch_one(pool)
            .await?);
        Ok(held == 1)
    }
}

/// A PostgreSQL transaction whose statements are bounded by `timeout`
/// (`SET LOCAL statement_timeout`, sent with the `BEGIN` in one round trip;
/// a statement over it fails with SQLSTATE 57014).
pub(crate) async fn begin_bounded(
    pool: &sqlx::PgPool,
    timeout: std::time::Duration,
) -> Result<sqlx::Transaction<'static, Postgres>, StoreError> {
    Ok(pool
        .begin_with(sqlx::AssertSqlSafe(bounded_begin(timeout)))
        .await?)
}

/// How a MySQL sub-batch transaction starts: in `REPEATABLE READ`, not the
/// session's `READ COMMITTED`. The change reads rows with locks either way
/// (the latest committed version, the scope tested on each), so the rows
/// changed are the same; but a `DELETE … WHERE scope LIMIT n` walks past the
/// index entries earlier sub-batches deleted and purge has not yet removed,
/// and under `READ COMMITTED` InnoDB's purge falls behind such a loop: on
/// MariaDB 10.11 each statement grew about 0.5 ms per sub-batch since the
/// last purge, against 0.06 ms here (`BENCHMARKS.md`, pt-archiver).
pub(crate) const MYSQL_BEGIN: &str =
    "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION";

/// A MySQL sub-batch transaction on `connection` ([`MYSQL_BEGIN`]).
pub(crate) async fn begin_mysql(
    connection: &mut sqlx::MySqlConnection,
) -> Result<Tx<'_>, StoreError> {
    use sqlx::Connection as _;
    Ok(Tx::MySql(connection.begin_with(MYSQL_BEGIN).await?))
}

/// `BEGIN; SET LOCAL statement_timeout = <timeout in ms>`: a number this
/// code formats, not input, so safe to inline.
pub(crate) fn bounded_begin(timeout: std::time::Duration) -> String {
    format!(
        "BEGIN; SET LOCAL statement_timeout = {}",
        statement_timeout_ms(timeout)
    )
}

/// Runs the same sqlx code on whichever transaction the sub-batch has.
macro_rules! on_tx {
    ($sub_batch:expr, |$tx:ident| $body:expr) => {
        match &mut $sub_batch.tx {
            Tx::Sqlite($tx) => $body,
            Tx::Postgres($tx) => $body,
            Tx::MySql($tx) => {
                use crate::positional as sqlx;
                $body
            }
        }
    };
}

impl<'c> SubBatchTx<'c> {
    /// A sub-batch transaction for `lease`, on `tx`, from progress `from`.
    pub(crate) fn new(tx: Tx<'c>, lease: &BatchLease, from: Option<&Cursor>) -> Self {
        SubBatchTx {
            tx,
            lease: lease.clone(),
            from: from.cloned(),
        }
    }

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

    /// The first column of the first row `statement` returns, as text
    /// (`None` for no row or `NULL`), read inside the transaction.
    pub async fn fetch_text(
        &mut self,
        statement: &Statement,
    ) -> Result<Option<String>, StoreError> {
        use sqlx::Row as _;
        on_tx!(self, |tx| {
            let row = bind_values!(sqlx::query(statement.text().to_sqlx()), statement.params())
                .fetch_optional(&mut **tx)
                .await?;
            Ok(match row {
                Some(row) => row.try_get::<Option<String>, _>(0)?,
                None => None,
            })
        })
    }

    /// The name that reaches each row of `table` by its SQLite rowid — the
    /// first of `rowid`, `_rowid_` and `oid` that no column of the table
    /// takes — or `None`: a `WITHOUT ROWID` table, a view, a table with
    /// columns of all three names, or a store that is not SQLite. Read
    /// inside the transaction, whose write lock keeps the schema as read
    /// until it ends, so a rowid picked in it names the same row to its
    /// last statement.
    pub async fn rowid_name(&mut self, table: &Ident) -> Result<Option<&'static str>, StoreError> {
        /// `$1` the table, `$2` its schema (`NULL`: as a statement finds
        /// it): how many tables of that name have a rowid, how many
        /// objects of that name have none, and which rowid names its
        /// columns take, lower-cased and space-separated.
        const ROWID_NAMES: &str = "SELECT              (SELECT COUNT(*) FROM pragma_table_list($1) WHERE ($2 IS NULL OR schema = $2)               AND type = 'table' AND wr = 0),              (SELECT COUNT(*) FROM pragma_table_list($1) WHERE ($2 IS NULL OR schema = $2)               AND (type <> 'table' OR wr <> 0)),              (SELECT group_concat(lower(name), ' ') FROM pragma_table_xinfo($1, $2)               WHERE lower(name) IN ('rowid', '_rowid_', 'oid'))";
        let Tx::Sqlite(tx) = &mut self.tx else {
            return Ok(None);
        };
        let (with_rowid, without, taken): (i64, i64, Option<String>) = sqlx::query_as(ROWID_NAMES)
            .bind(table.name())
            .bind(table.schema())
            .fetch_one(&mut **tx)
            .await?;
        if with_rowid == 0 || without > 0 {
            return Ok(None);
        }
        let taken = taken.unwrap_or_default();
        Ok(["rowid", "_rowid_", "oid"]
            .into_iter()
            .find(|name| !taken.split(' ').any(|t| t == *name)))
    }

    /// The statement [`SubBatchTx::commit`] records the sub-batch with
    /// before it commits (for tracing: its text has placeholders only).
    pub const RECORD: &'static str = "UPDATE sluice_batches SET progress_cursor = COALESCE($3, progress_cursor), \
         rows_affected = rows_affected + $4 WHERE id = $1 AND lease_epoch = $2 AND status = 'running' \
         AND COALESCE(progress_cursor, start_cursor, '') = COALESCE($5, '')";

    /// Records the sub-batch as done (the batch's progress moves to `progress`,
    /// its row count grows by `rows`) and commits it with the data change.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was re-claimed
    /// since, [`StoreError::ProgressMoved`] when its progress is no longer
    /// where this sub-batch started (a sub-batch from there committed
    /// already); then nothing of the transaction is kept.
    pub async fn commit(self, progress: Option<&Cursor>, rows: i64) -> Result<(), StoreError> {
        let from = self.from.as_ref();
        match self.tx {
            Tx::Sqlite(tx) => record_then_commit!(tx, &self.lease, from, progress, rows),
            Tx::Postgres(tx) => record_then_commit!(tx, &self.lease, from, progress, rows),
            Tx::MySql(tx) => {
                use crate::positional as sqlx;
                record_then_commit!(tx, &self.lease, from, progress, rows)
            }
        }
    }
}

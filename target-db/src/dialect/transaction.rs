//! The exactly-once boundary on the target side: a sub-batch's transaction
//! ([`TargetTx`]) commits its change only together with the record of it,
//! which the caller gives as a [`ProgressRecord`] and which runs in the same
//! transaction, on the same connection. And the connection a worker keeps
//! between sub-batches ([`TargetConnection`]), with the statements a
//! one-statement sub-batch runs on it.
//!
//! The per-database transaction and connection types of sqlx are held here,
//! so code outside the dialect modules never matches on the database.

use std::time::Duration;

use sqlx::Connection as _;
use sqlx::pool::PoolConnection;
use sqlx::{MySql, Postgres, Sqlite};

use crate::connection::{Backend, Target, statement_timeout_ms};
use crate::cursor::Cursor;
use crate::error::DatabaseError;
use crate::sql::{Ident, Statement, bind_values};
use crate::target_table::row_cursor;

/// The record of a sub-batch, written in the sub-batch's own transaction
/// by [`TargetTx::commit_recorded`]: the change commits only if the record
/// is accepted.
pub trait ProgressRecord: Send + Sync {
    /// The statement that records the sub-batch. It is accepted when it
    /// changes exactly one row (a fenced update: it matches only while its
    /// writer still holds what it records into, at the progress it started
    /// from).
    fn record(&self) -> Statement;

    /// A query whose first column is `1` while the record's writer still
    /// holds what it records into (read after a refused record, to tell a
    /// lost claim from progress that moved), else `0`.
    fn still_held(&self) -> Statement;
}

/// What [`TargetTx::commit_recorded`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The record was accepted and the change committed with it.
    Committed,
    /// The record matched no row: nothing of the transaction was kept.
    /// `held` is [`ProgressRecord::still_held`]'s answer.
    Refused {
        /// Whether the writer still held its claim.
        held: bool,
    },
}

/// An open sub-batch transaction on the target, on a connection of its pool
/// (`'static`: [`Target::begin_sub_batch`]) or on one a worker keeps
/// (borrowed for `'c`: [`TargetConnection::begin_sub_batch`]). Dropping it
/// without [`TargetTx::commit_recorded`] rolls back.
#[derive(Debug)]
pub struct TargetTx<'c> {
    tx: Tx<'c>,
}

/// The transaction, on the target's database.
#[derive(Debug)]
enum Tx<'c> {
    Sqlite(sqlx::Transaction<'c, Sqlite>),
    Postgres(sqlx::Transaction<'c, Postgres>),
    MySql(sqlx::Transaction<'c, MySql>),
}

/// A connection taken from the target's pool for sub-batches: kept by a
/// worker from one sub-batch to the next, or lent out for one transaction.
/// Dropped, it goes back to its pool, which ends any transaction left open.
#[derive(Debug)]
pub struct TargetConnection {
    connection: Held,
}

#[derive(Debug)]
enum Held {
    Postgres(PoolConnection<Postgres>),
    Sqlite(PoolConnection<Sqlite>),
    MySql(PoolConnection<MySql>),
}

impl Target {
    /// A sub-batch's write transaction on a connection of the pool, every
    /// statement bounded by `timeout` on PostgreSQL (`SET LOCAL
    /// statement_timeout`, sent with the `BEGIN`; a statement over it fails
    /// with SQLSTATE 57014); SQLite's takes the write lock from its first
    /// statement, MySQL's reads at `REPEATABLE READ` ([`MYSQL_BEGIN`]).
    pub async fn begin_sub_batch(
        &self,
        timeout: Option<Duration>,
    ) -> Result<TargetTx<'static>, DatabaseError> {
        let tx = match (self.backend(), timeout) {
            (Backend::Sqlite(pool), _) => {
                Tx::Sqlite(pool.begin_with(super::sqlite::BEGIN_WRITE).await?)
            }
            (Backend::Postgres(pool), None) => Tx::Postgres(pool.begin().await?),
            (Backend::Postgres(pool), Some(timeout)) => Tx::Postgres(
                pool.begin_with(sqlx::AssertSqlSafe(bounded_begin(timeout)))
                    .await?,
            ),
            (Backend::MySql(pool), _) => Tx::MySql(pool.begin_with(MYSQL_BEGIN).await?),
        };
        Ok(TargetTx { tx })
    }

    /// True when sub-batches within `timeout` run on connections a worker
    /// may keep ([`Target::sub_batch_connection`]): an SQLite or MySQL
    /// target's pool, or PostgreSQL's sessions bounded within `timeout`
    /// ([`crate::ConnectOptions::sub_batch_timeout`]). Otherwise each
    /// sub-batch opens a bounded transaction on a connection of the pool.
    pub fn lends_sub_batch_connections(&self, timeout: Duration) -> bool {
        match self.backend() {
            Backend::Postgres(_) => self.bounded_sessions(timeout).is_some(),
            Backend::Sqlite(_) | Backend::MySql(_) => true,
        }
    }

    /// A connection for sub-batches within `timeout`, tested by its pool as
    /// it hands it out: from PostgreSQL's bounded sessions when
    /// [`Target::lends_sub_batch_connections`], else from the pool.
    pub async fn sub_batch_connection(
        &self,
        timeout: Duration,
    ) -> Result<TargetConnection, DatabaseError> {
        let connection = match self.backend() {
            Backend::Sqlite(pool) => Held::Sqlite(pool.acquire().await?),
            Backend::MySql(pool) => Held::MySql(pool.acquire().await?),
            Backend::Postgres(pool) => match self.bounded_sessions(timeout) {
                Some(bounded) => Held::Postgres(bounded.acquire().await?),
                None => Held::Postgres(pool.acquire().await?),
            },
        };
        Ok(TargetConnection { connection })
    }
}

/// How a MySQL sub-batch transaction starts: in `REPEATABLE READ`, not the
/// session's `READ COMMITTED`. The change reads rows with locks either way
/// (the latest committed version, the scope tested on each), so the rows
/// changed are the same; but a `DELETE … WHERE scope LIMIT n` walks past the
/// index entries earlier sub-batches deleted and purge has not yet removed,
/// and under `READ COMMITTED` InnoDB's purge falls behind such a loop: on
/// MariaDB 10.11 each statement grew about 0.5 ms per sub-batch since the
/// last purge, against 0.06 ms here (`BENCHMARKS.md`, pt-archiver).
pub const MYSQL_BEGIN: &str = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ; START TRANSACTION";

/// `BEGIN; SET LOCAL statement_timeout = <timeout in ms>`: a number this
/// code formats, not input, so safe to inline.
fn bounded_begin(timeout: Duration) -> String {
    format!(
        "BEGIN; SET LOCAL statement_timeout = {}",
        statement_timeout_ms(timeout)
    )
}

/// Runs the same sqlx code on whichever transaction it is.
macro_rules! on_tx {
    ($tx:expr, |$t:ident| $body:expr) => {
        match &mut $tx.tx {
            Tx::Sqlite($t) => $body,
            Tx::Postgres($t) => $body,
            Tx::MySql($t) => {
                use crate::positional as sqlx;
                $body
            }
        }
    };
}

/// Runs the same sqlx code on whichever connection it is.
macro_rules! on_connection {
    ($held:expr, |$c:ident| $body:expr) => {
        match &mut $held.connection {
            Held::Sqlite($c) => $body,
            Held::Postgres($c) => $body,
            Held::MySql($c) => {
                use crate::positional as sqlx;
                $body
            }
        }
    };
}

impl TargetTx<'_> {
    /// Runs a data-changing statement inside the transaction; returns the rows affected.
    pub async fn execute(&mut self, statement: &Statement) -> Result<u64, DatabaseError> {
        Ok(on_tx!(self, |tx| bind_values!(
            sqlx::query(statement.text().to_sqlx()),
            statement.params()
        )
        .execute(&mut **tx)
        .await?
        .rows_affected()))
    }

    /// Like [`Target::fetch_cursor`], inside the transaction (so the rows it
    /// reads are the rows the transaction then changes).
    pub async fn fetch_cursor(
        &mut self,
        statement: &Statement,
        width: usize,
    ) -> Result<Option<Cursor>, DatabaseError> {
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
    ) -> Result<Option<String>, DatabaseError> {
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
    /// columns of all three names, or a target that is not SQLite. Read
    /// inside the transaction, whose write lock keeps the schema as read
    /// until it ends, so a rowid picked in it names the same row to its
    /// last statement.
    pub async fn rowid_name(
        &mut self,
        table: &Ident,
    ) -> Result<Option<&'static str>, DatabaseError> {
        let Tx::Sqlite(tx) = &mut self.tx else {
            return Ok(None);
        };
        let (with_rowid, without, taken): (i64, i64, Option<String>) =
            sqlx::query_as(super::sqlite::ROWID_NAMES)
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

    /// The first row of `statement` as two integers, read inside the
    /// transaction. The error is sqlx's own, so the caller can read the
    /// statement's SQLSTATE.
    pub async fn fetch_pair(&mut self, statement: &Statement) -> Result<(i64, i64), sqlx::Error> {
        on_tx!(self, |tx| bind_values!(
            sqlx::query_as(statement.text().to_sqlx()),
            statement.params()
        )
        .fetch_one(&mut **tx)
        .await)
    }

    /// Commits a transaction whose statement carried its own record (a
    /// statement that records itself and fails when the record is refused,
    /// as [`TargetConnection::fuses_statements`] allows): nothing else of
    /// the transaction needs recording.
    pub async fn commit_fused(self) -> Result<(), DatabaseError> {
        match self.tx {
            Tx::Sqlite(tx) => tx.commit().await?,
            Tx::Postgres(tx) => tx.commit().await?,
            Tx::MySql(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Runs `record` in the transaction and commits only if it was
    /// accepted, so the change and its record are kept together or not at
    /// all. A refused record rolls the transaction back at once, not when
    /// the connection is next used: the refused update may hold a lock on
    /// the row it read (InnoDB locks the rows an `UPDATE` reads), which
    /// whoever claims that row next would otherwise wait on or skip.
    pub async fn commit_recorded(
        mut self,
        record: &dyn ProgressRecord,
    ) -> Result<Recorded, DatabaseError> {
        let accepted = self.execute(&record.record()).await? == 1;
        if accepted {
            match self.tx {
                Tx::Sqlite(tx) => tx.commit().await?,
                Tx::Postgres(tx) => tx.commit().await?,
                Tx::MySql(tx) => tx.commit().await?,
            }
            return Ok(Recorded::Committed);
        }
        let still_held = record.still_held();
        let held: i64 = on_tx!(self, |tx| bind_values!(
            sqlx::query_scalar(still_held.text().to_sqlx()),
            still_held.params()
        )
        .fetch_one(&mut **tx)
        .await?);
        let held = held == 1;
        // A connection that fails here is closed, which rolls back as well.
        let _ = match self.tx {
            Tx::Sqlite(tx) => tx.rollback().await,
            Tx::Postgres(tx) => tx.rollback().await,
            Tx::MySql(tx) => tx.rollback().await,
        };
        Ok(Recorded::Refused { held })
    }
}

impl TargetConnection {
    /// Closes this connection when it is dropped instead of giving it back
    /// to its pool: nothing it holds (a table lock, a session setting)
    /// reaches the pool's next user, even when its future is cancelled.
    pub fn close_on_drop(&mut self) {
        match &mut self.connection {
            Held::Postgres(c) => c.close_on_drop(),
            Held::Sqlite(c) => c.close_on_drop(),
            Held::MySql(c) => c.close_on_drop(),
        }
    }

    /// True when a one-statement sub-batch on this connection may carry its
    /// record inside the same statement (PostgreSQL's data-modifying `WITH`),
    /// so it needs no transaction; elsewhere it runs in
    /// [`TargetConnection::begin_sub_batch`]'s transaction.
    pub fn fuses_statements(&self) -> bool {
        matches!(self.connection, Held::Postgres(_))
    }

    /// Opens a sub-batch transaction on this connection, as
    /// [`Target::begin_sub_batch`] does on one from the pool (on PostgreSQL
    /// every statement bounded by `timeout`).
    pub async fn begin_sub_batch(
        &mut self,
        timeout: Duration,
    ) -> Result<TargetTx<'_>, DatabaseError> {
        let tx = match &mut self.connection {
            Held::Postgres(connection) => Tx::Postgres(
                connection
                    .begin_with(sqlx::AssertSqlSafe(bounded_begin(timeout)))
                    .await?,
            ),
            Held::Sqlite(connection) => {
                Tx::Sqlite(connection.begin_with(super::sqlite::BEGIN_WRITE).await?)
            }
            Held::MySql(connection) => Tx::MySql(connection.begin_with(MYSQL_BEGIN).await?),
        };
        Ok(TargetTx { tx })
    }

    /// Runs `statement` on this connection, outside any transaction (so as
    /// one statement, atomic by itself); returns the rows affected.
    pub async fn execute(&mut self, statement: &Statement) -> Result<u64, DatabaseError> {
        Ok(on_connection!(self, |c| bind_values!(
            sqlx::query(statement.text().to_sqlx()),
            statement.params()
        )
        .execute(&mut **c)
        .await?
        .rows_affected()))
    }

    /// The first row of `statement` as two integers, read on this
    /// connection outside any transaction. The error is sqlx's own, so the
    /// caller can read the statement's SQLSTATE.
    pub async fn fetch_pair(&mut self, statement: &Statement) -> Result<(i64, i64), sqlx::Error> {
        on_connection!(self, |c| bind_values!(
            sqlx::query_as(statement.text().to_sqlx()),
            statement.params()
        )
        .fetch_one(&mut **c)
        .await)
    }

    /// Like [`Target::fetch_cursor`], on this connection outside any
    /// transaction.
    pub async fn fetch_cursor(
        &mut self,
        statement: &Statement,
        width: usize,
    ) -> Result<Option<Cursor>, DatabaseError> {
        on_connection!(self, |c| bind_values!(
            sqlx::query(statement.text().to_sqlx()),
            statement.params()
        )
        .fetch_optional(&mut **c)
        .await?
        .map_or(Ok(None), |r| row_cursor(&r, width)))
    }
}

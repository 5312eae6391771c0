//! Measuring a statement without keeping its effect: [`Store::probe_rolled_back`]
//! runs it inside transactions that are always rolled back, so a plan can
//! say how long a sub-batch takes and how much log it writes before the
//! operation exists.

use std::time::{Duration, Instant};

use crate::connection::Backend;
use crate::error::StoreError;
use crate::sql::{Statement, bind_values};
use crate::store::Store;

/// What running a statement (and rolling it back) measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// How many times it ran, each in its own rolled-back transaction.
    pub runs: u32,
    /// Rows the statement changed in its last run (none of them kept).
    pub rows: u64,
    /// The median time one run took.
    pub took: Duration,
    /// Write-ahead log one run generated, in bytes (the median): PostgreSQL's
    /// WAL insert position, or InnoDB's redo log sequence number on MySQL
    /// and MariaDB (a server-wide counter: other sessions' writes in the
    /// same moment are counted too). `None` on SQLite, which writes its log
    /// only at commit.
    pub log_bytes: Option<u64>,
}

impl Store {
    /// Runs `statement` (a data change) `runs` times, each in a transaction
    /// of its own that is rolled back whatever happens, and returns what it
    /// measured. The rows it touched are locked while it runs, as the real
    /// statement would lock them; nothing it changed is kept.
    ///
    /// Errors: the database's, after the transaction is rolled back.
    pub async fn probe_rolled_back(
        &self,
        statement: &Statement,
        runs: u32,
    ) -> Result<Probe, StoreError> {
        let runs = runs.max(1);
        let mut took = Vec::with_capacity(runs as usize);
        let mut logged = Vec::with_capacity(runs as usize);
        let mut rows = 0;
        for _ in 0..runs {
            let (changed, elapsed, log_bytes) = self.run_and_roll_back(statement).await?;
            rows = changed;
            took.push(elapsed);
            logged.extend(log_bytes);
        }
        Ok(Probe {
            runs,
            rows,
            took: median(&mut took),
            log_bytes: (!logged.is_empty()).then(|| median(&mut logged)),
        })
    }

    /// One run of [`Store::probe_rolled_back`]: rows changed, time taken,
    /// log written.
    async fn run_and_roll_back(
        &self,
        statement: &Statement,
    ) -> Result<(u64, Duration, Option<u64>), StoreError> {
        let query = statement.text().to_sqlx();
        match self.backend() {
            Backend::Sqlite(pool) => {
                let mut tx = pool.begin().await?;
                let started = Instant::now();
                let done = bind_values!(sqlx::query(query), statement.params())
                    .execute(&mut *tx)
                    .await?;
                let took = started.elapsed();
                tx.rollback().await?;
                Ok((done.rows_affected(), took, None))
            }
            Backend::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                let before: String = sqlx::query_scalar(WAL_POSITION).fetch_one(&mut *tx).await?;
                let started = Instant::now();
                let done = bind_values!(sqlx::query(query), statement.params())
                    .execute(&mut *tx)
                    .await?;
                let took = started.elapsed();
                let written: i64 = sqlx::query_scalar(WAL_SINCE)
                    .bind(before)
                    .fetch_one(&mut *tx)
                    .await?;
                tx.rollback().await?;
                Ok((done.rows_affected(), took, u64::try_from(written).ok()))
            }
            Backend::MySql(pool) => {
                use crate::positional as sqlx;
                let mut tx = pool.begin().await?;
                let before = redo_position(&mut tx).await?;
                let started = Instant::now();
                let done = bind_values!(sqlx::query(query), statement.params())
                    .execute(&mut *tx)
                    .await?;
                let took = started.elapsed();
                let after = redo_position(&mut tx).await?;
                tx.rollback().await?;
                let written = before.zip(after).map(|(b, a)| a.saturating_sub(b));
                Ok((done.rows_affected(), took, written))
            }
        }
    }
}

/// PostgreSQL: where the next WAL record will be inserted, as text.
const WAL_POSITION: &str = "SELECT pg_current_wal_insert_lsn()::text";

/// PostgreSQL: WAL bytes inserted since position `$1`.
const WAL_SINCE: &str = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint";

/// MySQL and MariaDB: InnoDB's current log sequence number (MariaDB and
/// MySQL before 8.0.30 call it `Innodb_lsn_current`, later MySQL
/// `Innodb_redo_log_current_lsn`); `None` when the server shows neither.
async fn redo_position(
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
) -> Result<Option<u64>, StoreError> {
    use sqlx::Row;
    // Over the text protocol: MySQL 8 prepares no `SHOW STATUS`.
    let rows = sqlx::raw_sql(
        "SHOW GLOBAL STATUS WHERE Variable_name IN \
         ('Innodb_lsn_current', 'Innodb_redo_log_current_lsn')",
    )
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .iter()
        .find_map(|row| row.try_get::<String, _>(1).ok()?.parse().ok()))
}

/// The middle value of `values` (not empty).
fn median<T: Ord + Copy>(values: &mut [T]) -> T {
    values.sort_unstable();
    values[values.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn the_median_is_the_middle_value_whatever_the_order() {
        assert_eq!(median(&mut [3, 1, 2]), 2);
        assert_eq!(median(&mut [9]), 9);
        assert_eq!(median(&mut [5, 1, 9, 7]), 7);
    }
}

//! An operation's target table outside a sub-batch: what the catalogue says
//! about it, how the planner would run a statement over it, the reads that
//! plan batches, and single statements. Inside a sub-batch, statements run in
//! a sub-batch's transaction ([`crate::TargetTx`]) instead.

use chrono::{DateTime, NaiveDateTime, Utc};

use crate::connection::Target;
use crate::cursor::{Cursor, CursorValue};
use crate::error::DatabaseError;
use crate::on_pool;
use crate::sql::{Ident, Statement, bind_values};

pub(crate) mod definitions;
pub(crate) mod keys;
mod partitions;
mod references;
pub(crate) mod triggers;

pub use definitions::ColumnDefinition;
pub use keys::{Index, TableKeys};
pub(crate) use partitions::at_positions;
pub use partitions::{RangePartition, RangePartitions};
pub use references::DeleteAction;
pub use triggers::{NonTransactional, Trigger};

impl Target {
    /// The table's column names in table order; empty when no such table exists.
    pub async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        self.catalogue().table_columns(table).await
    }

    /// True when `a` and `b`, both existing tables, name the same one: the
    /// database resolves each as a statement would (PostgreSQL through the
    /// search path; SQLite without regard to case, an unqualified name in
    /// `main`; MySQL in the connection's database, by case as the server
    /// compares table names).
    pub async fn same_table(&self, a: &Ident, b: &Ident) -> Result<bool, DatabaseError> {
        self.catalogue().same_table(a, b).await
    }

    /// True when `table` exists and is a base table (PostgreSQL: a plain or
    /// partitioned one), not a view or another kind of relation, whose
    /// inserted rows land in whatever tables it shows.
    pub async fn is_base_table(&self, table: &Ident) -> Result<bool, DatabaseError> {
        self.catalogue().is_base_table(table).await
    }

    /// PostgreSQL: the schema holding `table`, found as a statement naming
    /// it would find it (through the `search_path` when unqualified);
    /// `None` when there is no such relation, and on SQLite and MySQL,
    /// where an unqualified name means one database whatever the session.
    pub async fn schema_of(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        self.catalogue().schema_of(table).await
    }

    /// MySQL: whether the server writes the statements themselves to its
    /// binary log (`log_bin` on, this session's `binlog_format` `STATEMENT`),
    /// for replicas to run again; `false` elsewhere.
    pub async fn logs_statements(&self) -> Result<bool, DatabaseError> {
        self.catalogue().logs_statements().await
    }

    /// The declared type of `column` in `table` as the catalogue spells it
    /// (SQLite: the declared type, possibly empty; PostgreSQL: what
    /// `information_schema.columns.data_type` says — a built-in type's name,
    /// a domain's base type, `ARRAY` or `USER-DEFINED`; MySQL: its
    /// `data_type`, such as `datetime` or `bigint`), or `None` when
    /// there is no such column.
    pub async fn column_type(
        &self,
        table: &Ident,
        column: &str,
    ) -> Result<Option<String>, DatabaseError> {
        self.catalogue().column_type(table, column).await
    }

    /// The columns of `table` whose values the database computes, which an
    /// `INSERT` cannot give: generated ones (virtual or stored), and on
    /// PostgreSQL identity columns `GENERATED ALWAYS`. In table order.
    pub async fn generated_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        self.catalogue().generated_columns(table).await
    }

    /// The planner's plan for `statement`, one line per row: `EXPLAIN QUERY PLAN`
    /// details on SQLite, `EXPLAIN` text on PostgreSQL. On PostgreSQL the plan is
    /// taken with sequential scans disabled (in a transaction that is rolled
    /// back), so a `Seq Scan` in it means no index can serve the statement at
    /// all — not merely that the table is small today.
    pub async fn explain(&self, statement: &Statement) -> Result<Vec<String>, DatabaseError> {
        self.catalogue().explain(statement).await
    }

    /// Runs a read statement outside any transaction and returns its first
    /// row's first `width` columns as a cursor (integers, else text), or
    /// `None` when it returns no row or a NULL.
    pub async fn fetch_cursor(
        &self,
        statement: &Statement,
        width: usize,
    ) -> Result<Option<Cursor>, DatabaseError> {
        on_pool!(self, |pool| {
            let row = bind_values!(sqlx::query(statement.text().to_sqlx()), statement.params())
                .fetch_optional(pool)
                .await?;
            row.map_or(Ok(None), |r| row_cursor(&r, width))
        })
    }

    /// Runs a read statement outside any transaction and returns each
    /// row's first `width` columns as a cursor (integers, else text); a row
    /// with a NULL among them is left out.
    pub async fn fetch_cursors(
        &self,
        statement: &Statement,
        width: usize,
    ) -> Result<Vec<Cursor>, DatabaseError> {
        on_pool!(self, |pool| {
            let rows = bind_values!(sqlx::query(statement.text().to_sqlx()), statement.params())
                .fetch_all(pool)
                .await?;
            let mut cursors = Vec::with_capacity(rows.len());
            for row in &rows {
                cursors.extend(row_cursor(row, width)?);
            }
            Ok(cursors)
        })
    }

    /// How many rows the planner expects `statement` (a `SELECT`) to return,
    /// from the table's statistics, without running it: PostgreSQL's
    /// `EXPLAIN (FORMAT JSON)` estimate for the plan's top node. `None` on
    /// SQLite, whose planner gives no row estimates. Only as good as the
    /// statistics (`ANALYZE`); never an exact count.
    pub async fn estimate_rows(&self, statement: &Statement) -> Result<Option<i64>, DatabaseError> {
        self.catalogue().estimate_rows(statement).await
    }

    /// Runs a read statement and returns its first row's first column as an
    /// integer (a `COUNT(*)`, a `MAX(id)`), or `None` when there is no row, a
    /// NULL, or a non-integer value.
    pub async fn fetch_int(&self, statement: &Statement) -> Result<Option<i64>, DatabaseError> {
        Ok(match self.fetch_cursor(statement, 1).await? {
            Some(Cursor(values)) => match values.first() {
                Some(CursorValue::Int(n)) => Some(*n),
                _ => None,
            },
            None => None,
        })
    }

    /// Runs one statement outside any transaction; returns the rows affected.
    pub async fn execute(&self, statement: &Statement) -> Result<u64, DatabaseError> {
        Ok(on_pool!(self, |pool| bind_values!(
            sqlx::query(statement.text().to_sqlx()),
            statement.params()
        )
        .execute(pool)
        .await?
        .rows_affected()))
    }
}

/// Reads a row's first `width` columns as a cursor: `None` when one of them
/// is NULL, an error naming the column when its type cannot be a cursor.
pub(crate) fn row_cursor<R: sqlx::Row + UnsignedColumns>(
    row: &R,
    width: usize,
) -> Result<Option<Cursor>, DatabaseError>
where
    usize: sqlx::ColumnIndex<R>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i32: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    DateTime<Utc>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    NaiveDateTime: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    use sqlx::{Column, TypeInfo, ValueRef};
    // SQLite would read text or a number as a date too; only PostgreSQL and
    // MySQL have real timestamp columns.
    let postgres = matches!(
        <R::Database as sqlx::Database>::NAME,
        "PostgreSQL" | "MySQL"
    );
    let mut values = Vec::with_capacity(width);
    for i in 0..width {
        let raw = row.try_get_raw(i)?;
        if raw.is_null() {
            return Ok(None);
        }
        // SQLite keeps any value in any column: the value's own type.
        let held = raw.type_info().name().to_owned();
        let value = if let Ok(v) = row.try_get::<i64, _>(i) {
            CursorValue::Int(v)
        } else if let Ok(v) = row.try_get::<i32, _>(i) {
            CursorValue::Int(v.into())
        } else if let Some(v) = row.unsigned(i) {
            let column = || row.columns()[i].name().to_owned();
            CursorValue::Int(i64::try_from(v).map_err(|_| DatabaseError::KeyBeyondRange {
                column: column(),
                value: v,
            })?)
        } else if let Ok(v) = row.try_get::<String, _>(i) {
            CursorValue::Text(v)
        } else if let (true, Ok(v)) = (postgres, row.try_get::<DateTime<Utc>, _>(i)) {
            CursorValue::Timestamp(v)
        } else if let (true, Ok(v)) = (postgres, row.try_get::<NaiveDateTime, _>(i)) {
            CursorValue::Timestamp(v.and_utc())
        } else if let (true, Ok(v)) = (postgres, row.try_get::<Vec<u8>, _>(i)) {
            CursorValue::Bytes(v)
        } else {
            let column = &row.columns()[i];
            let declared = match column.type_info().name() {
                "NULL" => "(none)",
                declared => declared,
            };
            return Err(DatabaseError::UnsupportedCursorType {
                column: column.name().to_owned(),
                type_name: if held == declared {
                    held
                } else {
                    format!("{declared} (a row holds a {held} value)")
                },
            });
        };
        values.push(value);
    }
    Ok(Some(Cursor(values)))
}

/// A row whose columns may hold unsigned integers (MySQL's `UNSIGNED`
/// types, which sqlx reads only as unsigned Rust integers). A cursor holds
/// such a value as a signed 64-bit integer, which MySQL compares with an
/// unsigned column exactly; larger values are refused by [`row_cursor`].
pub(crate) trait UnsignedColumns {
    /// Column `i` as an unsigned integer, when it is an unsigned column.
    fn unsigned(&self, i: usize) -> Option<u64>;
}

impl UnsignedColumns for sqlx::mysql::MySqlRow {
    fn unsigned(&self, i: usize) -> Option<u64> {
        sqlx::Row::try_get::<u64, _>(self, i).ok()
    }
}

impl UnsignedColumns for sqlx::postgres::PgRow {
    fn unsigned(&self, _: usize) -> Option<u64> {
        None
    }
}

impl UnsignedColumns for sqlx::sqlite::SqliteRow {
    fn unsigned(&self, _: usize) -> Option<u64> {
        None
    }
}

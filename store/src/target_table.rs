//! An operation's target table outside a sub-batch: what the catalogue says
//! about it, how the planner would run a statement over it, the reads that
//! plan batches, and single statements. Inside a sub-batch, statements run in
//! a [`crate::SubBatchTx`] instead.

use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::AssertSqlSafe;

use crate::connection::{Backend, on_pool};
use crate::cursor::{Cursor, CursorValue};
use crate::error::StoreError;
use crate::sql::{Ident, SqlText, Statement, bind_values};
use crate::store::Store;

/// The columns of table `$2` in schema `$1` (when NULL, the table the
/// `search_path` finds, as a statement naming it would)
/// that the current role may use, as `information_schema.columns` lists
/// them (tables, partitioned tables, views, foreign tables) — `a` the
/// column, `b` its type or, for a domain, the domain's base type. Read
/// from `pg_catalog` directly: planning the `information_schema` view
/// took 1–2 ms a query, most of an enqueue's catalogue checks.
macro_rules! postgres_columns {
    () => {
        "FROM pg_catalog.pg_attribute a \
         JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
         JOIN pg_catalog.pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END \
         WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
         AND c.relkind IN ('r', 'p', 'v', 'f') AND a.attnum > 0 AND NOT a.attisdropped \
         AND (pg_has_role(c.relowner, 'USAGE') \
              OR has_column_privilege(c.oid, a.attnum, 'SELECT, INSERT, UPDATE, REFERENCES'))"
    };
}

/// The rows of `information_schema` about table `$2` in database `$1`
/// (when NULL, the connection's database), its name compared exactly.
macro_rules! mysql_table {
    () => {
        "WHERE table_schema = COALESCE($1, DATABASE()) AND BINARY table_name = BINARY $2"
    };
}

/// The columns of table `$2` in database `$1` (when NULL, the connection's
/// database), as `information_schema.columns` lists them.
macro_rules! mysql_columns {
    () => {
        concat!("FROM information_schema.columns ", mysql_table!())
    };
}

mod definitions;
mod keys;
mod references;
mod triggers;

pub use definitions::ColumnDefinition;
pub use keys::{Index, TableKeys};
pub use references::DeleteAction;
pub use triggers::{NonTransactional, Trigger};

impl Store {
    /// The table's column names in table order; empty when no such table exists.
    pub async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, StoreError> {
        self.column_names(
            table,
            // `table_xinfo`: `table_info` leaves generated columns out.
            "SELECT name FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
             WHERE hidden <> 1 ORDER BY cid",
            concat!(
                "SELECT a.attname::text ",
                postgres_columns!(),
                " ORDER BY a.attnum"
            ),
            concat!(
                "SELECT CAST(column_name AS CHAR) ",
                mysql_columns!(),
                " ORDER BY ordinal_position"
            ),
        )
        .await
    }

    /// True when `a` and `b`, both existing tables, name the same one: the
    /// database resolves each as a statement would (PostgreSQL through the
    /// search path; SQLite without regard to case, an unqualified name in
    /// `main`; MySQL in the connection's database, by case as the server
    /// compares table names).
    pub async fn same_table(&self, a: &Ident, b: &Ident) -> Result<bool, StoreError> {
        Ok(match self.backend() {
            Backend::Sqlite(_) => {
                let schema = |t: &Ident| t.schema().unwrap_or("main").to_ascii_lowercase();
                schema(a) == schema(b) && a.name().eq_ignore_ascii_case(b.name())
            }
            Backend::Postgres(pool) => {
                let same: Option<bool> =
                    sqlx::query_scalar("SELECT to_regclass($1) = to_regclass($2)")
                        .bind(a.quoted())
                        .bind(b.quoted())
                        .fetch_one(pool)
                        .await?;
                same.unwrap_or(false)
            }
            Backend::MySql(pool) => {
                let same: i64 = crate::positional::query_scalar(
                    "SELECT CAST(COALESCE($1, DATABASE()) = COALESCE($2, DATABASE()) AND \
                     (BINARY $3 = BINARY $4 OR (@@lower_case_table_names > 0 AND LOWER($3) = LOWER($4))) \
                     AS SIGNED)",
                )
                .bind(a.schema())
                .bind(b.schema())
                .bind(a.name())
                .bind(b.name())
                .fetch_one(pool)
                .await?;
                same == 1
            }
        })
    }

    /// True when `table` exists and is a base table (PostgreSQL: a plain or
    /// partitioned one), not a view or another kind of relation, whose
    /// inserted rows land in whatever tables it shows.
    pub async fn is_base_table(&self, table: &Ident) -> Result<bool, StoreError> {
        Ok(match self.backend() {
            Backend::Sqlite(pool) => {
                let kind: Option<String> = sqlx::query_scalar(
                    "SELECT type FROM pragma_table_list($1) WHERE schema = COALESCE($2, 'main')",
                )
                .bind(table.name())
                .bind(table.schema())
                .fetch_optional(pool)
                .await?;
                kind.as_deref() == Some("table")
            }
            Backend::Postgres(pool) => {
                let base: Option<bool> = sqlx::query_scalar(
                    "SELECT relkind IN ('r', 'p') FROM pg_catalog.pg_class WHERE oid = to_regclass($1)",
                )
                .bind(table.quoted())
                .fetch_optional(pool)
                .await?;
                base == Some(true)
            }
            Backend::MySql(pool) => {
                let base: Option<i64> = crate::positional::query_scalar(concat!(
                    "SELECT CAST(table_type = 'BASE TABLE' AS SIGNED) FROM information_schema.tables ",
                    mysql_table!()
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_optional(pool)
                .await?;
                base == Some(1)
            }
        })
    }

    /// PostgreSQL: the schema holding `table`, found as a statement naming
    /// it would find it (through the `search_path` when unqualified);
    /// `None` when there is no such relation, and on SQLite and MySQL,
    /// where an unqualified name means one database whatever the session.
    pub async fn schema_of(&self, table: &Ident) -> Result<Option<String>, StoreError> {
        let Backend::Postgres(pool) = self.backend() else {
            return Ok(None);
        };
        Ok(sqlx::query_scalar(
            "SELECT n.nspname::text FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = to_regclass($1)",
        )
        .bind(table.quoted())
        .fetch_optional(pool)
        .await?)
    }

    /// MySQL: whether the server writes the statements themselves to its
    /// binary log (`log_bin` on, this session's `binlog_format` `STATEMENT`),
    /// for replicas to run again; `false` elsewhere.
    pub async fn logs_statements(&self) -> Result<bool, StoreError> {
        let Backend::MySql(pool) = self.backend() else {
            return Ok(false);
        };
        let logs: i64 = sqlx::query_scalar(
            "SELECT CAST(@@log_bin = 1 AND @@binlog_format = 'STATEMENT' AS SIGNED)",
        )
        .fetch_one(pool)
        .await?;
        Ok(logs == 1)
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
    ) -> Result<Option<String>, StoreError> {
        Ok(match self.backend() {
            Backend::Sqlite(pool) => {
                sqlx::query_scalar(
                    "SELECT type FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
                     WHERE hidden <> 1 AND name = $3",
                )
                .bind(table.name())
                .bind(table.schema())
                .bind(column)
                .fetch_optional(pool)
                .await?
            }
            Backend::Postgres(pool) => {
                sqlx::query_scalar(concat!(
                    "SELECT CASE WHEN b.typelem <> 0 AND b.typlen = -1 THEN 'ARRAY' \
                     WHEN b.typnamespace = 'pg_catalog'::regnamespace THEN format_type(b.oid, NULL) \
                     ELSE 'USER-DEFINED' END ",
                    postgres_columns!(),
                    " AND a.attname = $3"
                ))
                .bind(table.schema())
                .bind(table.name())
                .bind(column)
                .fetch_optional(pool)
                .await?
            }
            Backend::MySql(pool) => {
                crate::positional::query_scalar(concat!(
                    "SELECT CAST(data_type AS CHAR) ",
                    mysql_columns!(),
                    " AND BINARY column_name = BINARY $3"
                ))
                .bind(table.schema())
                .bind(table.name())
                .bind(column)
                .fetch_optional(pool)
                .await?
            }
        })
    }

    /// The columns of `table` whose values the database computes, which an
    /// `INSERT` cannot give: generated ones (virtual or stored), and on
    /// PostgreSQL identity columns `GENERATED ALWAYS`. In table order.
    pub async fn generated_columns(&self, table: &Ident) -> Result<Vec<String>, StoreError> {
        self.column_names(
            table,
            "SELECT name FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
             WHERE hidden IN (2, 3) ORDER BY cid",
            concat!(
                "SELECT a.attname::text ",
                postgres_columns!(),
                " AND (a.attgenerated <> '' OR a.attidentity = 'a') ORDER BY a.attnum"
            ),
            concat!(
                "SELECT CAST(column_name AS CHAR) ",
                mysql_columns!(),
                " AND (LOWER(extra) LIKE '%virtual generated%' \
                   OR LOWER(extra) LIKE '%stored generated%') ORDER BY ordinal_position"
            ),
        )
        .await
    }

    /// The names a catalogue query lists for `table`, in this backend's
    /// dialect: SQLite's binds the table's name then its schema, the others
    /// its schema then its name.
    async fn column_names(
        &self,
        table: &Ident,
        sqlite: &'static str,
        postgres: &'static str,
        mysql: &'static str,
    ) -> Result<Vec<String>, StoreError> {
        Ok(match self.backend() {
            Backend::Sqlite(pool) => {
                sqlx::query_scalar(sqlite)
                    .bind(table.name())
                    .bind(table.schema())
                    .fetch_all(pool)
                    .await?
            }
            Backend::Postgres(pool) => {
                sqlx::query_scalar(postgres)
                    .bind(table.schema())
                    .bind(table.name())
                    .fetch_all(pool)
                    .await?
            }
            Backend::MySql(pool) => {
                crate::positional::query_scalar(mysql)
                    .bind(table.schema())
                    .bind(table.name())
                    .fetch_all(pool)
                    .await?
            }
        })
    }

    /// The planner's plan for `statement`, one line per row: `EXPLAIN QUERY PLAN`
    /// details on SQLite, `EXPLAIN` text on PostgreSQL. On PostgreSQL the plan is
    /// taken with sequential scans disabled (in a transaction that is rolled
    /// back), so a `Seq Scan` in it means no index can serve the statement at
    /// all — not merely that the table is small today.
    pub async fn explain(&self, statement: &Statement) -> Result<Vec<String>, StoreError> {
        use sqlx::Row;
        match self.backend() {
            Backend::Sqlite(pool) => {
                let text = SqlText::new("EXPLAIN QUERY PLAN ").append(statement.text());
                let mut conn = pool.acquire().await?;
                // SQLite checks a connection's cached schema only when a statement
                // opens a transaction, which EXPLAIN never does: read the schema
                // table first so an index created by another connection is seen.
                sqlx::query("SELECT COUNT(*) FROM sqlite_schema")
                    .execute(&mut *conn)
                    .await?;
                // Not a persistent statement: a plan is fixed when it is compiled.
                let query = sqlx::query(AssertSqlSafe(text.as_str().to_owned())).persistent(false);
                let rows = bind_values!(query, statement.params())
                    .fetch_all(&mut *conn)
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| r.try_get::<String, _>(3).unwrap_or_default())
                    .collect())
            }
            Backend::Postgres(pool) => {
                let text = SqlText::new("EXPLAIN ").append(statement.text());
                let mut tx = pool.begin().await?;
                sqlx::query("SET LOCAL enable_seqscan = off")
                    .execute(&mut *tx)
                    .await?;
                let query = sqlx::query(AssertSqlSafe(text.as_str().to_owned())).persistent(false);
                let rows = bind_values!(query, statement.params())
                    .fetch_all(&mut *tx)
                    .await?;
                tx.rollback().await?;
                Ok(rows
                    .iter()
                    .map(|r| r.try_get::<String, _>(0).unwrap_or_default())
                    .collect())
            }
            Backend::MySql(pool) => {
                let text = SqlText::new("EXPLAIN ").append(statement.text());
                let query = crate::positional::query(AssertSqlSafe(text.as_str().to_owned()));
                let rows = bind_values!(query, statement.params())
                    .fetch_all(pool)
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| {
                        let text = |name: &str| {
                            r.try_get::<Option<String>, _>(name)
                                .ok()
                                .flatten()
                                .unwrap_or_else(|| "NULL".into())
                        };
                        format!(
                            "table {} access {} possible_keys {} key {} {}",
                            text("table"),
                            text("type"),
                            text("possible_keys"),
                            text("key"),
                            text("Extra")
                        )
                    })
                    .collect())
            }
        }
    }

    /// Runs a read statement outside any transaction and returns its first
    /// row's first `width` columns as a cursor (integers, else text), or
    /// `None` when it returns no row or a NULL.
    pub async fn fetch_cursor(
        &self,
        statement: &Statement,
        width: usize,
    ) -> Result<Option<Cursor>, StoreError> {
        on_pool!(self, |pool| {
            let row = bind_values!(sqlx::query(statement.text().to_sqlx()), statement.params())
                .fetch_optional(pool)
                .await?;
            row.map_or(Ok(None), |r| row_cursor(&r, width))
        })
    }

    /// How many rows the planner expects `statement` (a `SELECT`) to return,
    /// from the table's statistics, without running it: PostgreSQL's
    /// `EXPLAIN (FORMAT JSON)` estimate for the plan's top node. `None` on
    /// SQLite, whose planner gives no row estimates. Only as good as the
    /// statistics (`ANALYZE`); never an exact count.
    pub async fn estimate_rows(&self, statement: &Statement) -> Result<Option<i64>, StoreError> {
        let Backend::Postgres(pool) = self.backend() else {
            return Ok(None);
        };
        let text = SqlText::new("EXPLAIN (FORMAT JSON) ").append(statement.text());
        let query = sqlx::query_scalar(AssertSqlSafe(text.as_str().to_owned())).persistent(false);
        let plan: serde_json::Value = bind_values!(query, statement.params())
            .fetch_one(pool)
            .await?;
        Ok(plan[0]["Plan"]["Plan Rows"]
            .as_f64()
            .map(|rows| rows.round() as i64))
    }

    /// Runs a read statement and returns its first row's first column as an
    /// integer (a `COUNT(*)`, a `MAX(id)`), or `None` when there is no row, a
    /// NULL, or a non-integer value.
    pub async fn fetch_int(&self, statement: &Statement) -> Result<Option<i64>, StoreError> {
        Ok(match self.fetch_cursor(statement, 1).await? {
            Some(Cursor(values)) => match values.first() {
                Some(CursorValue::Int(n)) => Some(*n),
                _ => None,
            },
            None => None,
        })
    }

    /// Runs one statement outside any transaction; returns the rows affected.
    pub async fn execute(&self, statement: &Statement) -> Result<u64, StoreError> {
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
) -> Result<Option<Cursor>, StoreError>
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
            CursorValue::Int(i64::try_from(v).map_err(|_| StoreError::KeyBeyondRange {
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
            return Err(StoreError::UnsupportedCursorType {
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

//! What the database says about a target table: its columns, and how the
//! planner would run a statement over it. Read-only; nothing here changes data.

use sqlx::AssertSqlSafe;

use crate::error::StoreError;
use crate::sql::{Ident, SqlText, Statement, bind_values};
use crate::store::{Backend, Store};

impl Store {
    /// The table's column names in table order; empty when no such table exists.
    pub async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, StoreError> {
        Ok(match self.backend() {
            Backend::Sqlite(pool) => {
                sqlx::query_scalar("SELECT name FROM pragma_table_info($1, COALESCE($2, 'main')) ORDER BY cid")
                    .bind(table.name())
                    .bind(table.schema())
                    .fetch_all(pool)
                    .await?
            }
            Backend::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT column_name::text FROM information_schema.columns \
                     WHERE table_schema = COALESCE($1, current_schema()) AND table_name = $2 ORDER BY ordinal_position",
                )
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
        }
    }
}

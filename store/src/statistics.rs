//! When the planner's statistics of a target table last changed: a version
//! that differs after every `ANALYZE` (manual or automatic) the database
//! reports, so the plan-drift guard can look at the batch query's plan
//! again as soon as the planner may choose another one.

use crate::connection::Backend;
use crate::error::StoreError;
use crate::sql::{Ident, SqlText};
use crate::store::Store;

impl Store {
    /// A version of `table`'s planner statistics, or `None` when the
    /// database keeps none that can be read:
    /// - PostgreSQL: the analyze count (manual and automatic) with the
    ///   row and page estimates `ANALYZE` and `VACUUM` write to `pg_class`;
    /// - MySQL and MariaDB: when InnoDB's persistent statistics were last
    ///   written (`mysql.innodb_table_stats`, to the second);
    /// - SQLite: the table's rows of `sqlite_stat1`, which `ANALYZE` writes.
    ///
    /// A catalogue the role may not read is `None`, not an error: the
    /// guard's periodic look still runs. Other errors are returned.
    pub async fn statistics_version(&self, table: &Ident) -> Result<Option<String>, StoreError> {
        let read = match self.backend() {
            Backend::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT concat_ws('/', s.analyze_count + s.autoanalyze_count, c.reltuples, c.relpages) \
                     FROM pg_catalog.pg_class c \
                     LEFT JOIN pg_catalog.pg_stat_all_tables s ON s.relid = c.oid \
                     WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2)))",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_optional(pool)
                .await
            }
            Backend::MySql(pool) => {
                crate::positional::query_scalar(
                    "SELECT CAST(last_update AS CHAR) FROM mysql.innodb_table_stats \
                     WHERE database_name = COALESCE($1, DATABASE()) AND BINARY table_name = BINARY $2",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_optional(pool)
                .await
            }
            Backend::Sqlite(pool) => {
                let schema = table.schema().unwrap_or("main");
                let kept: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM pragma_table_list WHERE schema = $1 AND name = 'sqlite_stat1'",
                )
                .bind(schema)
                .fetch_one(pool)
                .await?;
                if kept == 0 {
                    return Ok(None);
                }
                let schema = Ident::parse(schema).map_err(|e| StoreError::BadSetting(e.to_string()))?;
                let text = SqlText::new("SELECT group_concat(coalesce(idx, '') || '=' || stat, ';') FROM ")
                    .ident(&schema)
                    .push(".sqlite_stat1 WHERE tbl = $1");
                sqlx::query_scalar(text.to_sqlx())
                    .bind(table.name())
                    .fetch_optional(pool)
                    .await
                    .map(Option::flatten)
            }
        };
        match read {
            Ok(version) => Ok(version),
            Err(error) if is_not_allowed(&error) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }
}

/// The role may not read that catalogue (PostgreSQL 42501, MySQL 1142).
fn is_not_allowed(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|d| {
        matches!(
            d.code().as_deref(),
            Some("42501") | Some("1142") | Some("42000")
        )
    })
}

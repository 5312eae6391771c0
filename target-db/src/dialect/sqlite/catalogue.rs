//! What SQLite's catalogue (`pragma_table_xinfo`, `sqlite_schema`) says
//! about a target table.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};
use std::time::{Duration, Instant};

use crate::dialect::catalogue::Catalogue;
use crate::error::DatabaseError;
use crate::sql::{Ident, SqlText, Statement, bind_values};
use crate::target_table::definitions::sqlite_collations;
use crate::target_table::keys::GENERATED;
use crate::target_table::triggers::sqlite_trigger_fires;
use crate::target_table::{Index, TableKeys};

#[async_trait]
impl Catalogue for sqlx::SqlitePool {
    async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        // `table_xinfo`: `table_info` leaves generated columns out.
        column_names(
            self,
            table,
            "SELECT name FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
             WHERE hidden <> 1 ORDER BY cid",
        )
        .await
    }

    async fn generated_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        column_names(
            self,
            table,
            "SELECT name FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
             WHERE hidden IN (2, 3) ORDER BY cid",
        )
        .await
    }

    async fn same_table(&self, a: &Ident, b: &Ident) -> Result<bool, DatabaseError> {
        let _ = self;
        Ok({
            let schema = |t: &Ident| t.schema().unwrap_or("main").to_ascii_lowercase();
            schema(a) == schema(b) && a.name().eq_ignore_ascii_case(b.name())
        })
    }

    async fn is_base_table(&self, table: &Ident) -> Result<bool, DatabaseError> {
        let pool = self;
        Ok({
            let kind: Option<String> = sqlx::query_scalar(
                "SELECT type FROM pragma_table_list($1) WHERE schema = COALESCE($2, 'main')",
            )
            .bind(table.name())
            .bind(table.schema())
            .fetch_optional(pool)
            .await?;
            kind.as_deref() == Some("table")
        })
    }

    async fn column_type(
        &self,
        table: &Ident,
        column: &str,
    ) -> Result<Option<String>, DatabaseError> {
        let pool = self;
        Ok({
            sqlx::query_scalar(
                "SELECT type FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
                     WHERE hidden <> 1 AND name = $3",
            )
            .bind(table.name())
            .bind(table.schema())
            .bind(column)
            .fetch_optional(pool)
            .await?
        })
    }

    async fn explain(&self, statement: &Statement) -> Result<Vec<String>, DatabaseError> {
        let pool = self;
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

    async fn table_keys(&self, table: &Ident) -> Result<TableKeys, DatabaseError> {
        let pool = self;

        let schema = table.schema().unwrap_or("main");
        let columns: Vec<(String, String, bool, i64)> = sqlx::query_as(
            "SELECT name, type, \"notnull\", pk FROM pragma_table_xinfo($1, $2) \
                     WHERE hidden <> 1 ORDER BY cid",
        )
        .bind(table.name())
        .bind(schema)
        .fetch_all(pool)
        .await?;
        let mut keys = TableKeys {
            written_by_database: self
                .generated_columns(table)
                .await?
                .into_iter()
                .map(|name| (name, GENERATED))
                .collect(),
            ..TableKeys::default()
        };
        let listed: Vec<(String, bool, String, bool)> = sqlx::query_as(
            "SELECT name, \"unique\", origin, partial FROM pragma_index_list($1, $2) ORDER BY seq",
        )
        .bind(table.name())
        .bind(schema)
        .fetch_all(pool)
        .await?;
        for (name, unique, _, partial) in &listed {
            let names: Vec<Option<String>> =
                sqlx::query_scalar("SELECT name FROM pragma_index_info($1, $2) ORDER BY seqno")
                    .bind(name)
                    .bind(schema)
                    .fetch_all(pool)
                    .await?;
            let on_columns = names.iter().all(Option::is_some);
            keys.indexes.push(Index {
                name: name.clone(),
                columns: names.into_iter().map(Option::unwrap_or_default).collect(),
                unique: *unique && !*partial && on_columns,
            });
        }
        let pk: Vec<&(String, String, bool, i64)> = columns.iter().filter(|c| c.3 > 0).collect();
        let rowid_alias = pk.len() == 1
            && pk[0].1.eq_ignore_ascii_case("INTEGER")
            && !listed.iter().any(|l| l.2 == "pk");
        if rowid_alias {
            keys.indexes.insert(
                0,
                Index {
                    name: "rowid".into(),
                    columns: vec![pk[0].0.clone()],
                    unique: true,
                },
            );
        }
        for (name, _, declared_not_null, pk) in &columns {
            let not_null = *declared_not_null
                || (*pk > 0 && (rowid_alias || !holds_null(self, table, name).await?));
            if not_null {
                keys.not_null.push(name.clone());
            }
        }
        Ok(keys)
    }

    async fn column_definition_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, Option<String>)>, DatabaseError> {
        let pool = self;

        Ok({
            let declared: Vec<(String, String)> = sqlx::query_as(
                "SELECT name, type FROM pragma_table_xinfo($1, COALESCE($2, 'main')) \
                     WHERE hidden <> 1 ORDER BY cid",
            )
            .bind(table.name())
            .bind(table.schema())
            .fetch_all(pool)
            .await?;
            let create: Option<String> = sqlx::query_scalar(
                "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = $1 COLLATE NOCASE",
            )
            .bind(table.name())
            .fetch_optional(pool)
            .await?;
            let collations = create.as_deref().map(sqlite_collations).unwrap_or_default();
            declared
                .into_iter()
                .map(|(name, declared)| {
                    let collation = collations
                        .iter()
                        .find(|(column, _)| column.eq_ignore_ascii_case(&name))
                        .map_or_else(|| "BINARY".to_owned(), |(_, c)| c.clone());
                    (name, declared, Some(collation))
                })
                .collect()
        })
    }

    async fn delete_action_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError> {
        let pool = self;

        Ok({
            sqlx::query_as(
                    "SELECT m.name, 'foreign key ' || p.id || ' (' || group_concat(p.\"from\", ', ') || ')', \
                     p.on_delete FROM sqlite_schema m, pragma_foreign_key_list(m.name) p \
                     WHERE m.type = 'table' AND p.\"table\" = $1 COLLATE NOCASE \
                     AND p.on_delete IN ('CASCADE', 'SET NULL', 'SET DEFAULT') \
                     GROUP BY m.name, p.id ORDER BY m.name, p.id",
                )
                .bind(table.name())
                .fetch_all(pool)
                .await?
        })
    }

    async fn database_now(&self) -> Result<DateTime<Utc>, DatabaseError> {
        let _ = self;

        Ok(Utc::now())
    }

    async fn trigger_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError> {
        let pool = self;

        Ok({
            let listed: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT tbl_name, name, sql FROM sqlite_schema \
                     WHERE type = 'trigger' AND tbl_name = $1 COLLATE NOCASE ORDER BY name",
            )
            .bind(table.name())
            .fetch_all(pool)
            .await?;
            listed
                .into_iter()
                .map(|(t, name, sql)| (t, name, sqlite_trigger_fires(&sql)))
                .collect()
        })
    }

    async fn run_and_roll_back(
        &self,
        statement: &Statement,
    ) -> Result<(u64, Duration, Option<u64>), DatabaseError> {
        let pool = self;

        let query = statement.text().to_sqlx();
        let mut tx = pool.begin().await?;
        let started = Instant::now();
        let done = bind_values!(sqlx::query(query), statement.params())
            .execute(&mut *tx)
            .await?;
        let took = started.elapsed();
        tx.rollback().await?;
        Ok((done.rows_affected(), took, None))
    }

    async fn statistics_version(&self, table: &Ident) -> Result<Option<String>, sqlx::Error> {
        let pool = self;

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
        let schema = Ident::parse(schema).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
        let text = SqlText::new("SELECT group_concat(coalesce(idx, '') || '=' || stat, ';') FROM ")
            .ident(&schema)
            .push(".sqlite_stat1 WHERE tbl = $1");
        sqlx::query_scalar(text.to_sqlx())
            .bind(table.name())
            .fetch_optional(pool)
            .await
            .map(Option::flatten)
    }
}

/// SQLite: true when some row of `table` holds NULL in `column` (or the
/// column's name cannot be quoted). SQLite lets a primary key that is
/// not the rowid hold NULL unless declared NOT NULL; such a key is
/// trusted as not null while no row holds one (an index lookup).
async fn holds_null(
    pool: &sqlx::SqlitePool,
    table: &Ident,
    column: &str,
) -> Result<bool, DatabaseError> {
    let Ok(column) = Ident::parse(column) else {
        return Ok(true);
    };
    let probe = Statement::new("SELECT 1 FROM ")
        .ident(table)
        .push(" WHERE ")
        .ident(&column)
        .push(" IS NULL LIMIT 1");
    let row = bind_values!(sqlx::query(probe.text().to_sqlx()), probe.params())
        .fetch_optional(pool)
        .await?;
    Ok(row.is_some())
}

/// The names `sql` lists for `table` (its first two parameters the table's
/// name then its schema).
async fn column_names(
    pool: &sqlx::SqlitePool,
    table: &Ident,
    sql: &'static str,
) -> Result<Vec<String>, DatabaseError> {
    Ok(sqlx::query_scalar(sql)
        .bind(table.name())
        .bind(table.schema())
        .fetch_all(pool)
        .await?)
}

//! What PostgreSQL's catalogue (`pg_catalog`) says about a target table.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};
use std::time::{Duration, Instant};

use super::partitions::LOCK_TIMEOUT;
use crate::dialect::catalogue::Catalogue;
use crate::enqueuing_session::SessionMismatch;
use crate::error::DatabaseError;
use crate::kept_partitions::{KeptPartition, KeptPartitions};
use crate::session_defaults::SessionsZone;
use crate::sql::SqlValue;
use crate::sql::{Ident, SqlText, Statement, bind_values};
use crate::target_table::keys::GENERATED;
use crate::target_table::triggers::may_write;
use crate::target_table::{Index, NonTransactional, RangePartitions, TableKeys};

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

#[async_trait]
impl Catalogue for sqlx::PgPool {
    async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        column_names(
            self,
            table,
            concat!(
                "SELECT a.attname::text ",
                postgres_columns!(),
                " ORDER BY a.attnum"
            ),
        )
        .await
    }

    /// Identity columns `GENERATED ALWAYS` too.
    async fn generated_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        column_names(
            self,
            table,
            concat!(
                "SELECT a.attname::text ",
                postgres_columns!(),
                " AND (a.attgenerated <> '' OR a.attidentity = 'a') ORDER BY a.attnum"
            ),
        )
        .await
    }

    async fn same_table(&self, a: &Ident, b: &Ident) -> Result<bool, DatabaseError> {
        let pool = self;
        Ok({
            let same: Option<bool> = sqlx::query_scalar("SELECT to_regclass($1) = to_regclass($2)")
                .bind(a.quoted())
                .bind(b.quoted())
                .fetch_one(pool)
                .await?;
            same.unwrap_or(false)
        })
    }

    async fn is_base_table(&self, table: &Ident) -> Result<bool, DatabaseError> {
        let pool = self;
        Ok({
            let base: Option<bool> = sqlx::query_scalar(
                "SELECT relkind IN ('r', 'p') FROM pg_catalog.pg_class WHERE oid = to_regclass($1)",
            )
            .bind(table.quoted())
            .fetch_optional(pool)
            .await?;
            base == Some(true)
        })
    }

    async fn column_type(
        &self,
        table: &Ident,
        column: &str,
    ) -> Result<Option<String>, DatabaseError> {
        let pool = self;
        Ok({
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
        })
    }

    async fn explain(&self, statement: &Statement) -> Result<Vec<String>, DatabaseError> {
        let pool = self;
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

    async fn table_keys(&self, table: &Ident) -> Result<TableKeys, DatabaseError> {
        let pool = self;

        let indexes: Vec<(String, bool, Vec<Option<String>>)> = sqlx::query_as(
                    "SELECT i.relname::text, \
                       x.indisunique AND x.indisvalid AND x.indpred IS NULL AND x.indexprs IS NULL, \
                       ARRAY(SELECT a.attname::text FROM unnest(x.indkey[0:x.indnkeyatts - 1]) \
                             WITH ORDINALITY AS k(attnum, n) \
                             LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum \
                             ORDER BY k.n) \
                     FROM pg_catalog.pg_index x \
                     JOIN pg_catalog.pg_class c ON c.oid = x.indrelid \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid \
                     WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
                     ORDER BY x.indisprimary DESC, i.relname",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
        let not_null: Vec<String> = sqlx::query_scalar(
            "SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                     JOIN pg_catalog.pg_class c ON c.oid = a.attrelid \
                     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                     WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
                     AND a.attnum > 0 AND NOT a.attisdropped AND a.attnotnull ORDER BY a.attnum",
        )
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?;
        let generated: Vec<String> = sqlx::query_scalar(
                    "SELECT a.attname::text FROM pg_catalog.pg_attribute a \
                     WHERE a.attrelid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
                     AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> '' ORDER BY a.attnum",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?;
        Ok(TableKeys {
            written_by_database: generated
                .into_iter()
                .map(|name| (name, GENERATED))
                .collect(),
            indexes: indexes
                .into_iter()
                .map(|(name, unique, columns)| Index {
                    name,
                    unique: unique && columns.iter().all(Option::is_some),
                    columns: columns.into_iter().map(Option::unwrap_or_default).collect(),
                })
                .collect(),
            not_null,
        })
    }

    async fn column_definition_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, Option<String>)>, DatabaseError> {
        let pool = self;

        Ok({
            sqlx::query_as(concat!(
                    "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
                     (SELECT collname::text FROM pg_catalog.pg_collation WHERE oid = a.attcollation) ",
                    postgres_columns!(),
                    " ORDER BY a.attnum"
                ))
                .bind(table.schema())
                .bind(table.name())
                .fetch_all(pool)
                .await?
        })
    }

    async fn table_definition(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        Ok(sqlx::query_scalar(POSTGRES_TABLE_DEFINITION)
            .bind(table.schema())
            .bind(table.name())
            .fetch_optional(self)
            .await?
            .flatten())
    }

    async fn range_partitions(
        &self,
        table: &Ident,
    ) -> Result<Option<RangePartitions>, DatabaseError> {
        super::partitions::range_partitions(self, table).await
    }

    async fn partitions_below(
        &self,
        layout: &RangePartitions,
        bound: &SqlValue,
    ) -> Result<Vec<Ident>, DatabaseError> {
        super::partitions::partitions_below(self, layout, bound).await
    }

    async fn partition_drop_blocker(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        super::partitions::partition_drop_blocker(self, table).await
    }

    async fn delete_action_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError> {
        let pool = self;

        Ok({
            sqlx::query_as(
                "SELECT c.conrelid::regclass::text, c.conname::text, \
                     CASE c.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' \
                     ELSE 'SET DEFAULT' END \
                     FROM pg_catalog.pg_constraint c \
                     WHERE c.contype = 'f' AND c.confrelid = to_regclass($1) \
                     AND c.confdeltype IN ('c', 'n', 'd') AND c.conparentid = 0 \
                     ORDER BY 1, 2",
            )
            .bind(table.quoted())
            .fetch_all(pool)
            .await?
        })
    }

    async fn database_now(&self) -> Result<DateTime<Utc>, DatabaseError> {
        let pool = self;

        Ok({
            sqlx::query_scalar("SELECT clock_timestamp()")
                .fetch_one(pool)
                .await?
        })
    }

    async fn trigger_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError> {
        let pool = self;

        Ok({
            sqlx::query_as(
                "SELECT tgrelid::regclass::text, tgname::text, \
                     concat_ws(' ', CASE WHEN tgtype & 2 <> 0 THEN 'BEFORE' \
                       WHEN tgtype & 64 <> 0 THEN 'INSTEAD OF' ELSE 'AFTER' END, \
                       concat_ws(' OR ', CASE WHEN tgtype & 4 <> 0 THEN 'INSERT' END, \
                         CASE WHEN tgtype & 8 <> 0 THEN 'DELETE' END, \
                         CASE WHEN tgtype & 16 <> 0 THEN 'UPDATE' END, \
                         CASE WHEN tgtype & 32 <> 0 THEN 'TRUNCATE' END)) \
                     FROM pg_catalog.pg_trigger \
                     WHERE tgrelid = to_regclass($1) AND NOT tgisinternal \
                     UNION ALL \
                     SELECT ev_class::regclass::text, rulename::text, \
                       'RULE ON ' || CASE ev_type WHEN '2' THEN 'UPDATE' WHEN '3' THEN 'INSERT' \
                       ELSE 'DELETE' END \
                     FROM pg_catalog.pg_rewrite \
                     WHERE ev_class = to_regclass($1) AND ev_type <> '1' \
                     ORDER BY 2",
            )
            .bind(table.quoted())
            .fetch_all(pool)
            .await?
        })
    }

    async fn attach_kept_partition(
        &self,
        kept: &KeptPartitions,
    ) -> Result<Option<KeptPartition>, DatabaseError> {
        let pool = self;
        let mut tx = pool.begin().await?;
        sqlx::query(LOCK_TIMEOUT).execute(&mut *tx).await?;
        let take = kept.take_one();
        let taken: Option<(String, String, String, i64)> =
            bind_values!(sqlx::query_as(take.text().to_sqlx()), take.params())
                .fetch_optional(&mut *tx)
                .await?;
        // None left: the transaction rolls back, having changed nothing.
        let Some((name, was, bound, rows)) = taken else {
            return Ok(None);
        };
        let partition = KeptPartition::from_row(&name, &was, bound, rows)?;
        for statement in kept.attach(&partition)? {
            bind_values!(sqlx::query(statement.text().to_sqlx()), statement.params())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(Some(partition))
    }

    async fn run_and_roll_back(
        &self,
        statement: &Statement,
    ) -> Result<(u64, Duration, Option<u64>), DatabaseError> {
        let pool = self;

        let query = statement.text().to_sqlx();
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

    async fn schema_of(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        let pool = self;
        Ok(sqlx::query_scalar(
            "SELECT n.nspname::text FROM pg_catalog.pg_class c \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = to_regclass($1)",
        )
        .bind(table.quoted())
        .fetch_optional(pool)
        .await?)
    }

    async fn estimate_rows(&self, statement: &Statement) -> Result<Option<i64>, DatabaseError> {
        let pool = self;
        let text = SqlText::new("EXPLAIN (FORMAT JSON) ").append(statement.text());
        let query = sqlx::query_scalar(AssertSqlSafe(text.as_str().to_owned())).persistent(false);
        let plan: serde_json::Value = bind_values!(query, statement.params())
            .fetch_one(pool)
            .await?;
        Ok(plan[0]["Plan"]["Plan Rows"]
            .as_f64()
            .map(|rows| rows.round() as i64))
    }

    async fn foreign_table(&self, table: &Ident) -> Result<Vec<NonTransactional>, DatabaseError> {
        let pool = self;
        let server: Option<String> = sqlx::query_scalar(
            "SELECT s.srvname::text FROM pg_catalog.pg_foreign_table f \
             JOIN pg_catalog.pg_foreign_server s ON s.oid = f.ftserver \
             WHERE f.ftrelid = to_regclass($1)",
        )
        .bind(table.quoted())
        .fetch_optional(pool)
        .await?;
        Ok(server
            .map(|server| NonTransactional {
                table: table.to_string(),
                engine: format!("foreign data wrapper (server {server})"),
                via: None,
            })
            .into_iter()
            .collect())
    }

    async fn sessions_setting(&self, name: &str) -> Result<Option<String>, DatabaseError> {
        let pool = self;
        let database: Option<String> = sqlx::query_scalar(POSTGRES_DATABASE_SETTING)
            .bind(name)
            .fetch_optional(pool)
            .await?;
        if database.is_some() {
            return Ok(database);
        }
        // Another role may not read the files: it does without.
        Ok(sqlx::query_scalar(POSTGRES_FILE_SETTING)
            .bind(name)
            .fetch_optional(pool)
            .await
            .ok()
            .flatten())
    }

    async fn session_mismatch(
        &self,
        enqueued: &crate::EnqueuingSession,
        table: &Ident,
    ) -> Result<Option<SessionMismatch>, DatabaseError> {
        super::sessions::session_mismatch(self, enqueued, table).await
    }

    async fn non_transactional_writes(
        &self,
        table: &Ident,
    ) -> Result<Vec<NonTransactional>, DatabaseError> {
        self.foreign_table(table).await
    }

    async fn functions_that_may_write(
        &self,
        called: &[String],
    ) -> Result<Vec<String>, DatabaseError> {
        let pool = self;
        let builtin: &[&str] = &[
            "nextval",
            "setval",
            "pg_advisory_lock",
            "pg_advisory_lock_shared",
            "pg_try_advisory_lock",
            "pg_try_advisory_lock_shared",
        ];
        let user: Vec<String> = {
            sqlx::query_scalar(
                "SELECT DISTINCT lower(p.proname::text) FROM pg_catalog.pg_proc p \
                     JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
                     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
                     AND p.provolatile = 'v' AND lower(p.proname::text) = ANY($1)",
            )
            .bind(called)
            .fetch_all(pool)
            .await?
        };
        Ok(may_write(called, builtin, &user))
    }

    async fn sessions_zone(
        &self,
        at: &[DateTime<Utc>],
    ) -> Result<Option<SessionsZone>, DatabaseError> {
        let pool = self;
        let mut offsets = Vec::with_capacity(at.len());
        let name = {
            let name = match self.sessions_setting("TimeZone").await? {
                Some(name) => name,
                None => {
                    sqlx::query_scalar("SELECT current_setting('log_timezone')")
                        .fetch_one(pool)
                        .await?
                }
            };
            for instant in at {
                // An unknown name is an error of the statement: no offset.
                let offset = sqlx::query_scalar::<_, i64>(POSTGRES_OFFSET)
                    .bind(instant)
                    .bind(&name)
                    .fetch_one(pool)
                    .await
                    .ok();
                offsets.push(offset);
            }
            name
        };
        Ok(Some(SessionsZone { name, offsets }))
    }

    async fn statistics_version(&self, table: &Ident) -> Result<Option<String>, sqlx::Error> {
        let pool = self;

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
}

/// Table `$2` in schema `$1` (as `postgres_columns!` finds it) described
/// for [`Catalogue::table_definition`]: its columns (type, a domain's base
/// type, nullability, how the database writes it, the role's privileges)
/// and indexes (kind, columns, operator classes, expressions, predicate,
/// validity) by number, never by a name a schema qualifies. Only a plain
/// table without triggers (those enforcing foreign keys, either way,
/// included), rules, row policies, partitions or children has a row.
const POSTGRES_TABLE_DEFINITION: &str = "SELECT concat_ws(E'\\n', \
       current_setting('server_version_num'), c.relpersistence::text, \
       pg_has_role(c.relowner, 'USAGE')::text, \
       has_table_privilege(c.oid, 'SELECT, INSERT, UPDATE, DELETE')::text, \
       (SELECT string_agg(concat_ws(' ', quote_ident(a.attname), format_type(a.atttypid, a.atttypmod), \
           (SELECT format_type(t.typbasetype, t.typtypmod) FROM pg_catalog.pg_type t \
            WHERE t.oid = a.atttypid AND t.typtype = 'd'), \
           a.attnotnull, a.attgenerated, a.attidentity, a.attcollation, \
           has_column_privilege(c.oid, a.attnum, 'SELECT'), has_column_privilege(c.oid, a.attnum, 'INSERT'), \
           has_column_privilege(c.oid, a.attnum, 'UPDATE'), has_column_privilege(c.oid, a.attnum, 'REFERENCES')), \
           E'\\n' ORDER BY a.attnum) \
        FROM pg_catalog.pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), \
       (SELECT string_agg(concat_ws(' ', i.indisunique, i.indisprimary, i.indkey::text, i.indclass::text, \
           i.indcollation::text, i.indoption::text, pg_get_expr(i.indexprs, i.indrelid), \
           pg_get_expr(i.indpred, i.indrelid), i.indisvalid, i.indisready, \
           (SELECT x.relam FROM pg_catalog.pg_class x WHERE x.oid = i.indexrelid)), \
           E'\\n' ORDER BY i.indkey::text, i.indexrelid) \
        FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid)) \
     FROM pg_catalog.pg_class c \
     WHERE c.oid = to_regclass(concat_ws('.', quote_ident($1), quote_ident($2))) \
       AND c.relkind = 'r' AND NOT c.relispartition AND NOT c.relhassubclass \
       AND NOT c.relhastriggers AND NOT c.relhasrules AND NOT c.relrowsecurity";

/// PostgreSQL: where the next WAL record will be inserted, as text.
const WAL_POSITION: &str = "SELECT pg_current_wal_insert_lsn()::text";

/// PostgreSQL: WAL bytes inserted since position `$1`.
const WAL_SINCE: &str = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint";

/// The database's own value of setting `$1` (`ALTER DATABASE … SET`), if set.
const POSTGRES_DATABASE_SETTING: &str = "SELECT substr(c, strpos(c, '=') + 1) \
     FROM pg_catalog.pg_db_role_setting s CROSS JOIN LATERAL unnest(s.setconfig) AS c \
     WHERE s.setrole = 0 \
       AND s.setdatabase = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) \
       AND lower(split_part(c, '=', 1)) = lower($1) \
     LIMIT 1";

/// The server's value of setting `$1` from its configuration files, if applied.
const POSTGRES_FILE_SETTING: &str = "SELECT setting FROM pg_catalog.pg_file_settings \
     WHERE lower(name) = lower($1) AND applied ORDER BY seqno DESC LIMIT 1";

/// Seconds the zone named `$2` is ahead of UTC at `$1`.
const POSTGRES_OFFSET: &str = "SELECT (EXTRACT(EPOCH FROM ($1::timestamptz AT TIME ZONE $2)) \
     - EXTRACT(EPOCH FROM ($1::timestamptz AT TIME ZONE 'UTC')))::bigint";

/// The names `sql` lists for `table` (its first two parameters the table's
/// schema then its name).
async fn column_names(
    pool: &sqlx::PgPool,
    table: &Ident,
    sql: &'static str,
) -> Result<Vec<String>, DatabaseError> {
    Ok(sqlx::query_scalar(sql)
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?)
}

//! What MySQL's and MariaDB's catalogue (`information_schema`) says
//! about a target table.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};
use std::time::{Duration, Instant};

use crate::dialect::catalogue::Catalogue;
use crate::error::DatabaseError;
use crate::session_defaults::SessionsZone;
use crate::sql::{Ident, SqlText, SqlValue, Statement, bind_values};
use crate::target_table::keys::{GENERATED, SET_ON_UPDATE};
use crate::target_table::triggers::{may_write, reachable_words};
use crate::target_table::{Index, NonTransactional, RangePartitions, TableKeys};

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

/// Table `$2` in database `$1` (as `mysql_table!` finds it) described for
/// [`Catalogue::table_definition`]: the server's version and the settings
/// that change how statements are read or logged, the table's engine and
/// collation, its columns (type, nullability, what the server writes
/// itself, collation, the user's privileges) and its indexes. Only a base
/// table without partitions, triggers or foreign keys (either way) has a
/// row; `NULL` when a list was cut at `group_concat_max_len`.
const MYSQL_TABLE_DEFINITION: &str = "SELECT CASE \
       WHEN COALESCE(LENGTH(d.cols), 0) < @@group_concat_max_len \
        AND COALESCE(LENGTH(d.idx), 0) < @@group_concat_max_len \
       THEN CONCAT_WS('\\n', @@version, @@log_bin, @@binlog_format, @@sql_mode, \
            @@lower_case_table_names, d.engine, d.collation, d.cols, d.idx) END \
     FROM (SELECT CAST(t.engine AS CHAR) AS engine, CAST(t.table_collation AS CHAR) AS collation, \
       (SELECT GROUP_CONCAT(CONCAT_WS(' ', c.column_name, c.column_type, c.is_nullable, c.extra, \
           COALESCE(c.generation_expression, ''), COALESCE(c.collation_name, ''), c.privileges) \
           ORDER BY c.ordinal_position SEPARATOR '\\n') \
        FROM information_schema.columns c \
        WHERE c.table_schema = t.table_schema AND c.table_name = t.table_name) AS cols, \
       (SELECT GROUP_CONCAT(CONCAT_WS(' ', s.index_name, s.non_unique, s.seq_in_index, s.column_name, \
           COALESCE(s.sub_part, ''), s.index_type) ORDER BY s.index_name, s.seq_in_index SEPARATOR '\\n') \
        FROM information_schema.statistics s \
        WHERE s.table_schema = t.table_schema AND s.table_name = t.table_name) AS idx \
       FROM information_schema.tables t \
       WHERE t.table_schema = COALESCE($1, DATABASE()) AND BINARY t.table_name = BINARY $2 \
         AND t.table_type = 'BASE TABLE' \
         AND LOWER(COALESCE(t.create_options, '')) NOT LIKE '%partitioned%' \
         AND NOT EXISTS (SELECT 1 FROM information_schema.triggers g \
             WHERE g.event_object_schema = t.table_schema AND g.event_object_table = t.table_name) \
         AND NOT EXISTS (SELECT 1 FROM information_schema.referential_constraints r \
             WHERE (r.constraint_schema = t.table_schema AND r.table_name = t.table_name) \
                OR (r.unique_constraint_schema = t.table_schema \
                    AND r.referenced_table_name = t.table_name))) d";

#[async_trait]
impl Catalogue for sqlx::MySqlPool {
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

    async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        column_names(
            self,
            table,
            concat!(
                "SELECT CAST(column_name AS CHAR) ",
                mysql_columns!(),
                " ORDER BY ordinal_position"
            ),
        )
        .await
    }

    async fn generated_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError> {
        column_names(
            self,
            table,
            concat!(
                "SELECT CAST(column_name AS CHAR) ",
                mysql_columns!(),
                " AND (LOWER(extra) LIKE '%virtual generated%' \
               OR LOWER(extra) LIKE '%stored generated%') ORDER BY ordinal_position"
            ),
        )
        .await
    }

    async fn same_table(&self, a: &Ident, b: &Ident) -> Result<bool, DatabaseError> {
        let pool = self;
        Ok({
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
        })
    }

    async fn is_base_table(&self, table: &Ident) -> Result<bool, DatabaseError> {
        let pool = self;
        Ok({
            let base: Option<i64> = crate::positional::query_scalar(concat!(
                "SELECT CAST(table_type = 'BASE TABLE' AS SIGNED) FROM information_schema.tables ",
                mysql_table!()
            ))
            .bind(table.schema())
            .bind(table.name())
            .fetch_optional(pool)
            .await?;
            base == Some(1)
        })
    }

    async fn column_type(
        &self,
        table: &Ident,
        column: &str,
    ) -> Result<Option<String>, DatabaseError> {
        let pool = self;
        Ok({
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
        })
    }

    async fn explain(&self, statement: &Statement) -> Result<Vec<String>, DatabaseError> {
        let pool = self;
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

    async fn table_keys(&self, table: &Ident) -> Result<TableKeys, DatabaseError> {
        let pool = self;

        use crate::positional as sqlx;
        let parts: Vec<(String, i64, Option<String>)> = sqlx::query_as(concat!(
            "SELECT CAST(index_name AS CHAR), CAST(non_unique = 0 AND sub_part IS NULL AS SIGNED), \
                     CAST(column_name AS CHAR) FROM information_schema.statistics ",
            mysql_table!(),
            " ORDER BY index_name = 'PRIMARY' DESC, index_name, seq_in_index"
        ))
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?;
        let mut keys = TableKeys::default();
        for (name, unique, column) in parts {
            match keys.indexes.last_mut() {
                Some(index) if index.name == name => {
                    index.unique &= unique == 1 && column.is_some();
                    index.columns.push(column.unwrap_or_default());
                }
                _ => keys.indexes.push(Index {
                    name,
                    unique: unique == 1 && column.is_some(),
                    columns: vec![column.unwrap_or_default()],
                }),
            }
        }
        keys.not_null = sqlx::query_scalar(concat!(
            "SELECT CAST(column_name AS CHAR) ",
            mysql_columns!(),
            " AND is_nullable = 'NO' ORDER BY ordinal_position"
        ))
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?;
        // Not MySQL 8's `DEFAULT_GENERATED`: a default the database
        // computes when a row is inserted, not a value it writes.
        let extras: Vec<(String, String)> = sqlx::query_as(concat!(
            "SELECT CAST(column_name AS CHAR), CAST(LOWER(extra) AS CHAR) ",
            mysql_columns!(),
            " AND (LOWER(extra) LIKE '%virtual generated%' \
                       OR LOWER(extra) LIKE '%stored generated%' \
                       OR LOWER(extra) LIKE '%on update%') ORDER BY ordinal_position"
        ))
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?;
        keys.written_by_database = extras
            .into_iter()
            .map(|(name, extra)| {
                let how = if extra.contains(" generated") {
                    GENERATED
                } else {
                    SET_ON_UPDATE
                };
                (name, how)
            })
            .collect();
        Ok(keys)
    }

    async fn table_definition(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        Ok(crate::positional::query_scalar(MYSQL_TABLE_DEFINITION)
            .bind(table.schema())
            .bind(table.name())
            .fetch_optional(self)
            .await?
            .flatten())
    }

    async fn column_definition_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, Option<String>)>, DatabaseError> {
        let pool = self;

        Ok({
            crate::positional::query_as(concat!(
                "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR), \
                     CAST(collation_name AS CHAR) ",
                mysql_columns!(),
                " ORDER BY ordinal_position"
            ))
            .bind(table.schema())
            .bind(table.name())
            .fetch_all(pool)
            .await?
        })
    }

    async fn delete_action_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError> {
        let pool = self;

        Ok({
            crate::positional::query_as(
                "SELECT CAST(IF(constraint_schema = COALESCE($1, DATABASE()), table_name, \
                     CONCAT(constraint_schema, '.', table_name)) AS CHAR), \
                     CAST(constraint_name AS CHAR), CAST(delete_rule AS CHAR) \
                     FROM information_schema.referential_constraints \
                     WHERE unique_constraint_schema = COALESCE($1, DATABASE()) \
                     AND BINARY referenced_table_name = BINARY $2 \
                     AND delete_rule IN ('CASCADE', 'SET NULL', 'SET DEFAULT') \
                     ORDER BY 1, 2",
            )
            .bind(table.schema())
            .bind(table.name())
            .fetch_all(pool)
            .await?
        })
    }

    async fn database_now(&self) -> Result<DateTime<Utc>, DatabaseError> {
        let pool = self;

        Ok({
            let utc: chrono::NaiveDateTime = sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
                .fetch_one(pool)
                .await?;
            utc.and_utc()
        })
    }

    async fn trigger_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError> {
        let pool = self;

        Ok({
            crate::positional::query_as(
                "SELECT CAST(event_object_table AS CHAR), CAST(trigger_name AS CHAR), \
                     CAST(CONCAT(action_timing, ' ', event_manipulation) AS CHAR) \
                     FROM information_schema.triggers \
                     WHERE event_object_schema = COALESCE($1, DATABASE()) \
                     AND BINARY event_object_table = BINARY $2 ORDER BY trigger_name",
            )
            .bind(table.schema())
            .bind(table.name())
            .fetch_all(pool)
            .await?
        })
    }

    async fn run_and_roll_back(
        &self,
        statement: &Statement,
    ) -> Result<(u64, Duration, Option<u64>), DatabaseError> {
        let pool = self;

        let query = statement.text().to_sqlx();
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

    async fn logs_statements(&self) -> Result<bool, DatabaseError> {
        let pool = self;
        let logs: i64 = sqlx::query_scalar(
            "SELECT CAST(@@log_bin = 1 AND @@binlog_format = 'STATEMENT' AS SIGNED)",
        )
        .fetch_one(pool)
        .await?;
        Ok(logs == 1)
    }

    async fn non_transactional_writes(
        &self,
        table: &Ident,
    ) -> Result<Vec<NonTransactional>, DatabaseError> {
        let pool = self;
        let mut found = Vec::new();
        let own: Option<String> = crate::positional::query_scalar(
            "SELECT CAST(t.engine AS CHAR) FROM information_schema.tables t \
             JOIN information_schema.engines e ON e.engine = t.engine \
             WHERE COALESCE(e.transactions, 'NO') <> 'YES' \
             AND t.table_schema = COALESCE($1, DATABASE()) AND BINARY t.table_name = BINARY $2",
        )
        .bind(table.schema())
        .bind(table.name())
        .fetch_optional(pool)
        .await?;
        if let Some(engine) = own {
            found.push(NonTransactional {
                table: table.to_string(),
                engine,
                via: None,
            });
        }
        let triggers: Vec<(String, String)> = crate::positional::query_as(
            "SELECT CAST(trigger_name AS CHAR), CAST(action_statement AS CHAR) \
             FROM information_schema.triggers \
             WHERE event_object_schema = COALESCE($1, DATABASE()) \
             AND BINARY event_object_table = BINARY $2 ORDER BY trigger_name",
        )
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?;
        if triggers.is_empty() {
            return Ok(found);
        }
        // The server's own schemas aside: no application trigger writes
        // them, and their log tables are not transactional.
        let candidates: Vec<(String, String, String)> = crate::positional::query_as(
            "SELECT CAST(t.table_schema AS CHAR), CAST(t.table_name AS CHAR), \
             CAST(t.engine AS CHAR) FROM information_schema.tables t \
             JOIN information_schema.engines e ON e.engine = t.engine \
             WHERE COALESCE(e.transactions, 'NO') <> 'YES' AND t.table_schema NOT IN \
             ('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1, 2",
        )
        .fetch_all(pool)
        .await?;
        if candidates.is_empty() {
            return Ok(found);
        }
        let routines: Vec<(String, String)> = crate::positional::query_as(
            "SELECT CAST(routine_name AS CHAR), CAST(COALESCE(routine_definition, '') AS CHAR) \
             FROM information_schema.routines WHERE routine_schema NOT IN \
             ('mysql', 'information_schema', 'performance_schema', 'sys')",
        )
        .fetch_all(pool)
        .await?;
        let home: String = match table.schema() {
            Some(schema) => schema.to_owned(),
            None => {
                sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
                    .fetch_one(pool)
                    .await?
            }
        };
        for (trigger, body) in triggers {
            let words = reachable_words(&body, &routines);
            for (schema, name, engine) in &candidates {
                // A table of another database is reached by a qualified
                // name: its database's name is a word of the body too.
                let named = |w: &str| words.contains(&w.to_lowercase());
                if named(name) && (*schema == home || named(schema)) {
                    let table = if *schema == home {
                        name.clone()
                    } else {
                        format!("{schema}.{name}")
                    };
                    found.push(NonTransactional {
                        table,
                        engine: engine.clone(),
                        via: Some(trigger.clone()),
                    });
                }
            }
        }
        Ok(found)
    }

    async fn functions_that_may_write(
        &self,
        called: &[String],
    ) -> Result<Vec<String>, DatabaseError> {
        let pool = self;
        let builtin: &[&str] = &["nextval", "setval", "get_lock"];
        let user: Vec<String> = {
            sqlx::query_scalar(
                "SELECT DISTINCT CAST(LOWER(routine_name) AS CHAR) \
                     FROM information_schema.routines WHERE routine_type = 'FUNCTION' \
                     AND sql_data_access NOT IN ('NO SQL', 'READS SQL DATA') \
                     AND routine_schema NOT IN ('mysql', 'information_schema', \
                     'performance_schema', 'sys')",
            )
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
            let (zone, system): (String, String) = sqlx::query_as(
                "SELECT CAST(@@global.time_zone AS CHAR), CAST(@@system_time_zone AS CHAR)",
            )
            .fetch_one(pool)
            .await?;
            for instant in at {
                // NULL where the server cannot convert to the zone.
                let offset: Option<i64> = sqlx::query_scalar(
                    "SELECT TIMESTAMPDIFF(SECOND, ?, CONVERT_TZ(?, '+00:00', @@global.time_zone))",
                )
                .bind(instant)
                .bind(instant)
                .fetch_one(pool)
                .await?;
                offsets.push(offset);
            }
            match zone.as_str() {
                "SYSTEM" => format!("SYSTEM ({system})"),
                _ => zone,
            }
        };
        Ok(Some(SessionsZone { name, offsets }))
    }

    async fn statistics_version(&self, table: &Ident) -> Result<Option<String>, sqlx::Error> {
        let pool = self;

        crate::positional::query_scalar(
                    "SELECT CAST(last_update AS CHAR) FROM mysql.innodb_table_stats \
                     WHERE database_name = COALESCE($1, DATABASE()) AND BINARY table_name = BINARY $2",
                )
                .bind(table.schema())
                .bind(table.name())
                .fetch_optional(pool)
                .await
    }
}

/// MySQL and MariaDB: InnoDB's current log sequence number (MariaDB and
/// MySQL before 8.0.30 call it `Innodb_lsn_current`, later MySQL
/// `Innodb_redo_log_current_lsn`); `None` when the server shows neither.
async fn redo_position(
    tx: &mut sqlx::Transaction<'_, sqlx::MySql>,
) -> Result<Option<u64>, DatabaseError> {
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

/// The names `sql` lists for `table` (its first two parameters the table's
/// schema then its name).
async fn column_names(
    pool: &sqlx::MySqlPool,
    table: &Ident,
    sql: &'static str,
) -> Result<Vec<String>, DatabaseError> {
    Ok(crate::positional::query_scalar(sql)
        .bind(table.schema())
        .bind(table.name())
        .fetch_all(pool)
        .await?)
}

//! What else a statement on a target table writes: the triggers that fire
//! with it ([`Store::triggers`]) and, on MySQL, the tables among everything
//! a sub-batch writes whose engine ignores a rollback
//! ([`Store::non_transactional_writes`]). Exactly-once rests on a
//! sub-batch's writes and its progress record committing or rolling back
//! together; a table that keeps what a rolled-back sub-batch wrote breaks it.

use std::collections::BTreeSet;

use crate::connection::Backend;
use crate::error::StoreError;
use crate::sql::Ident;
use crate::store::Store;

/// A trigger (PostgreSQL: or a rewrite rule) that fires when rows of a
/// table are changed, as the catalogue shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trigger {
    /// The table it is on, as the catalogue names it.
    pub table: String,
    /// Its name.
    pub name: String,
    /// When it fires: `BEFORE DELETE`, `AFTER UPDATE`, `RULE ON DELETE` …
    pub fires: String,
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` on `{}` ({})", self.name, self.table, self.fires)
    }
}

/// A table a sub-batch would write whose engine has no transactions: what
/// a rolled-back sub-batch wrote there stays written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NonTransactional {
    /// The table, qualified when it is in another database than the one it
    /// was reached from.
    pub table: String,
    /// Its engine (`MyISAM`, `Aria`, `MEMORY` …).
    pub engine: String,
    /// The trigger through which the sub-batch writes it, when it is not
    /// the table written directly.
    pub via: Option<String>,
}

impl std::fmt::Display for NonTransactional {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` uses the {} engine", self.table, self.engine)?;
        if let Some(via) = &self.via {
            write!(f, " (written by trigger {via})")?;
        }
        Ok(())
    }
}

impl Store {
    /// The triggers that fire when rows of `table` are inserted, updated or
    /// deleted, by name (PostgreSQL: user triggers and non-`SELECT` rules;
    /// the triggers that enforce foreign keys are not listed). Empty when
    /// there are none or no such table.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn triggers(&self, table: &Ident) -> Result<Vec<Trigger>, StoreError> {
        let rows: Vec<(String, String, String)> = match self.backend() {
            Backend::Sqlite(pool) => {
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
            }
            Backend::Postgres(pool) => {
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
            }
            Backend::MySql(pool) => {
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
            }
        };
        Ok(rows
            .into_iter()
            .map(|(table, name, fires)| Trigger { table, name, fires })
            .collect())
    }

    /// PostgreSQL: `table` itself when it is a foreign table, whose rows a
    /// foreign data wrapper writes on another server, committed apart from
    /// the local transaction (no two-phase commit): a sub-batch's change
    /// there and its progress record here could part.
    async fn foreign_table(&self, table: &Ident) -> Result<Vec<NonTransactional>, StoreError> {
        let Backend::Postgres(pool) = self.backend() else {
            return Ok(Vec::new());
        };
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

    /// MySQL: the tables among `table` and what its triggers write (the
    /// tables their bodies, and the bodies of the routines they call, name)
    /// whose engine has no transactions, as `information_schema.engines`
    /// says; a table of another database counts when the body names that
    /// database too. PostgreSQL: `table` when it is a foreign table. Empty
    /// on SQLite, where every table is transactional. A name in a trigger's body that only reads a table is
    /// counted too: the catalogue does not say which names are written.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn non_transactional_writes(
        &self,
        table: &Ident,
    ) -> Result<Vec<NonTransactional>, StoreError> {
        let pool = match self.backend() {
            Backend::MySql(pool) => pool,
            Backend::Postgres(_) => return self.foreign_table(table).await,
            Backend::Sqlite(_) => return Ok(Vec::new()),
        };
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
}

impl Store {
    /// Those of the functions `called` (lowercased names) that may leave a
    /// trace a rollback does not undo, or write at all: PostgreSQL's
    /// sequence functions and session advisory locks, and functions of
    /// the database's users declared `VOLATILE` (the default, and the only
    /// kind that may write); MySQL's sequence functions, `GET_LOCK`, and
    /// stored functions not declared `NO SQL` or `READS SQL DATA`. None on
    /// SQLite, whose SQL cannot define a function.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn functions_that_may_write(
        &self,
        called: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let builtin: &[&str] = match self.backend() {
            Backend::Sqlite(_) => return Ok(Vec::new()),
            Backend::Postgres(_) => &[
                "nextval",
                "setval",
                "pg_advisory_lock",
                "pg_advisory_lock_shared",
                "pg_try_advisory_lock",
                "pg_try_advisory_lock_shared",
            ],
            Backend::MySql(_) => &["nextval", "setval", "get_lock"],
        };
        let user: Vec<String> = match self.backend() {
            Backend::Sqlite(_) => Vec::new(),
            Backend::Postgres(pool) => {
                sqlx::query_scalar(
                    "SELECT DISTINCT lower(p.proname::text) FROM pg_catalog.pg_proc p \
                     JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace \
                     WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') \
                     AND p.provolatile = 'v' AND lower(p.proname::text) = ANY($1)",
                )
                .bind(called)
                .fetch_all(pool)
                .await?
            }
            Backend::MySql(pool) => {
                sqlx::query_scalar(
                    "SELECT DISTINCT CAST(LOWER(routine_name) AS CHAR) \
                     FROM information_schema.routines WHERE routine_type = 'FUNCTION' \
                     AND sql_data_access NOT IN ('NO SQL', 'READS SQL DATA') \
                     AND routine_schema NOT IN ('mysql', 'information_schema', \
                     'performance_schema', 'sys')",
                )
                .fetch_all(pool)
                .await?
            }
        };
        Ok(called
            .iter()
            .filter(|f| builtin.contains(&f.as_str()) || user.contains(f))
            .cloned()
            .collect())
    }
}

/// The words (identifiers, lowercased, quotes taken off) of `body` and of
/// the bodies of the `routines` it names, and of those they name, and so on.
fn reachable_words(body: &str, routines: &[(String, String)]) -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    let mut bodies = vec![body.to_owned()];
    let mut followed = BTreeSet::new();
    while let Some(body) = bodies.pop() {
        for word in identifier_words(&body) {
            if words.insert(word.clone()) {
                for (name, definition) in routines {
                    if name.eq_ignore_ascii_case(&word) && followed.insert(word.clone()) {
                        bodies.push(definition.clone());
                    }
                }
            }
        }
    }
    words
}

/// The identifier-like words of SQL `text`, lowercased: runs of letters,
/// digits, `_` and `$`, with backquotes and double quotes as separators (so
/// `` `db`.`log` `` gives `db` and `log`).
fn identifier_words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// When an SQLite trigger fires, read from its `CREATE TRIGGER` text:
/// `BEFORE DELETE`, `AFTER UPDATE OF …` (the text up to `ON`).
fn sqlite_trigger_fires(sql: &str) -> String {
    let upper: Vec<String> = sql
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .take_while(|w| w != "ON")
        .collect();
    let event = upper
        .iter()
        .position(|w| matches!(w.as_str(), "DELETE" | "INSERT" | "UPDATE"))
        .unwrap_or(0);
    let timing = if upper.iter().any(|w| w == "BEFORE") {
        "BEFORE"
    } else if upper.iter().any(|w| w == "INSTEAD") {
        "INSTEAD OF"
    } else {
        "AFTER"
    };
    format!("{timing} {}", upper.get(event).map_or("", String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_the_routines_a_trigger_calls() {
        let routines = vec![
            (
                "log_it".to_owned(),
                "INSERT INTO audit_log VALUES (1)".to_owned(),
            ),
            (
                "unused".to_owned(),
                "INSERT INTO other VALUES (1)".to_owned(),
            ),
            ("loop_a".to_owned(), "CALL loop_a()".to_owned()),
        ];
        let words = reachable_words(
            "BEGIN CALL log_it(); CALL loop_a(); UPDATE `db`.`Stats` SET n = n + 1; END",
            &routines,
        );
        for word in ["audit_log", "stats", "db", "log_it"] {
            assert!(words.contains(word), "{word}: {words:?}");
        }
        assert!(!words.contains("other"));
    }

    #[test]
    fn sqlite_trigger_timing_is_read_from_its_text() {
        assert_eq!(
            sqlite_trigger_fires("CREATE TRIGGER t BEFORE DELETE ON x BEGIN SELECT 1; END"),
            "BEFORE DELETE"
        );
        assert_eq!(
            sqlite_trigger_fires("create trigger t after update of a on x begin select 1; end"),
            "AFTER UPDATE"
        );
        assert_eq!(
            sqlite_trigger_fires("CREATE TRIGGER t DELETE ON x BEGIN SELECT 1; END"),
            "AFTER DELETE"
        );
    }
}

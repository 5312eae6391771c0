//! What else a statement on a target table writes: the triggers that fire
//! with it ([`Target::triggers`]) and, on MySQL, the tables among everything
//! a sub-batch writes whose engine ignores a rollback
//! ([`Target::non_transactional_writes`]). Exactly-once rests on a
//! sub-batch's writes and its progress record committing or rolling back
//! together; a table that keeps what a rolled-back sub-batch wrote breaks it.

use std::collections::BTreeSet;

use crate::connection::Target;
use crate::error::DatabaseError;
use crate::sql::Ident;

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

impl Target {
    /// The triggers that fire when rows of `table` are inserted, updated or
    /// deleted, by name (PostgreSQL: user triggers and non-`SELECT` rules;
    /// the triggers that enforce foreign keys are not listed). Empty when
    /// there are none or no such table.
    ///
    /// Errors: the database's, on reading its catalogue.
    pub async fn triggers(&self, table: &Ident) -> Result<Vec<Trigger>, DatabaseError> {
        let rows: Vec<(String, String, String)> = self.catalogue().trigger_rows(table).await?;
        Ok(rows
            .into_iter()
            .map(|(table, name, fires)| Trigger { table, name, fires })
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
    ) -> Result<Vec<NonTransactional>, DatabaseError> {
        self.catalogue().non_transactional_writes(table).await
    }
}

impl Target {
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
    ) -> Result<Vec<String>, DatabaseError> {
        self.catalogue().functions_that_may_write(called).await
    }
}

/// Those of `called` among `builtin` or `user`, the functions a database
/// says may write.
pub(crate) fn may_write(called: &[String], builtin: &[&str], user: &[String]) -> Vec<String> {
    called
        .iter()
        .filter(|f| builtin.contains(&f.as_str()) || user.contains(f))
        .cloned()
        .collect()
}

/// The words (identifiers, lowercased, quotes taken off) of `body` and of
/// the bodies of the `routines` it names, and of those they name, and so on.
pub(crate) fn reachable_words(body: &str, routines: &[(String, String)]) -> BTreeSet<String> {
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
pub(crate) fn sqlite_trigger_fires(sql: &str) -> String {
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

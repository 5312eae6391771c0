//! SQLite: one file, type affinity instead of column types, times as text,
//! `EXPLAIN QUERY PLAN` details (`SCAN t`, `SEARCH t USING INDEX i`).

pub(crate) mod catalogue;
pub(crate) mod health;

use super::{Dialect, LoopPick, plan_node, word_after};
use crate::operator_sql::Assignments;
use crate::sql::{Ident, IdentError, Statement};
use crate::undo::{KeyRange, UndoTable};

/// Begins a write transaction that takes the database's write lock at
/// once, so nothing read inside it is changed by another writer.
pub const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// `$1` the table, `$2` its schema (`NULL`: as a statement finds it): how
/// many tables of that name have a rowid, how many objects of that name
/// have none, and which rowid names its columns take, lower-cased and
/// space-separated.
pub(crate) const ROWID_NAMES: &str = "SELECT \
     (SELECT COUNT(*) FROM pragma_table_list($1) WHERE ($2 IS NULL OR schema = $2) \
      AND type = 'table' AND wr = 0), \
     (SELECT COUNT(*) FROM pragma_table_list($1) WHERE ($2 IS NULL OR schema = $2) \
      AND (type <> 'table' OR wr <> 0)), \
     (SELECT group_concat(lower(name), ' ') FROM pragma_table_xinfo($1, $2) \
      WHERE lower(name) IN ('rowid', '_rowid_', 'oid'))";

/// SQLite's dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sqlite;

impl Dialect for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn display_name(&self) -> &'static str {
        "SQLite"
    }

    fn speaks_url(&self, url: &str) -> bool {
        url.starts_with("sqlite:")
    }

    fn has_replicas(&self) -> bool {
        false
    }

    fn loop_pick(&self) -> LoopPick {
        LoopPick::InSubquery
    }

    fn picks_loop_rows_first(&self) -> bool {
        true
    }

    fn has_column_types(&self) -> bool {
        false
    }

    fn compares_times_as_text(&self) -> bool {
        true
    }

    fn regexp_operators(&self) -> Option<(&'static str, &'static str)> {
        None
    }

    fn scalar_extremes<'s>(&self, _least_greatest: &'s str, min_max: &'s str) -> &'s str {
        min_max
    }

    /// A unique index named for its table; none for a table in an attached
    /// database, whose index would be named in that schema.
    fn add_unique(&self, table: &Ident, key: &[Ident]) -> Result<Option<Statement>, IdentError> {
        if table.schema().is_some() {
            return Ok(None);
        }
        let names: Vec<&str> = key.iter().map(Ident::name).collect();
        let index = Ident::parse(&format!("{}_{}_archived", table.name(), names.join("_")))?;
        Ok(Some(
            Statement::new("CREATE UNIQUE INDEX ")
                .ident(&index)
                .push(" ON ")
                .ident(table)
                .push(" ("),
        ))
    }

    /// Each column declared as the live table declares it: SQLite's
    /// `CREATE TABLE … AS` keeps no `NOT NULL`, and no key can be added later.
    fn create_undo_table(&self, undo: &UndoTable, declared: &[String]) -> Option<Vec<Statement>> {
        undo.declared_columns(declared)
    }

    /// Two statements ([`UndoTable::keep_in_two`]): the sub-batch holds the
    /// only write lock, so nothing changes a row between them; three where
    /// `set` has no expression per column.
    fn keep_and_update(
        &self,
        undo: &UndoTable,
        set: &Assignments,
        rows: &dyn Fn(Statement) -> Statement,
        range: KeyRange<'_>,
    ) -> Vec<Statement> {
        undo.keep_in_two(self, set, rows, range)
            .unwrap_or_else(|| undo.keep_in_three(self, set, rows, range, false))
    }

    /// `a IS b`, SQLite's equality with `NULL`s alike.
    fn same_value(&self, statement: Statement, a: &Ident, b: &Ident) -> Statement {
        statement.ident(a).push(" IS ").ident(b)
    }

    fn as_dialect(&self) -> &dyn Dialect {
        self
    }

    fn column_list(&self, table: &Ident) -> Statement {
        // `table_xinfo`: `table_info` leaves generated columns out.
        Statement::new("SELECT group_concat(name, ',') FROM pragma_table_xinfo(")
            .value(table.name().into())
            .push(", ")
            .value(table.schema().unwrap_or("main").into())
            .push(") WHERE hidden <> 1")
    }

    fn index_in_plan_line(&self, line: &str) -> Option<String> {
        word_after(line, " USING COVERING INDEX ")
            .or_else(|| word_after(line, " USING INDEX "))
            .or_else(|| {
                line.contains(" USING INTEGER PRIMARY KEY")
                    .then(|| "INTEGER PRIMARY KEY (rowid)".to_owned())
            })
    }

    /// A `SCAN table` detail (a `SEARCH` uses an index or the rowid).
    fn full_scan_line(&self, plan: &[String], table: &str) -> Option<String> {
        plan.iter().map(|l| plan_node(l)).find(|l| {
            l.strip_prefix("SCAN ")
                .and_then(|rest| rest.split_whitespace().next())
                == Some(table)
        })
    }
}

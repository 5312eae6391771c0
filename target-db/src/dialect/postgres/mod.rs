//! PostgreSQL: `$N` placeholders, row locks, `statement_timeout` per
//! session, `EXPLAIN` trees (`Seq Scan on t`, `Index Scan using i`).

pub(crate) mod catalogue;
pub(crate) mod health;
pub(crate) mod partitions;
pub(crate) mod sessions;
mod undo;

use super::{Dialect, LoopPick, PartitionDrop, plan_node, word_after};
use chrono::{DateTime, Utc};

use crate::operator_sql::Assignments;
use crate::sql::{Ident, SqlValue, Statement};
use crate::undo::{KeyRange, UndoTable};

/// PostgreSQL's dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct Postgres;

impl Dialect for Postgres {
    fn name(&self) -> &'static str {
        "postgresql"
    }

    fn display_name(&self) -> &'static str {
        "PostgreSQL"
    }

    fn speaks_url(&self, url: &str) -> bool {
        url.starts_with("postgres://") || url.starts_with("postgresql://")
    }

    fn log_name(&self) -> Option<&'static str> {
        Some("WAL")
    }

    fn loop_pick(&self) -> LoopPick {
        LoopPick::KeyArray
    }

    fn bounds_statements_in_session(&self) -> bool {
        true
    }

    fn is_zoneless(&self, declared: &str) -> bool {
        declared.contains("without time zone") || declared == "date"
    }

    fn reads_zoneless_in_session_zone(&self) -> bool {
        true
    }

    /// `date_trunc` in the session's `TimeZone`.
    fn start_of_day(&self, at: DateTime<Utc>) -> Option<Statement> {
        Some(
            Statement::new("SELECT date_trunc('day', ")
                .value(SqlValue::Timestamp(at))
                .push("::timestamptz)"),
        )
    }

    fn clock_zone_remedy(&self, zone_named: bool) -> Option<&'static str> {
        (!zone_named).then_some(
            "name the zone with --db-time-zone, and Sluice's sessions read the clock there too",
        )
    }

    fn moves_rows_in_one_statement(&self) -> bool {
        true
    }

    fn create_table_like(&self, into: &Ident, table: &Ident) -> Option<Statement> {
        Some(
            Statement::new("CREATE TABLE ")
                .ident(into)
                .push(" (LIKE ")
                .ident(table)
                .push(")"),
        )
    }

    fn partition_drop(&self, table: &Ident, partition: &Ident) -> Option<PartitionDrop> {
        Some(partitions::partition_drop(table, partition))
    }

    fn drops_partitions(&self) -> bool {
        true
    }

    fn keeps_partitions(&self) -> bool {
        true
    }

    /// With `fillfactor = 40`: a revert marks every row it reaches, and
    /// with room left on each page that mark is a heap-only update (no
    /// index entry, a short WAL record) instead of a new version elsewhere.
    fn create_undo_table(&self, undo: &UndoTable, _declared: &[String]) -> Option<Vec<Statement>> {
        Some(undo.copied_columns(" WITH (fillfactor = 40)"))
    }

    fn keep_and_update(
        &self,
        undo: &UndoTable,
        set: &Assignments,
        rows: &dyn Fn(Statement) -> Statement,
        range: KeyRange<'_>,
    ) -> Vec<Statement> {
        undo::keep_and_update(undo, set, rows, range)
    }

    fn same_value(&self, statement: Statement, a: &Ident, b: &Ident) -> Statement {
        undo::same_value(statement, a, b)
    }

    fn keeps_and_updates_in_one_statement(&self) -> bool {
        true
    }

    fn restore_in_one_statement(
        &self,
        undo: &UndoTable,
        force: bool,
        range: KeyRange<'_>,
    ) -> Option<Statement> {
        Some(undo::restore(undo, force, range))
    }

    fn insert_overriding(&self) -> &'static str {
        " OVERRIDING SYSTEM VALUE"
    }

    fn as_dialect(&self) -> &dyn Dialect {
        self
    }

    fn column_list(&self, table: &Ident) -> Statement {
        Statement::new(
            "SELECT string_agg(attname::text, ',') FROM pg_catalog.pg_attribute \
             WHERE attnum > 0 AND NOT attisdropped AND attrelid = to_regclass(",
        )
        .value(table.quoted().into())
        .push(")")
    }

    /// `Index [Only] Scan using NAME` or `Bitmap Index Scan on NAME`.
    fn index_in_plan_line(&self, line: &str) -> Option<String> {
        word_after(line, " Scan using ").or_else(|| word_after(line, "Bitmap Index Scan on "))
    }

    /// A `Seq Scan on table`, or an index scan on it without an `Index
    /// Cond` (walking a whole index only for its order reads every row).
    fn full_scan_line(&self, plan: &[String], table: &str) -> Option<String> {
        let on_table = |line: &str| {
            line.split(" on ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
                == Some(table)
        };
        for (i, raw) in plan.iter().enumerate() {
            let line = plan_node(raw);
            if line.contains("Seq Scan on ") && on_table(&line) {
                return Some(line);
            }
            if (line.starts_with("Index Scan using ") || line.starts_with("Index Only Scan using "))
                && on_table(&line)
            {
                // Its detail lines run until the next plan node.
                let details = plan[i + 1..]
                    .iter()
                    .take_while(|l| !l.trim_start().starts_with("->"));
                if !details
                    .map(|l| l.trim())
                    .any(|l| l.starts_with("Index Cond:"))
                {
                    return Some(line);
                }
            }
        }
        None
    }
}

//! MySQL and MariaDB (InnoDB): `?` placeholders taken in order (written
//! `$N` and rewritten by `positional`), `ANSI_QUOTES` sessions,
//! `ON DUPLICATE KEY UPDATE`, limited `DELETE`/`UPDATE`, and `EXPLAIN`
//! rows read as `table T access A possible_keys P key K …` lines.

pub(crate) mod catalogue;
pub(crate) mod health;
pub(crate) mod partitions;
pub mod sessions;

use super::{Dialect, LockedPartitionDrop, LoopPick, alias, join_key, word_after};
use crate::operator_sql::{Assignments, Condition, OperatorSqlError};
use crate::sql::{Ident, Statement};
use crate::undo::{UndoTable, qualified};

/// MySQL's and MariaDB's dialect.
#[derive(Debug, Clone, Copy, Default)]
pub struct MySql;

impl Dialect for MySql {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn display_name(&self) -> &'static str {
        "MySQL"
    }

    fn speaks_url(&self, url: &str) -> bool {
        url.starts_with("mysql://") || url.starts_with("mariadb://")
    }

    fn log_name(&self) -> Option<&'static str> {
        Some("redo log")
    }

    fn loop_pick(&self) -> LoopPick {
        LoopPick::Limit
    }

    fn has_unsigned_integers(&self) -> bool {
        true
    }

    fn drops_partitions(&self) -> bool {
        true
    }

    fn partition_drop_alone(
        &self,
        table: &Ident,
        partition: &Ident,
    ) -> Option<LockedPartitionDrop> {
        Some(partitions::partition_drop(table, partition))
    }

    fn partition_rows(&self, statement: Statement, table: &Ident, partition: &Ident) -> Statement {
        statement
            .ident(table)
            .push(" PARTITION (")
            .ident(partition)
            .push(")")
    }

    fn is_zoneless(&self, declared: &str) -> bool {
        declared == "datetime" || declared == "date"
    }

    fn clock_zone_remedy(&self, _zone_named: bool) -> Option<&'static str> {
        Some("write the time out instead, or compare a column holding UTC with UTC_TIMESTAMP()")
    }

    fn regexp_operators(&self) -> Option<(&'static str, &'static str)> {
        Some((" REGEXP ", " NOT REGEXP "))
    }

    /// In InnoDB whatever the server's default engine: a record must roll
    /// back with its sub-batch.
    fn create_table_suffixed(&self, _plain: &'static str, in_innodb: &'static str) -> &'static str {
        in_innodb
    }

    fn upsert<'s>(&self, _on_conflict: &'s str, on_duplicate_key: &'s str) -> &'s str {
        on_duplicate_key
    }

    /// InnoDB whatever the server's default engine: the copy's inserts
    /// must roll back with their sub-batch.
    fn create_table_like(&self, into: &Ident, table: &Ident) -> Option<Statement> {
        Some(
            Statement::new("CREATE TABLE ")
                .ident(into)
                .push(" ENGINE = InnoDB AS SELECT * FROM ")
                .ident(table)
                .push(" WHERE 1 = 0"),
        )
    }

    fn create_undo_table(&self, undo: &UndoTable, _declared: &[String]) -> Option<Vec<Statement>> {
        Some(undo.copied_columns(" ENGINE = InnoDB"))
    }

    /// InnoDB reads a committed snapshot unless told to lock.
    fn locks_rows_read(&self) -> bool {
        true
    }

    /// `UPDATE target AS a JOIN source AS b ON <keys equal> SET a.c = b.x …
    /// WHERE 1 = 1`: MySQL has no `UPDATE … FROM`.
    fn update_join(
        &self,
        target: (&Ident, &str),
        source: (&Ident, &str),
        key: &[Ident],
        set: &[(Ident, Ident)],
    ) -> Statement {
        let statement = Statement::new("UPDATE ")
            .ident(target.0)
            .push(" AS ")
            .ident(&alias(target.1))
            .push(" JOIN ")
            .ident(source.0)
            .push(" AS ")
            .ident(&alias(source.1))
            .push(" ON ");
        let mut statement = join_key(statement, target.1, source.1, key).push(" SET ");
        for (i, (column, value)) in set.iter().enumerate() {
            if i > 0 {
                statement = statement.push(", ");
            }
            statement = statement
                .ident(&qualified(target.1, column))
                .push(" = ")
                .ident(value);
        }
        statement.push(" WHERE 1 = 1")
    }

    /// `a <=> b`, MySQL's equality with `NULL`s alike.
    fn same_value(&self, statement: Statement, a: &Ident, b: &Ident) -> Statement {
        statement.ident(a).push(" <=> ").ident(b)
    }

    fn as_dialect(&self) -> &dyn Dialect {
        self
    }

    fn column_list(&self, table: &Ident) -> Statement {
        let head = Statement::new(
            "SELECT GROUP_CONCAT(column_name SEPARATOR ',') FROM information_schema.columns \
             WHERE table_schema = ",
        );
        let within = match table.schema() {
            Some(schema) => head.value(schema.into()),
            None => head.push("DATABASE()"),
        };
        within.push(" AND table_name = ").value(table.name().into())
    }

    /// Sluice's sessions quote with `"` (`ANSI_QUOTES`) where the
    /// operator's may not.
    fn read_alike(&self, condition: &Condition) -> Result<(), OperatorSqlError> {
        condition.check_for_mysql()
    }

    fn read_alike_set(&self, set: &Assignments) -> Result<(), OperatorSqlError> {
        set.check_for_mysql()
    }

    /// `key NAME`.
    fn index_in_plan_line(&self, line: &str) -> Option<String> {
        word_after(line, " key ").filter(|key| key != "NULL")
    }

    /// Access type `ALL` on the table with no index it could use. A scan
    /// beside a usable index is the optimizer's choice for a small table.
    fn full_scan_line(&self, plan: &[String], table: &str) -> Option<String> {
        let full = format!("table {table} access ALL possible_keys NULL ");
        plan.iter().find(|l| l.starts_with(&full)).cloned()
    }
}

//! What differs between the databases Sluice reaches, one module per
//! database behind one trait: [`Dialect`].
//!
//! The trait's methods are capabilities and statement forms, each with a
//! default where two databases agree; a database's module overrides only
//! what it words otherwise. Code outside these modules asks the dialect
//! ([`crate::Backend::dialect`]); it does not match on the database.
//! Catalogue reads that need a connection are in each module's
//! `catalogue` ([`crate::Target`] dispatches to them).
//!
//! A fourth database is one more module here (a unit type implementing
//! [`Dialect`], its catalogue functions), its migrations, and the
//! conformance suite (`tests/dialects.rs`) passing for it.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::operator_sql::{Assignments, Condition, OperatorSqlError};
use crate::sql::{Ident, IdentError, Statement};
use crate::undo::{KeyRange, UndoTable, qualified};

mod backend;
pub(crate) mod catalogue;
pub mod health;
pub mod mysql;
pub mod postgres;
pub mod sqlite;
#[cfg(test)]
mod tests;
mod transaction;

pub use mysql::MySql;
pub use postgres::Postgres;
pub use sqlite::Sqlite;

pub use transaction::{MYSQL_BEGIN, ProgressRecord, Recorded, TargetConnection, TargetTx};

/// SQLite's dialect.
pub static SQLITE: Sqlite = Sqlite;
/// PostgreSQL's dialect.
pub static POSTGRES: Postgres = Postgres;
/// MySQL's and MariaDB's dialect.
pub static MYSQL: MySql = MySql;

/// Every dialect, for code (and tests) that must cover them all.
pub fn all() -> [&'static dyn Dialect; 3] {
    [&SQLITE, &POSTGRES, &MYSQL]
}

/// What one database speaks where the databases differ: how Sluice's
/// statements are worded for it, what its planner's output means, and what
/// its columns and sessions can hold. Every method answers without a
/// connection, so a statement's form is decided (and testable) apart from
/// running it.
pub trait Dialect: Send + Sync + fmt::Debug {
    /// The OpenTelemetry `db.system` name: `sqlite`, `postgresql`, `mysql`.
    fn name(&self) -> &'static str;

    /// The database's name as an operator reads it: `SQLite`,
    /// `PostgreSQL`, `MySQL`.
    fn display_name(&self) -> &'static str;

    /// True when `url` names a database of this kind (by its scheme).
    fn speaks_url(&self, url: &str) -> bool;

    /// True when the database can have replicas Sluice reads lag from.
    fn has_replicas(&self) -> bool {
        true
    }

    /// What the database calls the log a change is written to before it
    /// commits (`WAL`, `redo log`), when it reports how much a statement
    /// wrote to it; `None` when it does not.
    fn log_name(&self) -> Option<&'static str> {
        None
    }

    /// How a loop sub-batch names the rows it picks.
    fn loop_pick(&self) -> LoopPick {
        LoopPick::InSubquery
    }

    /// True when a loop sub-batch picks its rows by rowid in its
    /// transaction before changing them, so it is never one statement.
    fn picks_loop_rows_first(&self) -> bool {
        false
    }

    /// True when a session's `statement_timeout` bounds a one-statement
    /// sub-batch, so the runtime need not time it itself.
    fn bounds_statements_in_session(&self) -> bool {
        false
    }

    /// True when columns carry declared types the database enforces (not
    /// SQLite's type affinity), so a column's type says what it holds.
    fn has_column_types(&self) -> bool {
        true
    }

    /// True when an integer column may be unsigned and hold more than
    /// 2^63 - 1, which no cursor holds (MySQL's `BIGINT UNSIGNED`).
    fn has_unsigned_integers(&self) -> bool {
        false
    }

    /// True when a time compared with a text column is compared as text in
    /// the database's own format (SQLite, whose times are text).
    fn compares_times_as_text(&self) -> bool {
        false
    }

    /// True when a column of the declared type (lower-cased, as the
    /// catalogue gives it) holds times without a zone, read and written in
    /// the session's zone.
    fn is_zoneless(&self, declared: &str) -> bool {
        let _ = declared;
        false
    }

    /// True when a session's time zone (`TimeZone`) reads a zoneless
    /// column in that zone, so a cutoff is bound as an instant; otherwise
    /// the cutoff is written as the zone's wall-clock time.
    fn reads_zoneless_in_session_zone(&self) -> bool {
        false
    }

    /// A statement giving the start of the day `at` falls on in the zone the
    /// sessions read a date in, where that is not UTC's day; `None`: UTC's.
    fn start_of_day(&self, at: DateTime<Utc>) -> Option<Statement> {
        let _ = at;
        None
    }

    /// What to do when a statement reads the session's clock and the
    /// database's own sessions read it in a zone other than UTC; `None` when
    /// Sluice's sessions read it as the operator's do (`zone_named`: the
    /// store was told the sessions' zone).
    fn clock_zone_remedy(&self, zone_named: bool) -> Option<&'static str> {
        let _ = zone_named;
        None
    }

    /// The operators that test a column against a regular expression and
    /// its negation, spaced: ` ~ ` and ` !~ `, or MySQL's ` REGEXP `;
    /// `None` where the database has none built in (SQLite).
    fn regexp_operators(&self) -> Option<(&'static str, &'static str)> {
        Some((" ~ ", " !~ "))
    }

    /// `on_conflict` (an `INSERT … ON CONFLICT … DO UPDATE`), or where the
    /// database has no such clause, `on_duplicate_key` (MySQL's
    /// `ON DUPLICATE KEY UPDATE`): the two forms of one upsert.
    fn upsert<'s>(&self, on_conflict: &'s str, on_duplicate_key: &'s str) -> &'s str {
        let _ = on_duplicate_key;
        on_conflict
    }

    /// `least_greatest` (written with `LEAST`/`GREATEST`), or where the
    /// database names them `MIN`/`MAX` for scalars, `min_max`: the two
    /// forms of one statement.
    fn scalar_extremes<'s>(&self, least_greatest: &'s str, min_max: &'s str) -> &'s str {
        let _ = min_max;
        least_greatest
    }

    /// `CREATE TABLE IF NOT EXISTS sluice_target_progress …`: the table in
    /// which a target apart from the store keeps the progress of the
    /// batches run on it ([`crate::progress`]), transactional as the
    /// sub-batches that write it.
    fn create_progress_table(&self) -> &'static str {
        self.create_table_suffixed(
            crate::progress::CREATE_PROGRESS_TABLE,
            crate::progress::CREATE_PROGRESS_TABLE_INNODB,
        )
    }

    /// `plain` (a `CREATE TABLE`), or where a table must name its engine
    /// to be transactional (MySQL, MariaDB), `in_innodb`: the two forms of
    /// one statement.
    fn create_table_suffixed(&self, plain: &'static str, in_innodb: &'static str) -> &'static str {
        let _ = in_innodb;
        plain
    }

    /// True when one statement can delete rows and insert exactly the
    /// deleted rows elsewhere (`WITH moved AS (DELETE … RETURNING …)
    /// INSERT …`).
    fn moves_rows_in_one_statement(&self) -> bool {
        false
    }

    /// `CREATE TABLE into …` giving `into` plain columns of `table`'s types
    /// (a generated column's values become a plain column) with their
    /// collations, in a transactional engine; `None` where the columns must
    /// be declared one by one from the catalogue (SQLite, whose
    /// `CREATE TABLE … AS` drops collations).
    fn create_table_like(&self, into: &Ident, table: &Ident) -> Option<Statement> {
        let _ = (into, table);
        None
    }

    /// The statement that makes `key` (one column or several) unique in
    /// `table`, up to its columns (`ALTER TABLE t ADD UNIQUE (`: the caller
    /// appends them and the closing parenthesis);
    /// `None` where it cannot be made here; an error when the index's name
    /// would not be a plain identifier.
    fn add_unique(&self, table: &Ident, key: &[Ident]) -> Result<Option<Statement>, IdentError> {
        let _ = key;
        Ok(Some(
            Statement::new("ALTER TABLE ")
                .ident(table)
                .push(" ADD UNIQUE ("),
        ))
    }

    /// The statements dropping `partition` of `table` inside a sub-batch's
    /// transaction, so that the drop and its record commit together; `None`
    /// where a partition cannot be dropped in a transaction (MySQL's
    /// `ALTER TABLE` commits on its own) or there are no partitions.
    fn partition_drop(&self, table: &Ident, partition: &Ident) -> Option<PartitionDrop> {
        let _ = (table, partition);
        None
    }

    /// The statements dropping `partition` of `table` where the drop commits
    /// on its own (MySQL's `ALTER TABLE … DROP PARTITION`): under a lock on
    /// the whole table, held from the check of the partition's rows to the
    /// drop, with the drop's intent recorded in between
    /// ([`LockedPartitionDrop`]); `None` elsewhere.
    fn partition_drop_alone(
        &self,
        table: &Ident,
        partition: &Ident,
    ) -> Option<LockedPartitionDrop> {
        let _ = (table, partition);
        None
    }

    /// True where a table partitioned by ranges of a column may have its
    /// partitions dropped by an operation ([`Dialect::partition_drop`] or
    /// [`Dialect::partition_drop_alone`]).
    fn drops_partitions(&self) -> bool {
        false
    }

    /// True where a partition can instead be detached and kept in the
    /// sub-batch's transaction, and attached back by a revert
    /// ([`crate::KeptPartitions`], PostgreSQL's SQL): `delete-aged-rows
    /// --undo` then keeps whole partitions rather than moving their rows.
    fn keeps_partitions(&self) -> bool {
        false
    }

    /// `statement` followed by the rows of `partition` of `table` as a
    /// `FROM` names them: the partition's own table (PostgreSQL), or the
    /// table restricted to it (MySQL's `t PARTITION (p)`).
    fn partition_rows(&self, statement: Statement, table: &Ident, partition: &Ident) -> Statement {
        let _ = table;
        statement.ident(partition)
    }

    /// The statements creating `undo`'s table, empty: its key columns and
    /// two images of each kept column, of the live table's types, and a
    /// state column; the key its primary key. `declared` are the live
    /// table's declared types of the key's columns, then of the kept
    /// columns (read where the table is declared column by column); `None`
    /// when one of them cannot be written into a statement.
    fn create_undo_table(&self, undo: &UndoTable, declared: &[String]) -> Option<Vec<Statement>>;

    /// The statements a sub-batch runs to keep its rows' images in `undo`
    /// and apply the operator's `set` to them ([`UndoTable::keep_and_update`]);
    /// the first one's count is the rows changed. By default three
    /// ([`UndoTable::keep_in_three`]), the rows locked as they are read
    /// where [`Dialect::locks_rows_read`] says so.
    fn keep_and_update(
        &self,
        undo: &UndoTable,
        set: &Assignments,
        rows: &dyn Fn(Statement) -> Statement,
        range: KeyRange<'_>,
    ) -> Vec<Statement> {
        let lock = self.locks_rows_read();
        undo.keep_in_three(self.as_dialect(), set, rows, range, lock)
    }

    /// What follows an `INSERT`'s column list so that the values given are
    /// kept in an identity column that the database otherwise writes
    /// itself (PostgreSQL's ` OVERRIDING SYSTEM VALUE`); empty where a
    /// value given is always kept.
    fn insert_overriding(&self) -> &'static str {
        ""
    }

    /// True where [`Dialect::keep_and_update`] is one statement, which a
    /// store can send with the sub-batch's record as one round trip.
    fn keeps_and_updates_in_one_statement(&self) -> bool {
        false
    }

    /// A revert's sub-batch over a range of `undo` as one statement, whose
    /// count is the rows put back, where the database has one
    /// ([`UndoTable::restore`] otherwise).
    fn restore_in_one_statement(
        &self,
        undo: &UndoTable,
        force: bool,
        range: KeyRange<'_>,
    ) -> Option<Statement> {
        let _ = (undo, force, range);
        None
    }

    /// True where a read inside a transaction must say `FOR UPDATE` to
    /// read the value a later change in it replaces (not so on a database
    /// with one writer at a time).
    fn locks_rows_read(&self) -> bool {
        false
    }

    /// `UPDATE target AS alias … SET column = source_alias.x, … WHERE
    /// <target's key = source's key>`, ending inside its `WHERE` (the
    /// caller appends `AND …`): `target` changed from the rows of `source`
    /// with the same `key` (`set`: each target column, unqualified, and
    /// the qualified source column it takes). By default `UPDATE … FROM`.
    fn update_join(
        &self,
        target: (&Ident, &str),
        source: (&Ident, &str),
        key: &[Ident],
        set: &[(Ident, Ident)],
    ) -> Statement {
        let mut statement = Statement::new("UPDATE ")
            .ident(target.0)
            .push(" AS ")
            .ident(&alias(target.1))
            .push(" SET ");
        for (i, (column, value)) in set.iter().enumerate() {
            if i > 0 {
                statement = statement.push(", ");
            }
            statement = statement.ident(column).push(" = ").ident(value);
        }
        statement = statement
            .push(" FROM ")
            .ident(source.0)
            .push(" AS ")
            .ident(&alias(source.1))
            .push(" WHERE ");
        join_key(statement, target.1, source.1, key)
    }

    /// Appends a condition true when `a` and `b` hold the same value, two
    /// `NULL`s alike, whatever the columns' type.
    fn same_value(&self, statement: Statement, a: &Ident, b: &Ident) -> Statement;

    /// This dialect as a trait object (for default methods that pass it on).
    fn as_dialect(&self) -> &dyn Dialect;

    /// A statement reading the names of `table`'s columns, comma-separated
    /// in one text value, as the catalogue lists them now.
    fn column_list(&self, table: &Ident) -> Statement;

    /// Refuses an operator's condition that this database's sessions would
    /// read otherwise than the operator's own sessions do.
    fn read_alike(&self, condition: &Condition) -> Result<(), OperatorSqlError> {
        let _ = condition;
        Ok(())
    }

    /// [`Dialect::read_alike`] for an operator's SET list.
    fn read_alike_set(&self, set: &Assignments) -> Result<(), OperatorSqlError> {
        let _ = set;
        Ok(())
    }

    /// The index the plan line names as read, in this planner's words.
    fn index_in_plan_line(&self, line: &str) -> Option<String>;

    /// The line of `plan` (as [`crate::Target::explain`] gives it) that reads
    /// every row of `table`, if any: a missing index, not the optimizer's
    /// choice beside a usable one.
    fn full_scan_line(&self, plan: &[String], table: &str) -> Option<String>;
}

/// Appends `a.k = b.k AND …` over `key`'s columns.
pub(crate) fn join_key(mut statement: Statement, a: &str, b: &str, key: &[Ident]) -> Statement {
    for (i, column) in key.iter().enumerate() {
        if i > 0 {
            statement = statement.push(" AND ");
        }
        statement = statement
            .ident(&qualified(a, column))
            .push(" = ")
            .ident(&qualified(b, column));
    }
    statement
}

/// A table alias this crate writes itself.
pub(crate) fn alias(name: &str) -> Ident {
    Ident::parse(name).expect("aliases are plain identifiers")
}

/// The index a plan reads, as `dialect` names it: the first plan line that
/// names one.
pub fn index_in_plan(plan: &[String], dialect: &dyn Dialect) -> Option<String> {
    plan.iter()
        .find_map(|line| dialect.index_in_plan_line(line))
}

/// The statements that drop one partition of a table inside a sub-batch's
/// transaction ([`Dialect::partition_drop`]), run in this order; between
/// `hold` and `detach` the caller checks, under the lock `hold` takes, that
/// every row of the partition is one the operation would delete.
#[derive(Debug, Clone)]
pub struct PartitionDrop {
    /// Bounds how long each later statement waits for a lock, so that the
    /// queries queueing behind a waiting `ALTER TABLE` wait no longer.
    pub lock_timeout: Statement,
    /// Locks the partition against writes (reads go on) while its rows are
    /// checked and counted.
    pub hold: Statement,
    /// Detaches the partition from the table: the whole table's lock, then
    /// the partition's, in the order every query takes them (a query
    /// holding the table's lock while it waits for the partition's, behind
    /// a drop holding the partition's first, would deadlock with it). Held
    /// to the commit; the statements after it are catalogue changes.
    pub detach: Statement,
    /// Drops the detached partition.
    pub drop: Statement,
}

/// The statements that drop one partition of a table where the drop
/// commits on its own ([`Dialect::partition_drop_alone`]), each outside any
/// transaction, in this order: `lock_timeout`, `lock`; the caller checks
/// and counts the partition's rows and records its intent to drop it
/// elsewhere (the store); `drop`; `unlock`. The connection is closed
/// afterwards, so that no lock or session setting outlives it.
#[derive(Debug, Clone)]
pub struct LockedPartitionDrop {
    /// Bounds how long the lock and the drop wait for the table's metadata
    /// lock, so that the queries queueing behind them wait no longer.
    pub lock_timeout: Statement,
    /// One row: how many seconds `lock` now waits for a lock not free (0 on
    /// MariaDB, which may then be asked again at once without any query
    /// queueing behind it; 1 on MySQL, whose least wait it is).
    pub lock_wait: Statement,
    /// Locks the whole table against reads and writes until `unlock`: the
    /// rows checked are the rows dropped, and a reconciling worker taking
    /// the same lock knows no drop is under way.
    pub lock: Statement,
    /// Drops the partition (committing on its own).
    pub drop: Statement,
    /// Releases `lock`.
    pub unlock: Statement,
    /// One row, `1` while the table still has the partition and `0` once
    /// it is dropped: read under `lock` to settle an intent recorded by a
    /// worker that may have died before or after its drop.
    pub listed: Statement,
}

/// How a loop sub-batch names the rows it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopPick {
    /// `key IN (SELECT key FROM table WHERE scope LIMIT n)`: every backend.
    InSubquery,
    /// `key = ANY (CASE WHEN <guard> THEN ARRAY(SELECT key FROM table
    /// WHERE scope LIMIT n) END)` (PostgreSQL): the pick runs once, before
    /// the change, and the change finds the picked rows through the key's
    /// index whatever `n` is. With `IN`, past a few thousand rows the
    /// planner hash-joins the pick against a scan of the whole table, every
    /// sub-batch. The guard ([`Statement::guard`]) reads `TRUE`, which the
    /// planner folds away; a one-statement sub-batch puts its fence there,
    /// tested once before the pick runs.
    KeyArray,
    /// `WHERE scope LIMIT n` (MySQL, MariaDB): their own limited `DELETE`
    /// or `UPDATE` (they refuse a `LIMIT` inside `IN`), the scope tested on
    /// every row the statement changes, rows taken in the order of the
    /// index that serves the scope. Not `ORDER BY key`: when the scope's
    /// index is not the key's, MySQL would sort every row in scope on each
    /// sub-batch (`Using filesort`). Nothing can be appended to its `WHERE`.
    Limit,
}

impl LoopPick {
    /// The form for the target's database.
    pub fn for_target(target: &crate::Target) -> Self {
        target.backend().dialect().loop_pick()
    }
}

/// The word after `marker` in `line`, if `marker` is there.
pub(crate) fn word_after(line: &str, marker: &str) -> Option<String> {
    line.split_once(marker)
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_owned)
}

/// A plan line without its tree drawing (`->`) and indentation.
pub(crate) fn plan_node(line: &str) -> String {
    line.trim_start().trim_start_matches("->").trim().to_owned()
}

/// Two dialects are equal when they are the same database's.
impl PartialEq for dyn Dialect {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

/// PostgreSQL's, for a value built before it knows its store's database
/// (a [`crate::Statement`] or filter, re-targeted when prepared).
impl Default for &'static dyn Dialect {
    fn default() -> Self {
        &POSTGRES
    }
}

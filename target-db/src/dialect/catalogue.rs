//! What a database's catalogue says about a target table, read on the
//! database's own pool: one implementation per dialect
//! (`{sqlite,postgres,mysql}/catalogue.rs`), each on its sqlx pool, reached
//! through [`crate::Backend::catalogue`]. A method a database has nothing
//! to say for keeps the default (an empty answer).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::enqueuing_session::SessionMismatch;
use crate::error::DatabaseError;
use crate::kept_partitions::{KeptPartition, KeptPartitions};
use crate::session_defaults::SessionsZone;
use crate::sql::SqlValue;
use crate::sql::{Ident, Statement};
use crate::target_table::{NonTransactional, RangePartitions, TableKeys};
use std::time::Duration;

/// What one database's catalogue answers about a target table. The
/// [`crate::Target`] methods of the same names are the public API; they
/// delegate here.
#[async_trait]
pub(crate) trait Catalogue: Send + Sync {
    /// The table's column names in table order; empty when no such table
    /// exists.
    async fn table_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError>;

    /// `table`'s range partitioning on one column
    /// ([`crate::Target::range_partitions`]); by default none.
    async fn range_partitions(
        &self,
        table: &Ident,
    ) -> Result<Option<RangePartitions>, DatabaseError> {
        let _ = table;
        Ok(None)
    }

    /// The partitions of `layout` whose upper bound is at most `bound`
    /// ([`crate::Target::partitions_below`]); by default none.
    async fn partitions_below(
        &self,
        layout: &RangePartitions,
        bound: &SqlValue,
    ) -> Result<Vec<Ident>, DatabaseError> {
        let _ = (layout, bound);
        Ok(Vec::new())
    }

    /// Why `table`'s partitions must not be dropped in place of deleting
    /// their rows ([`crate::Target::partition_drop_blocker`]); by default
    /// nothing, there being no partitions to drop.
    async fn partition_drop_blocker(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        let _ = table;
        Ok(None)
    }

    /// The columns of `table` whose values the database computes.
    async fn generated_columns(&self, table: &Ident) -> Result<Vec<String>, DatabaseError>;

    /// True when `a` and `b`, both existing tables, name the same one: the
    /// database resolves each as a statement would (PostgreSQL through the
    /// search path; SQLite without regard to case, an unqualified name in
    /// `main`; MySQL in the connection's database, by case as the server
    /// compares table names).
    async fn same_table(&self, a: &Ident, b: &Ident) -> Result<bool, DatabaseError>;

    /// True when `table` exists and is a base table (PostgreSQL: a plain or
    /// partitioned one), not a view or another kind of relation, whose
    /// inserted rows land in whatever tables it shows.
    async fn is_base_table(&self, table: &Ident) -> Result<bool, DatabaseError>;

    /// The declared type of `column` in `table` as the catalogue spells it
    /// (SQLite: the declared type, possibly empty; PostgreSQL: what
    /// `information_schema.columns.data_type` says — a built-in type's name,
    /// a domain's base type, `ARRAY` or `USER-DEFINED`; MySQL: its
    /// `data_type`, such as `datetime` or `bigint`), or `None` when
    /// there is no such column.
    async fn column_type(
        &self,
        table: &Ident,
        column: &str,
    ) -> Result<Option<String>, DatabaseError>;

    /// The planner's plan for `statement`, one line per row: `EXPLAIN QUERY PLAN`
    /// details on SQLite, `EXPLAIN` text on PostgreSQL. On PostgreSQL the plan is
    /// taken with sequential scans disabled (in a transaction that is rolled
    /// back), so a `Seq Scan` in it means no index can serve the statement at
    /// all — not merely that the table is small today.
    async fn explain(&self, statement: &Statement) -> Result<Vec<String>, DatabaseError>;

    /// What proves rows of `table` distinct: its indexes (name, columns,
    /// unique or not) and which of its columns can never be NULL. A partial
    /// index, an index over an expression and, on PostgreSQL, an index not
    /// yet valid are listed as not unique (they prove nothing for every
    /// row). SQLite's rowid alias (`id INTEGER PRIMARY KEY`) is listed as a
    /// unique index named `rowid` over its column, which is never NULL; any
    /// other primary key column is taken as not null while no row holds a
    /// NULL there (SQLite allows one unless the column says NOT NULL).
    async fn table_keys(&self, table: &Ident) -> Result<TableKeys, DatabaseError>;

    /// Everything about `table` an enqueue's checks read from the schema
    /// (its columns with their types, defaults, nullability and the
    /// current role's privileges, its indexes, constraints and those of the
    /// tables referring to it, its kind and the server's version), as one
    /// text: two tables with the same text pass or fail those checks alike
    /// ([`crate::Target::table_definition`]). `None` where the checks read
    /// more than this (triggers, partitions, a view or another kind of
    /// relation) or the table does not exist; by default always `None`.
    async fn table_definition(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        let _ = table;
        Ok(None)
    }

    /// The columns of `table` in table order (generated ones included);
    /// empty when there is no such table.
    ///
    /// Errors: the database's, on reading its catalogue.
    async fn column_definition_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, Option<String>)>, DatabaseError>;

    /// The foreign keys referring to `table` that delete or change their
    /// rows when a row of `table` is deleted, by table and name. SQLite's
    /// are listed as declared (Sluice's connections enforce them: sqlx
    /// turns `foreign_keys` on); only those of its main database.
    ///
    /// Errors: the database's, on reading its catalogue.
    async fn delete_action_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError>;

    /// The database server's clock now (on SQLite, which runs in this
    /// process, this machine's). A cutoff computed from a client's clock
    /// that runs ahead of it would count young rows as aged.
    ///
    /// Errors: the database's.
    async fn database_now(&self) -> Result<DateTime<Utc>, DatabaseError>;

    /// The triggers that fire when rows of `table` are inserted, updated or
    /// deleted, by name (PostgreSQL: user triggers and non-`SELECT` rules;
    /// the triggers that enforce foreign keys are not listed). Empty when
    /// there are none or no such table.
    ///
    /// Errors: the database's, on reading its catalogue.
    async fn trigger_rows(
        &self,
        table: &Ident,
    ) -> Result<Vec<(String, String, String)>, DatabaseError>;

    /// Takes one partition out of `kept`'s record and attaches it back
    /// ([`crate::Target::attach_kept_partition`]); by default none is kept.
    async fn attach_kept_partition(
        &self,
        kept: &KeptPartitions,
    ) -> Result<Option<KeptPartition>, DatabaseError> {
        let _ = kept;
        Ok(None)
    }

    /// One run of [`Target::probe_rolled_back`]: rows changed, time taken,
    /// log written.
    async fn run_and_roll_back(
        &self,
        statement: &Statement,
    ) -> Result<(u64, Duration, Option<u64>), DatabaseError>;

    /// PostgreSQL: the schema holding `table`, found as a statement naming
    /// it would find it (through the `search_path` when unqualified);
    /// `None` when there is no such relation, and on SQLite and MySQL,
    /// where an unqualified name means one database whatever the session.
    async fn schema_of(&self, table: &Ident) -> Result<Option<String>, DatabaseError> {
        let _ = table;
        Ok(None)
    }

    /// MySQL: whether the server writes the statements themselves to its
    /// binary log (`log_bin` on, this session's `binlog_format` `STATEMENT`),
    /// for replicas to run again; `false` elsewhere.
    async fn logs_statements(&self) -> Result<bool, DatabaseError> {
        Ok(false)
    }

    /// How many rows the planner expects `statement` (a `SELECT`) to return,
    /// from the table's statistics, without running it: PostgreSQL's
    /// `EXPLAIN (FORMAT JSON)` estimate for the plan's top node. `None` on
    /// SQLite, whose planner gives no row estimates. Only as good as the
    /// statistics (`ANALYZE`); never an exact count.
    async fn estimate_rows(&self, statement: &Statement) -> Result<Option<i64>, DatabaseError> {
        let _ = statement;
        Ok(None)
    }

    /// PostgreSQL: `table` itself when it is a foreign table, whose rows a
    /// foreign data wrapper writes on another server, committed apart from
    /// the local transaction (no two-phase commit): a sub-batch's change
    /// there and its progress record here could part.
    async fn foreign_table(&self, table: &Ident) -> Result<Vec<NonTransactional>, DatabaseError> {
        let _ = table;
        Ok(Vec::new())
    }

    /// On PostgreSQL, the value the database's own sessions take for the
    /// setting `name` (`TimeZone`, `DateStyle`): the database's own
    /// (`ALTER DATABASE … SET`), else the server's configuration files' where
    /// the role may read them (`pg_file_settings`: superusers and
    /// `pg_read_all_settings`); `None` when neither says, or elsewhere. A
    /// role's own setting is not seen.
    ///
    /// Errors: the database's, on reading its catalogue.
    async fn sessions_setting(&self, name: &str) -> Result<Option<String>, DatabaseError> {
        let _ = name;
        Ok(None)
    }

    /// PostgreSQL: how this database's sessions would read the SQL of an
    /// operation `enqueued` by another session, over `table`, otherwise
    /// than it did ([`crate::Target::session_mismatch`]); `None` elsewhere.
    async fn session_mismatch(
        &self,
        enqueued: &crate::EnqueuingSession,
        table: &Ident,
    ) -> Result<Option<SessionMismatch>, DatabaseError> {
        let _ = (enqueued, table);
        Ok(None)
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
    async fn non_transactional_writes(
        &self,
        table: &Ident,
    ) -> Result<Vec<NonTransactional>, DatabaseError> {
        let _ = table;
        Ok(Vec::new())
    }

    /// Those of the functions `called` (lowercased names) that may leave a
    /// trace a rollback does not undo, or write at all: PostgreSQL's
    /// sequence functions and session advisory locks, and functions of
    /// the database's users declared `VOLATILE` (the default, and the only
    /// kind that may write); MySQL's sequence functions, `GET_LOCK`, and
    /// stored functions not declared `NO SQL` or `READS SQL DATA`. None on
    /// SQLite, whose SQL cannot define a function.
    ///
    /// Errors: the database's, on reading its catalogue.
    async fn functions_that_may_write(
        &self,
        called: &[String],
    ) -> Result<Vec<String>, DatabaseError> {
        let _ = called;
        Ok(Vec::new())
    }

    /// The zone the database's own sessions write zoneless times in, and its
    /// offset from UTC at each of `at`; `None` on SQLite, whose times are
    /// text. On PostgreSQL: `TimeZone` as [`Target::sessions_setting`] reads
    /// it, else `log_timezone` (which `initdb` sets alike). On MySQL:
    /// `@@global.time_zone`.
    ///
    /// Errors: the database's, on reading its settings.
    async fn sessions_zone(
        &self,
        at: &[DateTime<Utc>],
    ) -> Result<Option<SessionsZone>, DatabaseError> {
        let _ = at;
        Ok(None)
    }

    /// [`crate::Target::statistics_version`], the database's error as it is.
    async fn statistics_version(&self, table: &Ident) -> Result<Option<String>, sqlx::Error>;
}

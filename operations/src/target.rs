//! Checks an operation's target before anything is enqueued: its names are
//! plain identifiers, the table and columns exist in the database's
//! catalogue, and the statements it will run are served by an index.
//!
//! Every refusal is a [`TargetError`] whose message names the table, the
//! column and what to do; nothing is written by any check here.

use sluice_store::{Store, StoreError};
use sluice_target::{CursorValue, Ident, IdentError, Statement};

mod session_sql;
mod time_column;

pub use session_sql::check_session_dependent_sql;
pub use time_column::{TIME_SAMPLE_ROWS, TimeColumnProblem, check_time_column, time_text_format};

/// A table and batching columns, validated against the catalogue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The table.
    pub table: Ident,
    /// The batching (or predicate) columns, in the order given.
    pub columns: Vec<Ident>,
}

/// Why a target is refused.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A name is not a plain identifier.
    #[error(transparent)]
    Unsafe(#[from] IdentError),
    /// The table does not exist.
    #[error("unknown table `{table}`")]
    UnknownTable {
        /// The table as given.
        table: String,
    },
    /// A table the operation writes (itself, or through a trigger) whose
    /// engine has no transactions.
    #[error(
        "{}: a rolled-back sub-batch would stay written there, so exactly-once cannot hold; {}",
        not_transactional(.table, .engine, .via),
        if .engine.starts_with("foreign") {
            "run the operation on the server that holds the table".to_owned()
        } else {
            format!("convert it first (ALTER TABLE {table} ENGINE = InnoDB)")
        }
    )]
    NotTransactional {
        /// The table.
        table: String,
        /// Its engine.
        engine: String,
        /// The trigger through which the operation writes it, when it does
        /// not write it directly.
        via: Option<String>,
    },
    /// A MySQL server logging statements, not rows, for its replicas.
    #[error(
        "this server writes a statement-based binary log (binlog_format = STATEMENT): a \
         replica runs each statement again, and a DELETE … LIMIT there picks its own rows, so \
         the replica would keep other rows than the primary; set binlog_format to MIXED or ROW"
    )]
    StatementBinlog,
    /// A column does not exist in the table.
    #[error("table `{table}` has no column `{column}` (its columns: {})", .available.join(", "))]
    UnknownColumn {
        /// The table.
        table: String,
        /// The missing column.
        column: String,
        /// The columns it does have.
        available: Vec<String>,
    },
    /// The planner would read the whole table.
    #[error(
        "refusing a full scan of table `{table}`: no index serves `{column}` (plan: {plan}); \
         create one, e.g. CREATE INDEX {index_name} ON {table} ({column}), or pass --force"
    )]
    FullScan {
        /// The table.
        table: String,
        /// The column the statement filters or orders on.
        column: String,
        /// A name for the suggested index.
        index_name: String,
        /// The plan line that scans the table.
        plan: String,
    },
    /// The batching key does not provably name one row each.
    #[error(
        "refusing `{table}` batched by ({}): {reason}; the table's indexes: {}",
        .key.join(", "),
        if .indexes.is_empty() { "none".to_owned() } else { .indexes.join(", ") }
    )]
    KeyNotProven {
        /// The table.
        table: String,
        /// The batching (or loop key) columns.
        key: Vec<String>,
        /// What is missing.
        reason: String,
        /// The table's indexes, as `name (columns) unique|not unique`.
        indexes: Vec<String>,
    },
    /// On SQLite, a keyset's first column whose values are not all integers
    /// or all text (SQLite keeps any value in any column).
    #[error(
        "refusing `{table}` batched by `{column}`: its values run from {smallest} to {largest}, \
         and batches walk one kind of value, integers or text (SQLite keeps any value in any \
         column, whatever its declared type); fix those rows, or batch by another key with --key"
    )]
    KeyValues {
        /// The table.
        table: String,
        /// The key's first column.
        column: String,
        /// Its smallest value, as `a|an KIND (value)`.
        smallest: String,
        /// Its largest value, likewise.
        largest: String,
    },
    /// A time bound compared, on SQLite, with a column whose values are not
    /// all text naming a time in one format Sluice compares exactly.
    #[error(
        "refusing to compare column `{column}` of `{table}` with a time: {problem}; values seen: {}",
        .seen.join(", ")
    )]
    UnreadableTime {
        /// The table.
        table: String,
        /// The column compared.
        column: String,
        /// What is wrong and what to do.
        problem: TimeColumnProblem,
        /// Examples of the values found, one per format, with the format.
        seen: Vec<String>,
    },
    /// The operation's SQL reads the session's clock, which the database's
    /// own sessions read in another zone than Sluice's (UTC).
    #[error(
        "the operation's SQL reads the clock (`{read}`), which this database's own sessions \
         read in {zone} and Sluice's in UTC{effect}; {remedy}"
    )]
    ClockInAnotherZone {
        /// The clock read as written (`now`, `CURRENT_DATE`).
        read: String,
        /// The sessions' zone, described.
        zone: String,
        /// What reading it in UTC would do to a zoneless column.
        effect: String,
        /// What the operator can do.
        remedy: &'static str,
    },
    /// The operation's SQL holds a date PostgreSQL reads in `DateStyle`'s
    /// order, which the database's own sessions set otherwise than Sluice's.
    #[error(
        "the operation's SQL holds the date '{date}', which this database's own sessions \
         read {order} (DateStyle {style}) and Sluice's month first (ISO, MDY): write it as \
         ISO 8601, year first (YYYY-MM-DD)"
    )]
    AmbiguousDate {
        /// The date as written.
        date: String,
        /// The sessions' `DateStyle`.
        style: String,
        /// How they read it: `day first`, `year first`.
        order: &'static str,
    },
    /// The database could not be asked.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sluice_target::DatabaseError> for TargetError {
    /// The target's failure, read as the store reads it (a database error
    /// stays one, so it is judged transient or unavailable alike).
    fn from(error: sluice_target::DatabaseError) -> Self {
        TargetError::Store(error.into())
    }
}

/// What [`TargetError::NotTransactional`] found, in words.
fn not_transactional(table: &str, engine: &str, via: &Option<String>) -> String {
    match via {
        None if engine.starts_with("foreign") => format!(
            "table `{table}` is written through a {engine}, which commits apart from this database"
        ),
        None => format!("table `{table}` uses the {engine} engine, which has no transactions"),
        Some(trigger) => format!(
            "trigger `{trigger}` writes table `{table}`, whose {engine} engine has no transactions"
        ),
    }
}

impl TargetError {
    /// True when the target itself is at fault (the user's input), false when
    /// the database could not be consulted.
    pub fn is_bad_input(&self) -> bool {
        match self {
            TargetError::Store(e) => e.is_bad_input(),
            _ => true,
        }
    }
}

/// Validates `table` and `columns` as identifiers, then against the catalogue.
pub async fn check_target(
    store: &Store,
    table: &str,
    columns: &[&str],
) -> Result<Target, TargetError> {
    let table_ident = Ident::parse(table)?;
    let column_idents = columns
        .iter()
        .map(|c| Ident::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    let available = store.target().table_columns(&table_ident).await?;
    if available.is_empty() {
        return Err(TargetError::UnknownTable {
            table: table.to_owned(),
        });
    }
    check_transactional(store, &table_ident).await?;
    if store.target().logs_statements().await? {
        return Err(TargetError::StatementBinlog);
    }
    for column in &column_idents {
        if column.schema().is_some() || !available.iter().any(|a| a == column.name()) {
            return Err(TargetError::UnknownColumn {
                table: table.to_owned(),
                column: column.to_string(),
                available,
            });
        }
    }
    Ok(Target {
        table: table_ident,
        columns: column_idents,
    })
}

/// Refuses `table` when it, or a table its triggers write, ignores a
/// rollback (MySQL MyISAM, Aria, MEMORY …: an engine without transactions,
/// [`sluice_target::Target::non_transactional_writes`]). Run at enqueue for every table an
/// operation writes, and again when a worker starts it, since an `ALTER
/// TABLE … ENGINE =` or a new trigger can come in between.
pub async fn check_transactional(store: &Store, table: &Ident) -> Result<(), TargetError> {
    match store
        .target()
        .non_transactional_writes(table)
        .await?
        .into_iter()
        .next()
    {
        None => Ok(()),
        Some(found) => Err(TargetError::NotTransactional {
            table: found.table,
            engine: found.engine,
            via: found.via,
        }),
    }
}

/// Refuses a batching key (the keyset's columns, or a loop's key) that the
/// catalogue does not prove names one row each: every column NOT NULL (a
/// row with a NULL is in no range) and a unique index over some of them (a
/// shared key would reach rows it must not, or make a batch's count wrong),
/// and none a column the database writes itself on UPDATE (generated, or
/// `ON UPDATE`), which would carry an updated row into a range not yet run.
pub async fn check_key(store: &Store, table: &Ident, key: &[Ident]) -> Result<(), TargetError> {
    let keys = store.target().table_keys(table).await?;
    let names: Vec<&str> = key.iter().map(Ident::name).collect();
    let moved = keys
        .written_by_database
        .iter()
        .find(|(column, _)| names.contains(&column.as_str()));
    if moved.is_none() && keys.proves_distinct(&names) {
        return Ok(());
    }
    let nullable = names
        .iter()
        .find(|c| !keys.not_null.iter().any(|n| n == *c));
    let reason = match (moved, nullable) {
        (Some((column, how)), _) => format!(
            "column `{column}` {how}, so an UPDATE can move a row to a range not yet run, \
             where it would be changed again (batch by a key the database does not write, \
             e.g. the primary key, with --key)"
        ),
        (None, Some(nullable)) => format!(
            "column `{nullable}` can hold NULL, and a row whose key is NULL is in no batch \
             (declare it NOT NULL, or batch by the primary key with --key)"
        ),
        (None, None) => format!(
            "no unique index covers only these columns, so two rows may share a key and a \
             statement reaching one would reach both (create one, e.g. CREATE UNIQUE INDEX \
             {}_{}_key ON {table} ({}), or batch by the primary key with --key)",
            table.name(),
            names.join("_"),
            names.join(", ")
        ),
    };
    Err(TargetError::KeyNotProven {
        table: table.to_string(),
        key: names.iter().map(|n| n.to_string()).collect(),
        reason,
        indexes: keys
            .indexes
            .iter()
            .map(|i| {
                format!(
                    "{} ({}) {}",
                    i.name,
                    i.columns.join(", "),
                    if i.unique { "unique" } else { "not unique" }
                )
            })
            .collect(),
    })
}

/// On SQLite, refuses a keyset whose first column holds values of two
/// kinds, or of a kind no cursor holds (REAL, BLOB). It reads the column's
/// smallest and largest values through the index the walk itself uses;
/// SQLite sorts numbers, then text, then blobs, so when both ends are
/// integers, or both text, so is every value between — but for a REAL
/// between two integers, changed with its range like any row, or, where a
/// batch or sub-batch would end on it, failing the operation with the
/// column named (no cursor holds it). Other databases hold a column's
/// declared type only.
pub async fn check_key_values(
    store: &Store,
    table: &Ident,
    column: &Ident,
) -> Result<(), TargetError> {
    if store.target().dialect().has_column_types() {
        return Ok(());
    }
    let end = |statement: Statement, order: &'static str| {
        statement
            .push("(SELECT typeof(")
            .ident(column)
            .push(") || ' ' || substr(quote(")
            .ident(column)
            .push("), 1, 40) FROM ")
            .ident(table)
            .push(" ORDER BY ")
            .ident(column)
            .push(order)
            .push(" LIMIT 1)")
    };
    let ends = end(Statement::new("SELECT "), "").push(" || char(10) || ");
    let ends = end(ends, " DESC");
    let Some(CursorValue::Text(ends)) = store
        .target()
        .fetch_cursor(&ends, 1)
        .await?
        .and_then(|c| c.0.into_iter().next())
    else {
        return Ok(()); // an empty table
    };
    let (smallest, largest) = ends.split_once('\n').unwrap_or((&ends, &ends));
    let kind = |end: &str| end.split_once(' ').map_or(end, |(kind, _)| kind).to_owned();
    if kind(smallest) == kind(largest) && matches!(kind(smallest).as_str(), "integer" | "text") {
        return Ok(());
    }
    let described = |end: &str| {
        let (kind, value) = end.split_once(' ').unwrap_or((end, ""));
        let article = if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        };
        format!("{article} {kind} ({value})")
    };
    Err(TargetError::KeyValues {
        table: table.to_string(),
        column: column.to_string(),
        smallest: described(smallest),
        largest: described(largest),
    })
}

/// On MySQL, refuses a key whose largest value no cursor holds: an
/// unsigned column (`BIGINT UNSIGNED`) holding more than 2^63 - 1, which
/// the operation would reach mid-run. It reads the column's `MAX` through
/// its index. Other databases' integers are signed 64-bit at most.
pub async fn check_key_range(
    store: &Store,
    table: &Ident,
    column: &Ident,
) -> Result<(), TargetError> {
    if !store.target().dialect().has_unsigned_integers() {
        return Ok(());
    }
    let largest = Statement::new("SELECT MAX(")
        .ident(column)
        .push(") AS ")
        .ident(column)
        .push(" FROM ")
        .ident(table);
    store.target().fetch_cursor(&largest, 1).await?;
    Ok(())
}

/// Refuses `probe` (a statement the operation will run, filtering or ordering
/// on `column`) when the planner would scan all of `table` to run it.
pub async fn check_index(
    store: &Store,
    table: &Ident,
    column: &Ident,
    probe: &Statement,
) -> Result<(), TargetError> {
    let plan = store.target().explain(probe).await?;
    refuse_full_scan(store, table, column, &plan)
}

/// Refuses `plan` (the planner's plan for a statement over `table` filtering
/// or ordering on `column`) when it reads the whole table, naming the index
/// that would serve it.
pub fn refuse_full_scan(
    store: &Store,
    table: &Ident,
    column: &Ident,
    plan: &[String],
) -> Result<(), TargetError> {
    match store.target().dialect().full_scan_line(plan, table.name()) {
        Some(line) => Err(full_scan_refusal(table, column, &line)),
        None => Ok(()),
    }
}

/// The refusal of a statement over `table` filtering or ordering on
/// `column` whose plan reads the whole table at `line`, naming the index
/// that would serve it.
pub(crate) fn full_scan_refusal(table: &Ident, column: &Ident, line: &str) -> TargetError {
    TargetError::FullScan {
        table: table.to_string(),
        column: column.to_string(),
        index_name: format!("{}_{}_idx", table.name(), column.name()),
        plan: line.to_owned(),
    }
}

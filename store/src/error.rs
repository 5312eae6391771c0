//! The store's error type: every way a store call can fail, typed so callers
//! can tell a conflict (retry after reloading) from a lost lease (stop) from a
//! broken database (back off).

use crate::event::DecodeError;
use crate::machine::IllegalTransition;
use crate::spec::SpecError;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database URL's scheme is not one Sluice stores state in.
    #[error("unsupported database URL `{url}`: use sqlite:PATH, postgres://… or mysql://…")]
    UnsupportedUrl {
        /// The URL with any password removed.
        url: String,
    },
    /// An SQLite database file cannot be opened or created where the URL
    /// says (its folder is missing, or not readable or writable).
    #[error("cannot open the SQLite database `{path}`: {reason}")]
    CannotOpen {
        /// The file's path, as the URL gives it.
        path: String,
        /// Why, in words.
        reason: String,
    },
    /// The database could not be reached or a statement failed. Its text
    /// carries the database's error code (PostgreSQL's SQLSTATE as
    /// `database error 23505: …`; MySQL's and SQLite's are in their text).
    #[error("database error{}: {}", sqlstate(.0), .0)]
    Database(#[from] sqlx::Error),
    /// Applying the schema migrations failed.
    #[error("schema migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The server has no database of the URL's name.
    #[error(
        "the server at `{url}` has no such database: create it first, or correct --database-url \
         (SLUICE_DATABASE_URL)"
    )]
    UnknownDatabase {
        /// The URL with any password removed.
        url: String,
    },
    /// The store's migrations are recorded as applied, but some of its
    /// tables are gone.
    #[error(
        "the store in {database} lacks Sluice's tables {} although its migrations are recorded \
         as applied (dropped by hand?): restore them from a backup, or drop its \
         _sqlx_migrations table so that they are created anew, empty",
        .tables.join(", ")
    )]
    MissingTables {
        /// The database (PostgreSQL: and schema; SQLite: the file).
        database: String,
        /// The tables missing.
        tables: Vec<String>,
    },
    /// No operation has this id.
    #[error("no operation with id {0}")]
    NotFound(i64),
    /// No schedule has this name.
    #[error("no schedule named `{0}`")]
    UnknownSchedule(String),
    /// A schedule with this name already exists; nothing was written.
    #[error("a schedule named `{0}` already exists")]
    ScheduleExists(String),
    /// The enqueued spec is invalid; nothing was written.
    #[error("invalid operation: {0}")]
    InvalidSpec(#[from] SpecError),
    /// An append's expected sequence number is stale: another writer appended first.
    /// Nothing was written; reload and decide again.
    #[error(
        "operation {operation_id}: expected to append after event {expected}, but the log is at {actual}"
    )]
    Conflict {
        /// The operation.
        operation_id: i64,
        /// The sequence number the caller expected to be last.
        expected: i64,
        /// The actual last sequence number.
        actual: i64,
    },
    /// The caller's lease on the operation was taken over or released; its write was rejected.
    #[error("operation {operation_id}: lease epoch {epoch} of node `{node}` is no longer held")]
    LeaseLost {
        /// The operation.
        operation_id: i64,
        /// The node that thought it held the lease.
        node: String,
        /// Its (stale) epoch.
        epoch: i64,
    },
    /// A batch change its lifecycle refuses; nothing was written.
    #[error(transparent)]
    IllegalBatch(#[from] crate::batch_machine::IllegalBatchChange),
    /// The caller's lease on a batch was taken over; its write was rejected.
    #[error("batch {batch_id}: lease epoch {epoch} is no longer held")]
    BatchLeaseLost {
        /// The batch.
        batch_id: i64,
        /// The stale epoch.
        epoch: i64,
    },
    /// The batch's committed progress is not where the sub-batch started:
    /// an earlier sub-batch committed although its caller saw it fail (its
    /// answer was lost with the connection). Nothing of this one was kept;
    /// the batch's progress in the store is where to go on from.
    #[error("batch {batch_id}: its progress moved past where this sub-batch started")]
    ProgressMoved {
        /// The batch.
        batch_id: i64,
    },
    /// The event is not legal in the operation's current state; nothing was written.
    #[error("operation {operation_id}: {source}")]
    Illegal {
        /// The operation.
        operation_id: i64,
        /// Why.
        source: IllegalTransition,
    },
    /// A stored event cannot be read. The operation must stop; others are unaffected.
    #[error("operation {operation_id}, event {seq}: {source}")]
    CorruptEvent {
        /// The operation.
        operation_id: i64,
        /// The unreadable event's sequence number.
        seq: i64,
        /// Why it cannot be read.
        source: DecodeError,
    },
    /// A stored row holds a value this build cannot interpret.
    #[error("operation {operation_id}: column `{column}` holds an unreadable value: {detail}")]
    CorruptRow {
        /// The operation (or batch's operation).
        operation_id: i64,
        /// The column.
        column: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A batching column's values cannot be a cursor (only integers, text
    /// and PostgreSQL timestamps can).
    #[error(
        "column `{column}` has type {type_name}, which cannot order batches: use an integer, text or timestamp column"
    )]
    UnsupportedCursorType {
        /// The column as the query named it.
        column: String,
        /// The database's name for its type, and the value's where a row
        /// holds a value of another type (SQLite).
        type_name: String,
    },
    /// A batching column holds an unsigned integer (MySQL `BIGINT
    /// UNSIGNED`) above the signed 64-bit range that cursors hold.
    #[error(
        "column `{column}` holds {value}, above 9223372036854775807, the largest integer Sluice can batch by: batch by another unique column"
    )]
    KeyBeyondRange {
        /// The column as the query named it.
        column: String,
        /// The value found.
        value: u64,
    },
    /// A connection setting that the database cannot honour (an unsafe schema
    /// name, a setting another backend's).
    #[error("{0}")]
    BadSetting(String),
    /// Replaying the event log does not give the stored projection.
    #[error(
        "operation {operation_id}: replaying its {events} events does not reproduce the stored state"
    )]
    ReplayMismatch {
        /// The operation.
        operation_id: i64,
        /// Events replayed.
        events: usize,
    },
}

/// ` CODE`, PostgreSQL's SQLSTATE, for an error PostgreSQL answered (whose
/// text does not carry it; MySQL's and SQLite's name their codes), else
/// nothing.
fn sqlstate(error: &sqlx::Error) -> String {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .map(|pg| format!(" {}", pg.code()))
        .unwrap_or_default()
}

impl StoreError {
    /// True when the caller's input is at fault and nothing was changed: an
    /// unknown operation or schedule, a taken schedule name, an unsupported
    /// or malformed database URL, an invalid spec, an event the state machine
    /// refuses, a batching column no cursor can hold. Every layer above (the
    /// operations' and schedules' errors, the CLI's exit code 2) asks this.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            StoreError::NotFound(_)
                | StoreError::UnknownSchedule(_)
                | StoreError::ScheduleExists(_)
                | StoreError::UnsupportedUrl { .. }
                | StoreError::CannotOpen { .. }
                | StoreError::Database(sqlx::Error::Configuration(_))
                | StoreError::InvalidSpec(_)
                | StoreError::Illegal { .. }
                | StoreError::UnsupportedCursorType { .. }
                | StoreError::KeyBeyondRange { .. }
                | StoreError::BadSetting(_)
        )
    }

    /// True when the database refused a write because it is read-only (an
    /// SQLite file opened read-only or not writable, a PostgreSQL read-only
    /// transaction or standby, a MySQL server in read-only mode). Nothing
    /// was written.
    pub fn is_read_only(&self) -> bool {
        let refused = |e: &sqlx::Error| {
            e.as_database_error().is_some_and(|d| {
                matches!(d.code().as_deref(), Some("8" | "25006"))
                    || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                        .is_some_and(|m| matches!(m.number(), 1290 | 1836))
            })
        };
        match self {
            StoreError::Database(e) => refused(e),
            StoreError::Migrate(sqlx::migrate::MigrateError::Execute(e)) => refused(e),
            StoreError::Migrate(sqlx::migrate::MigrateError::ExecuteMigration(e, _)) => refused(e),
            _ => false,
        }
    }

    /// True when the same call may succeed if repeated later (the database was
    /// unreachable, a connection dropped, a lock wait timed out, the store
    /// could not be written for now): the caller should back off and retry
    /// rather than give up.
    pub fn is_transient(&self) -> bool {
        self.is_unavailable()
            || self.database_code().is_some_and(|code| {
                // SQLite busy/locked; PostgreSQL serialization, deadlock,
                // lock timeout; MySQL deadlock.
                matches!(code.as_str(), "40001" | "40P01" | "55P03")
                    || sqlite_primary(&code).is_some_and(|c| c == 5 || c == 6)
            })
            // MySQL's lock wait timeout and NOWAIT refusal (SQLSTATE HY000).
            || self.mysql_number().is_some_and(|n| matches!(n, 1205 | 3572))
    }

    /// True when the database itself cannot serve Sluice for now, whatever
    /// the statement: unreachable, its connections gone, its file read-only,
    /// unopenable or full, the server shutting down, in recovery or out of
    /// resources. Not the operation's fault: a worker waits it out (backing
    /// off, and logging each time) and never fails an operation for it.
    pub fn is_unavailable(&self) -> bool {
        let StoreError::Database(e) = self else {
            return false;
        };
        if matches!(
            e,
            sqlx::Error::Io(_)
                | sqlx::Error::PoolTimedOut
                | sqlx::Error::PoolClosed
                | sqlx::Error::WorkerCrashed
                | sqlx::Error::Protocol(_)
        ) {
            return true;
        }
        self.database_code().is_some_and(|code| {
            // SQLite (primary codes): READONLY, IOERR, FULL, CANTOPEN.
            sqlite_primary(&code).is_some_and(|c| matches!(c, 8 | 10 | 13 | 14))
                // PostgreSQL: connection exceptions, read-only transaction
                // (a standby, or default_transaction_read_only), insufficient
                // resources, admin or crash shutdown, cannot connect now.
                || code.starts_with("08")
                || code.starts_with("53")
                || matches!(code.as_str(), "25006" | "57P01" | "57P02" | "57P03")
        }) || self.mysql_number().is_some_and(|n| {
            // MySQL (SQLSTATE HY000 or 42000): `--read-only`, MariaDB's
            // read-only mode, too many connections for the user, out of
            // memory, disk full.
            matches!(n, 1290 | 1836 | 1203 | 1037 | 1041 | 1021)
        })
    }

    /// MySQL's own error number, when the database is MySQL or MariaDB.
    fn mysql_number(&self) -> Option<u16> {
        let StoreError::Database(e) = self else {
            return None;
        };
        Some(
            e.as_database_error()?
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()?
                .number(),
        )
    }

    /// The database's own error code (SQLSTATE, or SQLite's number).
    fn database_code(&self) -> Option<String> {
        let StoreError::Database(e) = self else {
            return None;
        };
        Some(e.as_database_error()?.code()?.into_owned())
    }
}

/// SQLite's primary result code (the low byte of an extended code), when
/// `code` is a number (PostgreSQL's SQLSTATEs are five characters).
fn sqlite_primary(code: &str) -> Option<i64> {
    if code.len() >= 5 {
        return None;
    }
    code.parse::<i64>().ok().map(|c| c & 0xff)
}

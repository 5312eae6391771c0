//! The store's error type: every way a store call can fail, typed so callers
//! can tell a conflict (retry after reloading) from a lost lease (stop) from a
//! broken database (back off).

use sluice_target::DatabaseError;
use sluice_target::error::{is_transient, is_unavailable, refused_as_read_only};

use crate::event::DecodeError;
use crate::machine::IllegalTransition;
use crate::spec::SpecError;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A failure the target side names (an unsupported URL, an unopenable
    /// SQLite file, a setting the database cannot honour, a batching column
    /// no cursor holds): [`DatabaseError`]'s variants other than
    /// `Database`, which is [`StoreError::Database`].
    #[error(transparent)]
    Target(DatabaseError),
    /// The database could not be reached or a statement failed. Its text
    /// carries the database's error code (PostgreSQL's SQLSTATE as
    /// `database error 23505: …`; MySQL's and SQLite's are in their text).
    #[error("database error{}: {}", sluice_target::error::sqlstate(.0), .0)]
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

impl From<DatabaseError> for StoreError {
    /// The target side's failure as the store's: a database error stays a
    /// database error, so every question below reads it alike.
    fn from(error: DatabaseError) -> Self {
        match error {
            DatabaseError::Database(e) => StoreError::Database(e),
            other => StoreError::Target(other),
        }
    }
}

impl StoreError {
    /// A connection setting the database cannot honour
    /// ([`DatabaseError::BadSetting`]).
    pub fn bad_setting(reason: impl Into<String>) -> Self {
        StoreError::Target(DatabaseError::BadSetting(reason.into()))
    }

    /// True when the caller's input is at fault and nothing was changed: an
    /// unknown operation or schedule, a taken schedule name, an unsupported
    /// or malformed database URL, an invalid spec, an event the state machine
    /// refuses, a batching column no cursor can hold. Every layer above (the
    /// operations' and schedules' errors, the CLI's exit code 2) asks this.
    pub fn is_bad_input(&self) -> bool {
        match self {
            StoreError::Target(e) => e.is_bad_input(),
            StoreError::Database(sqlx::Error::Configuration(_)) => true,
            _ => matches!(
                self,
                StoreError::NotFound(_)
                    | StoreError::UnknownSchedule(_)
                    | StoreError::ScheduleExists(_)
                    | StoreError::InvalidSpec(_)
                    | StoreError::Illegal { .. }
            ),
        }
    }

    /// True when the database refused a write because it is read-only (an
    /// SQLite file opened read-only or not writable, a PostgreSQL read-only
    /// transaction or standby, a MySQL server in read-only mode). Nothing
    /// was written.
    pub fn is_read_only(&self) -> bool {
        match self {
            StoreError::Database(e) => refused_as_read_only(e),
            StoreError::Migrate(sqlx::migrate::MigrateError::Execute(e)) => refused_as_read_only(e),
            StoreError::Migrate(sqlx::migrate::MigrateError::ExecuteMigration(e, _)) => {
                refused_as_read_only(e)
            }
            _ => false,
        }
    }

    /// True when the same call may succeed if repeated later (the database was
    /// unreachable, a connection dropped, a lock wait timed out, the store
    /// could not be written for now): the caller should back off and retry
    /// rather than give up.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Database(e) if is_transient(e))
    }

    /// True when the database itself cannot serve Sluice for now, whatever
    /// the statement: unreachable, its connections gone, its file read-only,
    /// unopenable or full, the server shutting down, in recovery or out of
    /// resources. Not the operation's fault: a worker waits it out (backing
    /// off, and logging each time) and never fails an operation for it.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Database(e) if is_unavailable(e))
    }
}

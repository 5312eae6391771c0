//! The target side's error type, and how a database's failure is read:
//! unavailable (wait it out), transient (retry), read-only, or the
//! caller's input. The store's error takes every variant of
//! [`DatabaseError`] as its own and asks the same questions of it.

/// Why a call on the target database failed.
#[derive(Debug, thiserror::Error)]
pub enum DatabaseError {
    /// The database URL's scheme is not one Sluice works on.
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
    /// A kept partition's record that cannot be attached back as it is.
    #[error(transparent)]
    KeptPartition(#[from] crate::kept_partitions::KeptPartitionError),
}

/// ` CODE`, PostgreSQL's SQLSTATE, for an error PostgreSQL answered (whose
/// text does not carry it; MySQL's and SQLite's name their codes), else
/// nothing.
pub fn sqlstate(error: &sqlx::Error) -> String {
    error
        .as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::postgres::PgDatabaseError>())
        .map(|pg| format!(" {}", pg.code()))
        .unwrap_or_default()
}

impl DatabaseError {
    /// True when the caller's input is at fault and nothing was changed: an
    /// unsupported or malformed URL, an unopenable file, a setting the
    /// database cannot honour, a batching column no cursor can hold.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            DatabaseError::UnsupportedUrl { .. }
                | DatabaseError::CannotOpen { .. }
                | DatabaseError::Database(sqlx::Error::Configuration(_))
                | DatabaseError::UnsupportedCursorType { .. }
                | DatabaseError::KeyBeyondRange { .. }
                | DatabaseError::BadSetting(_)
        )
    }

    /// True when the database refused a write because it is read-only
    /// ([`refused_as_read_only`]).
    pub fn is_read_only(&self) -> bool {
        matches!(self, DatabaseError::Database(e) if refused_as_read_only(e))
    }

    /// True when the same call may succeed if repeated later
    /// ([`is_transient`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, DatabaseError::Database(e) if is_transient(e))
    }

    /// True when the database itself cannot serve Sluice for now
    /// ([`is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, DatabaseError::Database(e) if is_unavailable(e))
    }
}

/// True when the database refused a write because it is read-only (an
/// SQLite file opened read-only or not writable, a PostgreSQL read-only
/// transaction or standby, a MySQL server in read-only mode). Nothing was
/// written.
pub fn refused_as_read_only(error: &sqlx::Error) -> bool {
    error.as_database_error().is_some_and(|d| {
        matches!(d.code().as_deref(), Some("8" | "25006"))
            || d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .is_some_and(|m| matches!(m.number(), 1290 | 1836))
    })
}

/// True when the same statement may succeed if repeated later (the
/// database was unreachable, a connection dropped, a lock wait timed out,
/// it could not be written for now): back off and retry rather than give up.
pub fn is_transient(error: &sqlx::Error) -> bool {
    is_unavailable(error)
        || database_code(error).is_some_and(|code| {
            // SQLite busy/locked; PostgreSQL serialization, deadlock,
            // lock timeout; MySQL deadlock.
            matches!(code.as_str(), "40001" | "40P01" | "55P03")
                || sqlite_primary(&code).is_some_and(|c| c == 5 || c == 6)
        })
        // MySQL's lock wait timeout and NOWAIT refusal (SQLSTATE HY000).
        || mysql_number(error).is_some_and(|n| matches!(n, 1205 | 3572))
}

/// True when the database itself cannot serve Sluice for now, whatever
/// the statement: unreachable, its connections gone, its file read-only,
/// unopenable or full, the server shutting down, in recovery or out of
/// resources. Not the operation's fault: a worker waits it out (backing
/// off, and logging each time) and never fails an operation for it.
pub fn is_unavailable(error: &sqlx::Error) -> bool {
    if matches!(
        error,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_)
    ) {
        return true;
    }
    database_code(error).is_some_and(|code| {
        // SQLite (primary codes): READONLY, IOERR, FULL, CANTOPEN.
        sqlite_primary(&code).is_some_and(|c| matches!(c, 8 | 10 | 13 | 14))
            // PostgreSQL: connection exceptions, read-only transaction
            // (a standby, or default_transaction_read_only), insufficient
            // resources, admin or crash shutdown, cannot connect now.
            || code.starts_with("08")
            || code.starts_with("53")
            || matches!(code.as_str(), "25006" | "57P01" | "57P02" | "57P03")
    }) || mysql_number(error).is_some_and(|n| {
        // MySQL (SQLSTATE HY000 or 42000): `--read-only`, MariaDB's
        // read-only mode, too many connections for the user, out of
        // memory, disk full.
        matches!(n, 1290 | 1836 | 1203 | 1037 | 1041 | 1021)
    })
}

/// MySQL's own error number, when the database is MySQL or MariaDB.
fn mysql_number(error: &sqlx::Error) -> Option<u16> {
    Some(
        error
            .as_database_error()?
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()?
            .number(),
    )
}

/// The database's own error code (SQLSTATE, or SQLite's number).
fn database_code(error: &sqlx::Error) -> Option<String> {
    Some(error.as_database_error()?.code()?.into_owned())
}

/// SQLite's primary result code (the low byte of an extended code), when
/// `code` is a number (PostgreSQL's SQLSTATEs are five characters).
fn sqlite_primary(code: &str) -> Option<i64> {
    if code.len() >= 5 {
        return None;
    }
    code.parse::<i64>().ok().map(|c| c & 0xff)
}

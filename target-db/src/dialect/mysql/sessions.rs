//! MySQL and MariaDB sessions: how Sluice opens a pool (every session
//! quoting with `"` and reading committed data), the same for an
//! application's pool, and the server versions Sluice can claim work on.

use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use crate::connection::ConnectOptions;
use crate::error::DatabaseError;

/// A MySQL or MariaDB pool for `url` (`mariadb://` is read as `mysql://`),
/// opened lazily: every session quotes identifiers with `"` and reads
/// committed data, as on the other dialects, and is left out of
/// `performance_schema`'s statistics where the user may say so.
pub(crate) fn open_mysql(url: &str, options: &ConnectOptions) -> Result<MySqlPool, DatabaseError> {
    if options.schema.is_some() {
        return Err(DatabaseError::BadSetting(
            "a schema is a PostgreSQL setting: on MySQL the database is the one the URL names"
                .into(),
        ));
    }
    if let Some(zone) = &options.time_zone
        && zone.parse::<chrono_tz::Tz>().is_err()
    {
        return Err(DatabaseError::BadSetting(format!(
            "unknown time zone `{zone}`: on MySQL name it as the IANA database does \
             (UTC, America/New_York, Europe/Berlin)"
        )));
    }
    let url = match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_owned(),
    };
    // sqlx adds `PIPES_AS_CONCAT` unless told not to: an operator's
    // `a = 1 || b = 2`, an `OR` in the mysql client, would then be a
    // concatenation compared twice, true of other rows than the client's.
    let connect = MySqlConnectOptions::from_str(&url)?.pipes_as_concat(false);
    Ok(MySqlPoolOptions::new()
        .after_connect(|connection, _| Box::pin(set_session(connection, SessionOf::Sluice)))
        .max_connections(options.max_connections)
        .acquire_timeout(options.acquire_timeout)
        .max_lifetime(options.max_lifetime)
        .connect_lazy_with(connect))
}

/// `pool` with every session set as Sluice's MySQL and MariaDB sessions
/// must be: identifiers quoted with `"` (`ANSI_QUOTES`, added to the
/// server's `sql_mode`) and committed data read (`READ COMMITTED`). Build an
/// application's pool with it to hand the pool to
/// Sluice (the store's `Store::mysql`, or [`crate::Target::of`]); the application's own statements
/// then read `"…"` as a name, not a string.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
/// let connect: MySqlConnectOptions = "mysql://app@localhost/app".parse()?;
/// let pool = sluice_target::mysql_sessions(MySqlPoolOptions::new())
///     .connect_with(connect.pipes_as_concat(false))
///     .await?;
/// let target = sluice_target::Target::of(sluice_target::Backend::MySql(pool));
/// # Ok(()) }
/// ```
pub fn mysql_sessions(pool: MySqlPoolOptions) -> MySqlPoolOptions {
    pool.after_connect(|connection, _| Box::pin(set_session(connection, SessionOf::Application)))
}

/// Whose pool a session is in.
#[derive(Clone, Copy, PartialEq)]
enum SessionOf {
    /// A pool Sluice opened: its statements are left out of
    /// `performance_schema`, so that the statements on a table it counts
    /// there are the application's alone (the latency budget's).
    Sluice,
    /// An application's pool handed to Sluice: its statements stay where
    /// the operator's monitoring reads them.
    Application,
}

/// Sets `connection` as a session of `of` must be.
async fn set_session(
    connection: &mut sqlx::MySqlConnection,
    of: SessionOf,
) -> Result<(), sqlx::Error> {
    use sqlx::Executor as _;
    connection
        .execute(
            "SET SESSION sql_mode = CONCAT(@@sql_mode, ',ANSI_QUOTES'); \
             SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        )
        .await?;
    if of == SessionOf::Sluice {
        // Needs UPDATE on `performance_schema`: without it the session
        // stays counted, and the latency budget leaves the digests unread
        // (`HealthQueries::statement_totals` checks).
        let _ = connection.execute(UNOBSERVED).await;
    }
    Ok(())
}

/// Leaves this session's statements out of `performance_schema`'s
/// statistics (a table both MySQL 8 and MariaDB have; no row, and nothing
/// done, where `performance_schema` is off).
const UNOBSERVED: &str = "UPDATE performance_schema.threads SET INSTRUMENTED = 'NO' \
     WHERE PROCESSLIST_ID = CONNECTION_ID()";

/// Refuses an application's MySQL pool whose sessions are not as
/// [`mysql_sessions`] sets them: Sluice's statements would read a quoted
/// name as a string, or see rows a sub-batch has not committed.
pub async fn check_mysql_sessions(pool: &MySqlPool) -> Result<(), DatabaseError> {
    let mode: String = sqlx::query_scalar("SELECT CAST(@@SESSION.sql_mode AS CHAR)")
        .fetch_one(pool)
        .await?;
    // MySQL 8 and MariaDB 11.1 name it `transaction_isolation`, earlier
    // MariaDB `tx_isolation`.
    let isolation: String =
        match sqlx::query_scalar("SELECT CAST(@@SESSION.transaction_isolation AS CHAR)")
            .fetch_one(pool)
            .await
        {
            Ok(isolation) => isolation,
            Err(_) => {
                sqlx::query_scalar("SELECT CAST(@@SESSION.tx_isolation AS CHAR)")
                    .fetch_one(pool)
                    .await?
            }
        };
    if mode.split(',').any(|m| m == "ANSI_QUOTES") && isolation == "READ-COMMITTED" {
        return Ok(());
    }
    Err(DatabaseError::BadSetting(format!(
        "the pool's sessions have sql_mode `{mode}` and isolation {isolation}: Sluice needs \
         ANSI_QUOTES and READ-COMMITTED; build the pool with sluice_store::mysql_sessions"
    )))
}

/// Refuses a MySQL server Sluice cannot claim work on: one without
/// `FOR UPDATE SKIP LOCKED` (older than MariaDB 10.6 or MySQL 8.0).
pub async fn check_mysql_server(pool: &MySqlPool) -> Result<(), DatabaseError> {
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(pool)
        .await?;
    if skips_locked_rows(&version) {
        return Ok(());
    }
    Err(DatabaseError::BadSetting(format!(
        "this server is {version}: Sluice claims work with FOR UPDATE SKIP LOCKED, \
         which needs MariaDB 10.6 or MySQL 8.0 and later"
    )))
}

/// Whether a MySQL server of `version` (as `VERSION()` reports it) has
/// `FOR UPDATE SKIP LOCKED`: MariaDB from 10.6, MySQL from 8.0.
pub(crate) fn skips_locked_rows(version: &str) -> bool {
    let mut numbers = version
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let major = numbers.next().unwrap_or(0);
    let minor = numbers.next().unwrap_or(0);
    if version.to_ascii_lowercase().contains("mariadb") {
        (major, minor) >= (10, 6)
    } else {
        major >= 8
    }
}

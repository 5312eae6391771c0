//! A database Sluice works on and its connection policy: which database
//! and pool ([`Backend`], [`ConnectOptions`]), the PostgreSQL sessions
//! bounded by `statement_timeout` that one-statement sub-batches run on,
//! and how many connections pool workers may keep between sub-batches
//! ([`Target`]). Nothing here knows operations, events or batches.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

use crate::error::DatabaseError;

/// Which database, and its pool.
#[derive(Debug, Clone)]
pub enum Backend {
    /// An SQLite file (or in-memory database): one machine, the embedded default.
    Sqlite(SqlitePool),
    /// PostgreSQL: several worker processes on several machines.
    Postgres(PgPool),
    /// MySQL or MariaDB (InnoDB): several worker processes on several
    /// machines, as PostgreSQL. Every session quotes identifiers with `"`
    /// (`ANSI_QUOTES`) and reads committed data (`READ COMMITTED`), as the
    /// other dialects do; otherwise it keeps the server's `sql_mode`, so an
    /// operator's `||` means what it means in the operator's own sessions
    /// (`OR`, unless the server is set to `PIPES_AS_CONCAT`).
    MySql(MySqlPool),
}

/// Connection settings for [`Target::open`] (and the store's `connect_with`).
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Most connections in the pool.
    pub max_connections: u32,
    /// How long an SQLite writer waits for the database lock before failing.
    pub busy_timeout: Duration,
    /// How long to wait for a connection from the pool.
    pub acquire_timeout: Duration,
    /// On PostgreSQL, also open up to `max_connections` connections whose
    /// sessions carry this `statement_timeout`, so that a sub-batch that is
    /// one statement is sent as one statement, with no transaction to open
    /// for a `SET LOCAL` (the runtime passes its sub-batch timeout).
    pub sub_batch_timeout: Option<Duration>,
    /// On PostgreSQL with [`ConnectOptions::sub_batch_timeout`], one pool
    /// whose every session carries that `statement_timeout`, for sub-batches
    /// and everything else alike, instead of two: for a target apart from
    /// the store, to which every worker holds connections of its own.
    pub one_pool: bool,
    /// How long a connection lives before its pool closes it and opens a
    /// fresh one (`None`: for ever), so no server session grows without end
    /// and a failover or a rebalanced proxy is followed. It holds for the
    /// connections a pool worker keeps between sub-batches too
    /// (the store's `SubBatchSession` gives one back once kept this long).
    /// Not for an in-memory SQLite database, whose one connection is the
    /// database and is never renewed.
    pub max_lifetime: Option<Duration>,
    /// On PostgreSQL, the schema Sluice's own tables live in (created if
    /// absent): it is put first on every session's `search_path`, before
    /// the sessions' own (the role's default, `"$user", public`, unless the
    /// URL or the server says otherwise), so `sluice_*` and the migrations'
    /// record are created there and nowhere else, while a target table
    /// named without a schema is found as the application finds it. `None`: the first schema of the default `search_path`
    /// (usually `public`). Refused on SQLite, whose state is a file of its own.
    pub schema: Option<String>,
    /// The zone times without a zone are written in: on PostgreSQL the
    /// session `TimeZone`, which a `timestamp` or `date` is read in when
    /// compared with a time bound (a zone the server does not know fails the
    /// connection); on MySQL the zone a `DATETIME` or `DATE` cutoff is
    /// written in (an IANA name). `None`: UTC, which sqlx sets on every
    /// session — and a built-in operation refuses such a column on a
    /// server whose own sessions default to another zone
    /// ([`Target::sessions_zone`]). On SQLite,
    /// whose text times without an offset are read as UTC, any other zone
    /// than `UTC` is refused.
    pub time_zone: Option<String>,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            max_connections: 8,
            busy_timeout: Duration::from_secs(10),
            acquire_timeout: Duration::from_secs(10),
            sub_batch_timeout: None,
            one_pool: false,
            max_lifetime: Some(Duration::from_secs(30 * 60)),
            schema: None,
            time_zone: None,
        }
    }
}

use crate::dialect::mysql::sessions::open_mysql;
pub use crate::dialect::mysql::sessions::{check_mysql_server, check_mysql_sessions};
pub use crate::dialect::postgres::sessions::check_postgres_search_path;
use crate::dialect::postgres::sessions::{SessionSettings, named};

/// A database Sluice works on: its pool, the PostgreSQL sessions bounded
/// for sub-batches, how many connections pool workers keep, and the zone
/// zoneless times are written in. What Sluice knows and checks about its
/// tables is asked of it (catalogue, keys, plans, probes, estimates,
/// statistics, session defaults). Cheap to clone; clones share the pools
/// and the count of kept connections.
#[derive(Debug, Clone)]
pub struct Target {
    backend: Backend,
    /// PostgreSQL connections whose sessions carry a `statement_timeout`, for
    /// sub-batches sent as one statement ([`Target::sub_batch_connection`]);
    /// only on targets that opened their own pool with
    /// [`ConnectOptions::sub_batch_timeout`].
    sub_batches: Option<BoundedSessions>,
    /// How many connections workers of this target and
    /// its clones keep now (see [`Target::keep_place`]).
    kept: Arc<AtomicU32>,
    /// The zone zoneless times are written in, when the target was told
    /// ([`ConnectOptions::time_zone`]).
    time_zone: Option<String>,
}

/// The pool of PostgreSQL sessions bounded by `statement_timeout` that
/// one-statement sub-batches run on.
#[derive(Debug, Clone)]
struct BoundedSessions {
    pool: PgPool,
    /// The `statement_timeout` its sessions carry.
    bound: Duration,
}

/// One kept connection's place in its target's count; given back when dropped.
#[derive(Debug)]
pub struct KeptPlace {
    count: Arc<AtomicU32>,
    /// How long the connection may be kept: the `max_lifetime` of the pool
    /// it came from, which closes it as over age once it is given back
    /// (`None`: for ever).
    pub lifetime: Option<Duration>,
}

impl Drop for KeptPlace {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Target {
    /// The connections of a pool opened elsewhere (no bounded sessions).
    pub fn of(backend: Backend) -> Self {
        Target {
            backend,
            sub_batches: None,
            kept: Arc::new(AtomicU32::new(0)),
            time_zone: None,
        }
    }

    /// Opens the pools `url` names with `options` (not migrated). A
    /// PostgreSQL URL's `sluice_schema=NAME` parameter (Sluice's, taken
    /// out before the URL reaches the driver) is [`ConnectOptions::schema`]:
    /// how a target apart from the store keeps Sluice's tables in a schema
    /// of their own; refused on the other databases.
    pub async fn open(url: &str, options: &ConnectOptions) -> Result<Self, DatabaseError> {
        let (url, own_schema) = take_query_parameter(url, OWN_SCHEMA_PARAMETER);
        let url = url.as_str();
        let mut options = std::borrow::Cow::Borrowed(options);
        if let Some(schema) = own_schema {
            if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                return Err(DatabaseError::BadSetting(format!(
                    "`{OWN_SCHEMA_PARAMETER}` is a PostgreSQL setting (a schema of Sluice's own); \
                     MySQL keeps Sluice's tables in the URL's database, SQLite in its file"
                )));
            }
            if options.schema.as_ref().is_some_and(|s| *s != schema) {
                return Err(DatabaseError::BadSetting(format!(
                    "the URL's `{OWN_SCHEMA_PARAMETER}={schema}` and the schema asked for (`{}`) differ",
                    options.schema.as_deref().unwrap_or_default()
                )));
            }
            options.to_mut().schema = Some(schema);
        }
        let options = options.as_ref();
        if url.starts_with("sqlite:") {
            // UTC is what SQLite reads a time without an offset as: saying
            // so (an environment set for every database) changes nothing.
            let other_zone = options
                .time_zone
                .as_deref()
                .is_some_and(|zone| !matches!(zone, "UTC" | "Etc/UTC"));
            if options.schema.is_some() || other_zone {
                return Err(DatabaseError::BadSetting(
                    "a schema and a time zone other than UTC are PostgreSQL and MySQL settings: \
                     an SQLite store is a file of its own, and its text times without an offset \
                     are read as UTC"
                        .into(),
                ));
            }
            let in_memory = url.contains(":memory:") || url.contains("mode=memory");
            let connect = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(if in_memory {
                    SqliteJournalMode::Memory
                } else {
                    SqliteJournalMode::Wal
                })
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(options.busy_timeout)
                .foreign_keys(true)
                // A sub-batch is a write transaction, so each of its
                // statements keeps a statement journal: the first image of
                // every page it changes (about 4 MB for 1,000 scattered
                // rows). In memory, not a temporary file written page by
                // page (the overhead bench's SQLite section, BENCHMARKS.md).
                .pragma("temp_store", "MEMORY");
            let pool = SqlitePoolOptions::new().acquire_timeout(options.acquire_timeout);
            let pool = if in_memory {
                // Each connection to an in-memory database is a database of
                // its own, which lives only while it is open: its one
                // connection is never closed for its age or idleness.
                pool.max_connections(1)
                    .max_lifetime(None)
                    .idle_timeout(None)
            } else {
                pool.max_connections(options.max_connections)
                    .max_lifetime(options.max_lifetime)
            };
            let path = connect.get_filename().to_owned();
            let pool = pool.connect_with(connect).await.map_err(|e| {
                let unopenable = e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .is_some_and(|code| code == "14");
                if !unopenable || in_memory {
                    return DatabaseError::Database(e);
                }
                let folder = path.parent().filter(|f| !f.as_os_str().is_empty());
                let reason = match folder {
                    Some(folder) if !folder.is_dir() => {
                        format!("its folder `{}` does not exist", folder.display())
                    }
                    _ => format!("{e} (check that its folder can be read and written)"),
                };
                DatabaseError::CannotOpen {
                    path: path.display().to_string(),
                    reason,
                }
            })?;
            Ok(Target::of(Backend::Sqlite(pool)))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let connect = named(PgConnectOptions::from_str(url)?);
            let mut session = SessionSettings::of(options)?;
            session.prepare(&connect).await?;
            let bound = options.sub_batch_timeout.map(|timeout| {
                let ms = statement_timeout_ms(timeout).to_string();
                (
                    timeout,
                    connect
                        .clone()
                        .options([("statement_timeout", ms.as_str())]),
                )
            });
            let one_pool = bound.as_ref().filter(|_| options.one_pool);
            let pool = session
                .apply(PgPoolOptions::new())
                .max_connections(options.max_connections)
                .acquire_timeout(options.acquire_timeout)
                .max_lifetime(options.max_lifetime)
                .connect_with(one_pool.map_or_else(|| connect.clone(), |(_, c)| c.clone()))
                .await?;
            if let Some(schema) = &options.schema {
                let current: String = sqlx::query_scalar("SELECT current_schema()::text")
                    .fetch_one(&pool)
                    .await?;
                if &current != schema {
                    return Err(DatabaseError::BadSetting(format!(
                        "the sessions' current schema is `{current}`, not `{schema}`: \
                         the role may not use schema `{schema}`"
                    )));
                }
            }
            let mut connections = Target::of(Backend::Postgres(pool));
            connections.time_zone = options.time_zone.clone();
            if let Some((timeout, bounded)) = bound {
                let pool = match &connections.backend {
                    Backend::Postgres(pool) if options.one_pool => pool.clone(),
                    _ => session
                        .apply(PgPoolOptions::new())
                        .max_connections(options.max_connections)
                        .acquire_timeout(options.acquire_timeout)
                        .max_lifetime(options.max_lifetime)
                        .connect_lazy_with(bounded),
                };
                connections.sub_batches = Some(BoundedSessions {
                    pool,
                    bound: timeout,
                });
            }
            Ok(connections)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            let mut connections = Target::of(Backend::MySql(open_mysql(url, options)?));
            connections.time_zone = options.time_zone.clone();
            Ok(connections)
        } else {
            Err(DatabaseError::UnsupportedUrl {
                url: redact_url(url),
            })
        }
    }

    /// The database's pool.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// What the database speaks where the databases differ.
    pub fn dialect(&self) -> &'static dyn crate::Dialect {
        self.backend.dialect()
    }

    /// What the database's catalogue says about its tables.
    pub(crate) fn catalogue(&self) -> &dyn crate::dialect::catalogue::Catalogue {
        self.backend.catalogue()
    }

    /// The queries behind the health indicators, on this database.
    pub fn health(&self) -> &dyn crate::dialect::health::HealthQueries {
        self.backend.health()
    }

    /// The zone zoneless times are written in, when the target was told.
    pub fn time_zone(&self) -> Option<&str> {
        self.time_zone.as_deref()
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.backend.close().await;
        if let Some(sessions) = &self.sub_batches {
            sessions.pool.close().await;
        }
    }

    /// The pool of sessions bounded by `statement_timeout`, when this store
    /// has one and its bound is within `timeout`.
    pub fn bounded_sessions(&self, timeout: Duration) -> Option<&PgPool> {
        self.sub_batches
            .as_ref()
            .filter(|sessions| sessions.bound <= timeout)
            .map(|sessions| &sessions.pool)
    }

    /// A place for a worker's session (the store's `SubBatchSession`) to keep one connection, if
    /// one is left. All the sessions of this store and its clones together
    /// may keep all but one of the PostgreSQL bounded sessions' connections
    /// (a pool of their own), none on a PostgreSQL store without them, and
    /// half of an SQLite or MySQL store's connections (its one pool, which
    /// the runtime's bookkeeping shares; none of an in-memory database's
    /// one).
    pub fn keep_place(&self) -> Option<KeptPlace> {
        let (most, lifetime) = match &self.sub_batches {
            // PostgreSQL's bounded sessions are a pool of their own.
            Some(sessions) => (
                sessions
                    .pool
                    .options()
                    .get_max_connections()
                    .saturating_sub(1),
                sessions.pool.options().get_max_lifetime(),
            ),
            None => self.backend.shared_keep_limits()?,
        };
        self.kept
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |kept| {
                (kept < most).then_some(kept + 1)
            })
            .ok()
            .map(|_| KeptPlace {
                count: self.kept.clone(),
                lifetime,
            })
    }
}

/// `timeout` as PostgreSQL's `statement_timeout` takes it: whole
/// milliseconds, at least 1 (0 would mean no limit), at most `i32::MAX`.
pub fn statement_timeout_ms(timeout: Duration) -> u128 {
    timeout.as_millis().clamp(1, i32::MAX as u128)
}

mod url;

#[cfg(test)]
use url::client_password;
use url::take_query_parameter;
pub use url::{OWN_SCHEMA_PARAMETER, redact_url, url_without_password, with_password_from_env};

#[cfg(test)]
mod tests;

//! The one place a database picks its dialect: the methods of [`Backend`]
//! that answer with that database's module, and the macro that runs one
//! query text on whichever pool it is.

use std::time::Duration;

use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;

use super::{Dialect, MYSQL, POSTGRES, SQLITE, catalogue, health};
use crate::connection::Backend;

/// Runs `$body` with `$pool` bound to the pool of `$on` (anything with a
/// `backend()`: a [`crate::Target`], a store), whichever database it is:
/// for SQL whose text is the same on every database (on MySQL, `sqlx` is
/// [`crate::positional`], which rewrites `$N` placeholders).
#[macro_export]
macro_rules! on_pool {
    ($on:expr, |$pool:ident| $body:expr) => {
        match $on.backend() {
            $crate::connection::Backend::Sqlite($pool) => $body,
            $crate::connection::Backend::Postgres($pool) => $body,
            $crate::connection::Backend::MySql($pool) => {
                #[allow(unused_imports, reason = "when the body runs no query")]
                use $crate::positional as sqlx;
                $body
            }
        }
    };
}

/// The one place a database picks its dialect: each method
/// answers with that database's module.
impl Backend {
    /// Closes the pool, waiting for connections in use to be returned.
    pub async fn close(&self) {
        match self {
            Backend::Sqlite(pool) => pool.close().await,
            Backend::Postgres(pool) => pool.close().await,
            Backend::MySql(pool) => pool.close().await,
        }
    }

    /// How many of this pool's connections pool workers may keep between
    /// sub-batches (half: the runtime's bookkeeping shares the pool), and
    /// how long one lives; `None` on PostgreSQL, whose workers keep only
    /// connections of the bounded sessions' own pool.
    pub fn shared_keep_limits(&self) -> Option<(u32, Option<Duration>)> {
        match self {
            Backend::Sqlite(pool) => Some((
                pool.options().get_max_connections() / 2,
                pool.options().get_max_lifetime(),
            )),
            Backend::MySql(pool) => Some((
                pool.options().get_max_connections() / 2,
                pool.options().get_max_lifetime(),
            )),
            Backend::Postgres(_) => None,
        }
    }

    /// What this backend's database speaks where the databases differ.
    pub fn dialect(&self) -> &'static dyn Dialect {
        match self {
            Backend::Sqlite(_) => &SQLITE,
            Backend::Postgres(_) => &POSTGRES,
            Backend::MySql(_) => &MYSQL,
        }
    }

    /// A one-connection pool on `url`, a database of this backend's kind
    /// (a replica's), each connection attempt bounded by `timeout`.
    ///
    /// Errors: sqlx's, when it cannot connect (or the URL is not one of
    /// this kind's: [`sqlx::Error::Configuration`]).
    pub async fn open_like(&self, url: &str, timeout: Duration) -> Result<Backend, sqlx::Error> {
        Ok(match self {
            Backend::Sqlite(_) => {
                return Err(sqlx::Error::Configuration(
                    "an SQLite database has no replicas".into(),
                ));
            }
            Backend::Postgres(_) => Backend::Postgres(
                PgPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(timeout)
                    .connect(url)
                    .await?,
            ),
            Backend::MySql(_) => Backend::MySql(
                MySqlPoolOptions::new()
                    .max_connections(1)
                    .acquire_timeout(timeout)
                    .connect(&url.replacen("mariadb://", "mysql://", 1))
                    .await?,
            ),
        })
    }

    /// The queries behind the health indicators, on this backend's pool.
    pub fn health(&self) -> &dyn health::HealthQueries {
        match self {
            Backend::Sqlite(pool) => pool,
            Backend::Postgres(pool) => pool,
            Backend::MySql(pool) => pool,
        }
    }

    /// What this backend's database's catalogue says about target tables.
    pub(crate) fn catalogue(&self) -> &dyn catalogue::Catalogue {
        match self {
            Backend::Sqlite(pool) => pool,
            Backend::Postgres(pool) => pool,
            Backend::MySql(pool) => pool,
        }
    }
}

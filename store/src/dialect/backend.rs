//! The one place a store's database picks its dialect: the methods of
//! [`Backend`] that answer with that database's module, and the macros
//! that run one query text on whichever pool the store has.

use std::time::Duration;

use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::PgPoolOptions;

use super::{Dialect, MYSQL, POSTGRES, SQLITE, catalogue, health};
use crate::connection::Backend;
use crate::error::StoreError;
use crate::sub_batch::Tx;

/// Runs `$body` with `$pool` bound to the store's pool, whichever database
/// it is: for SQL whose text is the same on every database (on MySQL,
/// `sqlx` is [`crate::positional`], which rewrites `$N` placeholders).
macro_rules! on_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match $store.backend() {
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
pub(crate) use on_pool;

/// Calls the per-backend function of [`crate::queries`] (or of the module
/// named first, such as [`crate::batch_queries`]) for the store's pool.
macro_rules! dispatch {
    ($self:ident . $function:ident ( $($arg:expr),* $(,)? )) => {
        dispatch!(queries, $self.$function($($arg),*))
    };
    ($module:ident, $self:ident . $function:ident ( $($arg:expr),* $(,)? )) => {
        match $self.connections.backend() {
            $crate::connection::Backend::Sqlite(pool) => $module::sqlite::$function(pool, $($arg),*).await,
            $crate::connection::Backend::Postgres(pool) => $module::postgres::$function(pool, $($arg),*).await,
            $crate::connection::Backend::MySql(pool) => $module::mysql::$function(pool, $($arg),*).await,
        }
    };
}
pub(crate) use dispatch;

/// The one place a store's database picks its dialect: each method
/// answers with that database's module.
impl Backend {
    /// A sub-batch's write transaction, every statement bounded by
    /// `timeout` on PostgreSQL (`SET LOCAL statement_timeout`, sent with the
    /// `BEGIN`); SQLite's takes the write lock from its first statement,
    /// MySQL's reads at `REPEATABLE READ`.
    pub(crate) async fn begin_sub_batch(
        &self,
        timeout: Option<Duration>,
    ) -> Result<Tx<'static>, StoreError> {
        use crate::sub_batch::{MYSQL_BEGIN, begin_bounded};
        Ok(match (self, timeout) {
            (Backend::Sqlite(pool), _) => {
                Tx::Sqlite(crate::queries::sqlite::begin_write(pool).await?)
            }
            (Backend::Postgres(pool), None) => {
                Tx::Postgres(crate::queries::postgres::begin_write(pool).await?)
            }
            (Backend::Postgres(pool), Some(timeout)) => {
                Tx::Postgres(begin_bounded(pool, timeout).await?)
            }
            (Backend::MySql(pool), _) => Tx::MySql(pool.begin_with(MYSQL_BEGIN).await?),
        })
    }

    /// Migrates Sluice's own tables in this database to the newest schema.
    pub(crate) async fn migrate(&self) -> Result<(), StoreError> {
        match self {
            Backend::Sqlite(pool) => sqlx::migrate!("./migrations/sqlite").run(pool).await?,
            Backend::Postgres(pool) => sqlx::migrate!("./migrations/postgres").run(pool).await?,
            Backend::MySql(pool) => {
                // Reached first, so an unreachable server is a database
                // error (transient), not a failed migration.
                crate::connection::check_mysql_server(pool).await?;
                sqlx::migrate!("./migrations/mysql").run(pool).await?
            }
        }
        Ok(())
    }

    /// Where Sluice's own tables are (for messages) and the tables there.
    pub(crate) async fn store_tables(&self) -> Result<(String, Vec<String>), StoreError> {
        Ok(match self {
        Backend::Sqlite(pool) => (
            sqlx::query_scalar("SELECT file FROM pragma_database_list WHERE name = 'main'")
                .fetch_one(pool)
                .await?,
            sqlx::query_scalar("SELECT name FROM sqlite_schema WHERE type = 'table'")
                .fetch_all(pool)
                .await?,
        ),
        Backend::Postgres(pool) => (
            sqlx::query_scalar("SELECT current_database() || ', schema ' || current_schema()")
                .fetch_one(pool)
                .await?,
            sqlx::query_scalar(
                "SELECT tablename::text FROM pg_catalog.pg_tables WHERE schemaname = current_schema()",
            )
            .fetch_all(pool)
            .await?,
        ),
        Backend::MySql(pool) => (
            sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
                .fetch_one(pool)
                .await?,
            sqlx::query_scalar(
                "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
                 WHERE table_schema = DATABASE()",
            )
            .fetch_all(pool)
            .await?,
        ),
    })
    }

    /// Closes the pool, waiting for connections in use to be returned.
    pub(crate) async fn close(&self) {
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
    pub(crate) fn shared_keep_limits(&self) -> Option<(u32, Option<Duration>)> {
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

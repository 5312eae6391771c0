//! The store's own SQL per database: its core statements (operations,
//! events, batches, leases), one named statement each, its migrations, and
//! the one macro that picks a database's function. A [`Statements`] value
//! is one dialect's set, in its module (`dialect/{db}.rs`): SQLite's
//! writes every statement out, and PostgreSQL's only those it words
//! differently (row locks, typed parameters), taking the rest from
//! SQLite's. A new dialect is one more value: the compiler names every
//! statement it still lacks.
//!
//! Every statement uses `$N` placeholders, which SQLite and PostgreSQL
//! accept and [`sluice_target::positional`] turns into MySQL's `?`. The statements that write a whole projection are derived from its
//! columns ([`crate::operation_row`]); the sub-batch statements, built around
//! an operation's own, live with the sub-batches ([`crate::sub_batch`]).

/// One dialect's statements. Each field's comment says what its statement
/// guarantees and what it binds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Statements {
    /// What an operation's `INSERT` does when an active operation has its
    /// identity: nothing (and no id returned), or, where empty, fail on the
    /// unique index (MySQL, which has no partial index to name; the store
    /// reads that failure as the same "nothing").
    pub on_active_identity: &'static str,
    /// Begins a write transaction; on SQLite it takes the database's write
    /// lock at once, so nothing read inside it is changed by another writer.
    pub begin_write: &'static str,
    /// The active (pending, running, paused) operation with unique key `$1`.
    pub active_operation: &'static str,
    /// Operation `$1`.
    pub operation: &'static str,
    /// Operation `$1`, locked for the rest of the transaction (PostgreSQL).
    pub operation_locked: &'static str,
    /// The first operation of fleet `$1`, locked for the rest of the
    /// transaction (PostgreSQL, MySQL): claims of one fleet's operations
    /// take it in turn, so its cap is counted right.
    pub fleet_head_locked: &'static str,
    /// Operations of status `$1` and kind `$2` (either `NULL`: any) with an
    /// id above `$3` (`NULL`: any), by id, at most `$4`.
    pub list_operations: &'static str,
    /// The same newest first: ids below `$3`, highest first, at most `$4`.
    pub list_operations_newest: &'static str,
    /// Operation `$1`'s events after sequence number `$2`, in order.
    pub events_after: &'static str,
    /// Up to `$2` claimable operations at time `$1` — pending, or running
    /// under a lapsed lease; of the kinds in JSON array `$3` (`NULL`: any);
    /// none a kill switch stops — user-made or older than `$4` first, then
    /// by priority and id; rows other transactions hold are skipped
    /// (PostgreSQL).
    pub claimable_operations: &'static str,
    /// Extends operation `$1`'s lease to `$4`, only while node `$2` holds it
    /// under epoch `$3`.
    pub renew_operation_lease: &'static str,
    /// Inserts the event of operation `$1` at sequence `$2` (kind `$3`, time
    /// `$4`, format `$5`, payload `$6`); the primary key refuses a second
    /// event at one sequence number.
    pub insert_event: &'static str,
    /// Inserts batch `$2` of operation `$1` (cursors `$3`–`$4`, sizes
    /// `$5`–`$6`, status `$7`, time `$8`), claimed by `$9` under epoch and
    /// attempt `$10` until `$11` when those are set; returns it, unless
    /// the dialect reads inserted rows back ([`Statements::last_insert_id`]).
    pub insert_batch: &'static str,
    /// Where an `INSERT` cannot return what it wrote (MySQL 8 has no
    /// `INSERT … RETURNING`; MariaDB has): the id the connection's last
    /// `INSERT` gave, read right after it in the same transaction. `None`:
    /// the dialect's inserts return their rows.
    pub last_insert_id: Option<&'static str>,
    /// Up to `$3` claimable batches of running operations (of operation
    /// `$1`, or any): pending, or running under a claim that lapsed before
    /// `$2`; oldest first; their ids, the rows locked for the rest of the
    /// transaction, rows other transactions hold skipped (PostgreSQL,
    /// MySQL).
    pub claimable_batches: &'static str,
    /// Claims batch `$1` for node `$3` until `$4`: status `$2`, a new
    /// epoch, one more attempt.
    pub claim_batch: &'static str,
    /// Batch `$1`.
    pub batch: &'static str,
    /// Gives batch `$1` back (status `$3`, the attempt not counted), only
    /// while epoch `$2` holds it.
    pub release_batch: &'static str,
    /// Extends batch `$1`'s claim to `$3`, only while epoch `$2` holds it.
    pub renew_batch_lease: &'static str,
    /// Records batch `$1` done (status `$6`, `$3` rows in `$4` ms at `$5`),
    /// only while epoch `$2` holds it.
    pub complete_batch: &'static str,
    /// Records batch `$1`'s failed attempt (status `$3`, error `$4`, the
    /// sub-batch size `$5` if set, finished at `$6` if failed for good),
    /// only while epoch `$2` holds it.
    pub fail_batch: &'static str,
    /// Sets batch `$1`'s status to `$2`, unfinished (the decision re-taken
    /// once its operation was read, in the same transaction).
    pub set_batch_status: &'static str,
    /// Batch `$1` while epoch `$2` holds it, locked for the rest of the
    /// transaction (PostgreSQL).
    pub held_batch_locked: &'static str,
    /// Shortens batch `$1` to end at `$2` with size `$3`, sub-batch size
    /// `$4`, error `$5` and status `$6`; its attempts start afresh and its
    /// committed progress stays.
    pub shorten_batch: &'static str,
    /// Inserts the second half of a split: batch `$2` of operation `$1` over
    /// `$3`–`$4`, sizes `$5`–`$6`, status `$8`, planned at `$7`.
    pub insert_split_batch: &'static str,
    /// Operation `$1`'s failed batches set to status `$2`, unfinished.
    pub requeue_failed_batches: &'static str,
    /// Operation `$1`'s batches, in order.
    pub batches: &'static str,
    /// Deletes up to `$2` batches of operations that finished or were
    /// cancelled before `$1`.
    pub prune_batches: &'static str,
}

mod mysql;
mod postgres;
mod sqlite;

pub(crate) use mysql::STATEMENTS as MYSQL;
pub(crate) use postgres::STATEMENTS as POSTGRES;
pub(crate) use sqlite::STATEMENTS as SQLITE;

use sluice_target::Backend;

use crate::error::StoreError;

/// Calls the per-backend function of [`crate::queries`] (or of the module
/// named first, such as [`crate::batch_queries`]) for the store's pool.
macro_rules! dispatch {
    ($self:ident . $function:ident ( $($arg:expr),* $(,)? )) => {
        dispatch!(queries, $self.$function($($arg),*))
    };
    ($module:ident, $self:ident . $function:ident ( $($arg:expr),* $(,)? )) => {
        match $self.backend() {
            sluice_target::Backend::Sqlite(pool) => $module::sqlite::$function(pool, $($arg),*).await,
            sluice_target::Backend::Postgres(pool) => $module::postgres::$function(pool, $($arg),*).await,
            sluice_target::Backend::MySql(pool) => $module::mysql::$function(pool, $($arg),*).await,
        }
    };
}
pub(crate) use dispatch;

/// Migrates Sluice's own tables in `backend`'s database to the newest schema.
pub(crate) async fn migrate(backend: &Backend) -> Result<(), StoreError> {
    match backend {
        Backend::Sqlite(pool) => sqlx::migrate!("./migrations/sqlite").run(pool).await?,
        Backend::Postgres(pool) => sqlx::migrate!("./migrations/postgres").run(pool).await?,
        Backend::MySql(pool) => {
            // Reached first, so an unreachable server is a database
            // error (transient), not a failed migration.
            sluice_target::connection::check_mysql_server(pool).await?;
            sqlx::migrate!("./migrations/mysql").run(pool).await?
        }
    }
    Ok(())
}

/// Where Sluice's own tables are (for messages) and the tables there.
pub(crate) async fn store_tables(backend: &Backend) -> Result<(String, Vec<String>), StoreError> {
    Ok(match backend {
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

/// What the session that enqueued operation `id` resolved its SQL through,
/// as recorded with it (PostgreSQL; empty elsewhere, whose sessions all
/// share one file or database).
///
/// Errors: [`StoreError::NotFound`] for an unknown id, or the database's.
pub(crate) async fn enqueuing_session(
    backend: &Backend,
    id: i64,
) -> Result<sluice_target::EnqueuingSession, StoreError> {
    let Backend::Postgres(pool) = backend else {
        return Ok(sluice_target::EnqueuingSession::default());
    };
    let (search_path, role): (Option<String>, Option<String>) =
        sqlx::query_as("SELECT search_path, enqueued_by FROM sluice_operations WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?
            .ok_or(StoreError::NotFound(id))?;
    Ok(sluice_target::EnqueuingSession { search_path, role })
}

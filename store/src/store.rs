//! [`Store`]: the one handle to Sluice's durable state.
//!
//! Guarantees, on both backends:
//! - every state change is an event appended to the operation's log together
//!   with the updated projection, in one transaction (both or neither);
//! - an append that names a stale expected sequence number, or a lease that
//!   was taken over, writes nothing and fails with a typed error;
//! - enqueueing an operation whose identity matches an active one returns the
//!   existing one; the database's partial unique index enforces it, so
//!   concurrent enqueues from any number of processes create one operation;
//! - the schema is migrated on connect (migrations are embedded in the crate).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::MySqlPool;
use sqlx::postgres::PgPool;
use sqlx::sqlite::SqlitePool;

use crate::bulk_enqueue;
use crate::clock::{Clock, SystemClock, millis};
use crate::error::StoreError;
use crate::event::{self, Event, RecordedEvent};
use crate::machine::{self, OperationStatus, Projection};
use crate::queries::{self, Appended, Expected};
use crate::record::{EventRow, Lease, OperationRecord};
use crate::spec::OperationSpec;
use sluice_target::on_pool;
use sluice_target::{Backend, ConnectOptions, Target};

/// The handle to Sluice's durable state in one database: its domain API
/// (operations, events, batches, leases). Cheap to clone; clones share the
/// connections. How connections are pooled, bounded and kept is
/// [`sluice_target::connection`]'s.
///
/// ```no_run
/// # async fn example() -> Result<(), sluice_store::StoreError> {
/// use sluice_store::{OperationSpec, Store};
///
/// let store = Store::connect("sqlite:sluice.sqlite").await?; // or postgres://, mysql://
/// let spec = OperationSpec::new("delete-aged-rows", "events", vec!["id".into()]);
/// let first = store.enqueue(spec.clone()).await?;
/// let again = store.enqueue(spec).await?; // the same operation, no new id
/// assert_eq!((again.id, again.created), (first.id, false));
/// store.verify(first.id).await?; // its event log replays to what is stored
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    /// The database the store lives in, as a target: Sluice's tables are
    /// there, beside the tables its operations work on.
    connections: Target,
    /// The database the store's operations work on when it is not the
    /// store's own ([`Store::on_target`]).
    pub(crate) apart: Option<Arc<crate::target_progress::TargetApart>>,
    clock: Arc<dyn Clock>,
}

/// The result of [`Store::enqueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// The operation's id.
    pub id: i64,
    /// False when an active operation with the same identity already existed
    /// and `id` is that operation's.
    pub created: bool,
}

/// Which operations [`Store::list`] returns.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only this status.
    pub status: Option<OperationStatus>,
    /// Only this kind.
    pub kind: Option<String>,
    /// At most this many (default 1,000).
    pub limit: Option<i64>,
    /// Newest first (highest id first) instead of oldest first.
    pub newest_first: bool,
    /// Only operations past this id in the listing's order (above it oldest
    /// first, below it newest first): the next page after a listing whose
    /// last id it is.
    pub after: Option<i64>,
}

use crate::dialect::dispatch;

mod batches;

impl Store {
    /// Connects to `url` (`sqlite:PATH`, `sqlite::memory:`, `postgres://…`),
    /// creating an SQLite file if it does not exist, and migrates the schema.
    ///
    /// Errors: [`sluice_target::DatabaseError::UnsupportedUrl`] for any other scheme (nothing is
    /// touched), [`StoreError::Database`] when the database cannot be reached.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, &ConnectOptions::default()).await
    }

    /// [`Store::connect`] with explicit pool settings.
    pub async fn connect_with(url: &str, options: &ConnectOptions) -> Result<Self, StoreError> {
        let opened = async { Store::migrated(Target::open(url, options).await?).await };
        opened.await.map_err(|e| no_such_database(e, url))
    }

    /// A store in an existing SQLite pool (the host application's), migrated.
    pub async fn sqlite(pool: SqlitePool) -> Result<Self, StoreError> {
        Store::migrated(Target::of(Backend::Sqlite(pool))).await
    }

    /// A store in an existing PostgreSQL pool (the host application's), migrated.
    /// Concurrent migrations from several processes are serialised by sqlx's advisory lock.
    /// Sluice's tables go in the sessions' current schema (the first
    /// existing one on their `search_path`: set it in the pool's connect
    /// options to keep them apart); a path whose first schema does not
    /// exist is refused rather than fall through to the next.
    pub async fn postgres(pool: PgPool) -> Result<Self, StoreError> {
        sluice_target::connection::check_postgres_search_path(&pool).await?;
        Store::migrated(Target::of(Backend::Postgres(pool))).await
    }

    /// A store in an existing MySQL or MariaDB pool (the host application's),
    /// migrated, in the database its URL names. Its sessions must be set as
    /// [`sluice_target::mysql_sessions`] sets them, else it is refused
    /// ([`sluice_target::DatabaseError::BadSetting`]) before anything is written.
    pub async fn mysql(pool: MySqlPool) -> Result<Self, StoreError> {
        sluice_target::connection::check_mysql_server(&pool).await?;
        sluice_target::connection::check_mysql_sessions(&pool).await?;
        Store::migrated(Target::of(Backend::MySql(pool))).await
    }

    /// A store on `connections`, its schema migrated.
    async fn migrated(connections: Target) -> Result<Self, StoreError> {
        crate::dialect::migrate(connections.backend()).await?;
        missing_tables(&connections).await?;
        Ok(Store {
            connections,
            apart: None,
            clock: Arc::new(SystemClock),
        })
    }

    /// The same store reading time from `clock` (tests move time with a [`crate::ManualClock`]).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The clock the store stamps events and leases with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The database the store lives in, for callers that run their own SQL there.
    pub fn backend(&self) -> &Backend {
        self.connections.backend()
    }

    /// The database the store's operations work on, as a target: what
    /// Sluice knows and checks about its tables (catalogue, keys, plans,
    /// probes, estimates, statistics, session defaults), and its
    /// connections for sub-batches. The store's own database, unless this
    /// handle was made for a target apart from it ([`Store::on_target`]).
    pub fn target(&self) -> &Target {
        match &self.apart {
            Some(apart) => &apart.target,
            None => &self.connections,
        }
    }

    /// What the session that enqueued operation `id` resolved its SQL
    /// through, as recorded with it (PostgreSQL; empty elsewhere), for
    /// [`Target::session_mismatch`].
    ///
    /// Errors: [`StoreError::NotFound`] for an unknown id, or the database's.
    pub async fn enqueuing_session(
        &self,
        id: i64,
    ) -> Result<sluice_target::EnqueuingSession, StoreError> {
        crate::dialect::enqueuing_session(self.backend(), id).await
    }

    /// The zone the store was told times without a zone are written in
    /// ([`sluice_target::ConnectOptions::time_zone`]); `None`: read as UTC.
    pub fn time_zone(&self) -> Option<&str> {
        self.connections.time_zone()
    }

    /// Closes the pools, waiting for connections in use to be returned.
    pub async fn close(&self) {
        self.connections.close().await;
    }

    /// Validates `spec` and records a new pending operation with its `created`
    /// event, or returns the active operation with the same identity
    /// ([`OperationSpec::unique_key`]) without writing anything.
    ///
    /// Errors: [`StoreError::InvalidSpec`] (nothing written), [`StoreError::Database`].
    pub async fn enqueue(&self, mut spec: OperationSpec) -> Result<Enqueued, StoreError> {
        spec.validate()?;
        let now = self.clock.now_ms();
        let (id, created) = dispatch!(self.enqueue(&spec, now))?;
        Ok(Enqueued { id, created })
    }

    /// Enqueues many operations at once, each like [`Store::enqueue`]
    /// (validated, unique by identity), writing them in chunks of
    /// [`Store::ENQUEUE_CHUNK`]: one statement per chunk on PostgreSQL, one
    /// transaction per chunk on SQLite. Returns one [`Enqueued`] per spec, in
    /// order; a spec whose identity repeats an earlier one in `specs` gets
    /// that one's id with `created == false`.
    ///
    /// Every spec is validated before anything is written
    /// ([`StoreError::InvalidSpec`] names the first bad one). Chunks commit
    /// one after another: after a database error the chunks before it stay
    /// written, and calling again with the same specs is safe (uniqueness
    /// returns the operations already there).
    pub async fn enqueue_many(&self, specs: &[OperationSpec]) -> Result<Vec<Enqueued>, StoreError> {
        let mut specs = specs.to_vec();
        for spec in &mut specs {
            spec.validate()?;
        }
        // The first spec of each identity is written; repeats take its outcome.
        let mut first_of: HashMap<String, usize> = HashMap::new();
        let mut distinct = Vec::new();
        let slots: Vec<usize> = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| {
                *first_of.entry(spec.unique_key()).or_insert_with(|| {
                    distinct.push(i);
                    distinct.len() - 1
                })
            })
            .collect();
        let now = self.clock.now_ms();
        let mut written: Vec<Enqueued> = Vec::with_capacity(distinct.len());
        for chunk in distinct.chunks(Self::ENQUEUE_CHUNK) {
            let chunk_specs: Vec<OperationSpec> = chunk.iter().map(|&i| specs[i].clone()).collect();
            let outcomes = dispatch!(bulk_enqueue, self.enqueue_chunk(&chunk_specs, now))?;
            for (spec, outcome) in chunk_specs.into_iter().zip(outcomes) {
                let (id, created) = match outcome {
                    Some(outcome) => outcome,
                    // Its twin ended meanwhile: the ordinary path retries.
                    None => dispatch!(self.enqueue(&spec, now))?,
                };
                written.push(Enqueued { id, created });
            }
        }
        let mut seen = vec![false; written.len()];
        Ok(slots
            .into_iter()
            .map(|slot| {
                let first = !std::mem::replace(&mut seen[slot], true);
                Enqueued {
                    id: written[slot].id,
                    created: written[slot].created && first,
                }
            })
            .collect())
    }

    /// Operations written per chunk by [`Store::enqueue_many`].
    pub const ENQUEUE_CHUNK: usize = bulk_enqueue::ENQUEUE_CHUNK;

    /// The operation with this id. Errors: [`StoreError::NotFound`].
    pub async fn operation(&self, id: i64) -> Result<OperationRecord, StoreError> {
        dispatch!(self.operation(id))
    }

    /// How many operations are in each status (statuses with none left out).
    pub async fn status_counts(&self) -> Result<Vec<(OperationStatus, i64)>, StoreError> {
        const COUNTS: &str = "SELECT status, COUNT(*) FROM sluice_operations GROUP BY status";
        let rows: Vec<(String, i64)> =
            on_pool!(self, |pool| sqlx::query_as(COUNTS).fetch_all(pool).await?);
        Ok(rows
            .into_iter()
            .filter_map(|(status, n)| OperationStatus::parse(&status).map(|s| (s, n)))
            .collect())
    }

    /// Operations matching `filter`, oldest first.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<OperationRecord>, StoreError> {
        dispatch!(self.list(filter))
    }

    /// The operations of fleet `fleet` ([`OperationSpec::fleet`]: one per
    /// target of one enqueue), by id.
    pub async fn fleet(&self, fleet: &str) -> Result<Vec<OperationRecord>, StoreError> {
        dispatch!(self.fleet(fleet))
    }

    /// Appends `events` to an operation's log and updates its projection in one
    /// transaction. `expected` guards against lost updates; `fence`, when given,
    /// must be the lease the operation is currently held under.
    ///
    /// Errors: [`StoreError::Conflict`], [`StoreError::LeaseLost`],
    /// [`StoreError::Illegal`] (the state machine refused an event), and
    /// [`StoreError::NotFound`]; in every case nothing is written.
    pub async fn append(
        &self,
        id: i64,
        expected: Expected,
        fence: Option<&Lease>,
        events: &[Event],
    ) -> Result<Appended, StoreError> {
        let now = self.clock.now_ms();
        dispatch!(self.append(id, expected, fence, events, now))
    }

    /// The operation's events after sequence number `after_seq` (0 for all), in order.
    ///
    /// Errors: [`StoreError::CorruptEvent`] naming the operation and sequence
    /// number of the first event that cannot be decoded.
    pub async fn events(&self, id: i64, after_seq: i64) -> Result<Vec<RecordedEvent>, StoreError> {
        let rows = dispatch!(self.event_rows(id, after_seq))?;
        rows.into_iter().map(decode_row).collect()
    }

    /// Rebuilds the operation's projection by replaying its whole log.
    ///
    /// Errors: [`StoreError::CorruptEvent`]; [`StoreError::Illegal`] if the
    /// stored log is not one the state machine accepts; [`StoreError::NotFound`].
    pub async fn replay(&self, id: i64) -> Result<Projection, StoreError> {
        let events = self.events(id, 0).await?;
        let state = machine::replay(events.iter().map(|e| (&e.event, e.recorded_at))).map_err(
            |source| StoreError::Illegal {
                operation_id: id,
                source,
            },
        )?;
        state.ok_or(StoreError::NotFound(id))
    }

    /// Replays the log and compares it with the stored projection.
    ///
    /// Errors: [`StoreError::ReplayMismatch`] when they differ, and those of [`Store::replay`].
    pub async fn verify(&self, id: i64) -> Result<(), StoreError> {
        let stored = self.operation(id).await?;
        let replayed = self.replay(id).await?;
        if replayed != stored.state {
            return Err(StoreError::ReplayMismatch {
                operation_id: id,
                events: replayed.last_seq as usize,
            });
        }
        Ok(())
    }

    /// Claims up to `limit` runnable operations for `node` under leases lasting
    /// `ttl`: pending ones, and running ones whose lease expired (their holder
    /// is presumed dead; its later writes will be rejected). User-triggered
    /// operations come first (and schedule-triggered ones waiting longer than
    /// [`crate::PROMOTE_AFTER_MS`] with them), then higher priority,
    /// then older. Operations of a kind switched off ([`Store::set_switch`])
    /// are not claimed. Each claim
    /// appends a `started` event in the same transaction.
    pub async fn claim_operations(
        &self,
        node: &str,
        limit: i64,
        ttl: Duration,
    ) -> Result<Vec<Appended>, StoreError> {
        self.claim_operations_of(node, None, limit, ttl).await
    }

    /// Like [`Store::claim_operations`], only operations whose kind is in
    /// `kinds` (all kinds when `None`): a node claims only what it can run.
    pub async fn claim_operations_of(
        &self,
        node: &str,
        kinds: Option<&[&str]>,
        limit: i64,
        ttl: Duration,
    ) -> Result<Vec<Appended>, StoreError> {
        let now = self.clock.now_ms();
        let kinds = kinds.map(|k| serde_json::to_string(k).expect("strings serialise"));
        dispatch!(self.claim_operations(node, kinds, limit, millis(ttl), now))
    }

    /// Extends a lease by `ttl` from now.
    ///
    /// Errors: [`StoreError::LeaseLost`] when another node took the operation
    /// over or the lease was released (the operation was paused, cancelled…).
    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let now = self.clock.now_ms();
        dispatch!(self.renew_lease(lease, millis(ttl), now))
    }
}

fn decode_row(row: EventRow) -> Result<RecordedEvent, StoreError> {
    let event = event::decode(row.format_version, &row.kind, &row.payload).map_err(|source| {
        StoreError::CorruptEvent {
            operation_id: row.operation_id,
            seq: row.seq,
            source,
        }
    })?;
    Ok(RecordedEvent {
        operation_id: row.operation_id,
        seq: row.seq,
        recorded_at: row.recorded_at,
        event,
    })
}

/// [`StoreError::UnknownDatabase`] for a server's answer that the URL's
/// database does not exist (PostgreSQL 3D000, MySQL 1049); `error` as it
/// is otherwise.
fn no_such_database(error: StoreError, url: &str) -> StoreError {
    let StoreError::Database(e) = &error else {
        return error;
    };
    let code = e.as_database_error().and_then(|d| d.code());
    let postgres = code.as_deref() == Some("3D000");
    let mysql = code.as_deref() == Some("42000") && e.to_string().contains("1049 (42000)");
    if postgres || mysql {
        return StoreError::UnknownDatabase {
            url: sluice_target::redact_url(url),
        };
    }
    error
}

/// Sluice's own tables, on every backend.
const STORE_TABLES: &[&str] = &[
    "sluice_batches",
    "sluice_canaries",
    "sluice_coordinator",
    "sluice_events",
    "sluice_heartbeat",
    "sluice_latency_budgets",
    "sluice_operations",
    "sluice_rate_limits",
    "sluice_resumes",
    "sluice_schedule_fires",
    "sluice_schedules",
    "sluice_switches",
    "sluice_windows",
];

/// Refuses a store whose migrations are recorded as applied but some of
/// whose tables are gone (dropped by hand, a schema emptied): every
/// statement would fail on them with the database's raw error.
async fn missing_tables(connections: &Target) -> Result<(), StoreError> {
    let (place, present) = crate::dialect::store_tables(connections.backend()).await?;
    let missing: Vec<String> = STORE_TABLES
        .iter()
        .filter(|t| !present.iter().any(|p| p == *t))
        .map(|t| (*t).to_owned())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(StoreError::MissingTables {
        database: place,
        tables: missing,
    })
}

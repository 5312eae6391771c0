//! Sub-batch sessions: how a pool worker reaches the connection its
//! sub-batches run on, keeps it between them, and runs a one-statement
//! sub-batch with its record in the fewest round trips — each form as
//! all-or-nothing as a [`SubBatchTx`] holding the statement.

use std::time::{Duration, Instant};

use sluice_target::sql::{SqlText, SqlValue};
use sluice_target::{Cursor, KeptPlace, Statement, TargetConnection};

use crate::batch_queries::batch_lease_lost;
use crate::error::StoreError;
use crate::record::BatchLease;
use crate::store::Store;
use crate::sub_batch::{SubBatchTx, record_refused};
use crate::target_progress::{coordinated, update_progress};

mod one_statement;

use one_statement::{fused_with_record, is_division_by_zero, loop_statement, write_in};

/// A pool worker's way to the connections its one-statement sub-batches run
/// on: PostgreSQL's sessions bounded by `statement_timeout` (see
/// [`sluice_target::ConnectOptions::sub_batch_timeout`]), or an SQLite store's pool,
/// where each sub-batch is a write transaction.
///
/// One that keeps its connection ([`Store::sub_batch_session`] with `keep`)
/// holds it from one sub-batch to the next. A sub-batch then costs no pool
/// round trips: sqlx pings a connection as it is taken from its pool and
/// again as it is returned, two round trips beside a 1–2 ms statement. On
/// SQLite it also keeps its page cache warm: each connection has its own,
/// which a change made through another connection makes stale.
///
/// The connection goes back to the pool after any error (the pool tests it
/// and drops it if broken), when its statement is cancelled midway, and
/// when it has been idle longer than [`SubBatchSession::KEPT_IDLE`], so a
/// connection the server closed while a worker idled is replaced by a
/// tested one before a sub-batch meets it; and once it has been kept as
/// long as its pool lets a connection live
/// ([`sluice_target::ConnectOptions::max_lifetime`]), so a busy worker's connection
/// is renewed like any other.
///
/// All the sessions of a store (and of its clones) keep at most all but one
/// of the bounded sessions' connections between them (half of an SQLite
/// store's connections, whose pool the runtime's bookkeeping shares), so
/// however many sessions there are, none waits on a connection another one
/// keeps: a session that finds no place left takes a connection for each
/// statement, as one that does not keep does, and tries for a place again
/// with its next connection. A sub-batch that is a transaction, not one
/// statement (an operation's own `run`), runs on the same connection,
/// which the session lends out for it ([`SubBatchSession::connection`])
/// and takes back once it commits ([`SubBatchSession::put_back`]).
#[derive(Debug)]
pub struct SubBatchSession {
    store: Store,
    keeps: bool,
    held: Option<HeldConnection>,
}

#[derive(Debug)]
struct HeldConnection {
    connection: TargetConnection,
    /// When the session took it from the pool.
    taken: Instant,
    used: Instant,
    /// Its place among the store's kept connections: kept after a
    /// statement only with one.
    place: Option<KeptPlace>,
}

impl Store {
    /// A [`SubBatchSession`] on this store; with `keep` it holds its
    /// connection between sub-batches while the store has a place for it.
    pub fn sub_batch_session(&self, keep: bool) -> SubBatchSession {
        SubBatchSession {
            store: self.clone(),
            keeps: keep,
            held: None,
        }
    }

    /// [`SubBatchSession::run_sub_batch_statement`] on a connection taken for
    /// this statement alone.
    pub async fn run_sub_batch_statement(
        &self,
        lease: &BatchLease,
        statement: &Statement,
        from: Option<&Cursor>,
        progress: Option<&Cursor>,
        timeout: std::time::Duration,
    ) -> Result<u64, StoreError> {
        self.sub_batch_session(false)
            .run_sub_batch_statement(lease, statement, from, progress, timeout)
            .await
    }

    /// [`SubBatchSession::run_loop_sub_batch_statement`] on a connection
    /// taken for this statement alone.
    pub async fn run_loop_sub_batch_statement(
        &self,
        lease: &BatchLease,
        statement: &Statement,
        from: Option<&Cursor>,
        limit: i64,
        timeout: std::time::Duration,
    ) -> Result<u64, StoreError> {
        self.sub_batch_session(false)
            .run_loop_sub_batch_statement(lease, statement, from, limit, timeout)
            .await
    }
}

impl SubBatchSession {
    /// How long a kept connection may sit unused and still be used again
    /// without the pool testing it.
    pub const KEPT_IDLE: Duration = Duration::from_secs(5);

    /// The store this session works for.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs a sub-batch that is exactly one data-changing statement (a
    /// `DELETE` or `UPDATE` over the sub-batch's rows) and records it done —
    /// the same all-or-nothing as a [`SubBatchTx`] holding that statement,
    /// in fewer round trips:
    /// - PostgreSQL, on a store with sessions bounded by `statement_timeout`
    ///   (see [`sluice_target::ConnectOptions::sub_batch_timeout`]): one statement,
    ///   the change and the fenced progress record in one `WITH`, whose last
    ///   step divides by the number of batch rows recorded, so a lost lease
    ///   aborts the whole statement (nothing is kept);
    /// - PostgreSQL otherwise: that statement inside `BEGIN; SET LOCAL
    ///   statement_timeout` … `COMMIT` (three round trips instead of four);
    /// - SQLite: a write transaction with the statement and the record.
    ///
    /// Returns the rows changed. Errors: [`StoreError::BatchLeaseLost`] when
    /// the batch was re-claimed since, [`StoreError::ProgressMoved`] when
    /// its progress is no longer `from` (a sub-batch from there committed
    /// already), a database error of the statement: nothing is kept.
    pub async fn run_sub_batch_statement(
        &mut self,
        lease: &BatchLease,
        statement: &Statement,
        from: Option<&Cursor>,
        progress: Option<&Cursor>,
        timeout: std::time::Duration,
    ) -> Result<u64, StoreError> {
        // Built only where it runs (PostgreSQL): SQLite and MySQL record in
        // a transaction, and a sub-batch should not pay for a text it drops.
        let store = self.store.clone();
        let coordinator = store.coordinator();
        let fused = || fused_with_record(statement, lease, from, progress, coordinator);
        let Some(mut connection) = self.lend(timeout).await? else {
            // PostgreSQL without bounded sessions: the fused statement in a
            // bounded transaction.
            let mut tx = self.store.target().begin_sub_batch(Some(timeout)).await?;
            let done = tx.fetch_pair(&fused()).await;
            if done.is_ok() {
                tx.commit_fused().await?;
            }
            return self.fused_outcome(lease, from, done).await;
        };
        let done = if connection.connection.fuses_statements() {
            let done = connection.connection.fetch_pair(&fused()).await;
            self.fused_outcome(lease, from, done).await
        } else {
            match connection.connection.begin_sub_batch(timeout).await {
                Ok(tx) => write_in(tx, lease, statement, from, progress, coordinator).await,
                Err(error) => Err(error.into()),
            }
        };
        self.settle(connection, done.is_ok());
        done
    }

    /// What the fused statement's outcome means: the rows changed, or, when
    /// it divided by zero because its fence matched no batch row,
    /// [`StoreError::BatchLeaseLost`] or [`StoreError::ProgressMoved`] (the
    /// batch row checked, so an operation's own division by zero stays its
    /// own error).
    async fn fused_outcome(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
        done: Result<(i64, i64), sqlx::Error>,
    ) -> Result<u64, StoreError> {
        match done {
            Ok((rows, _)) => Ok(rows as u64),
            Err(error) if is_division_by_zero(&error) => {
                if !self.store.holds_batch(lease).await? {
                    return Err(batch_lease_lost(lease));
                }
                match self.store.batch_progress_is(lease, from).await? {
                    false => Err(record_refused(lease, true)),
                    true => Err(error.into()),
                }
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Runs a loop sub-batch that is exactly one data-changing statement
    /// changing at most `limit` rows (`… WHERE key = ANY (ARRAY(SELECT key …
    /// LIMIT n))` or `… WHERE key IN (SELECT key … LIMIT n)`: every
    /// sub-batch but the scope's last changes `limit`) and records
    /// it done, with no `RETURNING` (which makes PostgreSQL re-read every
    /// row a `DELETE` removes):
    /// - PostgreSQL, on a store with sessions bounded by `statement_timeout`:
    ///   one statement, `WITH recorded AS (<the fenced count of limit rows
    ///   in the batch's row>) <statement>`, the statement's guard
    ///   ([`Statement::guard`]) replaced by `EXISTS (SELECT 1 FROM
    ///   recorded)` — or, without one, that condition appended to its
    ///   `WHERE` — so a lost lease changes nothing. (In a guard the fence is
    ///   tested once, before any row is read; appended, it is tested above
    ///   the scan, once per row the statement changes, about 35 µs more on
    ///   a 1,000-row sub-batch.) The batch's row lock orders the count and a
    ///   takeover's claim: whichever commits second sees the other. When the
    ///   statement changed other than `limit` rows (the scope's last
    ///   sub-batch), a second, fenced statement sets the count right at
    ///   once; a crash between the two leaves the batch's row count off by
    ///   the difference until the batch completes, when the runtime writes
    ///   its exact total — the change itself is exactly once either way;
    /// - otherwise: a transaction with the statement and the record, as
    ///   [`Store::run_sub_batch_statement`].
    ///
    /// `statement` must end inside its top-level `WHERE` (the store appends
    /// `AND …`), as the statements of a sub-batch's `rows_where` do.
    ///
    /// Returns the rows changed. Errors: [`StoreError::BatchLeaseLost`] when
    /// the batch was re-claimed since (nothing is kept); a database error of
    /// the statement (nothing is kept).
    pub async fn run_loop_sub_batch_statement(
        &mut self,
        lease: &BatchLease,
        statement: &Statement,
        from: Option<&Cursor>,
        limit: i64,
        timeout: std::time::Duration,
    ) -> Result<u64, StoreError> {
        let Some(mut connection) = self.lend(timeout).await? else {
            return self
                .store
                .sub_batch_in_transaction(lease, statement, from, None, timeout)
                .await;
        };
        let store = self.store.clone();
        let coordinator = store.coordinator();
        let counted = if connection.connection.fuses_statements() {
            loop_statement(
                &mut connection.connection,
                lease,
                statement,
                limit,
                coordinator,
            )
            .await
        } else {
            match connection.connection.begin_sub_batch(timeout).await {
                Ok(tx) => write_in(tx, lease, statement, from, None, coordinator).await,
                Err(error) => Err(error.into()),
            }
        };
        self.settle(connection, counted.is_ok());
        counted
    }

    /// Runs a read statement (where a sub-batch ends) on this session's
    /// connection, outside any transaction, and returns its first row's
    /// first `width` columns as a cursor, or `None` for no row or a NULL, as
    /// [`sluice_target::Target::fetch_cursor`] does: on the kept connection, it costs the
    /// sub-batch no round trip to the pool.
    pub async fn fetch_cursor(
        &mut self,
        statement: &Statement,
        width: usize,
        timeout: Duration,
    ) -> Result<Option<Cursor>, StoreError> {
        let Some(mut connection) = self.lend(timeout).await? else {
            return Ok(self.store.target().fetch_cursor(statement, width).await?);
        };
        let found = connection
            .connection
            .fetch_cursor(statement, width)
            .await
            .map_err(StoreError::from);
        self.settle(connection, found.is_ok());
        found
    }

    /// The connection for a sub-batch from the pool this session keeps its
    /// connection from: an SQLite or MySQL store's pool, or PostgreSQL's
    /// sessions bounded within `timeout`
    /// ([`sluice_target::Target::lends_sub_batch_connections`]). `None` on a
    /// PostgreSQL store without such sessions, whose sub-batches open a
    /// bounded transaction on a connection of the store's pool instead.
    ///
    /// The kept connection is used if it was used within
    /// [`SubBatchSession::KEPT_IDLE`] and has not been kept as long as its
    /// pool lets a connection live, else a fresh one (tested by the pool as
    /// it hands it out; a stale or old kept one goes back to the pool,
    /// which closes it if over age). It is out of the session until
    /// [`SubBatchSession::settle`] puts it back, so a statement cancelled
    /// midway (its future dropped by a timer or a stopping worker) gives
    /// its connection back to the pool, never to the session; sqlx then
    /// ends what the statement left open (it rolls back a dropped
    /// transaction, and on SQLite a `BEGIN` answered after its future was
    /// gone).
    async fn lend(&mut self, timeout: Duration) -> Result<Option<HeldConnection>, StoreError> {
        let target = self.store.target();
        if !target.lends_sub_batch_connections(timeout) {
            return Ok(None);
        }
        let kept = self.held.take().filter(|held| {
            held.used.elapsed() <= Self::KEPT_IDLE
                && held.place.as_ref().is_some_and(|place| {
                    place
                        .lifetime
                        .is_none_or(|most| held.taken.elapsed() < most)
                })
        });
        if let Some(held) = kept {
            return Ok(Some(held));
        }
        let connection = target.sub_batch_connection(timeout).await?;
        let place = self.keeps.then(|| target.keep_place()).flatten();
        Ok(Some(HeldConnection::fresh(connection, place)))
    }

    /// After a statement: the connection is kept if the statement succeeded
    /// and the session has a place for it, else it goes back to the pool.
    fn settle(&mut self, mut held: HeldConnection, succeeded: bool) {
        if succeeded && held.place.is_some() {
            held.used = Instant::now();
            self.held = Some(held);
        }
    }

    /// Lends out a connection for a sub-batch that is a transaction, not
    /// one statement ([`SessionConnection::begin_sub_batch`]): the kept one
    /// or a fresh one from the pool this session's one-statement sub-batches
    /// use (an SQLite store's pool; on PostgreSQL the sessions bounded
    /// within `timeout`). A PostgreSQL store without such sessions lends one
    /// of its pool's connections, which is never kept. Give it back with
    /// [`SubBatchSession::put_back`]; one dropped instead (its sub-batch
    /// cancelled) goes back to the pool, where sqlx ends the transaction it
    /// was in.
    pub async fn connection(&mut self, timeout: Duration) -> Result<SessionConnection, StoreError> {
        let held = match self.lend(timeout).await? {
            Some(held) => held,
            // Never kept: it is of the store's pool, not the bounded sessions.
            None => HeldConnection::fresh(
                self.store.target().sub_batch_connection(timeout).await?,
                None,
            ),
        };
        Ok(SessionConnection {
            held,
            coordinator: self.store.coordinator().map(str::to_owned),
        })
    }

    /// Takes back a connection lent out by [`SubBatchSession::connection`]:
    /// it is kept for the next sub-batch if its transaction `committed` and
    /// the session has a place for it, else it goes back to the pool.
    pub fn put_back(&mut self, connection: SessionConnection, committed: bool) {
        self.settle(connection.held, committed);
    }
}

/// A connection a [`SubBatchSession`] lent out for one sub-batch
/// transaction ([`SubBatchSession::connection`]).
#[derive(Debug)]
pub struct SessionConnection {
    held: HeldConnection,
    /// Whose rows of a target's progress table its sub-batches record into.
    coordinator: Option<String>,
}

impl SessionConnection {
    /// Opens a sub-batch transaction for a batch this node holds on this
    /// connection, as [`Store::begin_sub_batch_within`] does on one from the
    /// pool: on PostgreSQL every statement bounded by `timeout` (`SET LOCAL
    /// statement_timeout`, sent with the `BEGIN`), on SQLite a write
    /// transaction (`BEGIN IMMEDIATE`).
    pub async fn begin_sub_batch(
        &mut self,
        lease: &BatchLease,
        from: Option<&Cursor>,
        timeout: Duration,
    ) -> Result<SubBatchTx<'_>, StoreError> {
        let tx = self.held.connection.begin_sub_batch(timeout).await?;
        Ok(SubBatchTx::new(
            tx,
            lease,
            from,
            self.coordinator.as_deref(),
        ))
    }
}

impl HeldConnection {
    /// A connection just taken from its pool, kept after its statement only
    /// with a `place`.
    fn fresh(connection: TargetConnection, place: Option<KeptPlace>) -> Self {
        let now = Instant::now();
        HeldConnection {
            connection,
            taken: now,
            used: now,
            place,
        }
    }
}

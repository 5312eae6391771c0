//! Exactly-once sub-batches: a transaction in the store's database in which an
//! operation's data change and the record that the sub-batch is done commit
//! together.
//!
//! [`SubBatchTx::commit`] advances the batch's progress cursor and row count
//! conditioned on the batch lease (`WHERE lease_epoch = $n AND status =
//! 'running'`) and on the progress the sub-batch started from; the record
//! runs in the target's transaction ([`TargetTx::commit_recorded`]), which
//! commits the change only if the record was accepted. If the batch was
//! re-claimed by another node meanwhile, the whole transaction — data change
//! included — rolls back and the caller gets [`StoreError::BatchLeaseLost`].
//! So when the target table lives in the same database as the store, every
//! sub-batch's change is applied exactly once, whatever crashes or takeovers
//! happen around it.

use sluice_target::sql::{SqlText, SqlValue};
use sluice_target::{Cursor, Ident, ProgressRecord, Recorded, Statement, TargetTx};

use crate::batch_queries::batch_lease_lost;
use crate::error::StoreError;
use crate::record::BatchLease;
use crate::store::Store;
use crate::target_progress::{coordinated, held_batch, update_progress};

/// Why a sub-batch's record matched no batch row: the batch was claimed
/// again, or (still `held`) its progress moved on.
pub(crate) fn record_refused(lease: &BatchLease, held: bool) -> StoreError {
    match held {
        true => StoreError::ProgressMoved {
            batch_id: lease.batch_id,
        },
        false => batch_lease_lost(lease),
    }
}

/// An open sub-batch transaction, on a connection from the store's pool
/// (`'static`: [`Store::begin_sub_batch`]) or on one a session lent out
/// (borrowed for `'c`: [`crate::SessionConnection::begin_sub_batch`]). Dropping it
/// without [`SubBatchTx::commit`] rolls back.
#[derive(Debug)]
pub struct SubBatchTx<'c> {
    tx: TargetTx<'c>,
    lease: BatchLease,
    /// Where the batch's progress was when the sub-batch started: its
    /// record is accepted only while it is still there.
    from: Option<Cursor>,
    /// The coordinator whose record in the target's progress table this
    /// sub-batch updates, when it works on a target apart from the store
    /// (`None`: the store's `sluice_batches`).
    coordinator: Option<String>,
}

/// The record of one sub-batch in its batch's row, fenced by the batch's
/// lease and by the progress the sub-batch started from.
struct BatchProgress<'a> {
    lease: &'a BatchLease,
    from: Option<&'a Cursor>,
    progress: Option<&'a Cursor>,
    rows: i64,
    coordinator: Option<&'a str>,
}

impl ProgressRecord for BatchProgress<'_> {
    fn record(&self) -> Statement {
        let json = |cursor: Option<&Cursor>| cursor.map_or(SqlValue::Null, |c| c.to_json().into());
        let mut params = vec![
            self.lease.batch_id.into(),
            self.lease.epoch.into(),
            json(self.progress),
            self.rows.into(),
            json(self.from),
        ];
        let text = update_progress(self.coordinator).push(SubBatchTx::RECORD_SET);
        let text = coordinated(text, &mut params, self.coordinator);
        Statement::with_text(text, params)
    }

    fn still_held(&self) -> Statement {
        held_batch(self.lease, self.coordinator)
    }
}

impl Store {
    /// Opens a sub-batch transaction for a batch this node holds, whose
    /// progress is at `from` (its start, or where earlier sub-batches got).
    pub async fn begin_sub_batch(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
    ) -> Result<SubBatchTx<'static>, StoreError> {
        self.begin_sub_batch_within(lease, from, None).await
    }

    /// Like [`Store::begin_sub_batch`], bounding every statement of the
    /// transaction to `timeout` on PostgreSQL (`SET LOCAL statement_timeout`,
    /// sent with the `BEGIN` in one round trip; a statement over it fails
    /// with SQLSTATE 57014). SQLite has no such setting: the runtime bounds
    /// the whole sub-batch with a timer instead.
    pub async fn begin_sub_batch_within(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
        timeout: Option<std::time::Duration>,
    ) -> Result<SubBatchTx<'static>, StoreError> {
        let tx = self.target().begin_sub_batch(timeout).await?;
        Ok(SubBatchTx::new(tx, lease, from, self.coordinator()))
    }
}

impl Store {
    /// `statement` and its record in one write transaction (bounded by
    /// `timeout` on PostgreSQL): the exact path every backend has.
    pub(crate) async fn sub_batch_in_transaction(
        &self,
        lease: &BatchLease,
        statement: &Statement,
        from: Option<&Cursor>,
        progress: Option<&Cursor>,
        timeout: std::time::Duration,
    ) -> Result<u64, StoreError> {
        let mut tx = self
            .begin_sub_batch_within(lease, from, Some(timeout))
            .await?;
        let rows = tx.execute(statement).await?;
        tx.commit(progress, i64::try_from(rows).unwrap_or(i64::MAX))
            .await?;
        Ok(rows)
    }

    /// True while the batch `lease` names has its progress at `from` (its
    /// start until a sub-batch commits), as its records say (the store's,
    /// or the target's when this handle works apart).
    pub(crate) async fn batch_progress_is(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
    ) -> Result<bool, StoreError> {
        let json = from.map_or(SqlValue::Null, |c| c.to_json().into());
        let mut params = vec![lease.batch_id.into(), json];
        let text = SqlText::new("SELECT COUNT(*) FROM ")
            .push(crate::target_progress::progress_table(self.coordinator()))
            .push(
                " WHERE id = $1 AND COALESCE(progress_cursor, start_cursor, '') = COALESCE($2, '')",
            );
        let text = coordinated(text, &mut params, self.coordinator());
        let at = self
            .progress_database()
            .fetch_int(&Statement::with_text(text, params))
            .await?;
        Ok(at == Some(1))
    }

    /// True while `lease` still holds its batch, as its records say.
    pub(crate) async fn holds_batch(&self, lease: &BatchLease) -> Result<bool, StoreError> {
        let held = self
            .progress_database()
            .fetch_int(&held_batch(lease, self.coordinator()))
            .await?;
        Ok(held == Some(1))
    }
}

impl<'c> SubBatchTx<'c> {
    /// A sub-batch transaction for `lease`, on `tx`, from progress `from`,
    /// recording into `coordinator`'s rows of the target's progress table
    /// (`None`: the store's `sluice_batches`).
    pub(crate) fn new(
        tx: TargetTx<'c>,
        lease: &BatchLease,
        from: Option<&Cursor>,
        coordinator: Option<&str>,
    ) -> Self {
        SubBatchTx {
            tx,
            lease: lease.clone(),
            from: from.cloned(),
            coordinator: coordinator.map(str::to_owned),
        }
    }

    /// The batch this transaction works for.
    pub fn lease(&self) -> &BatchLease {
        &self.lease
    }

    /// Runs a data-changing statement inside the transaction; returns the rows affected.
    pub async fn execute(&mut self, statement: &Statement) -> Result<u64, StoreError> {
        Ok(self.tx.execute(statement).await?)
    }

    /// Like [`sluice_target::Target::fetch_cursor`], inside the transaction
    /// (so the rows it reads are the rows the transaction then changes).
    pub async fn fetch_cursor(
        &mut self,
        statement: &Statement,
        width: usize,
    ) -> Result<Option<Cursor>, StoreError> {
        Ok(self.tx.fetch_cursor(statement, width).await?)
    }

    /// The first column of the first row `statement` returns, as text
    /// (`None` for no row or `NULL`), read inside the transaction.
    pub async fn fetch_text(
        &mut self,
        statement: &Statement,
    ) -> Result<Option<String>, StoreError> {
        Ok(self.tx.fetch_text(statement).await?)
    }

    /// The name that reaches each row of `table` by its SQLite rowid
    /// ([`TargetTx::rowid_name`]), or `None`.
    pub async fn rowid_name(&mut self, table: &Ident) -> Result<Option<&'static str>, StoreError> {
        Ok(self.tx.rowid_name(table).await?)
    }

    /// The statement [`SubBatchTx::commit`] records the sub-batch with
    /// before it commits (for tracing: its text has placeholders only), in
    /// the store's `sluice_batches`; in a target's progress table it is the
    /// same update of `sluice_target_progress` with `AND coordinator = $6`.
    pub const RECORD: &'static str = "UPDATE sluice_batches SET progress_cursor = COALESCE($3, progress_cursor), \
         rows_affected = rows_affected + $4 WHERE id = $1 AND lease_epoch = $2 AND status = 'running' \
         AND COALESCE(progress_cursor, start_cursor, '') = COALESCE($5, '')";

    /// [`SubBatchTx::RECORD`] after its `UPDATE <table> SET `.
    const RECORD_SET: &'static str = "progress_cursor = COALESCE($3, progress_cursor), \
         rows_affected = rows_affected + $4 WHERE id = $1 AND lease_epoch = $2 AND status = 'running' \
         AND COALESCE(progress_cursor, start_cursor, '') = COALESCE($5, '')";

    /// Records the sub-batch as done (the batch's progress moves to `progress`,
    /// its row count grows by `rows`) and commits it with the data change.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was re-claimed
    /// since, [`StoreError::ProgressMoved`] when its progress is no longer
    /// where this sub-batch started (a sub-batch from there committed
    /// already); then nothing of the transaction is kept.
    pub async fn commit(self, progress: Option<&Cursor>, rows: i64) -> Result<(), StoreError> {
        let record = BatchProgress {
            lease: &self.lease,
            from: self.from.as_ref(),
            progress,
            rows,
            coordinator: self.coordinator.as_deref(),
        };
        match self.tx.commit_recorded(&record).await? {
            Recorded::Committed => Ok(()),
            Recorded::Refused { held } => Err(record_refused(&self.lease, held)),
        }
    }
}

//! A batch's life in the store: planned from the operation's cursor,
//! claimed under a lease, completed, failed, released or split, each
//! fenced by the batch's lease; and the pruning of old batch records.

use std::time::Duration;

use crate::batch_queries::{self, BatchDone};
use crate::clock::millis;
use sluice_target::cursor::Cursor;
use sluice_target::on_pool;

use crate::dialect::dispatch;
use crate::error::StoreError;
use crate::queries::Appended;
use crate::record::{Batch, BatchLease, Lease, NextBatch};
use crate::store::Store;

impl Store {
    /// Records the operation's next batch, from its cursor to `end` (inclusive;
    /// `None` for a loop batch), before it runs: a `batch_planned` event and a
    /// pending batch row, in one transaction, fenced by `lease`.
    pub async fn plan_batch(
        &self,
        lease: &Lease,
        end: Option<Cursor>,
        size: i64,
    ) -> Result<(Batch, Appended), StoreError> {
        let now = self.clock.now_ms();
        dispatch!(batch_queries, self.plan_batch(lease, end, size, None, now))
    }

    /// [`Store::plan_batch`], and the batch claimed by `lease`'s node for
    /// `next.ttl` in the same transaction (its first attempt, epoch 1): what
    /// an owner that runs its batches itself does, in one commit instead of two.
    ///
    /// Errors: [`StoreError::LeaseLost`] when `lease` no longer holds the
    /// operation; [`StoreError::Illegal`] when its state machine refuses the
    /// plan (nothing is written either way).
    pub async fn plan_claimed_batch(
        &self,
        lease: &Lease,
        next: &NextBatch,
    ) -> Result<(Batch, Appended), StoreError> {
        let now = self.clock.now_ms();
        let (batch, appended) = dispatch!(
            batch_queries,
            self.plan_batch(lease, next.end.clone(), next.size, Some(next.ttl), now)
        )?;
        Ok((self.adopted(batch).await?, appended))
    }

    /// Claims up to `limit` batches of running operations (of one operation
    /// when `operation_id` is given) for `node`: pending ones, and running
    /// ones whose lease expired. Each claim raises the batch's epoch and
    /// attempt count; no two nodes ever hold the same batch epoch. On a
    /// handle working on a target apart, each is adopted there
    /// ([`Store::on_target`]); one a later claim adopted already is left out.
    pub async fn claim_batches(
        &self,
        node: &str,
        operation_id: Option<i64>,
        limit: i64,
        ttl: Duration,
    ) -> Result<Vec<Batch>, StoreError> {
        let now = self.clock.now_ms();
        let claimed = dispatch!(
            batch_queries,
            self.claim_batches(node, operation_id, limit, millis(ttl), now)
        )?;
        let mut adopted = Vec::with_capacity(claimed.len());
        for batch in claimed {
            match self.adopted(batch).await {
                Ok(batch) => adopted.push(batch),
                Err(StoreError::BatchLeaseLost { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(adopted)
    }

    /// Running operations with a batch another node could claim now (one
    /// pending, or running under a lapsed lease), lowest id first, at most
    /// `limit`: the work a node may help with ([`Store::claim_batches`]).
    /// An operation with a row ceiling per run (`max_rows_per_run`) is not
    /// among them: its owner alone counts the rows of its run, so it runs
    /// them alone and the ceiling holds for the run, not per worker.
    pub async fn operations_with_claimable_batches(
        &self,
        limit: i64,
    ) -> Result<Vec<i64>, StoreError> {
        const CLAIMABLE: &str = "SELECT DISTINCT b.operation_id FROM sluice_batches b \
             JOIN sluice_operations o ON o.id = b.operation_id \
             WHERE o.status = 'running' AND o.max_rows_per_run IS NULL \
             AND (b.status = 'pending' OR (b.status = 'running' AND b.lease_expires_at < $1)) \
             ORDER BY b.operation_id LIMIT $2";
        let now = self.clock.now_ms();
        let ids: Vec<(i64,)> = on_pool!(self, |pool| sqlx::query_as(CLAIMABLE)
            .bind(now)
            .bind(limit)
            .fetch_all(pool)
            .await?);
        Ok(ids.into_iter().map(|(id,)| id).collect())
    }

    /// Gives a running batch back (pending, unleased) without recording a
    /// failure: its holder stops before finishing it (pause, shutdown), so
    /// the next claim need not wait for the lease to lapse. Its committed
    /// progress is kept, and the claim given back does not count as one of
    /// its attempts. Errors: [`StoreError::BatchLeaseLost`].
    pub async fn release_batch(&self, lease: &BatchLease) -> Result<(), StoreError> {
        dispatch!(batch_queries, self.release_batch(lease))
    }

    /// Extends a batch lease. Errors: [`StoreError::BatchLeaseLost`].
    pub async fn renew_batch_lease(
        &self,
        lease: &BatchLease,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let now = self.clock.now_ms();
        dispatch!(
            batch_queries,
            self.renew_batch_lease(lease, millis(ttl), now)
        )
    }

    /// Marks a batch succeeded and appends `batch_succeeded`, in one transaction.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was claimed by
    /// another node since (nothing is written).
    pub async fn complete_batch(
        &self,
        lease: &BatchLease,
        rows: i64,
        duration: Duration,
        next_batch_size: Option<i64>,
    ) -> Result<Appended, StoreError> {
        let now = self.clock.now_ms();
        let done = BatchDone::new(rows, duration, next_batch_size);
        let (appended, _) = dispatch!(batch_queries, self.complete_batch(lease, &done, None, now))?;
        Ok(appended)
    }

    /// [`Store::complete_batch`], and in the same transaction the owner's
    /// next batch planned and claimed as [`Store::plan_claimed_batch`] does:
    /// one commit between two batches instead of three. The next batch is
    /// left out (the result's batch is `None`, the outcome is recorded alone)
    /// when `owner` no longer holds the operation or its state machine
    /// refuses the plan (an operator paused or cancelled it meanwhile).
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was claimed by
    /// another node since (nothing is written).
    pub async fn complete_and_plan_batch(
        &self,
        lease: &BatchLease,
        rows: i64,
        duration: Duration,
        next_batch_size: Option<i64>,
        owner: &Lease,
        next: &NextBatch,
    ) -> Result<(Appended, Option<Batch>), StoreError> {
        let now = self.clock.now_ms();
        let done = BatchDone::new(rows, duration, next_batch_size);
        let (appended, next) = dispatch!(
            batch_queries,
            self.complete_batch(lease, &done, Some((owner, next)), now)
        )?;
        let next = match next {
            Some(batch) => Some(self.adopted(batch).await?),
            None => None,
        };
        Ok((appended, next))
    }

    /// Records a failed batch attempt: the batch goes back to pending when
    /// `retry`, otherwise it is failed; `batch_failed` is appended.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`].
    pub async fn fail_batch(
        &self,
        lease: &BatchLease,
        error: &str,
        retry: bool,
        next_sub_batch_size: Option<i64>,
    ) -> Result<Appended, StoreError> {
        let now = self.clock.now_ms();
        dispatch!(
            batch_queries,
            self.fail_batch(lease, error, retry, next_sub_batch_size, None, now)
        )
    }

    /// Records a batch's last failed attempt — the batch failed for good —
    /// and in the same transaction fails its operation with
    /// `operation_error`: `batch_failed` and `failed` in one append, so no
    /// crash can leave a failed batch under an operation still running. The
    /// operation's failure is left out (the batch's is recorded alone) when
    /// its state machine refuses it: the operation failed already, or an
    /// operator paused or cancelled it meanwhile. A paused operation's batch
    /// goes back to pending instead of failing, so the resumed operation
    /// retries it once more (and fails if that fails too). The result's
    /// projection says which.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was claimed by
    /// another node since (nothing is written).
    pub async fn fail_batch_and_operation(
        &self,
        lease: &BatchLease,
        error: &str,
        operation_error: &str,
    ) -> Result<Appended, StoreError> {
        let now = self.clock.now_ms();
        dispatch!(
            batch_queries,
            self.fail_batch(lease, error, false, None, Some(operation_error), now)
        )
    }

    /// Records a running range batch's failed attempt and cuts the batch in
    /// two at `at`, appending `batch_failed` and `batch_split` in one
    /// transaction: the batch now ends at `at`, keeps its committed progress
    /// and goes back to pending with its attempts reset; a new pending batch
    /// takes `(at, old end]`. Both use `next_sub_batch_size` when given.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was claimed by
    /// another node since; [`StoreError::Illegal`] when `at` is not inside
    /// the batch's remaining range (after its progress, before its end) or
    /// the batch is a loop batch, which has no range. Nothing is written then.
    pub async fn split_batch(
        &self,
        lease: &BatchLease,
        at: &Cursor,
        error: &str,
        next_sub_batch_size: Option<i64>,
    ) -> Result<Appended, StoreError> {
        let now = self.clock.now_ms();
        dispatch!(
            batch_queries,
            self.split_batch(lease, at, error, next_sub_batch_size, now)
        )
    }

    /// The operation's batches, by ordinal.
    pub async fn batches(&self, operation_id: i64) -> Result<Vec<Batch>, StoreError> {
        dispatch!(batch_queries, self.batches(operation_id))
    }

    /// Deletes the batch records of operations that finished or were cancelled
    /// more than `older_than` ago, `chunk` rows per statement so no statement
    /// holds locks for long. Event logs are never touched. Returns the number
    /// of batch records deleted.
    pub async fn prune(&self, older_than: Duration, chunk: i64) -> Result<u64, StoreError> {
        let cutoff = self.clock.now_ms() - millis(older_than);
        dispatch!(batch_queries, self.prune_batches(cutoff, chunk.max(1)))
    }
}

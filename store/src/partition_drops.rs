//! The two-step record of a partition drop that commits on its own (MySQL's
//! `ALTER TABLE … DROP PARTITION`), where the drop cannot share a
//! transaction with its record as a sub-batch's change does.
//!
//! Before the drop, [`Store::intend_drop`] writes a [`DropIntent`] into the
//! batch's row, fenced like a sub-batch's record (the batch's lease, the
//! progress the sub-batch started from, and no other intent pending);
//! after it, [`Store::settle_drop`] clears the intent and adds its rows to
//! the batch's count, fenced by the lease and that same intent. A worker
//! that dies between the two leaves the intent in the batch; whoever holds
//! the batch next reads it ([`Store::pending_drop`]) and settles it from
//! the table's catalogue, under the lock every drop holds: the partition
//! gone, its rows count once; still there, the intent is cleared and
//! nothing counts.

use serde::{Deserialize, Serialize};
use sluice_target::{Cursor, on_pool};

use crate::error::StoreError;
use crate::record::BatchLease;
use crate::store::Store;
use crate::sub_batch::record_refused;

/// A partition drop recorded before it happens: which partition, and how
/// many rows it held when they were counted under the drop's lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropIntent {
    /// The partition's name, as the table's catalogue lists it.
    pub partition: String,
    /// Its rows, every one in the operation's scope.
    pub rows: i64,
}

impl Store {
    /// Records that the sub-batch `lease` holds, started at `from`, is about
    /// to drop `intent`'s partition.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when the batch was claimed
    /// again since, [`StoreError::ProgressMoved`] when its progress moved
    /// or another intent is pending; then nothing is recorded.
    pub async fn intend_drop(
        &self,
        lease: &BatchLease,
        from: Option<&Cursor>,
        intent: &DropIntent,
    ) -> Result<(), StoreError> {
        const INTEND: &str = "UPDATE sluice_batches SET pending_drop = $3 \
             WHERE id = $1 AND lease_epoch = $2 AND status = 'running' AND pending_drop IS NULL \
             AND COALESCE(progress_cursor, start_cursor, '') = COALESCE($4, '')";
        let written = on_pool!(self, |pool| sqlx::query(INTEND)
            .bind(lease.batch_id)
            .bind(lease.epoch)
            .bind(intent_json(intent))
            .bind(from.map(Cursor::to_json))
            .execute(pool)
            .await?
            .rows_affected());
        self.fenced(lease, written).await
    }

    /// The drop intent left in the batch `lease` holds, if any.
    pub async fn pending_drop(&self, lease: &BatchLease) -> Result<Option<DropIntent>, StoreError> {
        const PENDING: &str = "SELECT pending_drop FROM sluice_batches WHERE id = $1";
        let pending: Option<Option<String>> = on_pool!(self, |pool| sqlx::query_scalar(PENDING)
            .bind(lease.batch_id)
            .fetch_optional(pool)
            .await?);
        Ok(pending
            .flatten()
            .and_then(|json| serde_json::from_str(&json).ok()))
    }

    /// Clears `intent` from the batch `lease` holds; when the partition was
    /// `dropped`, adds its rows to the batch's count in the same statement.
    ///
    /// Errors: as [`Store::intend_drop`], when the lease was lost or the
    /// intent is no longer the one pending.
    pub async fn settle_drop(
        &self,
        lease: &BatchLease,
        intent: &DropIntent,
        dropped: bool,
    ) -> Result<(), StoreError> {
        const SETTLE: &str = "UPDATE sluice_batches SET pending_drop = NULL, \
             rows_affected = rows_affected + $3 \
             WHERE id = $1 AND lease_epoch = $2 AND status = 'running' AND pending_drop = $4";
        let rows = if dropped { intent.rows } else { 0 };
        let written = on_pool!(self, |pool| sqlx::query(SETTLE)
            .bind(lease.batch_id)
            .bind(lease.epoch)
            .bind(rows)
            .bind(intent_json(intent))
            .execute(pool)
            .await?
            .rows_affected());
        self.fenced(lease, written).await
    }

    /// `Ok` when a fenced write wrote its row, else why not.
    async fn fenced(&self, lease: &BatchLease, written: u64) -> Result<(), StoreError> {
        match written {
            1 => Ok(()),
            _ => Err(record_refused(lease, self.holds_batch(lease).await?)),
        }
    }
}

/// The intent as the batch row keeps it (compared as written).
fn intent_json(intent: &DropIntent) -> String {
    serde_json::to_string(intent).unwrap_or_default()
}

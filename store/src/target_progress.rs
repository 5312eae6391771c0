//! Operations on a database apart from the store's (`enqueue --target`).
//! The store is then their coordinator — plans, leases, events — and the
//! target keeps each batch's progress in `sluice_target_progress`
//! ([`sluice_target::progress`]), which every sub-batch's record updates in
//! the sub-batch's own transaction on the target, fenced as a record in the
//! store is: by the claim's epoch and by the progress it started from.
//!
//! A handle made by [`Store::on_target`] answers that database as its
//! [`Store::target`], records sub-batches there, and adopts every batch it
//! claims there ([`Store::adopted`]) before handing it out: the target's
//! epoch raised to the claim's (so a stalled holder of an older claim can
//! commit nothing more on the target, whichever database it lost contact
//! with), the batch's progress and rows read back from the target, and the
//! coordinator's copy set from them.

use std::sync::Arc;

use sluice_target::sql::{SqlText, SqlValue};
use sluice_target::{Cursor, ProgressOwner, Statement, Target, on_pool};

use crate::batch_queries::batch_lease_lost;
use crate::error::StoreError;
use crate::record::{Batch, BatchLease};
use crate::store::Store;

/// The target a [`Store::on_target`] handle works on, and whose progress
/// records there are its own.
#[derive(Debug)]
pub(crate) struct TargetApart {
    pub(crate) target: Target,
    /// The coordinator's name (`sluice_coordinator`), which its rows in the
    /// target's progress table carry.
    pub(crate) coordinator: String,
    /// The target's URL without a password.
    pub(crate) shown: String,
}

impl Store {
    /// A handle on this store whose operations work on `target`, a
    /// database apart from the store's (`shown` is its URL without a
    /// password, for messages): the target's catalogue answers every
    /// question about their tables, and their sub-batches commit on the
    /// target with their progress record there. The target's progress table
    /// is created if absent; a role that may not create it is refused with
    /// the grant it needs.
    pub async fn on_target(&self, shown: &str, target: Target) -> Result<Store, StoreError> {
        target.prepare_progress_table().await?;
        let coordinator = self.coordinator_name().await?;
        let mut store = self.clone();
        store.apart = Some(Arc::new(TargetApart {
            target,
            coordinator,
            shown: shown.to_owned(),
        }));
        Ok(store)
    }

    /// The URL (without a password) of the database this handle's
    /// operations work on, when it is not the store's own.
    pub fn target_apart(&self) -> Option<&str> {
        self.apart.as_deref().map(|apart| apart.shown.as_str())
    }

    /// This store's name as a coordinator: random, fixed when its schema
    /// was first created, carried by its progress rows in every target.
    pub async fn coordinator_name(&self) -> Result<String, StoreError> {
        const NAME: &str = "SELECT id FROM sluice_coordinator";
        Ok(on_pool!(self, |pool| sqlx::query_scalar(NAME)
            .fetch_one(pool)
            .await?))
    }

    /// Whose progress records this handle writes: `None` for the store's
    /// own `sluice_batches`, else the coordinator's name in the target's
    /// `sluice_target_progress`.
    pub(crate) fn coordinator(&self) -> Option<&str> {
        self.apart
            .as_deref()
            .map(|apart| apart.coordinator.as_str())
    }

    /// `batch` as claimed, adopted on this handle's target when it works
    /// apart (unchanged otherwise, or when it is not running under a
    /// claim): the target's progress row raised to the claim's epoch, and
    /// the batch's progress and rows as the target holds them, written
    /// back to the coordinator's copy.
    ///
    /// Errors: [`StoreError::BatchLeaseLost`] when a later claim adopted the
    /// batch on the target already; the target's or the store's error.
    pub(crate) async fn adopted(&self, mut batch: Batch) -> Result<Batch, StoreError> {
        let (Some(apart), Some(lease)) = (self.apart.as_deref(), batch.lease()) else {
            return Ok(batch);
        };
        let owner = ProgressOwner {
            coordinator: &apart.coordinator,
            batch_id: batch.id,
            epoch: lease.epoch,
        };
        let known = batch.progress.clone().or_else(|| batch.start.clone());
        let adopted = apart
            .target
            .adopt_batch(
                owner,
                batch.start.as_ref(),
                known.as_ref(),
                batch.rows_affected,
            )
            .await?
            .ok_or_else(|| batch_lease_lost(&lease))?;
        if adopted.progress != known || adopted.rows != batch.rows_affected {
            self.set_batch_progress(&lease, adopted.progress.as_ref(), adopted.rows)
                .await?;
        }
        batch.progress = adopted.progress;
        batch.rows_affected = adopted.rows;
        Ok(batch)
    }

    /// Sets the coordinator's copy of a batch's progress and rows to what
    /// its target recorded, fenced by the claim.
    async fn set_batch_progress(
        &self,
        lease: &BatchLease,
        progress: Option<&Cursor>,
        rows: i64,
    ) -> Result<(), StoreError> {
        const SET: &str = "UPDATE sluice_batches SET progress_cursor = $3, rows_affected = $4 \
             WHERE id = $1 AND lease_epoch = $2 AND status = 'running'";
        let set = on_pool!(self, |pool| sqlx::query(SET)
            .bind(lease.batch_id)
            .bind(lease.epoch)
            .bind(progress.map(Cursor::to_json))
            .bind(rows)
            .execute(pool)
            .await?
            .rows_affected());
        match set {
            1 => Ok(()),
            _ => Err(batch_lease_lost(lease)),
        }
    }

    /// The database this handle's progress records are in: the target's
    /// when it works apart, else the store's own.
    pub(crate) fn progress_database(&self) -> &Target {
        self.target()
    }
}

/// The table progress records go to: the store's `sluice_batches`, or a
/// target's `sluice_target_progress` (whose rows also name their
/// coordinator, [`coordinated`]).
pub(crate) fn progress_table(coordinator: Option<&str>) -> &'static str {
    match coordinator {
        None => "sluice_batches",
        Some(_) => "sluice_target_progress",
    }
}

/// `text` narrowed to the coordinator's rows when records go to a target:
/// ` AND coordinator = $n`, the name pushed on `params` (as their `n`th).
pub(crate) fn coordinated(
    text: SqlText,
    params: &mut Vec<SqlValue>,
    coordinator: Option<&str>,
) -> SqlText {
    match coordinator {
        None => text,
        Some(name) => {
            params.push(name.to_owned().into());
            text.push(" AND coordinator = ").param(params.len())
        }
    }
}

/// `UPDATE <progress table> SET `: the head of every record.
pub(crate) fn update_progress(coordinator: Option<&str>) -> SqlText {
    SqlText::new("UPDATE ")
        .push(progress_table(coordinator))
        .push(" SET ")
}

/// `1` while the batch `lease` names is running under its epoch in the
/// records' table, else `0`.
pub(crate) fn held_batch(lease: &BatchLease, coordinator: Option<&str>) -> Statement {
    let mut params = vec![lease.batch_id.into(), lease.epoch.into()];
    let text = SqlText::new("SELECT COUNT(*) FROM ")
        .push(progress_table(coordinator))
        .push(" WHERE id = $1 AND lease_epoch = $2 AND status = 'running'");
    let text = coordinated(text, &mut params, coordinator);
    Statement::with_text(text, params)
}

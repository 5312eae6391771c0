//! What the store returns: operations with their leases, batches, and the
//! conversions between these types and table rows. Row decoding is strict: a
//! value this build cannot interpret is a [`StoreError::CorruptRow`] naming the
//! column, never a default.

pub use crate::batch_machine::BatchStatus;
use crate::error::StoreError;
use crate::machine::Projection;
use sluice_target::cursor::Cursor;

/// An operation as stored: its id, its projection, and who holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct OperationRecord {
    /// The operation's id.
    pub id: i64,
    /// Its current state (a fold of its event log).
    pub state: Projection,
    /// The lease of the node running it, if one holds it.
    pub lease: Option<Lease>,
    /// The epoch of the latest claim (kept when the lease is released, so the
    /// next claim's epoch is higher than any before it).
    pub lease_epoch: i64,
}

/// A node's claim on an operation. Every write the holder makes carries it and
/// is rejected once another node has taken the operation over (its epoch is
/// then higher) or the lease was released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The operation held.
    pub operation_id: i64,
    /// The holding node.
    pub node: String,
    /// Increases every time the operation is claimed.
    pub epoch: i64,
    /// When the lease lapses unless renewed (epoch milliseconds).
    pub expires_at: i64,
}

/// A cursor range of one operation, recorded before it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The batch's id.
    pub id: i64,
    /// The operation it belongs to.
    pub operation_id: i64,
    /// 1, 2, 3… within the operation.
    pub ordinal: i64,
    /// Exclusive lower bound (`None`: from the beginning, or a loop batch).
    pub start: Option<Cursor>,
    /// Inclusive upper bound (`None` for a loop batch).
    pub end: Option<Cursor>,
    /// How far its sub-batches got (committed with their data changes).
    pub progress: Option<Cursor>,
    /// Rows in the batch at planning time.
    pub batch_size: i64,
    /// Rows per sub-batch.
    pub sub_batch_size: i64,
    /// Where it is.
    pub status: BatchStatus,
    /// Claims so far (the current attempt's number while running).
    pub attempts: i32,
    /// Rows its committed sub-batches changed.
    pub rows_affected: i64,
    /// How long its successful attempt took.
    pub duration_ms: Option<i64>,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// The node that claimed it last.
    pub claimed_by: Option<String>,
    /// Increases with every claim; fences writes.
    pub lease_epoch: i64,
    /// When the running attempt's lease lapses.
    pub lease_expires_at: Option<i64>,
    /// When it was planned.
    pub created_at: i64,
    /// When it succeeded or finally failed.
    pub finished_at: Option<i64>,
}

/// A node's claim on a batch, carried by every write about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchLease {
    /// The batch.
    pub batch_id: i64,
    /// Its operation.
    pub operation_id: i64,
    /// Its ordinal.
    pub ordinal: i64,
    /// The claiming node.
    pub node: String,
    /// The claim's epoch.
    pub epoch: i64,
    /// The claim's attempt number (1-based).
    pub attempt: i32,
}

/// The batch an operation's owner plans next, and for how long it claims it
/// ([`crate::Store::plan_claimed_batch`], [`crate::Store::complete_and_plan_batch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextBatch {
    /// Its inclusive end in the batching order (`None` for a loop batch); it
    /// starts at the operation's cursor.
    pub end: Option<Cursor>,
    /// Its size in rows.
    pub size: i64,
    /// How long the claim lasts unless renewed.
    pub ttl: std::time::Duration,
}

impl Batch {
    /// The lease this batch's current claim holds, if it is running.
    pub fn lease(&self) -> Option<BatchLease> {
        (self.status == BatchStatus::Running).then(|| BatchLease {
            batch_id: self.id,
            operation_id: self.operation_id,
            ordinal: self.ordinal,
            node: self.claimed_by.clone().unwrap_or_default(),
            epoch: self.lease_epoch,
            attempt: self.attempts,
        })
    }
}

/// Every column of `sluice_batches`, as read.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct BatchRow {
    pub id: i64,
    pub operation_id: i64,
    pub ordinal: i64,
    pub start_cursor: Option<String>,
    pub end_cursor: Option<String>,
    pub progress_cursor: Option<String>,
    pub batch_size: i64,
    pub sub_batch_size: i64,
    pub status: String,
    pub attempts: i32,
    pub rows_affected: i64,
    pub duration_ms: Option<i64>,
    pub last_error: Option<String>,
    pub claimed_by: Option<String>,
    pub lease_epoch: i64,
    pub lease_expires_at: Option<i64>,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

impl TryFrom<BatchRow> for Batch {
    type Error = StoreError;

    fn try_from(row: BatchRow) -> Result<Self, StoreError> {
        let operation_id = row.operation_id;
        let corrupt = |column: &'static str, detail: String| StoreError::CorruptRow {
            operation_id,
            column,
            detail,
        };
        let cursor = |column: &'static str, text: Option<String>| {
            text.map(|t| Cursor::from_json(&t).map_err(|e| corrupt(column, e.to_string())))
                .transpose()
        };
        Ok(Batch {
            id: row.id,
            operation_id,
            ordinal: row.ordinal,
            start: cursor("start_cursor", row.start_cursor)?,
            end: cursor("end_cursor", row.end_cursor)?,
            progress: cursor("progress_cursor", row.progress_cursor)?,
            batch_size: row.batch_size,
            sub_batch_size: row.sub_batch_size,
            status: BatchStatus::parse(&row.status)
                .ok_or_else(|| corrupt("status", row.status.clone()))?,
            attempts: row.attempts,
            rows_affected: row.rows_affected,
            duration_ms: row.duration_ms,
            last_error: row.last_error,
            claimed_by: row.claimed_by,
            lease_epoch: row.lease_epoch,
            lease_expires_at: row.lease_expires_at,
            created_at: row.created_at,
            finished_at: row.finished_at,
        })
    }
}

/// One row of `sluice_events`, before decoding.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct EventRow {
    pub operation_id: i64,
    pub seq: i64,
    pub kind: String,
    pub recorded_at: i64,
    pub format_version: i32,
    pub payload: Vec<u8>,
}

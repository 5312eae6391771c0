//! What the store returns: operations with their leases, batches, and the
//! conversions between these types and table rows. Row decoding is strict: a
//! value this build cannot interpret is a [`StoreError::CorruptRow`] naming the
//! column, never a default.

pub use crate::batch_machine::BatchStatus;
use crate::cursor::Cursor;
use crate::error::StoreError;
use crate::machine::{Health, OperationStatus, Projection};
use crate::spec::{Limits, Origin};

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

/// Every column of `sluice_operations`, as read.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct OperationRow {
    pub id: i64,
    pub kind: String,
    pub target_table: String,
    pub batching_columns: String,
    pub arguments: String,
    pub tenant_id: Option<String>,
    pub origin: String,
    pub priority: i32,
    pub min_cursor: Option<String>,
    pub max_cursor: Option<String>,
    pub cursor: Option<String>,
    pub batch_size: i64,
    pub sub_batch_size: i64,
    pub pause_ms: i64,
    pub max_runtime_ms: Option<i64>,
    pub max_rows_per_run: Option<i64>,
    pub estimated_rows: Option<i64>,
    pub trace_context: Option<String>,
    pub status: String,
    pub health: String,
    pub health_percent: Option<i32>,
    pub health_reason: Option<String>,
    pub rows_done: i64,
    pub batches_planned: i64,
    pub batches_succeeded: i64,
    pub batch_failures: i64,
    pub last_error: Option<String>,
    pub node: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub last_seq: i64,
    pub lease_owner: Option<String>,
    pub lease_epoch: i64,
    pub lease_expires_at: Option<i64>,
}

/// The projection's columns as bind values, in [`PROJECTION_COLUMNS`] order.
#[derive(Debug)]
pub(crate) struct ProjectionValues {
    pub kind: String,
    pub target_table: String,
    pub batching_columns: String,
    pub arguments: String,
    pub tenant_id: Option<String>,
    pub origin: &'static str,
    pub priority: i32,
    pub min_cursor: Option<String>,
    pub max_cursor: Option<String>,
    pub cursor: Option<String>,
    pub batch_size: i64,
    pub sub_batch_size: i64,
    pub pause_ms: i64,
    pub max_runtime_ms: Option<i64>,
    pub max_rows_per_run: Option<i64>,
    pub estimated_rows: Option<i64>,
    pub trace_context: Option<String>,
    pub status: &'static str,
    pub health: &'static str,
    pub health_percent: Option<i32>,
    pub health_reason: Option<String>,
    pub rows_done: i64,
    pub batches_planned: i64,
    pub batches_succeeded: i64,
    pub batch_failures: i64,
    pub last_error: Option<String>,
    pub node: Option<String>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub last_seq: i64,
}

/// The projection's column names, in bind order ($2 onwards; $1 is the id or unique key).
pub(crate) const PROJECTION_COLUMNS: [&str; 32] = [
    "kind",
    "target_table",
    "batching_columns",
    "arguments",
    "tenant_id",
    "origin",
    "priority",
    "min_cursor",
    "max_cursor",
    "cursor",
    "batch_size",
    "sub_batch_size",
    "pause_ms",
    "max_runtime_ms",
    "max_rows_per_run",
    "estimated_rows",
    "trace_context",
    "status",
    "health",
    "health_percent",
    "health_reason",
    "rows_done",
    "batches_planned",
    "batches_succeeded",
    "batch_failures",
    "last_error",
    "node",
    "created_at",
    "started_at",
    "updated_at",
    "finished_at",
    "last_seq",
];

impl ProjectionValues {
    pub(crate) fn of(p: &Projection) -> Self {
        let (health, health_percent) = match p.health {
            Health::Normal => ("normal", None),
            Health::Throttled { percent } => ("throttled", Some(i32::from(percent))),
            Health::Stopped => ("stopped", None),
        };
        ProjectionValues {
            kind: p.kind.clone(),
            target_table: p.table.clone(),
            batching_columns: serde_json::to_string(&p.batching_columns)
                .expect("strings serialise"),
            arguments: p.arguments.clone(),
            tenant_id: p.tenant_id.clone(),
            origin: p.origin.as_str(),
            priority: p.priority,
            min_cursor: p.min_cursor.as_ref().map(Cursor::to_json),
            max_cursor: p.max_cursor.as_ref().map(Cursor::to_json),
            cursor: p.cursor.as_ref().map(Cursor::to_json),
            batch_size: p.batch_size,
            sub_batch_size: p.sub_batch_size,
            pause_ms: p.pause_ms,
            max_runtime_ms: p.limits.max_runtime_ms,
            max_rows_per_run: p.limits.max_rows_per_run,
            estimated_rows: p.estimated_rows,
            trace_context: p.trace_context.clone(),
            status: p.status.as_str(),
            health,
            health_percent,
            health_reason: p.health_reason.clone(),
            rows_done: p.rows_done,
            batches_planned: p.batches_planned,
            batches_succeeded: p.batches_succeeded,
            batch_failures: p.batch_failures,
            last_error: p.last_error.clone(),
            node: p.node.clone(),
            created_at: p.created_at,
            started_at: p.started_at,
            updated_at: p.updated_at,
            finished_at: p.finished_at,
            last_seq: p.last_seq,
        }
    }
}

impl TryFrom<OperationRow> for OperationRecord {
    type Error = StoreError;

    fn try_from(row: OperationRow) -> Result<Self, StoreError> {
        let id = row.id;
        let corrupt = |column: &'static str, detail: String| StoreError::CorruptRow {
            operation_id: id,
            column,
            detail,
        };
        let cursor = |column: &'static str, text: Option<String>| {
            text.map(|t| Cursor::from_json(&t).map_err(|e| corrupt(column, e.to_string())))
                .transpose()
        };
        let health = match (row.health.as_str(), row.health_percent) {
            ("normal", _) => Health::Normal,
            ("stopped", _) => Health::Stopped,
            ("throttled", Some(p)) => Health::Throttled {
                percent: u8::try_from(p).map_err(|_| corrupt("health_percent", p.to_string()))?,
            },
            (other, _) => return Err(corrupt("health", other.to_owned())),
        };
        let state = Projection {
            batching_columns: serde_json::from_str(&row.batching_columns)
                .map_err(|e| corrupt("batching_columns", e.to_string()))?,
            origin: Origin::parse(&row.origin)
                .ok_or_else(|| corrupt("origin", row.origin.clone()))?,
            min_cursor: cursor("min_cursor", row.min_cursor)?,
            max_cursor: cursor("max_cursor", row.max_cursor)?,
            cursor: cursor("cursor", row.cursor)?,
            status: OperationStatus::parse(&row.status)
                .ok_or_else(|| corrupt("status", row.status.clone()))?,
            limits: Limits {
                max_runtime_ms: row.max_runtime_ms,
                max_rows_per_run: row.max_rows_per_run,
            },
            kind: row.kind,
            table: row.target_table,
            arguments: row.arguments,
            tenant_id: row.tenant_id,
            priority: row.priority,
            batch_size: row.batch_size,
            sub_batch_size: row.sub_batch_size,
            pause_ms: row.pause_ms,
            estimated_rows: row.estimated_rows,
            trace_context: row.trace_context,
            health,
            health_reason: row.health_reason,
            rows_done: row.rows_done,
            batches_planned: row.batches_planned,
            batches_succeeded: row.batches_succeeded,
            batch_failures: row.batch_failures,
            last_error: row.last_error,
            node: row.node,
            created_at: row.created_at,
            started_at: row.started_at,
            updated_at: row.updated_at,
            finished_at: row.finished_at,
            last_seq: row.last_seq,
        };
        let lease = match (row.lease_owner, row.lease_expires_at) {
            (Some(node), Some(expires_at)) => Some(Lease {
                operation_id: id,
                node,
                epoch: row.lease_epoch,
                expires_at,
            }),
            _ => None,
        };
        Ok(OperationRecord {
            id,
            state,
            lease,
            lease_epoch: row.lease_epoch,
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
    /// Rows counted in the batch's tally (PostgreSQL, while it runs), where read.
    #[sqlx(default)]
    pub tallied: Option<i64>,
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
            rows_affected: row.rows_affected + row.tallied.unwrap_or(0),
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

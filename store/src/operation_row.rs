//! The one mapping between an operation's record and its row of
//! `sluice_operations`: [`PROJECTION_COLUMNS`] says, column by column, what
//! a projection writes there and whether an event can change it, and every
//! write of a projection — enqueue, bulk enqueue, append — is derived from
//! it; [`OperationRow`] is the row as read, turned back into a record.
//!
//! An append writes only the columns an event can change (the others hold
//! the operation's spec, written once by enqueue); a property test of the
//! state machine checks that no event changes the others.

use std::sync::LazyLock;

use crate::error::StoreError;
use crate::machine::{Health, OperationStatus, Projection};
use crate::record::{Lease, OperationRecord};
use crate::spec::{Limits, Origin};
use sluice_target::cursor::Cursor;

/// One column of `sluice_operations` that holds part of the projection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProjectionColumn {
    /// The column's name.
    pub name: &'static str,
    /// Whether an event can change its value, so an append writes it.
    pub changes: bool,
    /// Its value for a projection.
    pub value: fn(&Projection) -> ColumnValue,
}

/// A projection column's value, typed as its column is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ColumnValue {
    /// `BIGINT`.
    Int(Option<i64>),
    /// `INTEGER`.
    Int32(Option<i32>),
    /// `TEXT`.
    Text(Option<String>),
}

/// The projection's columns, in the order statements bind them.
pub(crate) const PROJECTION_COLUMNS: [ProjectionColumn; 36] = [
    spec("kind", |p| text(&p.kind)),
    spec("target_table", |p| text(&p.table)),
    spec("batching_columns", |p| {
        text(&serde_json::to_string(&p.batching_columns).expect("strings serialise"))
    }),
    spec("arguments", |p| text(&p.arguments)),
    spec("tenant_id", |p| ColumnValue::Text(p.tenant_id.clone())),
    spec("origin", |p| text(p.origin.as_str())),
    spec("priority", |p| ColumnValue::Int32(Some(p.priority))),
    spec("min_cursor", |p| cursor(p.min_cursor.as_ref())),
    spec("max_cursor", |p| cursor(p.max_cursor.as_ref())),
    state("cursor", |p| cursor(p.cursor.as_ref())),
    state("batch_size", |p| int(p.batch_size)),
    state("sub_batch_size", |p| int(p.sub_batch_size)),
    spec("pause_ms", |p| int(p.pause_ms)),
    spec("max_runtime_ms", |p| {
        ColumnValue::Int(p.limits.max_runtime_ms)
    }),
    spec("max_rows_per_run", |p| {
        ColumnValue::Int(p.limits.max_rows_per_run)
    }),
    spec("estimated_rows", |p| ColumnValue::Int(p.estimated_rows)),
    spec("trace_context", |p| {
        ColumnValue::Text(p.trace_context.clone())
    }),
    spec("target_url", |p| ColumnValue::Text(p.target.clone())),
    spec("target_name", |p| ColumnValue::Text(p.target_name.clone())),
    spec("fleet", |p| ColumnValue::Text(p.fleet.clone())),
    spec("fleet_cap", |p| ColumnValue::Int(p.fleet_cap)),
    state("status", |p| text(p.status.as_str())),
    state("health", |p| text(health_of(p.health).0)),
    state("health_percent", |p| {
        ColumnValue::Int32(health_of(p.health).1)
    }),
    state("health_reason", |p| {
        ColumnValue::Text(p.health_reason.clone())
    }),
    state("rows_done", |p| int(p.rows_done)),
    state("batches_planned", |p| int(p.batches_planned)),
    state("batches_succeeded", |p| int(p.batches_succeeded)),
    state("batch_failures", |p| int(p.batch_failures)),
    state("last_error", |p| ColumnValue::Text(p.last_error.clone())),
    state("node", |p| ColumnValue::Text(p.node.clone())),
    spec("created_at", |p| int(p.created_at)),
    state("started_at", |p| ColumnValue::Int(p.started_at)),
    state("updated_at", |p| int(p.updated_at)),
    state("finished_at", |p| ColumnValue::Int(p.finished_at)),
    state("last_seq", |p| int(p.last_seq)),
];

/// `INSERT` of an operation: `$1` its unique key, then every projection
/// column in [`PROJECTION_COLUMNS`] order, returning its id where
/// `returning` (else it is read back:
/// [`crate::dialect::Statements::last_insert_id`]); `on_active` says
/// what happens while an active operation has the same key (the dialect's
/// [`crate::dialect::Statements::on_active_identity`]).
pub(crate) fn insert_operation(on_active: &'static str, returning: bool) -> String {
    static COLUMNS: LazyLock<(String, String)> = LazyLock::new(|| {
        let names: Vec<String> = PROJECTION_COLUMNS
            .iter()
            .map(|c| format!("\"{}\"", c.name))
            .collect();
        let placeholders: Vec<String> = (2..=names.len() + 1).map(|i| format!("${i}")).collect();
        (names.join(", "), placeholders.join(", "))
    });
    let (names, placeholders) = &*COLUMNS;
    let returning = if returning { " RETURNING id" } else { "" };
    format!(
        "INSERT INTO sluice_operations (unique_key, {names}) VALUES ($1, {placeholders}){on_active}{returning}"
    )
}

/// `UPDATE` of operation `$1` after an append: the columns an event can
/// change, in [`PROJECTION_COLUMNS`] order from `$2`, then the lease's
/// owner, epoch and expiry.
pub(crate) fn update_operation() -> &'static str {
    static SQL: LazyLock<String> = LazyLock::new(|| {
        let sets: Vec<String> = (2..)
            .zip(changing_columns())
            .map(|(i, c)| format!("\"{}\" = ${i}", c.name))
            .collect();
        let lease = sets.len() + 2;
        format!(
            "UPDATE sluice_operations SET {}, lease_owner = ${lease}, lease_epoch = ${}, \
             lease_expires_at = ${} WHERE id = $1",
            sets.join(", "),
            lease + 1,
            lease + 2
        )
    });
    &SQL
}

/// The columns an append writes, in [`PROJECTION_COLUMNS`] order.
pub(crate) fn changing_columns() -> impl Iterator<Item = &'static ProjectionColumn> {
    PROJECTION_COLUMNS.iter().filter(|c| c.changes)
}

/// Binds `$columns`' values for projection `$projection` to `$query`, in order.
macro_rules! bind_columns {
    ($query:expr, $columns:expr, $projection:expr) => {{
        let mut query = $query;
        let projection: &$crate::machine::Projection = $projection;
        for column in $columns {
            query = match (column.value)(projection) {
                $crate::operation_row::ColumnValue::Int(v) => query.bind(v),
                $crate::operation_row::ColumnValue::Int32(v) => query.bind(v),
                $crate::operation_row::ColumnValue::Text(v) => query.bind(v),
            };
        }
        query
    }};
}

pub(crate) use bind_columns;

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
    pub target_url: Option<String>,
    pub target_name: Option<String>,
    pub fleet: Option<String>,
    pub fleet_cap: Option<i64>,
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
            target: row.target_url,
            target_name: row.target_name,
            fleet: row.fleet,
            fleet_cap: row.fleet_cap,
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

/// A column written once, at enqueue.
const fn spec(name: &'static str, value: fn(&Projection) -> ColumnValue) -> ProjectionColumn {
    ProjectionColumn {
        name,
        changes: false,
        value,
    }
}

/// A column an event can change.
const fn state(name: &'static str, value: fn(&Projection) -> ColumnValue) -> ProjectionColumn {
    ProjectionColumn {
        name,
        changes: true,
        value,
    }
}

fn text(value: &str) -> ColumnValue {
    ColumnValue::Text(Some(value.to_owned()))
}

fn int(value: i64) -> ColumnValue {
    ColumnValue::Int(Some(value))
}

fn cursor(value: Option<&Cursor>) -> ColumnValue {
    ColumnValue::Text(value.map(Cursor::to_json))
}

/// `health` and `health_percent` of a health.
fn health_of(health: Health) -> (&'static str, Option<i32>) {
    match health {
        Health::Normal => ("normal", None),
        Health::Throttled { percent } => ("throttled", Some(i32::from(percent))),
        Health::Stopped => ("stopped", None),
    }
}

//! Bulk enqueue, a chunk at a time, each database's way ([`sqlite`],
//! [`postgres`], [`mysql`], as the store's `dispatch!` picks them).
//! PostgreSQL's: a chunk of operations and their `created` events written
//! by one statement (one round trip), keeping the uniqueness rule of a
//! single enqueue; the others write each operation in one transaction per
//! chunk.
//!
//! The chunk travels as one typed array per column (binary arrays, cheap for
//! the server to read, whatever the chunk size), turned back into rows by
//! `unnest`. Each input row comes back with the id it created, or the id of
//! the active operation with the same identity it collided with.

use std::sync::LazyLock;

use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use crate::error::StoreError;
use crate::event::{self, Event, FORMAT_VERSION};
use crate::machine;
use crate::operation_row::{ColumnValue, PROJECTION_COLUMNS};
use crate::spec::OperationSpec;

/// SQLite's chunk writer: one transaction per chunk.
pub(crate) mod sqlite {
    pub(crate) use crate::queries::sqlite::enqueue_each as enqueue_chunk;
}

/// PostgreSQL's chunk writer: one statement per chunk.
pub(crate) mod postgres {
    pub(crate) use super::enqueue_chunk;
}

/// MySQL's chunk writer: one transaction per chunk.
pub(crate) mod mysql {
    pub(crate) use crate::queries::mysql::enqueue_each as enqueue_chunk;
}

/// Operations per bulk-enqueue chunk (one statement on PostgreSQL, one
/// transaction on SQLite).
pub(crate) const ENQUEUE_CHUNK: usize = 500;

/// Writes `specs` (distinct identities) with their `created` events in one
/// statement. Per spec: `(id, created)`, or `None` when the active operation
/// it collided with ended between the insert and the look-up (the caller
/// enqueues that one again on its own).
pub(crate) async fn enqueue_chunk(
    pool: &PgPool,
    specs: &[OperationSpec],
    now: i64,
) -> Result<Vec<Option<(i64, bool)>>, StoreError> {
    let mut unique_keys = Vec::with_capacity(specs.len());
    let mut payloads = Vec::with_capacity(specs.len());
    let mut columns: Vec<ColumnArray> = Vec::new();
    for spec in specs {
        let created = Event::Created(Box::new(spec.clone()));
        let (projection, _) =
            machine::apply(None, &created, now).expect("created is legal on nothing");
        unique_keys.push(spec.unique_key());
        payloads.push(event::encode(&created));
        let values = PROJECTION_COLUMNS.iter().map(|c| (c.value)(&projection));
        if columns.is_empty() {
            columns = values.map(ColumnArray::from).collect();
        } else {
            columns.iter_mut().zip(values).for_each(|(a, v)| a.push(v));
        }
    }
    let ordinals: Vec<i64> = (0..).take(specs.len()).collect();
    let mut query = sqlx::query_as(AssertSqlSafe(BULK_ENQUEUE.as_str()))
        .bind(ordinals)
        .bind(unique_keys)
        .bind(payloads);
    for column in columns {
        query = match column {
            ColumnArray::Int(values) => query.bind(values),
            ColumnArray::Int32(values) => query.bind(values),
            ColumnArray::Text(values) => query.bind(values),
        };
    }
    let rows: Vec<(i64, Option<i64>, Option<i64>)> =
        query.bind(now).bind(FORMAT_VERSION).fetch_all(pool).await?;
    let mut outcomes = vec![None; specs.len()];
    for (ordinal, created_id, existing_id) in rows {
        outcomes[ordinal as usize] = match (created_id, existing_id) {
            (Some(id), _) => Some((id, true)),
            (None, Some(id)) => Some((id, false)),
            (None, None) => None,
        };
    }
    Ok(outcomes)
}

/// The statement: an operation whose twin is active is never offered to
/// the insert, so it takes no id from the sequence (a twin enqueued between
/// the two by another process still meets the unique index, and costs one).
/// `$1`–`$35` are the column arrays (ordinal, unique key,
/// encoded event, then the projection in [`PROJECTION_COLUMNS`] order), `$36`
/// the time, `$37` the event format version.
static BULK_ENQUEUE: LazyLock<String> = LazyLock::new(|| {
    let names: Vec<&str> = PROJECTION_COLUMNS.iter().map(|c| c.name).collect();
    let columns = names.join(", ");
    let arrays: Vec<String> = (1..=PROJECTION_COLUMNS.len() + 3)
        .map(|i| format!("${i}"))
        .collect();
    let now = PROJECTION_COLUMNS.len() + 4;
    format!(
        "WITH input AS (SELECT * FROM unnest({arrays}) \
           AS i (ordinal, unique_key, payload, {columns})), \
         inserted AS (INSERT INTO sluice_operations (unique_key, {columns}) \
           SELECT unique_key, {columns} FROM input WHERE NOT EXISTS \
             (SELECT 1 FROM sluice_operations o WHERE o.unique_key = input.unique_key \
              AND o.status IN ('pending', 'running', 'paused')) ORDER BY ordinal \
           ON CONFLICT (unique_key) WHERE status IN ('pending', 'running', 'paused') DO NOTHING \
           RETURNING id, unique_key), \
         logged AS (INSERT INTO sluice_events (operation_id, seq, kind, recorded_at, format_version, payload) \
           SELECT inserted.id, 1, 'created', ${now}, ${version}, input.payload \
           FROM inserted JOIN input ON input.unique_key = inserted.unique_key) \
         SELECT input.ordinal, inserted.id, \
           (SELECT o.id FROM sluice_operations o WHERE o.unique_key = input.unique_key \
            AND o.status IN ('pending', 'running', 'paused')) \
         FROM input LEFT JOIN inserted ON inserted.unique_key = input.unique_key ORDER BY input.ordinal",
        arrays = arrays.join(", "),
        version = now + 1,
    )
});

/// One projection column's values over the chunk: one typed array.
enum ColumnArray {
    Int(Vec<Option<i64>>),
    Int32(Vec<Option<i32>>),
    Text(Vec<Option<String>>),
}

impl From<ColumnValue> for ColumnArray {
    fn from(value: ColumnValue) -> Self {
        match value {
            ColumnValue::Int(v) => ColumnArray::Int(vec![v]),
            ColumnValue::Int32(v) => ColumnArray::Int32(vec![v]),
            ColumnValue::Text(v) => ColumnArray::Text(vec![v]),
        }
    }
}

impl ColumnArray {
    /// Appends the next operation's value (a column's values share a type).
    fn push(&mut self, value: ColumnValue) {
        match (self, value) {
            (ColumnArray::Int(a), ColumnValue::Int(v)) => a.push(v),
            (ColumnArray::Int32(a), ColumnValue::Int32(v)) => a.push(v),
            (ColumnArray::Text(a), ColumnValue::Text(v)) => a.push(v),
            _ => unreachable!("a projection column's values share one type"),
        }
    }
}

//! PostgreSQL's bulk enqueue: a chunk of operations and their `created`
//! events written by one statement (one round trip), keeping the uniqueness
//! rule of a single enqueue.
//!
//! The chunk travels as one typed array per column (binary arrays, cheap for
//! the server to read, whatever the chunk size), turned back into rows by
//! `unnest`. Each input row comes back with the id it created, or the id of
//! the active operation with the same identity it collided with.

use std::sync::LazyLock;

use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgArguments, PgPool, Postgres};
use sqlx::query::QueryAs;

use crate::error::StoreError;
use crate::event::{self, Event, FORMAT_VERSION};
use crate::machine;
use crate::record::{PROJECTION_COLUMNS, ProjectionValues};
use crate::spec::OperationSpec;

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
    let mut columns = Columns::default();
    for (ordinal, spec) in (0_i64..).zip(specs) {
        let created = Event::Created(Box::new(spec.clone()));
        let (projection, _) =
            machine::apply(None, &created, now).expect("created is legal on nothing");
        columns.ordinal.push(ordinal);
        columns.unique_key.push(spec.unique_key());
        columns.payload.push(event::encode(&created));
        columns.push(ProjectionValues::of(&projection));
    }
    let query = sqlx::query_as(AssertSqlSafe(BULK_ENQUEUE.as_str()));
    let rows: Vec<(i64, Option<i64>, Option<i64>)> = columns
        .bind(query)
        .bind(now)
        .bind(FORMAT_VERSION)
        .fetch_all(pool)
        .await?;
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

/// The statement: `$1`–`$35` are the column arrays (ordinal, unique key,
/// encoded event, then the projection in [`PROJECTION_COLUMNS`] order), `$36`
/// the time, `$37` the event format version.
static BULK_ENQUEUE: LazyLock<String> = LazyLock::new(|| {
    let columns = PROJECTION_COLUMNS.join(", ");
    let arrays: Vec<String> = (1..=PROJECTION_COLUMNS.len() + 3)
        .map(|i| format!("${i}"))
        .collect();
    let now = PROJECTION_COLUMNS.len() + 4;
    format!(
        "WITH input AS (SELECT * FROM unnest({arrays}) \
           AS i (ordinal, unique_key, payload, {columns})), \
         inserted AS (INSERT INTO sluice_operations (unique_key, {columns}) \
           SELECT unique_key, {columns} FROM input ORDER BY ordinal \
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

type BulkQuery<'q> = QueryAs<'q, Postgres, (i64, Option<i64>, Option<i64>), PgArguments>;

/// Declares [`Columns`]: one vector per input column, filled from
/// [`ProjectionValues`] and bound in declaration order, which must be
/// [`PROJECTION_COLUMNS`] order (a test checks it).
macro_rules! columns {
    ($($field:ident: $ty:ty),* $(,)?) => {
        /// The chunk, column by column.
        #[derive(Default)]
        struct Columns {
            ordinal: Vec<i64>,
            unique_key: Vec<String>,
            payload: Vec<Vec<u8>>,
            $($field: Vec<$ty>,)*
        }

        /// The projection's fields, in the order they are bound.
        #[cfg(test)]
        const FIELDS: &[&str] = &[$(stringify!($field)),*];

        impl Columns {
            fn push(&mut self, values: ProjectionValues) {
                $(self.$field.push(values.$field.into());)*
            }

            fn bind(self, query: BulkQuery<'_>) -> BulkQuery<'_> {
                query.bind(self.ordinal).bind(self.unique_key).bind(self.payload)
                    $(.bind(self.$field))*
            }
        }
    };
}

columns!(
    kind: String,
    target_table: String,
    batching_columns: String,
    arguments: String,
    tenant_id: Option<String>,
    origin: String,
    priority: i32,
    min_cursor: Option<String>,
    max_cursor: Option<String>,
    cursor: Option<String>,
    batch_size: i64,
    sub_batch_size: i64,
    pause_ms: i64,
    max_runtime_ms: Option<i64>,
    max_rows_per_run: Option<i64>,
    estimated_rows: Option<i64>,
    trace_context: Option<String>,
    status: String,
    health: String,
    health_percent: Option<i32>,
    health_reason: Option<String>,
    rows_done: i64,
    batches_planned: i64,
    batches_succeeded: i64,
    batch_failures: i64,
    last_error: Option<String>,
    node: Option<String>,
    created_at: i64,
    started_at: Option<i64>,
    updated_at: i64,
    finished_at: Option<i64>,
    last_seq: i64,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_bound_in_projection_order() {
        assert_eq!(FIELDS, PROJECTION_COLUMNS.as_slice());
    }
}

//! Arguments both the tests and the benches enqueue `delete-aged-rows` with
//! (the benches include this file by path).

use std::time::Duration;

use sluice_operations::{DeleteAgedRows, Operation};
use sluice_store::Store;

/// `delete-aged-rows` arguments for the rows of `table` whose `created_at`
/// is more than a day old, named by `id`.
pub async fn older_than_a_day(
    store: &Store,
    table: &str,
) -> <DeleteAgedRows as Operation>::Arguments {
    DeleteAgedRows::arguments(
        store,
        table,
        "created_at",
        "id",
        Duration::from_secs(86_400),
        chrono::Utc::now(),
    )
    .await
    .expect("delete-aged-rows arguments")
}

/// Enqueues `delete-aged-rows` of the rows of `table` whose `created_at`
/// was more than 90 days before `now`, named by `id`, with `options`, as a
/// fire at `now` would resolve it; returns the operation's id.
#[allow(dead_code, reason = "the benches include this file by path")]
pub async fn enqueue_older_than_90_days(
    store: &Store,
    table: &str,
    now: chrono::DateTime<chrono::Utc>,
    options: &sluice_operations::EnqueueOptions,
) -> i64 {
    let registry = sluice_operations::Registry::with_builtins();
    let stored = serde_json::json!({
        "table": table, "column": "created_at", "key": "id", "older_than": "90d"
    });
    let arguments = registry
        .arguments_at("delete-aged-rows", store, stored, now)
        .await
        .expect("delete-aged-rows arguments");
    sluice_operations::enqueue(store, &registry, "delete-aged-rows", &arguments, options)
        .await
        .expect("enqueue delete-aged-rows")
        .id
}

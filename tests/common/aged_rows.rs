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

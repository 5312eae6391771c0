//! Four worker processes on one PostgreSQL (or MySQL) share one operation: the worker
//! holding it plans batches ahead (`--parallel-batches 4`) and the others
//! help run them. Every matching row is changed exactly once, no batch is
//! recorded twice, and more than one worker ran batches.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use common::{
    TestDb, assert_group_one_changed_once, create_counted_items, enqueue_increment, spawn_worker,
    until_within,
};
use sluice_store::{BatchStatus, Event, OperationStatus};

postgres_and_mysql!(
    four_workers_share_one_operation_and_change_every_row_once,
    a_row_ceiling_per_run_keeps_helpers_away,
);

async fn four_workers_share_one_operation_and_change_every_row_once(db: &TestDb) {
    create_counted_items(db, 600_000).await;
    let enqueued = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--batch-size",
            "2000",
            "--sub-batch-size",
            "500",
        ],
    );
    let id = enqueued["id"].as_i64().unwrap();
    run_shared(db, id, 4, "sharing-worker", Duration::from_secs(300)).await;

    // Exactly once, from the data.
    assert_group_one_changed_once(db).await;
    // Exactly once, from the log: each batch succeeded once, and the rows
    // the batches recorded add up to the rows changed.
    let events = db.store.events(id, 0).await.unwrap();
    let mut succeeded: HashMap<i64, u32> = HashMap::new();
    let mut rows = 0;
    for recorded in &events {
        if let Event::BatchSucceeded {
            ordinal, rows: r, ..
        } = recorded.event
        {
            *succeeded.entry(ordinal).or_default() += 1;
            rows += r;
        }
    }
    assert!(
        succeeded.values().all(|n| *n == 1),
        "a batch was recorded twice: {succeeded:?}"
    );
    assert_eq!(rows, 300_000);
    let batches = db.store.batches(id).await.unwrap();
    assert_eq!(batches.len(), succeeded.len());
    assert!(batches.iter().all(|b| b.status == BatchStatus::Succeeded));
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(record.state.rows_done, 300_000);
    db.store.verify(id).await.unwrap();
    // Shared: batches were run by several workers, not only the holder.
    let mut by_node: HashMap<&str, usize> = HashMap::new();
    for batch in &batches {
        *by_node
            .entry(batch.claimed_by.as_deref().unwrap_or("?"))
            .or_default() += 1;
    }
    eprintln!("batches by worker: {by_node:?}");
    let nodes: HashSet<&str> = by_node.keys().copied().collect();
    assert!(
        nodes.len() >= 3,
        "the operation was not shared: {by_node:?}"
    );
}

/// `--max-rows` is a ceiling for a run of the operation, not per worker:
/// its owner alone counts the run's rows, so workers started with
/// `--parallel-batches` do not help with it. Three such workers run an
/// operation of 2,000 rows with a ceiling of 300 rows a run: every batch
/// is completed by the worker holding the operation at that moment, every
/// row is changed once, and each run ended at the ceiling (`yielded`).
async fn a_row_ceiling_per_run_keeps_helpers_away(db: &TestDb) {
    create_counted_items(db, 4_000).await;
    let enqueued = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--batch-size",
            "100",
            "--sub-batch-size",
            "50",
            "--pause",
            "5ms",
            "--max-rows",
            "300",
        ],
    );
    let id = enqueued["id"].as_i64().unwrap();
    run_shared(db, id, 3, "ceiling-worker", Duration::from_secs(120)).await;
    assert_group_one_changed_once(db).await;
    let batches = db.store.batches(id).await.unwrap();
    let claimer: HashMap<i64, Option<String>> = batches
        .iter()
        .map(|b| (b.ordinal, b.claimed_by.clone()))
        .collect();
    let mut owner: Option<String> = None;
    let mut yields = 0;
    for recorded in db.store.events(id, 0).await.unwrap() {
        match recorded.event {
            Event::Started { node } => owner = Some(node),
            Event::Yielded { .. } => yields += 1,
            Event::BatchSucceeded { ordinal, .. } => assert_eq!(
                claimer[&ordinal], owner,
                "batch {ordinal} was run by a helper, not by the run's owner"
            ),
            _ => {}
        }
    }
    assert!(yields >= 6, "each run of 300 rows yields: {yields} yields");
}

/// Starts `workers` worker processes named `name-1`, … with
/// `--parallel-batches 4`, waits (up to `within`) for operation `id` to
/// finish, and kills them.
async fn run_shared(db: &TestDb, id: i64, workers: u32, name: &str, within: Duration) {
    let mut running: Vec<_> = (1..=workers)
        .map(|n| {
            spawn_worker(
                db,
                &[
                    "--node",
                    &format!("{name}-{n}"),
                    "--parallel-batches",
                    "4",
                    "--lease-ttl",
                    "3s",
                ],
            )
        })
        .collect();
    until_within("the shared operation finishes", within, || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    for worker in &mut running {
        worker.kill().unwrap();
        worker.wait().unwrap();
    }
}

//! End-to-end harness: enqueueing 10,000 operations at once through
//! `enqueue_many` (every operation checked, one statement per chunk on
//! PostgreSQL), on SQLite and PostgreSQL, into a fresh store each repeat.
//!
//! `cargo bench --bench bulk_enqueue` (env: `SLUICE_BENCH_OPERATIONS`,
//! default 10,000; `SLUICE_BENCH_REPEATS`, default 5;
//! `SLUICE_BENCH_BACKENDS`, e.g. `postgres`, default both;
//! `SLUICE_TEST_POSTGRES_URL`). Prints each run and the median, and checks
//! that every operation was written with its `created` event.

mod common;

use std::time::{Duration, Instant};

use sluice_operations::{Registry, enqueue_many};
use sluice_store::Store;
use sluice_target::Statement;

use common::{drop_schema, env, fresh_schema, median, postgres_url};

const SCHEMA: &str = "sluice_bench_bulk";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let operations: usize = env("SLUICE_BENCH_OPERATIONS", 10_000);
    let repeats: usize = env("SLUICE_BENCH_REPEATS", 5);
    let only = std::env::var("SLUICE_BENCH_BACKENDS").unwrap_or_default();
    let postgres = postgres_url();
    println!("operations {operations}, repeats {repeats}");
    for backend in ["sqlite", "postgres"] {
        if !only.is_empty() && !only.split(',').any(|b| b == backend) {
            continue;
        }
        let mut runs = Vec::new();
        for _ in 0..repeats {
            let dir = tempfile::tempdir().expect("a temporary folder");
            let store = match backend {
                "sqlite" => {
                    let url = format!("sqlite:{}", dir.path().join("bulk.sqlite").display());
                    Store::connect(&url).await.expect("SQLite store")
                }
                _ => match fresh_schema(&postgres, SCHEMA, 4).await {
                    Ok(store) => store,
                    Err(e) => {
                        println!("postgres: skipped ({e})");
                        break;
                    }
                },
            };
            runs.push(enqueue_once(&store, operations).await);
            store.close().await;
        }
        if runs.is_empty() {
            continue;
        }
        let median = median(&runs);
        println!(
            "{backend}: {operations} operations in {:.0} ms median ({:.0} operations/s; runs ms {:?})",
            median.as_secs_f64() * 1_000.0,
            operations as f64 / median.as_secs_f64(),
            runs.iter()
                .map(|d| (d.as_secs_f64() * 1_000.0).round() as u64)
                .collect::<Vec<_>>(),
        );
        if backend == "postgres" {
            drop_schema(&postgres, SCHEMA).await;
        }
    }
}

/// Enqueues `n` distinct `delete-aged-rows` operations on one table (each
/// with its own cutoff, as a per-tenant clean-up would have its own bound
/// values) and times the call.
async fn enqueue_once(store: &Store, n: usize) -> Duration {
    let batch = common::aged_operations(store, n).await;
    let registry = Registry::with_builtins();
    let started = Instant::now();
    let enqueued = enqueue_many(store, &registry, &batch).await.unwrap();
    let took = started.elapsed();
    assert_eq!(enqueued.iter().filter(|e| e.created).count(), n);
    let events = store
        .target()
        .fetch_int(&Statement::new(
            "SELECT COUNT(*) FROM sluice_events WHERE kind = 'created'",
        ))
        .await
        .unwrap();
    assert_eq!(events, Some(n as i64));
    took
}

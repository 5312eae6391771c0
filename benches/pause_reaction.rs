//! End-to-end harness, in two parts.
//!
//! Health: how long after a health indicator starts saying
//! *stop* does the last sub-batch start? An operation stamps the start of
//! every sub-batch; an indicator flips to stop at a random moment, ten
//! times per setting; the reaction is the last start after the flip minus
//! the flip (zero when none started after it). Sub-batches of 500 rows with
//! a 5 ms pause between them, so the operation is running at every flip. Run with the default health
//! poll interval (250 ms) and with 20 ms, on an SQLite file.
//!
//! Operator: on PostgreSQL, how long after another store (as another
//! process would) writes a pause does the last sub-batch start, with the
//! workers listening for announced controls (`NOTIFY`) and with the control
//! poll (250 ms) alone; ten pauses each, resumed after each.
//!
//! `cargo bench --bench pause_reaction`

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_operations::{EnqueueOptions, Operation, OperationError, Shape, SubBatch};
use sluice_runtime::{Action, RuntimeBuilder, RuntimeConfig, Selection, Signal, indicator_fn};
use sluice_store::Store;
use sluice_target::{ConnectOptions, Statement};

mod common;

/// Bumps a counter on each sub-batch's rows and stamps when it started.
struct Stamped(Arc<Mutex<Vec<(Instant, Duration)>>>);

#[derive(Serialize, Deserialize)]
struct Pass {
    pass: i64,
}

#[async_trait]
impl Operation for Stamped {
    type Arguments = Pass;

    fn kind(&self) -> &'static str {
        "stamped"
    }

    fn shape(&self, _: &Pass) -> Result<Shape, OperationError> {
        Shape::range("reaction_items", "id")
    }

    async fn run(&self, _: &Pass, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        let started = Instant::now();
        let statement = batch.rows_where(Statement::new(
            "UPDATE reaction_items SET counter = counter + 1",
        ));
        let rows = batch.execute(&statement).await;
        self.0.lock().unwrap().push((started, started.elapsed()));
        rows
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    for announced in [true, false] {
        let reactions = operator_pause(announced).await;
        println!(
            "operator pause on PostgreSQL, {}: reaction {}",
            if announced {
                "announced (NOTIFY)"
            } else {
                "control poll 250 ms alone"
            },
            summary(&reactions)
        );
    }
    for poll in [Duration::from_millis(250), Duration::from_millis(20)] {
        let (reactions, sub_batch) = measure(poll).await;
        let mut sorted = reactions.clone();
        sorted.sort();
        println!(
            "health poll {} ms: sub-batch ~{:.1} ms; reaction median {:.1} ms, max {:.1} ms (runs ms {:?})",
            poll.as_millis(),
            sub_batch.as_secs_f64() * 1e3,
            sorted[sorted.len() / 2].as_secs_f64() * 1e3,
            sorted[sorted.len() - 1].as_secs_f64() * 1e3,
            reactions
                .iter()
                .map(|d| (d.as_secs_f64() * 1e3).round() as u64)
                .collect::<Vec<_>>(),
        );
    }
}

/// Ten stops; returns each reaction and the median sub-batch duration.
async fn measure(poll: Duration) -> (Vec<Duration>, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::connect(&format!(
        "sqlite:{}",
        dir.path().join("reaction.sqlite").display()
    ))
    .await
    .unwrap();
    store
        .target().execute(&Statement::new(
            "CREATE TABLE reaction_items (id INTEGER PRIMARY KEY, counter INTEGER NOT NULL DEFAULT 0)",
        ))
        .await
        .unwrap();
    store
        .target()
        .execute(&Statement::new(
            "WITH RECURSIVE g(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM g WHERE v < 4000000) \
             INSERT INTO reaction_items (id) SELECT v FROM g",
        ))
        .await
        .unwrap();
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let indicator = indicator_fn("bench stop", move || {
        let stopped = flag.load(Ordering::SeqCst);
        async move {
            if stopped {
                Signal::Stop {
                    reason: "bench".into(),
                }
            } else {
                Signal::Normal
            }
        }
    });
    let config = RuntimeConfig {
        health_interval: poll,
        health_clear_after: 1,
        pool_size: 1,
        min_batch_size: 20_000,
        max_batch_size: 20_000,
        ..RuntimeConfig::default()
    };
    let runtime = common::as_users_run(RuntimeBuilder::with_store(store.clone()).config(config))
        .register(Stamped(Arc::clone(&stamps)))
        .indicator(indicator)
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 20_000,
        sub_batch_size: 500,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    runtime
        .enqueue(&Stamped(Arc::clone(&stamps)), &Pass { pass: 1 }, &options)
        .await
        .unwrap();
    let mut reactions = Vec::new();
    let mut gaps = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    for _ in 0..10 {
        // Let it run a while (a random while), then flip to stop.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(300 + seed % 300)).await;
        let flipped = Instant::now();
        stop.store(true, Ordering::SeqCst);
        tokio::time::sleep(poll * 4 + Duration::from_millis(500)).await;
        {
            let stamps = stamps.lock().unwrap();
            gaps.extend(stamps.iter().rev().take(20).map(|(_, took)| *took));
            let last_after = stamps
                .iter()
                .map(|(s, _)| *s)
                .filter(|s| *s >= flipped)
                .max();
            reactions.push(last_after.map_or(Duration::ZERO, |s| s - flipped));
            assert!(
                stamps.last().is_some_and(
                    |(s, _)| flipped - *s < Duration::from_millis(100) || *s >= flipped
                ),
                "the operation was running when stopped"
            );
        }
        stop.store(false, Ordering::SeqCst);
    }
    runtime.shutdown().await.unwrap();
    store.close().await;
    gaps.sort();
    (
        reactions,
        gaps.get(gaps.len() / 2).copied().unwrap_or_default(),
    )
}

/// Median, max and every run, in ms.
fn summary(reactions: &[Duration]) -> String {
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    let mut sorted = reactions.to_vec();
    sorted.sort();
    format!(
        "median {:.1} ms, max {:.1} ms (runs ms {:?})",
        ms(&sorted[sorted.len() / 2]),
        ms(&sorted[sorted.len() - 1]),
        reactions
            .iter()
            .map(|d| ms(d).round() as u64)
            .collect::<Vec<_>>()
    )
}

/// Ten operator pauses written through a second store on PostgreSQL, each
/// resumed once measured; the reaction of each.
async fn operator_pause(announced: bool) -> Vec<Duration> {
    let url = common::postgres_url();
    let schema = "sluice_bench_reaction";
    let store = common::fresh_schema(&url, schema, 8)
        .await
        .expect("a PostgreSQL at SLUICE_TEST_POSTGRES_URL");
    for sql in [
        "CREATE TABLE reaction_items (id BIGINT PRIMARY KEY, counter INTEGER NOT NULL DEFAULT 0)",
        "INSERT INTO reaction_items (id) SELECT g FROM generate_series(1, 2000000) AS g",
        "ANALYZE reaction_items",
    ] {
        store.target().execute(&Statement::new(sql)).await.unwrap();
    }
    let options = ConnectOptions {
        schema: Some(schema.to_owned()),
        ..ConnectOptions::default()
    };
    let operator = Store::connect_with(&url, &options).await.unwrap();
    let stamps = Arc::new(Mutex::new(Vec::new()));
    let config = RuntimeConfig {
        announced_controls: announced,
        pool_size: 1,
        min_batch_size: 20_000,
        max_batch_size: 20_000,
        ..RuntimeConfig::default()
    };
    let runtime = common::as_users_run(RuntimeBuilder::with_store(store.clone()).config(config))
        .register(Stamped(Arc::clone(&stamps)))
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 20_000,
        sub_batch_size: 500,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    let id = runtime
        .enqueue(&Stamped(Arc::clone(&stamps)), &Pass { pass: 1 }, &options)
        .await
        .unwrap()
        .id;
    let started = || stamps.lock().unwrap().len();
    let mut reactions = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for _ in 0..10 {
        let before = started();
        let deadline = Instant::now() + Duration::from_secs(30);
        while started() < before + 20 {
            assert!(Instant::now() < deadline, "the operation does not run");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        tokio::time::sleep(Duration::from_millis(seed % 300)).await;
        let paused = Instant::now();
        sluice_runtime::control(&operator, Action::Pause, &Selection::One(id), "bench")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(800)).await;
        let last_after = stamps
            .lock()
            .unwrap()
            .iter()
            .map(|(s, _)| *s)
            .filter(|s| *s >= paused)
            .max();
        reactions.push(last_after.map_or(Duration::ZERO, |s| s - paused));
        sluice_runtime::control(&operator, Action::Resume, &Selection::One(id), "")
            .await
            .unwrap();
    }
    runtime.shutdown().await.unwrap();
    operator.close().await;
    store.close().await;
    common::drop_schema(&url, schema).await;
    reactions
}

//! End-to-end harness: what `--undo` costs an `update-in-batches`, and how
//! fast `sluice revert` puts the rows back. On each backend of
//! `SLUICE_BENCH_BACKENDS` (default `sqlite,postgres,mysql`), a table of
//! `SLUICE_BENCH_ROWS` rows (default 1,000,000) takes `counter = counter +
//! 1` over every row with Sluice's defaults (batches of 1,000, sub-batches
//! of 100, the health indicators and latency budget on), in turns: without
//! `--undo`, with it, and the revert of the run with it — `SLUICE_BENCH_PAIRS`
//! times (default 2), so the spread between turns shows beside the gap.
//! Each run is timed from its enqueue to its end on an embedded runtime,
//! the table settled before it (`common::settle`: vacuumed, analysed, the
//! WAL checkpointed), so no run inherits the one before's dead rows.
//! `SLUICE_BENCH_BUDGET=off` runs every operation with `--latency-budget
//! off` (a lab setting, said with each run): the foreground's latency then
//! paces nothing.
//!
//! `cargo bench --bench undo` (env: `SLUICE_BENCH_ROWS`,
//! `SLUICE_BENCH_PAIRS`, `SLUICE_BENCH_BACKENDS`, `SLUICE_BENCH_BUDGET`,
//! `SLUICE_TEST_POSTGRES_URL`, `SLUICE_TEST_MYSQL_URL`).

mod common;

use std::time::{Duration, Instant};

use sluice_operations::EnqueueOptions;
use sluice_runtime::{Runtime, RuntimeBuilder, RuntimeConfig};
use sluice_store::Store;
use sluice_target::Statement;

use common::{alter_autovacuum, env, set_autovacuum};

const SCHEMA: &str = "sluice_bench_undo";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 1_000_000);
    let pairs: usize = env("SLUICE_BENCH_PAIRS", 2);
    let backends: String = env("SLUICE_BENCH_BACKENDS", "sqlite,postgres,mysql".to_owned());
    let dir = tempfile::tempdir().unwrap();
    println!("rows {rows}, `counter = counter + 1` over every row, Sluice's defaults");
    println!();
    println!("| backend | run | s | rows/s |");
    println!("|---|---|---|---|");
    for backend in backends.split(',') {
        let store = match backend {
            "sqlite" => {
                let url = format!("sqlite:{}", dir.path().join("undo.sqlite").display());
                Store::connect(&url).await
            }
            "postgres" => common::fresh_schema(&common::postgres_url(), SCHEMA, 8).await,
            "mysql" => match std::env::var("SLUICE_TEST_MYSQL_URL") {
                Ok(url) => {
                    let server = url.trim_end_matches('/').to_owned();
                    let Ok(admin) = Store::connect(&format!("{server}/mysql")).await else {
                        eprintln!("mysql: not reachable, skipped");
                        continue;
                    };
                    let create = Statement::new("CREATE DATABASE IF NOT EXISTS sluice_bench");
                    admin.target().execute(&create).await.unwrap();
                    Store::connect(&format!("{server}/sluice_bench")).await
                }
                Err(_) => continue,
            },
            other => panic!("unknown backend {other}"),
        };
        let Ok(store) = store else {
            eprintln!("{backend}: not reachable, skipped");
            continue;
        };
        let autovacuum = set_autovacuum(&store).await;
        measure(backend, &store, rows, pairs).await;
        let drop = Statement::new("DROP TABLE IF EXISTS bench_items");
        store.target().execute(&drop).await.unwrap();
        if let Some(previous) = autovacuum {
            alter_autovacuum(&store, &previous).await;
        }
        store.close().await;
        if backend == "postgres" {
            common::drop_schema(&common::postgres_url(), SCHEMA).await;
        }
    }
}

/// `pairs` turns of: the update without `--undo`, with it, its revert.
async fn measure(backend: &str, store: &Store, rows: i64, pairs: usize) {
    fill(store, rows).await;
    let runtime = common::as_users_run(RuntimeBuilder::with_store(store.clone()).config(
        RuntimeConfig {
            node: "undo".into(),
            ..RuntimeConfig::default()
        },
    ))
    .start()
    .await
    .unwrap();
    let budget = env("SLUICE_BENCH_BUDGET", "auto".to_owned());
    eprintln!("latency budget: {budget}");
    let options = EnqueueOptions {
        latency_budget: (budget == "off").then_some(sluice_store::LatencyBudget::Off),
        ..EnqueueOptions::default()
    };
    for turn in 0..pairs {
        for undo in [false, true] {
            let arguments = serde_json::json!({
                "table": "bench_items", "key": "id", "set": "counter = counter + 1",
                // Two identical requests are one operation while one runs.
                "where": format!("counter >= {}", -1 - turn as i64),
                "undo": undo,
            });
            common::settle(store, "bench_items").await;
            let started = Instant::now();
            let update = runtime
                .enqueue_json("update-in-batches", &arguments, &options)
                .await
                .unwrap();
            finish(&runtime, update.id).await;
            let name = if undo { "update --undo" } else { "update" };
            report(backend, name, started.elapsed(), rows);
            breakdown(store, update.id).await;
            if undo {
                common::settle(store, "bench_items").await;
                let started = Instant::now();
                let revert = runtime.revert(update.id, false, &options).await.unwrap();
                finish(&runtime, revert.id).await;
                report(backend, "revert", started.elapsed(), rows);
                breakdown(store, revert.id).await;
                let undo_table = store.operation(update.id).await.unwrap().state.arguments;
                let undo_table: serde_json::Value = serde_json::from_str(&undo_table).unwrap();
                let undo_table =
                    sluice_target::Ident::parse(undo_table["undo_table"].as_str().unwrap())
                        .unwrap();
                let drop = Statement::new("DROP TABLE ").ident(&undo_table);
                store.target().execute(&drop).await.unwrap();
            }
        }
    }
    runtime.shutdown().await.unwrap();
}

/// Waits for operation `id` to end, and checks it finished.
async fn finish(runtime: &Runtime, id: i64) {
    let record = runtime.wait(id, Duration::from_secs(7_200)).await.unwrap();
    assert_eq!(
        record.state.status,
        sluice_store::OperationStatus::Finished,
        "{:?}",
        record.state.last_error
    );
}

/// `bench_items(id, grp, counter, note)`, afresh, with `rows` rows.
async fn fill(store: &Store, rows: i64) {
    let target = store.target();
    target
        .execute(&Statement::new("DROP TABLE IF EXISTS bench_items"))
        .await
        .unwrap();
    target
        .execute(&Statement::new(
            "CREATE TABLE bench_items (id BIGINT NOT NULL PRIMARY KEY, grp INTEGER NOT NULL, \
             counter INTEGER NOT NULL, note VARCHAR(40) NOT NULL)",
        ))
        .await
        .unwrap();
    let chunk = 100_000;
    let mysql = matches!(store.backend(), sluice_target::Backend::MySql(_));
    let mut from = 1;
    while from <= rows {
        let to = (from + chunk - 1).min(rows);
        let series = |head: Statement| {
            head.push("WITH RECURSIVE s(g) AS (SELECT ")
                .value(from.into())
                .push(" UNION ALL SELECT g + 1 FROM s WHERE g < ")
                .value(to.into())
                .push(") ")
        };
        const INSERT: &str = "INSERT INTO bench_items (id, grp, counter, note) ";
        const ROWS: &str = "SELECT g, g % 10, 0, 'a row of the bench table' FROM s";
        // MariaDB's form: the INSERT first, past its default of 1,000
        // recursions.
        let insert = match mysql {
            true => series(Statement::new(
                "SET STATEMENT max_recursive_iterations = 1000000 FOR INSERT INTO bench_items \
                 (id, grp, counter, note) ",
            ))
            .push(ROWS),
            false => series(Statement::new("")).push(INSERT).push(ROWS),
        };
        target.execute(&insert).await.unwrap();
        from = to + 1;
    }
    let analyze = match store.backend() {
        sluice_target::Backend::MySql(_) => "ANALYZE TABLE bench_items",
        _ => "ANALYZE bench_items",
    };
    target.execute(&Statement::new(analyze)).await.unwrap();
}

fn report(backend: &str, run: &str, took: Duration, rows: i64) {
    println!(
        "| {backend} | {run} | {:.1} | {:.0} |",
        took.as_secs_f64(),
        rows as f64 / took.as_secs_f64()
    );
}

/// Where operation `id`'s time went, from its event log (to standard
/// error): the time its batches took, the time it spent throttled or
/// stopped, and the reasons recorded most often.
async fn breakdown(store: &Store, id: i64) {
    use sluice_store::{Event, Health};
    let events = store.events(id, 0).await.unwrap();
    let in_batches: i64 = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::BatchSucceeded { duration_ms, .. } => Some(*duration_ms),
            _ => None,
        })
        .sum();
    let (mut slowed_ms, mut stopped_ms) = (0, 0);
    let mut since: Option<(i64, Health)> = None;
    let mut reasons = std::collections::BTreeMap::<String, usize>::new();
    let end = events.last().map_or(0, |e| e.recorded_at);
    for event in &events {
        if let Event::Throttled { health, reason } = &event.event {
            if let Some((at, was)) = since.take() {
                match was {
                    Health::Throttled { .. } => slowed_ms += event.recorded_at - at,
                    Health::Stopped => stopped_ms += event.recorded_at - at,
                    Health::Normal => {}
                }
            }
            since = Some((event.recorded_at, *health));
            let reason = reason.clone().unwrap_or_default();
            let head: String = reason.chars().take(60).collect();
            *reasons.entry(head).or_default() += 1;
        }
    }
    if let Some((at, was)) = since {
        match was {
            Health::Throttled { .. } => slowed_ms += end - at,
            Health::Stopped => stopped_ms += end - at,
            Health::Normal => {}
        }
    }
    let mut reasons: Vec<_> = reasons.into_iter().collect();
    reasons.sort_by_key(|r| std::cmp::Reverse(r.1));
    reasons.truncate(3);
    eprintln!(
        "  operation {id}: batches {:.1} s, throttled {:.1} s, stopped {:.1} s; reasons {reasons:?}",
        in_batches as f64 / 1e3,
        slowed_ms as f64 / 1e3,
        stopped_ms as f64 / 1e3
    );
}

//! End-to-end harness: what a purge costs the foreground, and how fast it
//! goes for that cost. On each backend reachable (`SLUICE_BENCH_BACKENDS`,
//! default `sqlite,postgres,mysql`), a table of `SLUICE_BENCH_ROWS` rows
//! (default 1,000,000), 80 % aged, takes a steady foreground load from four
//! connections (each a point read of a row that stays, then an insert of a
//! young row, every 2 ms) while its aged rows are deleted:
//! - by no one (the idle latency);
//! - by a client loop of 1,000-row `DELETE`s, each its own transaction;
//! - by one big `DELETE`;
//! - by Sluice with its defaults (built-in indicators on, latency budget
//!   `auto`, sub-batches of 100; `SLUICE_BENCH_SUB_BATCH` sets another);
//! - by Sluice with budgets of 1.2× and 2× the canary's idle p99;
//! - by Sluice with the budget off (indicators on).
//!
//! Each is timed from its start to the last row gone; the table is filled
//! afresh before each. Autovacuum is as the server has it, unless
//! `SLUICE_BENCH_ACTIVITY=ungated|off` runs PostgreSQL's table-activity
//! indicator without the latency canary's gate, or not at all;
//! `SLUICE_BENCH_AUTOVACUUM=on|off` sets it for the run (`ALTER SYSTEM`,
//! restored after). Prints one markdown row per run: seconds, rows/s, the
//! foreground's p50 and p99, and the p99 over the idle p99.
//!
//! `cargo bench --bench foreground` (env: the above,
//! `SLUICE_TEST_POSTGRES_URL`, `SLUICE_TEST_MYSQL_URL`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use sluice_runtime::{Runtime, RuntimeBuilder, RuntimeConfig};
use sluice_store::{CanaryReading, LatencyBudget, Store};
use sluice_target::{Backend, SqlValue, Statement};

use common::{alter_autovacuum, env, fill_aged_events, percentile, set_autovacuum};

const CLIENTS: u64 = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 1_000_000);
    let backends: String = env("SLUICE_BENCH_BACKENDS", "sqlite,postgres,mysql".to_owned());
    let dir = tempfile::tempdir().unwrap();
    println!(
        "rows {rows} (80 % aged), {CLIENTS} clients: a point read and an insert each, every 2 ms"
    );
    println!();
    println!("| backend | purge | s | rows/s | fg p50 ms | fg p99 ms | p99 / idle |");
    println!("|---|---|---|---|---|---|---|");
    for backend in backends.split(',') {
        let url = match backend {
            "sqlite" => format!("sqlite:{}", dir.path().join("fg.sqlite").display()),
            "postgres" => common::postgres_url(),
            "mysql" => match std::env::var("SLUICE_TEST_MYSQL_URL") {
                Ok(url) => {
                    let server = url.trim_end_matches('/').to_owned();
                    let Ok(admin) = Store::connect(&format!("{server}/mysql")).await else {
                        eprintln!("mysql: not reachable, skipped");
                        continue;
                    };
                    let create = Statement::new("CREATE DATABASE IF NOT EXISTS sluice_bench");
                    admin.target().execute(&create).await.unwrap();
                    format!("{server}/sluice_bench")
                }
                Err(_) => continue,
            },
            other => panic!("unknown backend {other}"),
        };
        let Ok(store) = Store::connect(&url).await else {
            eprintln!("{backend}: not reachable, skipped");
            continue;
        };
        let load = common::application_store(&url).await;
        let autovacuum = set_autovacuum(&store).await;
        measure(backend, &store, &load, rows).await;
        if let Some(previous) = autovacuum {
            alter_autovacuum(&store, &previous).await;
        }
        store.close().await;
        load.close().await;
    }
}

/// Every purge of `store`'s table under the load `load` sends.
async fn measure(backend: &str, store: &Store, load: &Store, rows: i64) {
    let aged = rows * 4 / 5;
    let sub_batch: i64 = env("SLUICE_BENCH_SUB_BATCH", 100);
    fill(store, rows).await;
    let canary_idle = canary_p99(store).await;
    let idle = under_load(load, rows, async {
        tokio::time::sleep(Duration::from_secs(8)).await;
    })
    .await;
    let idle_p99 = percentile(&idle, 0.99);
    report(backend, "none", None, &idle, idle_p99, aged);
    eprintln!(
        "{backend}: canary idle p99 {:.2} ms",
        canary_idle.as_secs_f64() * 1e3
    );

    // `SLUICE_BENCH_ONLY=defaults`: the idle load and Sluice with its
    // defaults alone (for pairing settings by turns).
    let only_defaults = env("SLUICE_BENCH_ONLY", String::new()) == "defaults";
    if !only_defaults {
        baselines(backend, store, load, rows, idle_p99, aged).await;
    }
    let runs = [
        ("Sluice, defaults (budget auto)", None),
        (
            "Sluice, budget 1.2× canary idle p99",
            Some(LatencyBudget::Fixed(canary_idle.mul_f64(1.2))),
        ),
        (
            "Sluice, budget 2× canary idle p99",
            Some(LatencyBudget::Fixed(canary_idle.mul_f64(2.0))),
        ),
        ("Sluice, budget off", Some(LatencyBudget::Off)),
    ];
    for (name, budget) in runs {
        if only_defaults && budget.is_some() {
            continue;
        }
        fill(store, rows).await;
        let builder = RuntimeBuilder::with_store(store.clone()).config(RuntimeConfig {
            node: "foreground".into(),
            ..RuntimeConfig::default()
        });
        let runtime = common::with_activity(builder, store).start().await.unwrap();
        let (took, latencies) = timed(load, rows, sluice(&runtime, store, budget, sub_batch)).await;
        runtime.shutdown().await.unwrap();
        report(backend, name, Some(took), &latencies, idle_p99, aged);
    }
}

/// The purges Sluice is judged against: a client loop of 1,000-row
/// statements, and one `DELETE` of every aged row.
async fn baselines(
    backend: &str,
    store: &Store,
    load: &Store,
    rows: i64,
    idle_p99: u64,
    aged: i64,
) {
    fill(store, rows).await;
    let (took, latencies) = timed(load, rows, client_loop(store)).await;
    report(
        backend,
        "client loop, 1,000 a statement",
        Some(took),
        &latencies,
        idle_p99,
        aged,
    );

    fill(store, rows).await;
    let (took, latencies) = timed(load, rows, async {
        let statement = Statement::new("DELETE FROM bench_events WHERE created_at < ")
            .value(SqlValue::Timestamp(cutoff()));
        store.target().execute(&statement).await.unwrap();
    })
    .await;
    report(
        backend,
        "one DELETE",
        Some(took),
        &latencies,
        idle_p99,
        aged,
    );
}

/// Runs `purge` under the load; how long it took and the load's latencies.
async fn timed(load: &Store, rows: i64, purge: impl Future<Output = ()>) -> (Duration, Vec<u64>) {
    let mut took = Duration::ZERO;
    let latencies = under_load(load, rows, async {
        let started = Instant::now();
        purge.await;
        took = started.elapsed();
    })
    .await;
    (took, latencies)
}

/// Deletes the aged rows with `delete-aged-rows` on `runtime`, everything
/// as enqueued with no option but `budget` and `sub_batch` rows a
/// sub-batch.
async fn sluice(runtime: &Runtime, store: &Store, budget: Option<LatencyBudget>, sub_batch: i64) {
    let arguments = common::older_than_a_day(store, "bench_events").await;
    let options = sluice_operations::EnqueueOptions {
        sub_batch_size: sub_batch,
        latency_budget: budget,
        ..sluice_operations::EnqueueOptions::default()
    };
    let op = runtime
        .enqueue(&sluice_operations::DeleteAgedRows, &arguments, &options)
        .await
        .unwrap();
    runtime
        .wait(op.id, Duration::from_secs(3_600))
        .await
        .unwrap();
    let events = store.events(op.id, 0).await.unwrap();
    let paces: Vec<String> = events
        .iter()
        .filter_map(|e| match &e.event {
            sluice_store::Event::Throttled { health, reason } => Some(format!(
                "{health:?}{}",
                reason
                    .as_deref()
                    .filter(|r| r.starts_with("latency"))
                    .map_or(String::new(), |_| " (budget)".into())
            )),
            _ => None,
        })
        .collect();
    eprintln!("  health changes: {}", paces.join(", "));
}

/// A client loop: 1,000 aged rows a statement, each its own transaction,
/// until fewer go.
async fn client_loop(store: &Store) {
    let head = match store.backend() {
        Backend::MySql(_) => "DELETE FROM bench_events WHERE created_at < ",
        _ => {
            "DELETE FROM bench_events WHERE id IN (SELECT id FROM bench_events WHERE created_at < "
        }
    };
    let tail = match store.backend() {
        Backend::MySql(_) => " LIMIT 1000",
        _ => " LIMIT 1000)",
    };
    loop {
        let statement = Statement::new(head)
            .value(SqlValue::Timestamp(cutoff()))
            .push(tail);
        if store.target().execute(&statement).await.unwrap() < 1_000 {
            return;
        }
    }
}

/// Runs `purge` while the clients each read a row that stays and insert a
/// young one, every 2 ms; their latencies (microseconds), sorted.
async fn under_load(load: &Store, rows: i64, purge: impl Future<Output = ()>) -> Vec<u64> {
    let next_id = Arc::new(AtomicI64::new(rows + 1));
    let young_from = rows * 4 / 5 + 1;
    let load = load.clone();
    let query = move |seed: u64| {
        let (load, next_id) = (load.clone(), Arc::clone(&next_id));
        async move {
            let id = young_from + (seed % (rows - young_from + 1) as u64) as i64;
            let read = Statement::new("SELECT payload FROM bench_events WHERE id = ")
                .value(SqlValue::Int(id));
            load.target().fetch_cursor(&read, 1).await.unwrap();
            let insert =
                Statement::new("INSERT INTO bench_events (id, created_at, payload) VALUES (")
                    .value(SqlValue::Int(next_id.fetch_add(1, Ordering::SeqCst)))
                    .push(", ")
                    .value(SqlValue::Timestamp(young()))
                    .push(", 'foreground')");
            load.target().execute(&insert).await.unwrap();
        }
    };
    common::under_load(CLIENTS, query, purge).await
}

/// The canary's idle p99: 200 of its round trips (a point read of a row
/// that stays, then its one-row write), timed as the runtime times them.
async fn canary_p99(store: &Store) -> Duration {
    let read = Statement::new("SELECT id FROM bench_events WHERE id = ").value(SqlValue::Int(1));
    let mut trips = Vec::with_capacity(200);
    for _ in 0..200 {
        let started = Instant::now();
        store.target().fetch_cursor(&read, 1).await.unwrap();
        store
            .record_canary(&CanaryReading {
                table_name: "bench_idle".into(),
                p99_us: 0,
                budget_us: None,
                samples: 0,
                measured_at: 0,
            })
            .await
            .unwrap();
        trips.push(started.elapsed());
    }
    sluice_runtime::latency::p99(&trips)
}

/// `bench_events`: `rows` rows, the first 80 % aged, the rest young
/// (2037: within MySQL's TIMESTAMP range), indexed on `created_at`;
/// autovacuum as [`set_autovacuum`] set it.
async fn fill(store: &Store, rows: i64) {
    fill_aged_events(store, rows).await;
    let young = Statement::new("UPDATE bench_events SET created_at = ")
        .value(SqlValue::Timestamp(young()))
        .push(" WHERE id > ")
        .value(SqlValue::Int(rows * 4 / 5));
    store.target().execute(&young).await.unwrap();
    let settle = match store.backend() {
        Backend::Sqlite(_) => "PRAGMA wal_checkpoint(TRUNCATE)",
        Backend::Postgres(_) => "ANALYZE bench_events",
        Backend::MySql(_) => "ANALYZE TABLE bench_events",
    };
    store
        .target()
        .execute(&Statement::new(settle))
        .await
        .unwrap();
    if let Backend::Postgres(_) = store.backend() {
        for sql in ["VACUUM ANALYZE bench_events", "CHECKPOINT"] {
            let _ = store.target().execute(&Statement::new(sql)).await;
        }
    }
}

fn report(
    backend: &str,
    purge: &str,
    took: Option<Duration>,
    latencies: &[u64],
    idle_p99: u64,
    aged: i64,
) {
    let (p50, p99) = (percentile(latencies, 0.50), percentile(latencies, 0.99));
    let (seconds, pace) = match took {
        Some(took) => (
            format!("{:.1}", took.as_secs_f64()),
            format!("{:.0}", aged as f64 / took.as_secs_f64()),
        ),
        None => ("-".into(), "-".into()),
    };
    println!(
        "| {backend} | {purge} | {seconds} | {pace} | {:.2} | {:.2} | {:.2} |",
        p50 as f64 / 1e3,
        p99 as f64 / 1e3,
        p99 as f64 / idle_p99.max(1) as f64
    );
}

fn cutoff() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::days(1)
}

fn young() -> chrono::DateTime<chrono::Utc> {
    "2037-01-01T00:00:00Z".parse().unwrap()
}

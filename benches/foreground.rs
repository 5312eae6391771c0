//! End-to-end harness: what maintenance does to the foreground. A steady
//! point-query load (`SELECT payload … WHERE id = $1` on rows that stay,
//! from four connections) runs against one PostgreSQL table of 1,000,000
//! rows, 80 % of them aged, and its latency is recorded:
//! - with no maintenance;
//! - while one big `DELETE` removes the aged rows;
//! - while Sluice deletes them (`delete-aged-rows`, sub-batches of 1,000, a
//!   pause between them, the built-in health indicators on).
//!
//! `cargo bench --bench foreground` (env: `SLUICE_BENCH_ROWS`, default
//! 1,000,000; `SLUICE_BENCH_PAUSE_MS`, default 50; `SLUICE_TEST_POSTGRES_URL`). Prints p50 and p99 of each and
//! their ratio to the idle p99.

mod common;

use std::str::FromStr;
use std::time::Duration;

use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::{ConnectOptions, SqlValue, Statement, Store};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use common::{percentile, postgres_or_skip, postgres_url};

const CLIENTS: usize = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = std::env::var("SLUICE_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let url = postgres_url();
    let options = ConnectOptions {
        sub_batch_timeout: Some(RuntimeConfig::default().sub_batch_timeout),
        ..ConnectOptions::default()
    };
    let Some(store) = postgres_or_skip(Store::connect_with(&url, &options).await) else {
        return;
    };
    let load_pool = PgPoolOptions::new()
        .max_connections(CLIENTS as u32)
        .connect_with(PgConnectOptions::from_str(&url).unwrap())
        .await
        .unwrap();
    let pause_ms: u64 = std::env::var("SLUICE_BENCH_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let young_from = rows * 4 / 5 + 1;
    println!("rows {rows}, {CLIENTS} point-query clients on the rows that stay");

    fill(&store, rows).await;
    let idle = under_load(&load_pool, young_from, rows, async {
        tokio::time::sleep(Duration::from_secs(8)).await;
    })
    .await;
    report("no maintenance", &idle, &idle);

    let big = under_load(&load_pool, young_from, rows, async {
        let statement = Statement::new("DELETE FROM fg_events WHERE created_at < ")
            .value(SqlValue::Timestamp(cutoff()));
        store.execute(&statement).await.unwrap();
    })
    .await;
    report("one big DELETE", &big, &idle);

    fill(&store, rows).await;
    let runtime = RuntimeBuilder::with_store(store.clone())
        .config(RuntimeConfig {
            node: "foreground".into(),
            pool_size: 1,
            ..RuntimeConfig::default()
        })
        .start()
        .await
        .unwrap();
    let sluice = under_load(&load_pool, young_from, rows, async {
        common::delete_aged_rows(
            &runtime,
            &store,
            "fg_events",
            Duration::from_millis(pause_ms),
        )
        .await
    })
    .await;
    runtime.shutdown().await.unwrap();
    report(
        &format!("Sluice, {pause_ms} ms pause, indicators on"),
        &sluice,
        &idle,
    );

    store
        .execute(&Statement::new("DROP TABLE IF EXISTS fg_events"))
        .await
        .unwrap();
    store.close().await;
}

/// Runs `maintenance` while the clients read rows that stay; returns their
/// latencies (microseconds), sorted.
async fn under_load(
    pool: &PgPool,
    young_from: i64,
    rows: i64,
    maintenance: impl Future<Output = ()>,
) -> Vec<u64> {
    let pool = pool.clone();
    let read = move |seed: u64| {
        let pool = pool.clone();
        async move {
            let id = young_from + (seed % (rows - young_from + 1) as u64) as i64;
            let _: Option<String> =
                sqlx::query_scalar("SELECT payload FROM fg_events WHERE id = $1")
                    .bind(id)
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
        }
    };
    common::under_load(CLIENTS as u64, read, maintenance).await
}

fn report(name: &str, latencies: &[u64], idle: &[u64]) {
    let (p50, p99) = (percentile(latencies, 0.50), percentile(latencies, 0.99));
    println!(
        "{name}: {} queries, p50 {:.2} ms, p99 {:.2} ms, p99 / idle p99 {:.2}",
        latencies.len(),
        p50 as f64 / 1e3,
        p99 as f64 / 1e3,
        p99 as f64 / percentile(idle, 0.99) as f64
    );
}

fn cutoff() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::days(1)
}

/// `fg_events`: `rows` rows, the first 80 % aged (2020), the rest young
/// (2099), indexed on `created_at`, vacuumed and analysed.
async fn fill(store: &Store, rows: i64) {
    for sql in [
        "DROP TABLE IF EXISTS fg_events",
        "CREATE TABLE fg_events (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL, payload TEXT NOT NULL)",
    ] {
        store.execute(&Statement::new(sql)).await.unwrap();
    }
    let insert = Statement::new(
        "INSERT INTO fg_events SELECT g, CASE WHEN g <= ",
    )
    .value(SqlValue::Int(rows * 4 / 5))
    .push(" THEN TIMESTAMPTZ '2020-01-01Z' ELSE TIMESTAMPTZ '2099-01-01Z' END, 'payload ' || g FROM generate_series(1, ")
    .value(SqlValue::Int(rows))
    .push(") g");
    store.execute(&insert).await.unwrap();
    for sql in [
        "CREATE INDEX fg_events_created_at ON fg_events (created_at)",
        "VACUUM ANALYZE fg_events",
        "CHECKPOINT",
    ] {
        let _ = store.execute(&Statement::new(sql)).await;
    }
}

//! End-to-end harness: a rate limit shared by four worker processes. A
//! PostgreSQL table of `SLUICE_BENCH_ROWS` rows (default 400,000) is split
//! into four `update-in-batches` operations, a kind limit of
//! `SLUICE_BENCH_RATE` rows a second (default 5,000) is set, and four
//! `sluice run --concurrency 1` processes share it. The rows changed are
//! read 5 s after the workers start and `SLUICE_BENCH_SECONDS` (default 60)
//! later: the observed rate over that minute, and its deviation from the
//! limit, are printed.
//!
//! `cargo bench --bench rate_limit` (env: the three above,
//! `SLUICE_TEST_POSTGRES_URL`).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_store::Store;
use sluice_target::{SqlValue, Statement};

use common::{env, postgres_or_skip, postgres_url, sluice};

const WORKERS: i64 = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 400_000);
    let rate: i64 = env("SLUICE_BENCH_RATE", 5_000);
    let seconds: u64 = env("SLUICE_BENCH_SECONDS", 60);
    let url = postgres_url();
    let Some(store) = postgres_or_skip(Store::connect(&url).await) else {
        return;
    };
    for sql in [
        "DROP TABLE IF EXISTS rate_items",
        "CREATE TABLE rate_items (id BIGINT PRIMARY KEY, counter INTEGER NOT NULL DEFAULT 0)",
    ] {
        store.target().execute(&Statement::new(sql)).await.unwrap();
    }
    let insert = Statement::new("INSERT INTO rate_items (id) SELECT g FROM generate_series(1, ")
        .value(SqlValue::Int(rows))
        .push(") g");
    store.target().execute(&insert).await.unwrap();
    store
        .target()
        .execute(&Statement::new("VACUUM ANALYZE rate_items"))
        .await
        .unwrap();
    sluice(
        &url,
        &[
            "limit",
            "--kind",
            "update-in-batches",
            "--rate",
            &rate.to_string(),
        ],
    );
    for k in 0..WORKERS {
        let condition = format!("id % {WORKERS} = {k}");
        sluice(
            &url,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "rate_items",
                "--set",
                "counter = counter + 1",
                "--where",
                &condition,
                "--sub-batch-size",
                "100",
            ],
        );
    }
    let mut workers: Vec<_> = (0..WORKERS)
        .map(|n| {
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["run", "--until-idle", "--concurrency", "1"])
                .args(["--node", &format!("rate-{n}")])
                .env("SLUICE_DATABASE_URL", &url)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let changed = || async {
        store
            .target()
            .fetch_int(&Statement::new(
                "SELECT COUNT(*) FROM rate_items WHERE counter = 1",
            ))
            .await
            .unwrap()
            .unwrap_or(0)
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (first, from) = (changed().await, Instant::now());
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let (last, took) = (changed().await, from.elapsed().as_secs_f64());
    let observed = (last - first) as f64 / took;
    println!(
        "{WORKERS} workers, limit {rate} rows/s: {} rows in {took:.1} s = {observed:.0} rows/s ({:+.2} % of the limit)",
        last - first,
        (observed / rate as f64 - 1.0) * 100.0
    );
    assert!(
        last < rows,
        "the run outlasted the measurement (raise SLUICE_BENCH_ROWS)"
    );
    for worker in &mut workers {
        let _ = worker.kill();
        let _ = worker.wait();
    }
    sluice(&url, &["limit", "--kind", "update-in-batches", "--clear"]);
    store.close().await;
}

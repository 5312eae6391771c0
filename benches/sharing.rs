//! End-to-end harness: one `update-in-batches` over a PostgreSQL table run
//! by one worker process, then shared by four (`sluice run --until-idle
//! --parallel-batches 4` each). Runs alternate between the two settings so
//! drift in the machine falls on both; each prints its time (from the
//! operation's `started` to its `finished` event, and wall-clock including
//! process start), its rows per second and how many batches each worker ran.
//! At the end, medians and the four-to-one throughput ratio.
//!
//! `cargo bench --bench sharing` (env: `SLUICE_BENCH_ROWS`, default
//! 2,000,000, half of them matching; `SLUICE_BENCH_RUNS`, default 3 per
//! setting; `SLUICE_TEST_POSTGRES_URL`).

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Instant;

use sluice_store::Store;
use sluice_target::{SqlValue, Statement};

use common::{env, postgres_or_skip, postgres_url, sluice};

const SHARED: u32 = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 2_000_000);
    let runs: i64 = env("SLUICE_BENCH_RUNS", 3);
    let url = postgres_url();
    let Some(store) = postgres_or_skip(Store::connect(&url).await) else {
        return;
    };
    println!(
        "{rows} rows ({} matching), batches of 5,000 (adaptive), sub-batches of 1,000, default pause",
        rows / 2
    );
    let mut seconds: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for run in 0..runs {
        let order = if run % 2 == 0 {
            [1, SHARED]
        } else {
            [SHARED, 1]
        };
        for workers in order {
            let took = measure(&store, &url, rows, workers).await;
            seconds.entry(workers).or_default().push(took);
        }
    }
    let median = |workers: u32| {
        let mut v = seconds[&workers].clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (one, four) = (median(1), median(SHARED));
    println!(
        "median: 1 worker {one:.2} s ({:.0} rows/s); {SHARED} workers {four:.2} s ({:.0} rows/s); throughput ratio {:.2}",
        (rows / 2) as f64 / one,
        (rows / 2) as f64 / four,
        one / four
    );
    store.close().await;
}

/// Fills the table afresh, enqueues the update and runs it with `workers`
/// processes; returns the operation's running time in seconds.
async fn measure(store: &Store, url: &str, rows: i64, workers: u32) -> f64 {
    let plain = [
        "DROP TABLE IF EXISTS share_items",
        "CREATE TABLE share_items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, counter INTEGER NOT NULL DEFAULT 0)",
    ];
    for sql in plain {
        store.target().execute(&Statement::new(sql)).await.unwrap();
    }
    let insert = Statement::new(
        "INSERT INTO share_items (id, grp) SELECT g, g % 2 FROM generate_series(1, ",
    )
    .value(SqlValue::Int(rows))
    .push(") g");
    store.target().execute(&insert).await.unwrap();
    for sql in ["VACUUM ANALYZE share_items", "CHECKPOINT"] {
        store.target().execute(&Statement::new(sql)).await.unwrap();
    }
    let enqueued = sluice(
        url,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "share_items",
            "--set",
            "counter = counter + 1",
            "--where",
            "grp = 1",
            "--batch-size",
            "5000",
            "--sub-batch-size",
            "1000",
            "--json",
        ],
    );
    let id = serde_json::from_slice::<serde_json::Value>(&enqueued).unwrap()["id"]
        .as_i64()
        .unwrap();
    let wall = Instant::now();
    let mut children: Vec<_> = (1..=workers)
        .map(|n| {
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["run", "--until-idle", "--parallel-batches"])
                .arg(SHARED.to_string())
                .args(["--node", &format!("share-{workers}-{n}")])
                .env("SLUICE_DATABASE_URL", url)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    let wall = wall.elapsed().as_secs_f64();
    let record = store.operation(id).await.unwrap();
    let state = &record.state;
    assert_eq!(state.rows_done, rows / 2);
    let took = (state.finished_at.unwrap() - state.started_at.unwrap()) as f64 / 1_000.0;
    let mut by_node: BTreeMap<String, usize> = BTreeMap::new();
    for batch in store.batches(id).await.unwrap() {
        *by_node
            .entry(batch.claimed_by.unwrap_or_default())
            .or_default() += 1;
    }
    println!(
        "{workers} worker(s): {took:.2} s ({:.0} rows/s), wall {wall:.2} s, batches by worker {:?}",
        state.rows_done as f64 / took,
        by_node.values().collect::<Vec<_>>()
    );
    took
}

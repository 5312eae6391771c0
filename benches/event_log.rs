//! Event log throughput: appends per second (one event per transaction, and
//! ten per transaction) and the time to replay a 100,000-event log, on an
//! SQLite file and on PostgreSQL.
//!
//! Run: `cargo bench --bench event_log` (PostgreSQL from
//! `SLUICE_TEST_POSTGRES_URL`, default `postgres://postgres@127.0.0.1:5432/test`;
//! skipped with a message when unreachable).

mod common;

use std::str::FromStr;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use sluice_store::{Event, Expected, Health, Lease, OperationSpec, Store};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::runtime::Runtime;

use common::postgres_url;

const REPLAY_EVENTS: u64 = 100_000;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn sqlite_store(dir: &tempfile::TempDir) -> Store {
    Store::connect(&format!(
        "sqlite:{}",
        dir.path().join("bench.sqlite").display()
    ))
    .await
    .unwrap()
}

async fn postgres_store() -> Option<Store> {
    let url = postgres_url();
    let admin = match PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(3))
        .connect(&url)
        .await
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("SKIPPED PostgreSQL benchmarks: {url} not reachable ({e})");
            return None;
        }
    };
    sqlx::raw_sql("DROP SCHEMA IF EXISTS sluice_bench CASCADE; CREATE SCHEMA sluice_bench")
        .execute(&admin)
        .await
        .unwrap();
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", "sluice_bench")]);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    Some(Store::postgres(pool).await.unwrap())
}

/// A running operation to append to, and its lease.
async fn running_operation(store: &Store, name: &str) -> (i64, Lease) {
    let id = store
        .enqueue(OperationSpec::new("bench", name, vec!["id".into()]))
        .await
        .unwrap()
        .id;
    let claimed = store
        .claim_operations("bench", 100, Duration::from_secs(3600))
        .await
        .unwrap();
    let lease = claimed
        .into_iter()
        .find(|c| c.record.id == id)
        .unwrap()
        .record
        .lease
        .unwrap();
    (id, lease)
}

fn events(n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| Event::Throttled {
            health: if i % 2 == 0 {
                Health::Throttled { percent: 50 }
            } else {
                Health::Normal
            },
            reason: Some("replication lag 2.1s".into()),
        })
        .collect()
}

fn bench_backend(c: &mut Criterion, rt: &Runtime, backend: &str, store: &Store) {
    let mut group = c.benchmark_group(format!("event_log/{backend}"));
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(8));
    for per_append in [1usize, 10] {
        let (id, lease) = rt.block_on(running_operation(store, &format!("append{per_append}")));
        let batch = events(per_append);
        group.throughput(Throughput::Elements(per_append as u64));
        group.bench_with_input(
            BenchmarkId::new("append", format!("{per_append}_per_tx")),
            &batch,
            |b, batch| {
                b.iter(|| {
                    rt.block_on(store.append(id, Expected::Any, Some(&lease), batch))
                        .unwrap()
                })
            },
        );
    }
    let (id, lease) = rt.block_on(running_operation(store, "replay"));
    rt.block_on(async {
        let chunk = events(1_000);
        for _ in 0..REPLAY_EVENTS / 1_000 {
            store
                .append(id, Expected::Any, Some(&lease), &chunk)
                .await
                .unwrap();
        }
    });
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));
    group.throughput(Throughput::Elements(REPLAY_EVENTS));
    group.bench_function("replay_100k", |b| {
        b.iter(|| rt.block_on(store.replay(id)).unwrap())
    });
    group.finish();
}

fn event_log(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = rt.block_on(sqlite_store(&dir));
    bench_backend(c, &rt, "sqlite", &sqlite);
    if let Some(postgres) = rt.block_on(postgres_store()) {
        bench_backend(c, &rt, "postgres", &postgres);
    }
}

criterion_group!(benches, event_log);
criterion_main!(benches);

//! End-to-end harness: one process with 10,000 enqueued operations, 200 of
//! them running at once, on PostgreSQL (a fresh schema). Reports the bulk
//! enqueue time, the process's resident memory before and with the 200
//! operation actors (so the memory of one idle actor), its CPU use while
//! they idle between sub-batches, and what one recorded event costs in the
//! event log's table.
//!
//! `cargo bench --bench scale` (env: `SLUICE_BENCH_OPERATIONS`, default
//! 10,000; `SLUICE_BENCH_RUNNING`, default 200; `SLUICE_TEST_POSTGRES_URL`).

mod common;

use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_operations::{
    EnqueueOptions, Filter, NewOperation, Operation, OperationError, Shape, SubBatch, SubBatchRows,
};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::{OperationStatus, Store};
use sluice_target::Statement;

use common::{drop_schema, env, fresh_schema, postgres_or_skip, postgres_url};

const SCHEMA: &str = "sluice_bench_scale";

/// Marks one tenant's rows, a few per sub-batch, pausing between them: an
/// operation that stays running, mostly idle, for the whole measurement.
struct TouchTenant;

#[derive(Serialize, Deserialize)]
struct Tenant {
    tenant: i64,
}

#[async_trait]
impl Operation for TouchTenant {
    type Arguments = Tenant;

    fn kind(&self) -> &'static str {
        "touch-tenant"
    }

    fn shape(&self, args: &Tenant) -> Result<Shape, OperationError> {
        Shape::range("scale_items", "id")?.scope(Filter::new().eq("tenant", args.tenant))
    }

    async fn run(&self, _: &Tenant, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        batch.update(&[("touched", 1_i64.into())]).await
    }

    fn sub_batch_statement(
        &self,
        _: &Tenant,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        rows.update_statement(&[("touched", 1_i64.into())])
            .map(Some)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let operations: i64 = env("SLUICE_BENCH_OPERATIONS", 10_000);
    let running: usize = env("SLUICE_BENCH_RUNNING", 200);
    let url = postgres_url();
    let Some(store) = postgres_or_skip(fresh_schema(&url, SCHEMA, 12).await) else {
        return;
    };
    // 20 rows per tenant.
    for sql in [
        "CREATE TABLE scale_items (id BIGINT PRIMARY KEY, tenant BIGINT NOT NULL, touched BIGINT NOT NULL DEFAULT 0)",
        "CREATE INDEX scale_items_tenant ON scale_items (tenant, id)",
    ] {
        store.target().execute(&Statement::new(sql)).await.unwrap();
    }
    let fill = Statement::new("INSERT INTO scale_items (id, tenant) SELECT g, g % ")
        .value(operations.into())
        .push(" FROM generate_series(1, ")
        .value((operations * 20).into())
        .push(") g");
    store.target().execute(&fill).await.unwrap();
    store
        .target()
        .execute(&Statement::new("ANALYZE scale_items"))
        .await
        .unwrap();

    let config = RuntimeConfig {
        node: "scale".into(),
        concurrency: running,
        pool_size: 4,
        min_batch_size: 5,
        max_batch_size: 5,
        ..RuntimeConfig::default()
    };
    let runtime = common::as_users_run(RuntimeBuilder::with_store(store.clone()).config(config))
        .register(TouchTenant)
        .start()
        .await
        .unwrap();
    let baseline = resident_kib();
    let options = EnqueueOptions {
        batch_size: 5,
        sub_batch_size: 5,
        pause: Duration::from_secs(2),
        ..EnqueueOptions::default()
    };
    let batch: Vec<NewOperation> = (0..operations)
        .map(|tenant| NewOperation {
            kind: "touch-tenant".into(),
            arguments: serde_json::json!({ "tenant": tenant }),
            options: options.clone(),
        })
        .collect();
    let started = Instant::now();
    runtime.enqueue_many(&batch).await.unwrap();
    let enqueue_time = started.elapsed();
    // Until `running` operations are held here at once.
    let deadline = Instant::now() + Duration::from_secs(120);
    while count(&store, OperationStatus::Running).await < running as i64 {
        assert!(
            Instant::now() < deadline,
            "the operations did not all start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let loaded = resident_kib();
    let (cpu_before, wall) = (cpu_seconds(), Instant::now());
    let events_before = events(&store).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    let cpu = (cpu_seconds() - cpu_before) / wall.elapsed().as_secs_f64();
    let events_after = events(&store).await;
    let with_events = resident_kib();
    let (table_bytes, event_rows) = event_table(&store).await;
    runtime.shutdown().await.unwrap();

    println!("operations {operations}, running at once {running}");
    println!(
        "bulk enqueue: {} ms for {operations} operations",
        enqueue_time.as_millis()
    );
    println!(
        "resident memory: {} KiB with the runtime started, {} KiB with {running} operation actors running ({:.1} KiB per actor, the 10,000 enqueued operations' share included)",
        baseline,
        loaded,
        (loaded as f64 - baseline as f64) / running as f64
    );
    println!(
        "CPU while {running} operations run a sub-batch every 2 s each: {:.1} % of one core; {} events recorded in 20 s, resident memory {} KiB after them",
        cpu * 100.0,
        events_after - events_before,
        with_events
    );
    println!(
        "event log: {event_rows} events in {} KiB ({:.0} bytes per event, indexes included)",
        table_bytes / 1024,
        table_bytes as f64 / event_rows.max(1) as f64
    );
    store.close().await;
    drop_schema(&url, SCHEMA).await;
}

async fn count(store: &Store, status: OperationStatus) -> i64 {
    store
        .status_counts()
        .await
        .unwrap()
        .into_iter()
        .find(|(s, _)| *s == status)
        .map_or(0, |(_, n)| n)
}

async fn events(store: &Store) -> i64 {
    store
        .target()
        .fetch_int(&Statement::new("SELECT COUNT(*) FROM sluice_events"))
        .await
        .unwrap()
        .unwrap_or(0)
}

async fn event_table(store: &Store) -> (i64, i64) {
    let bytes = store
        .target()
        .fetch_int(&Statement::new(
            "SELECT pg_total_relation_size('sluice_events')",
        ))
        .await
        .unwrap()
        .unwrap_or(0);
    (bytes, events(store).await)
}

/// This process's resident set size.
fn resident_kib() -> u64 {
    common::resident_kib_of("self")
}

/// User plus system CPU time of this process, from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) are space-separated.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / 100.0 // USER_HZ
}

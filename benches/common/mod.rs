//! What the end-to-end harnesses share: their settings from the
//! environment, medians, a PostgreSQL store in a schema of its own, and the
//! table of aged rows the overhead harnesses delete.

#![allow(dead_code, reason = "each harness uses what it needs")]

use std::str::FromStr;
use std::time::Duration;

use sluice_store::{Store, StoreError};
use sluice_target::{Backend, SqlValue, Statement};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

#[path = "../../tests/common/aged_rows.rs"]
mod aged_rows;
#[allow(unused_imports)] // not every test binary enqueues it
pub use aged_rows::older_than_a_day;

/// `name` from the environment parsed as `T`, or `default` when unset or
/// unparsable.
pub fn env<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The PostgreSQL store `connected` gave, or `None` after saying the
/// benchmark is skipped (no server here).
pub fn postgres_or_skip(connected: Result<Store, StoreError>) -> Option<Store> {
    match connected {
        Ok(store) => Some(store),
        Err(e) => {
            println!("postgres: skipped ({e})");
            None
        }
    }
}

/// The PostgreSQL to measure on: `SLUICE_TEST_POSTGRES_URL`, as the tests.
pub fn postgres_url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The middle sample (the upper one of an even count).
pub fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

/// The sample at quantile `p` (0 to 1) of `sorted`.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Runs `maintenance` while `clients` tasks each call `query` with a fresh
/// pseudo-random number, about 500 times a second (a steady load, not a
/// flood) and for an hour at most; returns how long each call took
/// (microseconds), sorted.
pub async fn under_load<Q, F>(
    clients: u64,
    query: Q,
    maintenance: impl std::future::Future<Output = ()>,
) -> Vec<u64>
where
    Q: Fn(u64) -> F + Clone + Send + 'static,
    F: std::future::Future<Output = ()> + Send,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;
    let done = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (query, done) = (query.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut seed = 0x2545_f491_4f6c_dd1d_u64 ^ (client + 1);
                let started = Instant::now();
                while !done.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(3_600)
                {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let asked = Instant::now();
                    query(seed).await;
                    latencies.push(asked.elapsed().as_micros() as u64);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                latencies
            })
        })
        .collect();
    maintenance.await;
    done.store(true, Ordering::SeqCst);
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all.sort_unstable();
    all
}

/// Deletes the rows of `table` older than a day with `delete-aged-rows` on
/// `runtime` (batches of 20,000, sub-batches of 1,000, `pause` between
/// them) and waits until it has finished.
pub async fn delete_aged_rows(
    runtime: &sluice_runtime::Runtime,
    store: &Store,
    table: &str,
    pause: Duration,
) {
    let arguments = older_than_a_day(store, table).await;
    let options = sluice_operations::EnqueueOptions {
        batch_size: 20_000,
        sub_batch_size: 1_000,
        pause,
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
}

/// A store in `schema` of the PostgreSQL at `url`, created afresh (dropped
/// first if a run left it), with a pool of `connections`.
pub async fn fresh_schema(url: &str, schema: &str, connections: u32) -> Result<Store, StoreError> {
    drop_schema(url, schema).await;
    let admin = PgPoolOptions::new().max_connections(1).connect(url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await?;
    admin.close().await;
    // A pool kept for Sluice alone, named as Sluice names its own: the
    // latency budget tells its sessions from an application's.
    let options = PgConnectOptions::from_str(url)?
        .options([("search_path", schema)])
        .application_name(sluice_target::SESSION_NAME);
    let pool = PgPoolOptions::new()
        .max_connections(connections)
        .connect_with(options)
        .await?;
    Store::postgres(pool).await
}

/// Drops `schema` and everything in it, if the server is reachable.
pub async fn drop_schema(url: &str, schema: &str) {
    if let Ok(admin) = PgPoolOptions::new().max_connections(1).connect(url).await {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(&admin)
        .await;
        admin.close().await;
    }
}

/// `bench_events` with `rows` rows, all aged, indexed on `created_at`,
/// vacuumed and analysed, the WAL checkpointed; autovacuum as the server
/// has it ([`set_autovacuum`]).
pub async fn fill_aged_events(store: &Store, rows: i64) {
    store
        .target()
        .execute(&Statement::new("DROP TABLE IF EXISTS bench_events"))
        .await
        .unwrap();
    if let Backend::Sqlite(_) = store.backend() {
        // The dropped table's pages back in the file's order, so each fill
        // lays the table out as the first one did.
        store
            .target()
            .execute(&Statement::new("VACUUM"))
            .await
            .unwrap();
    }
    let (create, head, tail) = match store.backend() {
        Backend::Sqlite(_) => (
            "CREATE TABLE bench_events (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL, payload TEXT NOT NULL)",
            "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < ",
            ") INSERT INTO bench_events SELECT v, printf('2020-01-01T00:%02d:%02dZ', v % 60, v % 59), \
             'payload ' || v FROM n",
        ),
        Backend::Postgres(_) => (
            "CREATE TABLE bench_events (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL, payload TEXT NOT NULL)",
            "INSERT INTO bench_events SELECT g, TIMESTAMPTZ '2020-01-01Z' + (g % 3600) * INTERVAL '1 second', \
             'payload ' || g FROM generate_series(1, ",
            ") g",
        ),
        Backend::MySql(_) => (
            "CREATE TABLE bench_events (id BIGINT PRIMARY KEY, created_at DATETIME(6) NOT NULL, payload TEXT NOT NULL) \
             ENGINE = InnoDB",
            "SET STATEMENT max_recursive_iterations = 100000000 FOR \
             INSERT INTO bench_events WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < ",
            ") SELECT v, TIMESTAMP '2020-01-01 00:00:00' + INTERVAL (v % 3600) SECOND, CONCAT('payload ', v) FROM n",
        ),
    };
    store
        .target()
        .execute(&Statement::new(create))
        .await
        .unwrap();
    let insert = Statement::new(head).value(SqlValue::Int(rows)).push(tail);
    store.target().execute(&insert).await.unwrap();
    store
        .target()
        .execute(&Statement::new(
            "CREATE INDEX IF NOT EXISTS bench_events_created_at_idx ON bench_events (created_at)",
        ))
        .await
        .unwrap();
    settle(store, "bench_events").await;
}

/// Brings `table` to the same state before each run: vacuumed (the dead
/// rows of the run before are not the next run's cleanup) and analysed,
/// the WAL checkpointed, so a checkpoint does not land inside one run and
/// not another (PostgreSQL's needs a superuser; skipped otherwise). The
/// server's autovacuum is left as it is during the run.
pub async fn settle(store: &Store, table: &str) {
    let table = sluice_target::Ident::parse(table).unwrap();
    let settle = match store.backend() {
        Backend::Sqlite(_) => Statement::new("PRAGMA wal_checkpoint(TRUNCATE)"),
        Backend::Postgres(_) => Statement::new("VACUUM ANALYZE ").ident(&table),
        Backend::MySql(_) => Statement::new("ANALYZE TABLE ").ident(&table),
    };
    store.target().execute(&settle).await.unwrap();
    if let Backend::Postgres(_) = store.backend() {
        let _ = store.target().execute(&Statement::new("CHECKPOINT")).await;
    }
}

/// `bench_bulk(id, created_at)`, indexed on `created_at`, and `n` distinct
/// `delete-aged-rows` operations on it to enqueue (each with its own cutoff,
/// as a per-tenant clean-up would have its own bound values).
pub async fn aged_operations(store: &Store, n: usize) -> Vec<sluice_operations::NewOperation> {
    let (create, index) = match store.backend() {
        Backend::Sqlite(_) => (
            "CREATE TABLE bench_bulk (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL)",
            "CREATE INDEX bench_bulk_created_at ON bench_bulk (created_at)",
        ),
        Backend::Postgres(_) => (
            "CREATE TABLE bench_bulk (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL)",
            "CREATE INDEX bench_bulk_created_at ON bench_bulk (created_at)",
        ),
        Backend::MySql(_) => (
            "CREATE TABLE bench_bulk (id BIGINT PRIMARY KEY, created_at DATETIME(6) NOT NULL)",
            "CREATE INDEX bench_bulk_created_at ON bench_bulk (created_at)",
        ),
    };
    store
        .target()
        .execute(&Statement::new(create))
        .await
        .unwrap();
    store
        .target()
        .execute(&Statement::new(index))
        .await
        .unwrap();
    let typed = matches!(store.backend(), Backend::Postgres(_) | Backend::MySql(_));
    (0..n)
        .map(|i| {
            let at = chrono::DateTime::from_timestamp(1_600_000_000 + i as i64, 0).unwrap();
            let cutoff = if typed {
                serde_json::json!({ "timestamp": at })
            } else {
                serde_json::json!({ "text": at.format("%Y-%m-%dT%H:%M:%SZ").to_string() })
            };
            sluice_operations::NewOperation {
                kind: "delete-aged-rows".into(),
                arguments: serde_json::json!({
                    "table": "bench_bulk",
                    "column": "created_at",
                    "key": "id",
                    "cutoff": cutoff,
                }),
                options: sluice_operations::EnqueueOptions::default(),
            }
        })
        .collect()
}

/// The resident set size of process `process` (a pid, or `self`), KiB,
/// from `/proc/<process>/status`; 0 once it is gone.
pub fn resident_kib_of(process: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{process}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Runs the built `sluice` binary against `url` and returns its stdout;
/// panics with its stderr unless it succeeded.
pub fn sluice(url: &str, args: &[&str]) -> Vec<u8> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATABASE_URL", url)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// A store on `url` for a benchmark's foreground load, whose sessions are
/// an application's to Sluice's latency budget
/// (`HealthQueries::application_sessions`): on PostgreSQL named
/// `bench-application` (Sluice names its own `sluice`), on MySQL counted
/// in `performance_schema` (an application's pool, as
/// `sluice_target::mysql_sessions` builds one; Sluice leaves its own out).
#[allow(dead_code, reason = "each bench uses what it needs of this module")]
pub async fn application_store(url: &str) -> Store {
    if url.starts_with("mysql://") || url.starts_with("mariadb://") {
        let pool = sluice_target::mysql_sessions(sqlx::mysql::MySqlPoolOptions::new())
            .connect(&url.replacen("mariadb://", "mysql://", 1))
            .await
            .expect("the load's pool");
        return Store::mysql(pool).await.expect("the load's store");
    }
    let url = match url.starts_with("postgres") {
        true if url.contains('?') => format!("{url}&application_name=bench-application"),
        true => format!("{url}?application_name=bench-application"),
        false => url.to_owned(),
    };
    Store::connect(&url).await.expect("the load's store")
}

/// `builder` as users run it: the built-in health indicators and the
/// latency budget on, unless `SLUICE_BENCH_INDICATORS=off` asks for the
/// runtime alone or `no-budget` for the indicators without the latency
/// budget (lab settings, reported beside the default).
#[allow(dead_code, reason = "each bench uses what it needs of this module")]
pub fn as_users_run(builder: sluice_runtime::RuntimeBuilder) -> sluice_runtime::RuntimeBuilder {
    with_indicators(builder, &env("SLUICE_BENCH_INDICATORS", "on".to_owned()))
}

/// `builder` with the indicators `setting` names (`on`, `off`,
/// `no-budget`), as [`as_users_run`] reads it from the environment.
#[allow(dead_code, reason = "each bench uses what it needs of this module")]
pub fn with_indicators(
    builder: sluice_runtime::RuntimeBuilder,
    setting: &str,
) -> sluice_runtime::RuntimeBuilder {
    // Said with every run, so a lab figure is never read as the defaults'.
    eprintln!(
        "indicators: {setting}{}",
        if setting == "on" {
            " (the defaults, as users run)"
        } else {
            " (a lab setting)"
        }
    );
    match setting {
        "off" => builder.without_builtin_indicators(),
        "no-budget" => builder.without_indicator(sluice_runtime::latency::ID),
        _ => builder,
    }
}

/// `builder` with the table-activity indicator as `SLUICE_BENCH_ACTIVITY`
/// asks, on PostgreSQL (the one backend that has it): `gated` (the
/// default, as users run it: its autovacuum and cleanup-debt throttles
/// hold only while the latency canary feels them), `ungated` (they hold
/// whatever the canary says) or `off`.
#[allow(dead_code, reason = "each bench uses what it needs of this module")]
pub fn with_activity(
    builder: sluice_runtime::RuntimeBuilder,
    store: &Store,
) -> sluice_runtime::RuntimeBuilder {
    use sluice_runtime::indicators::TableActivity;
    if !matches!(store.backend(), Backend::Postgres(_)) {
        return builder;
    }
    match activity().as_str() {
        "ungated" => builder
            .without_indicator("table-activity")
            .indicator(std::sync::Arc::new(TableActivity::new())),
        "off" => builder.without_indicator("table-activity"),
        _ => builder,
    }
}

/// `SLUICE_BENCH_ACTIVITY`: `gated` unless set.
#[allow(dead_code, reason = "each bench uses what it needs of this module")]
pub fn activity() -> String {
    env("SLUICE_BENCH_ACTIVITY", "gated".to_owned())
}

/// Sets PostgreSQL's autovacuum for the run: `on`, PostgreSQL's default and
/// what users run, unless `SLUICE_BENCH_AUTOVACUUM=off` asks for the lab
/// setting; the setting it replaced, to restore with [`alter_autovacuum`].
pub async fn set_autovacuum(store: &Store) -> Option<String> {
    let wanted = env("SLUICE_BENCH_AUTOVACUUM", "on".to_owned());
    let Backend::Postgres(pool) = store.backend() else {
        return None;
    };
    let previous: String = sqlx::query_scalar("SHOW autovacuum")
        .fetch_one(pool)
        .await
        .unwrap();
    alter_autovacuum(store, &wanted).await;
    let label = if wanted == "on" {
        "the default"
    } else {
        "a lab setting"
    };
    eprintln!("postgres: autovacuum {wanted} for the run ({label}; was {previous})");
    Some(previous)
}

/// Sets the server's `autovacuum` to `value` (`on` or `off`) and reloads.
pub async fn alter_autovacuum(store: &Store, value: &str) {
    let Backend::Postgres(pool) = store.backend() else {
        return;
    };
    let set = if value == "on" {
        "ALTER SYSTEM SET autovacuum = on"
    } else {
        "ALTER SYSTEM SET autovacuum = off"
    };
    sqlx::query(set).execute(pool).await.unwrap();
    sqlx::query("SELECT pg_reload_conf()")
        .execute(pool)
        .await
        .unwrap();
}

//! What the end-to-end harnesses share: their settings from the
//! environment, medians, a PostgreSQL store in a schema of its own, and the
//! table of aged rows the overhead harnesses delete.

#![allow(dead_code, reason = "each harness uses what it needs")]

use std::str::FromStr;
use std::time::Duration;

use sluice_store::{Backend, SqlValue, Statement, Store, StoreError};
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

/// A store in `schema` of the PostgreSQL at `url`, created afresh (dropped
/// first if a run left it), with a pool of `connections`.
pub async fn fresh_schema(url: &str, schema: &str, connections: u32) -> Result<Store, StoreError> {
    drop_schema(url, schema).await;
    let admin = PgPoolOptions::new().max_connections(1).connect(url).await?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&admin)
        .await?;
    admin.close().await;
    let options = PgConnectOptions::from_str(url)?.options([("search_path", schema)]);
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
/// vacuumed and analysed, the WAL checkpointed; on PostgreSQL autovacuum is
/// off for it, so no run is slowed (or sped up) by a vacuum that happens to
/// start during it.
pub async fn fill_aged_events(store: &Store, rows: i64) {
    store
        .execute(&Statement::new("DROP TABLE IF EXISTS bench_events"))
        .await
        .unwrap();
    let (create, head, tail) = match store.backend() {
        Backend::Sqlite(_) => (
            "CREATE TABLE bench_events (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL, payload TEXT NOT NULL)",
            "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < ",
            ") INSERT INTO bench_events SELECT v, printf('2020-01-01T00:%02d:%02dZ', v % 60, v % 59), \
             'payload ' || v FROM n",
        ),
        Backend::Postgres(_) => (
            "CREATE TABLE bench_events (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL, payload TEXT NOT NULL) \
             WITH (autovacuum_enabled = false)",
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
    store.execute(&Statement::new(create)).await.unwrap();
    let insert = Statement::new(head).value(SqlValue::Int(rows)).push(tail);
    store.execute(&insert).await.unwrap();
    store
        .execute(&Statement::new(
            "CREATE INDEX IF NOT EXISTS bench_events_created_at_idx ON bench_events (created_at)",
        ))
        .await
        .unwrap();
    let settle = match store.backend() {
        Backend::Sqlite(_) => "PRAGMA wal_checkpoint(TRUNCATE)",
        Backend::Postgres(_) => "VACUUM ANALYZE bench_events",
        Backend::MySql(_) => "ANALYZE TABLE bench_events",
    };
    store.execute(&Statement::new(settle)).await.unwrap();
    if let Backend::Postgres(_) = store.backend() {
        // Start each run with the fill's WAL written out, so a checkpoint
        // does not land inside one run and not another (needs a superuser;
        // skipped otherwise).
        let _ = store.execute(&Statement::new("CHECKPOINT")).await;
    }
}

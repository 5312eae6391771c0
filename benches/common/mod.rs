//! What the end-to-end harnesses share: their settings from the
//! environment, medians, and a PostgreSQL store in a schema of its own.

#![allow(dead_code, reason = "each harness uses what it needs")]

use std::str::FromStr;
use std::time::Duration;

use sluice_store::{Store, StoreError};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

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

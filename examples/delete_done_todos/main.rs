//! Embedding Sluice: a host application registers its own operation —
//! GitLab's "delete all done todos of one user completed before a time",
//! written in `operation.rs` exactly as the README shows it — starts the
//! runtime, enqueues the operation and waits for it.
//!
//! Run it with `cargo run --example delete_done_todos` (an SQLite file in
//! the current folder), or give a database URL as its argument.

// The README shows this file as it is, in 15 lines.
#[rustfmt::skip]
mod operation;
// The README's "Running it", as the README shows it.
mod readme;

use std::time::Duration;

use operation::{DeleteAllDoneTodos, DoneTodos};
use sluice::prelude::*;
use sluice::target::Backend;

/// Creates a `todos` table in the database at `url`: 30,000 todos of users
/// 5, 6 and 7, every other one done, completed at times across 2025 and
/// 2026 (on SQLite written as `datetime()` writes them, on PostgreSQL a
/// `timestamp`, on MySQL a `DATETIME`). Then deletes user 7's done todos completed before 2026 and
/// returns (rows deleted, todos left).
pub async fn run(url: &str) -> Result<(i64, i64), Box<dyn std::error::Error>> {
    let runtime = RuntimeBuilder::new(url)
        .register(DeleteAllDoneTodos)
        .start()
        .await?;
    let store = runtime.store();
    let (create, fill) = match store.backend() {
        Backend::Sqlite(_) => (
            "CREATE TABLE todos (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, \
             state TEXT NOT NULL, completed_at TEXT, title TEXT NOT NULL)",
            "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < 30000) \
             INSERT INTO todos SELECT v, 5 + v % 3, CASE v % 2 WHEN 1 THEN 'done' ELSE 'pending' END, \
             CASE WHEN v % 2 = 1 THEN datetime(1735689600 + v * 2103, 'unixepoch') END, 'todo ' || v FROM n",
        ),
        Backend::Postgres(_) => (
            "CREATE TABLE todos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, \
             state TEXT NOT NULL, completed_at TIMESTAMP, title TEXT NOT NULL)",
            "INSERT INTO todos SELECT v, 5 + v % 3, CASE v % 2 WHEN 1 THEN 'done' ELSE 'pending' END, \
             CASE WHEN v % 2 = 1 THEN to_timestamp(1735689600 + v * 2103) AT TIME ZONE 'UTC' END, \
             'todo ' || v FROM generate_series(1, 30000) AS v",
        ),
        Backend::MySql(_) => (
            "CREATE TABLE todos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, \
             state VARCHAR(16) NOT NULL, completed_at DATETIME, title TEXT NOT NULL) ENGINE = InnoDB",
            // Thousands of thousands: both servers stop a recursion at
            // 1,000 steps by default.
            "INSERT INTO todos WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < 1000) \
             SELECT v, 5 + v % 3, CASE v % 2 WHEN 1 THEN 'done' ELSE 'pending' END, \
             CASE WHEN v % 2 = 1 THEN TIMESTAMP '2025-01-01 00:00:00' + INTERVAL v * 2103 SECOND END, \
             CONCAT('todo ', v) FROM (SELECT (a.v - 1) * 1000 + b.v AS v FROM n a, n b WHERE a.v <= 30) s",
        ),
    };
    store
        .target()
        .execute(&Statement::new("DROP TABLE IF EXISTS todos"))
        .await?;
    store.target().execute(&Statement::new(create)).await?;
    store.target().execute(&Statement::new(fill)).await?;
    let before = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")?.with_timezone(&Utc);
    let arguments = DoneTodos { user_id: 7, before };
    let options = EnqueueOptions {
        batch_size: 2_000,
        sub_batch_size: 500,
        ..EnqueueOptions::default()
    };
    let operation = runtime
        .enqueue(&DeleteAllDoneTodos, &arguments, &options)
        .await?;
    let finished = runtime.wait(operation.id, Duration::from_secs(60)).await?;
    let left = store
        .target()
        .fetch_int(&Statement::new("SELECT COUNT(*) FROM todos"))
        .await?
        .unwrap_or(0);
    runtime.shutdown().await?;
    Ok((finished.state.rows_done, left))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "sqlite:todos.sqlite".into());
    let (deleted, left) = run(&url).await?;
    println!("deleted {deleted} done todos of user 7 completed before 2026; {left} todos left");
    Ok(())
}

//! Embedding Sluice: a host application registers its own operation —
//! "delete all done todos of one user completed before a time" — starts the
//! runtime on an SQLite file, enqueues the operation and waits for it.
//!
//! Run it with `cargo run --example delete_done_todos`.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_operations::{EnqueueOptions, Filter, Operation, OperationError, Shape, SubBatch};
use sluice_runtime::RuntimeBuilder;
use sluice_store::Statement;

/// Deletes one user's done todos completed before a time.
pub struct DeleteDoneTodos;

/// Its arguments (stored with the operation as JSON).
#[derive(Serialize, Deserialize)]
pub struct Args {
    user_id: i64,
    before: String,
}

#[async_trait]
impl Operation for DeleteDoneTodos {
    type Arguments = Args;

    fn kind(&self) -> &'static str {
        "delete-done-todos"
    }

    fn shape(&self, args: &Args) -> Result<Shape, OperationError> {
        Shape::range("todos", "id")?.scope(
            Filter::new()
                .eq("user_id", args.user_id)
                .eq("done", true)
                .lt("completed_at", args.before.as_str()),
        )
    }

    async fn run(&self, _: &Args, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        batch.delete().await
    }
}

/// Creates a `todos` table in the database at `url`, deletes user 7's done
/// todos completed before 2026, and returns (rows deleted, todos left).
pub async fn run(url: &str) -> Result<(i64, i64), Box<dyn std::error::Error>> {
    let runtime = RuntimeBuilder::new(url)
        .register(DeleteDoneTodos)
        .start()
        .await?;
    let store = runtime.store();
    store
        .execute(&Statement::new("DROP TABLE IF EXISTS todos"))
        .await?;
    store
        .execute(&Statement::new(
            "CREATE TABLE todos (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, \
             done BOOLEAN NOT NULL, completed_at TEXT, title TEXT NOT NULL)",
        ))
        .await?;
    // 30,000 todos of 3 users; every other one done, completed across 2025 and 2026.
    store
        .execute(&Statement::new(
            "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < 30000) \
             INSERT INTO todos SELECT v, 5 + v % 3, v % 2, \
             CASE WHEN v % 2 = 1 THEN printf('%d-06-01', 2025 + v % 4 / 2) END, 'todo ' || v FROM n",
        ))
        .await?;
    let arguments = Args {
        user_id: 7,
        before: "2026-01-01".into(),
    };
    let options = EnqueueOptions {
        batch_size: 2_000,
        sub_batch_size: 500,
        ..EnqueueOptions::default()
    };
    let operation = runtime
        .enqueue(&DeleteDoneTodos, &arguments, &options)
        .await?;
    let finished = runtime.wait(operation.id, Duration::from_secs(60)).await?;
    let left = store
        .fetch_int(&Statement::new("SELECT COUNT(*) FROM todos"))
        .await?
        .unwrap_or(0);
    runtime.shutdown().await?;
    Ok((finished.state.rows_done, left))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (deleted, left) = run("sqlite:todos.sqlite").await?;
    println!("deleted {deleted} done todos of user 7 completed before 2026; {left} todos left");
    Ok(())
}

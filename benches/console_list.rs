//! End-to-end harness: the console's list endpoint and dashboard page with
//! 10,000 operations in the store, on SQLite and PostgreSQL. Each request
//! goes through the whole router (access check, store query, JSON) as a
//! served one would, without the socket; 200 of each, latency p50 and p99.
//!
//! `cargo bench --bench console_list` (env: `SLUICE_BENCH_OPERATIONS`,
//! default 10,000; `SLUICE_TEST_POSTGRES_URL`).

mod common;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sluice::console::{Access, Console};
use sluice_operations::{Registry, enqueue_many};
use sluice_store::Store;
use tower::ServiceExt as _;

use common::{drop_schema, env, fresh_schema, percentile, postgres_url};

const SCHEMA: &str = "sluice_bench_console";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let operations: usize = env("SLUICE_BENCH_OPERATIONS", 10_000);
    let postgres = postgres_url();
    for backend in ["sqlite", "postgres"] {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let store = match backend {
            "sqlite" => {
                let url = format!("sqlite:{}", dir.path().join("console.sqlite").display());
                Store::connect(&url).await.expect("SQLite store")
            }
            _ => match fresh_schema(&postgres, SCHEMA, 4).await {
                Ok(store) => store,
                Err(e) => {
                    println!("postgres: skipped ({e})");
                    continue;
                }
            },
        };
        let batch = common::aged_operations(&store, operations).await;
        enqueue_many(&store, &Registry::with_builtins(), &batch)
            .await
            .unwrap();
        let console = Console::new(store.clone(), Access::default());
        // The dashboard's calls each second (newest 200; those in play of
        // every age), the API's largest page, and the page itself.
        for path in [
            "/api/operations?order=newest&limit=200",
            "/api/operations?status=running&limit=1000",
            "/api/operations?limit=1000",
            "/",
        ] {
            let mut took = Vec::new();
            for _ in 0..200 {
                let request = Request::builder()
                    .uri(path)
                    .header("host", "127.0.0.1:8080")
                    .body(Body::empty())
                    .unwrap();
                let started = Instant::now();
                let response = console.clone().router().oneshot(request).await.unwrap();
                assert_eq!(response.status(), StatusCode::OK);
                axum::body::to_bytes(response.into_body(), 64 << 20)
                    .await
                    .unwrap();
                took.push(started.elapsed());
            }
            let mut micros: Vec<u64> = took.iter().map(|d| d.as_micros() as u64).collect();
            micros.sort_unstable();
            let ms = |us: u64| Duration::from_micros(us).as_secs_f64() * 1e3;
            println!(
                "{backend}, {operations} operations, GET {path}: p50 {:.2} ms, p99 {:.2} ms",
                ms(percentile(&micros, 0.5)),
                ms(percentile(&micros, 0.99)),
            );
        }
        store.close().await;
        if backend == "postgres" {
            drop_schema(&postgres, SCHEMA).await;
        }
    }
}

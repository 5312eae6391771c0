//! End-to-end harness: does "throttled to X %" give X % of the pace? One
//! `delete-aged-rows` over `SLUICE_BENCH_ROWS` aged rows (default
//! 2,000,000) runs in one process on each backend reachable (SQLite always;
//! PostgreSQL and MariaDB at `SLUICE_TEST_POSTGRES_URL` and
//! `SLUICE_TEST_MYSQL_URL`), while an indicator holds it throttled to 100,
//! 75, 50 and 25 %, in turn, twice, beside the built-in indicators (the
//! defaults, on). Each level's rows/s is read from the
//! table over `SLUICE_BENCH_WINDOW_MS` (default 3,000) after a settling
//! half-second; printed with its share of the unthrottled rows/s measured
//! beside it.
//!
//! `cargo bench --bench throttle` (env: the three above).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use sluice_runtime::{RuntimeBuilder, RuntimeConfig, Signal, indicator_fn};
use sluice_store::Store;
use sluice_target::Statement;

use common::{alter_autovacuum, env, fill_aged_events, set_autovacuum};

/// The levels measured, in order, each round.
const LEVELS: [u8; 4] = [100, 75, 50, 25];

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 2_000_000);
    let window = Duration::from_millis(env("SLUICE_BENCH_WINDOW_MS", 3_000));
    let dir = tempfile::tempdir().unwrap();
    let mut urls = vec![(
        "SQLite",
        format!("sqlite:{}", dir.path().join("throttle.sqlite").display()),
    )];
    if let Ok(url) = std::env::var("SLUICE_TEST_POSTGRES_URL") {
        urls.push(("PostgreSQL", url));
    }
    if let Ok(url) = std::env::var("SLUICE_TEST_MYSQL_URL") {
        urls.push((
            "MariaDB",
            format!("{}/sluice_bench", url.trim_end_matches('/')),
        ));
    }
    println!("| backend | throttle | rows/s (two rounds) | share of unthrottled |");
    println!("|---|---|---|---|");
    for (backend, url) in urls {
        if backend == "MariaDB" {
            let server = url.trim_end_matches("/sluice_bench");
            let Ok(admin) = Store::connect(&format!("{server}/mysql")).await else {
                eprintln!("{backend}: not reachable, skipped");
                continue;
            };
            admin
                .target()
                .execute(&Statement::new(
                    "CREATE DATABASE IF NOT EXISTS sluice_bench",
                ))
                .await
                .unwrap();
        }
        let Ok(store) = Store::connect(&url).await else {
            eprintln!("{backend}: not reachable, skipped");
            continue;
        };
        let autovacuum = set_autovacuum(&store).await;
        measure(backend, &store, rows, window).await;
        if let Some(previous) = autovacuum {
            alter_autovacuum(&store, &previous).await;
        }
    }
}

/// Runs one throttled delete on `store` and prints each level's pace.
async fn measure(backend: &str, store: &Store, rows: i64, window: Duration) {
    fill_aged_events(store, rows).await;
    let level = Arc::new(AtomicU8::new(100));
    let indicator = {
        let level = Arc::clone(&level);
        indicator_fn("bench throttle", move || {
            let percent = level.load(Ordering::SeqCst);
            async move {
                if percent >= 100 {
                    Signal::Normal
                } else {
                    Signal::Throttle {
                        percent,
                        reason: format!("bench at {percent} %"),
                    }
                }
            }
        })
    };
    let runtime = RuntimeBuilder::with_store(store.clone())
        .config(RuntimeConfig {
            health_interval: Duration::from_millis(50),
            health_clear_after: 1,
            ..RuntimeConfig::default()
        })
        .indicator(indicator)
        .start()
        .await
        .unwrap();
    let arguments = common::older_than_a_day(store, "bench_events").await;
    let options = sluice_operations::EnqueueOptions {
        batch_size: 20_000,
        sub_batch_size: 1_000,
        ..sluice_operations::EnqueueOptions::default()
    };
    runtime
        .enqueue(&sluice_operations::DeleteAgedRows, &arguments, &options)
        .await
        .unwrap();
    let remaining = || async {
        store
            .target()
            .fetch_int(&Statement::new("SELECT COUNT(*) FROM bench_events"))
            .await
            .unwrap()
            .unwrap_or(0)
    };
    let mut paces: Vec<(u8, f64)> = Vec::new();
    'rounds: for _ in 0..2 {
        for percent in LEVELS {
            level.store(percent, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(500)).await;
            let (before, started) = (remaining().await, Instant::now());
            tokio::time::sleep(window).await;
            let after = remaining().await;
            if after == 0 {
                eprintln!("{backend}: the table ran out; raise SLUICE_BENCH_ROWS");
                break 'rounds;
            }
            let pace = (before - after) as f64 / started.elapsed().as_secs_f64();
            paces.push((percent, pace));
        }
    }
    runtime.shutdown().await.unwrap();
    let of = |percent: u8| -> Vec<f64> {
        paces
            .iter()
            .filter(|(p, _)| *p == percent)
            .map(|(_, pace)| *pace)
            .collect()
    };
    let full: f64 = {
        let f = of(100);
        f.iter().sum::<f64>() / f.len().max(1) as f64
    };
    for percent in LEVELS {
        let at = of(percent);
        let mean = at.iter().sum::<f64>() / at.len().max(1) as f64;
        println!(
            "| {backend} | {percent} % | {} | {:.0} % |",
            at.iter()
                .map(|p| format!("{p:.0}"))
                .collect::<Vec<_>>()
                .join(" / "),
            mean / full * 100.0
        );
    }
}

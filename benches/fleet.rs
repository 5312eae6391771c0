//! End-to-end harness: one fleet over 8 PostgreSQL databases apart from
//! the store (its coordinator, a ninth database on the same server), each
//! target's `items` table changed whole by `update-in-batches` with the
//! defaults, run by 1, 2 and 4 `sluice run --until-idle` processes.
//! Reports the fleet's rows/s, the transactions the coordinator's database
//! committed per sub-batch (`pg_stat_database.xact_commit`: its plans,
//! claims, outcomes and events; a sub-batch itself commits on its target
//! alone), the workers' resident memory, and how long enqueueing the fleet
//! took (every target checked). Then how long enqueueing one operation over
//! 1,000 targets takes (schemas of one database, 100 rows each; the store
//! an SQLite file).
//!
//! `cargo bench --bench fleet` (env: `SLUICE_BENCH_TARGETS`, default 8;
//! `SLUICE_BENCH_ROWS` per target, default 250,000;
//! `SLUICE_BENCH_ENQUEUE_TARGETS`, default 1,000;
//! `SLUICE_TEST_POSTGRES_URL`).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::PgPoolOptions;

use common::{env, postgres_url, resident_kib_of, sluice};

const COORDINATOR: &str = "sluice_bench_fleet_coordinator";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let targets: usize = env("SLUICE_BENCH_TARGETS", 8);
    let rows: i64 = env("SLUICE_BENCH_ROWS", 250_000);
    let base = postgres_url();
    let Ok(admin) = PgPoolOptions::new().max_connections(2).connect(&base).await else {
        println!("postgres: skipped (no server at {base})");
        return;
    };
    let server = base
        .rsplit_once('/')
        .map_or(base.as_str(), |(s, _)| s)
        .to_owned();
    let names: Vec<String> = (1..=targets)
        .map(|n| format!("sluice_bench_fleet_{n}"))
        .collect();
    for name in names.iter().map(String::as_str).chain([COORDINATOR]) {
        recreate(&admin, name).await;
    }
    for name in &names {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&format!("{server}/{name}"))
            .await
            .unwrap();
        for sql in [
            "CREATE TABLE items (id BIGINT PRIMARY KEY, counter BIGINT NOT NULL DEFAULT 0, pad TEXT NOT NULL DEFAULT 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx')".to_owned(),
            format!("INSERT INTO items (id) SELECT g FROM generate_series(1, {rows}) g"),
            "VACUUM ANALYZE items".to_owned(),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        }
        pool.close().await;
    }
    let coordinator = format!("{server}/{COORDINATOR}");
    let file = tempfile::NamedTempFile::new().unwrap();
    let listed: String = names
        .iter()
        .map(|name| format!("{name} {server}/{name}\n"))
        .collect();
    std::fs::write(file.path(), listed).unwrap();
    println!("{targets} targets x {rows} rows, PostgreSQL, defaults");
    println!("workers  rows/s   coordinator tx/sub-batch  worker RSS (MiB)  enqueue (s)");
    for workers in [1, 2, 4] {
        let commits_before = commits(&admin, COORDINATOR).await;
        let started = Instant::now();
        let enqueued = sluice(
            &coordinator,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = counter + 1",
                "--targets",
                file.path().to_str().unwrap(),
                "--json",
            ],
        );
        let enqueue_s = started.elapsed().as_secs_f64();
        let id = serde_json::from_slice::<serde_json::Value>(&enqueued).unwrap()["id"]
            .as_i64()
            .unwrap();
        let wall = Instant::now();
        let mut children: Vec<_> = (1..=workers)
            .map(|n| {
                Command::new(env!("CARGO_BIN_EXE_sluice"))
                    .args([
                        "run",
                        "--until-idle",
                        "--node",
                        &format!("fleet-{workers}-{n}"),
                    ])
                    .args(["--concurrency", &targets.to_string()])
                    .env("SLUICE_DATABASE_URL", &coordinator)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut peak_kib = 0;
        loop {
            let running: Vec<u32> = children
                .iter_mut()
                .filter_map(|c| match c.try_wait() {
                    Ok(None) => Some(c.id()),
                    _ => None,
                })
                .collect();
            if running.is_empty() {
                break;
            }
            peak_kib = peak_kib.max(
                running
                    .iter()
                    .map(|pid| resident_kib_of(&pid.to_string()))
                    .max()
                    .unwrap_or(0),
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let seconds = wall.elapsed().as_secs_f64();
        let sub_batches = sub_batches(&coordinator, id).await;
        let commits = commits(&admin, COORDINATOR).await - commits_before;
        let total = rows * targets as i64;
        println!(
            "{workers:>7}  {:>7.0}  {:>24.2}  {:>16.1}  {enqueue_s:>11.2}",
            total as f64 / seconds,
            commits as f64 / sub_batches.max(1) as f64,
            peak_kib as f64 / 1024.0,
        );
    }
    for name in names.iter().map(String::as_str).chain([COORDINATOR]) {
        drop_database(&admin, name).await;
    }
    enqueue_many_targets(&admin, &server, env("SLUICE_BENCH_ENQUEUE_TARGETS", 1_000)).await;
}

/// Enqueues one `update-in-batches` over `targets` schemas of one database
/// (a table of 100 rows in each) from a targets file, the store an SQLite
/// file; prints how long it took the first time (Sluice's tables created
/// in every target) and again (the best of three), and how long as many
/// bare connections to the server take.
async fn enqueue_many_targets(admin: &sqlx::PgPool, server: &str, targets: usize) {
    const MANY: &str = "sluice_bench_fleet_many";
    recreate(admin, MANY).await;
    let url = format!("{server}/{MANY}");
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    let mut fill = String::new();
    for n in 1..=targets {
        fill.push_str(&format!(
            "CREATE SCHEMA t_{n}; CREATE TABLE t_{n}.items (id BIGINT PRIMARY KEY, counter BIGINT NOT NULL DEFAULT 0); \
             INSERT INTO t_{n}.items (id) SELECT g FROM generate_series(1, 100) g; ANALYZE t_{n}.items;"
        ));
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(fill))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    let listed: String = (1..=targets)
        .map(|n| format!("t-{n} {url}?options=-c%20search_path%3Dt_{n}\n"))
        .collect();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), listed).unwrap();
    let mut took = Vec::new();
    for _ in 0..4 {
        let folder = tempfile::tempdir().unwrap();
        let store = format!("sqlite:{}", folder.path().join("store.sqlite").display());
        let started = Instant::now();
        sluice(
            &store,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = counter + 1",
                "--targets",
                file.path().to_str().unwrap(),
            ],
        );
        took.push(started.elapsed().as_secs_f64());
    }
    let again = took[1..].iter().copied().fold(f64::MAX, f64::min);
    println!(
        "enqueue over {targets} targets (every one checked), the sluice command: \
         {:.2} s the first time (progress tables created), {again:.2} s again (best of 3)",
        took[0]
    );
    // The floor on this server: as many fresh connections, one query each.
    let started = Instant::now();
    let mut connects = tokio::task::JoinSet::new();
    for chunk in 0..16 {
        let url = url.clone();
        connects.spawn(async move {
            for _ in (chunk..targets).step_by(16) {
                let mut one = <sqlx::PgConnection as sqlx::Connection>::connect(&url)
                    .await
                    .unwrap();
                sqlx::query("SELECT 1").execute(&mut one).await.unwrap();
                sqlx::Connection::close(one).await.unwrap();
            }
        });
    }
    connects.join_all().await;
    println!(
        "{targets} fresh connections to the same server, 16 at a time: {:.2} s",
        started.elapsed().as_secs_f64()
    );
    drop_database(admin, MANY).await;
}

/// Transactions committed in database `name` so far (the statistics the
/// workers' sessions flushed as they ended, read a moment after).
async fn commits(admin: &sqlx::PgPool, name: &str) -> i64 {
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
        .bind(name)
        .fetch_one(admin)
        .await
        .unwrap()
}

/// The sub-batches the fleet of operation `id` ran: its targets' progress
/// records count rows, so the fleet's batches times their sub-batches.
async fn sub_batches(coordinator: &str, id: i64) -> i64 {
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(coordinator)
        .await
        .unwrap();
    let count: i64 = sqlx::query_scalar(
        "SELECT COALESCE(SUM(CEIL(b.rows_affected::numeric / GREATEST(b.sub_batch_size, 1))), 0)::BIGINT \
         FROM sluice_batches b JOIN sluice_operations o ON o.id = b.operation_id \
         WHERE o.fleet = (SELECT fleet FROM sluice_operations WHERE id = $1)",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    pool.close().await;
    count
}

async fn recreate(admin: &sqlx::PgPool, name: &str) {
    drop_database(admin, name).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(admin)
        .await
        .unwrap();
}

async fn drop_database(admin: &sqlx::PgPool, name: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )))
    .execute(admin)
    .await
    .unwrap();
}

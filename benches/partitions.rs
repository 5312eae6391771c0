//! End-to-end harness: partition-aware `delete-aged-rows` against the
//! row-by-row way, on each server of `SLUICE_BENCH_BACKENDS` (default
//! `postgres`; `mysql` for MariaDB). A table of `SLUICE_BENCH_ROWS` rows
//! (default 10,000,000) spread evenly over the last 450 days, partitioned
//! by month (PostgreSQL: with a default partition; MariaDB: `RANGE COLUMNS`
//! with a `MAXVALUE` one), primary key `(id, created_at)`, takes
//! a steady foreground load from four connections (each a point read by id
//! of a row that stays — it reaches every partition — then an insert of a
//! young row, every 2 ms) while its rows older than 90 days (80 %) are
//! deleted by Sluice with its defaults:
//! - dropping the partitions wholly older than the cutoff, the straddling
//!   month's aged rows deleted row by row;
//! - row by row throughout (`--no-drop-partitions`).
//!
//! With `SLUICE_BENCH_UNDO=1` both run with `--undo`: the partitions wholly
//! older than the cutoff detached and kept beside the undo table
//! (PostgreSQL), against every aged row moved into it; the undo is pruned
//! after each run, untimed.
//!
//! Each is timed from its enqueue to its end, with the log it and the load
//! wrote (PostgreSQL's WAL, `pg_current_wal_lsn`; InnoDB's redo,
//! `Innodb_lsn_current`; before and after); the table is built afresh
//! before each. Prints one markdown row per run: seconds, log, the
//! foreground's p50 and p99, and the p99 over the idle p99.
//!
//! `cargo bench --bench partitions` (env: `SLUICE_BENCH_ROWS`,
//! `SLUICE_BENCH_BACKENDS`, `SLUICE_BENCH_UNDO`, `SLUICE_TEST_POSTGRES_URL`,
//! `SLUICE_TEST_MYSQL_URL`).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use sluice_operations::DeleteAgedRows;
use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::Store;
use sluice_target::{SqlValue, Statement};

use common::{alter_autovacuum, env, percentile, postgres_or_skip, set_autovacuum};

const CLIENTS: u64 = 4;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 10_000_000);
    let backends: String = env("SLUICE_BENCH_BACKENDS", "postgres".to_owned());
    for backend in backends.split(',') {
        let url = match backend {
            "postgres" => common::postgres_url(),
            "mysql" => {
                let Ok(server) = std::env::var("SLUICE_TEST_MYSQL_URL") else {
                    eprintln!("mysql: SLUICE_TEST_MYSQL_URL unset, skipped");
                    continue;
                };
                let server = server.trim_end_matches('/').to_owned();
                let admin = Store::connect(&format!("{server}/mysql")).await.unwrap();
                let create = Statement::new("CREATE DATABASE IF NOT EXISTS sluice_bench");
                admin.target().execute(&create).await.unwrap();
                format!("{server}/sluice_bench")
            }
            other => panic!("unknown backend {other}"),
        };
        let Some(store) = postgres_or_skip(Store::connect(&url).await) else {
            continue;
        };
        let load = common::application_store(&url).await;
        measure(&store, &load, rows).await;
    }
}

/// The idle foreground, then both purges, on `store`'s server.
async fn measure(store: &Store, load: &Store, rows: i64) {
    let mysql = is_mysql(store);
    let autovacuum = set_autovacuum(store).await;
    let server = if mysql { "MariaDB" } else { "PostgreSQL" };
    println!(
        "{server}: rows {rows} over 450 days by month, 80 % older than 90 days; {CLIENTS} \
         clients: a point read by id and an insert each, every 2 ms"
    );
    println!();
    println!("| purge | s | rows/s | log MiB | fg p50 ms | fg p99 ms | p99 / idle |");
    println!("|---|---|---|---|---|---|---|");
    let store = &store;
    let load = &load;
    fill(store, rows).await;
    let idle = under_load(load, rows, async {
        tokio::time::sleep(Duration::from_secs(8)).await;
    })
    .await;
    let idle_p99 = percentile(&idle, 0.99);
    report("none", None, 0, &idle, idle_p99, 0);
    let undo = env("SLUICE_BENCH_UNDO", 0) == 1;
    let runs = match undo {
        false => [
            ("Sluice, defaults: partitions dropped", true),
            ("Sluice, defaults, --no-drop-partitions", false),
        ],
        true => [
            ("Sluice, defaults, --undo: partitions kept", true),
            ("Sluice, defaults, --undo --no-drop-partitions", false),
        ],
    };
    for (name, drop_partitions) in runs {
        fill(store, rows).await;
        let aged = Statement::new(match mysql {
            false => {
                "SELECT COUNT(*) FROM bench_parted WHERE created_at < now() - interval '90 days'"
            }
            true => {
                "SELECT COUNT(*) FROM bench_parted \
                 WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL 90 DAY"
            }
        });
        let aged = store.target().fetch_int(&aged).await.unwrap().unwrap_or(0);
        let before = log_position(store).await;
        let mut took = Duration::ZERO;
        let latencies = under_load(load, rows, async {
            let started = Instant::now();
            purge(store, drop_partitions, undo).await;
            took = started.elapsed();
        })
        .await;
        let written = log_position(store).await - before;
        if undo {
            let after_any_keep = chrono::Utc::now() + chrono::Duration::days(1);
            sluice_operations::builtin::prune_undo(store, Duration::ZERO, after_any_keep)
                .await
                .unwrap();
        }
        report(name, Some(took), written, &latencies, idle_p99, aged);
    }
    let _ = store
        .target()
        .execute(&Statement::new("DROP TABLE IF EXISTS bench_parted"))
        .await;
    if let Some(previous) = autovacuum {
        alter_autovacuum(store, &previous).await;
    }
    println!();
}

fn is_mysql(store: &Store) -> bool {
    matches!(store.backend(), sluice_target::Backend::MySql(_))
}

/// `delete-aged-rows --older-than 90d --key id,created_at` with every
/// other option at its default (and `--undo` with `undo`), on a runtime
/// as users run it.
async fn purge(store: &Store, drop_partitions: bool, undo: bool) {
    let builder = RuntimeBuilder::with_store(store.clone()).config(RuntimeConfig {
        node: "partitions".into(),
        ..RuntimeConfig::default()
    });
    let runtime = common::as_users_run(builder).start().await.unwrap();
    let mut arguments = DeleteAgedRows::arguments(
        store,
        "bench_parted",
        "created_at",
        "id,created_at",
        Duration::from_secs(90 * 86_400),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    arguments.drop_partitions &= drop_partitions;
    arguments.undo = undo;
    let arguments = serde_json::to_value(&arguments).unwrap();
    let op = runtime
        .enqueue_json(
            "delete-aged-rows",
            &arguments,
            &sluice_operations::EnqueueOptions::default(),
        )
        .await
        .unwrap();
    runtime
        .wait(op.id, Duration::from_secs(7_200))
        .await
        .unwrap();
    runtime.shutdown().await.unwrap();
}

/// The server's log position, in bytes: PostgreSQL's WAL, InnoDB's redo.
async fn log_position(store: &Store) -> i64 {
    let position = Statement::new(match is_mysql(store) {
        false => "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint",
        true => {
            "SELECT CAST(variable_value AS SIGNED) FROM information_schema.global_status \
             WHERE variable_name = 'INNODB_LSN_CURRENT'"
        }
    });
    store.target().fetch_int(&position).await.unwrap().unwrap()
}

/// Runs `purge` while the clients each read a young row by id and insert
/// a young one, every 2 ms; their latencies (microseconds), sorted.
async fn under_load(load: &Store, rows: i64, purge: impl Future<Output = ()>) -> Vec<u64> {
    let next_id = Arc::new(AtomicI64::new(rows + 1));
    let young_from = rows * 4 / 5 + rows / 50;
    let load = load.clone();
    let now = match is_mysql(&load) {
        false => ", now(), 'foreground')",
        true => ", UTC_TIMESTAMP(6), 'foreground')",
    };
    let query = move |seed: u64| {
        let (load, next_id) = (load.clone(), Arc::clone(&next_id));
        async move {
            let id = young_from + (seed % (rows - young_from) as u64) as i64;
            let read = Statement::new("SELECT payload FROM bench_parted WHERE id = ")
                .value(SqlValue::Int(id));
            load.target().fetch_cursor(&read, 1).await.unwrap();
            let insert =
                Statement::new("INSERT INTO bench_parted (id, created_at, payload) VALUES (")
                    .value(SqlValue::Int(next_id.fetch_add(1, Ordering::SeqCst)))
                    .push(now);
            load.target().execute(&insert).await.unwrap();
        }
    };
    common::under_load(CLIENTS, query, purge).await
}

/// `bench_parted`, afresh: `rows` rows, row `g` written `(rows − g) / rows ×
/// 450` days ago, a partition per month from the oldest row's to next
/// month's and a default one, an index on `created_at`; vacuumed and
/// analysed, then a checkpoint.
async fn fill(store: &Store, rows: i64) {
    if is_mysql(store) {
        return fill_mysql(store, rows).await;
    }
    let insert =
        Statement::new("INSERT INTO bench_parted SELECT g, now() - interval '450 days' * (CAST(")
            .value(SqlValue::Int(rows))
            .push(" - g AS double precision) / CAST(")
            .value(SqlValue::Int(rows))
            .push(" AS double precision)), repeat('x', 64) FROM generate_series(1, ")
            .value(SqlValue::Int(rows))
            .push(") g");
    let statements = [
        Statement::new("DROP TABLE IF EXISTS bench_parted"),
        Statement::new(
            "CREATE TABLE bench_parted (id BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL, \
             payload TEXT NOT NULL, PRIMARY KEY (id, created_at)) PARTITION BY RANGE (created_at)",
        ),
        Statement::new(
            "DO $$ DECLARE m date := date_trunc('month', now() - interval '451 days')::date; \
             BEGIN WHILE m < now() + interval '1 month' LOOP \
             EXECUTE format('CREATE TABLE bench_parted_%s PARTITION OF bench_parted \
             FOR VALUES FROM (%L) TO (%L)', to_char(m, 'YYYYMM'), m, m + interval '1 month'); \
             m := m + interval '1 month'; END LOOP; END $$",
        ),
        Statement::new("CREATE TABLE bench_parted_default PARTITION OF bench_parted DEFAULT"),
        insert,
        Statement::new("CREATE INDEX bench_parted_created_at ON bench_parted (created_at)"),
        Statement::new("VACUUM ANALYZE bench_parted"),
        Statement::new("CHECKPOINT"),
    ];
    for statement in statements {
        store.target().execute(&statement).await.unwrap();
    }
}

/// [`fill`] on MariaDB: `RANGE COLUMNS (created_at)`, a partition per
/// month and one up to `MAXVALUE`; analysed.
async fn fill_mysql(store: &Store, rows: i64) {
    use chrono::{Datelike, NaiveDate};
    let sluice_target::Backend::MySql(pool) = store.backend() else {
        unreachable!("a MariaDB store");
    };
    let today = chrono::Utc::now().date_naive();
    let oldest = today - chrono::Duration::days(451);
    let mut month = NaiveDate::from_ymd_opt(oldest.year(), oldest.month(), 1).unwrap();
    let mut partitions = Vec::new();
    while month <= today {
        let next = month.checked_add_months(chrono::Months::new(1)).unwrap();
        partitions.push(format!(
            "PARTITION p{} VALUES LESS THAN ('{next}')",
            month.format("%Y%m")
        ));
        month = next;
    }
    partitions.push("PARTITION pmax VALUES LESS THAN (MAXVALUE)".into());
    // 450 days are 38,880,000 seconds.
    for sql in [
        "DROP TABLE IF EXISTS bench_parted".to_owned(),
        format!(
            "CREATE TABLE bench_parted (id BIGINT NOT NULL, created_at DATETIME(6) NOT NULL, \
             payload VARCHAR(64) NOT NULL, PRIMARY KEY (id, created_at), \
             KEY bench_parted_created_at (created_at)) \
             PARTITION BY RANGE COLUMNS (created_at) ({})",
            partitions.join(", ")
        ),
        format!(
            "INSERT INTO bench_parted SELECT seq, UTC_TIMESTAMP(6) - INTERVAL \
             CAST(38880000 * ({rows} - seq) / {rows} AS SIGNED) SECOND, REPEAT('x', 64) \
             FROM seq_1_to_{rows}"
        ),
        "ANALYZE TABLE bench_parted".to_owned(),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap();
    }
}

fn report(
    purge: &str,
    took: Option<Duration>,
    wal: i64,
    latencies: &[u64],
    idle_p99: u64,
    aged: i64,
) {
    let (p50, p99) = (percentile(latencies, 0.50), percentile(latencies, 0.99));
    let (seconds, pace, wal) = match took {
        Some(took) => (
            format!("{:.1}", took.as_secs_f64()),
            format!("{:.0}", aged as f64 / took.as_secs_f64()),
            format!("{:.0}", wal as f64 / (1 << 20) as f64),
        ),
        None => ("-".into(), "-".into(), "-".into()),
    };
    println!(
        "| {purge} | {seconds} | {pace} | {wal} | {:.2} | {:.2} | {:.2} |",
        p50 as f64 / 1e3,
        p99 as f64 / 1e3,
        p99 as f64 / idle_p99.max(1) as f64
    );
}

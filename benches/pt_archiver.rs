//! End-to-end harness: Sluice against Percona's `pt-archiver` purging the
//! same rows of one MariaDB table, under the same foreground load, in one
//! run.
//!
//! The table has 1,000,000 rows (`SLUICE_BENCH_ROWS`) written over time, as
//! a log table is: `created_at` grows with the key, the first 80 % are
//! aged (2020), the last 20 % young; an index on `created_at`. Each side
//! starts from a fresh fill, with the replica caught up, and deletes the
//! rows older than a day, 1,000 per transaction:
//! - `pt-archiver --purge --where "created_at < NOW() - INTERVAL 1 DAY"
//!   --limit 1000 --commit-each --bulk-delete`;
//! - Sluice's `delete-aged-rows` with sub-batches of 1,000 (batches of
//!   20,000), enqueued, then run by `sluice run --until-idle --pool-size 1`
//!   — a process of its own, as `pt-archiver` is — with its built-in health
//!   indicators on, recording each sub-batch's progress in the same
//!   transaction as its delete.
//!
//! The second pair adds the replica: `--check-slave-lag <replica> --max-lag
//! 5` for `pt-archiver`, `--replica <replica>` (throttle at 5 s of lag, stop
//! at 30 s) for Sluice.
//!
//! Meanwhile four clients read rows that stay by their key and insert new
//! ones (one insert in four queries, about 500 queries/s per client); the
//! harness prints each side's rows/s, the clients' p50 and p99, and the
//! inserts' p99 alone (the tail is theirs: their commits queue with the
//! purge's). When the servers run on this machine it also prints the CPU
//! time their processes spent on each side, counted until the replica has
//! replayed it: the work a purge costs the servers, whichever tool sends
//! it.
//!
//! `cargo bench --bench pt_archiver` (env: `SLUICE_BENCH_ROWS`;
//! `SLUICE_BENCH_PAUSE`, Sluice's pause between sub-batches, default `0ms`;
//! `SLUICE_BENCH_REPEATS`, default 1, which side goes first alternates;
//! `SLUICE_BENCH_CLIENTS`, the foreground clients, default 4;
//! `SLUICE_BENCH_HOLD_REPLICA=1`, the replica's applier stopped during the
//! pair that does not check lag and started again after it, as if the
//! replica ran on other cores; `SLUICE_BENCH_PAIRS`, `plain`, `lag` or
//! `plain,lag` (the default); `SLUICE_BENCH_MAX_LAG`, pt-archiver's
//! `--max-lag` in the second pair (default 5); `SLUICE_BENCH_RUN_ARGS`,
//! more options for `sluice run`; `SLUICE_TEST_MYSQL_URL`,
//! `SLUICE_TEST_MYSQL_REPLICA_URL`, without a password). Needs
//! `pt-archiver` on the `PATH` (Debian: `percona-toolkit`); skips with a
//! message when it or a server is missing.

mod common;

use std::str::FromStr;
use std::time::{Duration, Instant};

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use common::{env, percentile};

const DATABASE: &str = "sluice_bench_archiver";
const TABLE: &str = "arch_events";
const SCOPE: &str = "created_at < NOW() - INTERVAL 1 DAY";

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 1_000_000);
    let repeats: usize = env("SLUICE_BENCH_REPEATS", 1);
    let clients: u64 = env("SLUICE_BENCH_CLIENTS", 4);
    let hold_replica = std::env::var("SLUICE_BENCH_HOLD_REPLICA").is_ok_and(|v| v == "1");
    let server = std::env::var("SLUICE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into());
    let replica = std::env::var("SLUICE_TEST_MYSQL_REPLICA_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3307".into());
    if std::process::Command::new("pt-archiver")
        .arg("--version")
        .output()
        .is_err()
    {
        println!("skipped: pt-archiver is not installed (Debian: percona-toolkit)");
        return;
    }
    let Ok(admin) = MySqlPool::connect(&server).await else {
        println!("skipped: no MySQL server at {server}");
        return;
    };
    for sql in [
        format!("DROP DATABASE IF EXISTS {DATABASE}"),
        format!("CREATE DATABASE {DATABASE}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&admin)
            .await
            .unwrap();
    }
    let url = format!("{}/{DATABASE}", server.trim_end_matches('/'));
    let replica_url = format!("{}/{DATABASE}", replica.trim_end_matches('/'));
    let primary = MySqlPoolOptions::new()
        .max_connections(clients.max(1) as u32)
        .connect(&url)
        .await
        .unwrap();
    let replica_pool = replica_with_database(&replica_url).await;
    println!(
        "rows {rows}, {} aged, sub-batches of 1,000, {clients} clients",
        rows - rows / 5
    );
    let load = Load { clients, rows };

    fill(&primary, rows).await;
    if clients > 0 {
        let idle = load
            .during(&primary, async {
                tokio::time::sleep(Duration::from_secs(8)).await
            })
            .await;
        report("no maintenance", None, &idle);
    }

    let wanted = std::env::var("SLUICE_BENCH_PAIRS").unwrap_or_else(|_| "plain,lag".into());
    let mut pairs: Vec<Option<&str>> = Vec::new();
    if wanted.split(',').any(|p| p == "plain") {
        pairs.push(None);
    }
    if wanted.split(',').any(|p| p == "lag") {
        match replica_pool {
            Some(_) => pairs.push(Some(replica_url.as_str())),
            None => println!("no replica at {replica_url}: the lag-checking pair is skipped"),
        }
    }
    // `SLUICE_BENCH_BUDGET=match`: Sluice's latency budget is the clients'
    // p99 under pt-archiver in the same pair (pt-archiver goes first).
    let matched = std::env::var("SLUICE_BENCH_BUDGET").is_ok_and(|v| v == "match");
    let mut pt_p99: Option<u64> = None;
    for repeat in 0..repeats {
        for lag_from in &pairs {
            let with = if lag_from.is_some() {
                ", replica lag checked"
            } else {
                ""
            };
            for turn in 0..2 {
                fill(&primary, rows).await;
                let held = match &replica_pool {
                    Some(replica) => {
                        caught_up(&primary, replica).await;
                        let held = hold_replica && lag_from.is_none();
                        if held {
                            applier(replica, "STOP").await;
                        }
                        held
                    }
                    None => false,
                };
                let cpu_before = server_cpu();
                let pt_turn = if matched {
                    turn == 0
                } else {
                    (turn + repeat) % 2 == 0
                };
                let (name, took, latencies) = if pt_turn {
                    let (took, latencies) =
                        timed(load.during(&primary, pt_archiver(&url, *lag_from))).await;
                    pt_p99 = Some(percentile(&latencies.all, 0.99));
                    (format!("pt-archiver{with}"), took, latencies)
                } else {
                    let budget = pt_p99.filter(|_| matched).map(|us| format!("{us}us"));
                    sluice_enqueue(&url, budget.as_deref()).await;
                    let (took, latencies) =
                        timed(load.during(&primary, sluice_run(&url, *lag_from))).await;
                    let budgeted = budget.map_or(String::new(), |b| format!(", budget {b}"));
                    (format!("Sluice{with}{budgeted}"), took, latencies)
                };
                if let Some(replica) = &replica_pool {
                    if held {
                        applier(replica, "START").await;
                    }
                    caught_up(&primary, replica).await;
                }
                let cpu = cpu_before.zip(server_cpu()).map(|(a, b)| b - a);
                let held = if held { ", applier held" } else { "" };
                report(
                    &format!("{name}{held}"),
                    Some((rows, took, cpu)),
                    &latencies,
                );
                let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT COUNT(*) FROM {TABLE} WHERE {SCOPE}"
                )))
                .fetch_one(&primary)
                .await
                .unwrap();
                assert_eq!(left, 0, "every aged row is deleted");
            }
        }
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP DATABASE {DATABASE}")))
        .execute(&admin)
        .await
        .unwrap();
}

/// Runs `pt-archiver` over the aged rows, checking the lag of `replica` if
/// one is given.
async fn pt_archiver(url: &str, replica: Option<&str>) {
    let source = dsn(url) + &format!(",t={TABLE},A=utf8mb4");
    let mut command = std::process::Command::new("pt-archiver");
    command.args([
        "--source",
        &source,
        "--purge",
        "--where",
        SCOPE,
        "--limit",
        "1000",
        "--commit-each",
        "--bulk-delete",
    ]);
    if let Some(replica) = replica {
        let max_lag = std::env::var("SLUICE_BENCH_MAX_LAG").unwrap_or_else(|_| "5".into());
        command.args(["--check-slave-lag", &dsn(replica), "--max-lag", &max_lag]);
    }
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("pt-archiver runs");
    assert!(
        output.status.success(),
        "pt-archiver failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Enqueues Sluice's `delete-aged-rows` over the aged rows, sub-batches
/// of 1,000 in batches of 20,000.
async fn sluice_enqueue(url: &str, budget: Option<&str>) {
    let pause = std::env::var("SLUICE_BENCH_PAUSE").unwrap_or_else(|_| "0ms".into());
    let mut args = vec![
        "enqueue",
        "delete-aged-rows",
        "--table",
        TABLE,
        "--column",
        "created_at",
        "--older-than",
        "1d",
        "--batch-size",
        "20000",
        "--sub-batch-size",
        "1000",
        "--pause",
        &pause,
    ];
    if let Some(budget) = budget {
        args.extend(["--latency-budget", budget]);
    }
    sluice(url, &args).await;
}

/// Runs what was enqueued to the end with `sluice run --until-idle`, one
/// sub-batch at a time, watching `replica` if one is given.
async fn sluice_run(url: &str, replica: Option<&str>) {
    let mut run = vec![
        "run",
        "--until-idle",
        "--pool-size",
        "1",
        "--concurrency",
        "1",
    ];
    if let Some(replica) = replica {
        run.extend(["--replica", replica]);
    }
    let extra = std::env::var("SLUICE_BENCH_RUN_ARGS").unwrap_or_default();
    run.extend(extra.split_whitespace());
    sluice(url, &run).await;
}

/// Runs the `sluice` binary on the store at `url`; panics unless it succeeds.
async fn sluice(url: &str, args: &[&str]) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.arg("--database-url").arg(url).args(args);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("sluice runs");
    assert!(
        output.status.success(),
        "sluice failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A connection to the replica at `url` once it has replayed the creation
/// of the benchmark's database (at most a minute); `None` when there is no
/// replica there.
async fn replica_with_database(url: &str) -> Option<MySqlPool> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match MySqlPool::connect(url).await {
            Ok(pool) => return Some(pool),
            // 1049: unknown database, not replayed yet.
            Err(sqlx::Error::Database(e))
                if e.code().as_deref() == Some("42000") && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(_) => return None,
        }
    }
}

/// `url` as a Percona DSN (`h=…,P=…,u=…[,D=…]`).
fn dsn(url: &str) -> String {
    let options = MySqlConnectOptions::from_str(url).unwrap();
    let mut dsn = format!(
        "h={},P={},u={}",
        options.get_host(),
        options.get_port(),
        options.get_username()
    );
    if let Some(database) = options.get_database() {
        dsn += &format!(",D={database}");
    }
    dsn
}

/// How long `work` took, and what it returned.
async fn timed<T>(work: impl Future<Output = T>) -> (Duration, T) {
    let started = Instant::now();
    let done = work.await;
    (started.elapsed(), done)
}

/// The foreground: `clients` clients reading rows that stay and inserting
/// new ones in a table of `rows` rows.
struct Load {
    clients: u64,
    rows: i64,
}

impl Load {
    /// Runs `maintenance` while the clients read rows that stay and insert
    /// new ones (one query in four); returns their latencies.
    async fn during(&self, pool: &MySqlPool, maintenance: impl Future<Output = ()>) -> Latencies {
        let (pool, rows) = (pool.clone(), self.rows);
        let inserts = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let insert_times = inserts.clone();
        let query = move |seed: u64| {
            let (pool, inserts) = (pool.clone(), insert_times.clone());
            async move {
                if seed.is_multiple_of(4) {
                    let asked = Instant::now();
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "INSERT INTO {TABLE} (created_at, payload) VALUES ('2099-01-01', ?)"
                    )))
                    .bind(format!("fresh {seed}"))
                    .execute(&pool)
                    .await
                    .unwrap();
                    inserts
                        .lock()
                        .unwrap()
                        .push(asked.elapsed().as_micros() as u64);
                } else {
                    // The last fifth stays.
                    let id = rows - (seed % (rows / 5) as u64) as i64;
                    let _: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                        "SELECT payload FROM {TABLE} WHERE id = ?"
                    )))
                    .bind(id)
                    .fetch_optional(&pool)
                    .await
                    .unwrap();
                }
            }
        };
        let all = common::under_load(self.clients, query, maintenance).await;
        let mut inserts = std::mem::take(&mut *inserts.lock().unwrap());
        inserts.sort_unstable();
        Latencies { all, inserts }
    }
}

/// The foreground's latencies (microseconds, sorted): every query's, and
/// the inserts' alone (whose commits wait on the purge's, where the tail
/// comes from).
struct Latencies {
    all: Vec<u64>,
    inserts: Vec<u64>,
}

/// Stops or starts (`verb`) the replica's SQL thread, which replays what
/// the primary wrote.
async fn applier(replica: &MySqlPool, verb: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("{verb} SLAVE SQL_THREAD")))
        .execute(replica)
        .await
        .unwrap();
}

/// CPU time (user and system) spent so far by the MariaDB and MySQL server
/// processes of this machine, read from `/proc`; `None` where there is no
/// `/proc` or no such process (the servers run elsewhere).
fn server_cpu() -> Option<Duration> {
    let ticks_per_second: u64 = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok()?.trim().parse().ok())?;
    let mut ticks = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state …`: the name may hold spaces, so split at its ')'.
        let Some((head, rest)) = stat.rsplit_once(") ") else {
            continue;
        };
        if !(head.ends_with("(mariadbd") || head.ends_with("(mysqld")) {
            continue;
        }
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // Fields 14 and 15 of the line (utime, stime); `rest` starts at field 3.
        let used: u64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
            .sum();
        *ticks.get_or_insert(0) += used;
    }
    ticks.map(|t: u64| Duration::from_millis(t * 1_000 / ticks_per_second))
}

/// Prints the clients' p50 and p99 and, for a purge, its rows/s and the
/// servers' CPU time.
fn report(name: &str, purge: Option<(i64, Duration, Option<Duration>)>, latencies: &Latencies) {
    let mut parts = Vec::new();
    if let Some((rows, took, cpu)) = purge {
        let purged = (rows - rows / 5) as f64;
        parts.push(format!(
            "{:.1} s, {:.0} rows/s",
            took.as_secs_f64(),
            purged / took.as_secs_f64()
        ));
        if let Some(cpu) = cpu {
            parts.push(format!(
                "server CPU {:.1} s ({:.1} µs/row)",
                cpu.as_secs_f64(),
                cpu.as_secs_f64() * 1e6 / purged
            ));
        }
    }
    let Latencies { all, inserts } = latencies;
    if !all.is_empty() {
        parts.push(format!(
            "{} queries, p50 {:.2} ms, p99 {:.2} ms",
            all.len(),
            percentile(all, 0.50) as f64 / 1e3,
            percentile(all, 0.99) as f64 / 1e3,
        ));
    }
    if !inserts.is_empty() {
        parts.push(format!(
            "inserts' p99 {:.2} ms",
            percentile(inserts, 0.99) as f64 / 1e3
        ));
    }
    println!("{name}: {}", parts.join(", "));
}

/// `arch_events` afresh: `rows` rows, the first 80 % aged (2020, a second
/// apart), the rest young (2099), indexed on `created_at` and analysed.
async fn fill(pool: &MySqlPool, rows: i64) {
    let aged = rows - rows / 5;
    for sql in [
        format!("DROP TABLE IF EXISTS {TABLE}"),
        format!(
            "CREATE TABLE {TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, \
             created_at DATETIME(6) NOT NULL, payload VARCHAR(255) NOT NULL) ENGINE = InnoDB"
        ),
        format!(
            "SET STATEMENT max_recursive_iterations = {rows} FOR INSERT INTO {TABLE} \
             WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < {rows}) \
             SELECT v, IF(v > {aged}, TIMESTAMP '2099-01-01 00:00:00', \
             TIMESTAMP '2020-01-01 00:00:00' + INTERVAL v SECOND), \
             CONCAT('payload ', v) FROM n"
        ),
        format!("CREATE INDEX {TABLE}_created_at ON {TABLE} (created_at)"),
        format!("ANALYZE TABLE {TABLE}"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(pool)
            .await
            .unwrap();
    }
}

/// Waits (at most ten minutes) until `replica` holds as many rows of the
/// table as `primary`, so no side starts with the other's lag.
async fn caught_up(primary: &MySqlPool, replica: &MySqlPool) {
    let count = format!("SELECT COUNT(*) FROM {TABLE}");
    let want: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count.clone()))
        .fetch_one(primary)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let have: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(count.clone()))
            .fetch_one(replica)
            .await
            .ok();
        if have == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "the replica did not catch up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

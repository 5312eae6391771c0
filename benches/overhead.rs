//! End-to-end harness: deleting aged rows with the runtime's built-in
//! `delete-aged-rows` versus a hand-written loop issuing the same statements
//! (`DELETE … WHERE id = ANY (ARRAY(SELECT id … WHERE created_at < $1 LIMIT
//! n))` on PostgreSQL, `… WHERE id IN (SELECT id … LIMIT n)` on SQLite with
//! the runtime's comparison of a time with text, one
//! transaction per statement, until fewer than `n` rows go) at the same
//! size, on SQLite and PostgreSQL, in turns in one run (which side goes
//! first rotates); and, for scale, everything in one `DELETE`. The runtime's
//! statement picks the same rows the same way and adds only its record: on
//! PostgreSQL the fenced count in the batch's row, tested in the pick's guard (`id = ANY
//! (CASE WHEN <fence> THEN ARRAY(SELECT id …) END)`), on SQLite the record
//! in the same transaction.
//!
//! The loop runs twice: on one connection it holds throughout (the fastest
//! a hand-written loop can be, and the ratio the target is judged by: the
//! runtime's pool workers hold theirs too), and through the pool
//! statement by statement, as `query(…).execute(&pool)` in a loop does
//! (sqlx then pings the connection as it is taken and as it is returned).
//! On SQLite and PostgreSQL a third loop ("recorded") commits each
//! statement in a transaction with a one-row progress record on its held
//! connection: what the runtime's exactly-once commit costs without the
//! runtime, so the ratio splits into the commit's price and the runtime's.
//!
//! `cargo bench --bench overhead` (env: `SLUICE_BENCH_ROWS`, default
//! 1,000,000; `SLUICE_BENCH_REPEATS`, default 3; `SLUICE_BENCH_BACKENDS`,
//! e.g. `postgres`, default both; `SLUICE_BENCH_SUB_BATCH`, rows per
//! sub-batch for both sides, default 1,000;
//! `SLUICE_BENCH_PER_BATCH`, sub-batches per runtime batch, default 20;
//! `SLUICE_BENCH_LOOPS=held`, the held loop alone beside the runtime;
//! `SLUICE_BENCH_VARIANTS=on,off,no-budget`, the held loop beside the
//! runtime with each of those indicator settings, by turns;
//! `SLUICE_BENCH_TIMELINE=1` prints each run's first events and its last;
//! `SLUICE_BENCH_ACTIVITY=ungated|off` runs PostgreSQL's table-activity
//! indicator without the latency canary's gate, or not at all;
//! `SLUICE_BENCH_INDICATORS=off` runs the runtime without its built-in
//! indicators and latency budget, which are on by default, as users run it;
//! `SLUICE_TEST_POSTGRES_URL`).
//! Prints the median of each, their ratio, and what the runtime adds per
//! sub-batch in microseconds (the ratio also depends on how long the
//! statement itself takes on the machine; the added time is the runtime's
//! own cost).

mod common;

use std::time::{Duration, Instant};

use sluice_operations::{DeleteAgedRows, EnqueueOptions};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::Store;
use sluice_target::{Backend, ConnectOptions, SqlValue, Statement};

use common::{
    alter_autovacuum, env, fill_aged_events as fill, median, postgres_url, set_autovacuum,
};

/// Rows per sub-batch unless `SLUICE_BENCH_SUB_BATCH` says otherwise.
const SUB_BATCH: i64 = 1_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let rows: i64 = env("SLUICE_BENCH_ROWS", 1_000_000);
    let repeats: usize = env("SLUICE_BENCH_REPEATS", 3);
    let sub_batch: i64 = env("SLUICE_BENCH_SUB_BATCH", SUB_BATCH);
    let dir = tempfile::tempdir().expect("a temporary folder");
    let sqlite = format!("sqlite:{}", dir.path().join("bench.sqlite").display());
    let postgres = postgres_url();
    println!("rows {rows}, sub-batch {sub_batch}, repeats {repeats}");
    let only = std::env::var("SLUICE_BENCH_BACKENDS").unwrap_or_default();
    for url in [sqlite, postgres] {
        if !only.is_empty() && !only.split(',').any(|b| url.starts_with(b)) {
            continue;
        }
        // As a `sluice run` worker connects: PostgreSQL sub-batches go to
        // sessions bounded by the sub-batch timeout, one statement each.
        let options = ConnectOptions {
            sub_batch_timeout: Some(RuntimeConfig::default().sub_batch_timeout),
            ..ConnectOptions::default()
        };
        let store = match Store::connect_with(&url, &options).await {
            Ok(store) => store,
            Err(e) => {
                println!("{}: skipped ({e})", sluice_target::redact_url(&url));
                continue;
            }
        };
        let name = match store.backend() {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
            Backend::MySql(_) => "mysql",
        };
        let autovacuum = set_autovacuum(&store).await;
        let (mut by_loop, mut by_pooled, mut by_recorded, mut by_runtime, mut by_one) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let setting = env("SLUICE_BENCH_INDICATORS", "on".to_owned());
        let variants: Vec<String> = env("SLUICE_BENCH_VARIANTS", String::new())
            .split(',')
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect();
        let mut by_variant: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
        for repeat in 0..repeats {
            // Rotate which goes first, so drift on the machine (caches,
            // the WAL, other load) does not favour one side.
            if !variants.is_empty() {
                // The held loop and each runtime variant, by turns.
                let sides = variants.len() + 1;
                for turn in 0..sides {
                    fill(&store, rows).await;
                    match (repeat + turn) % sides {
                        0 => by_loop.push(hand_written_loop(&store, rows, sub_batch, Held).await),
                        v => by_variant[v - 1]
                            .push(with_runtime(&store, rows, sub_batch, &variants[v - 1]).await),
                    }
                }
                continue;
            }
            // `SLUICE_BENCH_LOOPS=held`: the runtime and the held loop
            // alone (the guard's pair), for more repeats in the time.
            let sides = match (name, held_only()) {
                (_, true) => 2,
                ("mysql", _) => 3,
                _ => 4,
            };
            for turn in 0..sides {
                fill(&store, rows).await;
                match (repeat + turn) % sides {
                    0 => by_runtime.push(with_runtime(&store, rows, sub_batch, &setting).await),
                    1 => by_loop.push(hand_written_loop(&store, rows, sub_batch, Held).await),
                    2 => by_pooled.push(hand_written_loop(&store, rows, sub_batch, Pooled).await),
                    _ => {
                        by_recorded.push(hand_written_loop(&store, rows, sub_batch, Recorded).await)
                    }
                }
            }
            fill(&store, rows).await;
            by_one.push(one_delete(&store, rows).await);
        }
        for (variant, runs) in variants.iter().zip(&by_variant) {
            let paired = paired_ratios(&by_loop, runs);
            println!(
                "{name}: runtime, indicators {variant}: {:.2} s, median of paired ratios to the loop {:.3} ({:?}; loop runs {:?})",
                median(runs).as_secs_f64(),
                paired[paired.len() / 2],
                secs(runs),
                secs(&by_loop),
            );
        }
        if variants.is_empty() {
            report(
                name,
                rows,
                sub_batch,
                &by_runtime,
                [&by_loop, &by_pooled, &by_recorded],
                &by_one,
            );
        }
        store
            .target()
            .execute(&Statement::new("DROP TABLE IF EXISTS bench_events"))
            .await
            .unwrap();
        if let Some(previous) = autovacuum {
            alter_autovacuum(&store, &previous).await;
        }
        store.close().await;
    }
}

/// Prints the runtime's median against each loop's, paired, and against
/// one `DELETE`.
fn report(
    name: &str,
    rows: i64,
    sub_batch: i64,
    by_runtime: &[Duration],
    [by_loop, by_pooled, by_recorded]: [&Vec<Duration>; 3],
    by_one: &[Duration],
) {
    let r = median(by_runtime);
    for (label, loops) in [
        ("loop", &by_loop),
        ("pooled loop", &by_pooled),
        ("recorded loop", &by_recorded),
    ] {
        if loops.is_empty() {
            continue;
        }
        let l = median(loops);
        let paired = paired_ratios(loops, by_runtime);
        // What the runtime adds per sub-batch, start and end included:
        // roughly fixed, where the ratio also depends on how long the
        // statement itself takes on this machine.
        let sub_batches = (rows / sub_batch + 1) as f64;
        let mut added: Vec<f64> = loops
            .iter()
            .zip(by_runtime)
            .map(|(l, r)| (r.as_secs_f64() - l.as_secs_f64()) * 1e6 / sub_batches)
            .collect();
        added.sort_by(f64::total_cmp);
        println!(
            "{name}: {label} {:.2} s, runtime {:.2} s, runtime/{label} {:.3}, median of paired ratios {:.3}, runtime adds {:.0} µs per sub-batch (paired median; {:.0} µs per loop statement) ({label} runs {:?}, runtime runs {:?})",
            l.as_secs_f64(),
            r.as_secs_f64(),
            r.as_secs_f64() / l.as_secs_f64(),
            paired[paired.len() / 2],
            added[added.len() / 2],
            l.as_secs_f64() * 1e6 / sub_batches,
            secs(loops),
            secs(by_runtime),
        );
    }
    println!(
        "{name}: one DELETE {:.2} s (runs {:?}); runtime / one DELETE {:.3}",
        median(by_one).as_secs_f64(),
        secs(by_one),
        r.as_secs_f64() / median(by_one).as_secs_f64(),
    );
}

/// The loop's statement and a one-row progress record in one transaction
/// per sub-batch, on the held connection `$c`: the work the runtime's
/// exactly-once commit adds, without the runtime.
macro_rules! recorded_loop {
    ($c:expr, $begin:expr, $delete:expr, $cutoff:expr, $n:expr) => {{
        for setup in [
            "CREATE TABLE IF NOT EXISTS bench_progress (id BIGINT PRIMARY KEY, done BIGINT NOT NULL)",
            "DELETE FROM bench_progress",
            "INSERT INTO bench_progress VALUES (1, 0)",
        ] {
            sqlx::query(setup).execute(&mut *$c).await.unwrap();
        }
        let started = Instant::now();
        let mut deleted = 0;
        loop {
            sqlx::query($begin).execute(&mut *$c).await.unwrap();
            let done = sqlx::query($delete)
                .bind($cutoff)
                .bind($n)
                .execute(&mut *$c)
                .await
                .unwrap()
                .rows_affected() as i64;
            sqlx::query("UPDATE bench_progress SET done = done + $1 WHERE id = 1")
                .bind(done)
                .execute(&mut *$c)
                .await
                .unwrap();
            sqlx::query("COMMIT").execute(&mut *$c).await.unwrap();
            deleted += done;
            if done < $n {
                break (deleted, started.elapsed());
            }
        }
    }};
}

/// Everything aged in one statement: what batching is the alternative to
/// (fast in isolation, but one long transaction holding every row lock).
async fn one_delete(store: &Store, rows: i64) -> Duration {
    let started = Instant::now();
    let statement =
        Statement::new("DELETE FROM bench_events WHERE created_at < ").value(cutoff(store));
    let deleted = store.target().execute(&statement).await.unwrap() as i64;
    assert_eq!(deleted, rows);
    started.elapsed()
}

/// How the hand-written loop reaches the database.
#[derive(Debug, Clone, Copy)]
enum Connection {
    /// One connection, taken before the clock starts and held throughout.
    Held,
    /// A connection from the pool for each statement.
    Pooled,
    /// One held connection, each statement in a transaction with a
    /// one-row progress record, as the runtime commits a sub-batch.
    Recorded,
}
use Connection::{Held, Pooled, Recorded};

async fn hand_written_loop(
    store: &Store,
    rows: i64,
    sub_batch: i64,
    connection: Connection,
) -> Duration {
    /// Deletes `n` aged rows at a time through `executor` until fewer go.
    macro_rules! delete_until_short {
        ($executor:expr, $sql:expr, $cutoff:expr, $n:expr) => {{
            let mut deleted = 0;
            loop {
                let n = sqlx::query($sql)
                    .bind($cutoff)
                    .bind($n)
                    .execute($executor)
                    .await
                    .unwrap()
                    .rows_affected() as i64;
                deleted += n;
                if n < $n {
                    break deleted;
                }
            }
        }};
    }
    // The scope is tested again on each row reached by key, as the
    // runtime's statement does: under READ COMMITTED a row changed out of
    // the scope since the pick (its time made young) is then kept, where
    // `id = ANY (…)` alone would still delete it.
    const POSTGRES: &str = "DELETE FROM bench_events WHERE id = ANY (ARRAY(\
         SELECT id FROM bench_events WHERE created_at < $1 LIMIT $2)) \
         AND created_at < $1";
    // The time comparison the runtime makes on SQLite: a text range for the
    // index, then the instant each value names.
    const SQLITE: &str = "DELETE FROM bench_events WHERE id IN (\
         SELECT id FROM bench_events WHERE created_at < $1 \
         AND created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' \
         AND (created_at < $1 OR julianday(created_at) < julianday($1)) LIMIT $2) \
         AND created_at < $1 \
         AND created_at GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]*' \
         AND (created_at < $1 OR julianday(created_at) < julianday($1))";
    // MySQL's own limited DELETE, the scope tested on every row it deletes
    // (`?` placeholders: MySQL's, taken in order).
    const MYSQL: &str = "DELETE FROM bench_events WHERE created_at < ? ORDER BY id LIMIT ?";
    let (deleted, took) = match (store.backend(), connection) {
        (Backend::Postgres(pool), Held) => {
            let cutoff = postgres_cutoff();
            let mut held = pool.acquire().await.unwrap();
            let started = Instant::now();
            let deleted = delete_until_short!(&mut *held, POSTGRES, cutoff, sub_batch);
            (deleted, started.elapsed())
        }
        (Backend::Postgres(pool), Pooled) => {
            let cutoff = postgres_cutoff();
            let started = Instant::now();
            let deleted = delete_until_short!(pool, POSTGRES, cutoff, sub_batch);
            (deleted, started.elapsed())
        }
        (Backend::Sqlite(pool), Held) => {
            let mut held = pool.acquire().await.unwrap();
            let started = Instant::now();
            let deleted = delete_until_short!(&mut *held, SQLITE, SQLITE_CUTOFF, sub_batch);
            (deleted, started.elapsed())
        }
        (Backend::Sqlite(pool), Pooled) => {
            let started = Instant::now();
            let deleted = delete_until_short!(pool, SQLITE, SQLITE_CUTOFF, sub_batch);
            (deleted, started.elapsed())
        }
        (Backend::Postgres(pool), Recorded) => {
            let cutoff = postgres_cutoff();
            let mut held = pool.acquire().await.unwrap();
            recorded_loop!(held, "BEGIN", POSTGRES, cutoff, sub_batch)
        }
        (Backend::Sqlite(pool), Recorded) => {
            let mut held = pool.acquire().await.unwrap();
            recorded_loop!(held, "BEGIN IMMEDIATE", SQLITE, SQLITE_CUTOFF, sub_batch)
        }
        (Backend::MySql(_), Recorded) => unreachable!("measured on SQLite and PostgreSQL"),
        (Backend::MySql(pool), Held) => {
            let cutoff = postgres_cutoff().naive_utc();
            let mut held = pool.acquire().await.unwrap();
            let started = Instant::now();
            let deleted = delete_until_short!(&mut *held, MYSQL, cutoff, sub_batch);
            (deleted, started.elapsed())
        }
        (Backend::MySql(pool), Pooled) => {
            let cutoff = postgres_cutoff().naive_utc();
            let started = Instant::now();
            let deleted = delete_until_short!(pool, MYSQL, cutoff, sub_batch);
            (deleted, started.elapsed())
        }
    };
    assert_eq!(deleted, rows);
    took
}

async fn with_runtime(store: &Store, rows: i64, sub_batch: i64, indicators: &str) -> Duration {
    let config = RuntimeConfig {
        node: "bench".into(),
        pool_size: 1,
        min_batch_size: per_batch() * sub_batch,
        max_batch_size: per_batch() * sub_batch,
        ..RuntimeConfig::default()
    };
    let builder = RuntimeBuilder::with_store(store.clone()).config(config);
    let runtime = common::with_activity(common::with_indicators(builder, indicators), store)
        .start()
        .await
        .unwrap();
    let arguments = common::older_than_a_day(store, "bench_events").await;
    let options = EnqueueOptions {
        batch_size: per_batch() * sub_batch,
        sub_batch_size: sub_batch,
        ..EnqueueOptions::default()
    };
    // Timed from enqueue (checks, EXPLAIN, COUNT included) to finished.
    let started = Instant::now();
    let id = runtime
        .enqueue(&DeleteAgedRows, &arguments, &options)
        .await
        .unwrap()
        .id;
    let record = runtime.wait(id, Duration::from_secs(3_600)).await.unwrap();
    let took = started.elapsed();
    assert_eq!(record.state.rows_done, rows);
    runtime.shutdown().await.unwrap();
    health_changes(store, id, started).await;
    took
}

/// Prints each change of the operation's health during the run, with the
/// second it came at: what slowed it, if anything did.
async fn health_changes(store: &Store, id: i64, started: Instant) {
    let enqueued_ms = store.clock().now_ms() - started.elapsed().as_millis() as i64;
    let events = store.events(id, 0).await.unwrap();
    if std::env::var("SLUICE_BENCH_TIMELINE").is_ok() {
        for event in events.iter().take(4).chain(events.last()) {
            let at = (event.recorded_at - enqueued_ms) as f64 / 1_000.0;
            eprintln!("  {at:.3} s: {}", event.event.kind());
        }
        let busy: i64 = events
            .iter()
            .filter_map(|e| match &e.event {
                sluice_store::Event::BatchSucceeded { duration_ms, .. } => Some(*duration_ms),
                _ => None,
            })
            .sum();
        eprintln!("  in sub-batches: {:.3} s", busy as f64 / 1_000.0);
    }
    for event in events {
        if let sluice_store::Event::Throttled { health, reason } = &event.event {
            let at = (event.recorded_at - enqueued_ms) as f64 / 1_000.0;
            eprintln!(
                "  health at {at:.1} s: {health:?}{}",
                reason
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            );
        }
    }
}

/// Later than every row `fill` writes on SQLite (all on 2020-01-01): every row is aged.
const SQLITE_CUTOFF: &str = "2021-01-01T00:00:00Z";

fn cutoff(store: &Store) -> SqlValue {
    match store.backend() {
        Backend::Sqlite(_) => SqlValue::Text(SQLITE_CUTOFF.into()),
        Backend::Postgres(_) | Backend::MySql(_) => SqlValue::Timestamp(postgres_cutoff()),
    }
}

/// A day ago: later than every row `fill` writes on PostgreSQL and MySQL (all in 2020).
fn postgres_cutoff() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now() - chrono::Duration::days(1)
}

fn secs(samples: &[Duration]) -> Vec<String> {
    samples
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect()
}

/// True when `SLUICE_BENCH_LOOPS=held` asks for the held loop alone.
fn held_only() -> bool {
    env("SLUICE_BENCH_LOOPS", String::new()) == "held"
}

/// Sub-batches in each of the runtime's batches (`SLUICE_BENCH_PER_BATCH`):
/// the batch size is fixed, so every run has the same batch boundaries.
fn per_batch() -> i64 {
    env("SLUICE_BENCH_PER_BATCH", 20)
}

/// Each run's time over its paired loop's (the repeat's same turn), in
/// ascending order.
fn paired_ratios(loops: &[Duration], runs: &[Duration]) -> Vec<f64> {
    let mut paired: Vec<f64> = loops
        .iter()
        .zip(runs)
        .map(|(l, r)| r.as_secs_f64() / l.as_secs_f64())
        .collect();
    paired.sort_by(f64::total_cmp);
    paired
}

//! `sluice demo`: the whole product in one command, on the embedded SQLite
//! default. It fills `demo_events` with a million rows (80 % older than 90
//! days), enqueues `delete-aged-rows --older-than 90d`, runs it with the
//! health monitor live — a demonstration indicator raises a short stop
//! midway, so the pause and the automatic resume are visible — then checks
//! that exactly the aged rows are gone and prints a summary. Running it
//! again starts from a fresh table.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use sluice_operations::{DeleteAgedRows, EnqueueOptions};
use sluice_runtime::{RuntimeBuilder, Signal, indicator_fn};
use sluice_store::{Event, Health, OperationStatus, Store};
use sluice_target::{Backend, SqlValue, Statement};

use crate::failure::Failure;
use crate::progress::ProgressDisplay;

/// Options of `sluice demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Rows in the demo table.
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(i64).range(10_000..=50_000_000))]
    rows: i64,
    /// How long the demonstration stop lasts.
    #[arg(long, default_value = "2s", value_parser = crate::parse_pause)]
    stop_for: Duration,
}

const AGE_DAYS: u64 = 90;
const STOP_AT_FRACTION: f64 = 0.4;

/// Runs the demo on `store` (an SQLite database).
pub async fn run(store: &Store, args: DemoArgs) -> Result<(), Failure> {
    if !matches!(store.backend(), Backend::Sqlite(_)) {
        return Err(Failure::BadInput(
            "the demo runs on SQLite: use --database-url sqlite:PATH (the default)".into(),
        ));
    }
    println!(
        "creating demo_events with {} rows (80% older than {AGE_DAYS} days)…",
        args.rows
    );
    let started = Instant::now();
    create_table(store, args.rows).await?;
    println!("  done in {:.1} s", started.elapsed().as_secs_f64());

    let arguments = DeleteAgedRows::arguments(
        store,
        "demo_events",
        "created_at",
        "id",
        Duration::from_secs(AGE_DAYS * 86_400),
        chrono::Utc::now(),
    )
    .await?;
    let options = EnqueueOptions {
        batch_size: 5_000,
        sub_batch_size: 1_000,
        ..EnqueueOptions::default()
    };
    // Rows deleted so far, and the count at which the demonstration stop
    // fires (unset until the operation's size is known).
    let done = Arc::new(AtomicI64::new(0));
    let stop_at = Arc::new(AtomicI64::new(i64::MAX));
    let runtime = RuntimeBuilder::with_store(store.clone())
        .pool_size(2)
        .indicator(demo_indicator(done.clone(), stop_at.clone(), args.stop_for))
        .start()
        .await
        .map_err(Failure::from)?;
    let enqueued = runtime
        .enqueue(&DeleteAgedRows, &arguments, &options)
        .await
        .map_err(Failure::from)?;
    let id = enqueued.id;
    let aged = runtime
        .store()
        .operation(id)
        .await?
        .state
        .estimated_rows
        .unwrap_or(0);
    // The demonstration indicator stops the operation once 40 % is done.
    stop_at.store((aged as f64 * STOP_AT_FRACTION) as i64, Ordering::SeqCst);
    println!(
        "enqueued operation {id}: delete-aged-rows on demo_events.created_at, {aged} rows in scope"
    );
    let mut reports = runtime.subscribe();
    let follower = {
        let done = done.clone();
        tokio::spawn(async move {
            while let Ok(p) = reports.recv().await {
                if p.operation_id == id {
                    done.store(p.rows_done, Ordering::SeqCst);
                }
            }
        })
    };
    let display = ProgressDisplay::start(runtime.subscribe());
    let run_started = Instant::now();
    let waited = runtime.wait(id, Duration::from_secs(600)).await;
    let took = run_started.elapsed();
    display.stop().await;
    follower.abort();
    runtime.shutdown().await.map_err(Failure::from)?;
    let record = waited.map_err(Failure::from)?;
    if record.state.status != OperationStatus::Finished {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "operation {id} ended {}: {}",
            record.state.status.as_str(),
            record.state.last_error.unwrap_or_default()
        )));
    }
    summarise(store, id, args.rows, aged, took, &arguments.cutoff).await
}

async fn create_table(store: &Store, rows: i64) -> Result<(), Failure> {
    store
        .target()
        .execute(&Statement::new("DROP TABLE IF EXISTS demo_events"))
        .await?;
    store
        .target()
        .execute(&Statement::new(
            "CREATE TABLE demo_events (id INTEGER PRIMARY KEY, account_id INTEGER NOT NULL, \
             kind TEXT NOT NULL, created_at TEXT NOT NULL, payload TEXT NOT NULL)",
        ))
        .await?;
    // Four in five rows are 91–730 days old, the rest 0–89 days; spread
    // pseudo-randomly over ids, as real insert times are.
    let now = chrono::Utc::now().timestamp();
    let fill = Statement::new(
        "WITH RECURSIVE n(v) AS (SELECT 1 UNION ALL SELECT v + 1 FROM n WHERE v < ",
    )
    .value(SqlValue::Int(rows))
    .push(
        ") INSERT INTO demo_events (id, account_id, kind, created_at, payload) \
         SELECT v, v % 9973, CASE v % 3 WHEN 0 THEN 'login' WHEN 1 THEN 'view' ELSE 'purchase' END, \
         strftime('%Y-%m-%dT%H:%M:%SZ', ",
    )
    .value(SqlValue::Int(now))
    .push(
        " - CASE WHEN v % 5 = 0 THEN (v * 7919) % (89 * 86400) \
         ELSE 91 * 86400 + (v * 7919) % (639 * 86400) END, 'unixepoch'), \
         'event payload ' || v FROM n",
    );
    store.target().execute(&fill).await?;
    store
        .target()
        .execute(&Statement::new(
            "CREATE INDEX demo_events_created_at_idx ON demo_events (created_at)",
        ))
        .await?;
    Ok(())
}

/// A stand-in for a real signal such as replica lag: once the operation is
/// 40 % done it says "stop" for `stop_for`, then "normal" again.
fn demo_indicator(
    done: Arc<AtomicI64>,
    stop_at: Arc<AtomicI64>,
    stop_for: Duration,
) -> Arc<dyn sluice_runtime::HealthIndicator> {
    // When the stop began (once set, it never fires again).
    let window: Mutex<Option<Instant>> = Mutex::new(None);
    indicator_fn("demo: simulated replica lag", move || {
        let past = done.load(Ordering::SeqCst) >= stop_at.load(Ordering::SeqCst);
        let mut window = window.lock().expect("demo indicator lock");
        let stopped = match *window {
            None if past => {
                *window = Some(Instant::now());
                true
            }
            Some(since) => since.elapsed() < stop_for,
            None => false,
        };
        async move {
            if stopped {
                Signal::Stop {
                    reason: "demo: simulated replica lag of 45 s".into(),
                }
            } else {
                Signal::Normal
            }
        }
    })
}

async fn summarise(
    store: &Store,
    id: i64,
    rows: i64,
    aged: i64,
    took: Duration,
    cutoff: &sluice_operations::builtin::Cutoff,
) -> Result<(), Failure> {
    let record = store.operation(id).await?;
    let events = store.events(id, 0).await?;
    let batches = store.batches(id).await?;
    let sluice_operations::builtin::Cutoff::Timestamp(cutoff) = cutoff else {
        return Err(Failure::Runtime(anyhow::anyhow!("unexpected cutoff form")));
    };
    let count = |statement: Statement| async move {
        Ok::<i64, Failure>(store.target().fetch_int(&statement).await?.unwrap_or(0))
    };
    let aged_left = count(
        Statement::new("SELECT COUNT(*) FROM demo_events WHERE julianday(created_at) < julianday(")
            .value(SqlValue::Text(
                cutoff.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
            ))
            .push(")"),
    )
    .await?;
    let kept = count(Statement::new("SELECT COUNT(*) FROM demo_events")).await?;
    let deleted = record.state.rows_done;
    let stopped_ms = stop_duration(&events);
    let first_size = batches.first().map_or(0, |b| b.batch_size);
    let rate = deleted as f64 / took.as_secs_f64().max(0.001);
    println!();
    println!("summary (operation {id}):");
    println!("  rows deleted      {deleted}");
    println!("  rows kept         {kept} (younger than {AGE_DAYS} days)");
    println!(
        "  batches           {} (batch size adapted {first_size} → {})",
        batches.len(),
        record.state.batch_size
    );
    match stopped_ms {
        Some(ms) => println!(
            "  health stop       {:.1} s midway (no sub-batch started), resumed by itself",
            ms as f64 / 1_000.0
        ),
        None => println!("  health stop       none recorded"),
    }
    println!(
        "  time              {:.1} s ({rate:.0} rows/s)",
        took.as_secs_f64()
    );
    println!("  events recorded   {}", events.len());
    store.verify(id).await?;
    if aged_left != 0 || deleted != aged || kept != rows - aged {
        return Err(Failure::Runtime(anyhow::anyhow!(
            "verification failed: {aged_left} aged rows left, {deleted} deleted of {aged}, {kept} kept of {}",
            rows - aged
        )));
    }
    println!(
        "  check             OK: every aged row is gone, every young row is kept, the event log replays to the stored state"
    );
    Ok(())
}

/// Milliseconds between the recorded stop and the recorded release.
fn stop_duration(events: &[sluice_store::RecordedEvent]) -> Option<i64> {
    let stop = events.iter().find(|e| {
        matches!(
            e.event,
            Event::Throttled {
                health: Health::Stopped,
                ..
            }
        )
    })?;
    // Released by the first signal that is not a stop: normal, or a
    // throttle (the latency budget may slow the work as it resumes).
    let release = events.iter().find(|e| {
        e.seq > stop.seq
            && matches!(
                &e.event,
                Event::Throttled { health, .. } if *health != Health::Stopped
            )
    })?;
    Some(release.recorded_at - stop.recorded_at)
}

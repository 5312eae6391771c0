//! The runtime end to end on real databases: built-in and custom operations
//! run through the actor tree, health stops, retries, failures and operator
//! controls, each checked from the data and the event log.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use sluice_operations::SubBatchRequest;
use sluice_operations::{
    DeleteAgedRows, EnqueueOptions, Filter, Operation, OperationError, Shape, SubBatch,
};
use sluice_runtime::operation::OperationMessage;
use sluice_runtime::pool::{PoolArgs, SubBatchJob, SubBatchPool, SubBatchQueue, SubBatchReport};
use sluice_runtime::{
    HealthIndicator, Runtime, RuntimeBuilder, RuntimeConfig, Selection, Signal, indicator_fn,
};
use sluice_store::{Enqueued, Event, Health, OperationStatus, Store};

use common::{TestDb, released, until};

for_each_backend!(
    aged_rows_are_deleted_and_young_rows_kept,
    each_batch_boundary_is_one_commit,
    update_in_batches_changes_each_matching_row_once_despite_gaps_and_inserts,
    an_embedding_service_reverts_an_update_it_ran_with_undo,
    keyset_batches_cover_duplicate_timestamps_exactly_once,
    a_stop_signal_holds_every_new_sub_batch_until_it_clears,
    a_stop_signal_ends_a_workers_run_between_two_sub_batches,
    a_pool_worker_runs_one_sub_batch_per_job_and_takes_queued_jobs_in_turn,
    an_operation_started_on_an_unhealthy_database_runs_nothing_until_it_recovers,
    an_indicator_that_cannot_be_read_throttles_then_stops_and_never_reads_normal,
    a_sub_batch_failing_twice_is_retried_smaller_and_finishes,
    a_sub_batch_that_always_fails_fails_the_operation,
    a_batch_that_keeps_timing_out_is_split_in_halves,
    an_operation_actor_that_fails_to_start_is_restarted_within_its_budget,
    an_actor_failing_past_its_budget_fails_only_its_own_operation,
    a_panicking_pool_worker_is_replaced_and_its_sub_batch_retried,
    a_restarted_node_finishes_the_batch_it_held_without_waiting_out_its_lease,
    an_operator_pause_from_outside_stops_the_worker_and_resume_finishes,
    bulk_enqueue_refuses_a_bad_item_whole_then_runs_every_operation,
);

postgres_and_mysql!(
    a_pool_of_one_hands_queued_sub_batches_on_as_its_worker_frees,
    a_shared_operation_whose_batches_always_fail_is_failed_once,
    a_batch_outcome_that_fails_to_record_is_recorded_again,
    a_failed_attempt_that_fails_to_record_is_recorded_again,
    an_operation_failure_that_fails_to_record_is_recorded_again,
);

postgres_only!(
    an_announced_pause_reaches_a_worker_whose_control_poll_is_an_hour_away,
    keyset_walks_timestamp_columns_and_int4_ids,
    shutdown_leaves_no_pooled_connection_inside_a_transaction,
);

/// Settings that make tests quick: short intervals, small leases.
fn quick() -> RuntimeConfig {
    RuntimeConfig {
        node: "test-node".into(),
        lease_ttl: Duration::from_secs(3),
        reconcile_interval: Duration::from_millis(50),
        control_interval: Duration::from_millis(50),
        health_interval: Duration::from_millis(20),
        health_clear_after: 2,
        retry_base: Duration::from_millis(10),
        retry_cap: Duration::from_millis(50),
        min_batch_size: 10,
        ..RuntimeConfig::default()
    }
}

/// Quick settings with the batch size fixed at `size` (no adaptation).
fn fixed_batches(size: i64) -> RuntimeConfig {
    RuntimeConfig {
        min_batch_size: size,
        max_batch_size: size,
        ..quick()
    }
}

fn builder(db: &TestDb) -> RuntimeBuilder {
    RuntimeBuilder::with_store(db.store.clone())
        .config(quick())
        .without_builtin_indicators()
}

const WAIT: Duration = Duration::from_secs(60);

/// Waits, with a deadline, until `check` holds.
/// `events(id, created_at, payload)`: `aged` rows at 2020 and `young` rows at 2099
/// (ISO text on SQLite, timestamptz on PostgreSQL, DATETIME on MySQL), ids
/// 1.., indexed on created_at.
async fn create_events(db: &TestDb, aged: i64, young: i64) {
    let backend = db.backend;
    db.execute(match backend {
        "postgres" => {
            "CREATE TABLE events (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL, payload TEXT)"
        }
        "mysql" => {
            "CREATE TABLE events (id BIGINT PRIMARY KEY, created_at DATETIME(6) NOT NULL, payload TEXT)"
        }
        _ => "CREATE TABLE events (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL, payload TEXT)",
    })
    .await;
    db.execute("CREATE INDEX events_created_at_idx ON events (created_at)")
        .await;
    let insert = |from: i64, to: i64, at: &str| match backend {
        "postgres" => format!(
            "INSERT INTO events SELECT g, TIMESTAMPTZ '{at}', 'x' FROM generate_series({from}, {to}) g"
        ),
        // MariaDB's form: the INSERT first, past its default of 1,000
        // recursions; its DATETIME literal without `T` and `Z`.
        "mysql" => format!(
            "SET STATEMENT max_recursive_iterations = 100000000 FOR INSERT INTO events WITH RECURSIVE g(v) AS (SELECT {from} UNION ALL SELECT v + 1 FROM g \
             WHERE v < {to}) SELECT v, TIMESTAMP '{}', 'x' FROM g",
            at[..19].replace('T', " ")
        ),
        _ => format!(
            "WITH RECURSIVE g(v) AS (SELECT {from} UNION ALL SELECT v + 1 FROM g WHERE v < {to}) \
             INSERT INTO events SELECT v, '{at}', 'x' FROM g"
        ),
    };
    if aged > 0 {
        db.execute(&insert(1, aged, "2020-01-01T00:00:00Z")).await;
    }
    if young > 0 {
        db.execute(&insert(aged + 1, aged + young, "2099-01-01T00:00:00Z"))
            .await;
    }
}

/// Enqueues `delete-aged-rows` on `events.created_at` (older than a day).
async fn enqueue_aged(runtime: &Runtime, db: &TestDb, options: &EnqueueOptions) -> Enqueued {
    let args = common::older_than_a_day(&db.store, "events").await;
    runtime
        .enqueue(&DeleteAgedRows, &args, options)
        .await
        .unwrap()
}

async fn status(store: &Store, id: i64) -> OperationStatus {
    store.operation(id).await.unwrap().state.status
}

async fn finish(runtime: &Runtime, id: i64) -> sluice_store::OperationRecord {
    let record = runtime.wait(id, WAIT).await.unwrap();
    runtime.store().verify(id).await.unwrap();
    record
}

/// Seed 000's two canonical cases: older rows go, newer stay; a batch that
/// hits its limit is followed by another until fewer than the limit match.
async fn aged_rows_are_deleted_and_young_rows_kept(db: &TestDb) {
    create_events(db, 2_345, 400).await;
    let runtime = builder(db)
        .config(fixed_batches(500))
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 500,
        sub_batch_size: 100,
        ..EnqueueOptions::default()
    };
    let enqueued = enqueue_aged(&runtime, db, &options).await;
    assert!(enqueued.created);
    // Young rows inserted while it runs are out of scope: all kept.
    let young_at = match db.backend {
        "postgres" => "TIMESTAMPTZ '2099-06-01T00:00:00Z'",
        "mysql" => "TIMESTAMP '2099-06-01 00:00:00'",
        _ => "'2099-06-01T00:00:00Z'",
    };
    for id in 10_001..10_031 {
        db.execute(&format!(
            "INSERT INTO events (id, created_at, payload) VALUES ({id}, {young_at}, 'late')"
        ))
        .await;
    }
    let record = finish(&runtime, enqueued.id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 2_345);
    assert_eq!(record.state.estimated_rows, Some(2_345));
    // Four full batches of 500, then one that found fewer than the limit.
    assert_eq!(record.state.batches_succeeded, 5, "{:?}", record.state);
    let rows: Vec<i64> = db
        .store
        .batches(enqueued.id)
        .await
        .unwrap()
        .iter()
        .map(|b| b.rows_affected)
        .collect();
    assert_eq!(rows, [500, 500, 500, 500, 345]);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 430);
    assert_eq!(db.scalar("SELECT MIN(id) FROM events").await, 2_346);
    runtime.shutdown().await.unwrap();
}

/// Between two batches there is one commit: a batch's outcome and the next
/// batch's plan, in that order, on every backend (no batch is planned
/// before the one before it succeeded). Every batch runs once, and the
/// batch planned from the last cursor when the scope ran out is recorded
/// empty.
async fn each_batch_boundary_is_one_commit(db: &TestDb) {
    create_events(db, 3_000, 0).await;
    let runtime = builder(db)
        .config(fixed_batches(300))
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 300,
        sub_batch_size: 100,
        ..EnqueueOptions::default()
    };
    let id = enqueue_aged(&runtime, db, &options).await.id;
    let record = finish(&runtime, id).await;
    runtime.shutdown().await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 3_000);
    let batches = db.store.batches(id).await.unwrap();
    let mut expected = vec![300; 10];
    expected.push(0);
    assert_eq!(
        batches.iter().map(|b| b.rows_affected).collect::<Vec<_>>(),
        expected
    );
    assert!(batches.iter().all(|b| b.attempts == 1), "{batches:?}");
    let events = db.store.events(id, 0).await.unwrap();
    let position = |wanted: fn(&Event) -> Option<i64>, ordinal: i64| {
        events
            .iter()
            .position(|e| wanted(&e.event) == Some(ordinal))
            .unwrap_or_else(|| panic!("no event for batch {ordinal}"))
    };
    let planned = |e: &Event| match e {
        Event::BatchPlanned { ordinal, .. } => Some(*ordinal),
        _ => None,
    };
    let succeeded = |e: &Event| match e {
        Event::BatchSucceeded { ordinal, .. } => Some(*ordinal),
        _ => None,
    };
    for ordinal in 2..=11 {
        assert!(
            position(succeeded, ordinal - 1) < position(planned, ordinal),
            "batch {ordinal} planned before batch {} succeeded",
            ordinal - 1
        );
    }
}

async fn an_embedding_service_reverts_an_update_it_ran_with_undo(db: &TestDb) {
    common::create_counted_items(db, 500).await;
    let runtime = builder(db).start().await.unwrap();
    let options = EnqueueOptions {
        batch_size: 100,
        sub_batch_size: 30,
        ..EnqueueOptions::default()
    };
    let args = serde_json::json!({"table": "items", "key": "id",
        "set": "counter = counter + 5", "where": "grp = 1", "undo": true});
    let update = runtime
        .enqueue_json("update-in-batches", &args, &options)
        .await
        .unwrap();
    assert_eq!(
        finish(&runtime, update.id).await.state.status,
        OperationStatus::Finished
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter = 5")
            .await,
        250
    );
    let revert = runtime.revert(update.id, false, &options).await.unwrap();
    let record = finish(&runtime, revert.id).await;
    assert_eq!(
        (record.state.status, record.state.rows_done),
        (OperationStatus::Finished, 250)
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 0")
            .await,
        0
    );
    let again = runtime.revert(revert.id, false, &options).await;
    assert!(
        matches!(
            again,
            Err(sluice_runtime::RuntimeError::Operation(
                OperationError::NotRevertible(_)
            ))
        ),
        "{again:?}"
    );
    runtime.shutdown().await.unwrap();
}

async fn update_in_batches_changes_each_matching_row_once_despite_gaps_and_inserts(db: &TestDb) {
    db.execute("CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, counter INTEGER NOT NULL DEFAULT 0)")
        .await;
    // Keys with gaps: multiples of 3 and 7 only.
    db.insert_series(
        "items (id, grp)",
        "g, g % 2",
        6000,
        "g % 3 = 0 OR g % 7 = 0",
    )
    .await;
    let runtime = builder(db).start().await.unwrap();
    let options = EnqueueOptions {
        batch_size: 300,
        sub_batch_size: 70,
        ..EnqueueOptions::default()
    };
    let args = serde_json::json!({"table": "items", "key": "id", "set": "counter = counter + 1", "where": "grp = 1"});
    let enqueued = runtime
        .enqueue_json("update-in-batches", &args, &options)
        .await
        .unwrap();
    // Rows inserted while it runs: beyond the last key (processed when they
    // come before the final batch is planned, out of scope otherwise) and
    // into the gaps (behind or ahead of the cursor).
    for n in 0..40_i64 {
        let id = 6_001 + n * 5;
        let gap = 1 + n * 149; // not a multiple of 3 or 7 for most n
        db.execute(&format!("INSERT INTO items (id, grp) VALUES ({id}, 1)"))
            .await;
        let _ = db
            .try_execute(&format!("INSERT INTO items (id, grp) VALUES ({gap}, 1)"))
            .await;
    }
    let record = finish(&runtime, enqueued.id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    let cursor = record
        .state
        .cursor
        .clone()
        .expect("a range operation has a cursor");
    let last = match cursor.0[0] {
        sluice_target::CursorValue::Int(v) => v,
        _ => unreachable!(),
    };
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter > 1")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 0 AND counter <> 0")
            .await,
        0
    );
    // A matching row left unchanged is provably out of scope: it was
    // inserted behind the cursor of a batch that had already run, or beyond
    // the final cursor. Every original row was changed. (Beyond the final
    // cursor only matching rows are counted: when the operation finishes
    // before the first insert past the table's end, that cursor is 5999
    // and row 6000, of the other group, lies beyond it.)
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1 AND counter = 0 AND id <= 6000 AND (id % 3 = 0 OR id % 7 = 0)")
            .await,
        0
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM items WHERE grp = 1 AND counter = 0 AND id > {last}"
        ))
        .await,
        db.scalar(&format!(
            "SELECT COUNT(*) FROM items WHERE grp = 1 AND id > {last}"
        ))
        .await
    );
    assert_eq!(
        record.state.rows_done,
        db.scalar("SELECT SUM(counter) FROM items").await
    );
    runtime.shutdown().await.unwrap();
}

/// A custom keyset operation over (day, id) where many rows share a day.
struct MarkByDay;

#[derive(Serialize, Deserialize)]
struct MarkArgs {
    before: String,
}

#[async_trait]
impl Operation for MarkByDay {
    type Arguments = MarkArgs;

    fn kind(&self) -> &'static str {
        "mark-by-day"
    }

    fn shape(&self, args: &MarkArgs) -> Result<Shape, OperationError> {
        Shape::keyset("visits", &["day", "id"])?
            .scope(Filter::new().lt("day", args.before.as_str()))
    }

    async fn run(&self, _: &MarkArgs, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        batch.update(&[("seen", 1_i64.into())]).await
    }
}

/// A keyset operation over (a timestamp column, id), the column chosen by argument.
struct MarkReadings;

#[derive(Serialize, Deserialize)]
struct ReadingArgs {
    column: String,
    before: chrono::DateTime<chrono::Utc>,
}

#[async_trait]
impl Operation for MarkReadings {
    type Arguments = ReadingArgs;

    fn kind(&self) -> &'static str {
        "mark-readings"
    }

    fn shape(&self, args: &ReadingArgs) -> Result<Shape, OperationError> {
        Shape::keyset("readings", &[args.column.as_str(), "id"])?
            .scope(Filter::new().lt(&args.column, args.before))
    }

    async fn run(&self, _: &ReadingArgs, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        batch.update_expression("seen = seen + 1").await
    }
}

/// PostgreSQL `timestamptz` and `timestamp` batching columns with many rows
/// per instant and `serial` (int4) ids; a column no cursor can hold is
/// refused at enqueue.
async fn keyset_walks_timestamp_columns_and_int4_ids(db: &TestDb) {
    db.execute(
        "CREATE TABLE readings (id SERIAL PRIMARY KEY, taken_at TIMESTAMPTZ NOT NULL, \
         local_at TIMESTAMP NOT NULL, tag UUID NOT NULL DEFAULT gen_random_uuid(), seen INTEGER NOT NULL DEFAULT 0)",
    )
    .await;
    db.execute("CREATE INDEX readings_taken_idx ON readings (taken_at, id)")
        .await;
    db.execute("CREATE INDEX readings_local_idx ON readings (local_at, id)")
        .await;
    db.execute("CREATE INDEX readings_tag_idx ON readings (tag, id)")
        .await;
    // 600 rows over 40 instants (15 per instant, microsecond offsets on some),
    // ids interleaved across instants.
    db.execute(
        "INSERT INTO readings (taken_at, local_at) SELECT \
         TIMESTAMPTZ '2026-01-01 00:00:00+00' + ((g * 7) % 40) * INTERVAL '1 hour' + (g % 2) * INTERVAL '1 microsecond', \
         TIMESTAMP '2026-01-01 00:00:00' + ((g * 11) % 40) * INTERVAL '1 minute' \
         FROM generate_series(1, 600) g",
    )
    .await;
    let runtime = builder(db)
        .config(fixed_batches(25))
        .register(MarkReadings)
        .start()
        .await
        .unwrap();
    let record = mark_readings(&runtime, db, "taken_at", "2026-01-02T06:00:00Z").await; // instants 0..29 of 40
    assert!(matches!(
        record.state.cursor.as_ref().unwrap().0[0],
        sluice_target::CursorValue::Timestamp(_)
    ));
    let in_scope = "taken_at < '2026-01-02 06:00:00+00'";
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM readings WHERE {in_scope} AND seen <> 1"
        ))
        .await,
        0
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM readings WHERE NOT ({in_scope}) AND seen <> 0"
        ))
        .await,
        0
    );
    assert_eq!(record.state.rows_done, 450);

    // `timestamp` without time zone, read and bound as UTC.
    let record = mark_readings(&runtime, db, "local_at", "2026-01-01T00:20:00Z").await; // minutes 0..19 of 40
    assert_eq!(record.state.rows_done, 300);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM readings WHERE local_at < '2026-01-01 00:20:00' AND seen NOT IN (1, 2)")
            .await,
        0
    );
    assert_eq!(db.scalar("SELECT SUM(seen) FROM readings").await, 750);

    // A uuid cannot order batches: refused before anything is written.
    let before_count = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
    let refused = runtime
        .enqueue(
            &MarkReadings,
            &reading_args("tag", "2026-01-02T06:00:00Z"),
            &EnqueueOptions::default(),
        )
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("`tag`") && message.contains("UUID"),
        "{message}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        before_count
    );
    runtime.shutdown().await.unwrap();
}

fn reading_args(column: &str, before: &str) -> ReadingArgs {
    ReadingArgs {
        column: column.into(),
        before: chrono::DateTime::parse_from_rfc3339(before)
            .unwrap()
            .with_timezone(&chrono::Utc),
    }
}

/// Runs [`MarkReadings`] on `column` in batches of 25 to the end; checks it
/// finished and that its log replays.
async fn mark_readings(
    runtime: &Runtime,
    db: &TestDb,
    column: &str,
    before: &str,
) -> sluice_store::OperationRecord {
    let options = EnqueueOptions {
        batch_size: 25,
        sub_batch_size: 7,
        ..EnqueueOptions::default()
    };
    let args = reading_args(column, before);
    let enqueued = runtime
        .enqueue(&MarkReadings, &args, &options)
        .await
        .unwrap();
    let record = finish(runtime, enqueued.id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    db.store.verify(enqueued.id).await.unwrap();
    record
}

async fn keyset_batches_cover_duplicate_timestamps_exactly_once(db: &TestDb) {
    db.execute("CREATE TABLE visits (id BIGINT PRIMARY KEY, day VARCHAR(10) NOT NULL, seen INTEGER NOT NULL DEFAULT 0)")
        .await;
    db.execute("CREATE INDEX visits_day_id_idx ON visits (day, id)")
        .await;
    // 30 days × 37 visits, ids interleaved across days (so id order ≠ day order).
    let day = match db.backend {
        "postgres" => "'2026-01-' || lpad(((g * 7) % 30 + 1)::text, 2, '0')",
        "mysql" => "CONCAT('2026-01-', LPAD((g * 7) % 30 + 1, 2, '0'))",
        _ => "printf('2026-01-%02d', (g * 7) % 30 + 1)",
    };
    db.insert_series("visits (id, day)", &format!("g, {day}"), 1110, "")
        .await;
    let runtime = builder(db)
        .config(fixed_batches(50))
        .register(MarkByDay)
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 50, // smaller than one day's rows: batch ends fall inside a day
        sub_batch_size: 13,
        pause: Duration::from_millis(2),
        ..EnqueueOptions::default()
    };
    let args = MarkArgs {
        before: "2026-01-21".into(),
    };
    let enqueued = runtime.enqueue(&MarkByDay, &args, &options).await.unwrap();
    // Visits recorded while it runs, on days already walked and days ahead.
    for n in 0..30_i64 {
        let day = format!("2026-01-{:02}", n % 30 + 1);
        db.execute(&format!(
            "INSERT INTO visits (id, day) VALUES ({}, '{day}')",
            5_000 + n
        ))
        .await;
    }
    let record = finish(&runtime, enqueued.id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    let cursor = record.state.cursor.clone().unwrap();
    let (last_day, last_id) = match (&cursor.0[0], &cursor.0[1]) {
        (sluice_target::CursorValue::Text(d), sluice_target::CursorValue::Int(i)) => {
            (d.clone(), *i)
        }
        other => panic!("unexpected cursor {other:?}"),
    };
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM visits WHERE seen > 1")
            .await,
        0
    );
    // Every original visit in scope was marked once.
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM visits WHERE id <= 1110 AND day < '2026-01-21' AND seen <> 1"
        )
        .await,
        0
    );
    // A late visit in scope left unmarked came behind the cursor (its range
    // had run): out of scope, never half-processed. None is left ahead of
    // the final cursor: the walk only ends when nothing in scope is beyond it.
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM visits WHERE day < '2026-01-21' AND seen = 0 \
             AND (day, id) > ('{last_day}', {last_id})"
        ))
        .await,
        0
    );
    let marked = db
        .scalar("SELECT COUNT(*) FROM visits WHERE seen = 1")
        .await;
    assert_eq!(record.state.rows_done, marked);
    assert!(marked >= 740);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM visits WHERE day >= '2026-01-21' AND seen <> 0")
            .await,
        0
    );
    // Consecutive batches are contiguous (start = previous end) and increasing.
    let batches = db.store.batches(enqueued.id).await.unwrap();
    assert!(batches.len() >= 14);
    for pair in batches.windows(2) {
        assert_eq!(pair[1].start, pair[0].end);
        assert!(pair[1].end > pair[0].end);
    }
    runtime.shutdown().await.unwrap();
}

/// A health indicator the test switches: it says stop while the switch is
/// on; the counter counts its polls.
fn stop_switch() -> (
    Arc<AtomicBool>,
    Arc<AtomicU32>,
    Arc<dyn sluice_runtime::HealthIndicator>,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicU32::new(0));
    let indicator = {
        let (stop, polls) = (stop.clone(), polls.clone());
        indicator_fn("test switch", move || {
            let stopped = stop.load(Ordering::SeqCst);
            polls.fetch_add(1, Ordering::SeqCst);
            async move {
                if stopped {
                    Signal::Stop {
                        reason: "test says stop".into(),
                    }
                } else {
                    Signal::Normal
                }
            }
        })
    };
    (stop, polls, indicator)
}

/// Waits until the operation's log records the health stop.
async fn until_stop_recorded(db: &TestDb, id: i64) {
    until("the stop is recorded", || async {
        db.store.operation(id).await.unwrap().state.health == Health::Stopped
    })
    .await;
}

/// A runtime watching `indicator` (a better reading takes effect after one
/// poll) deleting the aged rows of `events` in batches of 200,
/// sub-batches of 20 and 5 ms pauses; with the operation's id.
async fn deleting_under(db: &TestDb, indicator: Arc<dyn HealthIndicator>) -> (Runtime, i64) {
    let runtime = builder(db)
        .config(RuntimeConfig {
            health_clear_after: 1,
            ..quick()
        })
        .indicator(indicator)
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 200,
        sub_batch_size: 20,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    let id = enqueue_aged(&runtime, db, &options).await.id;
    (runtime, id)
}

/// Waits until the indicator has been polled `more` times from now.
async fn until_polled(polls: &AtomicU32, more: u32) {
    let later = polls.load(Ordering::SeqCst) + more;
    until("more polls", || async {
        polls.load(Ordering::SeqCst) >= later
    })
    .await;
}

async fn a_stop_signal_holds_every_new_sub_batch_until_it_clears(db: &TestDb) {
    create_events(db, 3_000, 10).await;
    let (stop, polls, indicator) = stop_switch();
    // A better reading takes effect after one poll: the stop must still hold
    // on every poll that reads it (a scope settled twice per poll once
    // cleared it at once).
    let (runtime, id) = deleting_under(db, indicator).await;
    until("some rows deleted", || async {
        db.scalar("SELECT COUNT(*) FROM events").await < 2_900
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    until_stop_recorded(db, id).await;
    // Let the sub-batch in flight finish (a few polls), then watch several more.
    until_polled(&polls, 3).await;
    let held = db.scalar("SELECT COUNT(*) FROM events").await;
    until_polled(&polls, 10).await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM events").await,
        held,
        "a sub-batch ran while stopped"
    );
    assert!(held > 10, "it finished before the stop could be observed");
    stop.store(false, Ordering::SeqCst);
    let record = finish(&runtime, id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 10);
    // From the log: between the stop and the release, no batch was planned.
    let events = db.store.events(id, 0).await.unwrap();
    let stopped_at = events
        .iter()
        .position(|e| {
            matches!(
                e.event,
                Event::Throttled {
                    health: Health::Stopped,
                    ..
                }
            )
        })
        .unwrap();
    let released_at = events[stopped_at..]
        .iter()
        .position(|e| {
            matches!(
                e.event,
                Event::Throttled {
                    health: Health::Normal,
                    ..
                }
            )
        })
        .unwrap()
        + stopped_at;
    assert!(
        !events[stopped_at..released_at]
            .iter()
            .any(|e| matches!(e.event, Event::BatchPlanned { .. })),
        "a batch was planned while stopped"
    );
    runtime.shutdown().await.unwrap();
}

/// A stop that arrives while a sub-batch runs (with no pause between
/// sub-batches) lets that one finish and starts no other. Each sub-batch
/// here waits for a permit the test hands out, so the stop arrives while
/// the second one is running.
async fn a_stop_signal_ends_a_workers_run_between_two_sub_batches(db: &TestDb) {
    create_items(db, 100).await;
    let (stop, polls, indicator) = stop_switch();
    let permits = Arc::new(tokio::sync::Semaphore::new(1));
    let operation = Unreliable {
        permits: Some(Arc::clone(&permits)),
        ..Unreliable::new("one-permit-each")
    };
    let started = Arc::clone(&operation.run_calls);
    let runtime = builder(db)
        .config(RuntimeConfig {
            health_clear_after: 1,
            ..fixed_batches(100)
        })
        .indicator(indicator)
        .register(operation)
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 100,
        sub_batch_size: 10,
        ..EnqueueOptions::default()
    };
    let mut progress = runtime.subscribe();
    let id = runtime
        .enqueue_json("one-permit-each", &serde_json::json!({}), &options)
        .await
        .unwrap()
        .id;
    until("the second sub-batch waits for its permit", || async {
        started.load(Ordering::SeqCst) >= 2
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    // The actor reports the stop once it obeys it (its record of the stop
    // may wait: on SQLite, for the sub-batch holding the write lock).
    tokio::time::timeout(WAIT, async {
        loop {
            let report = progress.recv().await.expect("the runtime reports");
            let stopped = report
                .held_back
                .is_some_and(|why| why.starts_with("stopped"));
            if report.operation_id == id && stopped {
                break;
            }
        }
    })
    .await
    .expect("the actor reports the stop");
    permits.add_permits(1_000);
    until("the second sub-batch commits", || async {
        db.scalar("SELECT COUNT(*) FROM items WHERE seen = 1").await >= 20
    })
    .await;
    until_stop_recorded(db, id).await;
    until_polled(&polls, 10).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        2,
        "a sub-batch started while stopped"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE seen = 1").await,
        20
    );
    stop.store(false, Ordering::SeqCst);
    let record = finish(&runtime, id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 100);
    assert_each_item_changed_once(db).await;
    runtime.shutdown().await.unwrap();
}

/// Stands in for an operation actor: forwards the pool's reports.
struct ReportCollector;

impl ractor::Actor for ReportCollector {
    type Msg = OperationMessage;
    type State = tokio::sync::mpsc::UnboundedSender<SubBatchReport>;
    type Arguments = tokio::sync::mpsc::UnboundedSender<SubBatchReport>;

    async fn pre_start(
        &self,
        _: ractor::ActorRef<OperationMessage>,
        reports: Self::Arguments,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(reports)
    }

    async fn handle(
        &self,
        _: ractor::ActorRef<OperationMessage>,
        message: OperationMessage,
        reports: &mut Self::State,
    ) -> Result<(), ractor::ActorProcessingErr> {
        if let OperationMessage::SubBatchDone(report) = message {
            let _ = reports.send(report);
        }
        Ok(())
    }
}

/// The pool on its own, fed jobs as an operation actor feeds it: each job
/// is one sub-batch and gets one report; jobs queued for its one worker
/// are run in turn, first come first served.
async fn a_pool_worker_runs_one_sub_batch_per_job_and_takes_queued_jobs_in_turn(db: &TestDb) {
    create_events(db, 200, 0).await;
    let mut registry = sluice_operations::Registry::new();
    registry.register(DeleteAgedRows);
    let arguments = serde_json::to_value(common::older_than_a_day(&db.store, "events").await)
        .expect("arguments serialise");
    let options = EnqueueOptions {
        batch_size: 50,
        sub_batch_size: 10,
        ..EnqueueOptions::default()
    };
    sluice_operations::enqueue(
        &db.store,
        &registry,
        "delete-aged-rows",
        &arguments,
        &options,
    )
    .await
    .unwrap();
    let ttl = Duration::from_secs(600);
    let claimed = db
        .store
        .claim_operations("pool-test", 1, ttl)
        .await
        .unwrap();
    let lease = claimed[0].record.lease.clone().expect("claimed");
    let operation = registry
        .prepare(
            "delete-aged-rows",
            &arguments.to_string(),
            db.store.backend().dialect(),
        )
        .unwrap();
    let queue = SubBatchQueue::new(1);
    let (pool, _) = ractor::Actor::spawn(
        None,
        SubBatchPool,
        PoolArgs {
            store: db.store.clone(),
            queue: queue.clone(),
        },
    )
    .await
    .unwrap();
    let (sender, mut reports) = tokio::sync::mpsc::unbounded_channel();
    let (collector, _) = ractor::Actor::spawn(None, ReportCollector, sender)
        .await
        .unwrap();
    let job = |lease| SubBatchJob {
        request: SubBatchRequest {
            lease,
            from: None,
            end: None,
            size: 10,
            timeout: Duration::from_secs(30),
        },
        operation: Arc::clone(&operation),
        reply: collector.get_derived(),
        batch_span: tracing::Span::none(),
        apart: None,
    };
    let next_batch = || async {
        let next = sluice_store::NextBatch {
            end: None,
            size: 50,
            ttl,
        };
        let (batch, _) = db.store.plan_claimed_batch(&lease, &next).await.unwrap();
        batch.lease().expect("claimed")
    };
    let mut report = async || -> SubBatchReport {
        tokio::time::timeout(WAIT, reports.recv())
            .await
            .expect("a report in time")
            .expect("the collector lives")
    };
    let rows = |report: SubBatchReport| report.outcome.expect("the sub-batch ran").rows;

    // One job, one sub-batch, one report.
    assert!(queue.submit(job(next_batch().await)));
    assert_eq!(rows(report().await), 10);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 190);

    // Three jobs for the one worker: each runs once, in turn, and nothing
    // else runs (no report is left over).
    for _ in 0..3 {
        assert!(queue.submit(job(next_batch().await)));
    }
    for _ in 0..3 {
        assert_eq!(rows(report().await), 10);
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 160);
    assert!(reports.try_recv().is_err(), "a report nothing asked for");
    pool.stop_and_wait(None, None).await.unwrap();
    collector.stop(None);
}

/// The first health reading comes before the first batch: an operation
/// enqueued while a slow indicator already says stop plans nothing until
/// it clears.
async fn an_operation_started_on_an_unhealthy_database_runs_nothing_until_it_recovers(db: &TestDb) {
    create_events(db, 500, 10).await;
    let healthy = Arc::new(AtomicBool::new(false));
    let polls = Arc::new(AtomicU32::new(0));
    let indicator = {
        let (healthy, polls) = (healthy.clone(), polls.clone());
        indicator_fn("test switch", move || {
            let healthy = healthy.load(Ordering::SeqCst);
            polls.fetch_add(1, Ordering::SeqCst);
            async move {
                // A slow health query: the operation must wait for it, not
                // start while it is outstanding.
                tokio::time::sleep(Duration::from_millis(200)).await;
                if healthy {
                    Signal::Normal
                } else {
                    Signal::Stop {
                        reason: "unhealthy from the start".into(),
                    }
                }
            }
        })
    };
    let runtime = builder(db).indicator(indicator).start().await.unwrap();
    let id = enqueue_aged(&runtime, db, &EnqueueOptions::default())
        .await
        .id;
    until_stop_recorded(db, id).await;
    until_polled(&polls, 3).await;
    let events = db.store.events(id, 0).await.unwrap();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.event, Event::BatchPlanned { .. })),
        "a batch was planned before the first health reading: {events:?}"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 510);
    healthy.store(true, Ordering::SeqCst);
    let record = finish(&runtime, id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 10);
    runtime.shutdown().await.unwrap();
}

/// An indicator that fails while `broken` is set.
struct Unreadable {
    broken: Arc<AtomicBool>,
    polls: Arc<AtomicU32>,
}

#[async_trait]
impl HealthIndicator for Unreadable {
    fn name(&self) -> &str {
        "test probe"
    }

    async fn check(
        &self,
        _: &sluice_runtime::health::HealthContext,
    ) -> Result<Vec<sluice_runtime::health::Reading>, String> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        if self.broken.load(Ordering::SeqCst) {
            Err("permission denied for view pg_stat_activity".into())
        } else {
            Ok(Vec::new())
        }
    }
}

/// An indicator whose query fails never reads as normal: the operation's
/// health is recorded as unknown and throttled at once, stopped after
/// three failed polls in a row (nothing more deleted while it lasts), and
/// the work finishes once it reads again.
async fn an_indicator_that_cannot_be_read_throttles_then_stops_and_never_reads_normal(db: &TestDb) {
    create_events(db, 3_000, 10).await;
    let broken = Arc::new(AtomicBool::new(true));
    let polls = Arc::new(AtomicU32::new(0));
    let indicator = Arc::new(Unreadable {
        broken: broken.clone(),
        polls: polls.clone(),
    });
    let (runtime, id) = deleting_under(db, indicator).await;
    until_stop_recorded(db, id).await;
    let record = db.store.operation(id).await.unwrap();
    let reason = record.state.health_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("health unknown: test probe has not been read for"),
        "{reason}"
    );
    assert!(reason.contains("permission denied"), "{reason}");
    // Stopped: no sub-batch starts while the indicator cannot be read.
    until_polled(&polls, 3).await;
    let held = db.scalar("SELECT COUNT(*) FROM events").await;
    until_polled(&polls, 5).await;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, held);
    let events = db.store.events(id, 0).await.unwrap();
    let healths: Vec<(Health, Option<String>)> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::Throttled { health, reason } => Some((*health, reason.clone())),
            _ => None,
        })
        .collect();
    assert!(
        healths.iter().all(|(h, _)| *h != Health::Normal),
        "an unreadable indicator read as normal: {healths:?}"
    );
    broken.store(false, Ordering::SeqCst);
    let record = finish(&runtime, id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.health, Health::Normal);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 10);
    runtime.shutdown().await.unwrap();
}

/// Deletes its sub-batches' rows, failing the sub-batches whose call
/// number (from 0) is in `fails` (the deletes of those are rolled back).
struct Flaky {
    fails: std::ops::Range<u32>,
    calls: Arc<AtomicU32>,
}

#[async_trait]
impl Operation for Flaky {
    type Arguments = serde_json::Value;

    fn kind(&self) -> &'static str {
        "flaky"
    }

    fn shape(&self, _: &serde_json::Value) -> Result<Shape, OperationError> {
        Shape::range("events", "id")
    }

    async fn run(
        &self,
        _: &serde_json::Value,
        batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let deleted = batch.delete().await?;
        if self.fails.contains(&call) {
            return Err(OperationError::Failed(format!("boom {call}")));
        }
        Ok(deleted)
    }
}

/// Runs a [`Flaky`] failing the calls in `fails` over `events` to its end
/// (with `config` and `options`), shuts the runtime down and returns the
/// final record, its log checked to replay.
async fn run_flaky(
    db: &TestDb,
    fails: std::ops::Range<u32>,
    config: RuntimeConfig,
    options: &EnqueueOptions,
) -> sluice_store::OperationRecord {
    let flaky = Flaky {
        fails,
        calls: Arc::new(AtomicU32::new(0)),
    };
    let runtime = builder(db)
        .config(config)
        .register(flaky)
        .start()
        .await
        .unwrap();
    let id = runtime
        .enqueue_json("flaky", &serde_json::json!({}), options)
        .await
        .unwrap()
        .id;
    let record = finish(&runtime, id).await;
    runtime.shutdown().await.unwrap();
    record
}

/// Batches of 200 in sub-batches of 100.
fn batches_of_200() -> EnqueueOptions {
    EnqueueOptions {
        batch_size: 200,
        sub_batch_size: 100,
        ..EnqueueOptions::default()
    }
}

async fn a_sub_batch_failing_twice_is_retried_smaller_and_finishes(db: &TestDb) {
    create_events(db, 500, 0).await;
    let record = run_flaky(db, 0..2, quick(), &batches_of_200()).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 0);
    // The failed attempts' deletes were rolled back: every row counted once.
    assert_eq!(
        record.state.rows_done, 500,
        "the failed attempts' deletes were not counted"
    );
    let failures = failures_recorded(db, record.id).await;
    assert_eq!(failures, vec![Some(75), Some(56)]);
    assert_eq!(record.state.sub_batch_size, 56);
}

/// `items(id 1..=n, seen 0, slow 0)`.
async fn create_items(db: &TestDb, n: i64) {
    db.execute(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, seen INTEGER NOT NULL DEFAULT 0, slow INTEGER NOT NULL DEFAULT 0)",
    )
    .await;
    db.insert_series("items (id)", "g", n, "").await;
}

async fn assert_each_item_changed_once(db: &TestDb) {
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE seen <> 1")
            .await,
        0,
        "some item was not changed exactly once"
    );
}

/// Marks rows, but runs out of time whenever a sub-batch holds the one slow
/// row together with more than four others: only small enough ranges pass.
struct SlowAroundOneRow;

#[async_trait]
impl Operation for SlowAroundOneRow {
    type Arguments = serde_json::Value;

    fn kind(&self) -> &'static str {
        "slow-around-one-row"
    }

    fn shape(&self, _: &serde_json::Value) -> Result<Shape, OperationError> {
        Shape::range("items", "id")
    }

    async fn run(
        &self,
        _: &serde_json::Value,
        batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        let marked = batch.update_expression("seen = seen + 1").await?;
        let slow = batch.rows_where(sluice_target::Statement::new(
            "UPDATE items SET slow = slow WHERE slow = 1 AND id IN (SELECT id FROM items",
        ));
        let slow = batch.execute(&slow.push(")")).await?;
        if slow > 0 && marked > 5 {
            // Far past the sub-batch timeout: the runtime rolls it back.
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        Ok(marked)
    }
}

async fn a_batch_that_keeps_timing_out_is_split_in_halves(db: &TestDb) {
    create_items(db, 200).await;
    db.execute("UPDATE items SET slow = 1 WHERE id = 40").await;
    let config = RuntimeConfig {
        sub_batch_timeout: Duration::from_millis(150),
        max_attempts: 2,
        max_failure_ratio: 100.0,
        ..fixed_batches(64)
    };
    let runtime = builder(db)
        .config(config)
        .register(SlowAroundOneRow)
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 64,
        sub_batch_size: 32,
        ..EnqueueOptions::default()
    };
    let enqueued = runtime
        .enqueue(&SlowAroundOneRow, &serde_json::json!({}), &options)
        .await
        .unwrap();
    let record = finish(&runtime, enqueued.id).await;
    assert_eq!(
        record.state.status,
        OperationStatus::Finished,
        "{:?}",
        record.state.last_error
    );
    // Every row changed exactly once, the slow one included.
    assert_each_item_changed_once(db).await;
    assert_eq!(record.state.rows_done, 200);
    let events = db.store.events(enqueued.id, 0).await.unwrap();
    let splits = events
        .iter()
        .filter(|e| matches!(e.event, Event::BatchSplit { .. }))
        .count();
    assert!(splits >= 1, "no batch was split");
    db.store.verify(enqueued.id).await.unwrap();
    // The batches, halves included, tile the key range without overlap.
    let mut batches = db.store.batches(enqueued.id).await.unwrap();
    assert_eq!(batches.len() as i64, record.state.batches_planned);
    batches.sort_by(|a, b| a.end.cmp(&b.end));
    assert_eq!(batches[0].start, None);
    for pair in batches.windows(2) {
        assert_eq!(pair[1].start, pair[0].end);
    }
    runtime.shutdown().await.unwrap();
}

async fn a_sub_batch_that_always_fails_fails_the_operation(db: &TestDb) {
    create_events(db, 50, 0).await;
    let config = RuntimeConfig {
        max_attempts: 3,
        ..quick()
    };
    let record = run_flaky(db, 0..u32::MAX, config, &EnqueueOptions::default()).await;
    assert_eq!(record.state.status, OperationStatus::Failed);
    let error = record.state.last_error.unwrap();
    assert!(
        error.contains("failed 3 times") && error.contains("boom 2"),
        "{error}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM events").await,
        50,
        "nothing was kept"
    );
}

/// Two runtimes share an operation (`parallel_batches`) whose every
/// sub-batch fails: whichever of them — the holder or its helper — spends a
/// batch's attempts first fails the operation once, with the error; both
/// stop, nothing is kept, and the log replays.
async fn a_shared_operation_whose_batches_always_fail_is_failed_once(db: &TestDb) {
    create_events(db, 5_000, 0).await;
    let start = |node: &str| {
        let config = RuntimeConfig {
            node: node.into(),
            max_attempts: 3,
            parallel_batches: 3,
            // Slow retries: the helper usually joins while the holder's
            // first batch is still spending its attempts (which of them
            // fails the operation is left to timing; the outcome must not be).
            retry_base: Duration::from_millis(150),
            retry_cap: Duration::from_millis(300),
            ..quick()
        };
        builder(db)
            .config(config)
            .register(Flaky {
                fails: 0..u32::MAX,
                calls: Arc::new(AtomicU32::new(0)),
            })
            .start()
    };
    let a = start("share-a").await.unwrap();
    let b = start("share-b").await.unwrap();
    let options = EnqueueOptions {
        batch_size: 500,
        sub_batch_size: 100,
        ..EnqueueOptions::default()
    };
    let id = a
        .enqueue_json("flaky", &serde_json::json!({}), &options)
        .await
        .unwrap()
        .id;
    let record = finish(&a, id).await;
    assert_eq!(record.state.status, OperationStatus::Failed);
    let error = record.state.last_error.unwrap();
    assert!(error.contains("failed 3 times"), "{error}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 5_000);
    let events = db.store.events(id, 0).await.unwrap();
    let failed = events
        .iter()
        .filter(|e| matches!(e.event, Event::Failed { .. }))
        .count();
    assert_eq!(failed, 1, "failed once: {events:?}");
    // Both runtimes let go: no batch stays held.
    until("every batch is let go", || async {
        db.store
            .batches(id)
            .await
            .unwrap()
            .iter()
            .all(|b| b.status != sluice_store::BatchStatus::Running)
    })
    .await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    db.store.verify(id).await.unwrap();
}

async fn an_operator_pause_from_outside_stops_the_worker_and_resume_finishes(db: &TestDb) {
    create_events(db, 3_000, 0).await;
    let runtime = builder(db).start().await.unwrap();
    let options = EnqueueOptions {
        batch_size: 100,
        sub_batch_size: 10,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    let id = enqueue_aged(&runtime, db, &options).await.id;
    until("running", || async {
        db.scalar("SELECT COUNT(*) FROM events").await < 2_950
    })
    .await;
    // Another process would open its own store on the same database.
    let other = Store::connect(&db.url).await.unwrap();
    sluice_runtime::control(
        &other,
        sluice_runtime::Action::Pause,
        &Selection::One(id),
        "maintenance window",
    )
    .await
    .unwrap();
    // Within the control interval the actor stops: its lease is released
    // and the rows stop changing.
    until("the worker lets go", || released(&db.store, id)).await;
    let held = db.scalar("SELECT COUNT(*) FROM events").await;
    assert!(held > 0);
    assert_eq!(status(&db.store, id).await, OperationStatus::Paused);
    let recorded: i64 = db
        .store
        .batches(id)
        .await
        .unwrap()
        .iter()
        .map(|b| b.rows_affected)
        .sum();
    assert_eq!(
        recorded + held,
        3_000,
        "every committed row is recorded with its batch"
    );
    sluice_runtime::control(
        &other,
        sluice_runtime::Action::Resume,
        &Selection::One(id),
        "",
    )
    .await
    .unwrap();
    let record = finish(&runtime, id).await;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 3_000);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 0);
    other.close().await;
    runtime.shutdown().await.unwrap();
}

/// On PostgreSQL a control is announced (`NOTIFY`) and workers listen: a
/// pause written by another process stops a worker whose control poll would
/// not look for an hour, and the announced resume has it claimed again.
async fn an_announced_pause_reaches_a_worker_whose_control_poll_is_an_hour_away(db: &TestDb) {
    create_events(db, 3_000, 0).await;
    let hour = Duration::from_secs(3_600);
    let runtime = RuntimeBuilder::with_store(db.store.clone())
        .config(RuntimeConfig {
            control_interval: hour,
            lease_ttl: hour,
            ..quick()
        })
        .without_builtin_indicators()
        .start()
        .await
        .unwrap();
    // One batch for every row: no batch boundary, where the actor reads the
    // store anyway, comes before the end.
    let options = EnqueueOptions {
        batch_size: 10_000,
        sub_batch_size: 10,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    let id = enqueue_aged(&runtime, db, &options).await.id;
    until("running", || async {
        db.scalar("SELECT COUNT(*) FROM events").await < 2_950
    })
    .await;
    let other = Store::connect(&db.url).await.unwrap();
    let pause = sluice_runtime::Action::Pause;
    sluice_runtime::control(&other, pause, &Selection::One(id), "announced")
        .await
        .unwrap();
    until("the worker lets go", || released(&db.store, id)).await;
    let held = db.scalar("SELECT COUNT(*) FROM events").await;
    assert!(held > 0, "the pause came after the last row");
    let resume = sluice_runtime::Action::Resume;
    sluice_runtime::control(&other, resume, &Selection::One(id), "")
        .await
        .unwrap();
    let record = finish(&runtime, id).await;
    assert_eq!(record.state.rows_done, 3_000);
    other.close().await;
    runtime.shutdown().await.unwrap();
}

/// Marks `items` rows in ranges of their id, misbehaving on purpose: its
/// `shape` panics on the calls numbered in `shape_panics` (call 1 is the
/// enqueue's, later ones are operation actors starting), and its `run`
/// panics on the calls numbered in `run_panics`. `at_once` counts its
/// sub-batches running at once (across the operations given the same one).
/// With `permits`, each `run` first takes one permit of its own.
struct Unreliable {
    kind: &'static str,
    shape_calls: Arc<AtomicU32>,
    shape_panics: std::ops::RangeInclusive<u32>,
    run_calls: Arc<AtomicU32>,
    run_panics: std::ops::RangeInclusive<u32>,
    at_once: Arc<AtOnce>,
    /// When set, `run` waits until it opens.
    gate: Option<tokio::sync::watch::Receiver<bool>>,
    permits: Option<Arc<tokio::sync::Semaphore>>,
}

/// Sub-batches running now, and the most seen running at once.
#[derive(Default)]
struct AtOnce {
    running: AtomicU32,
    most: AtomicU32,
}

impl Unreliable {
    fn new(kind: &'static str) -> Self {
        Unreliable {
            kind,
            shape_calls: Arc::default(),
            shape_panics: 0..=0, // calls count from 1: never
            run_calls: Arc::default(),
            run_panics: 0..=0,
            at_once: Arc::default(),
            gate: None,
            permits: None,
        }
    }
}

#[async_trait]
impl Operation for Unreliable {
    type Arguments = serde_json::Value;

    fn kind(&self) -> &'static str {
        self.kind
    }

    fn shape(&self, _: &serde_json::Value) -> Result<Shape, OperationError> {
        let call = self.shape_calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.shape_panics.contains(&call) {
            panic!("shape call {call} panics on purpose");
        }
        Shape::range("items", "id")
    }

    async fn run(
        &self,
        _: &serde_json::Value,
        batch: &mut SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        let call = self.run_calls.fetch_add(1, Ordering::SeqCst) + 1;
        if self.run_panics.contains(&call) {
            panic!("run call {call} panics on purpose");
        }
        let now = self.at_once.running.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(gate) = &self.gate {
            let _ = gate.clone().wait_for(|open| *open).await;
        }
        if let Some(permits) = &self.permits {
            permits.acquire().await.expect("never closed").forget();
        }
        self.at_once.most.fetch_max(now, Ordering::SeqCst);
        let changed = batch.update_expression("seen = seen + 1").await;
        self.at_once.running.fetch_sub(1, Ordering::SeqCst);
        changed
    }
}

/// Runs `operations` over the items to the end on a pool of `pool_size`.
async fn run_unreliable(
    db: &TestDb,
    operations: Vec<Unreliable>,
    pool_size: usize,
) -> Vec<sluice_store::OperationRecord> {
    let kinds: Vec<&'static str> = operations.iter().map(|o| o.kind).collect();
    let mut builder = builder(db).config(RuntimeConfig {
        max_attempts: 3,
        pool_size,
        ..fixed_batches(40)
    });
    for operation in operations {
        builder = builder.register(operation);
    }
    let runtime = builder.start().await.unwrap();
    let options = EnqueueOptions {
        batch_size: 40,
        sub_batch_size: 20,
        ..EnqueueOptions::default()
    };
    let mut ids = Vec::new();
    for kind in kinds {
        let enqueued = runtime
            .enqueue_json(kind, &serde_json::json!({}), &options)
            .await
            .unwrap();
        ids.push(enqueued.id);
    }
    let mut records = Vec::new();
    for id in ids {
        records.push(finish(&runtime, id).await);
        db.store.verify(id).await.unwrap();
    }
    runtime.shutdown().await.unwrap();
    records
}

async fn an_operation_actor_that_fails_to_start_is_restarted_within_its_budget(db: &TestDb) {
    create_items(db, 100).await;
    let operation = Unreliable {
        shape_panics: 2..=3, // the first two actors die starting; the third runs
        ..Unreliable::new("restarts-twice")
    };
    let shape_calls = operation.shape_calls.clone();
    let records = run_unreliable(db, vec![operation], RuntimeConfig::default().pool_size).await;
    assert_eq!(records[0].state.status, OperationStatus::Finished);
    assert!(shape_calls.load(Ordering::SeqCst) >= 4);
    assert_each_item_changed_once(db).await;
}

async fn an_actor_failing_past_its_budget_fails_only_its_own_operation(db: &TestDb) {
    create_items(db, 100).await;
    let broken = Unreliable {
        shape_panics: 2..=u32::MAX, // every actor dies starting
        ..Unreliable::new("always-broken")
    };
    let records = run_unreliable(
        db,
        vec![broken, Unreliable::new("healthy")],
        RuntimeConfig::default().pool_size,
    )
    .await;
    let (broken, healthy) = (&records[0], &records[1]);
    assert_eq!(broken.state.status, OperationStatus::Failed);
    let error = broken.state.last_error.clone().unwrap_or_default();
    assert!(error.contains("failed 4 times"), "{error}");
    // The other operation on the same runtime was not disturbed.
    assert_eq!(healthy.state.status, OperationStatus::Finished);
    assert_eq!(healthy.state.rows_done, 100);
    assert_each_item_changed_once(db).await;
}

/// Three operations of one sub-batch each share a pool of one worker. The
/// first sub-batch holds the worker until all three operations have planned
/// their batches, so the other two wait in the pool's queue: each must be
/// handed on as the worker frees (no later job comes to push it), and
/// every job answered once. (PostgreSQL only: on SQLite the held sub-batch
/// would hold the one write lock the others need to plan.)
async fn a_pool_of_one_hands_queued_sub_batches_on_as_its_worker_frees(db: &TestDb) {
    create_items(db, 20).await;
    let (open, gate) = tokio::sync::watch::channel(false);
    let at_once = Arc::<AtOnce>::default();
    let operations = ["queued-a", "queued-b", "queued-c"].map(|kind| Unreliable {
        gate: Some(gate.clone()),
        at_once: Arc::clone(&at_once),
        ..Unreliable::new(kind)
    });
    let opener = async {
        until("three operations planned their batches", || async {
            db.scalar("SELECT COUNT(DISTINCT operation_id) FROM sluice_batches")
                .await
                >= 3
        })
        .await;
        open.send_replace(true);
    };
    let (records, ()) = tokio::join!(run_unreliable(db, operations.into(), 1), opener);
    for record in &records {
        assert_eq!(record.state.status, OperationStatus::Finished);
        assert_eq!(record.state.rows_done, 20);
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE seen <> 3")
            .await,
        0,
        "some item was not changed once by each operation"
    );
    assert_eq!(
        at_once.most.load(Ordering::SeqCst),
        1,
        "a pool of one ran two at once"
    );
}

async fn a_panicking_pool_worker_is_replaced_and_its_sub_batch_retried(db: &TestDb) {
    create_items(db, 100).await;
    let operation = Unreliable {
        run_panics: 2..=2,
        ..Unreliable::new("worker-panics-once")
    };
    let records = run_unreliable(db, vec![operation], RuntimeConfig::default().pool_size).await;
    let record = &records[0];
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_each_item_changed_once(db).await;
    let events = db.store.events(record.id, 0).await.unwrap();
    let failures: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::BatchFailed { error, .. } => Some(error.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("worker died"), "{}", failures[0]);
}

/// A node that died holding a batch (its lease an hour long) and comes back
/// under the same name, once the operation's own lease has lapsed, gives
/// that batch back and finishes it first: it does not leave it to wait out
/// its lease. (The store is set up as the dead node left it: operation
/// claimed by `test-node`, batch 1 planned and claimed by it.)
async fn a_restarted_node_finishes_the_batch_it_held_without_waiting_out_its_lease(db: &TestDb) {
    create_items(db, 100).await;
    let kind = "held-before-restart";
    let mut registry = sluice_operations::Registry::new();
    registry.register(Unreliable::new(kind));
    let options = EnqueueOptions {
        batch_size: 40,
        sub_batch_size: 20,
        ..EnqueueOptions::default()
    };
    let id =
        sluice_operations::enqueue(&db.store, &registry, kind, &serde_json::json!({}), &options)
            .await
            .unwrap()
            .id;
    let node = quick().node;
    let lease = common::claim_lease(&db.store, &node, Duration::from_millis(1)).await;
    db.store
        .plan_batch(&lease, Some(sluice_target::Cursor::int(40)), 40)
        .await
        .unwrap();
    let held = db
        .store
        .claim_batches(&node, Some(id), 1, Duration::from_secs(3_600))
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "the dead node's batch is running");

    let runtime = builder(db)
        .config(RuntimeConfig {
            max_attempts: 3,
            ..fixed_batches(40)
        })
        .register(Unreliable::new(kind))
        .start()
        .await
        .unwrap();
    // Well inside the hour the batch's lease still has to run.
    let record = runtime.wait(id, Duration::from_secs(30)).await.unwrap();
    runtime.shutdown().await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 100);
    db.store.verify(id).await.unwrap();
    assert_each_item_changed_once(db).await;
    let first = db.store.batches(id).await.unwrap().remove(0);
    // Given back (which does not count as an attempt) and claimed again
    // under a new epoch.
    assert_eq!(
        (first.ordinal, first.attempts, first.lease_epoch),
        (1, 1, held[0].lease_epoch + 1),
        "the held batch was given back and claimed again, once"
    );
}

/// One user's todos: marks them (a per-tenant clean-up, scoped by a bound value).
struct MarkUserTodos;

#[derive(Serialize, Deserialize)]
struct UserArgs {
    user_id: i64,
}

#[async_trait]
impl Operation for MarkUserTodos {
    type Arguments = UserArgs;

    fn kind(&self) -> &'static str {
        "mark-user-todos"
    }

    fn shape(&self, args: &UserArgs) -> Result<Shape, OperationError> {
        Shape::range("todos", "id")?.scope(Filter::new().eq("user_id", args.user_id))
    }

    async fn run(&self, _: &UserArgs, batch: &mut SubBatch<'_>) -> Result<u64, OperationError> {
        batch.update(&[("marked", 1_i64.into())]).await
    }
}

async fn bulk_enqueue_refuses_a_bad_item_whole_then_runs_every_operation(db: &TestDb) {
    // 50 users with 30 todos each, interleaved.
    db.execute("CREATE TABLE todos (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, marked BIGINT NOT NULL DEFAULT 0)")
        .await;
    db.insert_series("todos (id, user_id)", "g, g % 50", 1500, "")
        .await;
    let runtime = builder(db)
        .register(MarkUserTodos)
        .concurrency(8)
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 200,
        sub_batch_size: 50,
        ..EnqueueOptions::default()
    };
    let user = |user_id: i64| sluice_runtime::NewOperation {
        kind: "mark-user-todos".into(),
        arguments: serde_json::json!({ "user_id": user_id }),
        options: options.clone(),
    };
    // Users 0..40 (one of them twice); user 40 is left out to check scoping.
    let mut wanted: Vec<_> = (0..40).map(user).collect();
    wanted.push(user(3));
    let mut bad = wanted.clone();
    bad[17].kind = "no-such-kind".into();
    bad[17].arguments = serde_json::json!({ "user_id": "seventeen" });
    let refused = runtime.enqueue_many(&bad).await.unwrap_err();
    let message = refused.to_string();
    assert!(message.contains("operation 17 "), "{message}");
    assert!(message.contains("no-such-kind"), "{message}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
    let mut bad_argument = wanted.clone();
    bad_argument[5].arguments = serde_json::json!({ "user_id": "five" });
    let refused = runtime.enqueue_many(&bad_argument).await.unwrap_err();
    assert!(refused.to_string().contains("operation 5 "), "{refused}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);

    let enqueued = runtime.enqueue_many(&wanted).await.unwrap();
    assert_eq!(enqueued.len(), 41);
    assert_eq!(enqueued.iter().filter(|e| e.created).count(), 40);
    assert_eq!(enqueued[40].id, enqueued[3].id);
    for e in &enqueued[..40] {
        let record = finish(&runtime, e.id).await;
        assert_eq!(record.state.status, OperationStatus::Finished);
        assert_eq!(record.state.rows_done, 30, "each user has 30 todos");
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM todos WHERE marked = 1")
            .await,
        40 * 30
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM todos WHERE marked = 1 AND user_id >= 40")
            .await,
        0
    );
    runtime.shutdown().await.unwrap();
}

/// A runtime shut down while its reconciler, scheduler and operation actors
/// are busy with the store must not leave a pooled connection inside a
/// transaction: the next borrower's statements would run in it, hold its
/// locks and never commit. Each connection is checked with
/// `now() = statement_timestamp()` sent as a simple query, true only
/// outside a transaction block.
async fn shutdown_leaves_no_pooled_connection_inside_a_transaction(db: &TestDb) {
    create_events(db, 3_000, 0).await;
    let busy = RuntimeConfig {
        reconcile_interval: Duration::from_millis(1),
        schedule_interval: Duration::from_millis(1),
        control_interval: Duration::from_millis(1),
        health_interval: Duration::from_millis(1),
        ..fixed_batches(50)
    };
    let sluice_target::Backend::Postgres(pool) = db.store.backend() else {
        unreachable!("PostgreSQL only")
    };
    for round in 0..10 {
        let runtime = builder(db).config(busy.clone()).start().await.unwrap();
        let options = EnqueueOptions {
            batch_size: 50,
            sub_batch_size: 10,
            ..EnqueueOptions::default()
        };
        let op = enqueue_aged(&runtime, db, &options).await;
        if round % 2 == 0 {
            until("the operation runs", || async {
                db.store.operation(op.id).await.unwrap().state.rows_done > 0
                    || status(&db.store, op.id).await == OperationStatus::Finished
            })
            .await;
        } else {
            runtime.wait(op.id, WAIT).await.unwrap();
        }
        runtime.shutdown().await.unwrap();
        let mut held = Vec::new();
        for _ in 0..pool.size() {
            let Some(mut conn) = pool.try_acquire() else {
                break;
            };
            // A simple query: in its own implicit transaction its start is the
            // transaction's start (not so under the extended protocol).
            let row = sqlx::raw_sql("SELECT now() = statement_timestamp()")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            let outside: bool = sqlx::Row::get(&row, 0);
            assert!(
                outside,
                "round {round}: a pooled connection was left inside a transaction"
            );
            held.push(conn);
        }
        drop(held);
        db.execute("DELETE FROM sluice_events").await;
        db.execute("DELETE FROM sluice_batches").await;
        db.execute("DELETE FROM sluice_operations").await;
        create_events_again(db).await;
    }
}

async fn create_events_again(db: &TestDb) {
    db.execute("DROP TABLE events").await;
    create_events(db, 3_000, 0).await;
}

/// The write that records a batch's outcome fails (a trigger on the batch
/// table refuses the first two with a serialization failure, a transient
/// error): the actor keeps the batch and records it again at its next step,
/// so no batch is left running for its lease to lapse and be claimed again.
async fn a_batch_outcome_that_fails_to_record_is_recorded_again(db: &TestDb) {
    create_events(db, 600, 0).await;
    refuse_updates(
        db,
        "sluice_batches",
        "NEW.status = 'succeeded' AND OLD.status = 'running'",
        2,
    )
    .await;
    let runtime = builder(db)
        .config(fixed_batches(100))
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 100,
        sub_batch_size: 50,
        ..EnqueueOptions::default()
    };
    let op = enqueue_aged(&runtime, db, &options).await;
    let record = finish(&runtime, op.id).await;
    runtime.shutdown().await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 600);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 0);
    assert!(faults_counted(db).await > 2, "the faults were injected");
    // Each batch was claimed once: none was dropped and taken over later.
    let batches = db.store.batches(op.id).await.unwrap();
    assert_eq!(
        batches.iter().map(|b| b.attempts).collect::<Vec<_>>(),
        vec![1; batches.len()],
        "{batches:?}"
    );
    assert_eq!(
        batches.iter().map(|b| b.rows_affected).sum::<i64>(),
        600,
        "{batches:?}"
    );
}

/// Makes the next `times` updates of `table` matching `condition` (over
/// `OLD` and `NEW`) fail with a serialization failure, a transient error.
async fn refuse_updates(db: &TestDb, table: &str, condition: &str, times: i64) {
    if db.backend == "mysql" {
        db.execute("CREATE SEQUENCE injected_faults NOCACHE").await;
        // A MariaDB sequence: its values are not taken back with the
        // statement the trigger fails.
        db.execute(&format!(
            "CREATE TRIGGER refuse_updates BEFORE UPDATE ON {table} FOR EACH ROW \
             BEGIN \
               IF {condition} AND NEXTVAL(injected_faults) <= {times} THEN \
                 SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'injected: could not record it'; \
               END IF; \
             END"
        ))
        .await;
        return;
    }
    db.execute("CREATE SEQUENCE injected_faults").await;
    db.execute(&format!(
        "CREATE FUNCTION refuse_updates() RETURNS trigger LANGUAGE plpgsql AS $$ \
         BEGIN \
           IF {condition} AND nextval('injected_faults') <= {times} THEN \
             RAISE EXCEPTION 'injected: could not record it' USING ERRCODE = '40001'; \
           END IF; \
           RETURN NEW; \
         END $$"
    ))
    .await;
    db.execute(&format!(
        "CREATE TRIGGER refuse_updates BEFORE UPDATE ON {table} \
         FOR EACH ROW EXECUTE FUNCTION refuse_updates()"
    ))
    .await;
}

/// How many updates [`refuse_updates`]' trigger counted (refused or not).
async fn faults_counted(db: &TestDb) -> i64 {
    db.scalar(if db.backend == "mysql" {
        "SELECT next_not_cached_value - 1 FROM injected_faults"
    } else {
        "SELECT last_value FROM injected_faults"
    })
    .await
}

/// The `next_sub_batch_size` of each `batch_failed` in the log.
async fn failures_recorded(db: &TestDb, id: i64) -> Vec<Option<i64>> {
    db.store
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event {
            Event::BatchFailed {
                next_sub_batch_size,
                ..
            } => Some(next_sub_batch_size),
            _ => None,
        })
        .collect()
}

/// A sub-batch fails (twice, then succeeds) and the write recording its
/// failed attempt is refused twice: the actor keeps the batch and records
/// the failure again, so each failed attempt is recorded once and the
/// batch is retried at once, not left running until its lease lapses.
async fn a_failed_attempt_that_fails_to_record_is_recorded_again(db: &TestDb) {
    create_events(db, 500, 0).await;
    refuse_updates(
        db,
        "sluice_batches",
        "OLD.status = 'running' AND NEW.status = 'pending' \
         AND COALESCE(NEW.last_error, '') <> COALESCE(OLD.last_error, '')",
        2,
    )
    .await;
    let record = run_flaky(db, 0..2, quick(), &batches_of_200()).await;
    let id = record.id;
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(record.state.rows_done, 500);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 0);
    assert!(faults_counted(db).await > 2, "the faults were injected");
    // Both failed attempts recorded, each once, each shrinking the sub-batch.
    assert_eq!(failures_recorded(db, id).await, vec![Some(75), Some(56)]);
    // The first batch took three attempts (two failed), every other one.
    let batches = db.store.batches(id).await.unwrap();
    let attempts: Vec<i32> = batches.iter().map(|b| b.attempts).collect();
    assert_eq!(attempts[0], 3, "{batches:?}");
    assert!(attempts[1..].iter().all(|a| *a == 1), "{batches:?}");
}

/// Batches start failing once a dozen are done, past the allowed ratio of
/// failed attempts, and the write failing the operation is refused twice:
/// the actor records the failure again instead of running more batches,
/// so exactly the two attempts that crossed the ratio are recorded.
async fn an_operation_failure_that_fails_to_record_is_recorded_again(db: &TestDb) {
    create_events(db, 2_000, 0).await;
    refuse_updates(
        db,
        "sluice_operations",
        "NEW.status = 'failed' AND OLD.status <> 'failed'",
        2,
    )
    .await;
    let config = RuntimeConfig {
        max_attempts: 100,
        max_failure_ratio: 0.1,
        ..fixed_batches(100)
    };
    let options = EnqueueOptions {
        batch_size: 100,
        sub_batch_size: 100,
        ..EnqueueOptions::default()
    };
    let record = run_flaky(db, 12..u32::MAX, config, &options).await;
    let id = record.id;
    assert_eq!(record.state.status, OperationStatus::Failed);
    let error = record.state.last_error.unwrap_or_default();
    // Thirteen batches were planned: twelve succeeded, the thirteenth failed
    // twice, and no other was planned while the failure was being recorded.
    assert!(
        error.contains("2 failed attempts over 13 batches"),
        "{error}"
    );
    assert!(faults_counted(db).await > 2, "the faults were injected");
    assert_eq!(failures_recorded(db, id).await.len(), 2);
    assert_eq!(record.state.rows_done, 1_200);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 800);
}

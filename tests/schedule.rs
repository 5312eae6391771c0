//! Schedules with an injected clock on real databases: due times, one
//! catch-up after downtime, jitter bounds, the uniqueness no-op, the kill
//! switch, one fire per tick across two stores, and claim priorities.

mod common;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sluice_operations::{EnqueueOptions, Registry};
use sluice_runtime::schedule::{add_schedule, fire_due, jitter_offset};
use sluice_runtime::{Action, ScheduleSpec, Selection, control};
use sluice_store::{FireOutcome, ManualClock, OperationStatus, Origin, Store};

use common::TestDb;

for_each_backend!(
    a_schedule_fires_when_due_once_after_downtime_and_not_twice_at_once,
    jitter_delays_a_fire_within_its_window,
    a_switched_off_kind_s_fires_are_refused_and_its_operations_not_claimed,
    two_stores_on_one_database_fire_each_tick_once,
    user_operations_are_claimed_first_and_waiting_scheduled_ones_are_promoted,
);

/// 2026-01-01T00:00:30Z.
const START: i64 = 1_767_225_630_000;
const MINUTE: i64 = 60_000;

async fn setup(db: &TestDb) -> (Store, ManualClock, Registry) {
    db.execute("CREATE TABLE ev (id BIGINT PRIMARY KEY, created_at TEXT NOT NULL)")
        .await;
    db.execute("CREATE INDEX ev_created_idx ON ev (created_at)")
        .await;
    db.execute("INSERT INTO ev VALUES (1, '2020-01-01T00:00:00Z'), (2, '2099-01-01T00:00:00Z')")
        .await;
    let clock = ManualClock::new(START);
    let store = db.store.clone().with_clock(Arc::new(clock.clone()));
    (store, clock, Registry::with_builtins())
}

fn every_minute(name: &str, jitter: Duration) -> ScheduleSpec {
    ScheduleSpec {
        name: name.into(),
        kind: "delete-aged-rows".into(),
        arguments: json!({"table": "ev", "column": "created_at", "key": "id", "older_than": "90d"}),
        cron: "* * * * *".into(),
        time_zone: None,
        jitter,
        options: EnqueueOptions::default(),
    }
}

async fn outcomes(store: &Store, name: &str) -> Vec<String> {
    store
        .fires(name)
        .await
        .unwrap()
        .into_iter()
        .map(|f| f.outcome)
        .collect()
}

async fn a_schedule_fires_when_due_once_after_downtime_and_not_twice_at_once(db: &TestDb) {
    let (store, clock, registry) = setup(db).await;
    let added = add_schedule(&store, &registry, &every_minute("cleanup", Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(added.due_at, START + 30_000); // 00:01:00
    assert!(fire_due(&store, &registry).await.unwrap().is_empty());

    clock.advance(30_000); // 00:01:00: due
    let fired = fire_due(&store, &registry).await.unwrap();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].outcome, FireOutcome::Enqueued);
    let first = fired[0].operation_id.unwrap();
    let record = store.operation(first).await.unwrap();
    assert_eq!(record.state.origin, Origin::Schedule);
    // The cutoff was measured from the fire: 90 days before 00:01:00.
    assert!(
        record.state.arguments.contains("2025-10-03"),
        "{}",
        record.state.arguments
    );
    // The same tick again fires nothing.
    assert!(fire_due(&store, &registry).await.unwrap().is_empty());

    // The next tick while the first operation is still pending: a recorded no-op.
    clock.advance(MINUTE);
    let fired = fire_due(&store, &registry).await.unwrap();
    assert_eq!(fired[0].outcome, FireOutcome::Skipped);
    assert_eq!(fired[0].operation_id, Some(first));
    assert!(
        fired[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("still pending")
    );

    // Ten minutes of downtime, the operation finished meanwhile: one catch-up fire.
    control(&store, Action::Cancel, &Selection::One(first), "test")
        .await
        .unwrap();
    clock.advance(10 * MINUTE); // 00:12:00
    let fired = fire_due(&store, &registry).await.unwrap();
    assert_eq!(fired.len(), 1);
    assert_eq!(fired[0].outcome, FireOutcome::Enqueued);
    assert!(fire_due(&store, &registry).await.unwrap().is_empty());
    let schedule = store.schedule("cleanup").await.unwrap();
    assert_eq!(schedule.due_at, START + 30_000 + 12 * MINUTE); // 00:13:00
    assert_eq!(
        outcomes(&store, "cleanup").await,
        ["enqueued", "skipped", "enqueued"]
    );
}

async fn jitter_delays_a_fire_within_its_window(db: &TestDb) {
    let (store, clock, registry) = setup(db).await;
    let jitter = Duration::from_secs(40);
    let added = add_schedule(&store, &registry, &every_minute("spread", jitter))
        .await
        .unwrap();
    let offset = added.fire_at - added.due_at;
    assert!((0..=40_000).contains(&offset));
    assert_eq!(offset, jitter_offset("spread", added.due_at, 40_000));
    clock.advance(added.due_at - START); // due, but not yet its jittered start
    if offset > 0 {
        assert!(fire_due(&store, &registry).await.unwrap().is_empty());
        clock.advance(offset);
    }
    assert_eq!(fire_due(&store, &registry).await.unwrap().len(), 1);
    // A thousand schedules due at the same instant start spread over the window.
    let offsets: Vec<i64> = (0..1_000)
        .map(|i| jitter_offset(&format!("schedule-{i}"), added.due_at, 60_000))
        .collect();
    assert!(offsets.iter().all(|o| (0..=60_000).contains(o)));
    let per_tenth = |t: i64| offsets.iter().filter(|o| **o / 6_000 == t).count();
    // Uniform: each tenth of the window holds roughly a tenth of them.
    assert!((0..10).all(|t| (60..=140).contains(&per_tenth(t))));
}

async fn a_switched_off_kind_s_fires_are_refused_and_its_operations_not_claimed(db: &TestDb) {
    let (store, clock, registry) = setup(db).await;
    add_schedule(&store, &registry, &every_minute("cleanup", Duration::ZERO))
        .await
        .unwrap();
    control(
        &store,
        Action::Pause,
        &Selection::Kind("delete-aged-rows".into()),
        "incident 42",
    )
    .await
    .unwrap();
    clock.advance(30_000);
    let fired = fire_due(&store, &registry).await.unwrap();
    assert_eq!(fired[0].outcome, FireOutcome::Refused);
    assert!(fired[0].reason.as_deref().unwrap().contains("incident 42"));
    // A user's operation of that kind waits: no node claims it.
    // Another age than the schedule's: a request of its own (the same
    // request would be the schedule's fires' duplicate while it is active).
    let mut asked = every_minute("x", Duration::ZERO).arguments;
    asked["older_than"] = json!("30d");
    let arguments = registry
        .arguments_at("delete-aged-rows", &store, asked, chrono::Utc::now())
        .await
        .unwrap();
    let user = sluice_operations::enqueue(
        &store,
        &registry,
        "delete-aged-rows",
        &arguments,
        &EnqueueOptions::default(),
    )
    .await
    .unwrap();
    let claimed = store
        .claim_operations("n1", 10, Duration::from_secs(5))
        .await
        .unwrap();
    assert!(claimed.is_empty());
    // Lifting it: the next fire enqueues and the waiting operation is claimable.
    control(
        &store,
        Action::Resume,
        &Selection::Kind("delete-aged-rows".into()),
        "",
    )
    .await
    .unwrap();
    assert!(store.switches().await.unwrap().is_empty());
    let claimed = store
        .claim_operations("n1", 10, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(claimed[0].record.id, user.id);
    clock.advance(MINUTE);
    assert_eq!(
        fire_due(&store, &registry).await.unwrap()[0].outcome,
        FireOutcome::Enqueued
    );
}

async fn two_stores_on_one_database_fire_each_tick_once(db: &TestDb) {
    let (store, clock, registry) = setup(db).await;
    let other = Store::connect(&db.url)
        .await
        .unwrap()
        .with_clock(Arc::new(clock.clone()));
    for i in 0..5 {
        add_schedule(
            &store,
            &registry,
            &every_minute(&format!("s{i}"), Duration::ZERO),
        )
        .await
        .unwrap();
    }
    for _tick in 0..4 {
        clock.advance(MINUTE);
        let (a, b) = tokio::join!(fire_due(&store, &registry), fire_due(&other, &registry));
        assert_eq!(a.unwrap().len() + b.unwrap().len(), 5);
    }
    for i in 0..5 {
        assert_eq!(outcomes(&store, &format!("s{i}")).await.len(), 4);
    }
    other.close().await;
}

async fn user_operations_are_claimed_first_and_waiting_scheduled_ones_are_promoted(db: &TestDb) {
    let (store, clock, registry) = setup(db).await;
    let enqueue = |origin: Origin, table: &'static str| {
        let (store, registry) = (store.clone(), registry.clone());
        async move {
            let options = EnqueueOptions {
                origin,
                force: true, // every row: a full walk of the key is the point
                ..EnqueueOptions::default()
            };
            let args = json!({"table": table, "key": "id", "set": "created_at = created_at"});
            sluice_operations::enqueue(&store, &registry, "update-in-batches", &args, &options)
                .await
                .unwrap()
                .id
        }
    };
    db.execute("CREATE TABLE ev2 (id BIGINT PRIMARY KEY, created_at TEXT)")
        .await;
    db.execute("CREATE TABLE ev3 (id BIGINT PRIMARY KEY, created_at TEXT)")
        .await;
    let scheduled = enqueue(Origin::Schedule, "ev").await;
    let user = enqueue(Origin::User, "ev2").await;
    let claim = || async {
        store
            .claim_operations("n1", 1, Duration::from_secs(3_600))
            .await
            .unwrap()[0]
            .record
            .id
    };
    assert_eq!(
        claim().await,
        user,
        "a user operation starts before an older scheduled one"
    );
    // Waiting past the promotion age, the scheduled one goes before a newer user one.
    clock.advance(sluice_store::PROMOTE_AFTER_MS + 1);
    let later_user = enqueue(Origin::User, "ev3").await;
    assert_eq!(claim().await, scheduled);
    assert_eq!(claim().await, later_user);
    assert_eq!(
        store.operation(scheduled).await.unwrap().state.status,
        OperationStatus::Running
    );
}

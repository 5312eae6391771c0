//! The store suite: every test runs on a real SQLite file and on the real
//! PostgreSQL server (see `common::for_each_backend!`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::TestDb;
use serde_json::json;
use sluice_store::{
    Appended, BatchStatus, Event, Expected, Health, IllegalTransition, ListFilter, ManualClock,
    NextBatch, OperationSpec, OperationStatus, RateLimit, Store, StoreError, binding_limit,
};
use sluice_target::Cursor;

for_each_backend!(
    enqueue_round_trips_and_logs_created,
    eight_concurrent_identical_enqueues_make_one_operation,
    concurrent_appenders_with_the_same_expected_seq_one_wins,
    illegal_transition_is_refused_and_writes_nothing,
    taken_over_lease_rejects_the_old_holder,
    operator_pause_releases_the_lease_and_fences_the_holder,
    batch_leases_fence_a_stalled_worker,
    concurrent_batch_claims_never_share_a_batch,
    full_lifecycle_replays_to_the_stored_projection,
    operator_retry_requeues_failed_batches,
    corrupt_or_unknown_payload_names_operation_and_seq,
    retention_prunes_old_terminal_batches_in_chunks_only,
    database_constraints_refuse_impossible_rows,
    claims_prefer_user_operations_then_priority,
    sub_batch_change_and_record_commit_together_or_not_at_all,
    bulk_enqueue_writes_chunks_keeps_uniqueness_and_replays,
    one_statement_sub_batches_keep_the_change_and_its_record_together,
    loop_sub_batches_record_their_exact_count_without_returning,
    a_loop_batch_keeps_its_count_when_given_back_retried_or_done,
    owner_completes_and_plans_the_next_batch_in_one_commit,
    a_batch_spending_its_attempts_fails_its_operation_in_the_same_commit,
    transaction_sub_batches_run_on_a_connection_their_session_lends,
    rate_limit_buckets_refill_go_into_debt_and_stamp_the_binding_limit,
);

postgres_only!(
    a_late_loop_sub_batch_and_a_takeover_are_ordered_by_the_batch_row,
    a_kept_sub_batch_connection_is_let_go_when_the_server_closes_it,
    a_busy_session_renews_its_connection_at_the_pool_lifetime,
    sessions_keep_all_but_one_connection_between_them,
);

fn spec(table: &str) -> OperationSpec {
    let mut spec = OperationSpec::new("delete-aged-rows", table, vec!["id".into()])
        .with_arguments(&json!({"column": "created_at", "older_than": "90d"}));
    spec.max_cursor = Some(Cursor::int(1_000));
    spec.batch_size = 100;
    spec.sub_batch_size = 25;
    spec.estimated_rows = Some(1_000);
    spec
}

/// [`spec`] for a loop operation: no batching columns, no range.
fn loop_spec(table: &str) -> OperationSpec {
    let mut looped = spec(table);
    looped.batching_columns.clear();
    looped.max_cursor = None;
    looped
}

/// Appends `event` as an operator does: under no lease, at whatever
/// sequence the log is.
async fn operator(db: &TestDb, id: i64, event: Event) -> Appended {
    db.store
        .append(id, Expected::Any, None, &[event])
        .await
        .unwrap()
}

/// A store on the same database with a manual clock.
fn with_clock(db: &TestDb) -> (Store, ManualClock) {
    let clock = ManualClock::new(1_700_000_000_000);
    (db.store.clone().with_clock(Arc::new(clock.clone())), clock)
}

async fn enqueue_round_trips_and_logs_created(db: &TestDb) {
    let mut wanted = spec("events");
    wanted.tenant_id = Some("tenant-7".into());
    wanted.trace_context = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
    let enqueued = db.store.enqueue(wanted.clone()).await.unwrap();
    assert!(enqueued.created);
    let record = db.store.operation(enqueued.id).await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Pending);
    assert_eq!(record.state.table, "events");
    assert_eq!(
        record.state.arguments,
        r#"{"column":"created_at","older_than":"90d"}"#
    );
    assert_eq!(record.state.max_cursor, Some(Cursor::int(1_000)));
    assert_eq!(record.state.tenant_id.as_deref(), Some("tenant-7"));
    assert_eq!(record.state.trace_context, wanted.trace_context);
    assert_eq!(record.state.last_seq, 1);
    assert!(record.lease.is_none());
    let events = db.store.events(enqueued.id, 0).await.unwrap();
    assert_eq!(events.len(), 1);
    assert!(matches!(&events[0].event, Event::Created(s) if s.table == "events"));
    db.store.verify(enqueued.id).await.unwrap();
    // The log is queryable in plain SQL: kind and time are columns.
    let created = db
        .scalar("SELECT COUNT(*) FROM sluice_events WHERE kind = 'created' AND recorded_at > 0")
        .await;
    assert_eq!(created, 1);
    // Invalid specs write nothing.
    let mut bad = spec("events");
    bad.batch_size = 0;
    assert!(matches!(
        db.store.enqueue(bad).await,
        Err(StoreError::InvalidSpec(_))
    ));
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 1);
    assert!(matches!(
        db.store.operation(9_999).await,
        Err(StoreError::NotFound(9_999))
    ));
}

async fn eight_concurrent_identical_enqueues_make_one_operation(db: &TestDb) {
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let store = db.store.clone();
            // Same arguments, written in a different key order by half the callers.
            let args = if i % 2 == 0 {
                json!({"a": 1, "b": 2})
            } else {
                json!({"b": 2, "a": 1})
            };
            tokio::spawn(async move {
                store
                    .enqueue(spec("todos").with_arguments(&args))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await.unwrap());
    }
    let ids: std::collections::HashSet<i64> = results.iter().map(|r| r.id).collect();
    assert_eq!(
        ids.len(),
        1,
        "all callers got the same operation: {results:?}"
    );
    assert_eq!(results.iter().filter(|r| r.created).count(), 1);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 1);
    // Different arguments are a different operation.
    let other = db
        .store
        .enqueue(spec("todos").with_arguments(&json!({"a": 2})))
        .await
        .unwrap();
    assert!(other.created);
    // Once the first is no longer active, the same identity may be enqueued again.
    let id = *ids.iter().next().unwrap();
    operator(
        db,
        id,
        Event::Cancelled {
            reason: "test".into(),
        },
    )
    .await;
    let again = db
        .store
        .enqueue(spec("todos").with_arguments(&json!({"a": 1, "b": 2})))
        .await
        .unwrap();
    assert!(again.created);
    assert_ne!(again.id, id);
}

async fn concurrent_appenders_with_the_same_expected_seq_one_wins(db: &TestDb) {
    for round in 0..5 {
        let id = db
            .store
            .enqueue(spec(&format!("t{round}")))
            .await
            .unwrap()
            .id;
        let seq = db.store.operation(id).await.unwrap().state.last_seq;
        let appender = |event: Event| {
            let store = db.store.clone();
            tokio::spawn(async move {
                store
                    .append(id, Expected::Exactly(seq), None, &[event])
                    .await
            })
        };
        let a = appender(Event::Paused { reason: "a".into() });
        let b = appender(Event::Cancelled { reason: "b".into() });
        let outcomes = [a.await.unwrap(), b.await.unwrap()];
        let wins = outcomes.iter().filter(|o| o.is_ok()).count();
        assert_eq!(wins, 1, "exactly one appender wins: {outcomes:?}");
        let loser = outcomes
            .iter()
            .find(|o| o.is_err())
            .unwrap()
            .as_ref()
            .unwrap_err();
        assert!(
            matches!(loser, StoreError::Conflict { operation_id, expected, actual } if *operation_id == id && *expected == seq && *actual == seq + 1),
            "{loser:?}"
        );
        assert_eq!(db.store.events(id, 0).await.unwrap().len(), 2);
        db.store.verify(id).await.unwrap();
    }
}

async fn illegal_transition_is_refused_and_writes_nothing(db: &TestDb) {
    let id = db.store.enqueue(spec("t")).await.unwrap().id;
    let err = db
        .store
        .append(id, Expected::Any, None, &[Event::Finished])
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            StoreError::Illegal {
                source: IllegalTransition::WrongStatus {
                    from: OperationStatus::Pending,
                    event: "finished"
                },
                ..
            }
        ),
        "{err:?}"
    );
    // A batch of events is all-or-nothing: the legal first one is not kept either.
    let err = db
        .store
        .append(
            id,
            Expected::Any,
            None,
            &[Event::Paused { reason: "x".into() }, Event::Retried],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Illegal { .. }));
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(
        (record.state.status, record.state.last_seq),
        (OperationStatus::Pending, 1)
    );
    assert_eq!(db.store.events(id, 0).await.unwrap().len(), 1);
}

async fn taken_over_lease_rejects_the_old_holder(db: &TestDb) {
    let (store, clock) = with_clock(db);
    let id = store.enqueue(spec("t")).await.unwrap().id;
    let ttl = Duration::from_secs(30);
    let a = store.claim_operations("node-a", 10, ttl).await.unwrap();
    assert_eq!(a.len(), 1);
    let lease_a = a[0].record.lease.clone().unwrap();
    assert_eq!((lease_a.node.as_str(), lease_a.epoch), ("node-a", 1));
    // While A's lease is live, B gets nothing.
    assert!(
        store
            .claim_operations("node-b", 10, ttl)
            .await
            .unwrap()
            .is_empty()
    );
    // A renews: still held.
    let lease_a = store.renew_lease(&lease_a, ttl).await.unwrap();
    clock.advance(31_000);
    // A stalls past its lease; B takes over with a higher epoch.
    let b = store.claim_operations("node-b", 10, ttl).await.unwrap();
    let lease_b = b[0].record.lease.clone().unwrap();
    assert_eq!((lease_b.node.as_str(), lease_b.epoch), ("node-b", 2));
    assert_eq!(b[0].record.state.node.as_deref(), Some("node-b"));
    // A's late writes are all rejected.
    assert!(matches!(
        store.renew_lease(&lease_a, ttl).await,
        Err(StoreError::LeaseLost { epoch: 1, .. })
    ));
    assert!(matches!(
        store
            .plan_batch(&lease_a, Some(Cursor::int(100)), 100)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    let stale = [Event::Yielded {
        reason: "late".into(),
    }];
    assert!(matches!(
        store
            .append(id, Expected::Any, Some(&lease_a), &stale)
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    // B's writes go through.
    let (batch, _) = store
        .plan_batch(&lease_b, Some(Cursor::int(100)), 100)
        .await
        .unwrap();
    assert_eq!((batch.ordinal, batch.status), (1, BatchStatus::Pending));
    store.verify(id).await.unwrap();
}

async fn operator_pause_releases_the_lease_and_fences_the_holder(db: &TestDb) {
    let id = db.store.enqueue(spec("t")).await.unwrap().id;
    let claimed = db
        .store
        .claim_operations("node-a", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let lease = claimed[0].record.lease.clone().unwrap();
    // Another process pauses it (no lease, no expected seq).
    let paused = operator(
        db,
        id,
        Event::Paused {
            reason: "operator".into(),
        },
    )
    .await;
    assert!(paused.record.lease.is_none());
    assert_eq!(paused.record.state.status, OperationStatus::Paused);
    assert!(matches!(
        db.store.renew_lease(&lease, Duration::from_secs(60)).await,
        Err(StoreError::LeaseLost { .. })
    ));
    // Paused operations are not claimable; resumed ones are, with a new epoch.
    assert!(
        db.store
            .claim_operations("node-b", 1, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    db.store
        .append(id, Expected::Any, None, &[Event::Resumed])
        .await
        .unwrap();
    let again = db
        .store
        .claim_operations("node-b", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again[0].record.lease.as_ref().unwrap().epoch, 2);
    db.store.verify(id).await.unwrap();
}

async fn batch_leases_fence_a_stalled_worker(db: &TestDb) {
    let (store, clock) = with_clock(db);
    let id = store.enqueue(spec("t")).await.unwrap().id;
    let op = store
        .claim_operations("planner", 1, Duration::from_secs(600))
        .await
        .unwrap();
    let lease = op[0].record.lease.clone().unwrap();
    store
        .plan_batch(&lease, Some(Cursor::int(100)), 100)
        .await
        .unwrap();
    let ttl = Duration::from_secs(10);
    let a = store
        .claim_batches("worker-a", Some(id), 5, ttl)
        .await
        .unwrap();
    assert_eq!(a.len(), 1);
    let lease_a = a[0].lease().unwrap();
    assert_eq!((lease_a.epoch, lease_a.attempt), (1, 1));
    assert!(
        store
            .claim_batches("worker-b", Some(id), 5, ttl)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(11_000);
    let b = store
        .claim_batches("worker-b", Some(id), 5, ttl)
        .await
        .unwrap();
    let lease_b = b[0].lease().unwrap();
    assert_eq!((lease_b.epoch, lease_b.attempt), (2, 2));
    // The stalled worker's late completion is rejected and changes nothing.
    let late = store
        .complete_batch(&lease_a, 100, Duration::from_millis(5), None)
        .await;
    assert!(
        matches!(late, Err(StoreError::BatchLeaseLost { epoch: 1, .. })),
        "{late:?}"
    );
    assert!(matches!(
        store.renew_batch_lease(&lease_a, ttl).await,
        Err(StoreError::BatchLeaseLost { .. })
    ));
    assert!(matches!(
        store.fail_batch(&lease_a, "x", true, None).await,
        Err(StoreError::BatchLeaseLost { .. })
    ));
    assert_eq!(store.operation(id).await.unwrap().state.rows_done, 0);
    let done = store
        .complete_batch(&lease_b, 97, Duration::from_millis(5), Some(120))
        .await
        .unwrap();
    assert_eq!(
        (
            done.record.state.rows_done,
            done.record.state.batches_succeeded
        ),
        (97, 1)
    );
    assert_eq!(done.record.state.batch_size, 120);
    // Completing twice is impossible too.
    assert!(
        store
            .complete_batch(&lease_b, 97, Duration::from_millis(5), None)
            .await
            .is_err()
    );
    let batches = store.batches(id).await.unwrap();
    assert_eq!(
        (batches[0].status, batches[0].rows_affected),
        (BatchStatus::Succeeded, 97)
    );
    store.verify(id).await.unwrap();
}

async fn concurrent_batch_claims_never_share_a_batch(db: &TestDb) {
    let id = db.store.enqueue(spec("t")).await.unwrap().id;
    let lease = common::claim_lease(&db.store, "planner", Duration::from_secs(600)).await;
    for i in 1..=10 {
        db.store
            .plan_batch(&lease, Some(Cursor::int(i * 100)), 100)
            .await
            .unwrap();
    }
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let store = db.store.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let got = store
                        .claim_batches(&format!("w{w}"), Some(id), 1, Duration::from_secs(600))
                        .await
                        .unwrap();
                    let Some(batch) = got.into_iter().next() else {
                        return mine;
                    };
                    store
                        .complete_batch(
                            &batch.lease().unwrap(),
                            100,
                            Duration::from_millis(1),
                            None,
                        )
                        .await
                        .unwrap();
                    mine.push(batch.ordinal);
                }
            })
        })
        .collect();
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await.unwrap());
    }
    all.sort();
    assert_eq!(
        all,
        (1..=10).collect::<Vec<_>>(),
        "every batch processed exactly once"
    );
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(
        (record.state.rows_done, record.state.batches_succeeded),
        (1_000, 10)
    );
    db.store.verify(id).await.unwrap();
}

async fn full_lifecycle_replays_to_the_stored_projection(db: &TestDb) {
    let id = db.store.enqueue(spec("t")).await.unwrap().id;
    let ttl = Duration::from_secs(600);
    let lease = common::claim_lease(&db.store, "n", ttl).await;
    let (b1, planned) = db
        .store
        .plan_batch(&lease, Some(Cursor::int(100)), 100)
        .await
        .unwrap();
    assert!(planned.effects.is_empty());
    assert_eq!(b1.start, None);
    let (b2, _) = db
        .store
        .plan_batch(&lease, Some(Cursor::int(250)), 150)
        .await
        .unwrap();
    assert_eq!(b2.start, Some(Cursor::int(100)));
    let throttle = [Event::Throttled {
        health: Health::Throttled { percent: 50 },
        reason: Some("lag 3s".into()),
    }];
    db.store
        .append(id, Expected::Any, Some(&lease), &throttle)
        .await
        .unwrap();
    let claimed = db.store.claim_batches("n", Some(id), 2, ttl).await.unwrap();
    db.store
        .fail_batch(
            &claimed[0].lease().unwrap(),
            "statement timeout",
            true,
            Some(10),
        )
        .await
        .unwrap();
    db.store
        .complete_batch(
            &claimed[1].lease().unwrap(),
            150,
            Duration::from_millis(9),
            None,
        )
        .await
        .unwrap();
    let retried = db.store.claim_batches("n", Some(id), 2, ttl).await.unwrap();
    assert_eq!(
        (retried.len(), retried[0].ordinal, retried[0].sub_batch_size),
        (1, 1, 10)
    );
    db.store
        .complete_batch(
            &retried[0].lease().unwrap(),
            100,
            Duration::from_millis(20),
            Some(200),
        )
        .await
        .unwrap();
    let clear = [Event::Throttled {
        health: Health::Normal,
        reason: None,
    }];
    db.store
        .append(id, Expected::Any, Some(&lease), &clear)
        .await
        .unwrap();
    let done = db
        .store
        .append(id, Expected::Any, Some(&lease), &[Event::Finished])
        .await
        .unwrap();
    let state = &done.record.state;
    assert_eq!(state.status, OperationStatus::Finished);
    assert_eq!(
        (
            state.rows_done,
            state.batches_planned,
            state.batches_succeeded,
            state.batch_failures
        ),
        (250, 2, 2, 1)
    );
    assert_eq!(state.cursor, Some(Cursor::int(250)));
    assert_eq!(state.last_error.as_deref(), Some("statement timeout"));
    assert!(done.record.lease.is_none() && state.finished_at.is_some());
    assert_eq!(
        db.store.replay(id).await.unwrap(),
        db.store.operation(id).await.unwrap().state
    );
    let kinds: Vec<&str> = db
        .store
        .events(id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.kind())
        .collect();
    assert_eq!(
        kinds,
        [
            "created",
            "started",
            "batch_planned",
            "batch_planned",
            "throttled",
            "batch_failed",
            "batch_succeeded",
            "batch_succeeded",
            "throttled",
            "finished"
        ]
    );
}

async fn operator_retry_requeues_failed_batches(db: &TestDb) {
    let id = db.store.enqueue(spec("t")).await.unwrap().id;
    let ttl = Duration::from_secs(600);
    let lease = common::claim_lease(&db.store, "n", ttl).await;
    db.store
        .plan_batch(&lease, Some(Cursor::int(100)), 100)
        .await
        .unwrap();
    let batch = db
        .store
        .claim_batches("n", Some(id), 1, ttl)
        .await
        .unwrap()
        .remove(0);
    db.store
        .fail_batch(&batch.lease().unwrap(), "deadlock detected", false, None)
        .await
        .unwrap();
    let failed = db
        .store
        .append(
            id,
            Expected::Any,
            Some(&lease),
            &[Event::Failed {
                error: "deadlock detected".into(),
            }],
        )
        .await
        .unwrap();
    assert_eq!(failed.record.state.status, OperationStatus::Failed);
    assert_eq!(
        db.store.batches(id).await.unwrap()[0].status,
        BatchStatus::Failed
    );
    // Failed operations are not claimable until retried.
    assert!(
        db.store
            .claim_operations("m", 1, ttl)
            .await
            .unwrap()
            .is_empty()
    );
    db.store
        .append(id, Expected::Any, None, &[Event::Retried])
        .await
        .unwrap();
    assert_eq!(
        db.store.batches(id).await.unwrap()[0].status,
        BatchStatus::Pending
    );
    let again = db.store.claim_operations("m", 1, ttl).await.unwrap();
    assert_eq!(again[0].record.state.status, OperationStatus::Running);
    let batch = db
        .store
        .claim_batches("m", Some(id), 1, ttl)
        .await
        .unwrap()
        .remove(0);
    assert_eq!((batch.ordinal, batch.attempts), (1, 2));
    db.store.verify(id).await.unwrap();
}

async fn corrupt_or_unknown_payload_names_operation_and_seq(db: &TestDb) {
    let broken = db.store.enqueue(spec("a")).await.unwrap().id;
    let healthy = db.store.enqueue(spec("b")).await.unwrap().id;
    db.store
        .claim_operations("n", 2, Duration::from_secs(60))
        .await
        .unwrap();
    let garbage = if db.backend == "postgres" {
        "'\\xffffff'::bytea"
    } else {
        "X'FFFFFF'"
    };
    db.execute(&format!(
        "UPDATE sluice_events SET payload = {garbage} WHERE operation_id = {broken} AND seq = 2"
    ))
    .await;
    let err = db.store.events(broken, 0).await.unwrap_err();
    assert!(
        matches!(err, StoreError::CorruptEvent { operation_id, seq: 2, .. } if operation_id == broken),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains(&format!("operation {broken}, event 2")),
        "{err}"
    );
    // Other operations are unaffected.
    assert_eq!(db.store.events(healthy, 0).await.unwrap().len(), 2);
    db.store.verify(healthy).await.unwrap();
    // The broken operation can still be stopped: appends never decode old events.
    let failed = operator(
        db,
        broken,
        Event::Failed {
            error: err.to_string(),
        },
    )
    .await;
    assert_eq!(failed.record.state.status, OperationStatus::Failed);
    // A payload from a newer format version is reported as such.
    db.execute(&format!(
        "UPDATE sluice_events SET format_version = 42 WHERE operation_id = {healthy} AND seq = 1"
    ))
    .await;
    let err = db.store.replay(healthy).await.unwrap_err();
    assert!(
        err.to_string().contains("unknown event format version 42"),
        "{err}"
    );
}

async fn retention_prunes_old_terminal_batches_in_chunks_only(db: &TestDb) {
    let (store, clock) = with_clock(db);
    let ttl = Duration::from_secs(600);
    let old = store.enqueue(spec("old")).await.unwrap().id;
    let active = store.enqueue(spec("active")).await.unwrap().id;
    for claimed in store.claim_operations("n", 2, ttl).await.unwrap() {
        let lease = claimed.record.lease.unwrap();
        for i in 1..=7 {
            store
                .plan_batch(&lease, Some(Cursor::int(i * 10)), 10)
                .await
                .unwrap();
        }
    }
    for batch in store.claim_batches("n", Some(old), 100, ttl).await.unwrap() {
        store
            .complete_batch(&batch.lease().unwrap(), 10, Duration::from_millis(1), None)
            .await
            .unwrap();
    }
    store
        .append(old, Expected::Any, None, &[Event::Finished])
        .await
        .unwrap();
    let events_before = db.scalar("SELECT COUNT(*) FROM sluice_events").await;
    // Not old enough yet.
    assert_eq!(store.prune(Duration::from_secs(3600), 3).await.unwrap(), 0);
    clock.advance(3_601_000);
    assert_eq!(store.prune(Duration::from_secs(3600), 3).await.unwrap(), 7);
    assert!(store.batches(old).await.unwrap().is_empty());
    assert_eq!(
        store.batches(active).await.unwrap().len(),
        7,
        "active operation untouched"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_events").await,
        events_before,
        "event logs untouched"
    );
    store.verify(old).await.unwrap();
    assert_eq!(store.prune(Duration::from_secs(3600), 3).await.unwrap(), 0);
}

async fn database_constraints_refuse_impossible_rows(db: &TestDb) {
    let id = db.store.enqueue(spec("t")).await.unwrap().id;
    for sql in [
        format!("UPDATE sluice_operations SET status = 'exploded' WHERE id = {id}"),
        format!("UPDATE sluice_operations SET status = 'finished' WHERE id = {id}"), // finished without finished_at
        format!("UPDATE sluice_operations SET batch_size = 0 WHERE id = {id}"),
        format!("UPDATE sluice_operations SET batches_succeeded = 5 WHERE id = {id}"),
        format!("UPDATE sluice_operations SET lease_owner = 'x' WHERE id = {id}"), // a lease on a pending operation
        format!(
            "INSERT INTO sluice_events (operation_id, seq, kind, recorded_at, format_version, payload) SELECT operation_id, seq, kind, recorded_at, format_version, payload FROM sluice_events WHERE operation_id = {id}"
        ),
    ] {
        assert!(
            db.try_execute(&sql).await.is_err(),
            "the database accepted: {sql}"
        );
    }
    db.store.verify(id).await.unwrap();
}

async fn claims_prefer_user_operations_then_priority(db: &TestDb) {
    let mut scheduled = spec("s");
    scheduled.origin = sluice_store::Origin::Schedule;
    scheduled.priority = 100;
    let s = db.store.enqueue(scheduled).await.unwrap().id;
    let low = db.store.enqueue(spec("low")).await.unwrap().id;
    let mut urgent = spec("high");
    urgent.priority = 5;
    let high = db.store.enqueue(urgent).await.unwrap().id;
    let mut order = Vec::new();
    for _ in 0..3 {
        let claimed = db
            .store
            .claim_operations("n", 1, Duration::from_secs(60))
            .await
            .unwrap();
        order.push(claimed[0].record.id);
    }
    assert_eq!(order, vec![high, low, s]);
    let listed = db
        .store
        .list(&ListFilter {
            status: Some(OperationStatus::Running),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 3);
}

async fn sub_batch_change_and_record_commit_together_or_not_at_all(db: &TestDb) {
    use sluice_target::{Ident, SqlValue, Statement};
    db.execute("CREATE TABLE items (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)")
        .await;
    db.execute("INSERT INTO items (id, n) SELECT v, 0 FROM (SELECT 1 AS v UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4) s").await;
    let (store, clock) = with_clock(db);
    let id = store.enqueue(spec("items")).await.unwrap().id;
    let ttl = Duration::from_secs(10);
    let lease = common::claim_lease(&store, "p", Duration::from_secs(600)).await;
    store
        .plan_batch(&lease, Some(Cursor::int(4)), 4)
        .await
        .unwrap();
    let a = store.claim_batches("a", Some(id), 1, ttl).await.unwrap()[0]
        .lease()
        .unwrap();
    let table = Ident::parse("items").unwrap();
    let bump = |lo: i64, hi: i64| {
        Statement::new("UPDATE ")
            .ident(&table)
            .push(" SET n = n + 1 WHERE id > ")
            .value(SqlValue::Int(lo))
            .push(" AND id <= ")
            .value(SqlValue::Int(hi))
    };
    // Worker A commits its first sub-batch: the change and the progress record together.
    let mut tx = store.begin_sub_batch(&a, None).await.unwrap();
    assert_eq!(tx.execute(&bump(0, 2)).await.unwrap(), 2);
    tx.commit(Some(&Cursor::int(2)), 2).await.unwrap();
    // A runs the same sub-batch again, as a worker that heard a fault while
    // its commit went through would: its record finds the batch's progress
    // moved on, and nothing of it is kept.
    let mut again = store.begin_sub_batch(&a, None).await.unwrap();
    assert_eq!(again.execute(&bump(0, 2)).await.unwrap(), 2);
    assert!(matches!(
        again.commit(Some(&Cursor::int(2)), 2).await,
        Err(StoreError::ProgressMoved { .. })
    ));
    assert_eq!(
        db.scalar("SELECT CAST(SUM(n) AS BIGINT) FROM items").await,
        2
    );
    // A stalls; B takes the batch over and continues from the recorded progress.
    clock.advance(11_000);
    let b_batch = store
        .claim_batches("b", Some(id), 1, ttl)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        (b_batch.progress.clone(), b_batch.rows_affected),
        (Some(Cursor::int(2)), 2)
    );
    // A's late second sub-batch is rolled back, data change included.
    let mut late = store
        .begin_sub_batch(&a, Some(&Cursor::int(2)))
        .await
        .unwrap();
    late.execute(&bump(2, 4)).await.unwrap();
    assert!(matches!(
        late.commit(Some(&Cursor::int(4)), 2).await,
        Err(StoreError::BatchLeaseLost { .. })
    ));
    assert_eq!(
        db.scalar("SELECT CAST(SUM(n) AS BIGINT) FROM items").await,
        2
    );
    let b = b_batch.lease().unwrap();
    let mut tx = store
        .begin_sub_batch(&b, Some(&Cursor::int(2)))
        .await
        .unwrap();
    tx.execute(&bump(2, 4)).await.unwrap();
    tx.commit(Some(&Cursor::int(4)), 2).await.unwrap();
    store
        .complete_batch(&b, 4, Duration::from_millis(1), None)
        .await
        .unwrap();
    // Every row changed exactly once.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items WHERE n = 1").await, 4);
    // Planning reads: the next key after a cursor, and nothing past the end.
    let next_key = |after: i64| {
        Statement::new("SELECT id FROM ")
            .ident(&table)
            .push(" WHERE id > ")
            .value(SqlValue::Int(after))
            .push(" ORDER BY id LIMIT 1")
    };
    assert_eq!(
        store.target().fetch_cursor(&next_key(2), 1).await.unwrap(),
        Some(Cursor::int(3))
    );
    assert_eq!(
        store.target().fetch_cursor(&next_key(4), 1).await.unwrap(),
        None
    );
    let reset = Statement::new("UPDATE ")
        .ident(&table)
        .push(" SET n = ")
        .value(SqlValue::Int(0));
    assert_eq!(store.target().execute(&reset).await.unwrap(), 4);
    assert_eq!(store.operation(id).await.unwrap().state.rows_done, 4);
}

async fn bulk_enqueue_writes_chunks_keeps_uniqueness_and_replays(db: &TestDb) {
    // One operation already active; the bulk repeats its identity once and
    // repeats one of its own identities, across more than two chunks.
    let active = db
        .store
        .enqueue(spec("todos").with_arguments(&json!({"user": 5})))
        .await
        .unwrap();
    let n = Store::ENQUEUE_CHUNK * 2 + 37;
    let mut specs: Vec<OperationSpec> = (0..n)
        .map(|i| {
            let mut s = spec("todos").with_arguments(&json!({"user": 1_000 + i}));
            s.priority = (i % 7) as i32;
            s.trace_context =
                (i == 3).then(|| "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
            s
        })
        .collect();
    specs[10] = spec("todos").with_arguments(&json!({"user": 5}));
    specs[n - 1] = specs[20].clone();
    let enqueued = db.store.enqueue_many(&specs).await.unwrap();
    assert_eq!(enqueued.len(), n);
    assert_eq!(enqueued[10].id, active.id);
    assert!(!enqueued[10].created);
    assert_eq!(enqueued[n - 1].id, enqueued[20].id);
    assert!(enqueued[20].created && !enqueued[n - 1].created);
    let created: Vec<i64> = enqueued
        .iter()
        .filter(|e| e.created)
        .map(|e| e.id)
        .collect();
    assert_eq!(created.len(), n - 2);
    let distinct: std::collections::HashSet<i64> = created.iter().copied().collect();
    assert_eq!(distinct.len(), created.len(), "every created id is new");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        (n - 1) as i64
    );
    // Every new operation has exactly its `created` event and replays.
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_events WHERE seq = 1 AND kind = 'created'")
            .await,
        (n - 1) as i64
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_events").await,
        (n - 1) as i64
    );
    for (i, e) in enqueued.iter().enumerate().step_by(97) {
        db.store.verify(e.id).await.unwrap();
        let record = db.store.operation(e.id).await.unwrap();
        assert_eq!(record.state.status, OperationStatus::Pending);
        if i != 10 {
            assert_eq!(record.state.priority, (i % 7) as i32);
            assert_eq!(
                record.state.arguments,
                format!("{{\"user\":{}}}", 1_000 + i)
            );
        }
    }
    let traced = db.store.operation(enqueued[3].id).await.unwrap();
    assert_eq!(traced.state.trace_context, specs[3].trace_context);
    // Again with the same specs: nothing new (uniqueness), same ids.
    let again = db.store.enqueue_many(&specs).await.unwrap();
    assert!(again.iter().all(|e| !e.created));
    assert_eq!(
        again.iter().map(|e| e.id).collect::<Vec<_>>(),
        enqueued.iter().map(|e| e.id).collect::<Vec<_>>()
    );
    // One invalid spec anywhere: refused before anything is written.
    let mut bad: Vec<OperationSpec> = (0..5)
        .map(|i| spec("todos").with_arguments(&json!({"fresh": i})))
        .collect();
    bad[4].sub_batch_size = 0;
    assert!(matches!(
        db.store.enqueue_many(&bad).await,
        Err(StoreError::InvalidSpec(_))
    ));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        (n - 1) as i64
    );
}

/// `Store::run_sub_batch_statement` on every path: SQLite's transaction,
/// PostgreSQL inside `BEGIN; SET LOCAL`, and PostgreSQL's single statement on
/// sessions bounded by `statement_timeout`. A stalled holder's late statement
/// and a statement that fails by itself both keep nothing; the holder's
/// statements commit with their progress record.
async fn one_statement_sub_batches_keep_the_change_and_its_record_together(db: &TestDb) {
    use sluice_target::{Ident, SqlValue, Statement};
    let clock = ManualClock::new(1_700_000_000_000);
    let stores = sub_batch_stores(db, &clock).await;
    let timeout = Duration::from_secs(1);
    for (round, (name, store)) in stores.iter().enumerate() {
        let table = Ident::parse(&format!("items_{round}")).unwrap();
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
            table = table.quoted()
        ))
        .await;
        db.execute(&format!(
            "INSERT INTO {} (id, n) SELECT v, 0 FROM (SELECT 1 AS v UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4) s",
            table.quoted()
        ))
        .await;
        let total = format!("SELECT CAST(SUM(n) AS BIGINT) FROM {}", table.quoted());
        let sum = || db.scalar(&total);
        let ttl = Duration::from_secs(10);
        let (id, a) = batch_held_by_a(store, spec(table.name()), Some(Cursor::int(4)), 4).await;
        let bump = |lo: i64, hi: i64| {
            Statement::new("UPDATE ")
                .ident(&table)
                .push(" SET n = n + 1 WHERE id > ")
                .value(SqlValue::Int(lo))
                .push(" AND id <= ")
                .value(SqlValue::Int(hi))
        };
        let changed = store
            .run_sub_batch_statement(&a, &bump(0, 2), None, Some(&Cursor::int(2)), timeout)
            .await
            .unwrap();
        assert_eq!(changed, 2, "{name}");
        // The same sub-batch again (its commit's answer lost): refused
        // whole, nothing kept.
        let again = store
            .run_sub_batch_statement(&a, &bump(0, 2), None, Some(&Cursor::int(2)), timeout)
            .await;
        assert!(
            matches!(again, Err(StoreError::ProgressMoved { .. })),
            "{name}: {again:?}"
        );
        assert_eq!(
            sum().await,
            2,
            "{name}: the repeated change was rolled back"
        );
        // A stalls; B takes over from the recorded progress.
        clock.advance(11_000);
        let taken = store
            .claim_batches("b", Some(id), 1, ttl)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(
            (taken.progress.clone(), taken.rows_affected),
            (Some(Cursor::int(2)), 2),
            "{name}"
        );
        // A's late statement is refused whole: no change, no record.
        let late = store
            .run_sub_batch_statement(
                &a,
                &bump(2, 4),
                Some(&Cursor::int(2)),
                Some(&Cursor::int(4)),
                timeout,
            )
            .await;
        assert!(
            matches!(late, Err(StoreError::BatchLeaseLost { .. })),
            "{name}: {late:?}"
        );
        assert_eq!(sum().await, 2, "{name}: the late change was rolled back");
        let b = taken.lease().unwrap();
        // A statement failing by itself (here dividing by zero too) is its
        // own error, not a lost lease, and keeps nothing.
        let broken = Statement::new("UPDATE ")
            .ident(&table)
            .push(" SET n = n / 0 WHERE id > ")
            .value(SqlValue::Int(2));
        if db.backend == "postgres" {
            let failed = store
                .run_sub_batch_statement(
                    &b,
                    &broken,
                    Some(&Cursor::int(2)),
                    Some(&Cursor::int(4)),
                    timeout,
                )
                .await;
            assert!(
                matches!(failed, Err(StoreError::Database(_))),
                "{name}: {failed:?}"
            );
            assert_eq!(sum().await, 2, "{name}");
        }
        store
            .run_sub_batch_statement(
                &b,
                &bump(2, 4),
                Some(&Cursor::int(2)),
                Some(&Cursor::int(4)),
                timeout,
            )
            .await
            .unwrap();
        let batch = store.batches(id).await.unwrap().remove(0);
        assert_eq!(
            (batch.progress, batch.rows_affected),
            (Some(Cursor::int(4)), 4),
            "{name}"
        );
        assert_eq!(
            db.scalar(&format!(
                "SELECT COUNT(*) FROM {} WHERE n = 1",
                table.quoted()
            ))
            .await,
            4,
            "{name}: every row changed exactly once"
        );
        // PostgreSQL stops a statement running over the timeout (57014).
        if db.backend == "postgres" {
            let slow = Statement::new("UPDATE ")
                .ident(&table)
                .push(" SET n = n + (SELECT 0 FROM pg_sleep(3)) WHERE id > ")
                .value(SqlValue::Int(3));
            let stopped = store
                .run_sub_batch_statement(&b, &slow, Some(&Cursor::int(4)), None, timeout)
                .await;
            let code = match &stopped {
                Err(StoreError::Database(e)) => e
                    .as_database_error()
                    .and_then(|d| d.code())
                    .map(|c| c.to_string()),
                _ => None,
            };
            assert_eq!(code.as_deref(), Some("57014"), "{name}: {stopped:?}");
            assert_eq!(sum().await, 4, "{name}");
        }
    }
}

/// `Store::run_loop_sub_batch_statement` on every path (SQLite's
/// transaction, PostgreSQL's transaction, PostgreSQL's one fenced statement
/// on bounded sessions), on PostgreSQL both for a statement without a
/// guard (the fence appended to its `WHERE`) and for one with a guard (the
/// fence in its place, as the runtime's loop statements have it): full
/// sub-batches record `limit` rows with the change; the scope's last,
/// smaller one leaves the batch's count exact; an empty one records
/// nothing; a stalled holder's late statement deletes nothing and is told
/// its lease is lost.
async fn loop_sub_batches_record_their_exact_count_without_returning(db: &TestDb) {
    use sluice_target::Ident;
    let clock = ManualClock::new(1_700_000_000_000);
    let stores = sub_batch_stores(db, &clock).await;
    let timeout = Duration::from_secs(1);
    let forms = stores.iter().flat_map(|(name, store)| {
        let guards: &[bool] = match store.backend() {
            sluice_target::Backend::Postgres(_) => &[false, true],
            sluice_target::Backend::Sqlite(_) | sluice_target::Backend::MySql(_) => &[false],
        };
        guards.iter().map(move |guarded| (*name, store, *guarded))
    });
    for (round, (name, store, guarded)) in forms.enumerate() {
        let table = Ident::parse(&format!("aged_{round}")).unwrap();
        db.execute(&format!(
            "CREATE TABLE {} (id BIGINT PRIMARY KEY, old BIGINT NOT NULL)",
            table.quoted()
        ))
        .await;
        // Ten rows in scope (old = 1), two out of it.
        db.execute(&format!(
            "INSERT INTO {} (id, old) SELECT v, CASE WHEN v > 10 THEN 0 ELSE 1 END FROM \
             (SELECT 1 AS v UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 \
              UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
              UNION ALL SELECT 9 UNION ALL SELECT 10 UNION ALL SELECT 11 UNION ALL SELECT 12) s",
            table.quoted()
        ))
        .await;
        let left = format!("SELECT COUNT(*) FROM {}", table.quoted());
        let delete = |limit: i64| loop_delete_in(&table, " WHERE old = 1 LIMIT ", limit, guarded);
        let name = format!("{name}{}", if guarded { ", guarded" } else { "" });
        let ttl = Duration::from_secs(10);
        let (id, a) = batch_held_by_a(store, loop_spec(table.name()), None, 100).await;
        let count = |store: &Store| {
            let store = store.clone();
            async move { store.batches(id).await.unwrap().remove(0).rows_affected }
        };
        // A pool worker's session: it keeps its connection between sub-batches.
        let mut session = store.sub_batch_session(true);
        let changed = session
            .run_loop_sub_batch_statement(&a, &delete(4), None, 4, timeout)
            .await
            .unwrap();
        assert_eq!((changed, count(store).await), (4, 4), "{name}: a full one");
        // A stalls; B takes the batch over with the count A recorded.
        clock.advance(11_000);
        let taken = store
            .claim_batches("b", Some(id), 1, ttl)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(taken.rows_affected, 4, "{name}");
        let late = session
            .run_loop_sub_batch_statement(&a, &delete(4), None, 4, timeout)
            .await;
        assert!(
            matches!(late, Err(StoreError::BatchLeaseLost { .. })),
            "{name}: {late:?}"
        );
        assert_eq!(
            db.scalar(&left).await,
            8,
            "{name}: the late delete kept nothing"
        );
        let b = taken.lease().unwrap();
        let full = session
            .run_loop_sub_batch_statement(&b, &delete(4), None, 4, timeout)
            .await
            .unwrap();
        // The scope's last sub-batch finds 2 of 4: the count stays exact.
        let last = session
            .run_loop_sub_batch_statement(&b, &delete(4), None, 4, timeout)
            .await
            .unwrap();
        let empty = session
            .run_loop_sub_batch_statement(&b, &delete(4), None, 4, timeout)
            .await
            .unwrap();
        assert_eq!((full, last, empty), (4, 2, 0), "{name}");
        assert_eq!(count(store).await, 10, "{name}: the batch counts what went");
        assert_eq!(db.scalar(&left).await, 2, "{name}: only rows in scope went");
        // An empty sub-batch under a lost lease is told so, too.
        clock.advance(11_000);
        store.claim_batches("c", Some(id), 1, ttl).await.unwrap();
        let lost = session
            .run_loop_sub_batch_statement(&b, &delete(4), None, 4, timeout)
            .await;
        assert!(
            matches!(lost, Err(StoreError::BatchLeaseLost { .. })),
            "{name}: {lost:?}"
        );
        assert_eq!(count(store).await, 10, "{name}");
    }
}

/// A session that keeps its connection (a pool worker's) runs its
/// sub-batches on it; when the server closes that connection, the next
/// sub-batch fails with nothing kept and the session lets the connection
/// go, so the one after runs, exactly once, on a fresh one. (A session that
/// took its connection from the pool for each statement would not fail:
/// the pool tests a connection as it hands it out.)
async fn a_kept_sub_batch_connection_is_let_go_when_the_server_closes_it(db: &TestDb) {
    let clock = ManualClock::new(1_700_000_000_000);
    let (_, store) = sub_batch_stores(db, &clock)
        .await
        .into_iter()
        .find(|(name, _)| *name == "bounded")
        .expect("a store with bounded sessions");
    let table = ids_table(db, "closed_under_a_session", 20).await;
    let delete = loop_delete(&table, " WHERE id > 0 LIMIT ", 4);
    let left = format!("SELECT COUNT(*) FROM {}", table.quoted());
    let (id, a) = batch_held_by_a(&store, loop_spec(table.name()), None, 100).await;
    let timeout = Duration::from_secs(1);
    let mut session = store.sub_batch_session(true);
    assert_eq!(
        session
            .run_loop_sub_batch_statement(&a, &delete, None, 4, timeout)
            .await
            .unwrap(),
        4
    );
    // The server process whose last statement was that sub-batch: the
    // session's connection (this table's name is in no other test).
    let serving = format!(
        "SELECT COALESCE(MAX(pid), 0)::BIGINT FROM pg_stat_activity \
         WHERE query LIKE '%{}%' AND pid <> pg_backend_pid()",
        table.name()
    );
    let pid = db.scalar(&serving).await;
    assert_ne!(
        pid, 0,
        "the session's connection is open after its sub-batch"
    );
    close_server_process(db, pid).await;

    let broken = session
        .run_loop_sub_batch_statement(&a, &delete, None, 4, timeout)
        .await;
    assert!(
        matches!(broken, Err(StoreError::Database(_))),
        "the closed connection fails the sub-batch: {broken:?}"
    );
    assert_eq!(
        db.scalar(&left).await,
        16,
        "the failed sub-batch kept nothing"
    );
    assert_eq!(
        session
            .run_loop_sub_batch_statement(&a, &delete, None, 4, timeout)
            .await
            .unwrap(),
        4,
        "the next sub-batch runs on a fresh connection"
    );
    assert_ne!(
        db.scalar(&serving).await,
        pid,
        "a new server process serves it"
    );
    assert_eq!(db.scalar(&left).await, 12);
    assert_eq!(
        store.batches(id).await.unwrap().remove(0).rows_affected,
        8,
        "the batch counts each sub-batch that was kept, once"
    );
}

/// A sub-batch that is a transaction (a custom operation's) runs on a
/// connection its session lends out and takes back: a committed one keeps
/// its change and its record; one dropped before its commit (cancelled)
/// keeps nothing, and the session's next sub-batch runs. On PostgreSQL the
/// session keeps the connection between them, as for one-statement
/// sub-batches: once the server closes it, the session's next sub-batch
/// meets it closed, and the one after runs on a new one.
async fn transaction_sub_batches_run_on_a_connection_their_session_lends(db: &TestDb) {
    use sluice_target::{Ident, SqlValue, Statement};
    let clock = ManualClock::new(1_700_000_000_000);
    let stores = sub_batch_stores(db, &clock).await;
    let (name, store) = stores.last().expect("a store");
    let table = Ident::parse("lent_marks").unwrap();
    db.execute(&format!(
        "CREATE TABLE {} (id BIGINT PRIMARY KEY, mark BIGINT NOT NULL DEFAULT 0)",
        table.quoted()
    ))
    .await;
    db.execute(&format!(
        "INSERT INTO {} (id) VALUES (1), (2), (3), (4)",
        table.quoted()
    ))
    .await;
    let (id, a) = batch_held_by_a(store, loop_spec(table.name()), None, 100).await;
    let timeout = Duration::from_secs(1);
    // The server process's id on PostgreSQL, a constant on SQLite.
    let set: &'static str = if db.backend == "postgres" {
        " SET mark = pg_backend_pid() WHERE id = "
    } else {
        " SET mark = 7 WHERE id = "
    };
    let mark = |row: i64| {
        Statement::new("UPDATE ")
            .ident(&table)
            .push(set)
            .value(SqlValue::Int(row))
    };
    let marked = |row: i64| format!("SELECT mark FROM {} WHERE id = {row}", table.quoted());
    let mut session = store.sub_batch_session(true);
    let lent_sub_batch = async |session: &mut sluice_store::SubBatchSession, row: i64| {
        let mut connection = session.connection(timeout).await.unwrap();
        let mut tx = connection.begin_sub_batch(&a, None, timeout).await.unwrap();
        assert_eq!(tx.execute(&mark(row)).await.unwrap(), 1);
        tx.commit(None, 1).await.unwrap();
        session.put_back(connection, true);
    };
    lent_sub_batch(&mut session, 1).await;
    let first = db.scalar(&marked(1)).await;
    assert_ne!(first, 0, "{name}: the committed sub-batch kept its change");

    // Cancelled before its commit: nothing kept, the connection not kept.
    {
        let mut connection = session.connection(timeout).await.unwrap();
        let mut tx = connection.begin_sub_batch(&a, None, timeout).await.unwrap();
        assert_eq!(tx.execute(&mark(2)).await.unwrap(), 1);
        drop(tx);
        session.put_back(connection, false);
    }
    assert_eq!(
        db.scalar(&marked(2)).await,
        0,
        "{name}: the dropped one kept nothing"
    );

    lent_sub_batch(&mut session, 3).await;
    if db.backend == "postgres" {
        // Kept: when the server closes it, the session's next sub-batch
        // meets it closed (a connection from the pool would have been
        // tested first) and fails; the one after runs on a new one.
        let kept = db.scalar(&marked(3)).await;
        close_server_process(db, kept).await;
        let mut connection = session.connection(timeout).await.unwrap();
        let begun = connection
            .begin_sub_batch(&a, None, timeout)
            .await
            .map(drop);
        assert!(
            matches!(begun, Err(StoreError::Database(_))),
            "{name}: the kept connection was used: {begun:?}"
        );
        session.put_back(connection, false);
        lent_sub_batch(&mut session, 2).await;
        let again = db.scalar(&marked(2)).await;
        assert!(again != 0 && again != kept, "{name}: {again} after {kept}");
    } else {
        lent_sub_batch(&mut session, 2).await;
        assert_ne!(db.scalar(&marked(2)).await, 0, "{name}: the next one ran");
    }
    let counted = store.batches(id).await.unwrap().remove(0);
    assert!(counted.rows_affected >= 3, "{name}: {counted:?}");
}

/// A session kept busy (sub-batches back to back, never idle) gives its
/// connection back once it has kept it as long as the pool lets a
/// connection live, and the pool closes it as over age: the server process
/// that served the first sub-batch ends while the sub-batches go on, each
/// counted once.
async fn a_busy_session_renews_its_connection_at_the_pool_lifetime(db: &TestDb) {
    let options = sluice_target::ConnectOptions {
        sub_batch_timeout: Some(Duration::from_secs(1)),
        max_lifetime: Some(Duration::from_millis(300)),
        ..sluice_target::ConnectOptions::default()
    };
    let clock = ManualClock::new(1_700_000_000_000);
    let store = Store::connect_with(&db.url, &options)
        .await
        .unwrap()
        .with_clock(Arc::new(clock));
    let table = ids_table(db, "renewed_under_a_session", 100000).await;
    let delete = loop_delete(&table, " WHERE id > 0 LIMIT ", 1);
    let (id, a) = batch_held_by_a(&store, loop_spec(table.name()), None, 100).await;
    let timeout = Duration::from_secs(1);
    let mut session = store.sub_batch_session(true);
    let mut deleted = session
        .run_loop_sub_batch_statement(&a, &delete, None, 1, timeout)
        .await
        .unwrap();
    let pid = db
        .scalar(&format!(
            "SELECT COALESCE(MAX(pid), 0)::BIGINT FROM pg_stat_activity \
             WHERE query LIKE 'WITH recorded AS %{}%' AND pid <> pg_backend_pid()",
            table.name()
        ))
        .await;
    assert_ne!(
        pid, 0,
        "the session's connection is open after its sub-batch"
    );
    let open = format!("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = {pid}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while db.scalar(&open).await == 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: the first connection is closed while the session stays busy"
        );
        deleted += session
            .run_loop_sub_batch_statement(&a, &delete, None, 1, timeout)
            .await
            .unwrap();
    }
    deleted += session
        .run_loop_sub_batch_statement(&a, &delete, None, 1, timeout)
        .await
        .unwrap();
    assert!(deleted > 2, "sub-batches ran meanwhile: {deleted}");
    assert_eq!(
        db.scalar(&format!("SELECT COUNT(*) FROM {}", table.quoted()))
            .await,
        100_000 - deleted as i64
    );
    assert_eq!(
        store.batches(id).await.unwrap().remove(0).rows_affected,
        deleted as i64,
        "the batch counts each sub-batch once, across the renewal"
    );
}

/// An in-memory SQLite store is its one connection: however short the
/// connection lifetime asked for, the pool never closes that connection
/// for its age (which would drop the database with it), so what was
/// written is still there after many lifetimes of use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_memory_store_outlives_the_connection_lifetime() {
    let lifetime = Duration::from_millis(50);
    let options = sluice_target::ConnectOptions {
        max_lifetime: Some(lifetime),
        ..sluice_target::ConnectOptions::default()
    };
    let store = Store::connect_with("sqlite::memory:", &options)
        .await
        .unwrap();
    let id = store.enqueue(spec("events")).await.unwrap().id;
    // Use the connection (each use gives it back to the pool, where an
    // over-age one would be closed) until it is four lifetimes old.
    let opened = std::time::Instant::now();
    let mut reads = 0;
    while opened.elapsed() < lifetime * 4 {
        let record = store.operation(id).await;
        assert!(
            record.is_ok(),
            "read {reads}, {:?} after opening: {record:?}",
            opened.elapsed()
        );
        reads += 1;
    }
    assert_eq!(
        store.operation(id).await.unwrap().state.status,
        OperationStatus::Pending
    );
}

/// On SQLite, a session's sub-batch cancelled while its `BEGIN IMMEDIATE`
/// waits for the write lock (as the runtime's timer cancels one; here a
/// `timeout`) leaves no connection inside that transaction once the lock
/// frees: the session's transaction is one sqlx tracks (which rolls back a
/// `BEGIN` answered after its future was gone), and a cancelled statement
/// gives its connection back to the pool, never to the session. So every
/// connection of the pool can then write, and the session's next
/// sub-batch runs. (A `BEGIN` sent as a plain statement would leave its
/// connection idle in the pool, holding the write lock.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_sqlite_sub_batch_leaves_no_connection_inside_its_transaction() {
    let db = TestDb::sqlite().await;
    let options = sluice_target::ConnectOptions {
        busy_timeout: Duration::from_secs(2),
        ..sluice_target::ConnectOptions::default()
    };
    let store = Store::connect_with(&db.url, &options).await.unwrap();
    let sluice_target::Backend::Sqlite(pool) = store.backend().clone() else {
        unreachable!("an SQLite store")
    };
    db.execute("CREATE TABLE cancelled (id INTEGER PRIMARY KEY)")
        .await;
    db.execute(
        "INSERT INTO cancelled (id) SELECT value FROM \
         (WITH RECURSIVE n(value) AS (SELECT 1 UNION ALL SELECT value + 1 FROM n WHERE value < 10) \
          SELECT value FROM n)",
    )
    .await;
    let table = sluice_target::Ident::parse("cancelled").unwrap();
    let delete = loop_delete(&table, " WHERE id > 0 LIMIT ", 2);
    let (id, lease) = batch_held_by_a(&store, loop_spec("cancelled"), None, 100).await;
    let timeout = Duration::from_secs(5);
    let mut session = store.sub_batch_session(true);
    let first = session
        .run_loop_sub_batch_statement(&lease, &delete, None, 2, timeout)
        .await;
    assert_eq!(
        first.unwrap(),
        2,
        "a first sub-batch, whose connection is kept"
    );

    let mut blocker = pool.acquire().await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(200),
        session.run_loop_sub_batch_statement(&lease, &delete, None, 2, timeout),
    )
    .await;
    assert!(cancelled.is_err(), "the sub-batch waits for the write lock");
    sqlx::query("ROLLBACK")
        .execute(&mut *blocker)
        .await
        .unwrap();
    drop(blocker);

    // Every connection the pool has or can open begins and ends a write.
    let mut connections = Vec::new();
    for _ in 0..pool.options().get_max_connections() {
        connections.push(pool.acquire().await.unwrap());
    }
    for (n, connection) in connections.iter_mut().enumerate() {
        let began = sqlx::Connection::begin_with(&mut **connection, "BEGIN IMMEDIATE").await;
        let write = began.unwrap_or_else(|e| panic!("connection {n} cannot write: {e}"));
        write.rollback().await.unwrap();
    }
    drop(connections);

    let next = session
        .run_loop_sub_batch_statement(&lease, &delete, None, 2, timeout)
        .await;
    assert_eq!(next.unwrap(), 2, "the session's next sub-batch runs");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM cancelled").await, 6);
    assert_eq!(
        store.batches(id).await.unwrap().remove(0).rows_affected,
        4,
        "the cancelled sub-batch kept nothing"
    );
    drop(session);
    store.close().await;
}

/// However many sessions want to keep a connection, together they keep at
/// most all but one of the store's sub-batch connections: on a store with
/// three, four keeping sessions and a one-off sub-batch all run, none
/// waiting out the pool's acquire timeout for a connection another keeps.
async fn sessions_keep_all_but_one_connection_between_them(db: &TestDb) {
    let options = sluice_target::ConnectOptions {
        max_connections: 3,
        acquire_timeout: Duration::from_secs(2),
        sub_batch_timeout: Some(Duration::from_secs(1)),
        ..sluice_target::ConnectOptions::default()
    };
    let store = Store::connect_with(&db.url, &options).await.unwrap();
    let table = ids_table(db, "kept_by_four", 100).await;
    let delete = loop_delete(&table, " WHERE id > 0 LIMIT ", 2);
    let (id, lease) = batch_held_by_a(&store, loop_spec(table.name()), None, 1_000).await;
    let timeout = Duration::from_secs(1);
    let mut sessions: Vec<_> = (0..4).map(|_| store.sub_batch_session(true)).collect();
    for round in 0..2 {
        for (n, session) in sessions.iter_mut().enumerate() {
            let changed = session
                .run_loop_sub_batch_statement(&lease, &delete, None, 2, timeout)
                .await;
            assert_eq!(changed.unwrap(), 2, "session {n}, round {round}");
        }
        let one_off = store
            .run_loop_sub_batch_statement(&lease, &delete, None, 2, timeout)
            .await;
        assert_eq!(one_off.unwrap(), 2, "a one-off beside them, round {round}");
    }
    assert_eq!(
        db.scalar(&format!("SELECT COUNT(*) FROM {}", table.quoted()))
            .await,
        100 - 2 * 10
    );
    assert_eq!(store.batches(id).await.unwrap().remove(0).rows_affected, 20);
    drop(sessions);
    store.close().await;
}

/// A loop batch's count is the same through every change of hands: given
/// back, its count stays with the batch and the next claim starts from it;
/// failed and retried, likewise; succeeded, the batch keeps the total its
/// holder reports, not that plus what its sub-batches counted.
async fn a_loop_batch_keeps_its_count_when_given_back_retried_or_done(db: &TestDb) {
    use sluice_target::Ident;
    let clock = ManualClock::new(1_700_000_000_000);
    let stores = sub_batch_stores(db, &clock).await;
    let timeout = Duration::from_secs(1);
    let ttl = Duration::from_secs(10);
    for (round, (name, store)) in stores.iter().enumerate() {
        let table = Ident::parse(&format!("kept_{round}")).unwrap();
        db.execute(&format!(
            "CREATE TABLE {} (id BIGINT PRIMARY KEY)",
            table.quoted()
        ))
        .await;
        db.execute(&format!(
            "INSERT INTO {} (id) SELECT a.v * 10 + b.v FROM \
             (SELECT 0 AS v UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) a, \
             (SELECT 0 AS v UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
              UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
              UNION ALL SELECT 8 UNION ALL SELECT 9) b",
            table.quoted()
        ))
        .await;
        let delete = loop_delete(&table, " WHERE id >= 0 LIMIT ", 4);
        let (id, a) = batch_held_by_a(store, loop_spec(table.name()), None, 100).await;
        let batch = || async { store.batches(id).await.unwrap().remove(0) };
        let run = |lease: sluice_store::BatchLease| {
            let delete = delete.clone();
            async move {
                store
                    .run_loop_sub_batch_statement(&lease, &delete, None, 4, timeout)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(run(a.clone()).await, 4, "{name}");
        assert_eq!(batch().await.rows_affected, 4, "{name}");

        store.release_batch(&a).await.unwrap();
        let given_back = batch().await;
        assert_eq!(given_back.status, BatchStatus::Pending, "{name}");
        assert_eq!(given_back.rows_affected, 4, "{name}: given back");

        let b = store
            .claim_batches("b", Some(id), 1, ttl)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(
            b.rows_affected, 4,
            "{name}: the claim starts from the count"
        );
        let b = b.lease().unwrap();
        assert_eq!(run(b.clone()).await, 4, "{name}");
        store.fail_batch(&b, "boom", true, None).await.unwrap();
        assert_eq!(batch().await.rows_affected, 8, "{name}: retried");

        let c = store
            .claim_batches("c", Some(id), 1, ttl)
            .await
            .unwrap()
            .remove(0);
        assert_eq!(c.rows_affected, 8, "{name}");
        let c = c.lease().unwrap();
        assert_eq!(run(c.clone()).await, 4, "{name}");
        assert_eq!(batch().await.rows_affected, 12, "{name}");
        store
            .complete_batch(&c, 12, Duration::from_millis(5), None)
            .await
            .unwrap();
        let done = batch().await;
        assert_eq!(done.status, BatchStatus::Succeeded, "{name}");
        assert_eq!(done.rows_affected, 12, "{name}: done, counted once");
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {}", table.quoted()))
                .await,
            28,
            "{name}: three sub-batches of four went"
        );
    }
}

/// A stalled holder's loop sub-batch racing another node's takeover, on
/// PostgreSQL's one-statement path: the batch's row lock orders them. While
/// a late sub-batch holds the batch row, a takeover skips the batch; once it
/// committed, the takeover starts from a count that includes it; a takeover that
/// holds the batch row first makes the late sub-batch, waiting for it, change
/// nothing and hear that its lease is lost. Every row goes once.
async fn a_late_loop_sub_batch_and_a_takeover_are_ordered_by_the_batch_row(db: &TestDb) {
    use sluice_target::{Backend, Ident};
    let Backend::Postgres(pool) = db.store.backend() else {
        unreachable!("a PostgreSQL test")
    };
    let clock = ManualClock::new(1_700_000_000_000);
    let (_, store) = sub_batch_stores(db, &clock)
        .await
        .into_iter()
        .find(|(name, _)| *name == "bounded")
        .expect("bounded sessions on PostgreSQL");
    let ttl = Duration::from_secs(10);
    let table = Ident::parse("raced").unwrap();
    db.execute("CREATE TABLE raced (id BIGINT PRIMARY KEY)")
        .await;
    db.execute("INSERT INTO raced SELECT generate_series(1, 20)")
        .await;
    let left = || db.scalar("SELECT COUNT(*) FROM raced");
    let delete = loop_delete(&table, " WHERE id >= 0 ORDER BY id LIMIT ", 4);
    let late = |lease: sluice_store::BatchLease| {
        let (store, delete) = (store.clone(), delete.clone());
        tokio::spawn(async move {
            store
                .run_loop_sub_batch_statement(&lease, &delete, None, 4, Duration::from_secs(30))
                .await
        })
    };
    // Sessions waiting, directly or through one other, on `holder`'s transaction.
    let waiting_on = |holder: i32| async move {
        db.scalar(&format!(
            "SELECT COUNT(*) FROM pg_stat_activity a WHERE {holder} = ANY (pg_blocking_pids(a.pid)) \
             OR EXISTS (SELECT 1 FROM pg_stat_activity z WHERE {holder} = ANY (pg_blocking_pids(z.pid)) \
             AND z.pid = ANY (pg_blocking_pids(a.pid)))"
        ))
        .await
    };
    let (id, a) = batch_held_by_a(&store, loop_spec("raced"), None, 100).await;
    assert_eq!(late(a.clone()).await.unwrap().unwrap(), 4);

    // The late sub-batch holds the batch row (its change waits on row 5,
    // held here): a takeover skips the batch rather than wait for it.
    let mut row = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *row)
        .await
        .unwrap();
    sqlx::query("SELECT id FROM raced WHERE id = 5 FOR UPDATE")
        .execute(&mut *row)
        .await
        .unwrap();
    clock.advance(11_000);
    let a_late = late(a.clone());
    common::until("the late sub-batch waits on row 5", || async {
        waiting_on(holder).await == 1
    })
    .await;
    let skipped = store.claim_batches("b", Some(id), 1, ttl).await.unwrap();
    assert!(
        skipped.is_empty(),
        "a batch being written is not taken over"
    );
    row.commit().await.unwrap();
    assert_eq!(
        a_late.await.unwrap().unwrap(),
        4,
        "the late sub-batch held on"
    );
    let b = store
        .claim_batches("b", Some(id), 1, ttl)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(b.rows_affected, 8, "the takeover counts the late sub-batch");
    assert_eq!(left().await, 12);

    // A takeover holds the batch row (its claim not yet committed); B's
    // late sub-batch waits for it, then finds its lease gone.
    let b = b.lease().unwrap();
    let mut claim = pool.begin().await.unwrap();
    let holder: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *claim)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE sluice_batches SET claimed_by = 'c', lease_epoch = lease_epoch + 1, \
         attempts = attempts + 1 WHERE id = $1",
    )
    .bind(b.batch_id)
    .execute(&mut *claim)
    .await
    .unwrap();
    let b_late = late(b.clone());
    common::until("the late sub-batch waits on the batch row", || async {
        waiting_on(holder).await == 1
    })
    .await;
    claim.commit().await.unwrap();
    let lost = b_late.await.unwrap();
    assert!(
        matches!(lost, Err(StoreError::BatchLeaseLost { .. })),
        "{lost:?}"
    );
    assert_eq!(left().await, 12, "the late sub-batch changed nothing");
    let batch = store.batches(id).await.unwrap().remove(0);
    assert_eq!((batch.rows_affected, batch.lease_epoch), (8, b.epoch + 1));
}

/// The stores a one-statement sub-batch can go through, on `clock`: the test
/// database's own (a transaction on either backend) and, on PostgreSQL, one
/// with sessions bounded by a 1 s `statement_timeout` (one statement).
async fn sub_batch_stores(db: &TestDb, clock: &ManualClock) -> Vec<(&'static str, Store)> {
    let mut stores = vec![(
        "plain",
        db.store.clone().with_clock(Arc::new(clock.clone())),
    )];
    if db.backend == "postgres" {
        let options = sluice_target::ConnectOptions {
            sub_batch_timeout: Some(Duration::from_secs(1)),
            ..sluice_target::ConnectOptions::default()
        };
        let bounded = Store::connect_with(&db.url, &options).await.unwrap();
        stores.push(("bounded", bounded.with_clock(Arc::new(clock.clone()))));
    }
    stores
}

/// A PostgreSQL table `name` of ids 1 to `rows` (a loop sub-batch's target).
async fn ids_table(db: &TestDb, name: &str, rows: i64) -> sluice_target::Ident {
    let table = sluice_target::Ident::parse(name).unwrap();
    db.execute(&format!(
        "CREATE TABLE {} AS SELECT g::BIGINT AS id FROM generate_series(1, {rows}) g",
        table.quoted()
    ))
    .await;
    table
}

/// Has the PostgreSQL server close the connection served by process
/// `pid`, and waits, with a deadline, until that process is gone.
async fn close_server_process(db: &TestDb, pid: i64) {
    db.execute(&format!("SELECT pg_terminate_backend({pid})"))
        .await;
    common::until("the server closes the connection", || async {
        db.scalar(&format!(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = {pid}"
        ))
        .await
            == 0
    })
    .await;
}

/// `DELETE FROM table WHERE id IN (SELECT id FROM table <scope> $1)`.
fn loop_delete(
    table: &sluice_target::Ident,
    scope_then_limit: &'static str,
    limit: i64,
) -> sluice_target::Statement {
    loop_delete_in(table, scope_then_limit, limit, false)
}

/// [`loop_delete`], or with `guarded` PostgreSQL's loop form, `… WHERE id =
/// ANY (CASE WHEN <guard> THEN ARRAY(SELECT id …) END)`, whose guard a
/// fenced one-statement sub-batch puts its fence in.
fn loop_delete_in(
    table: &sluice_target::Ident,
    scope_then_limit: &'static str,
    limit: i64,
    guarded: bool,
) -> sluice_target::Statement {
    let head = sluice_target::Statement::new("DELETE FROM ").ident(table);
    let (head, close) = if guarded {
        let pick = head.push(" WHERE id = ANY (CASE WHEN ").guard();
        (pick.push(" THEN ARRAY(SELECT id FROM "), ") END)")
    } else {
        // The pick in a derived table, which MySQL accepts with a LIMIT.
        (
            head.push(" WHERE id IN (SELECT id FROM (SELECT id FROM "),
            ") AS picked)",
        )
    };
    head.ident(table)
        .push(scope_then_limit)
        .value(sluice_target::SqlValue::Int(limit))
        .push(close)
}

/// Enqueues `spec`, plans its first batch (to `end`, `size` rows) under
/// node `p`'s operation lease, and claims that batch for node `a` for 10 s;
/// returns the operation's id and `a`'s batch lease.
async fn batch_held_by_a(
    store: &Store,
    spec: OperationSpec,
    end: Option<Cursor>,
    size: i64,
) -> (i64, sluice_store::BatchLease) {
    let id = store.enqueue(spec).await.unwrap().id;
    let lease = common::claim_lease(store, "p", Duration::from_secs(600)).await;
    store.plan_batch(&lease, end, size).await.unwrap();
    let claimed = store
        .claim_batches("a", Some(id), 1, Duration::from_secs(10))
        .await
        .unwrap();
    (id, claimed[0].lease().unwrap())
}

async fn owner_completes_and_plans_the_next_batch_in_one_commit(db: &TestDb) {
    let (store, clock) = with_clock(db);
    let id = store.enqueue(spec("t")).await.unwrap().id;
    let owner = common::claim_lease(&store, "owner", Duration::from_secs(1)).await;
    let next = |end: i64, size: i64| NextBatch {
        end: Some(Cursor::int(end)),
        size,
        ttl: Duration::from_secs(600),
    };
    // Planned and claimed at once: running, first attempt, no one else's.
    let (first, _) = store
        .plan_claimed_batch(&owner, &next(100, 100))
        .await
        .unwrap();
    let first = first.lease().expect("claimed as planned");
    assert_eq!((first.ordinal, first.epoch, first.attempt), (1, 1, 1));
    assert_eq!(first.node, "owner");
    let others = store
        .claim_batches("other", Some(id), 5, Duration::from_secs(600))
        .await
        .unwrap();
    assert!(others.is_empty(), "{others:?}");

    // The outcome and the next batch, one transaction.
    let (done, second) = store
        .complete_and_plan_batch(
            &first,
            100,
            Duration::from_millis(5),
            Some(120),
            &owner,
            &next(220, 120),
        )
        .await
        .unwrap();
    let state = &done.record.state;
    assert_eq!(
        (
            state.rows_done,
            state.batches_succeeded,
            state.batches_planned
        ),
        (100, 1, 2)
    );
    assert_eq!(
        (state.batch_size, state.cursor.clone()),
        (120, Some(Cursor::int(220)))
    );
    let second = second.expect("the next batch is planned with the outcome");
    assert_eq!(
        (second.ordinal, second.start.clone(), second.end.clone()),
        (2, Some(Cursor::int(100)), Some(Cursor::int(220)))
    );
    let second = second.lease().expect("claimed as planned");
    assert_eq!(
        (second.epoch, second.attempt, second.node.as_str()),
        (1, 1, "owner")
    );
    let kinds: Vec<&str> = store
        .events(id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.kind())
        .collect();
    assert_eq!(
        kinds[kinds.len() - 2..],
        ["batch_succeeded", "batch_planned"]
    );

    // Taken over meanwhile: the outcome is recorded alone, nothing planned.
    clock.advance(2_000);
    let usurper = common::claim_lease(&store, "usurper", Duration::from_secs(600)).await;
    let (done, third) = store
        .complete_and_plan_batch(
            &second,
            120,
            Duration::from_millis(5),
            None,
            &owner,
            &next(340, 120),
        )
        .await
        .unwrap();
    assert!(third.is_none(), "{third:?}");
    assert_eq!(
        (
            done.record.state.batches_succeeded,
            done.record.state.batches_planned
        ),
        (2, 2)
    );
    assert_eq!(store.batches(id).await.unwrap().len(), 2);
    assert!(matches!(
        store.plan_claimed_batch(&owner, &next(340, 120)).await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert_eq!(store.batches(id).await.unwrap().len(), 2);

    // A claim given back unused does not count as an attempt.
    let (third, _) = store
        .plan_claimed_batch(&usurper, &next(340, 120))
        .await
        .unwrap();
    store.release_batch(&third.lease().unwrap()).await.unwrap();
    let again = store
        .claim_batches("usurper", Some(id), 5, Duration::from_secs(600))
        .await
        .unwrap();
    let again = again[0].lease().unwrap();
    assert_eq!((again.ordinal, again.epoch, again.attempt), (3, 2, 1));
    store.verify(id).await.unwrap();
}

/// `fail_batch_and_operation`: on a running operation the batch and the
/// operation fail in one append; on one paused meanwhile the batch waits as
/// a retry for the resume; on one failed already (another node's batch) the
/// batch's failure is recorded alone. The logs replay.
async fn a_batch_spending_its_attempts_fails_its_operation_in_the_same_commit(db: &TestDb) {
    let ttl = Duration::from_secs(600);
    let running_batch = |id: i64, end: i64| {
        let store = db.store.clone();
        async move {
            let lease = common::claim_lease(&store, "n", ttl).await;
            store
                .plan_batch(&lease, Some(Cursor::int(end)), 100)
                .await
                .unwrap();
            let batch = store.claim_batches("n", Some(id), 1, ttl).await.unwrap();
            (lease, batch[0].lease().unwrap())
        }
    };

    // Running: both events, one append, the batch failed for good.
    let id = db.store.enqueue(spec("running")).await.unwrap().id;
    let (_, batch) = running_batch(id, 100).await;
    let appended = db
        .store
        .fail_batch_and_operation(&batch, "deadlock detected", "batch 1 failed 1 times")
        .await
        .unwrap();
    assert_eq!(appended.record.state.status, OperationStatus::Failed);
    assert_eq!(
        appended.record.state.last_error.as_deref(),
        Some("batch 1 failed 1 times")
    );
    let events = db.store.events(id, 0).await.unwrap();
    let tail: Vec<_> = events
        .iter()
        .rev()
        .take(2)
        .map(|e| e.event.kind())
        .collect();
    assert_eq!(tail, ["failed", "batch_failed"]);
    assert_eq!(
        db.store.batches(id).await.unwrap()[0].status,
        BatchStatus::Failed
    );
    // Its lease is gone with it: the same call again changes nothing.
    assert!(matches!(
        db.store.fail_batch_and_operation(&batch, "x", "y").await,
        Err(StoreError::BatchLeaseLost { .. })
    ));
    db.store.verify(id).await.unwrap();

    // Paused by an operator meanwhile: the batch goes back to pending and
    // the resumed operation claims it for one more attempt.
    let id = db.store.enqueue(spec("paused")).await.unwrap().id;
    let (_, batch) = running_batch(id, 100).await;
    operator(
        db,
        id,
        Event::Paused {
            reason: "look".into(),
        },
    )
    .await;
    let appended = db
        .store
        .fail_batch_and_operation(&batch, "deadlock detected", "batch 1 failed 1 times")
        .await
        .unwrap();
    assert_eq!(appended.record.state.status, OperationStatus::Paused);
    assert_eq!(
        db.store.batches(id).await.unwrap()[0].status,
        BatchStatus::Pending
    );
    db.store
        .append(id, Expected::Any, None, &[Event::Resumed])
        .await
        .unwrap();
    let lease = common::claim_lease(&db.store, "n", ttl).await;
    assert_eq!(lease.operation_id, id);
    let again = db.store.claim_batches("n", Some(id), 1, ttl).await.unwrap();
    assert_eq!((again[0].ordinal, again[0].attempts), (1, 2));
    db.store.verify(id).await.unwrap();

    // Failed already by another batch: this batch's failure alone.
    let id = db.store.enqueue(spec("failed")).await.unwrap().id;
    let (lease, first) = running_batch(id, 100).await;
    db.store
        .plan_batch(&lease, Some(Cursor::int(200)), 100)
        .await
        .unwrap();
    let second = db.store.claim_batches("m", Some(id), 1, ttl).await.unwrap();
    let second = second[0].lease().unwrap();
    db.store
        .fail_batch_and_operation(&first, "boom", "batch 1 failed")
        .await
        .unwrap();
    let appended = db
        .store
        .fail_batch_and_operation(&second, "boom", "batch 2 failed")
        .await
        .unwrap();
    assert_eq!(appended.record.state.status, OperationStatus::Failed);
    assert_eq!(
        appended.record.state.last_error.as_deref(),
        Some("batch 1 failed"),
        "the operation keeps the error it failed with"
    );
    let kinds: Vec<_> = db
        .store
        .events(id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.kind())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "failed").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"batch_failed"));
    db.store.verify(id).await.unwrap();
}

/// The token buckets, on a clock the test moves: a full bucket lets one
/// second's worth go at once; past it the debt sets the wait and the
/// deepest debt's limit binds (stamped for `show` and `list` until a few
/// seconds after the wait); refills are capped at one second's worth.
async fn rate_limit_buckets_refill_go_into_debt_and_stamp_the_binding_limit(db: &TestDb) {
    let (store, clock) = with_clock(db);
    store.set_rate_limit("kind:purge", 1_000).await.unwrap();
    store.set_rate_limit("operation:7", 500).await.unwrap();
    store.set_rate_limit("kind:other", 10).await.unwrap();
    let ms = |taken: &sluice_store::RowsTaken| taken.wait.as_millis();
    // Operation 7's own bucket (500) is the lower: 400 rows fit in it.
    let taken = store.take_rows(7, "purge", None, 400).await.unwrap();
    assert_eq!((ms(&taken), taken.binding), (0, None));
    assert!(store.binding_rate_limits().await.unwrap().is_empty());
    // 400 more: its own bucket owes 300 rows, 600 ms at 500 rows/s; the
    // kind's (1,000) is still above zero.
    let taken = store.take_rows(7, "purge", None, 400).await.unwrap();
    let own = RateLimit {
        target: "operation:7".into(),
        rows_per_second: 500,
    };
    assert_eq!((ms(&taken), taken.binding.as_ref()), (600, Some(&own)));
    let binding = store.binding_rate_limits().await.unwrap();
    assert_eq!(binding, vec![own.clone()]);
    assert_eq!(binding_limit(&binding, 7, "purge", None), Some(&own));
    assert_eq!(
        binding_limit(&binding, 8, "purge", None),
        None,
        "not another's"
    );
    // Another operation of the kind is not held by operation 7's limit.
    let other = store.take_rows(8, "purge", None, 100).await.unwrap();
    assert_eq!((ms(&other), other.binding), (0, None));
    // The wait passes: the debt is paid, a second's refill is capped.
    clock.advance(10_000);
    let taken = store.take_rows(7, "purge", None, 500).await.unwrap();
    assert_eq!((ms(&taken), taken.binding), (0, None));
    // The stamp counted for the wait and a few seconds after it only.
    assert!(store.binding_rate_limits().await.unwrap().is_empty());
    // A cleared limit no longer holds anything; the kind's refills.
    assert!(store.clear_rate_limit("operation:7").await.unwrap());
    clock.advance(1_000);
    let taken = store.take_rows(7, "purge", None, 900).await.unwrap();
    assert_eq!((ms(&taken), taken.binding), (0, None));
    let taken = store.take_rows(7, "purge", None, 600).await.unwrap();
    let kind = RateLimit {
        target: "kind:purge".into(),
        rows_per_second: 1_000,
    };
    assert_eq!((ms(&taken), taken.binding), (500, Some(kind.clone())));
    assert_eq!(
        binding_limit(
            &store.binding_rate_limits().await.unwrap(),
            8,
            "purge",
            None
        ),
        Some(&kind),
        "a kind's limit binds every operation of the kind"
    );
    // A limit set anew has made nobody wait yet.
    store.set_rate_limit("kind:purge", 2_000).await.unwrap();
    assert!(store.binding_rate_limits().await.unwrap().is_empty());
    // The largest limit, idle for a year, refills without overflowing.
    store.set_rate_limit("*", i64::MAX).await.unwrap();
    clock.advance(365 * 86_400_000);
    let taken = store.take_rows(9, "another", None, 1_000).await.unwrap();
    assert_eq!((ms(&taken), taken.binding), (0, None));
    // A fleet's limit is one bucket for all its operations: two of them
    // taking 200 rows each from 300 a second, the second waits 1/3 s.
    store.clear_rate_limit("*").await.unwrap();
    store.set_rate_limit("fleet:f", 300).await.unwrap();
    let first = store
        .take_rows(11, "fleetwide", Some("f"), 200)
        .await
        .unwrap();
    assert_eq!((ms(&first), first.binding), (0, None));
    let second = store
        .take_rows(12, "fleetwide", Some("f"), 200)
        .await
        .unwrap();
    let fleet = RateLimit {
        target: "fleet:f".into(),
        rows_per_second: 300,
    };
    assert_eq!((ms(&second), second.binding.as_ref()), (333, Some(&fleet)));
    let binding = store.binding_rate_limits().await.unwrap();
    assert_eq!(
        binding_limit(&binding, 11, "fleetwide", Some("f")),
        Some(&fleet)
    );
    assert_eq!(
        binding_limit(&binding, 13, "fleetwide", None),
        None,
        "not outside it"
    );
    let limits = store
        .rate_limits_for(12, "fleetwide", Some("f"))
        .await
        .unwrap();
    assert_eq!(limits, vec![fleet]);
}

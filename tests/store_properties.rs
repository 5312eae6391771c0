//! Properties of the real store: random histories of operator commands and
//! worker actions, driven through the public API against a real SQLite file
//! and the real PostgreSQL, always leave an event log that replays to the
//! stored projection, and a projection that agrees with the batches table.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::TestDb;
use proptest::prelude::*;
use sluice_store::{
    BatchStatus, Event, Expected, Health, ManualClock, OperationSpec, Store, StoreError,
};
use sluice_target::Cursor;

#[derive(Debug, Clone)]
enum Action {
    Claim,
    Plan(i64),
    RunBatch {
        rows: i64,
        fail: Option<bool>,
    },
    /// Run every claimable batch to success.
    Drain,
    Throttle(u8),
    Pause,
    Resume,
    Yield,
    Finish,
    FailOperation,
    Cancel,
    Retry,
    ExpireLeases,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        3 => Just(Action::Claim),
        6 => (1i64..60).prop_map(Action::Plan),
        8 => (0i64..60, prop::option::weighted(0.3, any::<bool>())).prop_map(|(rows, fail)| Action::RunBatch { rows, fail }),
        2 => Just(Action::Drain),
        1 => (0u8..120).prop_map(Action::Throttle),
        1 => Just(Action::Pause),
        1 => Just(Action::Resume),
        1 => Just(Action::Yield),
        2 => Just(Action::Finish),
        1 => Just(Action::FailOperation),
        1 => Just(Action::Cancel),
        1 => Just(Action::Retry),
        1 => Just(Action::ExpireLeases),
    ]
}

/// Errors a random history is expected to provoke; anything else fails the test.
fn expected_refusal(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Illegal { .. }
            | StoreError::Conflict { .. }
            | StoreError::LeaseLost { .. }
            | StoreError::BatchLeaseLost { .. }
    )
}

/// How many histories reached the states that make the property meaningful;
/// checked after the run so the property cannot pass on trivial histories.
#[derive(Default)]
struct Reached {
    batches_done: AtomicUsize,
    finished: AtomicUsize,
    fenced: AtomicUsize,
}

async fn run_history(
    reached: &Reached,
    store: &Store,
    clock: &ManualClock,
    table: String,
    actions: Vec<Action>,
) -> Result<(), TestCaseError> {
    let mut spec = OperationSpec::new("k", table, vec!["id".into()]);
    spec.max_cursor = Some(Cursor::int(10_000));
    let id = store.enqueue(spec).await.unwrap().id;
    let ttl = Duration::from_secs(30);
    let mut lease = None;
    for action in actions {
        let outcome: Result<(), StoreError> =
            match action {
                Action::Claim => store.claim_operations("n", 1, ttl).await.map(|claimed| {
                    if let Some(c) = claimed.into_iter().find(|c| c.record.id == id) {
                        lease = c.record.lease;
                    }
                }),
                Action::Plan(size) => match &lease {
                    Some(l) => {
                        let at =
                            store.operation(id).await.unwrap().state.cursor.map_or(
                                0,
                                |c| match c.0[0] {
                                    sluice_target::CursorValue::Int(v) => v,
                                    _ => 0,
                                },
                            );
                        store
                            .plan_batch(l, Some(Cursor::int((at + size).min(10_000))), size)
                            .await
                            .map(drop)
                    }
                    None => Ok(()),
                },
                Action::RunBatch { rows, fail } => {
                    match store.claim_batches("w", Some(id), 1, ttl).await {
                        Ok(batches) => match batches.first().and_then(|b| b.lease()) {
                            Some(bl) => match fail {
                                None => store
                                    .complete_batch(&bl, rows, Duration::from_millis(3), None)
                                    .await
                                    .map(drop),
                                Some(retry) => store
                                    .fail_batch(&bl, "timeout", retry, Some(5))
                                    .await
                                    .map(drop),
                            },
                            None => Ok(()),
                        },
                        Err(e) => Err(e),
                    }
                }
                Action::Drain => drain(store, id, ttl).await,
                Action::Throttle(p) => {
                    let health = match p {
                        0 => Health::Stopped,
                        100.. => Health::Normal,
                        p => Health::Throttled { percent: p },
                    };
                    store
                        .append(
                            id,
                            Expected::Any,
                            lease.as_ref(),
                            &[Event::Throttled {
                                health,
                                reason: None,
                            }],
                        )
                        .await
                        .map(drop)
                }
                Action::Pause => {
                    append(
                        store,
                        id,
                        Event::Paused {
                            reason: "op".into(),
                        },
                    )
                    .await
                }
                Action::Resume => append(store, id, Event::Resumed).await,
                Action::Yield => store
                    .append(
                        id,
                        Expected::Any,
                        lease.as_ref(),
                        &[Event::Yielded {
                            reason: "limit".into(),
                        }],
                    )
                    .await
                    .map(drop),
                Action::Finish => store
                    .append(id, Expected::Any, lease.as_ref(), &[Event::Finished])
                    .await
                    .map(drop),
                Action::FailOperation => {
                    append(
                        store,
                        id,
                        Event::Failed {
                            error: "boom".into(),
                        },
                    )
                    .await
                }
                Action::Cancel => {
                    append(
                        store,
                        id,
                        Event::Cancelled {
                            reason: "op".into(),
                        },
                    )
                    .await
                }
                Action::Retry => append(store, id, Event::Retried).await,
                Action::ExpireLeases => {
                    clock.advance(31_000);
                    Ok(())
                }
            };
        if let Err(e) = &outcome
            && matches!(
                e,
                StoreError::LeaseLost { .. } | StoreError::BatchLeaseLost { .. }
            )
        {
            reached.fenced.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = outcome {
            prop_assert!(expected_refusal(&e), "unexpected error: {e}");
        }
    }
    // The log replays to exactly the stored projection.
    let stored = store.operation(id).await.unwrap();
    prop_assert_eq!(store.replay(id).await.unwrap(), stored.state.clone());
    if stored.state.batches_succeeded > 0 {
        reached.batches_done.fetch_add(1, Ordering::Relaxed);
    }
    if stored.state.status == sluice_store::OperationStatus::Finished
        && stored.state.batches_succeeded > 0
    {
        reached.finished.fetch_add(1, Ordering::Relaxed);
    }
    // Histories share one store: take this operation out of the claimable pool,
    // or the next history's claims would pick it (the oldest) instead of their own.
    if !stored.state.status.is_terminal() {
        append(
            store,
            id,
            Event::Cancelled {
                reason: "end of history".into(),
            },
        )
        .await
        .unwrap();
    }
    // The projection agrees with the batches table.
    let batches = store.batches(id).await.unwrap();
    let succeeded: Vec<_> = batches
        .iter()
        .filter(|b| b.status == BatchStatus::Succeeded)
        .collect();
    prop_assert_eq!(stored.state.batches_planned, batches.len() as i64);
    prop_assert_eq!(stored.state.batches_succeeded, succeeded.len() as i64);
    prop_assert_eq!(
        stored.state.rows_done,
        succeeded.iter().map(|b| b.rows_affected).sum::<i64>()
    );
    // Planned ranges are contiguous and increasing.
    for pair in batches.windows(2) {
        prop_assert_eq!(&pair[1].start, &pair[0].end);
    }
    Ok(())
}

async fn drain(store: &Store, id: i64, ttl: Duration) -> Result<(), StoreError> {
    for batch in store.claim_batches("w", Some(id), 1_000, ttl).await? {
        let lease = batch.lease().expect("a claimed batch is running");
        store
            .complete_batch(&lease, batch.batch_size, Duration::from_millis(2), None)
            .await?;
    }
    Ok(())
}

async fn append(store: &Store, id: i64, event: Event) -> Result<(), StoreError> {
    store
        .append(id, Expected::Any, None, &[event])
        .await
        .map(drop)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn property_on(db: &'static TestDb, cases: u32) {
    let clock = ManualClock::new(1_700_000_000_000);
    let store = db.store.clone().with_clock(Arc::new(clock.clone()));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(cases));
    let counter = AtomicUsize::new(0);
    let reached = Reached::default();
    runner
        .run(&prop::collection::vec(action(), 0..60), |actions| {
            let table = format!("t{}", counter.fetch_add(1, Ordering::SeqCst));
            runtime().block_on(run_history(&reached, &store, &clock, table, actions))
        })
        .unwrap();
    let (done, finished, fenced) = (
        reached.batches_done.into_inner(),
        reached.finished.into_inner(),
        reached.fenced.into_inner(),
    );
    eprintln!(
        "{cases} histories: {done} completed batches, {finished} finished after batches, {fenced} fenced writes"
    );
    // Typically about 50, 10 and 1,200 for 300 histories.
    assert!(
        done >= 10 && finished >= 1 && fenced >= 50,
        "histories too shallow: {done} {finished} {fenced}"
    );
}

#[test]
fn random_histories_replay_to_the_stored_projection_on_sqlite() {
    let db: &'static TestDb = Box::leak(Box::new(runtime().block_on(TestDb::sqlite())));
    property_on(db, 300);
}

#[test]
fn random_histories_replay_to_the_stored_projection_on_postgres() {
    let Some(db) = runtime().block_on(TestDb::postgres()) else {
        return;
    };
    let db: &'static TestDb = Box::leak(Box::new(db));
    property_on(db, 300);
    runtime().block_on(db.release());
}

#[test]
fn random_histories_replay_to_the_stored_projection_on_mysql() {
    let Some(db) = runtime().block_on(TestDb::mysql()) else {
        return;
    };
    let db: &'static TestDb = Box::leak(Box::new(db));
    property_on(db, 300);
    runtime().block_on(db.release());
}

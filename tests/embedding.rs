//! Embedding Sluice as an application team would: one dependency and its
//! prelude, Sluice's tables in a schema of their own, a store on the
//! application's pool, honest waiting, and a repeated enqueue that takes
//! no id.

mod common;

use std::time::Duration;

use common::TestDb;
use sluice::prelude::*;
use sluice::store::OperationSpec;

for_each_backend!(
    a_repeated_enqueue_returns_the_active_operation_and_takes_no_id,
    waiting_until_idle_says_what_is_left_and_a_deadline_bounds_it,
);

postgres_only!(sluice_tables_live_in_a_schema_of_their_own_and_targets_are_found_as_before,);

/// Deletes the rows of `items` whose `grp` is the argument: its sub-batch is
/// one statement, so it writes no `run`.
struct DeleteGroup;

#[async_trait]
impl Operation for DeleteGroup {
    type Arguments = i64;
    fn kind(&self) -> &'static str {
        "delete-group"
    }
    fn shape(&self, group: &i64) -> Result<Shape, OperationError> {
        Shape::range("items", "id")?.scope(Filter::new().eq("grp", *group))
    }
    fn sub_batch_statement(
        &self,
        _: &i64,
        rows: &SubBatchRows<'_>,
    ) -> Result<Option<Statement>, OperationError> {
        Ok(Some(rows.delete_statement()))
    }
}

/// `items (id, grp)`: 300 rows in groups 0, 1 and 2.
async fn create_items(db: &TestDb) {
    db.execute("CREATE TABLE items (id BIGINT PRIMARY KEY, grp BIGINT NOT NULL)")
        .await;
    let values: Vec<String> = (1..=300).map(|i| format!("({i}, {})", i % 3)).collect();
    db.execute(&format!("INSERT INTO items VALUES {}", values.join(", ")))
        .await;
}

fn quick() -> RuntimeConfig {
    RuntimeConfig {
        node: "embedding".into(),
        reconcile_interval: Duration::from_millis(20),
        control_interval: Duration::from_millis(20),
        ..RuntimeConfig::default()
    }
}

/// A runtime on `store` that runs [`DeleteGroup`].
async fn start(store: &Store) -> Runtime {
    RuntimeBuilder::with_store(store.clone())
        .config(quick())
        .without_builtin_indicators()
        .register(DeleteGroup)
        .start()
        .await
        .unwrap()
}

/// Enqueues [`DeleteGroup`] of `group` without a runtime.
async fn enqueue_group(
    store: &Store,
    group: i64,
    options: &EnqueueOptions,
) -> sluice::store::Enqueued {
    let mut registry = Registry::new();
    registry.register(DeleteGroup);
    sluice::operations::enqueue(
        store,
        &registry,
        "delete-group",
        &serde_json::json!(group),
        options,
    )
    .await
    .unwrap()
}

async fn a_repeated_enqueue_returns_the_active_operation_and_takes_no_id(db: &TestDb) {
    let spec = |n: i64| {
        OperationSpec::new("delete-group", "items", vec!["id".to_owned()])
            .with_arguments(&serde_json::json!(n))
    };
    let first = db.store.enqueue(spec(1)).await.unwrap();
    for _ in 0..3 {
        let again = db.store.enqueue(spec(1)).await.unwrap();
        assert_eq!((again.id, again.created), (first.id, false));
    }
    let next = db.store.enqueue(spec(2)).await.unwrap();
    assert!(next.created);
    assert_eq!(next.id, first.id + 1, "the repeats took no id");
}

/// A paused operation is reported as left with its rows done, not waited
/// for; an operation another node holds is waited for until the deadline,
/// then reported with its holder.
async fn waiting_until_idle_says_what_is_left_and_a_deadline_bounds_it(db: &TestDb) {
    create_items(db).await;
    let options = EnqueueOptions {
        batch_size: 20,
        sub_batch_size: 10,
        ..EnqueueOptions::default()
    };
    // Enqueued and paused before any runtime runs, so it cannot finish first.
    let paused = enqueue_group(&db.store, 1, &options).await;
    sluice::runtime::control(
        &db.store,
        sluice::runtime::Action::Pause,
        &Selection::One(paused.id),
        "held for the test",
    )
    .await
    .unwrap();
    let runtime = start(&db.store).await;
    let done = runtime.enqueue(&DeleteGroup, &0, &options).await.unwrap();
    let idle = runtime.run_until_idle().await.unwrap();
    assert!(!idle.timed_out);
    assert_eq!(idle.left.len(), 1, "{idle:?}");
    assert_eq!(idle.left[0].id, paused.id);
    assert_eq!(idle.left[0].status, OperationStatus::Paused);
    assert_eq!(
        db.store.operation(done.id).await.unwrap().state.status,
        OperationStatus::Finished
    );
    assert_eq!(idle.left[0].rows_done, 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await,
        100
    );

    runtime.shutdown().await.unwrap();

    // Held by another node (claimed while no runtime of ours runs): not
    // done, so waited for, until the deadline.
    let held = enqueue_group(&db.store, 2, &options).await;
    let lease = common::claim_lease(&db.store, "elsewhere", Duration::from_secs(600)).await;
    assert_eq!(lease.operation_id, held.id);
    let runtime = start(&db.store).await;
    let idle = runtime
        .run_until_idle_within(Duration::from_millis(300))
        .await
        .unwrap();
    assert!(idle.timed_out);
    let ids: Vec<(i64, OperationStatus, Option<&str>)> = idle
        .left
        .iter()
        .map(|l| (l.id, l.status, l.held_by.as_deref()))
        .collect();
    assert_eq!(
        ids,
        [
            (paused.id, OperationStatus::Paused, None),
            (held.id, OperationStatus::Running, Some("elsewhere")),
        ]
    );
    runtime.shutdown().await.unwrap();
}

/// With a schema of its own, Sluice's tables and its migrations' record are
/// created there (the schema too), a target table named without a schema is
/// found where the application's sessions find it, and the operation runs.
/// A schema name that is not an identifier is refused before anything is
/// created.
async fn sluice_tables_live_in_a_schema_of_their_own_and_targets_are_found_as_before(db: &TestDb) {
    create_items(db).await;
    let own = format!("sluice_test_own_{}", std::process::id());
    let bad = Store::connect_with(
        &db.url,
        &ConnectOptions {
            schema: Some("x; DROP TABLE items".into()),
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(bad.contains("not a plain identifier"), "{bad}");
    let store = Store::connect_with(
        &db.url,
        &ConnectOptions {
            schema: Some(own.clone()),
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    let in_own = |table: &'static str| {
        let own = own.clone();
        async move {
            db.scalar(&format!(
                "SELECT COUNT(*) FROM pg_tables WHERE schemaname = '{own}' AND tablename = '{table}'"
            ))
            .await
        }
    };
    assert_eq!(in_own("sluice_operations").await, 1);
    assert_eq!(in_own("_sqlx_migrations").await, 1);
    let runtime = start(&store).await;
    let enqueued = runtime
        .enqueue(&DeleteGroup, &2, &EnqueueOptions::default())
        .await
        .unwrap();
    let idle = runtime.run_until_idle().await.unwrap();
    assert!(idle.is_empty(), "{idle:?}");
    runtime.shutdown().await.unwrap();
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 2").await,
        0
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 200);
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM {own}.sluice_operations WHERE id = {}",
            enqueued.id
        ))
        .await,
        1
    );
    // The test database's own Sluice tables saw nothing.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
    store.close().await;
    db.execute(&format!("DROP SCHEMA {own} CASCADE")).await;
}

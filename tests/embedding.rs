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
    a_repeated_bulk_enqueue_takes_no_id,
    waiting_until_idle_says_what_is_left_and_a_deadline_bounds_it,
    archive_rows_enqueues_from_rust_as_from_the_command_line,
    settings_a_store_given_to_the_runtime_would_ignore_are_refused,
);

postgres_only!(
    sluice_tables_live_in_a_schema_of_their_own_and_targets_are_found_as_before,
    a_pool_whose_search_path_names_a_missing_schema_is_refused,
);

mysql_only!(a_store_on_the_applications_mysql_pool_needs_sluices_sessions,);

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

/// Enqueuing the same operations again in bulk returns them and takes no
/// id: the next new operation has the next id.
async fn a_repeated_bulk_enqueue_takes_no_id(db: &TestDb) {
    create_items(db).await;
    let runtime = start(&db.store).await;
    runtime
        .pause(&Selection::Kind("delete-group".into()), "held")
        .await
        .unwrap();
    let groups = |range: std::ops::Range<i64>| -> Vec<NewOperation> {
        range
            .map(|group| NewOperation {
                kind: "delete-group".into(),
                arguments: json!(group),
                options: EnqueueOptions::default(),
            })
            .collect()
    };
    let first = runtime.enqueue_many(&groups(0..3)).await.unwrap();
    assert!(first.iter().all(|e| e.created));
    for _ in 0..3 {
        let again = runtime.enqueue_many(&groups(0..3)).await.unwrap();
        let ids: Vec<i64> = again.iter().map(|e| e.id).collect();
        assert_eq!(ids, first.iter().map(|e| e.id).collect::<Vec<_>>());
        assert!(again.iter().all(|e| !e.created));
    }
    let next = runtime.enqueue_many(&groups(3..4)).await.unwrap();
    let last = first.iter().map(|e| e.id).max().unwrap();
    assert_eq!(next[0].id, last + 1, "the repeats took ids");
    runtime.shutdown().await.unwrap();
}

/// `archive-rows` from Rust: the arguments the command line takes, its
/// archive table created at enqueue, the rows moved exactly once.
async fn archive_rows_enqueues_from_rust_as_from_the_command_line(db: &TestDb) {
    create_items(db).await;
    let runtime = RuntimeBuilder::with_store(db.store.clone())
        .config(quick())
        .without_builtin_indicators()
        .start()
        .await
        .unwrap();
    let arguments =
        json!({"table": "items", "into": "items_archive", "key": "id", "where": "grp = 1"});
    let enqueued = runtime
        .enqueue_json("archive-rows", &arguments, &EnqueueOptions::default())
        .await
        .unwrap();
    let done = runtime
        .wait(enqueued.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done.state.status, OperationStatus::Finished, "{done:?}");
    assert_eq!(done.state.rows_done, 100);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await,
        0
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items_archive WHERE grp = 1")
            .await,
        100
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items_archive").await, 100);
    // In bulk it is refused by its position, and nothing is written.
    let bulk = [NewOperation {
        kind: "archive-rows".into(),
        arguments: json!({"table": "items", "into": "items_archive", "key": "id", "where": "grp = 2"}),
        options: EnqueueOptions::default(),
    }];
    let refused = runtime.enqueue_many(&bulk).await.unwrap_err().to_string();
    assert!(refused.contains("enqueue it alone"), "{refused}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 1);
    runtime.shutdown().await.unwrap();
}

/// `schema` and `time_zone` apply to a store the runtime opens: with a
/// store of the application's they are refused, not ignored.
async fn settings_a_store_given_to_the_runtime_would_ignore_are_refused(db: &TestDb) {
    for builder in [
        RuntimeBuilder::with_store(db.store.clone()).schema("sluice"),
        RuntimeBuilder::with_store(db.store.clone()).time_zone("Europe/Berlin"),
    ] {
        let refused = builder
            .config(quick())
            .without_builtin_indicators()
            .start()
            .await
            .err()
            .expect("refused")
            .to_string();
        assert!(refused.contains("RuntimeBuilder::new"), "{refused}");
    }
}

/// A pool whose search path starts with a schema that does not exist
/// would put Sluice's tables in the next one: refused, nothing created.
async fn a_pool_whose_search_path_names_a_missing_schema_is_refused(db: &TestDb) {
    use sluice::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
    let missing = format!("sluice_missing_{}", std::process::id());
    let connect: PgConnectOptions = db.url.parse().unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(connect.options([("search_path", format!("{missing}, public").as_str())]))
        .await
        .unwrap();
    let Err(refused) = Store::postgres(pool).await else {
        panic!("accepted");
    };
    let refused = refused.to_string();
    assert!(
        refused.contains(&format!("schema `{missing}`")),
        "{refused}"
    );
    assert!(refused.contains("does not exist"), "{refused}");
}

/// `Store::mysql` on the application's pool: one built with
/// `mysql_sessions` is a store; a plain one is refused before anything is
/// written.
async fn a_store_on_the_applications_mysql_pool_needs_sluices_sessions(db: &TestDb) {
    use sluice::sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
    create_items(db).await;
    let connect: MySqlConnectOptions = db.url.parse().unwrap();
    let plain = MySqlPoolOptions::new()
        .max_connections(2)
        .connect_with(connect.clone().pipes_as_concat(false))
        .await
        .unwrap();
    let Err(refused) = Store::mysql(plain).await else {
        panic!("accepted");
    };
    let refused = refused.to_string();
    assert!(refused.contains("mysql_sessions"), "{refused}");
    let pool = sluice::target::mysql_sessions(MySqlPoolOptions::new())
        .max_connections(4)
        .connect_with(connect.pipes_as_concat(false))
        .await
        .unwrap();
    let store = Store::mysql(pool).await.unwrap();
    let runtime = start(&store).await;
    let enqueued = runtime
        .enqueue(&DeleteGroup, &1, &EnqueueOptions::default())
        .await
        .unwrap();
    let done = runtime
        .wait(enqueued.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(done.state.rows_done, 100);
    runtime.shutdown().await.unwrap();
}

//! The `sluice` binary running operations: enqueue → run --until-idle → show,
//! operator controls from a second process while a worker runs, a worker
//! killed with SIGKILL and its work taken over, and enqueue's bad-input
//! cases (exit 2, one line, nothing changed).

mod common;

use std::process::{Child, Command};

use common::{
    TestDb, assert_group_one_changed_once, enqueue_increment, json, released, sluice, spawn_worker,
    succeeded, until, until_items_changed,
};
use sluice_store::{ListFilter, OperationStatus};

for_each_backend!(
    enqueue_run_until_idle_and_show_report_the_right_counts,
    a_second_process_pauses_and_resumes_a_running_worker,
    enqueue_refuses_bad_input_with_exit_2_and_changes_nothing,
    a_kill_switch_from_a_second_process_stops_its_kind_within_a_second,
    a_run_whose_operation_fails_exits_1_naming_it,
    show_counts_the_rows_a_cancelled_batch_committed,
);

postgres_only!(a_killed_worker_s_operation_is_taken_over);

fn worker(db: &TestDb, node: &str) -> Child {
    spawn_worker(
        db,
        &["--node", node, "--lease-ttl", "2s", "--pool-size", "2"],
    )
}

/// `items(id, grp, counter, created_at)` with `n` rows, ids with gaps
/// (multiples of 3 only), indexed on created_at; every other row is aged.
async fn create_items(db: &TestDb, n: i64) {
    db.execute(&format!(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, counter INTEGER NOT NULL DEFAULT 0, created_at {} NOT NULL)",
        db.time_type()
    ))
    .await;
    let aged = db.time_literal("2020-01-01T00:00:00Z".parse().unwrap());
    let young = db.time_literal("2099-01-01T00:00:00Z".parse().unwrap());
    db.insert_series(
        "items (id, grp, created_at)",
        &format!("g * 3, g % 2, CASE WHEN g % 2 = 0 THEN {aged} ELSE {young} END"),
        n,
        "",
    )
    .await;
    db.execute("CREATE INDEX items_created_at_idx ON items (created_at)")
        .await;
}

async fn enqueue_run_until_idle_and_show_report_the_right_counts(db: &TestDb) {
    create_items(db, 5_000).await;
    let deleted = json(&sluice(
        db,
        &[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "items",
            "--column",
            "created_at",
            "--older-than",
            "30d",
            "--batch-size",
            "400",
            "--sub-batch-size",
            "150",
            "--json",
        ],
    ));
    assert_eq!(deleted["created"], true);
    assert_eq!(deleted["estimated_rows"], 2_500);
    let updated = enqueue_increment(db, &["--where", "grp = 1", "--batch-size", "300"]);
    let run = sluice(db, &["run", "--until-idle", "--node", "cli-worker"]);
    succeeded(&run);
    let out = String::from_utf8_lossy(&run.stdout);
    assert!(
        out.contains("finished"),
        "progress lines end finished: {out}"
    );

    for (op, rows) in [(&deleted, 2_500), (&updated, 2_500)] {
        let id = op["id"].as_i64().unwrap().to_string();
        let shown = json(&sluice(db, &["show", &id, "--json"]));
        assert_eq!(shown["status"], "finished", "{shown}");
        assert_eq!(shown["rows_done"], rows, "{shown}");
        assert_eq!(shown["node"], "cli-worker");
        db.store.verify(op["id"].as_i64().unwrap()).await.unwrap();
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 2_500);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 1")
            .await,
        0
    );
    // Nothing left to do: a second run returns at once.
    assert!(sluice(db, &["run", "--until-idle"]).status.success());
}

async fn a_second_process_pauses_and_resumes_a_running_worker(db: &TestDb) {
    create_items(db, 20_000).await;
    let op = enqueue_increment(
        db,
        &[
            "--batch-size",
            "200",
            "--sub-batch-size",
            "50",
            "--pause",
            "20ms",
        ],
    );
    let id = op["id"].as_i64().unwrap();
    let mut child = worker(db, "paused-worker");
    until_items_changed(db, 0).await;
    let paused = sluice(db, &["pause", &id.to_string(), "--reason", "deploy"]);
    assert!(paused.status.success());
    // The worker notices within its control interval and lets go.
    until("the worker lets go of the operation", || {
        released(&db.store, id)
    })
    .await;
    let held = db.scalar("SELECT SUM(counter) FROM items").await;
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(record.state.status, OperationStatus::Paused);
    let resumed = sluice(db, &["resume", &id.to_string()]);
    assert!(resumed.status.success());
    until("the operation finishes", || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert!(held < 20_000, "it was paused midway");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 1")
            .await,
        0
    );
    // SIGTERM: a graceful stop with exit code 0.
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(child.wait().unwrap().success());
    db.store.verify(id).await.unwrap();
}

async fn a_killed_worker_s_operation_is_taken_over(db: &TestDb) {
    create_items(db, 60_000).await;
    let op = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--batch-size",
            "500",
            "--sub-batch-size",
            "100",
            "--pause",
            "5ms",
        ],
    );
    let id = op["id"].as_i64().unwrap();
    let mut a = worker(db, "worker-a");
    let mut b = worker(db, "worker-b");
    until(
        "one worker holds the operation and has changed rows",
        || async {
            db.store.operation(id).await.unwrap().lease.is_some()
                && db
                    .scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
                    .await
                    > 2_000
        },
    )
    .await;
    let holder = db.store.operation(id).await.unwrap().lease.unwrap().node;
    let (victim, survivor) = if holder == "worker-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    victim.kill().unwrap(); // SIGKILL: no goodbye, leases left to lapse
    victim.wait().unwrap();
    let mut c = worker(db, "worker-c");
    until("the operation finishes elsewhere", || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    let record = db.store.operation(id).await.unwrap();
    assert_ne!(record.state.node.as_deref(), Some(holder.as_str()));
    assert_group_one_changed_once(db).await;
    assert_eq!(record.state.rows_done, 30_000);
    db.store.verify(id).await.unwrap();
    for child in [survivor, &mut c] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

async fn enqueue_refuses_bad_input_with_exit_2_and_changes_nothing(db: &TestDb) {
    create_items(db, 100).await;
    db.execute("CREATE TABLE unindexed (id BIGINT PRIMARY KEY, created_at TEXT NOT NULL)")
        .await;
    db.execute("INSERT INTO unindexed VALUES (1, '2020-01-01T00:00:00Z')")
        .await;
    let aged = |table: &str, column: &str, older: &str| {
        vec![
            "enqueue".to_owned(),
            "delete-aged-rows".into(),
            "--table".into(),
            table.into(),
            "--column".into(),
            column.into(),
            "--older-than".into(),
            older.into(),
        ]
    };
    let update = |table: &str, set: &str, condition: &str| {
        vec![
            "enqueue".to_owned(),
            "update-in-batches".into(),
            "--table".into(),
            table.into(),
            "--set".into(),
            set.into(),
            "--where".into(),
            condition.into(),
        ]
    };
    let with = |mut args: Vec<String>, extra: &[&str]| {
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (aged("itmes", "created_at", "30d"), "unknown table `itmes`"),
        (
            aged("items", "created", "30d"),
            "table `items` has no column `created`",
        ),
        (
            aged("items; DROP TABLE items", "created_at", "30d"),
            "is not a plain SQL identifier",
        ),
        (
            aged("items", "created_at--", "30d"),
            "is not a plain SQL identifier",
        ),
        (
            aged("it\u{0435}ms", "created_at", "30d"),
            "is not a plain SQL identifier",
        ),
        (
            aged("items", "created_at", "30 days"),
            "invalid value '30 days'",
        ),
        (
            aged("items", "created_at", "-5d"),
            "negative durations are not allowed",
        ),
        (
            with(aged("items", "created_at", "30d"), &["--batch-size", "0"]),
            "--batch-size",
        ),
        (
            with(
                aged("items", "created_at", "30d"),
                &["--sub-batch-size", "-3"],
            ),
            "--sub-batch-size",
        ),
        (
            with(aged("items", "created_at", "30d"), &["--key", "nope"]),
            "no column `nope`",
        ),
        (
            aged("unindexed", "created_at", "30d"),
            "refusing a full scan of table `unindexed`: no index serves `created_at`",
        ),
        (
            update(
                "items",
                "counter = counter + 1; DROP TABLE items",
                "grp = 1",
            ),
            "contains `;`",
        ),
        (
            update("items", "counter = 1", "grp = = 1"),
            "the WHERE expression `grp = = 1` does not parse",
        ),
        (
            vec!["enqueue".into(), "drop-everything".into()],
            "unrecognized subcommand 'drop-everything'",
        ),
    ];
    for (args, expected) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = sluice(db, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err}");
        assert!(
            err.contains(expected),
            "{args:?}: expected `{expected}` in {err}"
        );
    }
    let filter = ListFilter {
        status: None,
        kind: None,
        limit: None,
        ..Default::default()
    };
    assert!(
        db.store.list(&filter).await.unwrap().is_empty(),
        "nothing was enqueued"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 100);
    // --force accepts the full scan.
    let forced_args = with(aged("unindexed", "created_at", "30d"), &["--force"]);
    let forced_args: Vec<&str> = forced_args.iter().map(String::as_str).collect();
    let forced = sluice(db, &forced_args);
    succeeded(&forced);
}

/// `sluice pause --kind` from another process while a worker runs: within a
/// second no sub-batch of that kind starts (each changed row records when
/// its sub-batch ran, compared with the `paused` event's time), another kind
/// keeps running, a new operation of the kind waits as pending, and
/// `resume --kind` lets everything finish with every row changed once.
async fn a_kill_switch_from_a_second_process_stops_its_kind_within_a_second(db: &TestDb) {
    create_items(db, 20_000).await;
    db.execute("ALTER TABLE items ADD COLUMN touched_ms BIGINT NOT NULL DEFAULT 0")
        .await;
    let now_ms = match db.backend {
        "postgres" => "(extract(epoch FROM clock_timestamp()) * 1000)::BIGINT",
        "mysql" => "CAST(UNIX_TIMESTAMP(SYSDATE(3)) * 1000 AS SIGNED)",
        _ => "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)",
    };
    let set = format!("counter = counter + 1, touched_ms = {now_ms}");
    let increment = |condition: &str| {
        let args = [
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            &set,
            "--where",
            condition,
            "--batch-size",
            "200",
            "--sub-batch-size",
            "50",
            "--pause",
            "20ms",
            "--json",
        ];
        json(&sluice(db, &args))["id"].as_i64().unwrap()
    };
    let first = increment("grp = 1");
    let mut child = worker(db, "switch-worker");
    until_items_changed(db, 0).await;
    let paused = sluice(
        db,
        &["pause", "--kind", "update-in-batches", "--reason", "freeze"],
    );
    succeeded(&paused);
    until("the worker lets go of the operation", || {
        released(&db.store, first)
    })
    .await;
    let events = db.store.events(first, 0).await.unwrap();
    let paused_at = events
        .iter()
        .find(|e| e.event.kind() == "paused")
        .expect("a paused event")
        .recorded_at;
    let last_change = db.scalar("SELECT MAX(touched_ms) FROM items").await;
    assert!(
        last_change <= paused_at + 1_000,
        "a sub-batch ran {} ms after the kill switch",
        last_change - paused_at
    );
    let held = db
        .scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
        .await;
    assert!(held < 10_000, "it was stopped midway ({held} rows)");

    // Switched off: a new operation of the kind waits as pending while
    // another kind, enqueued after it, is claimed and finishes.
    let second = increment("grp = 0");
    db.execute("CREATE TABLE logs (id BIGINT PRIMARY KEY, created_at BIGINT NOT NULL)")
        .await;
    db.execute("CREATE INDEX logs_created_at_idx ON logs (created_at)")
        .await;
    db.execute("INSERT INTO logs VALUES (1, 0), (2, 0), (3, 4102444800)")
        .await;
    let other = json(&sluice(
        db,
        &[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "logs",
            "--column",
            "created_at",
            "--older-than",
            "30d",
            "--json",
        ],
    ))["id"]
        .as_i64()
        .unwrap();
    until("the other kind finishes", || async {
        db.store.operation(other).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM logs").await, 1);
    assert_eq!(
        db.store.operation(second).await.unwrap().state.status,
        OperationStatus::Pending,
        "an operation of a switched-off kind is not started"
    );
    assert_eq!(
        db.store.operation(first).await.unwrap().state.status,
        OperationStatus::Paused
    );

    // Lifted: the paused one resumes, the waiting one starts; each row once.
    assert!(
        sluice(db, &["resume", "--kind", "update-in-batches"])
            .status
            .success()
    );
    for id in [first, second] {
        until("the kind's operations finish", || async {
            db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
        })
        .await;
        db.store.verify(id).await.unwrap();
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 1")
            .await,
        0
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// `run --until-idle` that leaves a failed operation behind exits 1 and
/// names it; the next run, with nothing of its own failing, exits 0.
async fn a_run_whose_operation_fails_exits_1_naming_it(db: &TestDb) {
    create_items(db, 40).await;
    // Planned fine; every sub-batch fails at run time (a division by zero
    // on PostgreSQL, a NULL into a NOT NULL column on SQLite).
    let enqueued = json(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter / (grp - grp)",
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap();
    let run = sluice(db, &["run", "--until-idle", "--node", "w1"]);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: 1 operation(s) failed during this run: ")
            && last.contains(&format!("{id} (")),
        "{last}"
    );
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    assert_eq!(shown["status"], "failed");
    let again = sluice(db, &["run", "--until-idle", "--node", "w1"]);
    succeeded(&again);
}

/// Rows done count every committed sub-batch: cancelled inside its first
/// batch (1,000 rows, sub-batches of 10), an operation's `show` and `list`
/// report the rows it changed, not the 0 its finished batches add up to.
async fn show_counts_the_rows_a_cancelled_batch_committed(db: &TestDb) {
    create_items(db, 3_000).await;
    let op = enqueue_increment(
        db,
        &[
            "--batch-size",
            "1000",
            "--sub-batch-size",
            "10",
            "--pause",
            "20ms",
        ],
    );
    let id = op["id"].as_i64().unwrap();
    let mut child = worker(db, "cancelled-worker");
    until_items_changed(db, 30).await;
    succeeded(&sluice(db, &["cancel", &id.to_string()]));
    until("the worker lets go of the operation", || {
        released(&db.store, id)
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let changed = db
        .scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
        .await;
    assert!((30..1_000).contains(&changed), "{changed}");
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    assert_eq!(shown["status"], "cancelled");
    assert_eq!(shown["rows_done"].as_i64(), Some(changed), "{shown}");
    let listed = json(&sluice(db, &["list", "--json"]));
    let row = listed
        .as_array()
        .expect("a list")
        .iter()
        .find(|o| o["id"].as_i64() == Some(id))
        .expect("the operation is listed");
    assert_eq!(row["rows_done"].as_i64(), Some(changed), "{row}");
}

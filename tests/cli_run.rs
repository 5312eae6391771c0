//! The `sluice` binary running operations: enqueue → run --until-idle → show,
//! operator controls from a second process while a worker runs, a worker
//! killed with SIGKILL and its work taken over, and enqueue's bad-input
//! cases (exit 2, one line, nothing changed).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{
    TestDb, Worker, analyze_items, assert_group_one_changed_once, drop_items_created_at_index,
    enqueue_increment, json, released, sluice, spawn_worker, succeeded, until, until_items_changed,
};
use sluice_operations::window::RunWindow;
use sluice_store::{ListFilter, OperationStatus};

for_each_backend!(
    enqueue_run_until_idle_and_show_report_the_right_counts,
    run_until_idle_says_when_a_timed_pause_ends,
    a_second_process_pauses_and_resumes_a_running_worker,
    enqueue_refuses_bad_input_with_exit_2_and_changes_nothing,
    a_kill_switch_from_a_second_process_stops_its_kind_within_a_second,
    a_run_whose_operation_fails_exits_1_naming_it,
    show_counts_the_rows_a_cancelled_batch_committed,
    plan_and_dry_run_change_nothing_and_advise_on_most_of_a_table,
    a_plan_that_turns_into_a_full_scan_mid_run_fails_the_operation,
    an_analyze_makes_the_plan_drift_guard_look_at_once,
    archive_rows_moves_the_rows_in_scope_and_refuses_an_archive_that_does_not_fit,
    archive_rows_refuses_a_table_whose_deletes_reach_other_rows,
    archive_rows_copies_by_name_and_fails_on_a_column_added_since_enqueue,
    a_pause_until_a_time_is_resumed_by_a_running_worker,
    a_run_window_pauses_the_operation_when_it_closes_until_it_opens,
);

postgres_only!(a_killed_worker_s_operation_is_taken_over);

postgres_and_mysql!(four_workers_sharing_a_kind_s_rate_limit_never_exceed_it);

fn worker(db: &TestDb, node: &str) -> Worker {
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

/// Runs `sluice <command> delete-aged-rows` on `items` (rows older than
/// 30 days by `created_at`) with `extra` options.
fn delete_aged_items(db: &TestDb, command: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        command,
        "delete-aged-rows",
        "--table",
        "items",
        "--column",
        "created_at",
        "--older-than",
        "30d",
    ];
    args.extend_from_slice(extra);
    sluice(db, &args)
}

async fn enqueue_run_until_idle_and_show_report_the_right_counts(db: &TestDb) {
    create_items(db, 5_000).await;
    let deleted = json(&delete_aged_items(
        db,
        "enqueue",
        &["--batch-size", "400", "--sub-batch-size", "150", "--json"],
    ));
    assert_eq!(deleted["created"], true);
    assert_eq!(deleted["estimated_rows"], 2_500);
    // Asked again with options of its own: the pending one is returned, and
    // the options it does not take are named, as a person reads them too.
    let again = json(&delete_aged_items(
        db,
        "enqueue",
        &["--batch-size", "400", "--max-rate", "5/s", "--json"],
    ));
    assert_eq!(
        (&again["id"], &again["created"]),
        (&deleted["id"], &serde_json::json!(false))
    );
    assert_eq!(
        again["not_applied"],
        serde_json::json!(["--max-rate"]),
        "{again}"
    );
    let said = delete_aged_items(db, "enqueue", &["--window", "00:00-06:00"]);
    succeeded(&said);
    assert!(
        String::from_utf8_lossy(&said.stdout).contains("--window not applied to it"),
        "{said:?}"
    );
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
        // Its pace: every row done within the last hour, nothing left.
        assert_eq!(shown["pace"]["rows"], rows, "{shown}");
        assert!(shown["pace"]["eta_ms"].is_null(), "{shown}");
        assert_eq!(shown["pace"]["held_ms"], 0, "{shown}");
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
    // Its pace says what holds it.
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    assert_eq!(shown["pace"]["held_by"], "paused: deploy", "{shown}");
    // So does `list`: its ETA at the recent pace and the share held.
    let listed = json(&sluice(db, &["list", "--json"]));
    let pace = &listed[0]["pace"];
    assert_eq!(pace["held_by"], "paused: deploy", "{listed}");
    assert!(pace["held_ms"].as_i64().unwrap() > 0, "{listed}");
    // (An ETA only once a batch finished before the pause: none may have.)
    assert!(
        pace["eta_ms"].is_null() || pace["eta_ms"].as_i64().unwrap() > 0,
        "{listed}"
    );
    let table = String::from_utf8_lossy(&sluice(db, &["list"]).stdout).into_owned();
    let mut lines = table.lines();
    let header = lines.next().unwrap_or_default();
    assert!(
        header.contains(" ETA ") && header.contains(" HELD "),
        "{table}"
    );
    assert!(lines.next().unwrap_or_default().contains(" %"), "{table}");
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

/// `sluice plan` and `enqueue --dry-run` on `items`: the rows in scope
/// (counted), the batches, a probe that changed nothing; advice when 97.5 %
/// of the table would go and none for a small scope; a missing index
/// reported by `plan` and refused by a dry run; bad input refused as by
/// `enqueue`. After all of it, every row is as it was and nothing is enqueued.
async fn plan_and_dry_run_change_nothing_and_advise_on_most_of_a_table(db: &TestDb) {
    create_items(db, 2_000).await;
    // Every row aged but 50 (the young ones below id 300).
    let aged = db.time_literal("2020-01-01T00:00:00Z".parse().unwrap());
    db.execute(&format!(
        "UPDATE items SET created_at = {aged} WHERE id >= 300"
    ))
    .await;
    let delete = |command: &str, extra: &[&str]| {
        let mut args = vec!["--batch-size", "400", "--sub-batch-size", "150"];
        args.extend_from_slice(extra);
        delete_aged_items(db, command, &args)
    };
    let planned = json(&delete("plan", &["--json"]));
    assert_eq!(planned["rows_in_scope"]["rows"], 1_950, "{planned}");
    assert_eq!(planned["rows_in_scope"]["estimated"], false, "{planned}");
    assert_eq!(planned["table_rows"]["rows"], 2_000, "{planned}");
    // 1,950 rows picked 400 at a time: 4 batches of 3 sub-batches, and one
    // of 350 rows in 3 more.
    assert_eq!(planned["batches"], 5, "{planned}");
    assert_eq!(planned["sub_batches"], 15, "{planned}");
    assert!(
        planned["index"].is_string(),
        "the plan names its index: {planned}"
    );
    assert!(planned["refusal"].is_null(), "{planned}");
    let probe = &planned["probe"];
    assert_eq!(probe["runs"], 3, "{planned}");
    assert_eq!(probe["rows"], 150, "the first sub-batch's rows: {planned}");
    assert!(planned["predicted_ms"].is_u64(), "{planned}");
    if db.backend == "sqlite" {
        assert!(probe["log_bytes"].is_null(), "{planned}");
    } else {
        assert!(probe["log_bytes"].as_u64() > Some(0), "{planned}");
        assert!(
            planned["predicted_log_bytes"].as_u64() > Some(0),
            "{planned}"
        );
    }
    let advice = planned["advice"][0].as_str().unwrap_or_default();
    assert!(
        advice.starts_with("98 % of `items` would be deleted row by row")
            && advice.contains("copying the 50 rows to keep"),
        "{planned}"
    );
    // The same as a dry run, for people.
    let text = delete("enqueue", &["--dry-run"]);
    succeeded(&text);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("(nothing was changed)"), "{text}");
    assert!(text.contains("1,950 (counted)"), "{text}");
    assert!(text.contains("each rolled back"), "{text}");
    assert!(text.contains("advice          98 %"), "{text}");

    // A small scope: no advice.
    let update = json(&sluice(
        db,
        &[
            "plan",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + 1",
            "--where",
            "id < 300",
            "--batch-size",
            "400",
            "--sub-batch-size",
            "40",
            "--json",
        ],
    ));
    assert_eq!(
        update["rows_in_scope"]["rows"], 99,
        "ids 3 to 297: {update}"
    );
    assert_eq!(update["batches"], 1, "{update}");
    assert_eq!(update["sub_batches"], 3, "{update}");
    assert_eq!(update["advice"], serde_json::json!([]), "{update}");
    assert_eq!(
        update["probe"]["rows"], 40,
        "a first sub-batch's rows: {update}"
    );

    // Without the index: plan reports the refusal, a dry run is refused.
    drop_items_created_at_index(db).await;
    let unindexed = json(&delete("plan", &["--json"]));
    let refusal = unindexed["refusal"].as_str().unwrap_or_default();
    assert!(refusal.contains("reads all of `items`"), "{unindexed}");
    assert!(
        unindexed["probe"].is_null(),
        "no probe of a full scan: {unindexed}"
    );
    let dry = delete("enqueue", &["--dry-run"]);
    let err = String::from_utf8_lossy(&dry.stderr);
    assert_eq!(dry.status.code(), Some(2), "{err}");
    assert!(err.contains("enqueue would refuse this operation"), "{err}");
    // Bad input is refused as enqueue refuses it.
    let unknown = sluice(
        db,
        &[
            "plan",
            "delete-aged-rows",
            "--table",
            "itmes",
            "--column",
            "created_at",
            "--older-than",
            "30d",
        ],
    );
    assert_eq!(unknown.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown table `itmes`"));
    let scheduled = sluice(
        db,
        &[
            "schedule",
            "add",
            "--name",
            "n",
            "--cron",
            "0 3 * * *",
            "delete-aged-rows",
            "--table",
            "items",
            "--column",
            "created_at",
            "--older-than",
            "30d",
            "--dry-run",
        ],
    );
    assert_eq!(
        scheduled.status.code(),
        Some(2),
        "schedule add refuses --dry-run"
    );

    assert!(
        db.store
            .list(&ListFilter::default())
            .await
            .unwrap()
            .is_empty(),
        "nothing was enqueued"
    );
    assert!(
        db.store.schedules().await.unwrap().is_empty(),
        "no schedule was added"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 2_000);
    assert_eq!(
        db.scalar("SELECT COALESCE(SUM(counter), 0) FROM items")
            .await,
        0
    );
}

/// 2,000 `items`, half aged, being deleted by a worker that looks at the
/// plan every `plan_check_interval`: batches of 100, sub-batches of
/// `sub_batch` rows, `pause` between them. The operation's id and its
/// worker.
async fn deleting_aged_items_slowly(
    db: &TestDb,
    sub_batch: &str,
    pause: &str,
    plan_check_interval: &str,
) -> (i64, Worker) {
    create_items(db, 2_000).await;
    let options = [
        "--batch-size",
        "100",
        "--sub-batch-size",
        sub_batch,
        "--pause",
        pause,
        "--json",
    ];
    let enqueued = json(&delete_aged_items(db, "enqueue", &options));
    let worker = spawn_worker(
        db,
        &[
            "--node",
            "drift-worker",
            "--plan-check-interval",
            plan_check_interval,
        ],
    );
    (enqueued["id"].as_i64().unwrap(), worker)
}

/// The plan-drift guard: a `delete-aged-rows` walking an index on
/// `created_at` is running when the index is dropped. The worker, looking at
/// the plan every second, fails the operation naming the full scan (rows
/// left aged, no young row touched); with the index back, `retry` finishes
/// the job.
async fn a_plan_that_turns_into_a_full_scan_mid_run_fails_the_operation(db: &TestDb) {
    let (id, _worker) = deleting_aged_items_slowly(db, "10", "20ms", "1s").await;
    let aged = "SELECT COUNT(*) FROM items WHERE grp = 0";
    until("the worker deletes aged rows", || async {
        db.scalar(aged).await < 980
    })
    .await;
    drop_items_created_at_index(db).await;
    until("the operation fails", || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Failed
    })
    .await;
    let state = db.store.operation(id).await.unwrap().state;
    let error = state.last_error.unwrap_or_default();
    let scan = match db.backend {
        "postgres" => "Seq Scan on items",
        "mysql" => "table items access ALL possible_keys NULL",
        _ => "SCAN items",
    };
    assert!(
        error.starts_with("plan drift: the batch query now reads all of `items`")
            && error.contains(scan)
            && error.contains("Plan: "),
        "{error}"
    );
    let left = db.scalar(aged).await;
    assert!(left > 0, "stopped before the end, {left} aged rows left");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await,
        1_000,
        "no young row was touched"
    );

    db.execute("CREATE INDEX items_created_at_idx ON items (created_at)")
        .await;
    succeeded(&sluice(db, &["retry", &id.to_string()]));
    until("the retried operation finishes", || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert_eq!(db.scalar(aged).await, 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await,
        1_000
    );
}

/// The guard looks again as soon as the target's statistics change, not
/// only every `--plan-check-interval`: with the interval at an hour (and
/// fewer batches than the every-100 look), an index dropped mid-run goes
/// unseen until an `ANALYZE` of the table, which fails the operation with
/// the plan within a few seconds.
async fn an_analyze_makes_the_plan_drift_guard_look_at_once(db: &TestDb) {
    let (id, _worker) = deleting_aged_items_slowly(db, "5", "50ms", "1h").await;
    let aged = "SELECT COUNT(*) FROM items WHERE grp = 0";
    // Past the worker's first reading of the statistics (a second in).
    until("the worker deletes aged rows", || async {
        db.scalar(aged).await < 850
    })
    .await;
    drop_items_created_at_index(db).await;
    analyze_items(db).await;
    until("the operation fails or finishes", || async {
        let status = db.store.operation(id).await.unwrap().state.status;
        status == OperationStatus::Failed || status.is_terminal()
    })
    .await;
    let state = db.store.operation(id).await.unwrap().state;
    assert_eq!(state.status, OperationStatus::Failed, "the guard looked");
    let error = state.last_error;
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.starts_with("plan drift: the batch query now reads all of `items`")),
        "{error:?}"
    );
    assert!(db.scalar(aged).await > 0, "stopped before the end");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await,
        1_000,
        "no young row was touched"
    );
}

/// `archive-rows` from the command line: a dry run creates nothing; the
/// first run creates the archive table and moves exactly the rows in scope
/// with their values; a second one fills the same table; an archive table
/// that does not fit, or the live table itself, is refused with exit 2 and
/// nothing changed (no operation, no table).
async fn archive_rows_moves_the_rows_in_scope_and_refuses_an_archive_that_does_not_fit(
    db: &TestDb,
) {
    create_items(db, 1_000).await;
    db.execute("UPDATE items SET counter = id % 7").await;
    let sum = "SELECT CAST(COALESCE(SUM(id * 10 + counter), 0) AS BIGINT) FROM ";
    let before = db
        .scalar(&format!("{sum}items WHERE grp = 1 AND id < 1500"))
        .await;
    let archive = |into: &str, condition: &str, extra: &[&str]| {
        let mut args = vec![
            "enqueue",
            "archive-rows",
            "--table",
            "items",
            "--into",
            into,
            "--where",
            condition,
            "--batch-size",
            "100",
            "--sub-batch-size",
            "30",
        ];
        args.extend_from_slice(extra);
        sluice(db, &args)
    };
    let table_exists = |name: &'static str| async move {
        let query = match db.backend {
            "sqlite" => format!("SELECT COUNT(*) FROM sqlite_master WHERE name = '{name}'"),
            "postgres" => format!(
                "SELECT COUNT(*) FROM pg_tables WHERE tablename = '{name}' AND schemaname = current_schema()"
            ),
            _ => format!(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = '{name}' AND table_schema = DATABASE()"
            ),
        };
        db.scalar(&query).await == 1
    };

    let dry = archive("items_archive", "grp = 1 AND id < 1500", &["--dry-run"]);
    succeeded(&dry);
    assert!(
        !table_exists("items_archive").await,
        "a dry run creates nothing"
    );

    succeeded(&archive("items_archive", "grp = 1 AND id < 1500", &[]));
    assert!(table_exists("items_archive").await);
    succeeded(&sluice(db, &["run", "--until-idle", "--node", "archiver"]));
    let in_scope = "grp = 1 AND id < 1500";
    assert_eq!(
        db.scalar(&format!("SELECT COUNT(*) FROM items WHERE {in_scope}"))
            .await,
        0
    );
    let moved = db.scalar("SELECT COUNT(*) FROM items_archive").await;
    assert_eq!(moved, 250, "ids 3..1497 step 3 with g odd");
    assert_eq!(db.scalar(&format!("{sum}items_archive")).await, before);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 750);

    // A second operation fills the same (fitting) table.
    succeeded(&archive("items_archive", "grp = 1", &[]));
    succeeded(&sluice(db, &["run", "--until-idle", "--node", "archiver"]));
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items_archive").await, 500);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1").await,
        0
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 500);

    // A time scope, as delete-aged-rows takes (every row left is aged),
    // with a condition: both must hold.
    let aged = archive(
        "items_archive",
        "id < 1500",
        &["--column", "created_at", "--older-than", "30d"],
    );
    succeeded(&aged);
    succeeded(&sluice(db, &["run", "--until-idle", "--node", "archiver"]));
    // Even g below 500: 249 rows.
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items_archive").await, 749);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE id < 1500")
            .await,
        0
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 251);

    // Refused: an archive lacking a column, the live table itself (also
    // under a qualified name, and on SQLite in another case), a view.
    db.execute("CREATE TABLE thin_archive (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL)")
        .await;
    db.execute("CREATE VIEW items_view AS SELECT * FROM items")
        .await;
    let operations = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
    let qualified = db.qualified("items");
    let other_case = if db.backend == "sqlite" {
        "ITEMS"
    } else {
        "items"
    };
    for (into, says) in [
        ("thin_archive", "it has no column `counter`"),
        ("items", "another table to move rows into"),
        (qualified.as_str(), "is `items` itself"),
        (other_case, "another table to move rows into"),
        ("items_view", "items_view` is a view"),
        (
            "items_archive; DROP TABLE items",
            "is not a plain SQL identifier",
        ),
    ] {
        let refused = archive(into, "grp = 0", &[]);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{into}: {stderr}");
        assert!(stderr.contains(says), "{into}: {stderr}");
    }
    // A refusal after the table was created drops it again: here, a full
    // scan (no index serves `counter`) with an archive that did not exist.
    let refused = archive("new_archive", "counter = 3", &["--key", "counter"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(!table_exists("new_archive").await, "dropped again");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        operations,
        "nothing enqueued"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 251);
}

/// `archive-rows` out of a table that foreign keys refer to with `ON DELETE
/// CASCADE` or `SET NULL` (from another table, or from the table itself) is
/// refused: deleting an archived row would delete or change rows that are
/// not archived. A table only referring to others is archived as ever.
/// `delete-aged-rows` over a table whose own rows refer to each other with
/// `ON DELETE CASCADE` is refused: a young reply to an aged row would go
/// with it.
async fn archive_rows_refuses_a_table_whose_deletes_reach_other_rows(db: &TestDb) {
    for sql in [
        "CREATE TABLE parents (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL)",
        "CREATE TABLE children (id BIGINT PRIMARY KEY, parent_id BIGINT NOT NULL, \
         FOREIGN KEY (parent_id) REFERENCES parents (id) ON DELETE CASCADE)",
        "CREATE TABLE threads (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, parent_id BIGINT, \
         FOREIGN KEY (parent_id) REFERENCES threads (id) ON DELETE SET NULL)",
    ] {
        db.execute(sql).await;
    }
    db.insert_series("parents (id, grp)", "g, g % 2", 10, "")
        .await;
    db.insert_series("children (id, parent_id)", "g, (g % 10) + 1", 20, "")
        .await;
    db.insert_series("threads (id, grp, parent_id)", "g, g % 2, NULL", 10, "")
        .await;
    db.execute("UPDATE threads SET parent_id = id - 1 WHERE id > 1")
        .await;
    let archive =
        |table: &str, into: &str, condition: &str| enqueue_archive(db, table, into, condition, &[]);
    for (table, reached) in [("parents", "`children` ("), ("threads", "`threads` (")] {
        let refused = archive(table, &format!("{table}_archive"), "grp = 1");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{table}: {said}");
        assert_eq!(said.trim_end().lines().count(), 1, "{said}");
        assert!(
            said.contains("would lose rows it does not archive"),
            "{said}"
        );
        assert!(said.contains(reached), "{table}: {reached} in {said}");
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM children").await, 20);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM threads WHERE parent_id IS NOT NULL")
            .await,
        9
    );
    // `children` only refers to `parents`: nothing reaches its rows.
    succeeded(&archive("children", "children_archive", "parent_id > 5"));

    let time = db.time_type();
    db.execute(&format!(
        "CREATE TABLE replies (id BIGINT PRIMARY KEY, created_at {time} NOT NULL, parent_id BIGINT, \
         FOREIGN KEY (parent_id) REFERENCES replies (id) ON DELETE CASCADE)"
    ))
    .await;
    db.execute("CREATE INDEX replies_created_at ON replies (created_at)")
        .await;
    let (old, young) = (
        db.time_literal("2020-01-01T00:00:00Z".parse().unwrap()),
        db.time_literal(chrono::Utc::now()),
    );
    db.execute(&format!(
        "INSERT INTO replies (id, created_at, parent_id) VALUES (1, {old}, NULL), (2, {young}, 1)"
    ))
    .await;
    let refused = sluice(
        db,
        &[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "replies",
            "--column",
            "created_at",
            "--older-than",
            "30d",
        ],
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("outside its scope"), "{said}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM replies").await, 2);
}

/// The live table's columns change between enqueue and run. Columns moved
/// (MySQL's `MODIFY … AFTER`; elsewhere one dropped and added again, now
/// last) are copied into their own archive columns, by name; a column added
/// fails the run, naming it, with every row still in the live table and
/// its values — copied, it would have lost them.
async fn archive_rows_copies_by_name_and_fails_on_a_column_added_since_enqueue(db: &TestDb) {
    for table in ["moved", "grown"] {
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, a INTEGER NOT NULL, b INTEGER NOT NULL)"
        ))
        .await;
        db.insert_series(&format!("{table} (id, a, b)"), "g, g, g * 100", 20, "")
            .await;
    }
    let archive = |table: &str| {
        let into = format!("{table}_archive");
        enqueue_archive(db, table, &into, "id <= 10", &["--sub-batch-size", "4"])
    };

    succeeded(&archive("moved"));
    if db.backend == "mysql" {
        db.execute("ALTER TABLE moved MODIFY b INTEGER NOT NULL AFTER id")
            .await;
    } else if db.backend == "sqlite" {
        // One call, so one connection: SQLite prepares an ALTER against
        // its connection's schema as last read.
        db.execute(
            "ALTER TABLE moved DROP COLUMN a; \
             ALTER TABLE moved ADD COLUMN a INTEGER NOT NULL DEFAULT 0; \
             UPDATE moved SET a = id",
        )
        .await;
    } else {
        db.execute("ALTER TABLE moved DROP COLUMN a").await;
        db.execute("ALTER TABLE moved ADD COLUMN a INTEGER NOT NULL DEFAULT 0")
            .await;
        db.execute("UPDATE moved SET a = id").await;
    }
    succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM moved_archive WHERE a = id AND b = id * 100")
            .await,
        10,
        "each value in its own column"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM moved").await, 10);

    succeeded(&archive("grown"));
    db.execute("ALTER TABLE grown ADD COLUMN extra INTEGER NOT NULL DEFAULT 7")
        .await;
    let failed = sluice(db, &["run", "--until-idle"]);
    let said = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{said}");
    assert!(said.contains("(extra)"), "{said}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM grown_archive").await, 0);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM grown WHERE extra = 7")
            .await,
        20,
        "every row where it was, with its values"
    );
}

/// `sluice enqueue archive-rows` of the rows of `table` matching
/// `condition` into `into`, with `extra` options.
fn enqueue_archive(
    db: &TestDb,
    table: &str,
    into: &str,
    condition: &str,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec![
        "enqueue",
        "archive-rows",
        "--table",
        table,
        "--into",
        into,
        "--where",
        condition,
    ];
    args.extend_from_slice(extra);
    sluice(db, &args)
}

/// `pause --until`: a running worker's scheduler resumes the operation once
/// the time has come, recording `resumed`; a manual resume cancels the
/// timed one; a kill switch with an end is lifted the same way; a past or
/// unreadable time is refused.
async fn a_pause_until_a_time_is_resumed_by_a_running_worker(db: &TestDb) {
    create_items(db, 6_000).await;
    let op = enqueue_increment(
        db,
        &[
            "--sub-batch-size",
            "50",
            "--batch-size",
            "200",
            "--pause",
            "20ms",
        ],
    );
    let id = op["id"].as_i64().unwrap();
    let id_text = id.to_string();
    for (until, says) in [
        ("2020-01-01T00:00Z", "is already past"),
        ("tomorrow", "is neither a time"),
    ] {
        let refused = sluice(db, &["pause", &id_text, "--until", until]);
        assert_eq!(refused.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&refused.stderr).contains(says));
    }
    let _worker = worker(db, "timed-worker");
    until_items_changed(db, 0).await;
    succeeded(&sluice(
        db,
        &["pause", &id_text, "--until", "2s", "--reason", "peak"],
    ));
    let shown = json(&sluice(db, &["show", &id_text, "--json"]));
    assert_eq!(shown["status"], "paused", "{shown}");
    assert!(shown["resume_at"].as_i64().is_some(), "{shown}");
    let target = format!("operation:{id}");
    until(
        "the worker resumes it by itself and forgets the time",
        || async {
            db.store.operation(id).await.unwrap().state.status != OperationStatus::Paused
                && db.store.timed_resume(&target).await.unwrap().is_none()
        },
    )
    .await;
    let kinds: Vec<String> = db
        .store
        .events(id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event.kind().to_owned())
        .collect();
    let paused = kinds.iter().position(|k| k == "paused").unwrap();
    // (The batch in flight when it paused records its outcome in between.)
    assert!(kinds[paused..].contains(&"resumed".to_owned()), "{kinds:?}");

    // A manual resume cancels a timed one.
    succeeded(&sluice(db, &["pause", &id_text, "--until", "1h"]));
    succeeded(&sluice(db, &["resume", &id_text]));
    let shown = json(&sluice(db, &["show", &id_text, "--json"]));
    assert!(shown["resume_at"].is_null(), "{shown}");

    // A kill switch with an end: lifted by the worker, its operation resumed.
    succeeded(&sluice(
        db,
        &["pause", "--kind", "update-in-batches", "--until", "2s"],
    ));
    assert_eq!(db.store.switches().await.unwrap().len(), 1);
    until("the worker lifts the switch", || async {
        db.store.switches().await.unwrap().is_empty()
    })
    .await;
    finishes_with_every_row_changed_once(db, id).await;
}

/// `--window`: bad windows and zones are refused with exit 2 and nothing
/// enqueued; an operation whose window closes while it runs is paused by
/// the worker until the next opening (no sub-batch starts after the close:
/// the driver's rule, unit-tested with an injected clock), and continues
/// once its window is open again.
async fn a_run_window_pauses_the_operation_when_it_closes_until_it_opens(db: &TestDb) {
    create_items(db, 12_000).await;
    for (window, zone, says) in [
        ("25:00-06:00", "UTC", "invalid run window `25:00-06:00`"),
        (
            "00:00-06:00",
            "Mars/Olympus",
            "unknown time zone `Mars/Olympus`",
        ),
    ] {
        let refused = sluice(
            db,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = counter + 1",
                "--window",
                window,
                "--time-zone",
                zone,
            ],
        );
        assert_eq!(refused.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);

    // Open since an hour ago, closing 6 s from now (UTC). Sub-batches of 20
    // rows 20 ms apart change at most 1,000 rows a second: rows are left.
    let now = chrono::Utc::now();
    let hours = format!(
        "{}-{}",
        (now - chrono::Duration::hours(1)).format("%H:%M:%S"),
        (now + chrono::Duration::seconds(6)).format("%H:%M:%S")
    );
    let op = enqueue_increment(
        db,
        &[
            "--batch-size",
            "200",
            "--sub-batch-size",
            "20",
            "--pause",
            "20ms",
            "--window",
            &hours,
        ],
    );
    let id = op["id"].as_i64().unwrap();
    let id_text = id.to_string();
    let shown = json(&sluice(db, &["show", &id_text, "--json"]));
    // Shown as stored (a time on the minute loses its `:00`).
    let shown_window = shown["window"].as_str().unwrap_or_default();
    let (shown_hours, zone) = shown_window.split_once(' ').unwrap_or_default();
    assert_eq!(zone, "UTC", "{shown}");
    assert_eq!(
        RunWindow::parse(shown_hours, zone).ok(),
        RunWindow::parse(&hours, "UTC").ok(),
        "{shown}"
    );
    let _worker = worker(db, "window-worker");
    until_items_changed(db, 0).await;
    until("the window closes and the worker pauses it", || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Paused
    })
    .await;
    let events = db.store.events(id, 0).await.unwrap();
    let paused = events
        .iter()
        .find_map(|e| match &e.event {
            sluice_store::Event::Paused { reason } => Some(reason.clone()),
            _ => None,
        })
        .unwrap();
    // The window as stored (a time on the minute loses its `:00`).
    let paused_hours = paused
        .strip_prefix("outside its run window ")
        .and_then(|rest| rest.split_once(" UTC (until "))
        .map(|(window, _)| window);
    assert_eq!(
        paused_hours.and_then(|window| RunWindow::parse(window, "UTC").ok()),
        RunWindow::parse(&hours, "UTC").ok(),
        "{paused}"
    );
    // Resumed at the next opening, about a day away.
    let shown = json(&sluice(db, &["show", &id_text, "--json"]));
    let resume_at = shown["resume_at"].as_i64().unwrap();
    let opening = (now - chrono::Duration::hours(1)).timestamp_millis() + 86_400_000;
    assert!(
        (resume_at - opening).abs() < 2_000,
        "{resume_at} vs {opening}"
    );
    let changed = db
        .scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
        .await;
    assert!(changed < 12_000, "stopped when the window closed");

    // The opening comes (the window moved so it is open, the resume due).
    db.execute("UPDATE sluice_windows SET run_window = '00:00-23:59:59'")
        .await;
    db.execute("UPDATE sluice_resumes SET resume_at = 0").await;
    finishes_with_every_row_changed_once(db, id).await;
}

/// Waits for operation `id` to finish, then checks every row of `items`
/// was changed exactly once (`counter = 1`) and its log replays.
async fn finishes_with_every_row_changed_once(db: &TestDb, id: i64) {
    until("the operation finishes", || async {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 1")
            .await,
        0,
        "every row once"
    );
    db.store.verify(id).await.unwrap();
}

/// `sluice limit --kind`: four worker processes, each running one of four
/// operations of the kind, share one token bucket in the database. At
/// every moment sampled, the rows changed are at most what the limit
/// allows since it was set (its one-second burst plus the rate times the
/// time since), and at the end every row was changed once.
async fn four_workers_sharing_a_kind_s_rate_limit_never_exceed_it(db: &TestDb) {
    const RATE: f64 = 1_000.0;
    create_items(db, 8_000).await;
    let set = std::time::Instant::now();
    succeeded(&sluice(
        db,
        &["limit", "--kind", "update-in-batches", "--rate", "1000/s"],
    ));
    let ids: Vec<i64> = (0..4)
        .map(|k| {
            let condition = format!("id % 4 = {k}");
            enqueue_increment(
                db,
                &[
                    "--where",
                    &condition,
                    "--batch-size",
                    "500",
                    "--sub-batch-size",
                    "50",
                ],
            )["id"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let _workers: Vec<Worker> = (0..4)
        .map(|n| {
            spawn_worker(
                db,
                &["--node", &format!("limited-{n}"), "--concurrency", "1"],
            )
        })
        .collect();
    let shown = json(&sluice(db, &["show", &ids[0].to_string(), "--json"]));
    assert_eq!(
        shown["rate_limits"],
        serde_json::json!([{"target": "kind:update-in-batches", "rows_per_second": 1000}]),
        "{shown}"
    );
    let mut samples = 0;
    // While the limit holds them back, `show` and `list` say it binds.
    let binding = serde_json::json!({
        "by": "rate_limit", "target": "kind:update-in-batches", "rows_per_second": 1000
    });
    let mut seen_binding = false;
    loop {
        if !seen_binding {
            let shown = json(&sluice(db, &["show", &ids[0].to_string(), "--json"]));
            if shown["binding"] == binding {
                let listed = String::from_utf8_lossy(&sluice(db, &["list"]).stdout).into_owned();
                assert!(listed.contains("rate 1000/s"), "{listed}");
                seen_binding = true;
            }
        }
        let changed = db
            .scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
            .await;
        let allowed = RATE + RATE * set.elapsed().as_secs_f64();
        assert!(
            changed as f64 <= allowed,
            "{changed} rows changed where the limit allows {allowed:.0}"
        );
        samples += 1;
        if changed == 8_000 {
            break;
        }
        assert!(
            set.elapsed() < Duration::from_secs(300),
            "the operations finish"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(samples > 10, "sampled along the way ({samples})");
    assert!(seen_binding, "show named the kind's limit as binding");
    for id in ids {
        until("the operation finishes", || async {
            db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
        })
        .await;
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE counter <> 1")
            .await,
        0
    );
}

/// `run --until-idle` leaving an operation paused until a time says it
/// resumes by itself then; one paused without an end still asks for a
/// resume.
async fn run_until_idle_says_when_a_timed_pause_ends(db: &TestDb) {
    create_items(db, 20).await;
    let timed = enqueue_increment(db, &["--where", "grp = 0"]);
    let open = enqueue_increment(db, &["--where", "grp = 1"]);
    let (timed, open) = (
        timed["id"].as_i64().unwrap().to_string(),
        open["id"].as_i64().unwrap().to_string(),
    );
    succeeded(&sluice(db, &["pause", &timed, "--until", "2h"]));
    succeeded(&sluice(db, &["pause", &open]));
    let run = sluice(db, &["run", "--until-idle"]);
    succeeded(&run);
    let said = String::from_utf8_lossy(&run.stderr);
    let line = |id: &str| {
        said.lines()
            .find(|l| l.starts_with(&format!("operation {id} ")))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        line(&timed).contains("a running worker resumes it then by itself"),
        "{said}"
    );
    assert!(
        line(&open).ends_with(&format!("`sluice resume {open}` to go on")),
        "{said}"
    );
}

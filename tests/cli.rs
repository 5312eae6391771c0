//! The `sluice` binary end to end, on a real SQLite file and the real
//! PostgreSQL: what it prints, its exit codes, and that refused input changes
//! nothing.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{TestDb, json, sluice};
use serde_json::Value;
use sluice_store::{Event, Expected, OperationSpec, OperationStatus, StoreError};
use sluice_target::Cursor;

for_each_backend!(
    reads_show_progress_as_tables_and_json,
    controls_by_id_change_state_and_refuse_what_does_not_apply,
    controls_by_kind_and_all_touch_only_what_applies,
    pause_from_another_process_fences_the_running_holder,
    unknown_ids_and_malformed_options_exit_2_and_change_nothing,
    prune_reports_what_it_deleted,
    schedule_commands_manage_schedules_and_refuse_bad_input_with_exit_2,
    a_limit_for_an_unknown_kind_or_a_bad_rate_exits_2_and_sets_nothing,
    latency_budgets_are_set_at_enqueue_and_by_limit_and_shown,
);

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

async fn enqueue(db: &TestDb, kind: &str, table: &str) -> i64 {
    let mut spec = OperationSpec::new(kind, table, vec!["id".into()]);
    spec.estimated_rows = Some(400);
    spec.max_cursor = Some(Cursor::int(400));
    db.store.enqueue(spec).await.unwrap().id
}

/// Claims `id` and runs one 100-row batch of it through the store.
async fn run_one_batch(db: &TestDb, id: i64) {
    let claimed = db
        .store
        .claim_operations("worker-1", 10, Duration::from_secs(60))
        .await
        .unwrap();
    let lease = claimed
        .into_iter()
        .find(|c| c.record.id == id)
        .unwrap()
        .record
        .lease
        .unwrap();
    db.store
        .plan_batch(&lease, Some(Cursor::int(100)), 100)
        .await
        .unwrap();
    let batch = db
        .store
        .claim_batches("worker-1", Some(id), 1, Duration::from_secs(60))
        .await
        .unwrap()
        .remove(0);
    db.store
        .complete_batch(
            &batch.lease().unwrap(),
            100,
            Duration::from_millis(12),
            None,
        )
        .await
        .unwrap();
}

async fn reads_show_progress_as_tables_and_json(db: &TestDb) {
    let id = enqueue(db, "delete-aged-rows", "events").await;
    run_one_batch(db, id).await;
    let list = sluice(db, &["list"]);
    assert!(list.status.success(), "{}", stderr(&list));
    let text = stdout(&list);
    assert!(
        text.lines().next().unwrap().starts_with("ID  STATUS"),
        "{text}"
    );
    assert!(
        text.contains("running")
            && text.contains("delete-aged-rows")
            && text.contains("25.0%")
            && text.contains("1/1"),
        "{text}"
    );

    let listed = json(&sluice(db, &["list", "--json", "--status", "running"]));
    assert_eq!(listed[0]["id"], id);
    assert_eq!(listed[0]["rows_done"], 100);
    assert_eq!(listed[0]["percent_done"], 25.0);
    assert_eq!(listed[0]["lease"]["node"], "worker-1");
    assert_eq!(
        json(&sluice(db, &["list", "--json", "--status", "paused"])),
        Value::Array(vec![])
    );

    let show = stdout(&sluice(db, &["show", &id.to_string()]));
    assert!(show.contains("status            running"), "{show}");
    assert!(
        show.contains("100 rows (25.0%)") && show.contains("held by"),
        "{show}"
    );
    assert_eq!(
        json(&sluice(db, &["show", &id.to_string(), "--json"]))["cursor"],
        serde_json::json!([100])
    );

    let events = stdout(&sluice(db, &["events", &id.to_string()]));
    for kind in ["created", "started", "batch_planned", "batch_succeeded"] {
        assert!(events.contains(kind), "{kind} missing from {events}");
    }
    assert!(events.contains("batch 1: 100 rows in 12 ms"), "{events}");
    let events = json(&sluice(db, &["events", &id.to_string(), "--json"]));
    assert_eq!(events.as_array().unwrap().len(), 4);
    assert_eq!(events[2]["kind"], "batch_planned");
    assert_eq!(
        events[2]["event"]["BatchPlanned"]["end"],
        serde_json::json!([100])
    );
}

async fn controls_by_id_change_state_and_refuse_what_does_not_apply(db: &TestDb) {
    let id = enqueue(db, "k", "t").await;
    let sid = id.to_string();
    let status = || async { db.store.operation(id).await.unwrap().state.status };

    let resume = sluice(db, &["resume", &sid]);
    assert_eq!(resume.status.code(), Some(2));
    assert!(
        stderr(&resume).contains(&format!("cannot resume operation {id}")),
        "{}",
        stderr(&resume)
    );
    assert_eq!(
        db.store.operation(id).await.unwrap().state.last_seq,
        1,
        "a refused control writes nothing"
    );

    let paused = json(&sluice(
        db,
        &["pause", &sid, "--reason", "night freeze", "--json"],
    ));
    assert_eq!(paused["changed"], serde_json::json!([id]));
    assert_eq!(status().await, OperationStatus::Paused);
    assert!(
        matches!(&db.store.events(id, 0).await.unwrap()[1].event, Event::Paused { reason } if reason == "night freeze")
    );

    assert!(sluice(db, &["resume", &sid]).status.success());
    assert_eq!(status().await, OperationStatus::Pending);
    assert_eq!(
        sluice(db, &["retry", &sid]).status.code(),
        Some(2),
        "only failed operations can be retried"
    );

    db.store
        .append(
            id,
            Expected::Any,
            None,
            &[Event::Failed {
                error: "boom".into(),
            }],
        )
        .await
        .unwrap();
    assert!(sluice(db, &["retry", &sid]).status.success());
    assert_eq!(status().await, OperationStatus::Pending);
    assert!(sluice(db, &["cancel", &sid]).status.success());
    assert_eq!(status().await, OperationStatus::Cancelled);
    assert_eq!(
        sluice(db, &["pause", &sid]).status.code(),
        Some(2),
        "cancelled is terminal"
    );
    db.store.verify(id).await.unwrap();
}

async fn controls_by_kind_and_all_touch_only_what_applies(db: &TestDb) {
    let a1 = enqueue(db, "cleanup", "a1").await;
    let a2 = enqueue(db, "cleanup", "a2").await;
    let b = enqueue(db, "backfill", "b").await;
    let done = enqueue(db, "cleanup", "done").await;
    db.store
        .append(
            done,
            Expected::Any,
            None,
            &[Event::Cancelled { reason: "x".into() }],
        )
        .await
        .unwrap();

    let paused = json(&sluice(db, &["pause", "--kind", "cleanup", "--json"]));
    assert_eq!(paused["changed"], serde_json::json!([a1, a2]));
    assert_eq!(
        db.store.operation(b).await.unwrap().state.status,
        OperationStatus::Pending
    );
    assert_eq!(
        db.store.operation(done).await.unwrap().state.status,
        OperationStatus::Cancelled
    );

    let all = json(&sluice(db, &["pause", "--all", "--json"]));
    assert_eq!(
        all["changed"],
        serde_json::json!([b]),
        "already paused and terminal ones are not touched"
    );
    let resumed = stdout(&sluice(db, &["resume", "--all"]));
    assert!(resumed.contains("resume: 3 operations"), "{resumed}");
    for id in [a1, a2, b] {
        assert_eq!(
            db.store.operation(id).await.unwrap().state.status,
            OperationStatus::Pending
        );
    }
    assert_eq!(sluice(db, &["pause", "--kind", ""]).status.code(), Some(2));
}

async fn pause_from_another_process_fences_the_running_holder(db: &TestDb) {
    let id = enqueue(db, "k", "t").await;
    let lease = common::claim_lease(&db.store, "worker-1", Duration::from_secs(60)).await;
    assert!(sluice(db, &["pause", &id.to_string()]).status.success());
    // The worker's next write — planning a batch — is rejected: it must stop.
    let planned = db
        .store
        .plan_batch(&lease, Some(Cursor::int(100)), 100)
        .await;
    assert!(
        matches!(planned, Err(StoreError::LeaseLost { .. })),
        "{planned:?}"
    );
    assert!(
        db.store
            .claim_batches("worker-2", Some(id), 1, Duration::from_secs(60))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(sluice(db, &["resume", &id.to_string()]).status.success());
    let again = db
        .store
        .claim_operations("worker-2", 1, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(again[0].record.lease.as_ref().unwrap().epoch, 2);
}

async fn unknown_ids_and_malformed_options_exit_2_and_change_nothing(db: &TestDb) {
    let id = enqueue(db, "k", "t").await;
    let before = db.scalar("SELECT COUNT(*) FROM sluice_events").await;
    let cases: &[(&[&str], &str)] = &[
        (&["show", "999999"], "no operation with id 999999"),
        (&["events", "999999"], "no operation with id 999999"),
        (&["pause", "999999"], "no operation with id 999999"),
        (&["show", "abc"], "invalid value 'abc'"),
        (&["list", "--status", "done"], "unknown status `done`"),
        (&["list", "--limit", "ten"], "invalid value 'ten'"),
        (
            &["prune", "--older-than", "90 days"],
            "malformed duration `90 days`",
        ),
        (
            &["prune", "--older-than", "-1d"],
            "negative durations are not allowed",
        ),
        (&["prune", "--chunk", "0"], "invalid value '0'"),
        (&["pause"], "required arguments were not provided"),
        (&["pause", "1", "--all"], "cannot be used with"),
        (&["explode"], "unrecognized subcommand"),
    ];
    for (args, message) in cases {
        let output = sluice(db, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{args:?}: expected `{message}` in {}",
            stderr(&output)
        );
        assert!(!stderr(&output).contains("panicked"), "{args:?}");
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_events").await,
        before,
        "nothing changed"
    );
    assert_eq!(
        db.store.operation(id).await.unwrap().state.status,
        OperationStatus::Pending
    );
}

async fn prune_reports_what_it_deleted(db: &TestDb) {
    let id = enqueue(db, "k", "t").await;
    run_one_batch(db, id).await;
    db.store
        .append(
            id,
            Expected::Any,
            None,
            &[Event::Cancelled { reason: "x".into() }],
        )
        .await
        .unwrap();
    // Just ended: kept at the default retention, pruned at 0s.
    assert_eq!(
        json(&sluice(db, &["prune", "--json"]))["batches_deleted"],
        0
    );
    assert_eq!(
        json(&sluice(db, &["prune", "--older-than", "0s", "--json"]))["batches_deleted"],
        1
    );
    assert!(db.store.batches(id).await.unwrap().is_empty());
    db.store.verify(id).await.unwrap();
}

#[test]
fn database_urls_that_cannot_work_are_refused() {
    let run = |url: &str| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["--database-url", url, "list"])
            .output()
            .unwrap()
    };
    let wrong = run("mongodb://root:secret@127.0.0.1:27017/test");
    assert_eq!(wrong.status.code(), Some(2));
    assert!(
        stderr(&wrong)
            .contains("unsupported database URL `mongodb://root:***@127.0.0.1:27017/test`"),
        "{}",
        stderr(&wrong)
    );
    assert!(!stderr(&wrong).contains("secret"));
    // Unreachable servers: exit 1, one line naming the URL without its password.
    for (url, shown) in [
        (
            "postgres://postgres@127.0.0.1:1/test",
            "postgres://postgres@127.0.0.1:1/test",
        ),
        (
            "mysql://root:secret@127.0.0.1:1/test",
            "mysql://root:***@127.0.0.1:1/test",
        ),
    ] {
        let unreachable = run(url);
        let said = stderr(&unreachable);
        assert_eq!(unreachable.status.code(), Some(1), "{said}");
        assert!(
            said.contains(&format!("cannot reach the database at {shown}")),
            "{said}"
        );
        assert_eq!(said.lines().count(), 1, "one line: {said}");
        assert!(!said.contains("secret"), "{said}");
    }
}

async fn schedule_commands_manage_schedules_and_refuse_bad_input_with_exit_2(db: &TestDb) {
    db.execute(if db.backend == "postgres" {
        "CREATE TABLE events (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL)"
    } else {
        "CREATE TABLE events (id INTEGER PRIMARY KEY, created_at TEXT NOT NULL)"
    })
    .await;
    db.execute("CREATE INDEX events_created_at_idx ON events (created_at)")
        .await;
    let target = [
        "delete-aged-rows",
        "--table",
        "events",
        "--column",
        "created_at",
        "--older-than",
        "90d",
    ];
    let add = |name: &str, cron: &str, extra: &[&str], kind: &[&str]| {
        let mut args = vec!["schedule", "add", "--name", name, "--cron", cron];
        args.extend_from_slice(extra);
        args.extend_from_slice(kind);
        sluice(db, &args)
    };
    let unsafe_table = [
        "delete-aged-rows",
        "--table",
        "events;drop",
        "--column",
        "created_at",
        "--older-than",
        "90d",
    ];
    let unknown_table = [
        "delete-aged-rows",
        "--table",
        "nosuch",
        "--column",
        "created_at",
        "--older-than",
        "90d",
    ];
    let cases: Vec<(Output, &str)> = vec![
        (
            add("nightly", "61 * * * *", &[], &target),
            "invalid cron expression `61 * * * *`",
        ),
        (
            add("nightly", "every day", &[], &target),
            "invalid cron expression `every day`",
        ),
        (
            add("nightly", "0 3 30 2 *", &[], &target),
            "cron expression `0 3 30 2 *` never fires",
        ),
        (
            add(
                "nightly",
                "0 3 * * *",
                &[],
                &["purge-everything", "--table", "events"],
            ),
            "unrecognized subcommand 'purge-everything'",
        ),
        (
            add("nightly", "0 3 * * *", &["--jitter", "-5m"], &target),
            "negative durations are not allowed",
        ),
        (
            add("nightly", "0 3 * * *", &["--jitter", "5x"], &target),
            "malformed duration `5x`",
        ),
        (
            add(
                "nightly",
                "0 3 * * *",
                &["--time-zone", "Mars/Olympus"],
                &target,
            ),
            "unknown time zone `Mars/Olympus`",
        ),
        (
            add("night ly", "0 3 * * *", &[], &target),
            "invalid schedule name `night ly`",
        ),
        (
            add("nightly", "0 3 * * *", &[], &unsafe_table),
            "events;drop",
        ),
        (add("nightly", "0 3 * * *", &[], &unknown_table), "nosuch"),
        (
            sluice(db, &["schedule", "remove", "nightly"]),
            "no schedule named `nightly`",
        ),
        (
            sluice(db, &["schedule", "enable", "nightly"]),
            "no schedule named `nightly`",
        ),
    ];
    for (output, message) in &cases {
        assert_eq!(
            output.status.code(),
            Some(2),
            "{message}: {}",
            stderr(output)
        );
        assert!(
            stderr(output).contains(message),
            "expected `{message}` in {}",
            stderr(output)
        );
        assert_eq!(
            stderr(output).lines().count(),
            1,
            "one line: {}",
            stderr(output)
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_schedules").await,
        0,
        "nothing stored"
    );

    // A good one: listed, disabled, enabled, refused as a duplicate, removed.
    let added = add(
        "nightly",
        "0 3 * * *",
        &["--jitter", "10m", "--time-zone", "Europe/Berlin"],
        &target,
    );
    assert!(added.status.success(), "{}", stderr(&added));
    let listed = json(&sluice(db, &["schedule", "list", "--json"]));
    let first = &listed.as_array().expect("a list")[0];
    assert_eq!(first["name"], "nightly");
    assert_eq!(first["kind"], "delete-aged-rows");
    assert_eq!(first["cron"], "0 3 * * *");
    assert_eq!(first["time_zone"], "Europe/Berlin");
    assert_eq!(first["jitter_ms"], 600_000);
    assert_eq!(first["enabled"], true);
    let again = add("nightly", "0 4 * * *", &[], &target);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(stderr(&again).contains("nightly"), "{}", stderr(&again));
    assert!(
        sluice(db, &["schedule", "disable", "nightly"])
            .status
            .success()
    );
    assert_eq!(
        json(&sluice(db, &["schedule", "list", "--json"]))[0]["enabled"],
        false
    );
    assert!(
        sluice(db, &["schedule", "enable", "nightly"])
            .status
            .success()
    );
    assert_eq!(
        json(&sluice(db, &["schedule", "list", "--json"]))[0]["enabled"],
        true
    );
    assert!(
        sluice(db, &["schedule", "remove", "nightly"])
            .status
            .success()
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_schedules").await, 0);
}

/// `sluice limit` refuses, with exit 2 and nothing stored, a rate that is
/// not a positive whole number of rows a second and a kind nobody knows (a
/// typo would set a limit that holds nothing); a kind of the store's own
/// operations is accepted, and any kind's limit can be cleared.
async fn a_limit_for_an_unknown_kind_or_a_bad_rate_exits_2_and_sets_nothing(db: &TestDb) {
    let limits = || async { db.scalar("SELECT COUNT(*) FROM sluice_rate_limits").await };
    let refused = [
        (
            vec!["--kind", "delete-aged-row", "--rate", "5/s"],
            "unknown kind `delete-aged-row`",
        ),
        (
            vec!["--kind", "x'; DROP TABLE t; --", "--rate", "5/s"],
            "unknown kind `x'; DROP TABLE t; --`",
        ),
        (vec!["--all", "--rate", "0/s"], "`0/s` is not a rate"),
        (vec!["--all", "--rate", "1e3/s"], "`1e3/s` is not a rate"),
        (
            vec!["--all", "--rate", "99999999999999999999/s"],
            "is not a rate",
        ),
        (vec!["--all", "--rate", "5/min"], "`5/min` is not a rate"),
        (
            vec!["999999", "--rate", "5/s"],
            "no operation with id 999999",
        ),
    ];
    for (args, message) in refused {
        let mut command = vec!["limit"];
        command.extend_from_slice(&args);
        let output = sluice(db, &command);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{command:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{command:?}: {}",
            stderr(&output)
        );
    }
    assert_eq!(limits().await, 0, "nothing stored");
    // A kind the store has operations of (an application's own) is known.
    enqueue(db, "purge-todos", "todos").await;
    let set = sluice(db, &["limit", "--kind", "purge-todos", "--rate", "5/s"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(limits().await, 1);
    // Clearing takes any kind, known or not.
    let cleared = sluice(db, &["limit", "--kind", "gone-kind", "--clear"]);
    assert!(cleared.status.success(), "{}", stderr(&cleared));
    assert!(stdout(&cleared).contains("had no rate limit"));
}

/// A budget given at enqueue is the operation's own; `sluice limit` sets
/// one for a kind or everything and clears it; `show` (and `--json`) says
/// which applies and where it was set, the default being auto.
async fn latency_budgets_are_set_at_enqueue_and_by_limit_and_shown(db: &TestDb) {
    common::create_counted_items(db, 10).await;
    let budget_of = |id: i64| {
        let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
        shown["latency_budget"].clone()
    };
    let own = common::enqueue_increment(db, &["--latency-budget", "800us"]);
    let own = own["id"].as_i64().unwrap();
    assert_eq!(
        budget_of(own),
        serde_json::json!({"budget": "800us", "set_for": format!("operation:{own}")})
    );
    let plain = common::enqueue_increment(db, &["--where", "grp = 0"]);
    let plain = plain["id"].as_i64().unwrap();
    assert_eq!(
        budget_of(plain),
        serde_json::json!({"budget": "auto", "set_for": null})
    );
    let set = sluice(
        db,
        &[
            "limit",
            "--kind",
            "update-in-batches",
            "--latency-budget",
            "off",
        ],
    );
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(budget_of(plain)["budget"], "off");
    assert_eq!(budget_of(own)["budget"], "800us", "its own comes first");
    let text = stdout(&sluice(db, &["show", &plain.to_string()]));
    assert!(text.contains("off (kind:update-in-batches)"), "{text}");
    let cleared = sluice(
        db,
        &[
            "limit",
            "--kind",
            "update-in-batches",
            "--latency-budget",
            "--clear",
        ],
    );
    assert!(
        stdout(&cleared).contains("latency budget removed"),
        "{}",
        stdout(&cleared)
    );
    assert_eq!(budget_of(plain)["budget"], "auto");
    // Asking an existing operation for another budget says it was not applied.
    let again = common::enqueue_increment(db, &["--latency-budget", "5ms"]);
    assert_eq!(again["id"], own);
    assert_eq!(
        again["not_applied"],
        serde_json::json!(["--latency-budget"])
    );
}

/// Completion scripts and manual pages need no database: they are printed
/// even when the one named cannot be reached.
#[test]
fn completions_and_manual_pages_are_printed_without_a_database() {
    let unreachable = "postgres://nobody@127.0.0.1:1/none";
    let sluice = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["--database-url", unreachable])
            .args(args)
            .output()
            .unwrap()
    };
    for (shell, mark) in [
        ("bash", "_sluice()"),
        ("zsh", "#compdef sluice"),
        ("fish", "complete -c sluice"),
    ] {
        let output = sluice(&["completions", shell]);
        assert!(output.status.success(), "{shell}: {}", stderr(&output));
        let script = stdout(&output);
        assert!(
            script.contains(mark) && script.contains("latency-budget"),
            "{shell}"
        );
    }
    let page = sluice(&["man", "enqueue", "delete-aged-rows"]);
    assert!(page.status.success(), "{}", stderr(&page));
    let roff = stdout(&page);
    assert!(
        roff.contains(".TH sluice-enqueue-delete-aged-rows"),
        "{roff}"
    );
    assert!(roff.contains("older\\-than"), "its options are listed");
    let unknown = sluice(&["man", "enqueue", "nope"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert!(
        stderr(&unknown).contains("no subcommand `nope` of `sluice enqueue`"),
        "{}",
        stderr(&unknown)
    );
}

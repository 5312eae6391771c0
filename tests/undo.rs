//! `update-in-batches --undo` and `sluice revert`, through the command
//! line, on every backend: a revert puts every row back as it was before
//! the operation (compared row by row), leaves alone and lists the rows
//! changed again since (overwrites them with `--force`), and refuses what
//! it cannot revert with one line, exit 2, nothing changed.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{TestDb, json, sluice};
use sluice_operations::EnqueueOptions;
use sluice_runtime::health::{HealthContext, HealthIndicator, Reading, Scope, Signal};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::{Health, ListFilter, OperationStatus};

for_each_backend!(
    a_revert_puts_back_every_row_and_leaves_rows_changed_since,
    a_forced_revert_overwrites_rows_changed_since,
    revert_refuses_what_it_cannot_revert_and_changes_nothing,
    a_reverted_archive_moves_back_exactly_its_rows_but_not_over_live_keys,
    a_reverted_delete_moves_every_aged_row_back,
    prune_drops_an_undo_table_once_its_keep_has_passed,
    a_revert_obeys_the_health_of_the_table_it_writes,
);

/// `items(id, grp, counter, note)`: ids `1..=rows`, `grp = id % 3`,
/// counters `id % 7`, notes NULL on every fifth row, `n<id>` otherwise.
async fn create_items(db: &TestDb, rows: i64) {
    db.execute(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, \
         counter INTEGER NOT NULL DEFAULT 0, note VARCHAR(20) NULL)",
    )
    .await;
    let note = match db.backend {
        "mysql" => "CASE WHEN g % 5 = 0 THEN NULL ELSE CONCAT('n', g) END",
        _ => "CASE WHEN g % 5 = 0 THEN NULL ELSE 'n' || g END",
    };
    let select = format!("g, g % 3, g % 7, {note}");
    db.insert_series("items (id, grp, counter, note)", &select, rows, "")
        .await;
    common::analyze_items(db).await;
}

/// Every row of `items`, in key order, as text: what a revert must restore.
async fn every_row(db: &TestDb) -> Vec<String> {
    let row = match db.backend {
        "mysql" => "CONCAT_WS('|', id, grp, counter, COALESCE(note, '<null>'))",
        _ => "id || '|' || grp || '|' || counter || '|' || COALESCE(note, '<null>')",
    };
    db.texts(&format!("SELECT {row} FROM items ORDER BY id"))
        .await
}

/// Runs workers until no operation is left to run.
fn run_until_idle(db: &TestDb) {
    common::succeeded(&sluice(db, &["run", "--until-idle"]));
}

/// Enqueues the `--undo` update of group 1 and runs it; returns its id.
fn update_group_one_with_undo(db: &TestDb) -> i64 {
    let enqueued = json(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + 10, note = 'touched'",
            "--where",
            "grp = 1",
            "--undo",
            "--batch-size",
            "200",
            "--sub-batch-size",
            "37",
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap();
    run_until_idle(db);
    id
}

async fn a_revert_puts_back_every_row_and_leaves_rows_changed_since(db: &TestDb) {
    create_items(db, 2_000).await;
    let before = every_row(db).await;
    let id = update_group_one_with_undo(db).await_finished(db).await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE note = 'touched'")
            .await,
        667
    );
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    assert_eq!(shown["undo"]["rows"], 667, "{shown}");
    if db.backend == "postgres" {
        // Room on each page, so that the revert's marks are heap-only updates.
        let options = db
            .texts(&format!(
                "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE relname = '{}'",
                shown["undo"]["table"]
                    .as_str()
                    .unwrap()
                    .rsplit('.')
                    .next()
                    .unwrap()
            ))
            .await;
        assert_eq!(options, ["fillfactor=40"], "{shown}");
    }

    // Changed again since: one row's counter, one row deleted.
    db.execute("UPDATE items SET counter = 999 WHERE id = 4")
        .await;
    db.execute("DELETE FROM items WHERE id = 1000").await;
    let revert = json(&sluice(db, &["revert", &id.to_string(), "--json"]));
    let revert_id = revert["id"].as_i64().unwrap();
    assert_eq!(revert["reverts"], id);
    run_until_idle(db);
    revert_id.await_finished(db).await;

    let after = every_row(db).await;
    let left_alone = |row: &&String| row.starts_with("4|") || row.starts_with("1000|");
    let expected: Vec<&String> = before.iter().filter(|r| !left_alone(r)).collect();
    let restored: Vec<&String> = after.iter().filter(|r| !left_alone(r)).collect();
    assert_eq!(restored, expected, "every other row is as before");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE id = 4 AND counter = 999")
            .await,
        1,
        "a row changed since is left as it is"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE id = 1000")
            .await,
        0
    );

    let shown = json(&sluice(db, &["show", &revert_id.to_string(), "--json"]));
    assert_eq!(shown["undo"]["reverted"], 665, "{shown}");
    assert_eq!(shown["undo"]["conflicts"], 2, "{shown}");
    assert_eq!(
        shown["undo"]["first_conflicts"],
        serde_json::json!(["(4)", "(1000)"])
    );
    let text = sluice(db, &["show", &revert_id.to_string()]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("2 left alone as changed since (first: (4); (1000))"),
        "{text}"
    );
    assert_eq!(revert_id_in_log(db, id).await, Some(revert_id));

    // Run again: every row's state is set, nothing more changes.
    let again = sluice(db, &["revert", &id.to_string()]);
    assert_eq!(again.status.code(), Some(2));
    let again = String::from_utf8_lossy(&again.stderr);
    assert!(again.contains("reverted already, by operation"), "{again}");
    every_log_replays(db).await;
}

async fn a_forced_revert_overwrites_rows_changed_since(db: &TestDb) {
    create_items(db, 600).await;
    let before = every_row(db).await;
    let id = update_group_one_with_undo(db).await_finished(db).await;
    db.execute("UPDATE items SET counter = 999, note = NULL WHERE id = 4")
        .await;
    let revert = json(&sluice(
        db,
        &["revert", &id.to_string(), "--force", "--json"],
    ));
    run_until_idle(db);
    revert["id"].as_i64().unwrap().await_finished(db).await;
    assert_eq!(
        every_row(db).await,
        before,
        "every row as before, row 4 too"
    );
}

async fn revert_refuses_what_it_cannot_revert_and_changes_nothing(db: &TestDb) {
    create_items(db, 300).await;
    let plain = json(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + 1",
            "--json",
        ],
    ))["id"]
        .as_i64()
        .unwrap();
    let pending = json(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "note = 'x'",
            "--undo",
            "--json",
        ],
    ))["id"]
        .as_i64()
        .unwrap();
    let operations = || async {
        db.store
            .list(&ListFilter::default())
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.state.status, r.state.last_seq))
            .collect::<Vec<_>>()
    };
    let known = operations().await;
    let rows = every_row(db).await;
    for (id, says) in [
        (plain.to_string(), "ran without --undo"),
        (
            pending.to_string(),
            "is pending: let it finish, or cancel it",
        ),
        ("4242".to_owned(), "there is no operation 4242"),
    ] {
        let output = sluice(db, &["revert", &id]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{id}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{id}: {stderr}");
    }
    assert_eq!(
        operations().await,
        known,
        "no operation enqueued or changed"
    );
    assert_eq!(every_row(db).await, rows);

    // A revert is enqueued by `revert` alone, which fills its arguments.
    let direct = sluice_operations::builtin::enqueue_kind(
        &db.store,
        &sluice_operations::Registry::with_builtins(),
        "revert",
        &serde_json::json!({"of": plain, "table": "items", "key": "id",
            "undo_table": "items", "columns": ["counter"]}),
        &sluice_operations::EnqueueOptions::default(),
    )
    .await;
    assert!(
        matches!(
            direct,
            Err(sluice_operations::OperationError::NotRevertible(_))
        ),
        "{direct:?}"
    );
    assert_eq!(
        operations().await,
        known,
        "no operation enqueued or changed"
    );

    // A revert is not reverted.
    run_until_idle(db);
    let revert = json(&sluice(db, &["revert", &pending.to_string(), "--json"]))["id"]
        .as_i64()
        .unwrap();
    run_until_idle(db);
    let output = sluice(db, &["revert", &revert.to_string()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is itself a revert"), "{stderr}");
}

async fn a_reverted_archive_moves_back_exactly_its_rows_but_not_over_live_keys(db: &TestDb) {
    create_items(db, 900).await;
    let before = every_row(db).await;
    let archive = |group: &str, undo: bool| {
        let mut args = vec![
            "enqueue",
            "archive-rows",
            "--table",
            "items",
            "--into",
            "items_archive",
            "--where",
            group,
            "--sub-batch-size",
            "40",
            "--json",
        ];
        if undo {
            args.push("--undo");
        }
        json(&sluice(db, &args))["id"].as_i64().unwrap()
    };
    // An earlier archive into the same table, not reverted: its rows stay.
    let earlier = archive("grp = 2", false);
    run_until_idle(db);
    earlier.await_finished(db).await;
    let id = archive("grp = 1", true);
    run_until_idle(db);
    id.await_finished(db).await;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items").await, 300);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM items_archive").await, 600);

    // A key archived by it is live again: that row stays archived.
    db.execute("INSERT INTO items (id, grp, counter) VALUES (4, 0, 42)")
        .await;
    let refused = sluice(db, &["revert", &id.to_string(), "--force"]);
    assert_eq!(refused.status.code(), Some(2));
    let revert = json(&sluice(db, &["revert", &id.to_string(), "--json"]))["id"]
        .as_i64()
        .unwrap();
    run_until_idle(db);
    revert.await_finished(db).await;

    let live = every_row(db).await;
    let grp_two = |row: &&String| row.split('|').nth(1) == Some("2");
    let expected: Vec<&String> = before
        .iter()
        .filter(|r| !grp_two(r) && !r.starts_with("4|"))
        .collect();
    let got: Vec<&String> = live.iter().filter(|r| !r.starts_with("4|")).collect();
    assert_eq!(
        got, expected,
        "every row it archived is live again, as it was"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE id = 4 AND counter = 42")
            .await,
        1,
        "the live row keeping key 4 is left as it is"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items_archive WHERE grp = 2")
            .await,
        300,
        "the earlier archive's rows stay archived"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items_archive WHERE grp = 1")
            .await,
        1,
        "the row whose key is live again stays archived, and no other"
    );
    let shown = json(&sluice(db, &["show", &revert.to_string(), "--json"]));
    assert_eq!(
        (&shown["undo"]["reverted"], &shown["undo"]["conflicts"]),
        (&serde_json::json!(299), &serde_json::json!(1)),
        "{shown}"
    );
    every_log_replays(db).await;
}

async fn a_reverted_delete_moves_every_aged_row_back(db: &TestDb) {
    // `created_at` in epoch seconds, an hour apart going back from now:
    // rows 720 and up are older than 30 days.
    db.execute(
        "CREATE TABLE readings (id BIGINT PRIMARY KEY, created_at BIGINT NOT NULL, \
         note VARCHAR(20) NULL)",
    )
    .await;
    let now = chrono::Utc::now().timestamp();
    // Half an hour off the hour, so no row is aged by seconds passing.
    let select = format!("g, {now} - g * 3600 - 1800, CASE WHEN g % 4 = 0 THEN NULL ELSE 'r' END");
    db.insert_series("readings (id, created_at, note)", &select, 1_500, "")
        .await;
    let before = all_readings(db).await;
    let id = json(&sluice(
        db,
        &[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "readings",
            "--column",
            "created_at",
            "--older-than",
            "30d",
            "--undo",
            "--sub-batch-size",
            "50",
            "--json",
        ],
    ))["id"]
        .as_i64()
        .unwrap();
    run_until_idle(db);
    id.await_finished(db).await;
    let aged = 1_500 - 719;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM readings").await, 719);
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    assert_eq!(shown["undo"]["rows"], aged, "{shown}");

    let revert = json(&sluice(db, &["revert", &id.to_string(), "--json"]))["id"]
        .as_i64()
        .unwrap();
    run_until_idle(db);
    let record = db
        .store
        .operation(revert.await_finished(db).await)
        .await
        .unwrap();
    assert_eq!(record.state.rows_done, aged);
    assert_eq!(all_readings(db).await, before, "every row back, as it was");
}

async fn prune_drops_an_undo_table_once_its_keep_has_passed(db: &TestDb) {
    create_items(db, 200).await;
    let update = |set: &str, keep: &str| {
        json(&sluice(
            db,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                set,
                "--undo",
                "--keep-undo",
                keep,
                "--json",
            ],
        ))["id"]
            .as_i64()
            .unwrap()
    };
    let brief = update("counter = 1", "1ms");
    let kept = update("counter = 2", "30d");
    run_until_idle(db);
    let table_of = |id: i64| async move {
        let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
        shown["undo"]["table"].as_str().map(str::to_owned)
    };
    let brief_table = table_of(brief).await.expect("an undo table");
    assert!(table_of(kept).await.is_some());

    let pruned = json(&sluice(db, &["prune", "--older-than", "90d", "--json"]));
    assert_eq!(
        pruned["undo_tables_dropped"],
        serde_json::json!([{"operation": brief, "table": brief_table}])
    );
    assert_eq!(table_of(brief).await, None, "its undo is gone");
    assert!(table_of(kept).await.is_some(), "the other's stays");
    let refused = sluice(db, &["revert", &brief.to_string()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("pruned"));

    let without_undo = sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = 3",
            "--keep-undo",
            "7d",
        ],
    );
    assert_eq!(without_undo.status.code(), Some(2));
}

/// A revert walks its undo table but writes the live one, so the live
/// table's health is the one that paces it: stopped on `items`, it puts no
/// row back; once the stop lifts, every row.
async fn a_revert_obeys_the_health_of_the_table_it_writes(db: &TestDb) {
    create_items(db, 300).await;
    let before = every_row(db).await;
    let id = update_group_one_with_undo(db);
    let updated = every_row(db).await;
    assert_ne!(updated, before);
    let stop = Arc::new(AtomicBool::new(true));
    let runtime = RuntimeBuilder::with_store(db.store.clone())
        .config(RuntimeConfig {
            node: "paced".into(),
            reconcile_interval: Duration::from_millis(50),
            control_interval: Duration::from_millis(50),
            health_interval: Duration::from_millis(20),
            health_clear_after: 1,
            ..RuntimeConfig::default()
        })
        .without_builtin_indicators()
        .indicator(Arc::new(StopsItems { stop: stop.clone() }))
        .start()
        .await
        .unwrap();
    let revert = runtime
        .revert(id, false, &EnqueueOptions::default())
        .await
        .unwrap();
    common::until("the revert stopped by the health of `items`", || async {
        db.store.operation(revert.id).await.unwrap().state.health == Health::Stopped
    })
    .await;
    assert_eq!(every_row(db).await, updated);
    stop.store(false, Ordering::SeqCst);
    let record = runtime
        .wait(revert.id, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(record.state.status, OperationStatus::Finished);
    assert_eq!(every_row(db).await, before);
    runtime.shutdown().await.unwrap();
}

/// Stops every operation on `items` while `stop` is set.
struct StopsItems {
    stop: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl HealthIndicator for StopsItems {
    fn name(&self) -> &str {
        "items held"
    }

    async fn check(&self, _: &HealthContext) -> Result<Vec<Reading>, String> {
        Ok(match self.stop.load(Ordering::SeqCst) {
            true => vec![Reading {
                scope: Scope::Table("items".into()),
                signal: Signal::Stop {
                    reason: "items held".into(),
                },
            }],
            false => Vec::new(),
        })
    }
}
/// Every row of `readings`, in key order, as text.
async fn all_readings(db: &TestDb) -> Vec<String> {
    let row = match db.backend {
        "mysql" => "CONCAT_WS('|', id, created_at, COALESCE(note, '<null>'))",
        _ => "id || '|' || created_at || '|' || COALESCE(note, '<null>')",
    };
    db.texts(&format!("SELECT {row} FROM readings ORDER BY id"))
        .await
}

/// The operation that reverts `id`, as `id`'s own log records it.
async fn revert_id_in_log(db: &TestDb, id: i64) -> Option<i64> {
    db.store
        .events(id, 0)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.event {
            sluice_store::Event::Reverted { by } => Some(by),
            _ => None,
        })
}

/// Every operation's event log replays to its stored state.
async fn every_log_replays(db: &TestDb) {
    for operation in db.store.list(&ListFilter::default()).await.unwrap() {
        db.store.verify(operation.id).await.unwrap();
    }
}

/// Waits for nothing: asserts the operation finished (the worker ran
/// until idle) and passes its id on.
trait Finished {
    async fn await_finished(self, db: &TestDb) -> i64;
}

impl Finished for i64 {
    async fn await_finished(self, db: &TestDb) -> i64 {
        let state = db.store.operation(self).await.unwrap().state;
        assert_eq!(
            state.status,
            OperationStatus::Finished,
            "operation {self}: {:?}",
            state.last_error
        );
        self
    }
}

//! Operations on a database apart from the store (`enqueue --target`): the
//! store is the coordinator, the target keeps each batch's progress beside
//! its rows. Real servers, real worker processes: every row of the target
//! changed exactly once whatever kills land, a stalled holder whose claim
//! was taken over commits nothing on the target though it still reaches
//! it, and a target's password is never stored or shown.

mod common;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use common::{
    TestDb, assert_group_one_changed_once, claim_lease, create_counted_items, json, sluice,
    spawn_worker, succeeded, until, until_items_changed, until_within,
};
use sluice_store::{Event, ManualClock, NextBatch, OperationStatus, StoreError};
use sluice_target::{Cursor, Statement};
use tokio::sync::RwLock;

/// The PostgreSQL replica the first cluster streams to, shared by every
/// test here with a target on that cluster: its workers watch the
/// cluster's replication lag, so the one test that pauses the replica's
/// replay takes it alone (write) and the others share it (read).
static REPLICA: LazyLock<RwLock<()>> = LazyLock::new(|| RwLock::new(()));

/// The password the tests put in a PostgreSQL target's URL (the test
/// server trusts local connections, so any password connects).
const PASSWORD: &str = "fleet-s3cret";

/// A coordinator in each database, each with a target in another.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_coordinator_postgres_target() {
    let _shared = REPLICA.read().await;
    let Some(target) = TestDb::postgres().await else {
        return;
    };
    killed_workers_change_every_row_of_the_target_once(TestDb::sqlite().await, target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_coordinator_mysql_target() {
    let _shared = REPLICA.read().await;
    let Some(target) = TestDb::mysql().await else {
        return;
    };
    killed_workers_change_every_row_of_the_target_once(TestDb::sqlite().await, target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_coordinator_mysql_target() {
    let _shared = REPLICA.read().await;
    let (Some(coordinator), Some(target)) = (TestDb::postgres().await, TestDb::mysql().await)
    else {
        return;
    };
    killed_workers_change_every_row_of_the_target_once(coordinator, target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_coordinator_postgres_target() {
    let _shared = REPLICA.read().await;
    let (Some(coordinator), Some(target)) = (TestDb::mysql().await, TestDb::postgres().await)
    else {
        return;
    };
    killed_workers_change_every_row_of_the_target_once(coordinator, target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_holder_commits_nothing_on_a_postgres_target() {
    let _shared = REPLICA.read().await;
    let Some(target) = TestDb::postgres().await else {
        return;
    };
    a_stalled_holder_commits_nothing_on_the_target(TestDb::sqlite().await, target).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_holder_commits_nothing_on_a_mysql_target() {
    let _shared = REPLICA.read().await;
    let (Some(coordinator), Some(target)) = (TestDb::postgres().await, TestDb::mysql().await)
    else {
        return;
    };
    a_stalled_holder_commits_nothing_on_the_target(coordinator, target).await;
}

/// A fleet over two PostgreSQL schemas and a MariaDB database, its
/// coordinator in SQLite: enqueued from a targets file, one target paused
/// alone while the others finish, a worker SIGKILLed midway; every row of
/// every target changed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_changes_every_row_of_every_target_once() {
    let _shared = REPLICA.read().await;
    let (Some(first), Some(second), Some(third)) = (
        TestDb::postgres().await,
        TestDb::postgres().await,
        TestDb::mysql().await,
    ) else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    let targets = [
        ("shard-01", &first),
        ("shard-02", &second),
        ("shard-03", &third),
    ];
    for (_, target) in &targets {
        create_counted_items(target, 2_000).await;
    }
    let file = targets_file(&targets);
    let id = increment_group_one(
        &coordinator,
        &[
            "--targets",
            file.path().to_str().unwrap(),
            "--batch-size",
            "200",
            "--sub-batch-size",
            "20",
        ],
    );
    let members = fleet_of(&coordinator, id).await;
    assert_eq!(members.len(), 3, "one operation per target");
    // One target paused alone: the others run, it does not.
    succeeded(&sluice(
        &coordinator,
        &["pause", &id.to_string(), "--target", "shard-02"],
    ));
    let mut running = spawn_worker(&coordinator, &["--node", "a", "--lease-ttl", "1s"]);
    until_items_changed(&first, 200).await;
    running.kill().expect("SIGKILL");
    running.wait().expect("reaped");
    let _worker = spawn_worker(&coordinator, &["--node", "b", "--lease-ttl", "1s"]);
    until("the fleet but the paused target finishes", || async {
        let members = fleet_of(&coordinator, id).await;
        members
            .iter()
            .filter(|m| m.state.target_name.as_deref() != Some("shard-02"))
            .all(|m| m.state.status == OperationStatus::Finished)
    })
    .await;
    assert_eq!(
        second
            .scalar("SELECT COUNT(*) FROM items WHERE counter <> 0")
            .await,
        0,
        "the paused target was worked on"
    );
    let shown = sluice(&coordinator, &["show", &id.to_string()]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(text.contains("2 of 3 targets finished"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
    // Resumed, it finishes too.
    succeeded(&sluice(
        &coordinator,
        &["resume", &id.to_string(), "--target", "shard-02"],
    ));
    until_fleet_finished(&coordinator, id, "the whole fleet finishes").await;
    for (_, target) in &targets {
        assert_group_one_changed_once(target).await;
        // Its latency canary timed a write on the target itself: the
        // heartbeat, which nothing else writes here (no replica watched).
        assert!(
            target
                .scalar("SELECT beat_ms FROM sluice_heartbeat WHERE id = 1")
                .await
                > 0,
            "no canary wrote on the target"
        );
    }
    // Each target's reading is kept apart in the coordinator.
    assert_eq!(
        coordinator
            .scalar("SELECT COUNT(*) FROM sluice_canaries WHERE table_name LIKE 'items@%'")
            .await,
        3,
        "a canary reading per target"
    );
    assert_eq!(
        coordinator
            .scalar(&format!(
                "SELECT COUNT(*) FROM sluice_canaries WHERE table_name LIKE '%{PASSWORD}%'"
            ))
            .await,
        0,
        "a password stored with a canary reading"
    );
    for member in fleet_of(&coordinator, id).await {
        assert_eq!(member.state.rows_done, 1_000);
        coordinator.store.verify(member.id).await.unwrap();
    }
    coordinator.cleanup().await;
    for (_, target) in targets {
        target.release().await;
    }
}

/// A fleet over both PostgreSQL clusters and MariaDB, coordinated in turn
/// from SQLite, PostgreSQL and MariaDB, a worker SIGKILLed midway each
/// time: every row of every target changed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_across_servers_from_each_coordinator_changes_every_row_once() {
    let _shared = REPLICA.read().await;
    across_servers_from_each_coordinator(Work::Increment).await;
}

/// The same with `archive-rows`: the archive table is created on each
/// target (never in the coordinator), and every row of group 1 of every
/// target ends in it exactly once, the rest left live.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_archive_across_servers_from_each_coordinator_moves_every_row_once() {
    let _shared = REPLICA.read().await;
    across_servers_from_each_coordinator(Work::Archive).await;
}

/// What a fleet across servers does to group 1 of each target's `items`.
#[derive(Clone, Copy, PartialEq)]
enum Work {
    Increment,
    Archive,
}

async fn across_servers_from_each_coordinator(work: Work) {
    for coordinator in ["sqlite", "postgres", "mysql"] {
        let (Some(first), Some(second), Some(third)) = (
            TestDb::postgres().await,
            TestDb::postgres_second().await,
            TestDb::mysql().await,
        ) else {
            return;
        };
        let coordinator = match coordinator {
            "sqlite" => TestDb::sqlite().await,
            "postgres" => TestDb::postgres().await.unwrap(),
            _ => TestDb::mysql().await.unwrap(),
        };
        let targets = [("pg-1", &first), ("pg-2", &second), ("maria", &third)];
        for (_, target) in &targets {
            create_counted_items(target, 2_000).await;
        }
        let file = targets_file(&targets);
        let options = [
            "--targets",
            file.path().to_str().unwrap(),
            "--sub-batch-size",
            "25",
        ];
        if work == Work::Archive {
            // --undo is refused over targets apart, nothing made anywhere.
            let mut undo = vec!["enqueue", "archive-rows", "--table", "items"];
            undo.extend(["--into", "old_items", "--undo"]);
            undo.extend_from_slice(&options);
            let refused = sluice(&coordinator, &undo);
            assert_eq!(refused.status.code(), Some(2));
            let error = String::from_utf8_lossy(&refused.stderr);
            assert!(
                error.contains("works on the store's database only"),
                "{error}"
            );
            for (_, target) in &targets {
                assert!(
                    target.try_execute("SELECT 1 FROM old_items").await.is_err(),
                    "an archive made by a refused enqueue"
                );
            }
        }
        let id = match work {
            Work::Increment => increment_group_one(&coordinator, &options),
            Work::Archive => archive_group_one(&coordinator, &options),
        };
        let mut killed = spawn_worker(&coordinator, &["--node", "a", "--lease-ttl", "1s"]);
        match work {
            Work::Increment => until_items_changed(&second, 150).await,
            Work::Archive => {
                until("a worker archives rows of items", || async {
                    second.scalar("SELECT COUNT(*) FROM old_items").await > 150
                })
                .await
            }
        }
        killed.kill().expect("SIGKILL");
        killed.wait().expect("reaped");
        let _worker = spawn_worker(&coordinator, &["--node", "b", "--lease-ttl", "1s"]);
        until_fleet_finished(&coordinator, id, "the fleet finishes").await;
        for (_, target) in &targets {
            match work {
                Work::Increment => assert_group_one_changed_once(target).await,
                Work::Archive => assert_group_one_archived_once(target).await,
            }
        }
        if work == Work::Archive {
            assert!(
                coordinator
                    .try_execute("SELECT 1 FROM old_items WHERE 1 = 0")
                    .await
                    .is_err(),
                "an archive table made in the coordinator ({})",
                coordinator.backend
            );
        }
        for member in fleet_of(&coordinator, id).await {
            assert_eq!(member.state.rows_done, 1_000, "{}", coordinator.backend);
        }
        coordinator.cleanup().await;
        for (_, target) in targets {
            target.release().await;
        }
    }
}

/// Exactly once, from the data: every row of group 1 is in `old_items`
/// once and no longer in `items`; every row of group 0 is live, and none
/// archived.
async fn assert_group_one_archived_once(target: &TestDb) {
    let count = |sql: &'static str| target.scalar(sql);
    assert_eq!(count("SELECT COUNT(*) FROM items WHERE grp = 1").await, 0);
    assert_eq!(
        count("SELECT COUNT(*) FROM items WHERE grp = 0").await,
        1_000
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM old_items WHERE grp = 1").await,
        1_000
    );
    assert_eq!(
        count("SELECT COUNT(DISTINCT id) FROM old_items").await,
        1_000,
        "a row archived twice, or one out of scope"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stalled_worker_woken_after_a_takeover_commits_nothing_twice() {
    let _shared = REPLICA.read().await;
    let Some(target) = TestDb::mysql().await else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&target, 6_000).await;
    let id = increment_group_one(
        &coordinator,
        &[
            "--target",
            &target.url,
            "--sub-batch-size",
            "20",
            "--pause",
            "5ms",
        ],
    );
    let mut stalled = spawn_worker(
        &coordinator,
        &["--node", "stalled", "--lease-ttl", "1s", "--until-idle"],
    );
    until_items_changed(&target, 300).await;
    let pid = stalled.id().to_string();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &pid])
            .status()
            .expect("kill");
        assert!(sent.success(), "kill {name}");
    };
    signal("-STOP");
    let epoch_before = coordinator.store.operation(id).await.unwrap().lease_epoch;
    let _taker = spawn_worker(&coordinator, &["--node", "taker", "--lease-ttl", "1s"]);
    until("another worker takes the operation over", || async {
        let record = coordinator.store.operation(id).await.unwrap();
        record.lease_epoch > epoch_before && record.lease.is_some_and(|lease| lease.node == "taker")
    })
    .await;
    signal("-CONT");
    until("the operation finishes", || async {
        coordinator.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    until("the woken worker lets go and exits", || {
        let exited = stalled.try_wait().expect("its status").is_some();
        async move { exited }
    })
    .await;
    assert_group_one_changed_once(&target).await;
    assert_eq!(
        coordinator
            .store
            .operation(id)
            .await
            .unwrap()
            .state
            .rows_done,
        3_000
    );
    coordinator.cleanup().await;
    target.cleanup().await;
}

/// Enqueueing a fleet is whole or nothing: a target whose table differs,
/// a duplicate, a targets file line that does not parse are refused, named,
/// and nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_with_a_bad_target_is_refused_whole() {
    let _shared = REPLICA.read().await;
    let (Some(first), Some(second)) = (TestDb::postgres().await, TestDb::postgres().await) else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&first, 100).await;
    create_counted_items(&second, 100).await;
    second.execute("ALTER TABLE items DROP COLUMN grp").await;
    second
        .execute("ALTER TABLE items ADD COLUMN grp BIGINT NOT NULL DEFAULT 1")
        .await;
    let enqueue = |file: &std::path::Path| increment_over(&coordinator, file);
    let refused = |output: std::process::Output, wanted: &[&str]| {
        let stderr = String::from_utf8_lossy(&output.stderr).to_string();
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        for part in wanted {
            assert!(stderr.contains(part), "`{part}` not in: {stderr}");
        }
        assert!(!stderr.contains(PASSWORD), "{stderr}");
    };
    let differs = targets_file(&[("a", &first), ("b", &second)]);
    refused(
        enqueue(differs.path()),
        &["target `b`", "column `grp`", "bigint", "integer"],
    );
    // An archive refused so leaves no archive table on any target.
    let options = ["--targets", differs.path().to_str().unwrap()];
    let mut archive = vec!["enqueue", "archive-rows", "--table", "items"];
    archive.extend(["--into", "old_items"]);
    archive.extend_from_slice(&options);
    refused(
        sluice(&coordinator, &archive),
        &["target `b`", "column `grp`"],
    );
    for target in [&first, &second] {
        assert!(
            target.try_execute("SELECT 1 FROM old_items").await.is_err(),
            "an archive table left by a refused enqueue"
        );
    }
    let twice = targets_file(&[("a", &first), ("b", &first)]);
    refused(enqueue(twice.path()), &["listed twice"]);
    let mut garbled = tempfile::NamedTempFile::new().unwrap();
    std::io::Write::write_all(
        &mut garbled,
        b"# fleet
a postgres://x@h/d
b
",
    )
    .unwrap();
    refused(enqueue(garbled.path()), &["line 3"]);
    let listed = json(&sluice(&coordinator, &["list", "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    coordinator.cleanup().await;
    first.cleanup().await;
    second.cleanup().await;
}

/// A target whose table's definition matches the first target's is
/// vouched for by its full check, yet counted on its own, and the
/// operator's SQL planned on it (a table it names missing there is
/// refused); one whose key lost its unique index (the same columns, so the
/// tables do not differ) is checked in full and refused, named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vouched_target_is_counted_and_a_changed_one_checked_in_full() {
    let _shared = REPLICA.read().await;
    let (Some(a), Some(b), Some(c)) = (
        TestDb::postgres().await,
        TestDb::postgres().await,
        TestDb::postgres().await,
    ) else {
        return;
    };
    vouched_and_refused(a, b, c, "ALTER TABLE items DROP CONSTRAINT items_pkey").await;
}

/// [`a_vouched_target_is_counted_and_a_changed_one_checked_in_full`] on
/// MariaDB targets.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vouched_mysql_target_is_counted_and_a_changed_one_checked_in_full() {
    let _shared = REPLICA.read().await;
    let (Some(a), Some(b), Some(c)) = (
        TestDb::mysql().await,
        TestDb::mysql().await,
        TestDb::mysql().await,
    ) else {
        return;
    };
    vouched_and_refused(a, b, c, "ALTER TABLE items DROP PRIMARY KEY").await;
}

/// Targets `a` (100 rows) and `b` (40) alike, `c` alike but for its key,
/// which `drop_key` takes away.
async fn vouched_and_refused(a: TestDb, b: TestDb, c: TestDb, drop_key: &str) {
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&a, 100).await;
    create_counted_items(&b, 40).await;
    create_counted_items(&c, 70).await;
    c.execute(drop_key).await;
    let enqueue = |file: &std::path::Path| increment_over(&coordinator, file);
    let refused = enqueue(targets_file(&[("a", &a), ("b", &b), ("c", &c)]).path());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("target `c`") && stderr.contains("unique index"),
        "{stderr}"
    );
    let enqueued = json(&enqueue(targets_file(&[("a", &a), ("b", &b)]).path()));
    let id = enqueued["id"].as_i64().expect("an id");
    let mut counted: Vec<(String, Option<i64>)> = fleet_of(&coordinator, id)
        .await
        .into_iter()
        .map(|r| {
            (
                r.state.target_name.unwrap_or_default(),
                r.state.estimated_rows,
            )
        })
        .collect();
    counted.sort();
    assert_eq!(
        counted,
        [("a".to_owned(), Some(100)), ("b".to_owned(), Some(40))]
    );
    // The operator's SQL names a table only the first target has: planned
    // on each, refused on the other though its `items` is the same.
    a.execute("CREATE TABLE wanted (g INTEGER PRIMARY KEY)")
        .await;
    let file = targets_file(&[("a", &a), ("b", &b)]);
    let refused = sluice(
        &coordinator,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + (SELECT COUNT(*) FROM wanted)",
            "--targets",
            file.path().to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("target `b`") && stderr.contains("wanted"),
        "{stderr}"
    );
    coordinator.cleanup().await;
    for db in [a, b, c] {
        db.cleanup().await;
    }
}

/// A PostgreSQL target whose URL says `sluice_schema=…` keeps Sluice's
/// tables in that schema (created on first use), not beside its table, and
/// the operation changes every row once; on a MariaDB target the
/// parameter is refused, named.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_keeps_sluice_s_tables_in_a_schema_of_their_own() {
    let _shared = REPLICA.read().await;
    let Some(target) = TestDb::postgres().await else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&target, 1_000).await;
    let schema = target.schema.clone().expect("a test schema");
    let own = format!("{schema}_own");
    let url = format!("{}&sluice_schema={own}", target.url);
    let id = increment_group_one(&coordinator, &["--target", &url]);
    let _worker = spawn_worker(&coordinator, &[]);
    until("the operation finishes", || async {
        coordinator.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert_group_one_changed_once(&target).await;
    let sluice_tables_in = |schema: String| {
        format!(
            "SELECT COUNT(*) FROM pg_tables WHERE schemaname = '{schema}' \
             AND tablename IN ('sluice_target_progress', 'sluice_heartbeat')"
        )
    };
    assert_eq!(target.scalar(&sluice_tables_in(own.clone())).await, 2);
    // (The test schema is a store too, with a heartbeat table of its own.)
    let progress_beside = format!(
        "SELECT COUNT(*) FROM pg_tables WHERE schemaname = '{schema}' \
         AND tablename = 'sluice_target_progress'"
    );
    assert_eq!(target.scalar(&progress_beside).await, 0);
    target.execute(&format!("DROP SCHEMA {own} CASCADE")).await;
    if let Some(other) = TestDb::mysql().await {
        create_counted_items(&other, 10).await;
        let url = format!("{}?sluice_schema=x", other.url);
        let refused = set_counter_on(&coordinator, &url);
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success(), "{stderr}");
        assert!(
            stderr.contains("`sluice_schema` is a PostgreSQL setting"),
            "{stderr}"
        );
        other.cleanup().await;
    }
    coordinator.cleanup().await;
    target.cleanup().await;
}

/// A worker gives a target's connections back once no operation of its
/// own uses it: after its fleet finishes, a worker left running holds no
/// session on either target (found by the URLs' `application_name`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_lets_go_of_a_target_it_no_longer_works_on() {
    let _shared = REPLICA.read().await;
    let (Some(a), Some(b)) = (TestDb::postgres().await, TestDb::postgres().await) else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&a, 1_000).await;
    create_counted_items(&b, 1_000).await;
    let named = |db: &TestDb| {
        format!(
            "{}&application_name={}",
            db.url,
            db.schema.as_deref().expect("a schema")
        )
    };
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let listed = format!("a {}\nb {}\n", named(&a), named(&b));
    std::io::Write::write_all(&mut file, listed.as_bytes()).unwrap();
    let id = increment_group_one(&coordinator, &["--targets", file.path().to_str().unwrap()]);
    let _worker = spawn_worker(&coordinator, &[]);
    until_fleet_finished(&coordinator, id, "the fleet finishes").await;
    let sessions = format!(
        "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name IN ('{}', '{}')",
        a.schema.as_deref().unwrap_or_default(),
        b.schema.as_deref().unwrap_or_default()
    );
    until_within(
        "the worker closes both targets",
        Duration::from_secs(90),
        || async { a.scalar(&sessions).await == 0 },
    )
    .await;
    assert_group_one_changed_once(&a).await;
    assert_group_one_changed_once(&b).await;
    coordinator.cleanup().await;
    a.cleanup().await;
    b.cleanup().await;
}

/// A fleet of two PostgreSQL targets, one reached through a TCP proxy the
/// test cuts midway (its connections dropped, new ones refused): the other
/// target finishes, the cut one waits without failing, and once the proxy
/// is back it finishes by itself; every row of both changed once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_cut_off_waits_and_resumes_by_itself() {
    let _shared = REPLICA.read().await;
    let (Some(cut), Some(direct)) = (TestDb::postgres().await, TestDb::postgres().await) else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&cut, 4_000).await;
    create_counted_items(&direct, 4_000).await;
    let server = server_address(&cut.url);
    let mut proxy = Proxy::start(server).await;
    let proxied = cut
        .url
        .replacen(&server.to_string(), &proxy.address().to_string(), 1);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    let text = format!("cut {proxied}\ndirect {}\n", direct.url);
    std::io::Write::write_all(&mut file, text.as_bytes()).unwrap();
    let id = increment_group_one(
        &coordinator,
        &[
            "--targets",
            file.path().to_str().unwrap(),
            "--batch-size",
            "100",
            "--sub-batch-size",
            "10",
            "--pause",
            "5ms",
        ],
    );
    let _worker = spawn_worker(&coordinator, &["--node", "w", "--lease-ttl", "1s"]);
    until_items_changed(&cut, 100).await;
    proxy.cut();
    until("the target not cut off finishes", || async {
        fleet_of(&coordinator, id).await.iter().any(|m| {
            m.state.target_name.as_deref() == Some("direct")
                && m.state.status == OperationStatus::Finished
        })
    })
    .await;
    let waiting = fleet_of(&coordinator, id)
        .await
        .into_iter()
        .find(|m| m.state.target_name.as_deref() == Some("cut"))
        .unwrap();
    assert_ne!(
        waiting.state.status,
        OperationStatus::Failed,
        "{:?}",
        waiting.state.last_error
    );
    assert_ne!(waiting.state.status, OperationStatus::Finished);
    // It says why it waits.
    until(
        "the cut-off target's operation says it is stopped",
        || async {
            let record = coordinator.store.operation(waiting.id).await.unwrap();
            record.state.health == sluice_store::Health::Stopped
                && record
                    .state
                    .health_reason
                    .is_some_and(|r| r.contains("cannot be reached"))
        },
    )
    .await;
    proxy.restore().await;
    until_fleet_finished(
        &coordinator,
        id,
        "the cut-off target finishes once it is back",
    )
    .await;
    assert_group_one_changed_once(&cut).await;
    assert_group_one_changed_once(&direct).await;
    let back = coordinator.store.operation(waiting.id).await.unwrap();
    // The stop is lifted; a throttle of the server's own may be in force
    // (connection saturation, the latency budget), a stop for the cut is not.
    assert_ne!(
        back.state.health,
        sluice_store::Health::Stopped,
        "the stop was not lifted: {:?}",
        back.state.health_reason
    );
    assert!(
        !back
            .state
            .health_reason
            .as_deref()
            .is_some_and(|r| r.contains("cannot be reached")),
        "{:?}",
        back.state.health_reason
    );
    coordinator.cleanup().await;
    cut.cleanup().await;
    direct.cleanup().await;
}

/// `--max-targets-at-once 1` over three targets, two workers on a
/// PostgreSQL coordinator: never two targets worked on at once, and all
/// of them done, each row once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_capped_at_one_target_works_on_one_at_a_time() {
    let _shared = REPLICA.read().await;
    let (Some(coordinator), Some(a), Some(b), Some(c)) = (
        TestDb::postgres().await,
        TestDb::postgres().await,
        TestDb::postgres().await,
        TestDb::postgres().await,
    ) else {
        return;
    };
    let targets = [("a", &a), ("b", &b), ("c", &c)];
    for (_, target) in &targets {
        create_counted_items(target, 1_000).await;
    }
    let file = targets_file(&targets);
    let id = increment_group_one(
        &coordinator,
        &[
            "--targets",
            file.path().to_str().unwrap(),
            "--max-targets-at-once",
            "1",
            "--sub-batch-size",
            "25",
            "--pause",
            "2ms",
        ],
    );
    let _one = spawn_worker(&coordinator, &["--node", "one", "--concurrency", "3"]);
    let _two = spawn_worker(&coordinator, &["--node", "two", "--concurrency", "3"]);
    let mut most = 0;
    let mut seen_running = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let members = fleet_of(&coordinator, id).await;
        let now = chrono::Utc::now().timestamp_millis();
        let running = members
            .iter()
            .filter(|m| {
                m.state.status == OperationStatus::Running
                    && m.lease.as_ref().is_some_and(|l| l.expires_at >= now)
            })
            .count();
        most = most.max(running);
        seen_running += usize::from(running > 0);
        if members
            .iter()
            .all(|m| m.state.status == OperationStatus::Finished)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out: the capped fleet"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen_running > 0, "never saw the fleet running");
    assert_eq!(most, 1, "two targets were worked on at once");
    for (_, target) in &targets {
        assert_group_one_changed_once(target).await;
    }
    coordinator.cleanup().await;
    for (_, target) in targets {
        target.release().await;
    }
}

/// A MariaDB target whose user has a password: a worker without it waits,
/// its operation stopped with the reason (no password shown); a worker
/// given the targets file (`run --targets`) connects with it and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_takes_a_target_s_password_from_the_targets_file() {
    let _shared = REPLICA.read().await;
    let Some(target) = TestDb::mysql().await else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&target, 400).await;
    let user = format!("sluice_pw_{}", std::process::id());
    let database = target.url.rsplit('/').next().unwrap().to_owned();
    target
        .execute(&format!("DROP USER IF EXISTS '{user}'@'%'"))
        .await;
    target
        .execute(&format!(
            "CREATE USER '{user}'@'%' IDENTIFIED BY '{PASSWORD}'"
        ))
        .await;
    target
        .execute(&format!("GRANT ALL ON {database}.* TO '{user}'@'%'"))
        .await;
    let url = target
        .url
        .replacen("root@", &format!("{user}:{PASSWORD}@"), 1);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), format!("secured {url}\n")).unwrap();
    let path = file.path().to_str().unwrap();
    let id = increment_group_one(&coordinator, &["--target", &url]);
    {
        let _without = spawn_worker(&coordinator, &["--node", "without", "--lease-ttl", "1s"]);
        until(
            "the worker without the password says why it waits",
            || async {
                let record = coordinator.store.operation(id).await.unwrap();
                record
                    .state
                    .health_reason
                    .is_some_and(|r| r.contains("cannot be reached"))
            },
        )
        .await;
    }
    let record = coordinator.store.operation(id).await.unwrap();
    assert_ne!(record.state.status, OperationStatus::Failed);
    let reason = record.state.health_reason.unwrap_or_default();
    assert!(!reason.contains(PASSWORD), "{reason}");
    assert_eq!(
        target
            .scalar("SELECT COUNT(*) FROM items WHERE counter <> 0")
            .await,
        0
    );
    let _with = spawn_worker(&coordinator, &["--node", "with", "--targets", path]);
    until("the worker with the targets file finishes it", || async {
        coordinator.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert_group_one_changed_once(&target).await;
    let shown = sluice(&coordinator, &["show", &id.to_string(), "--json"]);
    assert!(!String::from_utf8_lossy(&shown.stdout).contains(PASSWORD));
    target
        .execute(&format!("DROP USER IF EXISTS '{user}'@'%'"))
        .await;
    coordinator.cleanup().await;
    target.cleanup().await;
}

/// Each target's health is read on that target: a session holding a lock
/// on one target's table makes its operation's sub-batch wait for it, which
/// that target's monitor sees and stops that operation alone (the store,
/// in SQLite, knows nothing of it); the other target goes on; released, it
/// resumes and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_s_own_health_stops_its_operation_alone() {
    let _shared = REPLICA.read().await;
    let (Some(locked), Some(free)) = (TestDb::postgres().await, TestDb::postgres().await) else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&locked, 4_000).await;
    create_counted_items(&free, 4_000).await;
    let file = targets_file(&[("locked", &locked), ("free", &free)]);
    let id = increment_group_one(
        &coordinator,
        &[
            "--targets",
            file.path().to_str().unwrap(),
            "--batch-size",
            "100",
            "--sub-batch-size",
            "10",
            "--pause",
            "5ms",
        ],
    );
    let member = |name: &'static str| {
        let coordinator = &coordinator;
        async move {
            fleet_of(coordinator, id)
                .await
                .into_iter()
                .find(|m| m.state.target_name.as_deref() == Some(name))
                .unwrap()
        }
    };
    let _worker = spawn_worker(&coordinator, &["--node", "w"]);
    until_items_changed(&locked, 100).await;
    // A session holds the table: the operation's next update waits for it.
    let holder = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&locked.url)
        .await
        .unwrap();
    let mut held = holder.begin().await.unwrap();
    sqlx::query("LOCK TABLE items IN SHARE MODE")
        .execute(&mut *held)
        .await
        .unwrap();
    until(
        "the locked target's operation is stopped by its own health",
        || async {
            let m = member("locked").await;
            m.state.health == sluice_store::Health::Stopped
                && m.state
                    .health_reason
                    .is_some_and(|r| r.contains("waiting for a lock on items"))
        },
    )
    .await;
    until("the other target finishes meanwhile", || async {
        member("free").await.state.status == OperationStatus::Finished
    })
    .await;
    assert_ne!(
        member("locked").await.state.status,
        OperationStatus::Finished
    );
    held.rollback().await.unwrap();
    holder.close().await;
    until("the released target finishes", || async {
        member("locked").await.state.status == OperationStatus::Finished
    })
    .await;
    assert_group_one_changed_once(&locked).await;
    assert_group_one_changed_once(&free).await;
    coordinator.cleanup().await;
    locked.cleanup().await;
    free.cleanup().await;
}

/// A target's replica named in the worker's targets file (`replica=URL`):
/// its replay paused, the lag stops that target's operation, measured by a
/// heartbeat written on the target; replay resumed, it finishes. Its 400
/// sub-batches, 20 ms apart, take 8 s at the least, time enough for the lag
/// to reach its stop level before the operation could finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_target_s_replica_lag_stops_its_operation() {
    let _alone = REPLICA.write().await;
    let Some(target) = TestDb::postgres().await else {
        return;
    };
    let Some(replica) = target.replica_url().await else {
        return;
    };
    let coordinator = TestDb::sqlite().await;
    create_counted_items(&target, 20_000).await;
    target.replica_caught_up(Duration::from_secs(600)).await;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        file.path(),
        format!("lagging {} replica={replica}\n", target.url),
    )
    .unwrap();
    let path = file.path().to_str().unwrap();
    let id = increment_group_one(
        &coordinator,
        &[
            "--targets",
            path,
            "--sub-batch-size",
            "50",
            "--pause",
            "20ms",
        ],
    );
    let _worker = spawn_worker(
        &coordinator,
        &[
            "--node",
            "w",
            "--targets",
            path,
            "--replica-lag-throttle",
            "1s",
            "--replica-lag-stop",
            "2s",
        ],
    );
    until_items_changed(&target, 500).await;
    until("a heartbeat of the target on its replica", || {
        target.replica_has_a_heartbeat(&replica)
    })
    .await;
    let paused = target.pause_replica(&target.replica_server()).await;
    let last = std::sync::Mutex::new(String::new());
    until(
        "the target's operation stopped for its replica's lag",
        || async {
            let record = coordinator.store.operation(id).await.unwrap();
            let seen = format!(
                "{:?}: {:?}",
                record.state.health, record.state.health_reason
            );
            let mut last = last.lock().unwrap();
            if *last != seen {
                eprintln!("the operation's health: {seen}");
                *last = seen;
            }
            assert_ne!(
                record.state.status,
                OperationStatus::Finished,
                "the operation finished before its replica's lag stopped it"
            );
            record.state.health == sluice_store::Health::Stopped
                && record
                    .state
                    .health_reason
                    .is_some_and(|r| r.contains("lag of replica"))
        },
    )
    .await;
    paused.resume().await;
    until(
        "the operation finishes once the replica catches up",
        || async {
            coordinator.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
        },
    )
    .await;
    assert_group_one_changed_once(&target).await;
    coordinator.cleanup().await;
    target.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_target_is_refused_without_its_password() {
    let _shared = REPLICA.read().await;
    let coordinator = TestDb::sqlite().await;
    let unreachable = format!("postgres://app:{PASSWORD}@127.0.0.1:1/nowhere");
    let output = set_counter_on(&coordinator, &unreachable);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "accepted: {stderr}");
    assert!(
        stderr.contains("postgres://app@127.0.0.1:1/nowhere"),
        "the target is not named: {stderr}"
    );
    assert!(
        !stderr.contains(PASSWORD),
        "the password is shown: {stderr}"
    );
    let listed = json(&sluice(&coordinator, &["list", "--json"]));
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    coordinator.cleanup().await;
}

/// The `host:port` a server URL names.
fn server_address(url: &str) -> std::net::SocketAddr {
    let after = url.split_once('@').map_or(url, |(_, rest)| rest);
    let host_port = after.split('/').next().unwrap();
    host_port.parse().expect("a numeric host and port")
}

/// A TCP proxy in front of a database server, which a test cuts off (its
/// connections dropped, new ones refused) and restores on the same port.
struct Proxy {
    server: std::net::SocketAddr,
    address: std::net::SocketAddr,
    running: tokio::task::JoinSet<()>,
}

impl Proxy {
    async fn start(server: std::net::SocketAddr) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let mut proxy = Proxy {
            server,
            address,
            running: tokio::task::JoinSet::new(),
        };
        proxy.serve(listener);
        proxy
    }

    fn address(&self) -> std::net::SocketAddr {
        self.address
    }

    /// Accepts on `listener`, relaying each connection to the server; every
    /// relay is a task of the set, so cutting aborts them all.
    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let server = self.server;
        let relays = Arc::new(std::sync::Mutex::new(Vec::<tokio::task::AbortHandle>::new()));
        let held = Arc::clone(&relays);
        self.running.spawn(async move {
            struct AbortOnDrop(Arc<std::sync::Mutex<Vec<tokio::task::AbortHandle>>>);
            impl Drop for AbortOnDrop {
                fn drop(&mut self) {
                    for relay in self.0.lock().unwrap().drain(..) {
                        relay.abort();
                    }
                }
            }
            let _relays = AbortOnDrop(held);
            while let Ok((mut client, _)) = listener.accept().await {
                let relay = tokio::spawn(async move {
                    if let Ok(mut upstream) = tokio::net::TcpStream::connect(server).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
                relays.lock().unwrap().push(relay.abort_handle());
            }
        });
    }

    /// Drops every connection and stops listening: connecting is refused.
    fn cut(&mut self) {
        self.running.abort_all();
    }

    /// Listens again on the same port.
    async fn restore(&mut self) {
        let listener = tokio::net::TcpListener::bind(self.address).await.unwrap();
        self.serve(listener);
    }
}

/// `sluice enqueue update-in-batches` of `counter = 1` on `items` of the
/// one target `url`.
fn set_counter_on(coordinator: &TestDb, url: &str) -> std::process::Output {
    sluice(
        coordinator,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = 1",
            "--target",
            url,
        ],
    )
}

/// `sluice enqueue update-in-batches` of `counter = counter + 1` on
/// `items` over the targets `file` lists, with `--json`.
fn increment_over(coordinator: &TestDb, file: &std::path::Path) -> std::process::Output {
    sluice(
        coordinator,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = counter + 1",
            "--targets",
            file.to_str().unwrap(),
            "--json",
        ],
    )
}

/// A targets file naming each of `targets` (their URLs with [`PASSWORD`]).
fn targets_file(targets: &[(&str, &TestDb)]) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    let mut text = String::from("# name, then URL\n");
    for (name, target) in targets {
        text.push_str(&format!("{name} {}\n", with_password(&target.url)));
    }
    std::io::Write::write_all(&mut file, text.as_bytes()).expect("written");
    file
}

/// Waits (with `until`'s deadline) until every operation of the fleet of
/// operation `id` has finished.
async fn until_fleet_finished(coordinator: &TestDb, id: i64, what: &str) {
    until(what, || async {
        fleet_of(coordinator, id)
            .await
            .iter()
            .all(|m| m.state.status == OperationStatus::Finished)
    })
    .await;
}

/// The operations of the fleet operation `id` belongs to.
async fn fleet_of(coordinator: &TestDb, id: i64) -> Vec<sluice_store::OperationRecord> {
    let record = coordinator.store.operation(id).await.unwrap();
    let fleet = record.state.fleet.expect("in a fleet");
    coordinator.store.fleet(&fleet).await.unwrap()
}

/// `url` with [`PASSWORD`] in it, on PostgreSQL (MariaDB's test user has
/// none, so a password there would be refused).
fn with_password(url: &str) -> String {
    match url.strip_prefix("postgres://postgres@") {
        Some(rest) => format!("postgres://postgres:{PASSWORD}@{rest}"),
        None => url.to_owned(),
    }
}

/// Enqueues through `coordinator` an increment of `items`' group 1 with
/// `options` (the targets among them); returns the first operation's id.
fn increment_group_one(coordinator: &TestDb, options: &[&str]) -> i64 {
    let set = ["--set", "counter = counter + 1"];
    enqueue_group_one(coordinator, "update-in-batches", &set, options)
}

/// Enqueues through `coordinator` the archive of `items`' group 1 into
/// `old_items` with `options`; returns the first operation's id.
fn archive_group_one(coordinator: &TestDb, options: &[&str]) -> i64 {
    enqueue_group_one(
        coordinator,
        "archive-rows",
        &["--into", "old_items"],
        options,
    )
}

/// Enqueues `kind` over `items`' group 1 with `arguments` and `options`
/// through `coordinator`; returns the first operation's id.
fn enqueue_group_one(
    coordinator: &TestDb,
    kind: &str,
    arguments: &[&str],
    options: &[&str],
) -> i64 {
    let mut args = vec!["enqueue", kind, "--table", "items", "--where", "grp = 1"];
    args.extend_from_slice(arguments);
    args.extend_from_slice(options);
    args.push("--json");
    json(&sluice(coordinator, &args))["id"]
        .as_i64()
        .expect("an id")
}

/// Enqueues an increment of `items`' group 1 on `target` through
/// `coordinator`; returns its id.
fn enqueue_on(coordinator: &TestDb, target: &TestDb) -> i64 {
    let url = with_password(&target.url);
    increment_group_one(
        coordinator,
        &[
            "--target",
            &url,
            "--batch-size",
            "400",
            "--sub-batch-size",
            "40",
        ],
    )
}

async fn killed_workers_change_every_row_of_the_target_once(coordinator: TestDb, target: TestDb) {
    create_counted_items(&target, 6_000).await;
    let id = enqueue_on(&coordinator, &target);
    let worker = |node: &str| {
        spawn_worker(
            &coordinator,
            &["--node", node, "--lease-ttl", "1s", "--pool-size", "2"],
        )
    };
    // Killed twice midway, each time from wherever it got to.
    for (node, rows) in [("first", 300), ("second", 1_200)] {
        let mut running = worker(node);
        until_items_changed(&target, rows).await;
        running.kill().expect("SIGKILL");
        running.wait().expect("reaped");
    }
    let _last = worker("last");
    until("the operation finishes", || async {
        coordinator.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    })
    .await;
    assert_group_one_changed_once(&target).await;
    let record = coordinator.store.operation(id).await.unwrap();
    assert_eq!(record.state.rows_done, 3_000, "rows counted once each");
    assert_eq!(
        target
            .scalar("SELECT CAST(SUM(rows_affected) AS BIGINT) FROM sluice_target_progress")
            .await,
        3_000,
        "the target's records count every row once"
    );
    coordinator.store.verify(id).await.unwrap();
    // The password went nowhere: not into the store, not into what is shown.
    let stored = record.state.target.clone().expect("a target recorded");
    assert!(!stored.contains(PASSWORD), "stored: {stored}");
    let created = coordinator.store.events(id, 0).await.unwrap();
    let Event::Created(spec) = &created[0].event else {
        panic!("the first event is not `created`")
    };
    assert_eq!(spec.target.as_deref(), Some(stored.as_str()));
    for command in [
        vec!["list", "--json"],
        vec!["show", &id.to_string(), "--json"],
    ] {
        let output = sluice(&coordinator, &command);
        let shown = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && !shown.contains(PASSWORD),
            "{shown}"
        );
    }
    coordinator.cleanup().await;
    target.cleanup().await;
}

async fn a_stalled_holder_commits_nothing_on_the_target(coordinator: TestDb, target: TestDb) {
    create_counted_items(&target, 100).await;
    let id = enqueue_on(&coordinator, &target);
    let clock = ManualClock::new(chrono::Utc::now().timestamp_millis());
    let store = coordinator
        .store
        .clone()
        .with_clock(Arc::new(clock.clone()));
    let apart = sluice_operations::on_target(&store, &target.url, &common::fixtures_write_utc())
        .await
        .unwrap();
    let ttl = Duration::from_secs(1);
    let lease = claim_lease(&apart, "stalled", ttl).await;
    let next = NextBatch {
        end: Some(Cursor::int(100)),
        size: 100,
        ttl,
    };
    let (batch, _) = apart.plan_claimed_batch(&lease, &next).await.unwrap();
    let stalled = batch.lease().unwrap();
    // The holder stalls past its lease; another node takes the batch over.
    clock.advance(5_000);
    let taken = apart
        .claim_batches("fresh", Some(id), 1, Duration::from_secs(30))
        .await
        .unwrap();
    let fresh = taken[0].lease().unwrap();
    assert!(fresh.epoch > stalled.epoch);
    // The stalled holder wakes and still reaches both databases: the
    // target's record refuses its sub-batch.
    let change = Statement::new("UPDATE items SET counter = counter + 1 WHERE id <= 10");
    let timeout = Duration::from_secs(30);
    let refused = apart
        .run_sub_batch_statement(&stalled, &change, None, Some(&Cursor::int(10)), timeout)
        .await;
    assert!(
        matches!(refused, Err(StoreError::BatchLeaseLost { .. })),
        "{refused:?}"
    );
    assert_eq!(
        target
            .scalar("SELECT COUNT(*) FROM items WHERE counter <> 0")
            .await,
        0,
        "the stalled holder's change was kept"
    );
    // The new holder's goes through, once: a repeat from the same progress
    // is refused too.
    let done = apart
        .run_sub_batch_statement(&fresh, &change, None, Some(&Cursor::int(10)), timeout)
        .await
        .unwrap();
    assert_eq!(done, 10);
    let again = apart
        .run_sub_batch_statement(&fresh, &change, None, Some(&Cursor::int(10)), timeout)
        .await;
    assert!(
        matches!(again, Err(StoreError::ProgressMoved { .. })),
        "{again:?}"
    );
    assert_eq!(
        target
            .scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
            .await,
        10
    );
    coordinator.cleanup().await;
    target.cleanup().await;
}

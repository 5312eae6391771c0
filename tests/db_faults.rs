//! Database faults under a running worker process, on PostgreSQL: its
//! connections killed with `pg_terminate_backend`, then the server
//! restarted (`pg_ctlcluster … restart`). The operation retries, resumes
//! and finishes — never failed — and every matching row is changed exactly
//! once.
//!
//! The restart needs the local cluster and the rights to restart it (CI
//! runs as root); without them the test says so and stops, unless
//! `SLUICE_REQUIRE_SERVERS=1` makes that a failure. It is the only test in
//! this binary: a restart would break any test running beside it.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{
    TestDb, assert_group_one_changed_once, create_counted_items, enqueue_increment,
    servers_required, spawn_worker_on, until_within,
};
use sluice_store::OperationStatus;

postgres_only!(killed_connections_and_a_server_restart_are_survived);

/// `pg_ctlcluster --skip-systemctl-redirect <version> main restart`, or why
/// it cannot be done here.
fn restart_postgres() -> Result<(), String> {
    let versions = std::fs::read_dir("/etc/postgresql")
        .map_err(|e| format!("no local PostgreSQL cluster to restart: {e}"))?;
    let version = versions
        .filter_map(|v| v.ok()?.file_name().into_string().ok())
        .max()
        .ok_or("no local PostgreSQL cluster to restart")?;
    let status = Command::new("pg_ctlcluster")
        .args(["--skip-systemctl-redirect", &version, "main", "restart"])
        .status()
        .map_err(|e| format!("cannot run pg_ctlcluster: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("pg_ctlcluster restart failed: {status}"))
    }
}

async fn killed_connections_and_a_server_restart_are_survived(db: &TestDb) {
    create_counted_items(db, 200_000).await;
    let op = enqueue_increment(
        db,
        &[
            "--where",
            "grp = 1",
            "--batch-size",
            "2000",
            "--sub-batch-size",
            "500",
            "--pause",
            "10ms",
        ],
    );
    let id = op["id"].as_i64().unwrap();
    // The worker's sessions are named, so they can be told from the test's.
    let named = format!("{}&application_name=sluice-fault-worker", db.url);
    let mut worker = spawn_worker_on(&named, &["--node", "fault-worker", "--lease-ttl", "2s"]);
    // Polls that tolerate the database being away for a moment.
    let rows_done = || async {
        db.store
            .operation(id)
            .await
            .map_or(-1, |r| r.state.rows_done)
    };
    until_within("the worker gets going", Duration::from_secs(60), || async {
        rows_done().await >= 10_000
    })
    .await;
    let killed = db
        .scalar(
            "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'sluice-fault-worker') k",
        )
        .await;
    assert!(killed > 0, "the worker's connections were found and killed");
    let after_kill = rows_done().await;
    until_within(
        "the worker recovers from killed connections",
        Duration::from_secs(60),
        || async { rows_done().await >= after_kill + 10_000 },
    )
    .await;
    let started_before = db
        .scalar("SELECT CAST(EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000 AS BIGINT)")
        .await;
    match restart_postgres() {
        Ok(()) => {}
        Err(why) if !servers_required() => {
            eprintln!("SKIPPED the restart half: {why}");
            let _ = worker.kill();
            let _ = worker.wait();
            return;
        }
        Err(why) => panic!("{why}"),
    }
    until_within(
        "the operation finishes after the restart",
        Duration::from_secs(240),
        || async {
            db.store
                .operation(id)
                .await
                .is_ok_and(|r| r.state.status.is_terminal())
        },
    )
    .await;
    worker.kill().unwrap();
    worker.wait().unwrap();
    let started_after = db
        .scalar("SELECT CAST(EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000 AS BIGINT)")
        .await;
    assert!(started_after > started_before, "the server was restarted");
    let record = db.store.operation(id).await.unwrap();
    assert_eq!(
        record.state.status,
        OperationStatus::Finished,
        "not failed: {:?}",
        record.state.last_error
    );
    assert_eq!(record.state.rows_done, 100_000);
    assert_group_one_changed_once(db).await;
    db.store.verify(id).await.unwrap();
}

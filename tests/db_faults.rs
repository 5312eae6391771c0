//! Database faults under a running worker process, on PostgreSQL and
//! MariaDB: its connections killed (`pg_terminate_backend`, `KILL`), then
//! the server restarted (`pg_ctlcluster … restart`; for MariaDB `SHUTDOWN`
//! and the same command line started again). The operation retries,
//! resumes and finishes — never failed — and every matching row is changed
//! exactly once.
//!
//! The restart needs the local server and the rights to restart it (CI
//! runs as root); without them the test says so and stops, unless
//! `SLUICE_REQUIRE_SERVERS=1` makes that a failure. These are the only
//! tests in this binary, and they take turns: a restart would break any
//! test running beside it on the same server.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{
    TestDb, assert_group_one_changed_once, create_counted_items, enqueue_increment,
    servers_required, spawn_worker_on, until_within,
};
use sluice_store::OperationStatus;

postgres_and_mysql!(killed_connections_and_a_server_restart_are_survived);

/// One fault test at a time: two servers restarting under two workers on
/// two cores would time each other out.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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

/// Restarts the MariaDB (or MySQL) server `db` is on with the command line
/// it runs with now, or says why it cannot be done here (checked before it
/// is stopped, so a server this test may not start again is left running).
async fn restart_mysql(db: &TestDb) -> Result<(), String> {
    let uid = Command::new("id").arg("-u").output();
    if !uid.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0") {
        return Err("starting the MariaDB server again needs root".into());
    }
    let mut pid_file = std::path::PathBuf::from(db.text("SELECT @@pid_file").await);
    if pid_file.is_relative() {
        pid_file = std::path::PathBuf::from(db.text("SELECT @@datadir").await).join(pid_file);
    }
    let pid = std::fs::read_to_string(&pid_file).map_err(|e| {
        format!(
            "cannot read the server's pid file {}: {e}",
            pid_file.display()
        )
    })?;
    let process = format!("/proc/{}", pid.trim());
    let command_line = std::fs::read(format!("{process}/cmdline"))
        .map_err(|e| format!("cannot read the server's command line: {e}"))?;
    let command_line: Vec<String> = command_line
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let Some((server, arguments)) = command_line.split_first() else {
        return Err("the server's command line is empty".into());
    };
    if Command::new("setsid").arg("--version").output().is_err() {
        return Err("no setsid to start the server again".into());
    }
    let sluice_target::Backend::MySql(pool) = db.store.backend() else {
        unreachable!("MariaDB only")
    };
    // The statement ends the server; its answer may not come.
    let _ = sqlx::raw_sql("SHUTDOWN").execute(pool).await;
    // Gone, or a zombie its parent has yet to reap.
    let stopped = || async {
        std::fs::read_to_string(format!("{process}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('Z'))
        })
    };
    until_within(
        "the MariaDB server stops",
        Duration::from_secs(120),
        stopped,
    )
    .await;
    // In a session of its own, outliving this test, as a service
    // manager's server would.
    let started = Command::new("setsid")
        .arg("--fork")
        .arg(server)
        .args(arguments)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run setsid: {e}"))?;
    if !started.success() {
        return Err(format!("the server did not start again: {started}"));
    }
    Ok(())
}

/// After a restart of the primary, its replica (if any) connects again at
/// once rather than at its next retry, so the tests after this one find it
/// replaying.
async fn reconnect_replica(db: &TestDb) {
    if db.replica_url().await.is_some() {
        db.on_replica(
            &db.replica_server(),
            "STOP SLAVE IO_THREAD; START SLAVE IO_THREAD",
        )
        .await;
    }
}

async fn killed_connections_and_a_server_restart_are_survived(db: &TestDb) {
    let _turn = ONE_AT_A_TIME.lock().await;
    let mysql = db.backend == "mysql";
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
    // PostgreSQL: the worker's sessions are named, so they can be told from
    // the test's. MariaDB: every other session on the test's database goes.
    let url = match mysql {
        true => db.url.clone(),
        false => format!("{}&application_name=sluice-fault-worker", db.url),
    };
    let mut worker = spawn_worker_on(&url, &["--node", "fault-worker", "--lease-ttl", "2s"]);
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
    let killed = match mysql {
        true => kill_other_sessions(db).await,
        false => {
            db.scalar(
                "SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = 'sluice-fault-worker') k",
            )
            .await
        }
    };
    assert!(killed > 0, "the worker's connections were found and killed");
    let after_kill = rows_done().await;
    until_within(
        "the worker recovers from killed connections",
        Duration::from_secs(60),
        || async { rows_done().await >= after_kill + 10_000 },
    )
    .await;
    let running = db.store.operation(id).await.unwrap().state.status;
    assert!(!running.is_terminal(), "still running when the server goes");
    let started_before = server_started_at(db).await;
    let restarted = match mysql {
        true => restart_mysql(db).await,
        false => restart_postgres(),
    };
    match restarted {
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
    if mysql {
        reconnect_replica(db).await;
    }
    let started_after = server_started_at(db).await;
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

/// When the server `db` is on started, in epoch milliseconds (to the
/// second on MariaDB).
async fn server_started_at(db: &TestDb) -> i64 {
    db.scalar(if db.backend == "mysql" {
        "SELECT (UNIX_TIMESTAMP() - VARIABLE_VALUE) * 1000 FROM information_schema.global_status \
         WHERE VARIABLE_NAME = 'UPTIME'"
    } else {
        "SELECT CAST(EXTRACT(EPOCH FROM pg_postmaster_start_time()) * 1000 AS BIGINT)"
    })
    .await
}

/// Kills every session on the test's MariaDB database but the one asking
/// (the worker's, and the test store's idle ones, which its pool replaces);
/// returns how many.
async fn kill_other_sessions(db: &TestDb) -> i64 {
    let sluice_target::Backend::MySql(pool) = db.store.backend() else {
        unreachable!("MariaDB only")
    };
    let mut asking = pool.acquire().await.unwrap();
    let others: Vec<i64> = sqlx::query_scalar(
        "SELECT CAST(id AS SIGNED) FROM information_schema.processlist \
         WHERE db = DATABASE() AND id <> CONNECTION_ID()",
    )
    .fetch_all(&mut *asking)
    .await
    .unwrap();
    for id in &others {
        // Gone meanwhile is as good as killed.
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!("KILL CONNECTION {id}")))
            .execute(&mut *asking)
            .await;
    }
    others.len() as i64
}

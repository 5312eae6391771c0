//! A store that cannot be used is reported in one line and never floods:
//! its tables gone, its database unknown, its account refused writes.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{TestDb, sluice_on, until_within};

for_each_backend!(a_store_whose_tables_are_gone_is_named_in_one_line);

postgres_and_mysql!(an_unknown_database_is_named_in_one_line);

postgres_only!(a_store_refusing_writes_is_logged_once_until_it_recovers);

/// Sluice's tables dropped by hand, its migrations still recorded: every
/// command says so in one line naming the database and the tables, and
/// exits 1, instead of the database's raw error on its first statement.
async fn a_store_whose_tables_are_gone_is_named_in_one_line(db: &TestDb) {
    db.execute("DROP TABLE sluice_events").await;
    db.execute("DROP TABLE sluice_windows").await;
    for args in [
        &["list"][..],
        &["show", "1"][..],
        &["run", "--until-idle"][..],
    ] {
        let output = sluice_on(&db.url, args);
        let said = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {said}");
        assert_eq!(said.lines().count(), 1, "{args:?}: {said}");
        assert!(
            said.contains("lacks Sluice's tables sluice_events, sluice_windows"),
            "{said}"
        );
    }
}

/// A URL naming a database the server lacks: one line saying so, with the
/// URL, and exit 1.
async fn an_unknown_database_is_named_in_one_line(db: &TestDb) {
    let url = match db.backend {
        "postgres" => format!(
            "{}_nothing_here",
            common::postgres_url().split('?').next().unwrap()
        ),
        _ => format!("{}/nothing_here", common::mysql_url().trim_end_matches('/')),
    };
    let output = sluice_on(&url, &["list"]);
    let said = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
    assert!(said.contains("has no such database"), "{said}");
    assert!(said.contains("nothing_here"), "{said}");
}

/// PostgreSQL: a worker whose role loses its write privileges on the
/// store's tables cannot claim anything; its reconciler dies at each try.
/// It is restarted with a growing backoff and logged once — not hundreds
/// of times a second — and once the privileges are back it runs again and
/// says so.
async fn a_store_refusing_writes_is_logged_once_until_it_recovers(db: &TestDb) {
    let schema = db.schema.clone().unwrap();
    let role = format!("{schema}_w");
    db.execute(&format!("CREATE ROLE {role} LOGIN IN ROLE pg_monitor"))
        .await;
    db.execute(&format!("GRANT ALL ON SCHEMA {schema} TO {role}"))
        .await;
    db.execute(&format!(
        "GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}"
    ))
    .await;
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut worker = common::Worker::from(
        std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["run", "--log-format", "text"])
            .env("SLUICE_DATABASE_URL", &url)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap(),
    );
    let read = || std::fs::read_to_string(log.path()).unwrap_or_default();
    until_within("the reconciler to die", Duration::from_secs(30), || async {
        read().contains("died; restarting it")
    })
    .await;
    db.execute(&format!(
        "GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}"
    ))
    .await;
    until_within(
        "the reconciler to run again",
        Duration::from_secs(90),
        || async { read().contains("running again") },
    )
    .await;
    worker.kill().unwrap();
    worker.wait().unwrap();
    let said = read();
    assert_eq!(
        said.matches("died; restarting it").count(),
        1,
        "logged at every death:\n{said}"
    );
    db.execute(&format!("DROP OWNED BY {role}")).await;
    db.execute(&format!("DROP ROLE {role}")).await;
}

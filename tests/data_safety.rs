//! No operation touches a row outside its scope, touches a row twice, or is
//! accepted when it cannot work — proved on generated tables, scopes, keys
//! and SET lists against a real SQLite file and a real PostgreSQL, and on
//! the faults and races an operator meets.

mod common;

use std::time::Duration;

use common::{TestDb, enqueue_older_than_90_days, sluice, sluice_on, succeeded, until};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use serde_json::json;
use sluice_operations::batching::{LoopPick, loop_rows};
use sluice_operations::{EnqueueOptions, Filter, Registry, Shape, Strategy as Walk};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig, Selection};
use sluice_target::Statement;

for_each_backend!(
    generated_operations_change_exactly_the_rows_in_scope_each_once,
    a_loop_statement_never_reaches_a_row_outside_its_scope_through_a_shared_key,
    identical_enqueues_from_ten_processes_at_once_make_one_operation,
    rows_written_behind_a_running_delete_are_still_deleted_each_once,
    an_archive_whose_scope_answers_otherwise_each_time_loses_no_row,
    a_text_key_is_walked_in_its_collation_s_order,
    a_clock_running_ahead_of_the_database_ages_no_young_row,
    a_generated_column_is_archived_as_its_values,
    a_key_the_database_writes_on_update_is_refused,
);

/// On SQLite a loop sub-batch picks its rows by rowid first
/// (`batching::rowid_pick`): whatever the table calls its columns, the
/// rows it changes are the rows it picked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqlite_loop_picks_by_whichever_name_reaches_the_rowid() {
    let db = TestDb::sqlite().await;
    let tables = [
        // `rowid` and `oid` are columns here, each one value on every row:
        // a pick through either would name every row.
        (
            "shadowed",
            "CREATE TABLE shadowed (id INTEGER PRIMARY KEY, rowid TEXT NOT NULL DEFAULT 'x', \
             oid BIGINT NOT NULL DEFAULT 7, created_at TEXT NOT NULL)",
        ),
        // All three names taken: no name reaches the rowid, so the loop
        // keeps its own form.
        (
            "all_taken",
            "CREATE TABLE all_taken (id INTEGER PRIMARY KEY, rowid TEXT NOT NULL DEFAULT 'x', \
             _rowid_ TEXT NOT NULL DEFAULT 'y', oid BIGINT NOT NULL DEFAULT 7, \
             created_at TEXT NOT NULL)",
        ),
        // No rowid at all: the loop's own form.
        (
            "clustered",
            "CREATE TABLE clustered (id BIGINT PRIMARY KEY, created_at TEXT NOT NULL) WITHOUT ROWID",
        ),
    ];
    let runtime = quick_runtime(&db.store).await;
    let now = chrono::Utc::now();
    for (table, create) in tables {
        db.execute(create).await;
        db.execute(&format!(
            "CREATE INDEX {table}_created ON {table} (created_at)"
        ))
        .await;
        // 50 aged rows, 10 young ones.
        let values: Vec<String> = (1..=60)
            .map(|id| {
                let days = if id <= 50 { 200 + id } else { id - 50 };
                let at = db.time_literal(now - chrono::Duration::days(days));
                format!("({id}, {at})")
            })
            .collect();
        db.execute(&format!(
            "INSERT INTO {table} (id, created_at) VALUES {}",
            values.join(", ")
        ))
        .await;
        let options = EnqueueOptions {
            batch_size: 20,
            sub_batch_size: 7,
            ..EnqueueOptions::default()
        };
        let id = enqueue_older_than_90_days(&db.store, table, now, &options).await;
        let record = runtime.wait(id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(record.state.status.as_str(), "finished", "{table}");
        assert_eq!(record.state.rows_done, 50, "{table}: each aged row once");
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table} WHERE id > 50"))
                .await,
            10,
            "{table}: every young row stays"
        );
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await,
            10,
            "{table}: every aged row goes"
        );
    }
    runtime.shutdown().await.unwrap();
    db.cleanup().await;
}

postgres_and_mysql!(binary_keys_are_walked_byte_by_byte);

/// A binary key — MySQL's `BINARY(16)`, how UUIDs are kept there, or a
/// PostgreSQL `bytea` — is walked as the database orders it, byte by byte
/// (all zeros to all ones, and the bytes either side of the sign bit):
/// `update-in-batches` changes each row once, `delete-aged-rows` deletes
/// exactly the aged rows.
async fn binary_keys_are_walked_byte_by_byte(db: &TestDb) {
    let postgres = db.backend == "postgres";
    let binary = if postgres { "BYTEA" } else { "BINARY(16)" };
    let bytes = |hex: &str| match postgres {
        true => format!("'\\x{hex}'::bytea"),
        false => format!("UNHEX('{hex}')"),
    };
    let time = db.time_type();
    let aged = db.time_literal(chrono::Utc::now() - chrono::Duration::days(200));
    let young = db.time_literal(chrono::Utc::now() - chrono::Duration::days(30));
    for table in ["by_update", "by_age"] {
        db.execute(&format!(
            "CREATE TABLE {table} (id {binary} PRIMARY KEY, created_at {time} NOT NULL, \
             hits INTEGER NOT NULL DEFAULT 0)"
        ))
        .await;
        db.execute(&format!(
            "CREATE INDEX {table}_created ON {table} (created_at)"
        ))
        .await;
        let rows: Vec<String> = (0..40u32)
            .map(|i| {
                // Spread over the whole range, both ends and the middle included.
                let first = [0x00, 0xff, 0x7f, 0x80]
                    .get(i as usize)
                    .copied()
                    .unwrap_or(i * 6);
                let hex = format!("{first:02x}{:030x}", i.wrapping_mul(2_654_435_761));
                let at = if i % 2 == 0 { &aged } else { &young };
                format!("({}, {at})", bytes(&hex))
            })
            .collect();
        db.execute(&format!(
            "INSERT INTO {table} (id, created_at) VALUES {}",
            rows.join(", ")
        ))
        .await;
    }
    let enqueue = |args: &[&str]| enqueue_in_batches(db, args, "3", "2");
    enqueue(&[
        "update-in-batches",
        "--table",
        "by_update",
        "--set",
        "hits = hits + 1",
    ]);
    enqueue(&[
        "delete-aged-rows",
        "--table",
        "by_age",
        "--column",
        "created_at",
        "--older-than",
        "90d",
    ]);
    succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM by_update WHERE hits = 1")
            .await,
        40,
        "each row changed once"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM by_update WHERE hits <> 1")
            .await,
        0
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT COUNT(*) FROM by_age WHERE created_at > {aged}"
        ))
        .await,
        20,
        "the young rows stay"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM by_age").await,
        20,
        "the aged rows go"
    );
}

mysql_only!(
    operator_sql_means_on_mysql_what_it_means_in_the_mysql_client,
    unsigned_integers_batch_on_mysql_as_signed_ones_do,
);

postgres_only!(
    a_store_that_refuses_writes_is_waited_out_and_the_operation_finishes,
    lock_waits_are_seen_on_mixed_case_and_schema_qualified_tables,
    a_worker_whose_names_resolve_elsewhere_changes_no_row,
    a_worker_seeing_other_rows_of_a_secured_table_changes_none,
);

/// A table with row-level security shows each role its own rows: here the
/// role that enqueues sees one tenant's. A worker running as a role that
/// bypasses the policy (the table's owner, a superuser) would delete every
/// tenant's aged rows; it refuses the operation, naming both roles, and
/// changes no row. A worker running as the enqueuing role deletes exactly
/// the rows that role saw.
async fn a_worker_seeing_other_rows_of_a_secured_table_changes_none(db: &TestDb) {
    let store = db.schema.as_deref().expect("a PostgreSQL test schema");
    let tenant = format!("{store}_tenant");
    let aged = db.time_literal(chrono::Utc::now() - chrono::Duration::days(200));
    for sql in [
        // pg_monitor: a worker must read the health of other sessions.
        format!("CREATE ROLE {tenant} LOGIN IN ROLE pg_monitor"),
        format!("GRANT USAGE, CREATE ON SCHEMA {store} TO {tenant}"),
        "CREATE TABLE docs (id BIGINT PRIMARY KEY, tenant INTEGER NOT NULL, \
         created_at TIMESTAMPTZ NOT NULL)"
            .to_owned(),
        "CREATE INDEX docs_created_at ON docs (created_at)".to_owned(),
        format!("INSERT INTO docs SELECT g, g % 2, {aged} FROM generate_series(1, 40) g"),
        "ALTER TABLE docs ENABLE ROW LEVEL SECURITY".to_owned(),
        format!("CREATE POLICY own_rows ON docs TO {tenant} USING (tenant = 1)"),
        format!("GRANT ALL ON ALL TABLES IN SCHEMA {store} TO {tenant}"),
        format!("GRANT ALL ON ALL SEQUENCES IN SCHEMA {store} TO {tenant}"),
    ] {
        db.execute(&sql).await;
    }
    let as_tenant = db.url.replacen("postgres@", &format!("{tenant}@"), 1);
    assert_ne!(as_tenant, db.url, "the test URL names its role");
    succeeded(&sluice_on(
        &as_tenant,
        &[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "docs",
            "--column",
            "created_at",
            "--older-than",
            "90d",
        ],
    ));
    let bypassing = sluice(db, &["run", "--until-idle"]);
    let said = String::from_utf8_lossy(&bypassing.stderr);
    assert_eq!(bypassing.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "table `docs` has row-level security and the operation was enqueued by role `{tenant}`, but this worker runs as `postgres`"
        )),
        "{said}"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM docs").await,
        40,
        "no row deleted"
    );

    succeeded(&sluice_on(&as_tenant, &["retry", "1"]));
    succeeded(&sluice_on(&as_tenant, &["run", "--until-idle"]));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM docs WHERE tenant = 0")
            .await,
        20,
        "the rows the enqueuing role could not see are kept"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM docs WHERE tenant = 1")
            .await,
        0,
        "the rows it saw are deleted"
    );
    for sql in [
        format!("DROP OWNED BY {tenant}"),
        format!("DROP ROLE {tenant}"),
    ] {
        db.execute(&sql).await;
    }
}

/// Two roles can resolve one unqualified name to two tables: here the
/// session that enqueues finds `events` in one schema, and a worker — the
/// same store, another search path — would find it in another. That worker
/// refuses the operation, naming both paths, and changes no row in either
/// table; a worker resolving names as the enqueuing session did runs it.
async fn a_worker_whose_names_resolve_elsewhere_changes_no_row(db: &TestDb) {
    let store = db.schema.as_deref().expect("a PostgreSQL test schema");
    let [meant, other] = [format!("{store}_meant"), format!("{store}_other")];
    let aged = db.time_literal(chrono::Utc::now() - chrono::Duration::days(200));
    for schema in [&meant, &other] {
        for sql in [
            format!("CREATE SCHEMA {schema}"),
            format!(
                "CREATE TABLE {schema}.events (id BIGINT PRIMARY KEY, created_at TIMESTAMPTZ NOT NULL)"
            ),
            format!("CREATE INDEX ON {schema}.events (created_at)"),
            format!("INSERT INTO {schema}.events SELECT g, {aged} FROM generate_series(1, 40) g"),
        ] {
            db.execute(&sql).await;
        }
    }
    // Sluice's tables stay in the test schema (`--schema`, first on the
    // path); the target is found along the rest of each session's path.
    let on_path = |schema: &str| {
        format!(
            "{}?options=-c%20search_path%3D{schema}",
            common::postgres_url()
        )
    };
    let with_store = |args: &[&'static str]| -> Vec<&str> {
        ["--schema", store]
            .iter()
            .copied()
            .chain(args.iter().copied())
            .collect()
    };
    succeeded(&sluice_on(
        &on_path(&meant),
        &with_store(&[
            "enqueue",
            "delete-aged-rows",
            "--table",
            "events",
            "--column",
            "created_at",
            "--older-than",
            "90d",
        ]),
    ));
    let elsewhere = sluice_on(&on_path(&other), &with_store(&["run", "--until-idle"]));
    let said = String::from_utf8_lossy(&elsewhere.stderr);
    assert_eq!(elsewhere.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("through the schemas {store}, {meant}, and this worker's sessions resolve them through {store}, {other}")),
        "{said}"
    );
    let counts = format!(
        "SELECT (SELECT COUNT(*) FROM {meant}.events) * 1000 + (SELECT COUNT(*) FROM {other}.events)"
    );
    assert_eq!(
        db.scalar(&counts).await,
        40_040,
        "no row of either table changed"
    );

    succeeded(&sluice_on(&on_path(&meant), &with_store(&["retry", "1"])));
    succeeded(&sluice_on(
        &on_path(&meant),
        &with_store(&["run", "--until-idle"]),
    ));
    assert_eq!(
        db.scalar(&counts).await,
        40,
        "the aged rows of the table it was enqueued for, and only those, deleted"
    );
    for schema in [&meant, &other] {
        db.execute(&format!("DROP SCHEMA {schema} CASCADE")).await;
    }
}

/// SQLite keeps any value in any column, whatever its declared type. A key
/// whose values are of two kinds, or of a kind no batch walks (REAL, BLOB),
/// is refused at enqueue when it shows at either end of the key's order;
/// a REAL between two integers that a batch would end on fails the run,
/// naming it, before that batch changes a row (here the first batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sqlite_key_holding_values_of_another_kind_changes_no_row() {
    let db = TestDb::sqlite().await;
    let tables = [
        (
            "untyped",
            "",
            "1, 2, 'b'",
            Some("from an integer (1) to a text ('b')"),
        ),
        (
            "blobbed",
            "TEXT",
            "'a', X'01'",
            Some("from a text ('a') to a blob (X'01')"),
        ),
        (
            "real_last",
            "INTEGER",
            "1, 2, 3.5",
            Some("from an integer (1) to a real (3.5)"),
        ),
        ("real_between", "INTEGER", "1, 2.5, 3, 4", None),
    ];
    let runtime = quick_runtime(&db.store).await;
    for (table, declared, keys, refusal) in tables {
        db.execute(&format!(
            "CREATE TABLE {table} (k {declared} NOT NULL UNIQUE, hits INTEGER NOT NULL DEFAULT 0)"
        ))
        .await;
        let rows: Vec<String> = keys.split(", ").map(|k| format!("({k})")).collect();
        db.execute(&format!(
            "INSERT INTO {table} (k) VALUES {}",
            rows.join(", ")
        ))
        .await;
        let enqueued = enqueue_small_update(&db, table, "k", "hits = hits + 1").await;
        match refusal {
            Some(values) => {
                let error = enqueued.expect_err(table);
                assert!(error.is_bad_input(), "{table}: {error}");
                assert!(error.to_string().contains(values), "{table}: {error}");
            }
            None => {
                let id = enqueued.unwrap_or_else(|e| panic!("{table}: {e}")).id;
                let record = runtime.wait(id, Duration::from_secs(60)).await.unwrap();
                assert_eq!(record.state.status.as_str(), "failed", "{table}");
                let error = record.state.last_error.unwrap_or_default();
                assert!(
                    error.contains("`k` has type INTEGER (a row holds a REAL value)"),
                    "{table}: {error}"
                );
            }
        }
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table} WHERE hits <> 0"))
                .await,
            0,
            "{table}: no row changed"
        );
    }
    runtime.shutdown().await.unwrap();
    db.cleanup().await;
}

/// A key the database writes itself when a row is updated — generated
/// from a column the SET writes, or MySQL's `ON UPDATE CURRENT_TIMESTAMP` —
/// would carry each changed row into a range not yet run, to be changed
/// again: refused at enqueue, nothing written, no row changed.
async fn a_key_the_database_writes_on_update_is_refused(db: &TestDb) {
    // MariaDB lets no generated column be NOT NULL, so its `derived` is
    // refused for NULLs too; its `touched` is the case that only this
    // check refuses.
    let generated = match db.backend {
        "postgres" | "sqlite" => "BIGINT GENERATED ALWAYS AS (x * 10) STORED NOT NULL",
        _ => "BIGINT AS (x * 10) STORED",
    };
    db.execute(&format!(
        "CREATE TABLE derived (id BIGINT PRIMARY KEY, x BIGINT NOT NULL, \
         hits BIGINT NOT NULL DEFAULT 0, k {generated})"
    ))
    .await;
    db.execute("CREATE UNIQUE INDEX derived_k ON derived (k)")
        .await;
    db.insert_series("derived (id, x)", "g, g", 20, "").await;
    let mut cases = vec![(
        "derived",
        "k",
        "hits = hits + 1, x = x + 100",
        "is generated",
    )];
    if db.backend == "mysql" {
        db.execute(
            "CREATE TABLE touched (id BIGINT PRIMARY KEY, hits BIGINT NOT NULL DEFAULT 0, \
             ts TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6) ON UPDATE CURRENT_TIMESTAMP(6), \
             UNIQUE KEY (ts))",
        )
        .await;
        db.insert_series(
            "touched (id, ts)",
            "g, TIMESTAMP('2020-01-01') + INTERVAL g SECOND",
            20,
            "",
        )
        .await;
        cases.insert(
            0,
            ("touched", "ts", "hits = hits + 1", "is set by the database"),
        );
    }
    for (table, key, set, why) in cases {
        let operations = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
        let enqueued = enqueue_small_update(db, table, key, set).await;
        let error = enqueued.expect_err(table);
        assert!(error.is_bad_input(), "{table}: {error}");
        assert!(
            error.to_string().contains(&format!("column `{key}` {why}")),
            "{table}: {error}"
        );
        assert_eq!(
            db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
            operations,
            "{table}: refused, yet written"
        );
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table} WHERE hits <> 0"))
                .await,
            0,
            "{table}: no row changed"
        );
    }
}

/// On MySQL an operator checks a `--where` in the mysql client, whose
/// sessions read `||` as `OR` and `"done"` as a string. Sluice's sessions
/// run with `ANSI_QUOTES` (its own SQL quotes names with `"`): `||` must
/// still be `OR` there (sqlx's default `PIPES_AS_CONCAT` made `grp = 1 ||
/// grp = 0` true of every row), and a double-quoted name, a column to
/// Sluice but a string to the client, is refused with nothing written.
async fn operator_sql_means_on_mysql_what_it_means_in_the_mysql_client(db: &TestDb) {
    db.execute(
        "CREATE TABLE tickets (id BIGINT PRIMARY KEY, grp BIGINT NOT NULL, \
         status VARCHAR(20) NOT NULL, done VARCHAR(20) NOT NULL, hits BIGINT NOT NULL DEFAULT 0)",
    )
    .await;
    db.insert_series(
        "tickets (id, grp, status, done)",
        "g, g % 10, IF(g % 2 = 0, 'done', 'open'), 'open'",
        100,
        "",
    )
    .await;
    let update = |condition: &str, set: &str| {
        sluice(
            db,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "tickets",
                "--set",
                set,
                "--where",
                condition,
                "--batch-size",
                "7",
                "--sub-batch-size",
                "3",
            ],
        )
    };
    succeeded(&update("grp = 1 || grp = 0", "hits = hits + 1"));
    succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM tickets WHERE hits = 1 AND grp IN (0, 1)")
            .await,
        20,
        "every row the mysql client's reading selects is changed once"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM tickets WHERE hits <> 0 AND grp NOT IN (0, 1)")
            .await,
        0,
        "no other row is changed"
    );

    let operations = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
    for (condition, set) in [
        ("status = \"done\"", "hits = hits + 1"),
        ("grp = 2", "status = \"done\""),
        (
            "status = 'a\\' OR grp = 3 OR status = 'b'",
            "hits = hits + 1",
        ),
    ] {
        let refused = update(condition, set);
        assert_eq!(refused.status.code(), Some(2), "{condition} / {set}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains("ANSI_QUOTES") || said.contains("backslash"),
            "{condition} / {set}: {said}"
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        operations,
        "refused, yet written"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM tickets WHERE hits > 1 OR status <> IF(id % 2 = 0, 'done', 'open')")
            .await,
        0,
        "no row changed by a refused operation"
    );
}

/// MySQL's unsigned integers — a `BIGINT UNSIGNED` key (`SERIAL`, most
/// frameworks' ids), `INT UNSIGNED` epoch seconds — batch as signed ones
/// do: each row in scope changed once and no other, from key 0 to the
/// largest a cursor holds (2^63 - 1). A key above that is refused at
/// enqueue, naming the value, and nothing is written.
async fn unsigned_integers_batch_on_mysql_as_signed_ones_do(db: &TestDb) {
    for table in ["by_update", "by_time", "by_epoch", "by_archive"] {
        create_unsigned_table(db, table, "9223372036854775807").await;
    }
    let enqueue = |args: &[&str]| enqueue_in_batches(db, args, "7", "3");
    enqueue(&[
        "update-in-batches",
        "--table",
        "by_update",
        "--set",
        "hits = hits + 1",
        "--where",
        "id % 3 = 0",
    ]);
    for (table, column) in [("by_time", "at"), ("by_epoch", "seen")] {
        enqueue(&[
            "delete-aged-rows",
            "--table",
            table,
            "--column",
            column,
            "--older-than",
            "1d",
        ]);
    }
    enqueue(&[
        "archive-rows",
        "--table",
        "by_archive",
        "--into",
        "by_archive_old",
        "--column",
        "at",
        "--older-than",
        "1d",
    ]);
    succeeded(&sluice(db, &["run", "--until-idle"]));

    // Ids 0, 3, …, 198 (2^63 - 1 leaves 1 divided by 3).
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM by_update WHERE hits = 1 AND id % 3 = 0")
            .await,
        67,
        "each row in scope changed"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM by_update WHERE hits <> IF(id % 3 = 0, 1, 0)")
            .await,
        0,
        "no row changed twice or outside the scope"
    );
    for table in ["by_time", "by_epoch", "by_archive"] {
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await,
            100,
            "{table}: the aged rows gone"
        );
        assert_eq!(
            db.scalar(&format!(
                "SELECT COUNT(*) FROM {table} WHERE at < '2099-01-01'"
            ))
            .await,
            0,
            "{table}: only the aged rows gone"
        );
    }
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM by_archive_old WHERE at < '2099-01-01' \
             AND id NOT IN (SELECT id FROM by_archive)"
        )
        .await,
        101,
        "every aged row archived, none kept twice"
    );

    // A key above 2^63 - 1: refused before anything is written.
    create_unsigned_table(db, "beyond", "18446744073709551615").await;
    let operations = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
    for kind in [
        &[
            "update-in-batches",
            "--table",
            "beyond",
            "--set",
            "hits = 1",
        ][..],
        &[
            "delete-aged-rows",
            "--table",
            "beyond",
            "--column",
            "at",
            "--older-than",
            "1d",
        ],
    ] {
        let args: Vec<&str> = ["enqueue"].iter().chain(kind).copied().collect();
        let refused = sluice(db, &args);
        let said = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{kind:?}: {said}");
        assert_eq!(said.lines().count(), 1, "{said}");
        assert!(
            said.contains("18446744073709551615") && said.contains("above 9223372036854775807"),
            "{said}"
        );
    }
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
        operations,
        "refused, yet written"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM beyond WHERE hits <> 0")
            .await,
        0,
        "no row changed by a refused operation"
    );
}

/// Enqueues `args` (a kind and its arguments) through the command line in
/// batches of `batch` rows and sub-batches of `sub`; panics unless accepted.
fn enqueue_in_batches(db: &TestDb, args: &[&str], batch: &str, sub: &str) {
    let mut all = vec!["enqueue"];
    all.extend_from_slice(args);
    all.extend(["--batch-size", batch, "--sub-batch-size", sub]);
    succeeded(&sluice(db, &all));
}

/// `table` with unsigned columns: keys 0 to 199 and `largest`; the even
/// keys and `largest` aged (2020, by `at` and by `seen` in epoch seconds),
/// the odd ones young (2099).
async fn create_unsigned_table(db: &TestDb, table: &str, largest: &str) {
    db.execute(&format!(
        "CREATE TABLE {table} (id BIGINT UNSIGNED PRIMARY KEY, seen INT UNSIGNED NOT NULL, \
         at DATETIME NOT NULL, hits INT UNSIGNED NOT NULL DEFAULT 0, KEY (seen), KEY (at))"
    ))
    .await;
    db.insert_series(
        &format!("{table} (id, seen, at)"),
        "g - 1, IF(g % 2 = 1, 1577836800, 4070908800) + g, \
         IF(g % 2 = 1, TIMESTAMP '2020-01-01 00:00:00', TIMESTAMP '2099-01-01 00:00:00') \
         + INTERVAL g SECOND",
        200,
        "",
    )
    .await;
    db.execute(&format!(
        "INSERT INTO {table} (id, seen, at) VALUES ({largest}, 1577836800, '2020-01-01')"
    ))
    .await;
}

/// Enqueues `update-in-batches` of `set` over `table` by `key`, in batches
/// of 2 rows and sub-batches of 1.
async fn enqueue_small_update(
    db: &TestDb,
    table: &str,
    key: &str,
    set: &str,
) -> Result<sluice_store::Enqueued, sluice_operations::OperationError> {
    let options = EnqueueOptions {
        batch_size: 2,
        sub_batch_size: 1,
        ..EnqueueOptions::default()
    };
    sluice_operations::enqueue(
        &db.store,
        &Registry::with_builtins(),
        "update-in-batches",
        &json!({"table": table, "key": key, "set": set}),
        &options,
    )
    .await
}

/// `archive-rows` with a scope that answers otherwise each time it is
/// asked (`random()`): on SQLite and MySQL a sub-batch copies its rows and
/// then deletes them in a second statement, which must delete the rows it
/// copied, not the rows the scope names the second time. Every row ends in
/// exactly one of the two tables.
async fn an_archive_whose_scope_answers_otherwise_each_time_loses_no_row(db: &TestDb) {
    db.execute("CREATE TABLE moving (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)")
        .await;
    db.insert_series("moving (id, v)", "g, g", 2_000, "").await;
    let random = match db.backend {
        "postgres" => "random() < 0.5",
        "mysql" => "RAND() < 0.5",
        _ => "abs(random()) % 2 = 0",
    };
    let enqueue = [
        "enqueue",
        "archive-rows",
        "--table",
        "moving",
        "--into",
        "moved",
        "--where",
        random,
        "--batch-size",
        "100",
        "--sub-batch-size",
        "10",
    ];
    succeeded(&sluice(db, &enqueue));
    succeeded(&sluice(db, &["run", "--until-idle"]));
    let live = db.scalar("SELECT COUNT(*) FROM moving").await;
    let archived = db.scalar("SELECT COUNT(*) FROM moved").await;
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM moving JOIN moved ON moved.id = moving.id")
            .await,
        0,
        "no row in both tables"
    );
    assert_eq!(
        live + archived,
        2_000,
        "no row lost ({live} live, {archived} archived)"
    );
    assert!(archived > 0 && live > 0, "{live} live, {archived} archived");
}

/// One generated trial: a table, a key that is or is not unique, a scope
/// and a SET (or a delete of aged rows), and batch sizes.
#[derive(Debug, Clone)]
struct Trial {
    /// Per row: (key, group 0..4, age in days).
    rows: Vec<(i64, i64, i64)>,
    /// The key is declared the primary key (else only a plain index).
    unique: bool,
    /// `update-in-batches` (else `delete-aged-rows --older-than 90d`).
    update: bool,
    /// The scope of an update: `grp <= scope` (none when negative).
    scope: i64,
    /// The update's SET also writes the key.
    set_writes_key: bool,
    batch_size: i64,
    sub_batch_size: i64,
}

fn trial() -> impl Strategy<Value = Trial> {
    (
        prop::collection::vec(
            (0i64..400, 0i64..4, prop_oneof![0i64..89, 91i64..300]),
            1..120,
        ),
        any::<bool>(),
        any::<bool>(),
        -1i64..4,
        prop::bool::weighted(0.2),
        1i64..60,
        1i64..25,
    )
        .prop_map(
            |(mut rows, unique, update, scope, set_writes_key, batch_size, sub_batch_size)| {
                if unique {
                    rows.sort_by_key(|r| r.0);
                    rows.dedup_by_key(|r| r.0);
                } else if rows.len() > 1 {
                    // At least one key shared by two rows.
                    rows[1].0 = rows[0].0;
                }
                Trial {
                    rows,
                    unique,
                    update,
                    scope,
                    set_writes_key,
                    batch_size,
                    sub_batch_size,
                }
            },
        )
}

/// Settings that make a trial quick.
fn quick() -> RuntimeConfig {
    RuntimeConfig {
        node: "safety".into(),
        lease_ttl: Duration::from_secs(3),
        reconcile_interval: Duration::from_millis(20),
        control_interval: Duration::from_millis(50),
        health_interval: Duration::from_millis(20),
        retry_base: Duration::from_millis(10),
        retry_cap: Duration::from_millis(50),
        min_batch_size: 1,
        ..RuntimeConfig::default()
    }
}

/// A runtime on `store` with [`quick`] settings and no built-in health
/// indicators.
async fn quick_runtime(store: &sluice_store::Store) -> sluice_runtime::Runtime {
    RuntimeBuilder::with_store(store.clone())
        .config(quick())
        .without_builtin_indicators()
        .start()
        .await
        .unwrap()
}

/// `table (id, tag, grp, hits, created_at)`: `tag` names each row whatever
/// its key; `created_at` is `age` days (and an hour) before now.
async fn create_trial_table(db: &TestDb, table: &str, trial: &Trial) {
    let key = if trial.unique { "PRIMARY KEY" } else { "" };
    let time = db.time_type();
    db.execute(&format!(
        "CREATE TABLE {table} (id BIGINT NOT NULL {key}, tag BIGINT NOT NULL, grp BIGINT NOT NULL, \
         hits BIGINT NOT NULL DEFAULT 0, created_at {time} NOT NULL)"
    ))
    .await;
    if !trial.unique {
        db.execute(&format!("CREATE INDEX {table}_id ON {table} (id)"))
            .await;
    }
    db.execute(&format!(
        "CREATE INDEX {table}_created ON {table} (created_at)"
    ))
    .await;
    let now = chrono::Utc::now();
    for chunk in trial.rows.chunks(200).enumerate() {
        let (offset, rows) = chunk;
        let values: Vec<String> = rows
            .iter()
            .enumerate()
            .map(|(i, (id, grp, age))| {
                let at = now - chrono::Duration::days(*age) - chrono::Duration::hours(1);
                let at = db.time_literal(at);
                format!("({id}, {}, {grp}, {at})", offset * 200 + i)
            })
            .collect();
        db.execute(&format!(
            "INSERT INTO {table} (id, tag, grp, created_at) VALUES {}",
            values.join(", ")
        ))
        .await;
    }
}

/// Every row as (tag, hits), by tag.
async fn rows_by_tag(db: &TestDb, table: &str) -> Vec<(i64, i64)> {
    let sql = format!("SELECT tag, hits FROM {table} ORDER BY tag");
    match db.store.backend() {
        sluice_target::Backend::Sqlite(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap(),
        sluice_target::Backend::Postgres(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap(),
        sluice_target::Backend::MySql(pool) => sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap(),
    }
}

/// The invariant, over generated trials: an accepted operation changes
/// exactly the rows in its scope, each once, and no other row; a refused
/// one (a key that is not unique, a SET that writes the key) changes
/// nothing and writes no operation.
async fn generated_operations_change_exactly_the_rows_in_scope_each_once(db: &TestDb) {
    let runtime = quick_runtime(&db.store).await;
    let registry = Registry::with_builtins();
    let mut runner = TestRunner::new(Config::with_cases(24));
    let strategy = trial();
    for case in 0..24 {
        let trial = strategy.new_tree(&mut runner).unwrap().current();
        let table = format!("trial_{case}");
        create_trial_table(db, &table, &trial).await;
        let before = rows_by_tag(db, &table).await;
        let operations = db.scalar("SELECT COUNT(*) FROM sluice_operations").await;
        let (kind, arguments) = if trial.update {
            let set = if trial.set_writes_key {
                "hits = hits + 1, id = id + 1000"
            } else {
                "hits = hits + 1"
            };
            let mut arguments = json!({"table": table, "key": "id", "set": set});
            if trial.scope >= 0 {
                arguments["where"] = json!(format!("grp <= {}", trial.scope));
            }
            ("update-in-batches", arguments)
        } else {
            let stored =
                json!({"table": table, "column": "created_at", "key": "id", "older_than": "90d"});
            let resolved = registry
                .arguments_at("delete-aged-rows", &db.store, stored, chrono::Utc::now())
                .await
                .unwrap();
            ("delete-aged-rows", resolved)
        };
        let options = EnqueueOptions {
            batch_size: trial.batch_size,
            sub_batch_size: trial.sub_batch_size,
            force: true,
            ..EnqueueOptions::default()
        };
        let enqueued =
            sluice_operations::enqueue(&db.store, &registry, kind, &arguments, &options).await;
        let refusable = !trial.unique || (trial.update && trial.set_writes_key);
        if refusable {
            let error = enqueued.expect_err(&format!("{trial:?} must be refused"));
            assert!(error.is_bad_input(), "{trial:?}: {error}");
            assert_eq!(
                rows_by_tag(db, &table).await,
                before,
                "{trial:?}: refused, yet changed"
            );
            assert_eq!(
                db.scalar("SELECT COUNT(*) FROM sluice_operations").await,
                operations,
                "{trial:?}: refused, yet written"
            );
            continue;
        }
        let id = enqueued.unwrap_or_else(|e| panic!("{trial:?}: {e}")).id;
        runtime.run_until_idle().await.unwrap();
        let record = db.store.operation(id).await.unwrap();
        assert_eq!(record.state.status.as_str(), "finished", "{trial:?}");
        let after = rows_by_tag(db, &table).await;
        if trial.update {
            let in_scope = |grp: i64| trial.scope < 0 || grp <= trial.scope;
            let expected: Vec<(i64, i64)> = trial
                .rows
                .iter()
                .enumerate()
                .map(|(tag, (_, grp, _))| (tag as i64, i64::from(in_scope(*grp))))
                .collect();
            assert_eq!(after, expected, "{trial:?}");
            let changed = expected.iter().filter(|(_, hits)| *hits == 1).count();
            assert_eq!(record.state.rows_done, changed as i64, "{trial:?}");
        } else {
            let expected: Vec<(i64, i64)> = trial
                .rows
                .iter()
                .enumerate()
                .filter(|(_, (_, _, age))| *age < 90)
                .map(|(tag, _)| (tag as i64, 0))
                .collect();
            assert_eq!(after, expected, "{trial:?}");
        }
    }
    runtime.shutdown().await.unwrap();
}

/// `archive-rows` of a table with a generated column creates its archive
/// with a plain column holding the values, and refuses an archive that
/// computes the column itself (an `INSERT` cannot give it one: every
/// sub-batch would fail), changing nothing.
async fn a_generated_column_is_archived_as_its_values(db: &TestDb) {
    let time = db.time_type();
    for table in ["priced", "computing_archive"] {
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, price INTEGER NOT NULL, \
             doubled INTEGER GENERATED ALWAYS AS (price * 2) STORED, created_at {time} NOT NULL)"
        ))
        .await;
    }
    db.execute("CREATE INDEX priced_created_at ON priced (created_at)")
        .await;
    let rows: Vec<String> = aged_then_young(db, 20, 30)
        .map(|(id, at)| format!("({id}, {id}, {at})"))
        .collect();
    db.execute(&format!(
        "INSERT INTO priced (id, price, created_at) VALUES {}",
        rows.join(", ")
    ))
    .await;
    let archive = |into: &str| {
        sluice(
            db,
            &[
                "enqueue",
                "archive-rows",
                "--table",
                "priced",
                "--into",
                into,
                "--column",
                "created_at",
                "--older-than",
                "90d",
            ],
        )
    };
    let refused = archive("computing_archive");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains("computes its column `doubled` itself"),
        "{said}"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);

    succeeded(&archive("priced_archive"));
    succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM priced_archive WHERE id <= 20 AND doubled = price * 2")
            .await,
        20,
        "every aged row archived with its generated value"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM priced_archive").await, 20);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM priced WHERE id > 20").await,
        10,
        "the young rows stay"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM priced").await, 10);
}

/// `--older-than 90d` enqueued or fired on a machine whose clock runs a
/// year ahead of the database's (a drifted clock, a VM restored from a
/// snapshot) measures the age from the database's clock: the rows 30 days
/// old stay, where the machine's clock would have counted them aged.
async fn a_clock_running_ahead_of_the_database_ages_no_young_row(db: &TestDb) {
    let now = chrono::Utc::now();
    let time = db.time_type();
    db.execute(&format!(
        "CREATE TABLE stamped (id BIGINT PRIMARY KEY, created_at {time} NOT NULL)"
    ))
    .await;
    db.execute("CREATE INDEX stamped_created_at ON stamped (created_at)")
        .await;
    let rows: Vec<String> = aged_then_young(db, 20, 40)
        .map(|(id, at)| format!("({id}, {at})"))
        .collect();
    db.execute(&format!("INSERT INTO stamped VALUES {}", rows.join(", ")))
        .await;
    let runtime = quick_runtime(&db.store).await;
    let ahead = now + chrono::Duration::days(365);
    let id =
        enqueue_older_than_90_days(&db.store, "stamped", ahead, &EnqueueOptions::default()).await;
    let record = runtime.wait(id, Duration::from_secs(60)).await.unwrap();
    runtime.shutdown().await.unwrap();
    assert_eq!(record.state.status.as_str(), "finished");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM stamped WHERE id > 20")
            .await,
        20,
        "the rows 30 days old stay"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM stamped").await,
        20,
        "the rows 200 days old go"
    );
}

/// Ids 1 to `rows` with a time literal each: 200 days old up to `aged`,
/// 30 days old after.
fn aged_then_young(db: &TestDb, aged: i64, rows: i64) -> impl Iterator<Item = (i64, String)> {
    let now = chrono::Utc::now();
    (1..=rows).map(move |id| {
        let days = if id <= aged { 200 } else { 30 };
        (id, db.time_literal(now - chrono::Duration::days(days)))
    })
}

/// A text key under a collation that does not order by bytes — SQLite's
/// `NOCASE`, ICU's `en-US` on PostgreSQL, MySQL's default
/// `utf8mb4_general_ci`, where `apple` < `Banana` — is walked in that order:
/// each row changed once, one row a batch, none refused as out of order.
async fn a_text_key_is_walked_in_its_collation_s_order(db: &TestDb) {
    let collated = match db.backend {
        "postgres" => "TEXT COLLATE \"en-US-x-icu\"",
        "mysql" => "VARCHAR(40) COLLATE utf8mb4_general_ci",
        _ => "TEXT COLLATE NOCASE",
    };
    db.execute(&format!(
        "CREATE TABLE names (name {collated} NOT NULL PRIMARY KEY, hits INTEGER NOT NULL DEFAULT 0)"
    ))
    .await;
    let names = [
        "apple",
        "Banana",
        "cherry",
        "Date",
        "elder",
        "Fig",
        "grape",
        "Honeydew",
        "ice",
        "Jack",
        "kiwi",
        "Lemon",
        "mango",
        "Nectar ine",
        "o-range",
        "Papaya",
        "quince",
        "Zebra",
    ];
    let values: Vec<String> = names.iter().map(|n| format!("('{n}')")).collect();
    db.execute(&format!(
        "INSERT INTO names (name) VALUES {}",
        values.join(", ")
    ))
    .await;
    succeeded(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "names",
            "--key",
            "name",
            "--set",
            "hits = hits + 1",
            "--batch-size",
            "1",
            "--sub-batch-size",
            "1",
        ],
    ));
    succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM names WHERE hits = 1").await,
        names.len() as i64,
        "each row changed once"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM names WHERE hits <> 1")
            .await,
        0
    );
}

/// `delete-aged-rows` walks its time column (on MySQL each sub-batch seeks
/// past where the last one stopped): rows written behind that point while
/// it runs, older than any it has reached, are still deleted, each once,
/// and no young row is.
async fn rows_written_behind_a_running_delete_are_still_deleted_each_once(db: &TestDb) {
    let time = db.time_type();
    db.execute(&format!(
        "CREATE TABLE behind (id BIGINT PRIMARY KEY, created_at {time} NOT NULL)"
    ))
    .await;
    db.execute("CREATE INDEX behind_created ON behind (created_at)")
        .await;
    let now = chrono::Utc::now();
    let insert = |ids: std::ops::Range<i64>, age_days: &dyn Fn(i64) -> i64| {
        let values: Vec<String> = ids
            .map(|id| {
                let at = db.time_literal(now - chrono::Duration::days(age_days(id)));
                format!("({id}, {at})")
            })
            .collect();
        format!(
            "INSERT INTO behind (id, created_at) VALUES {}",
            values.join(", ")
        )
    };
    // 600 aged rows, two to a day (ties), oldest first; 20 young ones.
    db.execute(&insert(1..601, &|id| 800 - id / 2)).await;
    db.execute(&insert(601..621, &|id| id - 600)).await;
    let runtime = quick_runtime(&db.store).await;
    let options = EnqueueOptions {
        batch_size: 100,
        sub_batch_size: 10,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    let id = enqueue_older_than_90_days(&db.store, "behind", now, &options).await;
    until("the delete is under way", || async {
        db.store.operation(id).await.unwrap().state.rows_done >= 200
    })
    .await;
    runtime
        .pause(&Selection::One(id), "rows go in behind it")
        .await
        .unwrap();
    until("the delete is paused", || async {
        db.store.operation(id).await.unwrap().state.status.as_str() == "paused"
    })
    .await;
    // Older than every row: behind wherever the walk stopped.
    db.execute(&insert(1_001..1_016, &|id| 2_000 + id)).await;
    runtime.resume(&Selection::One(id)).await.unwrap();
    let record = runtime.wait(id, Duration::from_secs(90)).await.unwrap();
    runtime.shutdown().await.unwrap();
    assert_eq!(record.state.status.as_str(), "finished");
    assert_eq!(record.state.rows_done, 615, "each aged row deleted once");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM behind").await, 20);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM behind WHERE id > 600 AND id <= 620")
            .await,
        20,
        "every young row stays"
    );
}

/// Defence in depth: even over a key that is not unique (which enqueue
/// refuses), a loop's statement repeats the scope on the rows it reaches
/// by key, so a young row sharing an aged row's key is not deleted.
async fn a_loop_statement_never_reaches_a_row_outside_its_scope_through_a_shared_key(db: &TestDb) {
    db.execute("CREATE TABLE shared (id BIGINT NOT NULL, age BIGINT NOT NULL)")
        .await;
    // Ten keys each held by an aged row (age 100) and a young one (age 1).
    for id in 1..=10 {
        db.execute(&format!(
            "INSERT INTO shared (id, age) VALUES ({id}, 100), ({id}, 1)"
        ))
        .await;
    }
    let shape = Shape::loop_until_done("shared", "id")
        .unwrap()
        .scope(Filter::new().gt("age", 90_i64))
        .unwrap();
    let Walk::Loop { key } = shape.strategy() else {
        unreachable!()
    };
    let pick = LoopPick::for_target(db.store.target());
    let delete = loop_rows(
        &shape,
        key,
        100,
        pick,
        None,
        Statement::new("DELETE FROM ").ident(shape.table()),
    );
    assert_eq!(db.store.target().execute(&delete).await.unwrap(), 10);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM shared WHERE age = 1").await,
        10
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM shared").await, 10);
}

/// Uniqueness holds on what was asked: ten `enqueue delete-aged-rows
/// --older-than 90d` started at once (each resolving its own cutoff) make
/// one operation, and every process is told its id.
async fn identical_enqueues_from_ten_processes_at_once_make_one_operation(db: &TestDb) {
    db.execute(&format!(
        "CREATE TABLE aged (id BIGINT PRIMARY KEY, created_at {} NOT NULL)",
        db.time_type()
    ))
    .await;
    db.execute("CREATE INDEX aged_created ON aged (created_at)")
        .await;
    let at = db.time_literal("2020-01-01T00:00:00Z".parse().unwrap());
    db.execute(&format!(
        "INSERT INTO aged (id, created_at) VALUES (1, {at})"
    ))
    .await;
    let args = [
        "enqueue",
        "delete-aged-rows",
        "--table",
        "aged",
        "--column",
        "created_at",
        "--older-than",
        "90d",
        "--json",
    ];
    let outputs: Vec<std::process::Output> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..10).map(|_| scope.spawn(|| sluice(db, &args))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut ids = Vec::new();
    for output in &outputs {
        succeeded(output);
        ids.push(common::json(output)["id"].as_i64().unwrap());
    }
    ids.dedup();
    assert_eq!(ids.len(), 1, "ten identical enqueues made {ids:?}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 1);
    // The same age written another way is the same request.
    let mut same = args.to_vec();
    same[7] = "2160h";
    let output = sluice(db, &same);
    succeeded(&output);
    assert_eq!(common::json(&output)["id"].as_i64(), Some(ids[0]));
    // A different age is a different request.
    let mut other = args.to_vec();
    other[7] = "30d";
    let output = sluice(db, &other);
    succeeded(&output);
    assert_ne!(common::json(&output)["id"].as_i64(), Some(ids[0]));
}

/// A database that refuses a sub-batch's writes for a while (triggers
/// raising PostgreSQL's read-only-transaction error, as a standby or
/// `default_transaction_read_only` would, on the target table and the
/// sub-batch's record) is waited out: though Sluice could still record a
/// verdict (its batch and operation tables stay writable), the operation is
/// not failed, and once writes are allowed again it finishes with every row
/// changed once.
async fn a_store_that_refuses_writes_is_waited_out_and_the_operation_finishes(db: &TestDb) {
    common::create_counted_items(db, 400).await;
    let runtime = RuntimeBuilder::with_store(db.store.clone())
        .config(RuntimeConfig {
            max_attempts: 2,
            restart_budget: 1,
            ..quick()
        })
        .without_builtin_indicators()
        .start()
        .await
        .unwrap();
    let options = EnqueueOptions {
        batch_size: 20,
        sub_batch_size: 5,
        pause: Duration::from_millis(5),
        ..EnqueueOptions::default()
    };
    let enqueued = sluice_operations::enqueue(
        &db.store,
        &Registry::with_builtins(),
        "update-in-batches",
        &json!({"table": "items", "key": "id", "set": "counter = counter + 1", "where": "grp = 1"}),
        &options,
    )
    .await
    .unwrap();
    common::until_items_changed(db, 20).await;
    // A sequence counts the refusals: its increments outlive the rollback.
    db.execute("CREATE SEQUENCE refusals").await;
    db.execute(
        "CREATE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM nextval('refusals'); \
         RAISE EXCEPTION 'the store is read-only for now' USING ERRCODE = '25006'; END $$",
    )
    .await;
    db.execute(
        "CREATE TRIGGER refuse_writes BEFORE INSERT OR UPDATE ON items \
         FOR EACH ROW EXECUTE FUNCTION refuse_writes()",
    )
    .await;
    // Far more refusals than the attempts and restarts allowed (two each),
    // or a verdict.
    let failed = format!(
        "SELECT CAST(CASE status WHEN 'failed' THEN 1 ELSE 0 END AS BIGINT) FROM sluice_operations WHERE id = {}",
        enqueued.id
    );
    common::until("twenty refusals or a failed operation", || async {
        db.scalar("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM refusals")
            .await
            >= 20
            || db.scalar(&failed).await == 1
    })
    .await;
    assert_eq!(
        db.scalar(&failed).await,
        0,
        "the operation was failed for the store's fault"
    );
    db.execute("DROP TRIGGER refuse_writes ON items").await;
    runtime.run_until_idle().await.unwrap();
    let record = db.store.operation(enqueued.id).await.unwrap();
    assert_eq!(record.state.status.as_str(), "finished");
    common::assert_group_one_changed_once(db).await;
    runtime.shutdown().await.unwrap();
}

/// The lock-wait indicator finds its tables by their quoted names: a
/// session waiting for a lock on `"rp_LockMe"` or on `"other"."Tab"` stops
/// the operations on them (an unquoted look-up folds the case and finds
/// nothing, and would report `normal` for as long as the lock is held).
async fn lock_waits_are_seen_on_mixed_case_and_schema_qualified_tables(db: &TestDb) {
    use sluice_runtime::HealthIndicator;
    use sluice_runtime::health::{HealthContext, Scope};
    let sluice_target::Backend::Postgres(pool) = db.store.backend() else {
        unreachable!("a PostgreSQL test")
    };
    let schema: String = sqlx::query_scalar("SELECT current_schema()::text")
        .fetch_one(pool)
        .await
        .unwrap();
    let other = format!("{schema}_other");
    db.execute("CREATE TABLE \"rp_LockMe\" (id BIGINT PRIMARY KEY)")
        .await;
    db.execute(&format!("CREATE SCHEMA {other}")).await;
    db.execute(&format!(
        "CREATE TABLE {other}.\"Tab\" (id BIGINT PRIMARY KEY)"
    ))
    .await;
    // One session holds each table's lock; another waits for it.
    let mut holder = pool.begin().await.unwrap();
    for table in ["\"rp_LockMe\"".to_owned(), format!("{other}.\"Tab\"")] {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
        )))
        .execute(&mut *holder)
        .await
        .unwrap();
    }
    let waiters: Vec<_> = ["\"rp_LockMe\"".to_owned(), format!("{other}.\"Tab\"")]
        .into_iter()
        .map(|table| {
            let pool = pool.clone();
            tokio::spawn(async move {
                sqlx::query(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
                    .execute(&pool)
                    .await
            })
        })
        .collect();
    let context = HealthContext {
        store: db.store.clone(),
        tables: vec!["rp_LockMe".into(), format!("{other}.Tab")],
        operations: Vec::new(),
    };
    let indicator = sluice_runtime::indicators::TableActivity::new();
    common::until("both waits to be read as stops", || async {
        let readings = indicator.check(&context).await.unwrap();
        let stopped: Vec<&Scope> = readings
            .iter()
            .filter(|r| matches!(r.signal, sluice_runtime::Signal::Stop { .. }))
            .map(|r| &r.scope)
            .collect();
        stopped.contains(&&Scope::Table("rp_LockMe".into()))
            && stopped.contains(&&Scope::Table(format!("{other}.Tab")))
    })
    .await;
    holder.rollback().await.unwrap();
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
    db.execute(&format!("DROP SCHEMA {other} CASCADE")).await;
}

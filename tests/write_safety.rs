//! Every table an operation writes rolls back with its sub-batch, and an
//! archive table holds exactly the rows copied into it: refusals at
//! enqueue and at the start of a run, against real databases.

mod common;

use common::{TestDb, json, sluice, succeeded};

for_each_backend!(
    a_plan_of_a_table_with_triggers_changes_nothing_anywhere,
    an_archive_whose_key_compares_in_another_collation_is_refused,
    a_created_archive_compares_its_key_as_the_live_table_does,
);

mysql_only!(
    a_trigger_writing_a_myisam_table_is_refused_naming_both,
    an_existing_myisam_archive_is_refused,
    a_table_converted_to_myisam_after_enqueue_fails_the_run_unchanged,
);

postgres_only!(
    a_foreign_table_is_refused_as_a_target_and_as_an_archive,
    an_archive_created_for_a_store_in_its_own_schema_goes_beside_the_live_table,
    a_plan_never_calls_a_function_that_may_write,
);

/// Runs `sluice` with `args`, expects it refused as bad input (exit 2)
/// with `says` in its one line, and nothing enqueued.
async fn refused(db: &TestDb, args: &[&str], says: &str) {
    let output = sluice(db, args);
    let message = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {message}");
    assert!(message.contains(says), "{args:?}: {message}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
}

/// `sluice enqueue archive-rows --table events --into events_archive`
/// with `extra` options.
fn archive_events(extra: &[&'static str]) -> Vec<&'static str> {
    let mut args = vec![
        "enqueue",
        "archive-rows",
        "--table",
        "events",
        "--into",
        "events_archive",
    ];
    args.extend_from_slice(extra);
    args
}

/// `events(id, code, grp)` with `rows` rows, `code` in `collation` (per
/// backend: how a case-insensitive text is declared there) and mixed case.
async fn create_coded_events(db: &TestDb, rows: i64) {
    let code = match db.backend {
        "sqlite" => "TEXT COLLATE NOCASE",
        "postgres" => "TEXT",
        _ => "VARCHAR(32) COLLATE utf8mb4_general_ci",
    };
    create_coded(db, "events", code).await;
    let values: Vec<String> = (1..=rows)
        .map(|i| {
            let code = if i % 2 == 0 {
                format!("Code{i:04}")
            } else {
                format!("code{i:04}")
            };
            format!("({i}, '{code}', {})", i % 3)
        })
        .collect();
    db.execute(&format!("INSERT INTO events VALUES {}", values.join(", ")))
        .await;
}

/// `table(id, code, grp)`, `code` unique of type `code`.
async fn create_coded(db: &TestDb, table: &str, code: &str) {
    db.execute(&format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, code {code} NOT NULL UNIQUE, \
         grp INTEGER NOT NULL)"
    ))
    .await;
}

/// An existing archive whose key compares otherwise than the live table's
/// (another collation) is refused at enqueue, naming the column and both
/// collations; nothing is written.
async fn an_archive_whose_key_compares_in_another_collation_is_refused(db: &TestDb) {
    create_coded_events(db, 10).await;
    let other = match db.backend {
        "sqlite" => "TEXT COLLATE RTRIM",
        "postgres" => "TEXT COLLATE \"C\"",
        _ => "VARCHAR(32) COLLATE utf8mb4_bin",
    };
    create_coded(db, "events_archive", other).await;
    refused(
        db,
        &archive_events(&["--key", "code"]),
        "column `code` compares in collation",
    )
    .await;
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 10);
}

/// An archive Sluice creates compares its key as the live table does, so an
/// archive walked by a text key under a case-insensitive collation moves
/// every row once (SQLite's `CREATE TABLE … AS` would drop the collation,
/// and the run failed halfway, "rows changed meanwhile").
async fn a_created_archive_compares_its_key_as_the_live_table_does(db: &TestDb) {
    create_coded_events(db, 300).await;
    let enqueued = json(&sluice(
        db,
        &[
            "enqueue",
            "archive-rows",
            "--table",
            "events",
            "--into",
            "events_archive",
            "--key",
            "code",
            "--where",
            "grp <> 1",
            "--batch-size",
            "40",
            "--sub-batch-size",
            "15",
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap().to_string();
    succeeded(&sluice(db, &["run", "--until-idle"]));
    let shown = json(&sluice(db, &["show", &id, "--json"]));
    assert_eq!(shown["status"], "finished", "{shown}");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events_archive").await, 200);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM events WHERE grp <> 1")
            .await,
        0
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM events").await, 100);
}

/// MySQL: a trigger of the target writing a MyISAM table would keep what a
/// rolled-back sub-batch wrote there: refused, naming the trigger, the
/// table and its engine; the same trigger writing an InnoDB table passes.
async fn a_trigger_writing_a_myisam_table_is_refused_naming_both(db: &TestDb) {
    create_coded_events(db, 10).await;
    db.execute("CREATE TABLE deleted_log (id BIGINT NOT NULL) ENGINE = MyISAM")
        .await;
    db.execute(
        "CREATE TRIGGER events_logged AFTER DELETE ON events FOR EACH ROW \
         INSERT INTO deleted_log VALUES (OLD.id)",
    )
    .await;
    let delete = [
        "enqueue",
        "update-in-batches",
        "--table",
        "events",
        "--set",
        "grp = grp + 10",
    ];
    let says = "trigger `events_logged` writes table `deleted_log`, whose MyISAM engine has no \
                transactions";
    refused(db, &delete, says).await;
    refused(db, &archive_events(&[]), says).await;
    assert_eq!(
        db.scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() \
             AND table_name = 'events_archive'"
        )
        .await,
        0,
        "the archive created for the refused enqueue is dropped again"
    );
    db.execute("ALTER TABLE deleted_log ENGINE = InnoDB").await;
    succeeded(&sluice(db, &delete));
}

/// MySQL: an existing archive table in MyISAM is refused, naming it.
async fn an_existing_myisam_archive_is_refused(db: &TestDb) {
    create_coded_events(db, 10).await;
    create_coded(
        db,
        "events_archive",
        "VARCHAR(32) COLLATE utf8mb4_general_ci",
    )
    .await;
    db.execute("ALTER TABLE events_archive ENGINE = MyISAM")
        .await;
    refused(
        db,
        &archive_events(&[]),
        "table `events_archive` uses the MyISAM engine",
    )
    .await;
}

/// MySQL: a table converted to MyISAM between enqueue and run fails the
/// operation at the start of the run, naming the engine, before any row
/// changes.
async fn a_table_converted_to_myisam_after_enqueue_fails_the_run_unchanged(db: &TestDb) {
    create_coded_events(db, 50).await;
    let enqueued = json(&sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "events",
            "--set",
            "grp = grp + 10",
            "--json",
        ],
    ));
    let id = enqueued["id"].as_i64().unwrap().to_string();
    let before = db.scalar("SELECT SUM(grp) FROM events").await;
    db.execute("ALTER TABLE events ENGINE = MyISAM").await;
    let _ = sluice(db, &["run", "--until-idle"]);
    let shown = json(&sluice(db, &["show", &id, "--json"]));
    assert_eq!(shown["status"], "failed", "{shown}");
    let error = shown["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("table `events` uses the MyISAM engine"),
        "{shown}"
    );
    assert_eq!(db.scalar("SELECT SUM(grp) FROM events").await, before);
}

/// PostgreSQL, Sluice's tables in a schema of their own (first on the
/// search path): `--into events_archive` is created beside `events`, in
/// the application's schema, so dropping Sluice's schema keeps the rows.
async fn an_archive_created_for_a_store_in_its_own_schema_goes_beside_the_live_table(db: &TestDb) {
    create_coded_events(db, 30).await;
    let app = db.schema.clone().unwrap();
    let own = format!("{app}_sluice");
    let with_schema = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--schema", own.as_str()]);
        sluice(db, &all)
    };
    succeeded(&with_schema(&[
        "enqueue",
        "archive-rows",
        "--table",
        "events",
        "--into",
        "events_archive",
        "--where",
        "grp = 0",
    ]));
    succeeded(&with_schema(&["run", "--until-idle"]));
    assert_eq!(
        db.scalar(&format!("SELECT COUNT(*) FROM {app}.events_archive"))
            .await,
        10
    );
    db.execute(&format!("DROP SCHEMA {own} CASCADE")).await;
    assert_eq!(
        db.scalar(&format!("SELECT COUNT(*) FROM {app}.events_archive"))
            .await,
        10,
        "the archived rows outlive Sluice's schema"
    );
}

/// `sluice plan` and `enqueue --dry-run` of work on a table whose trigger
/// writes an audit table with a counter (PostgreSQL: a sequence; MySQL:
/// `AUTO_INCREMENT`, neither rolled back) do not probe, say why naming the
/// trigger, report it, and leave every table, sequence and counter of the
/// database as it was.
async fn a_plan_of_a_table_with_triggers_changes_nothing_anywhere(db: &TestDb) {
    create_coded_events(db, 40).await;
    match db.backend {
        "sqlite" => {
            db.execute(
                "CREATE TABLE audit (n INTEGER PRIMARY KEY AUTOINCREMENT, id BIGINT NOT NULL)",
            )
            .await;
            db.execute(
                "CREATE TRIGGER events_audited AFTER UPDATE ON events \
                 BEGIN INSERT INTO audit (id) VALUES (OLD.id); END",
            )
            .await;
        }
        "postgres" => {
            db.execute("CREATE TABLE audit (n BIGSERIAL PRIMARY KEY, id BIGINT NOT NULL)")
                .await;
            db.execute(
                "CREATE FUNCTION audit_row() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN INSERT INTO audit (id) VALUES (OLD.id); RETURN NULL; END $$",
            )
            .await;
            db.execute(
                "CREATE TRIGGER events_audited AFTER UPDATE ON events \
                 FOR EACH ROW EXECUTE FUNCTION audit_row()",
            )
            .await;
        }
        _ => {
            db.execute(
                "CREATE TABLE audit (n BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT NOT NULL) \
                 ENGINE = InnoDB",
            )
            .await;
            db.execute(
                "CREATE TRIGGER events_audited AFTER UPDATE ON events FOR EACH ROW \
                 INSERT INTO audit (id) VALUES (OLD.id)",
            )
            .await;
        }
    }
    let before = snapshot(db).await;
    let update = [
        "update-in-batches",
        "--table",
        "events",
        "--set",
        "grp = grp + 1",
        "--sub-batch-size",
        "10",
    ];
    for head in [&["plan"][..], &["enqueue", "--dry-run"][..]] {
        let mut args = head.to_vec();
        if head[0] == "enqueue" {
            args = vec!["enqueue"];
            args.extend_from_slice(&update);
            args.push("--dry-run");
        } else {
            args.extend_from_slice(&update);
        }
        let output = sluice(db, &args);
        succeeded(&output);
        let printed = String::from_utf8_lossy(&output.stdout);
        assert!(printed.contains("nothing was changed"), "{printed}");
        assert!(
            printed.contains("probe           not run: the table has triggers (`events_audited`"),
            "{printed}"
        );
        assert!(
            printed.contains("triggers        `events_audited` on `events` (AFTER UPDATE)"),
            "{printed}"
        );
    }
    let planned = json(&sluice(
        db,
        &[&["plan"][..], &update[..], &["--json"][..]].concat(),
    ));
    assert_eq!(planned["probe"], serde_json::Value::Null, "{planned}");
    assert_eq!(planned["triggers"].as_array().map(Vec::len), Some(1));
    assert_eq!(snapshot(db).await, before, "plan changed the database");
}

/// PostgreSQL: a plan whose scope calls a function that may write (a
/// user's volatile function, a sequence's `nextval`) is refused before
/// anything reads the scope; one whose SET alone calls it plans without a
/// probe, saying why. Every table and sequence is as it was.
async fn a_plan_never_calls_a_function_that_may_write(db: &TestDb) {
    create_coded_events(db, 20).await;
    db.execute("CREATE SEQUENCE ticket").await;
    db.execute("CREATE TABLE calls (id BIGINT NOT NULL)").await;
    db.execute(
        "CREATE FUNCTION noted(i BIGINT) RETURNS boolean LANGUAGE plpgsql AS \
         $$ BEGIN INSERT INTO calls VALUES (i); RETURN true; END $$",
    )
    .await;
    let before = snapshot(db).await;
    for condition in ["noted(id)", "nextval('ticket') > 0"] {
        let output = sluice(
            db,
            &[
                "plan",
                "update-in-batches",
                "--table",
                "events",
                "--set",
                "grp = 7",
                "--where",
                condition,
            ],
        );
        assert_eq!(output.status.code(), Some(2), "{condition}: {output:?}");
        let message = String::from_utf8_lossy(&output.stderr);
        assert!(message.contains("its scope calls `"), "{message}");
    }
    let output = sluice(
        db,
        &[
            "plan",
            "update-in-batches",
            "--table",
            "events",
            "--set",
            "grp = nextval('ticket')",
        ],
    );
    succeeded(&output);
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        printed.contains("probe           not run: its statement calls `nextval`"),
        "{printed}"
    );
    assert_eq!(snapshot(db).await, before, "plan changed the database");
}

/// Every table's rows (as text, sorted), every sequence's position and
/// every table's `AUTO_INCREMENT` counter in the test's database.
async fn snapshot(db: &TestDb) -> Vec<String> {
    let tables: Vec<String> = match db.backend {
        "sqlite" => {
            db.texts("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
                .await
        }
        "postgres" => {
            db.texts(
                "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() \
                 ORDER BY 1",
            )
            .await
        }
        _ => {
            db.texts(
                "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
                 WHERE table_schema = DATABASE() AND table_type = 'BASE TABLE' ORDER BY 1",
            )
            .await
        }
    };
    let mut seen = Vec::new();
    for table in tables {
        let rows = match db.backend {
            "sqlite" => {
                let columns = db
                    .texts(&format!(
                        "SELECT 'quote(\"' || name || '\")' FROM pragma_table_info('{table}')"
                    ))
                    .await
                    .join(" || ',' || ");
                db.texts(&format!(
                    "SELECT {columns} AS r FROM \"{table}\" ORDER BY r"
                ))
                .await
            }
            "postgres" => {
                db.texts(&format!(
                    "SELECT t::text AS r FROM \"{table}\" t ORDER BY r"
                ))
                .await
            }
            _ => {
                let columns = db
                    .texts(&format!(
                        "SELECT CAST(CONCAT('QUOTE(`', column_name, '`)') AS CHAR) \
                         FROM information_schema.columns WHERE table_schema = DATABASE() \
                         AND table_name = '{table}' ORDER BY ordinal_position"
                    ))
                    .await
                    .join(", ");
                db.texts(&format!(
                    "SELECT CAST(CONCAT_WS(',', {columns}) AS CHAR) AS r FROM `{table}` ORDER BY r"
                ))
                .await
            }
        };
        seen.push(format!("{table}: {}", rows.join(" | ")));
    }
    match db.backend {
        "postgres" => seen.extend(
            db.texts(
                "SELECT sequencename::text || '=' || COALESCE(last_value::text, 'unused') \
                 FROM pg_sequences WHERE schemaname = current_schema() ORDER BY 1",
            )
            .await,
        ),
        "mysql" => seen.extend(
            db.texts(
                "SELECT CAST(CONCAT(table_name, ' next ', COALESCE(auto_increment, 0)) AS CHAR) \
                 FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY 1",
            )
            .await,
        ),
        _ => {}
    }
    seen
}

/// PostgreSQL: a foreign table's rows are written on another server and
/// committed apart from the local transaction: refused as a target, naming
/// the server, and as an archive (not a base table).
async fn a_foreign_table_is_refused_as_a_target_and_as_an_archive(db: &TestDb) {
    let schema = db.schema.clone().unwrap();
    create_coded_events(db, 10).await;
    // Another test creating it at the same moment may win the race.
    let _ = db
        .try_execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw SCHEMA public")
        .await;
    let server = format!("{schema}_loopback");
    db.execute(&format!(
        "CREATE SERVER {server} FOREIGN DATA WRAPPER postgres_fdw \
         OPTIONS (host '127.0.0.1', dbname 'test')"
    ))
    .await;
    db.execute(&format!(
        "CREATE FOREIGN TABLE remote_events (id BIGINT NOT NULL, code TEXT NOT NULL, \
         grp INTEGER NOT NULL) SERVER {server} OPTIONS (schema_name '{schema}', table_name 'events')"
    ))
    .await;
    let says =
        format!("is written through a foreign data wrapper (server {server}), which commits apart");
    refused(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "remote_events",
            "--set",
            "grp = grp + 1",
        ],
        &says,
    )
    .await;
    refused(
        db,
        &[
            "enqueue",
            "archive-rows",
            "--table",
            "events",
            "--into",
            "remote_events",
        ],
        "remote_events` is a view (or another kind of relation), not a table",
    )
    .await;
    db.execute(&format!("DROP SERVER {server} CASCADE")).await;
}

//! The bad-input matrix: every way a user can get input wrong, through the
//! command line and through the embedding API, on SQLite and PostgreSQL.
//! Each case names its exit code (or error) and message, and is followed by
//! proof that nothing changed: the store's tables and the target table are
//! exactly as before.

mod common;

use std::process::Output;

use common::{TestDb, sluice, sluice_on, succeeded};
use sluice_operations::{EnqueueOptions, NewOperation, OperationError};
use sluice_runtime::{RuntimeBuilder, RuntimeError, ScheduleError, ScheduleSpec, Selection};
use sluice_store::{Store, StoreError};
use sluice_target::DatabaseError;

for_each_backend!(
    the_command_line_refuses_bad_input_and_changes_nothing,
    the_embedding_api_refuses_bad_input_and_changes_nothing,
);

/// `items(id, grp, counter, created_at)`, 50 rows, indexed on `created_at`,
/// with one finished operation and one schedule already stored.
async fn set_up(db: &TestDb) {
    let time = db.time_type();
    db.execute(&format!(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, counter INTEGER NOT NULL DEFAULT 0, created_at {time} NOT NULL)"
    ))
    .await;
    let at = db.time_literal("2020-01-01T00:00:00Z".parse().unwrap());
    db.insert_series(
        "items (id, grp, created_at)",
        &format!("g, g % 2, {at}"),
        50,
        "",
    )
    .await;
    db.execute("CREATE INDEX items_created_at_idx ON items (created_at)")
        .await;
    // A view that cannot be deleted from (and proves no key).
    db.execute(
        "CREATE VIEW latest_per_group AS SELECT grp AS id, MAX(created_at) AS created_at \
         FROM items GROUP BY grp",
    )
    .await;
    // Keys that name no row for sure: shared, or possibly NULL.
    for (table, key) in [
        ("loose", "BIGINT NOT NULL"),
        ("nullable_key", "BIGINT UNIQUE"),
    ] {
        db.execute(&format!(
            "CREATE TABLE {table} (id {key}, created_at {time} NOT NULL)"
        ))
        .await;
        db.execute(&format!("CREATE INDEX {table}_id ON {table} (id)"))
            .await;
        db.execute(&format!(
            "CREATE INDEX {table}_created_at ON {table} (created_at)"
        ))
        .await;
    }
    // A column the database computes.
    db.execute(
        "CREATE TABLE doubled (id BIGINT PRIMARY KEY, n INTEGER NOT NULL, \
         twice INTEGER GENERATED ALWAYS AS (n * 2) STORED)",
    )
    .await;
    // Days since 1970 in an integer column: read as epoch seconds, every
    // row would be aged.
    db.execute("CREATE TABLE day_numbers (id BIGINT PRIMARY KEY, day INTEGER NOT NULL)")
        .await;
    db.insert_series("day_numbers (id, day)", "g, 20000 + g", 30, "")
        .await;
    db.execute("CREATE INDEX day_numbers_day ON day_numbers (day)")
        .await;
    // Milliseconds since 1970: read as epoch seconds, no row would ever be
    // aged (and the largest, a "never" sentinel, is allowed).
    db.execute("CREATE TABLE ms_numbers (id BIGINT PRIMARY KEY, at_ms BIGINT NOT NULL)")
        .await;
    db.insert_series("ms_numbers (id, at_ms)", "g, 1700000000000 + g", 30, "")
        .await;
    db.execute("INSERT INTO ms_numbers (id, at_ms) VALUES (31, 9223372036854775807)")
        .await;
    db.execute("CREATE INDEX ms_numbers_at_ms ON ms_numbers (at_ms)")
        .await;
    let ok = sluice(
        db,
        &[
            "schedule",
            "add",
            "--name",
            "nightly",
            "--cron",
            "0 3 * * *",
            "delete-aged-rows",
            "--table",
            "items",
            "--column",
            "created_at",
            "--older-than",
            "90d",
        ],
    );
    succeeded(&ok);
    let ok = sluice(
        db,
        &[
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            "counter = 0",
        ],
    );
    succeeded(&ok);
    // Run it to the end, so nothing moves while the cases are tried.
    let ok = sluice(db, &["run", "--until-idle"]);
    succeeded(&ok);
}

/// Everything a refused input must leave as it was.
async fn snapshot(db: &TestDb) -> Vec<i64> {
    let mut counts = Vec::new();
    for sql in [
        "SELECT COUNT(*) FROM sluice_operations",
        "SELECT COUNT(*) FROM sluice_events",
        "SELECT COUNT(*) FROM sluice_batches",
        "SELECT COUNT(*) FROM sluice_schedules",
        "SELECT COUNT(*) FROM sluice_switches",
        "SELECT COUNT(*) FROM sluice_schedule_fires",
        "SELECT CAST(COALESCE(SUM(last_seq), 0) AS BIGINT) FROM sluice_operations",
        "SELECT COUNT(*) FROM items",
        "SELECT CAST(SUM(counter) AS BIGINT) FROM items",
        "SELECT COUNT(*) FROM day_numbers",
        "SELECT COUNT(*) FROM ms_numbers",
    ] {
        counts.push(db.scalar(sql).await);
    }
    counts
}

/// `arg` as a POSIX shell would need it written.
fn shell_quoted(arg: &str) -> String {
    let plain = |c: char| c.is_alphanumeric() || "_-./:=@,".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

async fn the_command_line_refuses_bad_input_and_changes_nothing(db: &TestDb) {
    set_up(db).await;
    let aged = |table: &str, column: &str, older: &str| -> Vec<String> {
        [
            "enqueue",
            "delete-aged-rows",
            "--table",
            table,
            "--column",
            column,
            "--older-than",
            older,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let update = |set: &str, condition: &str| -> Vec<String> {
        [
            "enqueue",
            "update-in-batches",
            "--table",
            "items",
            "--set",
            set,
            "--where",
            condition,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let with = |mut args: Vec<String>, extra: &[&str]| {
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let plain = |args: &[&str]| -> Vec<String> { args.iter().map(|s| s.to_string()).collect() };
    let identifier = "is not a plain SQL identifier";
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        // Unsafe identifiers: quotes, separators, comments, look-alikes.
        (
            aged("items\"; DROP TABLE items; --", "created_at", "30d"),
            2,
            identifier,
        ),
        (aged("items;", "created_at", "30d"), 2, identifier),
        (aged("items", "created_at--", "30d"), 2, identifier),
        (aged("it/*x*/ems", "created_at", "30d"), 2, identifier),
        (aged("it\u{0435}ms", "created_at", "30d"), 2, identifier), // Cyrillic е
        (aged("\u{ff49}tems", "created_at", "30d"), 2, identifier), // fullwidth ｉ
        (aged("items", "created at", "30d"), 2, identifier),
        (aged("1items", "created_at", "30d"), 2, identifier),
        (aged(&"t".repeat(64), "created_at", "30d"), 2, identifier),
        (
            update("counter = 1; DROP TABLE items", "grp = 1"),
            2,
            "contains `;`",
        ),
        (
            update("counter = 1", "grp = 1 -- always"),
            2,
            "contains `--`",
        ),
        (update("counter = 1", "grp = 1 /* x */"), 2, "contains `/*`"),
        (
            update("counter = 1", "grp = = 1"),
            2,
            "the WHERE expression `grp = = 1` does not parse",
        ),
        // Operator SQL that escapes its place, writes the key, or cannot run.
        (
            with(
                update("counter = counter + 1", "1=1) OR (1=1"),
                &["--force"],
            ),
            2,
            "does not end where the expression ends",
        ),
        (
            update("id = id + 1000000, counter = counter + 1", "grp = 1"),
            2,
            "the SET writes `id`, which the batches of `items` walk by (`id`)",
        ),
        (
            update("counter = 1, rowid = rowid + 1000", "grp = 1"),
            2,
            "the SET writes `rowid`, a name SQLite",
        ),
        (
            update("nosuch = 1", "grp = 1"),
            2,
            "the database refused the operation's SQL",
        ),
        (
            update("counter = nosuchfn(1)", "grp = 1"),
            2,
            "the database refused the operation's SQL",
        ),
        (
            update("counter = 1", "grp > $1"),
            2,
            "holds the placeholder `$1`",
        ),
        // Keys that do not name one row each.
        (
            aged("loose", "created_at", "30d"),
            2,
            "refusing `loose` batched by (id): no unique index covers only these columns",
        ),
        (
            aged("nullable_key", "created_at", "30d"),
            2,
            "column `id` can hold NULL",
        ),
        (
            aged("latest_per_group", "created_at", "30d"),
            2,
            "refusing `latest_per_group` batched by (id)",
        ),
        // An integer time column in another unit than seconds.
        (
            aged("day_numbers", "day", "90d"),
            2,
            "its largest value, 20030, would be 1970-01-01T05:33:50Z: every row would count \
             as older than 90d",
        ),
        (
            aged("ms_numbers", "at_ms", "90d"),
            2,
            "its smallest value, 1700000000001, would be +55840-",
        ),
        // Durations past their bounds.
        (
            with(
                aged("items", "created_at", "30d"),
                &["--pause", "9999999999d"],
            ),
            2,
            "longer than the most accepted, 1h",
        ),
        (
            with(
                aged("items", "created_at", "30d"),
                &["--max-runtime", "31d"],
            ),
            2,
            "longer than the most accepted, 30d",
        ),
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "n3",
                "--cron",
                "0 3 * * *",
                "--jitter",
                "2d",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = 1",
            ]),
            2,
            "longer than the most accepted, 1d",
        ),
        (
            aged("items", "created_at", "36501d"),
            2,
            "longer than the most accepted, 36500d",
        ),
        (
            plain(&["--database-url", "sqlite:/no-such-folder/sluice.db", "list"]),
            2,
            "its folder `/no-such-folder` does not exist",
        ),
        // Unknown table, column, kind, id.
        (
            aged("nosuch", "created_at", "30d"),
            2,
            "unknown table `nosuch`",
        ),
        (
            aged("items", "nosuch", "30d"),
            2,
            "table `items` has no column `nosuch`",
        ),
        (
            with(aged("items", "created_at", "30d"), &["--key", "nope"]),
            2,
            "no column `nope`",
        ),
        (
            plain(&["enqueue", "purge-everything"]),
            2,
            "unrecognized subcommand 'purge-everything'",
        ),
        (plain(&["show", "999999"]), 2, "no operation with id 999999"),
        (
            plain(&["events", "999999"]),
            2,
            "no operation with id 999999",
        ),
        (
            plain(&["pause", "999999"]),
            2,
            "no operation with id 999999",
        ),
        (plain(&["show", "abc"]), 2, "invalid value 'abc'"),
        (
            plain(&["schedule", "remove", "weekly"]),
            2,
            "no schedule named `weekly`",
        ),
        // Malformed durations and cron.
        (
            aged("items", "created_at", "90 days"),
            2,
            "malformed duration `90 days`",
        ),
        (
            aged("items", "created_at", "-5d"),
            2,
            "negative durations are not allowed",
        ),
        (aged("items", "created_at", "5x"), 2, "unknown unit"),
        (
            plain(&["prune", "--older-than", "soon"]),
            2,
            "malformed duration `soon`",
        ),
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "n2",
                "--cron",
                "61 * * * *",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = 1",
            ]),
            2,
            "invalid cron expression `61 * * * *`",
        ),
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "n2",
                "--cron",
                "0 3 30 2 *",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = 1",
            ]),
            2,
            "never fires",
        ),
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "n2",
                "--cron",
                "0 3 * * *",
                "--jitter",
                "-1m",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = 1",
            ]),
            2,
            "negative durations are not allowed",
        ),
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "nightly",
                "--cron",
                "0 4 * * *",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = 1",
            ]),
            2,
            "a schedule named `nightly` already exists",
        ),
        // Zero, negative and huge sizes.
        (
            with(aged("items", "created_at", "30d"), &["--batch-size", "0"]),
            2,
            "--batch-size",
        ),
        (
            with(
                aged("items", "created_at", "30d"),
                &["--sub-batch-size", "-3"],
            ),
            2,
            "--sub-batch-size",
        ),
        (
            with(
                aged("items", "created_at", "30d"),
                &["--batch-size", "99999999999999999999"],
            ),
            2,
            "number too large",
        ),
        (
            with(
                aged("items", "created_at", "30d"),
                &["--priority", "99999999999"],
            ),
            2,
            "--priority",
        ),
        (
            with(aged("items", "created_at", "30d"), &["--max-rows", "0"]),
            2,
            "--max-rows",
        ),
        (
            with(aged("items", "created_at", "30d"), &["--max-runtime", "0s"]),
            2,
            "max_runtime must be a positive number",
        ),
        (plain(&["prune", "--chunk", "0"]), 2, "invalid value '0'"),
        (plain(&["list", "--limit", "ten"]), 2, "invalid value 'ten'"),
        (
            plain(&["list", "--status", "done"]),
            2,
            "unknown status `done`",
        ),
        (
            plain(&["run", "--lease-ttl", "10ms", "--until-idle"]),
            2,
            "shorter than the least accepted, 300ms",
        ),
        (
            plain(&["--log-format", "yaml", "list"]),
            2,
            "unknown log format `yaml`",
        ),
        (plain(&["pause", "1", "--all"]), 2, "cannot be used with"),
        // A kill switch, cancel or retry for a kind nobody knows.
        (
            plain(&["pause", "--kind", "delete-aged-row"]),
            2,
            "unknown kind `delete-aged-row`",
        ),
        (
            plain(&["cancel", "--kind", "delete-aged-row"]),
            2,
            "unknown kind `delete-aged-row`",
        ),
        // A schedule whose target enqueue would refuse is not stored.
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "n3",
                "--cron",
                "0 3 * * *",
                "update-in-batches",
                "--table",
                "itemz",
                "--set",
                "counter = 1",
            ]),
            2,
            "unknown table `itemz`",
        ),
        (
            plain(&[
                "schedule",
                "add",
                "--name",
                "n3",
                "--cron",
                "0 3 * * *",
                "delete-aged-rows",
                "--table",
                "loose",
                "--column",
                "created_at",
                "--older-than",
                "30d",
            ]),
            2,
            "no unique index covers only these columns",
        ),
        // A SET writing a column the database computes (MariaDB would
        // ignore the value with a warning, every sub-batch a no-op).
        (
            plain(&[
                "enqueue",
                "update-in-batches",
                "--table",
                "doubled",
                "--set",
                "twice = 5",
            ]),
            2,
            "the SET writes `twice`, which `doubled` computes itself",
        ),
        // A latency budget that is not one.
        (
            with(
                update("counter = 1", "grp = 1"),
                &["--latency-budget", "5parsecs"],
            ),
            2,
            "malformed latency budget `5parsecs`",
        ),
        (
            with(
                update("counter = 1", "grp = 1"),
                &["--latency-budget", "0ms"],
            ),
            2,
            "malformed latency budget `0ms`",
        ),
        (
            plain(&[
                "limit",
                "--kind",
                "delete-aged-row",
                "--latency-budget",
                "5ms",
            ]),
            2,
            "delete-aged-row",
        ),
        (
            plain(&["limit", "--all", "--latency-budget", "5ms", "--rate", "10"]),
            2,
            "one at a time",
        ),
        // A companion option missing is named.
        (
            with(update("counter = 1", "grp = 1"), &["--time-zone", "UTC"]),
            2,
            "required arguments were not provided: --window",
        ),
        (
            plain(&["pause", "--kind", " "]),
            2,
            "the kind must not be empty",
        ),
        // Controls that do not apply.
        (plain(&["resume", "1"]), 2, "cannot resume operation 1"),
        (plain(&["retry", "1"]), 2, "cannot retry operation 1"),
        // Database URLs that cannot work.
        (
            plain(&[
                "--database-url",
                "mongodb://root:secret@127.0.0.1:27017/test",
                "list",
            ]),
            2,
            "unsupported database URL `mongodb://root:***@127.0.0.1:27017/test`",
        ),
        (
            plain(&["--database-url", "redis://127.0.0.1:6379", "list"]),
            2,
            "unsupported database URL",
        ),
        (
            plain(&[
                "--database-url",
                "postgres://postgres@127.0.0.1:1/test",
                "list",
            ]),
            1,
            "cannot reach the database at postgres://postgres@127.0.0.1:1/test",
        ),
        // An operator's latency query that is not one statement, returns no
        // number, or feeds a budget turned off: the worker does not start.
        (
            plain(&[
                "run",
                "--until-idle",
                "--latency-query",
                "SELECT 1; DROP TABLE items",
            ]),
            2,
            "holds more than one statement",
        ),
        (
            plain(&["run", "--until-idle", "--latency-query", "SELECT 'fast'"]),
            2,
            "returned no number of milliseconds",
        ),
        (
            plain(&[
                "run",
                "--until-idle",
                "--without-indicator",
                "latency-budget",
                "--latency-query",
                "SELECT 1",
            ]),
            2,
            "the latency budget it feeds is off here",
        ),
    ];
    assert!(cases.len() >= 30);
    // `SLUICE_PRINT_MATRIX=1` prints each case as a row of RELIABILITY.md's table.
    let print_matrix = std::env::var_os("SLUICE_PRINT_MATRIX").is_some();
    let before = snapshot(db).await;
    for (args, code, message) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = sluice(db, &args);
        let err = stderr(&output);
        if print_matrix {
            println!(
                "| {} | `sluice {}` | {} | {} |",
                db.backend,
                args.iter()
                    .map(|a| shell_quoted(a))
                    .collect::<Vec<_>>()
                    .join(" "),
                output.status.code().unwrap_or(-1),
                err.trim().replace('|', "\\|")
            );
        }
        assert_eq!(output.status.code(), Some(*code), "{args:?}: {err}");
        assert!(
            err.contains(message),
            "{args:?}: expected `{message}` in {err}"
        );
        assert_eq!(err.lines().count(), 1, "{args:?}: one line, got {err}");
        assert!(
            !err.contains("panicked") && !err.contains("secret"),
            "{args:?}: {err}"
        );
        assert_eq!(snapshot(db).await, before, "{args:?} changed something");
    }

    // A read-only SQLite file: refused with exit 2, and the file unchanged.
    if db.backend == "sqlite" {
        let path = db.url.trim_start_matches("sqlite:").to_owned();
        let copy = format!("{path}.readonly");
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").await;
        std::fs::copy(&path, &copy).unwrap();
        let read_only = format!("sqlite:{copy}?mode=ro");
        let output = sluice_on(
            &read_only,
            &[
                "enqueue",
                "update-in-batches",
                "--table",
                "items",
                "--set",
                "counter = 9",
            ],
        );
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("the database is read-only, nothing was changed"),
            "{}",
            stderr(&output)
        );
        let copied = Store::connect(&format!("sqlite:{copy}")).await.unwrap();
        let operations = copied
            .list(&sluice_store::ListFilter::default())
            .await
            .unwrap();
        assert_eq!(
            operations.len(),
            1,
            "nothing was enqueued in the read-only file"
        );
        copied.close().await;
    }
}

async fn the_embedding_api_refuses_bad_input_and_changes_nothing(db: &TestDb) {
    set_up(db).await;
    let runtime = RuntimeBuilder::with_store(db.store.clone())
        .without_builtin_indicators()
        .start()
        .await
        .unwrap();
    let before = snapshot(db).await;
    let options = EnqueueOptions::default();
    let json = |v: serde_json::Value| v;
    let enqueue_errors: Vec<(serde_json::Value, &str, &str)> = vec![
        (
            json(serde_json::json!({"table": "items; --", "key": "id", "set": "counter = 1"})),
            "update-in-batches",
            "is not a plain SQL identifier",
        ),
        (
            json(serde_json::json!({"table": "items", "key": "id"})),
            "update-in-batches",
            "invalid arguments",
        ),
        (
            json(serde_json::json!({"table": 5, "key": "id", "set": "x = 1"})),
            "update-in-batches",
            "invalid arguments",
        ),
        (
            json(serde_json::json!("not an object")),
            "update-in-batches",
            "invalid arguments",
        ),
        (
            json(serde_json::json!({"table": "nosuch", "key": "id", "set": "counter = 1"})),
            "update-in-batches",
            "unknown table `nosuch`",
        ),
        (
            json(serde_json::json!({})),
            "no-such-kind",
            "unknown operation kind `no-such-kind`",
        ),
        // Operator SQL that escapes its place, writes the key, or cannot run.
        (
            json(
                serde_json::json!({"table": "items", "key": "id", "set": "counter = 1", "where": "1=1) OR (1=1"}),
            ),
            "update-in-batches",
            "does not end where the expression ends",
        ),
        (
            json(serde_json::json!({"table": "items", "key": "id", "set": "ID = ID + 1"})),
            "update-in-batches",
            "which the batches of `items` walk by (`id`)",
        ),
        (
            json(serde_json::json!({"table": "items", "key": "id", "set": "nosuch = 1"})),
            "update-in-batches",
            "the database refused the operation's SQL",
        ),
        // Keys that do not name one row each.
        (
            json(serde_json::json!({"table": "loose", "key": "id", "set": "id = 1"})),
            "update-in-batches",
            "which the batches of `loose` walk by",
        ),
        (
            json(
                serde_json::json!({"table": "loose", "key": "id", "set": "created_at = created_at"}),
            ),
            "update-in-batches",
            "refusing `loose` batched by (id)",
        ),
        (
            json(
                serde_json::json!({"table": "nullable_key", "key": "id", "set": "created_at = created_at"}),
            ),
            "update-in-batches",
            "column `id` can hold NULL",
        ),
    ];
    for (arguments, kind, message) in &enqueue_errors {
        let error = runtime
            .enqueue_json(kind, arguments, &options)
            .await
            .unwrap_err();
        assert!(
            matches!(&error, RuntimeError::Operation(e) if e.is_bad_input()),
            "{error:?}"
        );
        assert!(
            error.to_string().contains(message),
            "expected `{message}` in {error}"
        );
        assert_eq!(
            snapshot(db).await,
            before,
            "{kind} {arguments} changed something"
        );
    }
    let sizes = EnqueueOptions {
        sub_batch_size: 0,
        ..EnqueueOptions::default()
    };
    let error = runtime
        .enqueue_json(
            "update-in-batches",
            &serde_json::json!({"table": "items", "key": "id", "set": "counter = 1"}),
            &sizes,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RuntimeError::Operation(OperationError::Spec(_))),
        "{error:?}"
    );
    // A pause past its bound, through the API (the CLI refuses it earlier).
    let endless = EnqueueOptions {
        pause: std::time::Duration::from_secs(9_999_999_999 * 86_400),
        ..EnqueueOptions::default()
    };
    let error = runtime
        .enqueue_json(
            "update-in-batches",
            &serde_json::json!({"table": "items", "key": "id", "set": "counter = 1"}),
            &endless,
        )
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("pause must be at most 3600000 ms (1h)"),
        "{error}"
    );
    assert_eq!(
        snapshot(db).await,
        before,
        "an endless pause changed something"
    );
    let bulk = vec![
        NewOperation {
            kind: "update-in-batches".into(),
            arguments: serde_json::json!({"table": "items", "key": "id", "set": "counter = 2"}),
            options: EnqueueOptions::default(),
        },
        NewOperation {
            kind: "update-in-batches".into(),
            arguments: serde_json::json!({"table": "items\"", "key": "id", "set": "counter = 3"}),
            options: EnqueueOptions::default(),
        },
    ];
    let error = runtime.enqueue_many(&bulk).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("operation 1 of the bulk enqueue"),
        "{error}"
    );
    // The same table twice: the second operation's statement is planned
    // too, though its target was checked with the first.
    let same_table = vec![
        NewOperation {
            kind: "update-in-batches".into(),
            arguments: serde_json::json!({"table": "items", "key": "id", "set": "counter = 2"}),
            options: EnqueueOptions::default(),
        },
        NewOperation {
            kind: "update-in-batches".into(),
            arguments: serde_json::json!({"table": "items", "key": "id", "set": "nosuch = 3"}),
            options: EnqueueOptions::default(),
        },
    ];
    let error = runtime.enqueue_many(&same_table).await.unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("operation 1 of the bulk enqueue: the database refused"),
        "{error}"
    );
    assert_eq!(
        snapshot(db).await,
        before,
        "a refused bulk enqueue changed something"
    );
    let error = runtime
        .pause(&Selection::One(999_999), "x")
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("no operation with id 999999"),
        "{error}"
    );
    let error = runtime
        .pause(&Selection::Kind(String::new()), "x")
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("the kind must not be empty"),
        "{error}"
    );
    let error = runtime.resume(&Selection::One(1)).await.unwrap_err();
    assert!(
        error.to_string().contains("cannot resume operation 1"),
        "{error}"
    );
    let schedule = |name: &str, cron: &str, zone: Option<&str>| ScheduleSpec {
        name: name.into(),
        kind: "update-in-batches".into(),
        arguments: serde_json::json!({"table": "items", "key": "id", "set": "counter = 1"}),
        cron: cron.into(),
        time_zone: zone.map(str::to_owned),
        jitter: std::time::Duration::ZERO,
        options: EnqueueOptions::default(),
    };
    for (spec, message) in [
        (
            schedule("weekly", "every day", None),
            "invalid cron expression",
        ),
        (
            schedule("weekly", "0 3 * * *", Some("Mars/Olympus")),
            "unknown time zone",
        ),
        (
            schedule("week ly", "0 3 * * *", None),
            "invalid schedule name",
        ),
        (schedule("nightly", "0 3 * * *", None), "already exists"),
    ] {
        let error: ScheduleError = runtime.add_schedule(&spec).await.unwrap_err();
        assert!(error.is_bad_input(), "{error:?}");
        assert!(
            error.to_string().contains(message),
            "expected `{message}` in {error}"
        );
    }
    assert_eq!(
        snapshot(db).await,
        before,
        "the API's refusals changed something"
    );
    runtime.shutdown().await.unwrap();
    // Builders given URLs that cannot work.
    let error = RuntimeBuilder::new("mongodb://root@127.0.0.1/test")
        .start()
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            &error,
            RuntimeError::Store(StoreError::Target(DatabaseError::UnsupportedUrl { .. }))
        ),
        "{error:?}"
    );
    let error = RuntimeBuilder::new("postgres://postgres@127.0.0.1:1/test")
        .start()
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&error, RuntimeError::Store(e) if e.is_transient()),
        "{error:?}"
    );
}

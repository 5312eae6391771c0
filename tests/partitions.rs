//! Partition-aware `delete-aged-rows` on PostgreSQL and MariaDB: on a
//! table partitioned by ranges of its time column, each partition wholly
//! older than the cutoff is dropped in one batch, the others' aged rows are
//! deleted row by row, and exactly the aged rows go. A partition holding a
//! row outside the scope is not dropped; a drop that cannot get its lock
//! gives way (the rows go one by one) instead of queueing every query
//! behind it; a `DELETE` trigger keeps every partition. On MariaDB, whose
//! drop commits on its own, a drop intent left by a worker that died is
//! settled by the next from the table's catalogue, its rows counted once.
//! With `--undo`, PostgreSQL detaches and keeps the aged partitions
//! instead (MariaDB moves every row), and a revert puts every row back.

mod common;

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use common::{TestDb, json, sluice, spawn_worker};
use serde_json::json;
use sluice_operations::{EnqueueOptions, Filter, Operation, OperationError, Registry, Shape};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::{DropIntent, OperationStatus};
use sqlx::Connection;

postgres_and_mysql!(
    partitions_wholly_older_than_the_cutoff_drop_and_the_rest_go_row_by_row,
    a_partition_holding_a_row_outside_the_scope_is_not_dropped,
    a_drop_behind_a_long_transaction_gives_way_and_rows_go_one_by_one,
    a_delete_trigger_keeps_every_partition,
    workers_killed_between_drops_and_deletes_count_every_aged_row_once,
    undo_keeps_aged_partitions_and_a_revert_puts_every_row_back,
);

postgres_only!(
    pg_partmans_retention_decides_whether_partitions_drop,
    prune_drops_the_partitions_an_undo_kept,
    a_revert_refused_an_attach_names_the_kept_table_and_tries_again,
);

mysql_only!(a_drop_intent_left_by_a_dead_worker_is_settled_once);

/// Rows of `log` older than 30 days: 3,000 in the partitions of 2019–2021,
/// 1,000 from 2022 in `log_recent` beside 200 from the last hour, and one
/// from 2010 (PostgreSQL: in the default partition `log_other`, beside one
/// from 2200; MariaDB: in `log_2019`, whose range is open below, the one
/// from 2200 in `log_other`, up to `MAXVALUE`).
const AGED: i64 = 4_001;
const YOUNG: i64 = 201;

/// `log (id, at, note)`, primary key `(id, at)`, partitioned by year up
/// to 2022, then one partition to 2100, and one for the rest; on MariaDB
/// by `RANGE COLUMNS (at)`, or with `by_days` by `RANGE (TO_DAYS(at))`.
async fn create_log(db: &TestDb) {
    create_log_by(db, false).await;
}

async fn create_log_by(db: &TestDb, by_days: bool) {
    let statements: Vec<String> = match db.backend {
        "postgres" => [
            "CREATE TABLE log (id BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL, \
             note TEXT NOT NULL DEFAULT '', PRIMARY KEY (id, at)) PARTITION BY RANGE (at)",
            "CREATE TABLE log_2019 PARTITION OF log FOR VALUES FROM ('2019-01-01') TO ('2020-01-01')",
            "CREATE TABLE log_2020 PARTITION OF log FOR VALUES FROM ('2020-01-01') TO ('2021-01-01')",
            "CREATE TABLE log_2021 PARTITION OF log FOR VALUES FROM ('2021-01-01') TO ('2022-01-01')",
            "CREATE TABLE log_recent PARTITION OF log FOR VALUES FROM ('2022-01-01') TO ('2100-01-01')",
            "CREATE TABLE log_other PARTITION OF log DEFAULT",
            "CREATE INDEX log_at ON log (at)",
            "INSERT INTO log (id, at) SELECT g, timestamptz '2019-01-01' + (g % 1095) * interval '1 day' \
             FROM generate_series(1, 3000) g",
            "INSERT INTO log (id, at) SELECT 10000 + g, timestamptz '2022-01-01' + g * interval '1 hour' \
             FROM generate_series(1, 1000) g",
            "INSERT INTO log (id, at) SELECT 20000 + g, now() - interval '1 hour' + g * interval '1 second' \
             FROM generate_series(1, 200) g",
            "INSERT INTO log (id, at) VALUES (30001, '2010-06-01'), (30002, '2200-01-01')",
        ]
        .map(str::to_owned)
        .to_vec(),
        _ => {
            let (by, bound): (&str, fn(&str) -> String) = match by_days {
                false => ("RANGE COLUMNS (at)", |day| format!("('{day}')")),
                true => ("RANGE (TO_DAYS(at))", |day| format!("(TO_DAYS('{day}'))")),
            };
            vec![
                format!(
                    "CREATE TABLE log (id BIGINT NOT NULL, at DATETIME(6) NOT NULL, \
                     note VARCHAR(20) NOT NULL DEFAULT '', PRIMARY KEY (id, at), KEY log_at (at)) \
                     PARTITION BY {by} (\
                     PARTITION log_2019 VALUES LESS THAN {}, PARTITION log_2020 VALUES LESS THAN {}, \
                     PARTITION log_2021 VALUES LESS THAN {}, PARTITION log_recent VALUES LESS THAN {}, \
                     PARTITION log_other VALUES LESS THAN MAXVALUE)",
                    bound("2020-01-01"),
                    bound("2021-01-01"),
                    bound("2022-01-01"),
                    bound("2100-01-01"),
                ),
                "INSERT INTO log (id, at) SELECT seq, TIMESTAMP '2019-01-01 00:00:00' \
                 + INTERVAL (seq % 1095) DAY FROM seq_1_to_3000"
                    .into(),
                "INSERT INTO log (id, at) SELECT 10000 + seq, TIMESTAMP '2022-01-01 00:00:00' \
                 + INTERVAL seq HOUR FROM seq_1_to_1000"
                    .into(),
                "INSERT INTO log (id, at) SELECT 20000 + seq, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR \
                 + INTERVAL seq SECOND FROM seq_1_to_200"
                    .into(),
                "INSERT INTO log (id, at) VALUES (30001, '2010-06-01'), (30002, '2200-01-01')".into(),
            ]
        }
    };
    for sql in statements {
        db.execute(&sql).await;
    }
}

/// True when a partition of that name is attached to `log` or stands alone
/// (PostgreSQL), or is a partition of `log` (MariaDB).
async fn exists(db: &TestDb, partition: &str) -> bool {
    exist(db, &[partition]).await == 1
}

/// How many of `partitions` exist ([`exists`]).
async fn exist(db: &TestDb, partitions: &[&str]) -> i64 {
    let names = partitions
        .iter()
        .map(|p| format!("'{p}'"))
        .collect::<Vec<_>>()
        .join(", ");
    db.scalar(&match db.backend {
        "postgres" => format!(
            "SELECT COUNT(*) FROM pg_catalog.pg_class WHERE relname IN ({names}) \
             AND relnamespace = current_schema()::regnamespace"
        ),
        _ => format!(
            "SELECT COUNT(*) FROM information_schema.partitions WHERE table_schema = DATABASE() \
             AND table_name = 'log' AND partition_name IN ({names})"
        ),
    })
    .await
}

/// 20,000 more aged rows in `log_recent`, from 2023 (ids above 40,000):
/// enough to go one by one for a while.
async fn add_aged_recent(db: &TestDb) {
    db.execute(match db.backend {
        "postgres" => {
            "INSERT INTO log (id, at) SELECT 40000 + g, timestamptz '2023-01-01' + g * interval '1 minute' \
             FROM generate_series(1, 20000) g"
        }
        _ => {
            "INSERT INTO log (id, at) SELECT 40000 + seq, TIMESTAMP '2023-01-01 00:00:00' \
             + INTERVAL seq MINUTE FROM seq_1_to_20000"
        }
    })
    .await;
}

/// `SELECT COUNT(*)` of the rows of `partition` matching `condition`.
async fn rows_in(db: &TestDb, partition: &str, condition: &str) -> i64 {
    db.scalar(&match db.backend {
        "postgres" => format!("SELECT COUNT(*) FROM {partition} WHERE {condition}"),
        _ => format!("SELECT COUNT(*) FROM log PARTITION ({partition}) WHERE {condition}"),
    })
    .await
}

/// The condition of the rows older than `days`.
fn older_than(db: &TestDb, days: u32) -> String {
    match db.backend {
        "postgres" => format!("at < now() - interval '{days} days'"),
        _ => format!("at < UTC_TIMESTAMP(6) - INTERVAL {days} DAY"),
    }
}

async fn aged_left(db: &TestDb) -> i64 {
    db.scalar(&format!(
        "SELECT COUNT(*) FROM log WHERE {}",
        older_than(db, 30)
    ))
    .await
}

/// `enqueue delete-aged-rows` of the rows of `log` older than 30 days,
/// by `(id, at)`, with `more` options.
fn enqueue_aged<'a>(more: &[&'a str]) -> Vec<&'a str> {
    let mut enqueue = vec![
        "enqueue",
        "delete-aged-rows",
        "--table",
        "log",
        "--column",
        "at",
        "--key",
        "id,at",
        "--older-than",
        "30d",
    ];
    enqueue.extend_from_slice(more);
    enqueue
}

/// `sluice enqueue delete-aged-rows` on `log`, then `sluice run
/// --until-idle`; both succeed. Returns the operation's rows done.
fn delete_aged(db: &TestDb, more: &[&str]) -> i64 {
    let mut options = vec!["--sub-batch-size", "150"];
    options.extend_from_slice(more);
    let enqueue = enqueue_aged(&options);
    for command in [enqueue, vec!["run", "--until-idle"]] {
        let done = sluice(db, &command);
        assert!(
            done.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&done.stderr)
        );
    }
    let shown = sluice(db, &["list", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    listed
        .as_array()
        .and_then(|all| all.last())
        .and_then(|last| last["rows_done"].as_i64())
        .unwrap_or_else(|| panic!("no rows_done in {listed}"))
}

/// The three partitions of 2019–2021 are dropped, one sub-batch each; the
/// aged rows of `log_recent` and the default partition are deleted one by
/// one; the young rows all stay, and the operation counts every aged row
/// once. `plan` names the partitions first; `--no-drop-partitions` drops
/// none.
async fn partitions_wholly_older_than_the_cutoff_drop_and_the_rest_go_row_by_row(db: &TestDb) {
    create_log(db).await;
    let mut plan = enqueue_aged(&["--no-probe"]);
    plan[0] = "plan";
    let planned = sluice(db, &plan);
    let planned = String::from_utf8_lossy(&planned.stdout);
    for partition in ["log_2019", "log_2020", "log_2021"] {
        let rows = rows_in(db, partition, "1 = 1").await;
        let rows = match rows {
            1_000.. => format!("{},{:03}", rows / 1_000, rows % 1_000),
            _ => rows.to_string(),
        };
        // PostgreSQL's partitions are tables, named with their schema.
        let name = match &db.schema {
            Some(schema) => format!("{schema}.{partition}"),
            None => partition.to_owned(),
        };
        assert!(
            planned.contains(&format!("drops {name} ({rows} rows")),
            "{partition} ({rows} rows): {planned}"
        );
    }
    assert!(!planned.contains("log_recent ("), "{planned}");

    let done = delete_aged(db, &[]);
    assert_eq!(done, AGED, "every aged row counted once");
    assert_eq!(aged_left(db).await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
    for dropped in ["log_2019", "log_2020", "log_2021"] {
        assert!(!exists(db, dropped).await, "{dropped} was not dropped");
    }
    for kept in ["log_recent", "log_other"] {
        assert!(exists(db, kept).await, "{kept} was dropped");
    }

    // Again with --no-drop-partitions: every row one by one, no drop.
    db.execute("DROP TABLE log").await;
    create_log(db).await;
    let done = delete_aged(db, &["--no-drop-partitions"]);
    assert_eq!(done, AGED);
    assert_eq!(aged_left(db).await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
    assert!(exists(db, "log_2019").await, "a partition was dropped");
}

/// Deletes the rows of `log` older than a cutoff but those noted `pinned`,
/// dropping partitions where it may.
struct DeleteUnpinned;

#[derive(serde::Serialize, serde::Deserialize)]
struct Unpinned {
    before: DateTime<Utc>,
}

#[async_trait::async_trait]
impl Operation for DeleteUnpinned {
    type Arguments = Unpinned;

    fn kind(&self) -> &'static str {
        "delete-unpinned"
    }

    fn shape(&self, args: &Unpinned) -> Result<Shape, OperationError> {
        Ok(Shape::loop_until_done_by("log", &["id", "at"])?
            .scope(Filter::new().lt("at", args.before).ne("note", "pinned"))?
            .drop_partitions())
    }

    fn sub_batch_statement(
        &self,
        _: &Unpinned,
        rows: &sluice_operations::SubBatchRows<'_>,
    ) -> Result<Option<sluice_target::Statement>, OperationError> {
        Ok(Some(rows.delete_statement()))
    }
}

/// A row of `log_2020` outside the scope (pinned) keeps that partition from
/// being dropped: its other rows are deleted one by one and the pinned row
/// stays; the partitions wholly in scope are dropped.
/// On MariaDB the table is partitioned by `TO_DAYS(at)`, not `at` itself.
async fn a_partition_holding_a_row_outside_the_scope_is_not_dropped(db: &TestDb) {
    create_log_by(db, true).await;
    db.execute("UPDATE log SET note = 'pinned' WHERE id = 500")
        .await;
    assert_eq!(rows_in(db, "log_2020", "id = 500").await, 1);
    let mut registry = Registry::new();
    registry.register(DeleteUnpinned);
    let options = EnqueueOptions {
        sub_batch_size: 150,
        ..EnqueueOptions::default()
    };
    let before = Utc::now() - chrono::Duration::days(30);
    sluice_operations::enqueue(
        &db.store,
        &registry,
        "delete-unpinned",
        &json!({ "before": before }),
        &options,
    )
    .await
    .unwrap();
    let runtime = RuntimeBuilder::with_store(db.store.clone())
        .config(RuntimeConfig {
            node: "partitions".into(),
            reconcile_interval: Duration::from_millis(20),
            ..RuntimeConfig::default()
        })
        .without_builtin_indicators()
        .register(DeleteUnpinned)
        .start()
        .await
        .unwrap();
    let left = runtime.run_until_idle().await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    runtime.shutdown().await.unwrap();

    assert!(
        exists(db, "log_2020").await,
        "a partition with a pinned row was dropped"
    );
    assert_eq!(rows_in(db, "log_2020", "1 = 1").await, 1);
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM log WHERE note = 'pinned'")
            .await,
        1
    );
    assert!(!exists(db, "log_2019").await && !exists(db, "log_2021").await);
    assert_eq!(aged_left(db).await, 1, "only the pinned aged row is left");
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG + 1);
}

/// A transaction reading `log_2019` holds it for the whole run: its drop
/// cannot get its lock, gives way after a short wait, and the rows go one
/// by one instead; the run ends while that transaction is still open.
/// PostgreSQL locks the partition alone, so the other old partitions are
/// dropped; MariaDB's metadata lock covers the whole table, so none is and
/// every aged row goes one by one. Point reads of `log` keep being answered
/// throughout (their slowest time is printed, not asserted).
async fn a_drop_behind_a_long_transaction_gives_way_and_rows_go_one_by_one(db: &TestDb) {
    create_log(db).await;
    let reader: Box<dyn std::any::Any + Send> = match db.backend {
        "postgres" => {
            let mut reader = sqlx::PgConnection::connect(&db.url).await.unwrap();
            for sql in ["BEGIN", "SELECT COUNT(*) FROM log_2019"] {
                sqlx::raw_sql(sql).execute(&mut reader).await.unwrap();
            }
            Box::new(reader)
        }
        _ => {
            let mut reader = sqlx::MySqlConnection::connect(&db.url).await.unwrap();
            for sql in [
                "START TRANSACTION",
                "SELECT COUNT(*) FROM log PARTITION (log_2019)",
            ] {
                sqlx::raw_sql(sql).execute(&mut reader).await.unwrap();
            }
            Box::new(reader)
        }
    };

    let run = tokio::task::spawn_blocking({
        let db_url = db.url.clone();
        move || {
            let enqueue = common::sluice_on(&db_url, &enqueue_aged(&["--sub-batch-size", "150"]));
            assert!(enqueue.status.success(), "{enqueue:?}");
            common::sluice_on(&db_url, &["run", "--until-idle"])
        }
    });
    let point_read = format!(
        "SELECT COUNT(*) FROM log WHERE id = 20001 AND NOT ({})",
        older_than(db, 1)
    );
    let (mut reads, mut slowest) = (0_u32, Duration::ZERO);
    while !run.is_finished() {
        let started = Instant::now();
        assert_eq!(db.scalar(&point_read).await, 1);
        slowest = slowest.max(started.elapsed());
        reads += 1;
    }
    let ran = run.await.unwrap();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    println!("{reads} point reads during the run, the slowest {slowest:?}");
    assert!(reads > 0);

    // Still inside the reader's transaction: the partition is there, empty.
    assert!(
        exists(db, "log_2019").await,
        "dropped under a reader's lock"
    );
    assert_eq!(rows_in(db, "log_2019", "1 = 1").await, 0);
    let others_left = exist(db, &["log_2020", "log_2021"]).await;
    match db.backend {
        "postgres" => assert_eq!(others_left, 0, "the other old partitions stay"),
        _ => assert_eq!(others_left, 2, "a partition dropped under a table's reader"),
    }
    assert_eq!(aged_left(db).await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
    drop(reader); // its transaction ends with its connection
}

/// A `DELETE` trigger on `log` writes each deleted row's id to an audit
/// table: a drop would fire none, so no partition is dropped and the
/// trigger sees every aged row.
async fn a_delete_trigger_keeps_every_partition(db: &TestDb) {
    create_log(db).await;
    let statements: &[&str] = match db.backend {
        "postgres" => &[
            "CREATE TABLE audit (id BIGINT NOT NULL)",
            "CREATE FUNCTION audit_delete() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN INSERT INTO audit VALUES (OLD.id); RETURN OLD; END $$",
            "CREATE TRIGGER log_audit AFTER DELETE ON log FOR EACH ROW EXECUTE FUNCTION audit_delete()",
        ],
        _ => &[
            "CREATE TABLE audit (id BIGINT NOT NULL)",
            "CREATE TRIGGER log_audit AFTER DELETE ON log FOR EACH ROW INSERT INTO audit VALUES (OLD.id)",
        ],
    };
    for sql in statements {
        db.execute(sql).await;
    }
    let done = delete_aged(db, &[]);
    assert_eq!(done, AGED);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM audit").await, AGED);
    for kept in ["log_2019", "log_2020", "log_2021"] {
        assert!(exists(db, kept).await, "{kept} was dropped");
    }
    assert_eq!(aged_left(db).await, 0);
}

/// Worker processes SIGKILLed after the first drop, after the last drop
/// and midway through the rows deleted one by one (`log_recent` given
/// 20,000 more aged rows): each new worker takes over from what the last
/// one committed, and at the end the operation has counted every aged row
/// once — a drop recorded twice, or not at all, would show — and exactly
/// the aged rows are gone.
async fn workers_killed_between_drops_and_deletes_count_every_aged_row_once(db: &TestDb) {
    create_log(db).await;
    add_aged_recent(db).await;
    let aged = AGED + 20_000;
    let enqueued = sluice(db, &enqueue_aged(&["--sub-batch-size", "100", "--json"]));
    assert!(enqueued.status.success(), "{enqueued:?}");
    let id = serde_json::from_slice::<serde_json::Value>(&enqueued.stdout).unwrap()["id"]
        .as_i64()
        .unwrap();
    let worker = || spawn_worker(db, &["--node", "partition-worker", "--lease-ttl", "1s"]);
    let aged_recent = format!("{} AND id > 40000", older_than(db, 30));
    for (moment, partitions) in [
        ("the first drop", &["log_2019"][..]),
        ("the last drop", &["log_2019", "log_2020", "log_2021"][..]),
    ] {
        let mut child = worker();
        common::until_within(moment, Duration::from_secs(120), || async {
            exist(db, partitions).await == 0
        })
        .await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
    }
    let mut child = worker();
    common::until_within(
        "half the rows one by one",
        Duration::from_secs(120),
        || async { rows_in(db, "log_recent", &aged_recent).await < 10_000 },
    )
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let _last = worker();
    common::until_within(
        "the operation finishes after the kills",
        Duration::from_secs(300),
        || async {
            db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
        },
    )
    .await;
    let state = db.store.operation(id).await.unwrap().state;
    assert_eq!(state.rows_done, aged, "every aged row counted once");
    assert_eq!(aged_left(db).await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
}

/// A table pg_partman manages: with no retention, or one that drops old
/// partitions, Sluice drops the partitions wholly older than the cutoff
/// and never the ones pg_partman made ahead of time; with a retention
/// that keeps retired partitions as tables (`retention_keep_table`), it
/// drops none and deletes their rows one by one, and `plan` says why.
/// Skipped where the extension is not installed (`.ci/run` installs it).
async fn pg_partmans_retention_decides_whether_partitions_drop(db: &TestDb) {
    let available = db
        .scalar("SELECT COUNT(*) FROM pg_available_extensions WHERE name = 'pg_partman'")
        .await;
    if available == 0 {
        eprintln!("pg_partman is not installed: skipped");
        return;
    }
    let schema = db.schema.clone().unwrap();
    let partman = format!("{schema}_partman");
    for sql in [
        // One pg_partman a database: a run that failed half-way left its own.
        "DROP EXTENSION IF EXISTS pg_partman CASCADE".to_owned(),
        format!("CREATE SCHEMA {partman}"),
        format!("CREATE EXTENSION pg_partman SCHEMA {partman}"),
        "CREATE TABLE pm (id BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL, \
         PRIMARY KEY (id, at)) PARTITION BY RANGE (at)"
            .to_owned(),
        format!(
            "SELECT {partman}.create_parent('{schema}.pm', 'at', 'native', 'monthly', \
             p_premake := 2, p_start_partition := to_char(now() - interval '5 months', 'YYYY-MM-01'))"
        ),
        "CREATE INDEX pm_at ON pm (at)".to_owned(),
        "INSERT INTO pm SELECT g, now() - g * interval '1 hour' FROM generate_series(1, 3000) g"
            .to_owned(),
        format!(
            "UPDATE {partman}.part_config SET retention = '1 month', retention_keep_table = true \
             WHERE parent_table = '{schema}.pm'"
        ),
    ] {
        db.execute(&sql).await;
    }
    let partitions = || async {
        db.scalar(&format!(
            "SELECT COUNT(*) FROM pg_catalog.pg_inherits WHERE inhparent = '{schema}.pm'::regclass"
        ))
        .await
    };
    let before = partitions().await;
    let aged = |older_than: &'static str| {
        vec![
            "enqueue",
            "delete-aged-rows",
            "--table",
            "pm",
            "--column",
            "at",
            "--key",
            "id,at",
            "--older-than",
            older_than,
        ]
    };
    let mut plan = aged("40d");
    plan[0] = "plan";
    plan.push("--no-probe");
    let planned = sluice(db, &plan);
    let planned = String::from_utf8_lossy(&planned.stdout);
    assert!(
        planned.contains("none dropped: pg_partman manages it"),
        "{planned}"
    );
    for command in [aged("40d"), vec!["run", "--until-idle"]] {
        let done = sluice(db, &command);
        assert!(done.status.success(), "{command:?}: {done:?}");
    }
    assert_eq!(
        partitions().await,
        before,
        "a partition pg_partman keeps was dropped"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM pm WHERE at < now() - interval '40 days'")
            .await,
        0
    );

    // Retention that drops: Sluice's drops are pg_partman's own kind.
    db.execute(&format!(
        "UPDATE {partman}.part_config SET retention_keep_table = false WHERE parent_table = '{schema}.pm'"
    ))
    .await;
    db.execute("INSERT INTO pm SELECT 10000 + g, now() - interval '100 days' - g * interval '1 hour' FROM generate_series(1, 1000) g")
        .await;
    for command in [aged("30d"), vec!["run", "--until-idle"]] {
        let done = sluice(db, &command);
        assert!(done.status.success(), "{command:?}: {done:?}");
    }
    assert!(partitions().await < before, "no partition was dropped");
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM pm WHERE at < now() - interval '30 days'")
            .await,
        0
    );
    let premade = db
        .scalar(&format!(
            "SELECT COUNT(*) FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = '{schema}.pm'::regclass AND c.relname >= 'pm_p' || to_char(now(), 'YYYY_MM')"
        ))
        .await;
    assert_eq!(premade, 3, "this month's and the two made ahead stay");
    db.execute(&format!("DROP SCHEMA {partman} CASCADE")).await;
}

/// MariaDB's drop commits on its own, so a worker records its intent to
/// drop a partition first and settles it after. Here a worker dies between
/// the two, once after its drop of `log_2019` (the partition gone, its rows
/// not counted yet) and once before its drop of `log_2020` (the partition
/// still there). The worker that takes the batch over settles the intent
/// from the catalogue, and the operation ends having counted every aged row
/// once — a drop counted twice, or not at all, would show — with no intent
/// left behind.
async fn a_drop_intent_left_by_a_dead_worker_is_settled_once(db: &TestDb) {
    for (partition, dropped) in [("log_2019", true), ("log_2020", false)] {
        db.execute("DROP TABLE IF EXISTS log").await;
        create_log(db).await;
        let enqueued = sluice(db, &enqueue_aged(&["--sub-batch-size", "150", "--json"]));
        assert!(enqueued.status.success(), "{enqueued:?}");
        let id = serde_json::from_slice::<serde_json::Value>(&enqueued.stdout).unwrap()["id"]
            .as_i64()
            .unwrap();
        // The dead worker: its claims expire at once.
        let gone = Duration::from_millis(1);
        let lease = db
            .store
            .claim_operations("dead-worker", 10, gone)
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.record.id == id)
            .and_then(|c| c.record.lease)
            .unwrap();
        db.store.plan_batch(&lease, None, 150).await.unwrap();
        let batch = db
            .store
            .claim_batches("dead-worker", Some(id), 1, gone)
            .await
            .unwrap()
            .remove(0)
            .lease()
            .unwrap();
        let intent = DropIntent {
            partition: partition.into(),
            rows: rows_in(db, partition, "1 = 1").await,
        };
        db.store.intend_drop(&batch, None, &intent).await.unwrap();
        if dropped {
            db.execute(&format!("ALTER TABLE log DROP PARTITION {partition}"))
                .await;
        }

        let ran = sluice(db, &["run", "--until-idle"]);
        assert!(ran.status.success(), "{ran:?}");
        let state = db.store.operation(id).await.unwrap().state;
        assert_eq!(state.status, OperationStatus::Finished);
        assert_eq!(state.rows_done, AGED, "{partition}: every aged row once");
        assert_eq!(aged_left(db).await, 0);
        assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
        assert_eq!(exist(db, &["log_2019", "log_2020", "log_2021"]).await, 0);
        assert_eq!(
            db.scalar("SELECT COUNT(*) FROM sluice_batches WHERE pending_drop IS NOT NULL")
                .await,
            0,
            "an intent was left"
        );
    }
}

/// `delete-aged-rows --undo`: on PostgreSQL the partitions of 2019–2021 are
/// detached and kept beside the undo table (renamed, not dropped) and the
/// other aged rows move into it; on MariaDB every aged row moves. Workers
/// are SIGKILLed during the delete and during its revert; after the revert
/// every row of `log` is back as it was (compared row by row), and the
/// partitions are attached under their names again.
async fn undo_keeps_aged_partitions_and_a_revert_puts_every_row_back(db: &TestDb) {
    create_log(db).await;
    add_aged_recent(db).await;
    let aged = AGED + 20_000;
    let keeps = db.backend == "postgres";
    let every_row = || async {
        db.texts(match db.backend {
            "postgres" => "SELECT id || '|' || at || '|' || note FROM log ORDER BY id, at",
            _ => "SELECT CONCAT_WS('|', id, at, note) FROM log ORDER BY id, at",
        })
        .await
    };
    let before = every_row().await;
    let mut plan = enqueue_aged(&["--undo", "--no-probe"]);
    plan[0] = "plan";
    let planned = String::from_utf8_lossy(&sluice(db, &plan).stdout).into_owned();
    assert_eq!(planned.contains("detaches and keeps"), keeps, "{planned}");
    assert!(!planned.contains("drops"), "{planned}");
    // A library caller's plan says the same.
    let registry = Registry::with_builtins();
    let asked = json!({"table": "log", "column": "at", "key": "id,at",
        "older_than": "30d", "undo": true, "keep_undo": "7d"});
    let arguments = registry
        .arguments_at("delete-aged-rows", &db.store, asked, Utc::now())
        .await
        .unwrap();
    let planned = sluice_operations::plan(
        &db.store,
        &registry,
        "delete-aged-rows",
        &arguments,
        &EnqueueOptions::default(),
        false,
    )
    .await
    .unwrap();
    let kept = planned
        .partitions
        .as_ref()
        .map(|p| (p.kept, p.dropped.len()));
    let expected = keeps.then_some((true, 3));
    assert_eq!((kept, planned.rows_in_scope.rows), (expected, Some(aged)));

    let enqueued = sluice(
        db,
        &enqueue_aged(&["--undo", "--sub-batch-size", "100", "--json"]),
    );
    let id = json(&enqueued)["id"].as_i64().unwrap();
    let worker = || spawn_worker(db, &["--node", "undo-worker", "--lease-ttl", "1s"]);
    let aged_recent = format!("{} AND id > 40000", older_than(db, 30));
    let mut child = worker();
    if keeps {
        common::until_within(
            "the first kept partition",
            Duration::from_secs(120),
            || async { !exists(db, "log_2019").await },
        )
        .await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        child = worker();
    }
    common::until_within("half the rows moved", Duration::from_secs(120), || async {
        rows_in(db, "log_recent", &aged_recent).await < 10_000
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let finished = |id: i64| async move {
        db.store.operation(id).await.unwrap().state.status == OperationStatus::Finished
    };
    let mut child = worker();
    common::until_within("the delete finishes", Duration::from_secs(300), || {
        finished(id)
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(db.store.operation(id).await.unwrap().state.rows_done, aged);
    assert_eq!(aged_left(db).await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    let kept = shown["undo"]["kept_partitions"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(kept, if keeps { 3 } else { 0 }, "{shown}");
    for partition in ["log_2019", "log_2020", "log_2021"] {
        assert_eq!(exists(db, partition).await, !keeps, "{partition}");
    }
    if keeps {
        assert_eq!(shown["undo"]["kept_partition_rows"], 3_000, "{shown}");
        assert_eq!(shown["undo"]["rows"], aged - 3_000, "{shown}");
    }

    // The revert: PostgreSQL attaches the partitions back as it enqueues.
    let revert = json(&sluice(db, &["revert", &id.to_string(), "--json"]))["id"]
        .as_i64()
        .unwrap();
    for partition in ["log_2019", "log_2020", "log_2021"] {
        assert!(exists(db, partition).await, "{partition} is back");
    }
    let mut child = worker();
    common::until_within("half the rows back", Duration::from_secs(120), || async {
        rows_in(db, "log_recent", &aged_recent).await > 10_000
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    let mut child = worker();
    common::until_within("the revert finishes", Duration::from_secs(300), || {
        finished(revert)
    })
    .await;
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(every_row().await, before, "every row back, as it was");
    if keeps {
        let attached = db
            .scalar(
                "SELECT COUNT(*) FROM pg_catalog.pg_inherits WHERE inhparent = 'log'::regclass \
                 AND inhrelid::regclass::text LIKE '%log_20%'",
            )
            .await;
        assert_eq!(attached, 3, "attached to log again");
    }
}

/// `sluice prune` drops the partitions a `delete-aged-rows --undo` kept,
/// and their record, with its undo table, once its keep has passed.
async fn prune_drops_the_partitions_an_undo_kept(db: &TestDb) {
    create_log(db).await;
    let enqueued = sluice(
        db,
        &enqueue_aged(&["--undo", "--keep-undo", "1ms", "--json"]),
    );
    let id = json(&enqueued)["id"].as_i64().unwrap();
    common::succeeded(&sluice(db, &["run", "--until-idle"]));
    let shown = json(&sluice(db, &["show", &id.to_string(), "--json"]));
    let undo = shown["undo"]["table"].as_str().unwrap().to_owned();
    let undo = undo.rsplit('.').next().unwrap().to_owned();
    let beside = format!(
        "SELECT COUNT(*) FROM pg_catalog.pg_class WHERE relkind IN ('r', 'p') \
         AND relname LIKE '{undo}%'"
    );
    // The undo table, its record of kept partitions, and three of them.
    assert_eq!(db.scalar(&beside).await, 5, "{shown}");
    let pruned = json(&sluice(db, &["prune", "--older-than", "90d", "--json"]));
    assert_eq!(
        pruned["undo_tables_dropped"][0]["operation"], id,
        "{pruned}"
    );
    assert_eq!(db.scalar(&beside).await, 0, "nothing kept is left");
    assert_eq!(aged_left(db).await, 0);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
}

/// A row written into the default partition, in the range of a partition
/// an undo kept, makes PostgreSQL refuse to attach it back: the revert
/// fails naming the kept table, attaches none of what is left, moves no
/// row back; once the row is gone, `revert` again attaches the rest.
async fn a_revert_refused_an_attach_names_the_kept_table_and_tries_again(db: &TestDb) {
    create_log(db).await;
    let before = db.scalar("SELECT COUNT(*) FROM log").await;
    let enqueued = sluice(db, &enqueue_aged(&["--undo", "--json"]));
    let id = json(&enqueued)["id"].as_i64().unwrap();
    common::succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG);
    // log_2019's range is detached: this row goes to the default partition.
    db.execute("INSERT INTO log (id, at) VALUES (50001, '2019-01-01 00:00:00+00')")
        .await;
    let refused = sluice(db, &["revert", &id.to_string()]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("log_undo_"), "names the kept table: {said}");
    assert!(said.contains("sluice revert"), "{said}");
    assert!(!exists(db, "log_2019").await, "not attached");
    assert_eq!(
        exist(db, &["log_2020", "log_2021"]).await,
        0,
        "nor the rest"
    );
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, YOUNG + 1);
    let listed = json(&sluice(db, &["list", "--json"]));
    assert_eq!(
        listed.as_array().unwrap().len(),
        1,
        "no revert enqueued: {listed}"
    );

    db.execute("DELETE FROM log WHERE id = 50001").await;
    common::succeeded(&sluice(db, &["revert", &id.to_string()]));
    common::succeeded(&sluice(db, &["run", "--until-idle"]));
    assert_eq!(db.scalar("SELECT COUNT(*) FROM log").await, before);
    assert_eq!(exist(db, &["log_2019", "log_2020", "log_2021"]).await, 3);
}

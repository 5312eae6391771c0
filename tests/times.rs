//! A time bound deletes exactly the rows older than it, whatever the column
//! holds: on SQLite text in each format SQLite and ISO-8601 write (with a
//! separator `T` or a space, a fraction, an offset), on PostgreSQL a
//! `timestamptz`, a `timestamp` read in UTC and one read in another zone,
//! on MySQL a `DATETIME` (whole seconds and microseconds) and a `TIMESTAMP`.
//! Rows lie one second, one hour and one day on each side of the cutoff and
//! exactly on it. A column that is not one known format is refused at
//! enqueue, naming it and the formats seen, and nothing changes.

mod common;

use std::time::Duration;

use chrono::{DateTime, FixedOffset, Utc};
use common::TestDb;
use serde_json::json;
use sluice_operations::{EnqueueOptions, Filter, Operation, OperationError, Registry, Shape};
use sluice_runtime::{RuntimeBuilder, RuntimeConfig};
use sluice_store::Store;
use sluice_target::ConnectOptions;

for_each_backend!(
    a_time_bound_deletes_exactly_the_older_rows_in_every_format,
    a_time_column_in_no_single_known_format_is_refused_and_nothing_changes,
    a_date_is_older_than_the_cutoff_only_when_its_whole_day_is,
);

postgres_only!(a_timestamp_without_time_zone_is_read_in_the_store_time_zone,);

/// Deletes the rows of `table` whose `done_at` is before `before`, walking
/// the index on `done_at` (a loop), so the comparison must use it.
struct DeleteBefore;

#[derive(serde::Serialize, serde::Deserialize)]
struct Before {
    table: String,
    before: DateTime<Utc>,
}

#[async_trait::async_trait]
impl Operation for DeleteBefore {
    type Arguments = Before;

    fn kind(&self) -> &'static str {
        "delete-before"
    }

    fn shape(&self, args: &Before) -> Result<Shape, OperationError> {
        Shape::loop_until_done(&args.table, "id")?.scope(Filter::new().lt("done_at", args.before))
    }

    async fn run(
        &self,
        _: &Before,
        batch: &mut sluice_operations::SubBatch<'_>,
    ) -> Result<u64, OperationError> {
        batch.delete().await
    }
}

/// The cutoff every test compares with.
fn cutoff() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2025-07-01T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// Seconds from the cutoff of each row, by id: ids 1–3 are older, 4 is the
/// cutoff itself (not older), 5–7 younger.
const OFFSETS: [i64; 7] = [-86_400, -3_600, -1, 0, 1, 3_600, 86_400];

/// Creates `table (id, done_at <column_type>)` with an index on `done_at`
/// and one row per [`OFFSETS`], `done_at` written by `write`.
async fn create_rows(
    db: &TestDb,
    table: &str,
    column_type: &str,
    write: impl Fn(DateTime<Utc>) -> String,
) {
    db.execute(&format!(
        "CREATE TABLE {table} (id BIGINT PRIMARY KEY, done_at {column_type} NOT NULL)"
    ))
    .await;
    db.execute(&format!(
        "CREATE INDEX {table}_done_at ON {table} (done_at)"
    ))
    .await;
    for (id, offset) in (1..).zip(OFFSETS) {
        let value = write(cutoff() + chrono::Duration::seconds(offset));
        db.execute(&format!(
            "INSERT INTO {table} (id, done_at) VALUES ({id}, {value})"
        ))
        .await;
    }
}

/// Enqueues [`DeleteBefore`] on `table` through `store`.
async fn enqueue(store: &Store, table: &str) -> Result<i64, OperationError> {
    let mut registry = Registry::new();
    registry.register(DeleteBefore);
    let options = EnqueueOptions {
        batch_size: 2,
        sub_batch_size: 2,
        ..EnqueueOptions::default()
    };
    let arguments = json!({ "table": table, "before": cutoff() });
    let enqueued =
        sluice_operations::enqueue(store, &registry, "delete-before", &arguments, &options).await?;
    Ok(enqueued.id)
}

/// Runs every enqueued operation of `store` to its end.
async fn run_all(store: &Store) {
    let runtime = RuntimeBuilder::with_store(store.clone())
        .config(RuntimeConfig {
            node: "times".into(),
            reconcile_interval: Duration::from_millis(20),
            ..RuntimeConfig::default()
        })
        .without_builtin_indicators()
        .register(DeleteBefore)
        .start()
        .await
        .unwrap();
    let left = runtime.run_until_idle().await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    runtime.shutdown().await.unwrap();
}

/// The ids left in `table`.
async fn ids_left(db: &TestDb, table: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    for id in 1..=OFFSETS.len() as i64 {
        if db
            .scalar(&format!("SELECT COUNT(*) FROM {table} WHERE id = {id}"))
            .await
            == 1
        {
            ids.push(id);
        }
    }
    ids
}

/// Each format in a table of its own; one operation per table; afterwards
/// exactly the cutoff's row and the younger ones are left in each.
async fn a_time_bound_deletes_exactly_the_older_rows_in_every_format(db: &TestDb) {
    type Write = fn(DateTime<Utc>) -> String;
    let formats: Vec<(&str, &str, Write)> = if db.backend == "sqlite" {
        vec![
            ("lite_plain", "TEXT", |at| {
                format!("'{}'", at.format("%Y-%m-%d %H:%M:%S"))
            }),
            ("lite_fraction", "TEXT", |at| {
                format!("'{}'", at.format("%Y-%m-%d %H:%M:%S%.3f"))
            }),
            ("lite_now", "TEXT", |at| {
                // What `datetime(…)` and `CURRENT_TIMESTAMP` write.
                format!("datetime({}, 'unixepoch')", at.timestamp())
            }),
            ("iso_offset", "TEXT", |at| format!("'{}'", at.to_rfc3339())),
            ("iso_zulu", "TEXT", |at| {
                format!("'{}'", at.format("%Y-%m-%dT%H:%M:%SZ"))
            }),
            ("iso_micros", "DATETIME", |at| {
                format!("'{}'", at.format("%Y-%m-%dT%H:%M:%S%.6f"))
            }),
            ("iso_paris", "TEXT", |at| {
                let paris = FixedOffset::east_opt(2 * 3_600).unwrap();
                format!("'{}'", at.with_timezone(&paris).to_rfc3339())
            }),
        ]
    } else if db.backend == "mysql" {
        // Sessions read times in UTC, so a TIMESTAMP is an instant too.
        vec![
            ("my_datetime", "DATETIME", |at| {
                format!("TIMESTAMP '{}'", at.format("%Y-%m-%d %H:%M:%S"))
            }),
            ("my_datetime_micros", "DATETIME(6)", |at| {
                format!("TIMESTAMP '{}'", at.format("%Y-%m-%d %H:%M:%S%.6f"))
            }),
            ("my_timestamp", "TIMESTAMP(6)", |at| {
                format!("TIMESTAMP '{}'", at.format("%Y-%m-%d %H:%M:%S%.6f"))
            }),
        ]
    } else {
        vec![
            ("pg_timestamptz", "TIMESTAMPTZ", |at| {
                format!("'{}'::timestamptz", at.to_rfc3339())
            }),
            ("pg_timestamp", "TIMESTAMP", |at| {
                format!("'{}'::timestamp", at.naive_utc())
            }),
            ("pg_timestamptz_paris", "TIMESTAMPTZ", |at| {
                let paris = FixedOffset::east_opt(2 * 3_600).unwrap();
                format!("'{}'::timestamptz", at.with_timezone(&paris).to_rfc3339())
            }),
        ]
    };
    for (table, column_type, write) in &formats {
        create_rows(db, table, column_type, write).await;
        enqueue(&db.store, table)
            .await
            .unwrap_or_else(|e| panic!("{table}: {e}"));
    }
    run_all(&db.store).await;
    for (table, _, _) in &formats {
        assert_eq!(
            ids_left(db, table).await,
            [4, 5, 6, 7],
            "{table}: exactly the older rows go"
        );
    }
}

/// Mixed formats, text that names no time and numbers are each refused
/// with the column, the formats seen and what to do; no row and no
/// operation is written.
async fn a_time_column_in_no_single_known_format_is_refused_and_nothing_changes(db: &TestDb) {
    if db.backend == "postgres" {
        // PostgreSQL compares in the column's type: text is refused by the planner.
        create_rows(db, "as_text", "TEXT", |at| format!("'{}'", at.to_rfc3339())).await;
        let refused = enqueue(&db.store, "as_text").await.unwrap_err().to_string();
        assert!(
            refused.contains("text < timestamp with time zone"),
            "{refused}"
        );
    } else if db.backend == "mysql" {
        // `delete-aged-rows` on a text column: one ISO-8601 style in UTC,
        // or refused naming the value in another.
        for (table, other) in [
            ("spaced", "2025-07-01 02:00:00"),
            ("zoned", "2025-07-01T02:00:00+02:00"),
        ] {
            db.execute(&format!(
                "CREATE TABLE {table} (id BIGINT PRIMARY KEY, done_at VARCHAR(40) NOT NULL)"
            ))
            .await;
            db.execute(&format!(
                "CREATE INDEX {table}_done_at ON {table} (done_at)"
            ))
            .await;
            db.execute(&format!(
                "INSERT INTO {table} VALUES (1, '2025-07-01T01:00:00Z'), (2, '{other}')"
            ))
            .await;
            let refused = sluice_operations::DeleteAgedRows::arguments(
                &db.store,
                table,
                "done_at",
                "id",
                Duration::from_secs(86_400),
                Utc::now(),
            )
            .await
            .unwrap_err()
            .to_string();
            // Whichever value it read first, the other is in another style.
            assert!(
                refused.contains(&format!("holds `{other}`, in another style"))
                    || refused.contains("holds `2025-07-01T01:00:00Z`, in another style"),
                "{table}: {refused}"
            );
            assert_eq!(db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await, 2);
        }
    } else {
        // (table, what the refusal says, how a row's time is written, what it names)
        type Case = (
            &'static str,
            &'static str,
            fn(i64) -> String,
            &'static [&'static str],
        );
        let cases: [Case; 3] = [
            (
                "mixed",
                "more than one format",
                |id| {
                    let at = cutoff() + chrono::Duration::hours(id);
                    if id % 2 == 0 {
                        format!("'{}'", at.format("%Y-%m-%d %H:%M:%S"))
                    } else {
                        format!("'{}'", at.to_rfc3339())
                    }
                },
                &[
                    "SQLite's `YYYY-MM-DD HH:MM:SS`",
                    "ISO-8601 with `T` and an offset",
                ],
            ),
            (
                "unknown",
                "no time format",
                |id| {
                    if id == 3 {
                        "'yesterday'".into()
                    } else {
                        format!("'2025-07-0{id}'")
                    }
                },
                &["`yesterday`", "`2025-07-01` (a date)"],
            ),
            (
                "numbers",
                "not text",
                |id| (1_751_328_000 + id).to_string(),
                &["(integer)", "cutoff.timestamp()"],
            ),
        ];
        for (table, problem, write, named) in cases {
            // A DATETIME column keeps numbers as numbers (numeric affinity).
            db.execute(&format!(
                "CREATE TABLE {table} (id BIGINT PRIMARY KEY, done_at DATETIME NOT NULL)"
            ))
            .await;
            db.execute(&format!(
                "CREATE INDEX {table}_done_at ON {table} (done_at)"
            ))
            .await;
            for id in 1..=4 {
                db.execute(&format!(
                    "INSERT INTO {table} (id, done_at) VALUES ({id}, {})",
                    write(id)
                ))
                .await;
            }
            let refused = enqueue(&db.store, table).await.unwrap_err().to_string();
            assert!(
                refused.contains(&format!("column `done_at` of `{table}`")),
                "{refused}"
            );
            assert!(refused.contains(problem), "{table}: {refused}");
            for name in named {
                assert!(refused.contains(name), "{table}: {name} in {refused}");
            }
            assert_eq!(db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await, 4);
        }
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
}

/// A date names a whole day, any time of which its row may have been
/// written: `delete-aged-rows --older-than 1d` deletes the rows dated before
/// the cutoff's own day and keeps that day's (some of which are younger than
/// a day). PostgreSQL and MySQL `DATE`, SQLite text dates.
async fn a_date_is_older_than_the_cutoff_only_when_its_whole_day_is(db: &TestDb) {
    let date_type = match db.backend {
        "sqlite" => "TEXT",
        _ => "DATE",
    };
    let cutoff_day = || (Utc::now() - chrono::Duration::days(1)).date_naive();
    // Twice at most: once more if midnight (UTC) passed during the first.
    for attempt in 0..2 {
        let table = format!("days_{attempt}");
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, d {date_type} NOT NULL)"
        ))
        .await;
        db.execute(&format!("CREATE INDEX {table}_d ON {table} (d)"))
            .await;
        let day = cutoff_day();
        for (id, offset) in [(1, -2), (2, -1), (3, 0), (4, 1)] {
            let date = (day + chrono::Duration::days(offset)).format("%Y-%m-%d");
            let literal = match db.backend {
                "postgres" => format!("DATE '{date}'"),
                "mysql" => format!("DATE '{date}'"),
                _ => format!("'{date}'"),
            };
            db.execute(&format!(
                "INSERT INTO {table} (id, d) VALUES ({id}, {literal})"
            ))
            .await;
        }
        common::succeeded(&common::sluice(
            db,
            &[
                "enqueue",
                "delete-aged-rows",
                "--table",
                &table,
                "--column",
                "d",
                "--older-than",
                "1d",
            ],
        ));
        if cutoff_day() != day {
            continue;
        }
        common::succeeded(&common::sluice(db, &["run", "--until-idle"]));
        let left = db
            .scalar(&format!("SELECT COUNT(*) FROM {table} WHERE id IN (3, 4)"))
            .await;
        assert_eq!(left, 2, "the cutoff's own day and the next stay");
        assert_eq!(
            db.scalar(&format!("SELECT COUNT(*) FROM {table}")).await,
            2,
            "the days before the cutoff's go"
        );
        return;
    }
    panic!("midnight passed twice");
}

/// A `timestamp` column holding Paris wall-clock times, compared through a
/// store whose sessions read it in `Europe/Paris`: exactly the older rows
/// go. The same rows through a UTC store would be two hours off, so the
/// setting is what decides.
async fn a_timestamp_without_time_zone_is_read_in_the_store_time_zone(db: &TestDb) {
    create_rows(db, "paris_clock", "TIMESTAMP", |at| {
        let paris = FixedOffset::east_opt(2 * 3_600).unwrap();
        format!("'{}'::timestamp", at.with_timezone(&paris).naive_local())
    })
    .await;
    let unknown = Store::connect_with(
        &db.url,
        &ConnectOptions {
            time_zone: Some("Mars/Olympus_Mons".into()),
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(unknown.contains("Mars/Olympus_Mons"), "{unknown}");
    let paris = Store::connect_with(
        &db.url,
        &ConnectOptions {
            time_zone: Some("Europe/Paris".into()),
            ..ConnectOptions::default()
        },
    )
    .await
    .unwrap();
    enqueue(&paris, "paris_clock").await.unwrap();
    run_all(&paris).await;
    assert_eq!(ids_left(db, "paris_clock").await, [4, 5, 6, 7]);
    paris.close().await;
}

/// Any instant in any known format, compared with any bound by any of the
/// four order operators on SQLite: the rows the filter selects are exactly
/// those whose instant (to SQLite's millisecond) stands in that relation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite_every_format_and_operator_selects_exactly_the_rows_in_relation() {
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use sluice_target::Statement;

    let db = TestDb::sqlite().await;
    db.execute("CREATE TABLE stamps (id INTEGER PRIMARY KEY, at TEXT NOT NULL)")
        .await;
    db.execute("CREATE INDEX stamps_at ON stamps (at)").await;
    // Milliseconds around the cutoff (±3 days), a format, an offset in minutes.
    let row = (-259_200_000i64..259_200_000, 0usize..6, -840i32..=840);
    // The bound: a row's instant moved by under a millisecond either way,
    // so sub-millisecond rounding is what decides.
    let trial = (
        prop::collection::vec(row, 1..40),
        any::<prop::sample::Index>(),
        -999i64..=999,
    );
    let mut runner = TestRunner::default();
    for _ in 0..64 {
        let (rows, pick, micros) = trial.new_tree(&mut runner).unwrap().current();
        db.execute("DELETE FROM stamps").await;
        let mut instants = Vec::new();
        for (id, (millis, format, minutes)) in (1..).zip(&rows) {
            let at = cutoff() + chrono::Duration::milliseconds(*millis);
            let zone = FixedOffset::east_opt(minutes * 60).unwrap();
            let local = at.with_timezone(&zone);
            let text = match format {
                0 => at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                1 => at.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
                2 => local.format("%Y-%m-%dT%H:%M:%S%.3f%:z").to_string(),
                3 => local.format("%Y-%m-%d %H:%M:%S%.3f%:z").to_string(),
                4 => at.format("%Y-%m-%dT%H:%M:%S%.3f").to_string(),
                _ => local.format("%Y-%m-%dT%H:%M:%S%.3f%:z").to_string(),
            };
            db.execute(&format!("INSERT INTO stamps VALUES ({id}, '{text}')"))
                .await;
            instants.push(at);
        }
        let bound = *pick.get(&instants) + chrono::Duration::microseconds(micros);
        type Relation = (
            &'static str,
            fn(Filter, DateTime<Utc>) -> Filter,
            fn(&DateTime<Utc>, &DateTime<Utc>) -> bool,
        );
        let relations: [Relation; 4] = [
            ("<", |f, b| f.lt("at", b), |a, b| a < b),
            ("<=", |f, b| f.le("at", b), |a, b| a <= b),
            (">", |f, b| f.gt("at", b), |a, b| a > b),
            (">=", |f, b| f.ge("at", b), |a, b| a >= b),
        ];
        for (name, filter, holds) in relations {
            let shape = Shape::range("stamps", "id")
                .unwrap()
                .scope(filter(Filter::new(), bound))
                .unwrap()
                .for_dialect(&sluice_target::dialect::SQLITE)
                .unwrap();
            let count = shape
                .filter()
                .and_to(Statement::new("SELECT COUNT(*) FROM stamps WHERE 1 = 1"));
            let selected = db.store.target().fetch_int(&count).await.unwrap().unwrap();
            let expected = instants.iter().filter(|a| holds(a, &bound)).count() as i64;
            assert_eq!(selected, expected, "{name} {bound}: {rows:?}");
        }
    }
}

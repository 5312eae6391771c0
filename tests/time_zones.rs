//! A time column without a zone (PostgreSQL `timestamp`, MySQL `DATETIME`)
//! on a server whose own sessions write another zone than UTC: an
//! application's `now()` stores that zone's wall-clock time there, which
//! Sluice's UTC sessions would misread by the offset — five hours behind
//! UTC, `--older-than 1h` would delete every row, a minute old or not.
//! `delete-aged-rows` is refused until the operator names the zone
//! (`--db-time-zone`), and then deletes exactly the rows older than asked.
//!
//! Its own test binary: on MariaDB the sessions' default zone is a global
//! setting, which this test changes (and sets back) while no other test
//! runs. On PostgreSQL it is a database's own setting, in a database made
//! for the test.

mod common;

use common::{TestDb, postgres_url, servers_required, succeeded};
use sqlx::postgres::PgPoolOptions;

/// Five hours behind UTC all year, as each server and chrono-tz name it.
const MYSQL_ZONE: &str = "-05:00";
const IANA_ZONE: &str = "Etc/GMT+5";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_timestamp_written_in_the_database_s_zone_is_read_in_it() {
    let base = postgres_url();
    let admin = match PgPoolOptions::new().max_connections(1).connect(&base).await {
        Ok(pool) => pool,
        Err(e) if !servers_required() => {
            println!("skipped: no PostgreSQL at {base}: {e}");
            return;
        }
        Err(e) => panic!("server required but not reachable at {base}: {e}"),
    };
    let database = format!("sluice_zones_{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {database}"),
        format!("CREATE DATABASE {database}"),
        format!("ALTER DATABASE {database} SET timezone = '{IANA_ZONE}'"),
    ] {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&admin)
            .await
            .unwrap();
    }
    let url = match base.rsplit_once('/') {
        Some((server, _)) => format!("{server}/{database}"),
        None => unreachable!("a PostgreSQL URL names its database"),
    };
    let target = PgPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap();
    // What an application's `now()` writes in this database: its wall
    // clock (this session's own zone is UTC: sqlx sets it).
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE visits (id BIGINT PRIMARY KEY, at TIMESTAMP NOT NULL); \
         CREATE INDEX visits_at ON visits (at); \
         INSERT INTO visits SELECT g, (now() AT TIME ZONE '{IANA_ZONE}') \
         - (g * 10 + 5) * interval '1 minute' FROM generate_series(0, 19) g"
    )))
    .execute(&target)
    .await
    .unwrap();
    refused_then_read_in_the_named_zone(&url, Counted::Postgres(&target)).await;
    target.close().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {database} WITH (FORCE)"
    )))
    .execute(&admin)
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql_a_datetime_written_in_the_server_s_zone_is_read_in_it() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    let was = db.text("SELECT CAST(@@global.time_zone AS CHAR)").await;
    // A run stopped midway left the test's zone set: the default was SYSTEM.
    let was = if was == MYSQL_ZONE {
        "SYSTEM".into()
    } else {
        was
    };
    db.execute(&format!("SET GLOBAL time_zone = '{MYSQL_ZONE}'"))
        .await;
    let db = std::sync::Arc::new(db);
    let test = tokio::spawn({
        let db = std::sync::Arc::clone(&db);
        async move {
            // What an application's `NOW()` writes on this server.
            db.execute(
                "CREATE TABLE visits (id BIGINT PRIMARY KEY, at DATETIME NOT NULL, KEY (at))",
            )
            .await;
            db.insert_series(
                "visits (id, at)",
                &format!(
                    "g - 1, CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', '{MYSQL_ZONE}') \
                     - INTERVAL ((g - 1) * 10 + 5) MINUTE"
                ),
                20,
                "",
            )
            .await;
            refused_then_read_in_the_named_zone(&db.url, Counted::MySql(&db)).await;
        }
    })
    .await;
    db.execute(&format!("SET GLOBAL time_zone = '{was}'")).await;
    if let Err(failed) = test {
        std::panic::resume_unwind(failed.into_panic());
    }
    if let Ok(db) = std::sync::Arc::try_unwrap(db) {
        db.cleanup().await;
    }
}

/// Where a test counts rows.
enum Counted<'a> {
    Postgres(&'a sqlx::PgPool),
    MySql(&'a TestDb),
}

impl Counted<'_> {
    /// The rows of `visits`, those under an hour old, the operations stored.
    async fn counts(&self) -> (i64, i64, i64) {
        let mut counts = [0; 3];
        for (count, sql) in counts.iter_mut().zip([
            "SELECT COUNT(*) FROM visits",
            "SELECT COUNT(*) FROM visits WHERE id < 6",
            "SELECT COUNT(*) FROM sluice_operations",
        ]) {
            *count = match self {
                Counted::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(*pool).await.unwrap(),
                Counted::MySql(db) => db.scalar(sql).await,
            };
        }
        (counts[0], counts[1], counts[2])
    }
}

/// `visits` holds 20 rows written 5, 15, … 195 minutes ago (ids 0 to 19)
/// in the zone five hours behind UTC. `delete-aged-rows --older-than 1h` is
/// first refused, naming the zone and its offset, with nothing written;
/// with `--db-time-zone` it deletes the 14 rows older than an hour.
async fn refused_then_read_in_the_named_zone(url: &str, target: Counted<'_>) {
    let delete = [
        "enqueue",
        "delete-aged-rows",
        "--table",
        "visits",
        "--column",
        "at",
        "--older-than",
        "1h",
    ];
    let refused = sluice_as_told(url, &delete);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    for part in [
        "`at` of `visits`",
        "UTC-05:00 now",
        "off by 5h",
        "--db-time-zone",
    ] {
        assert!(said.contains(part), "`{part}` in: {said}");
    }
    assert_eq!(
        target.counts().await,
        (20, 6, 0),
        "refused: nothing written"
    );

    let zoned = |args: &[&str]| {
        let mut all = vec!["--db-time-zone", IANA_ZONE];
        all.extend(args);
        sluice_as_told(url, &all)
    };
    succeeded(&zoned(&delete));
    succeeded(&zoned(&["run", "--until-idle"]));
    assert_eq!(
        target.counts().await,
        (6, 6, 1),
        "exactly the rows older than an hour in the zone they were written in"
    );
}

/// The `sluice` binary on `url` with `args` alone: no zone from the
/// environment (the shared helper says UTC for the other tests' fixtures).
fn sluice_as_told(url: &str, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(args)
        .env("SLUICE_DATABASE_URL", url)
        .env_remove("SLUICE_DB_TIME_ZONE")
        .output()
        .expect("run the sluice binary")
}

//! What a database's own sessions default to where Sluice's do not.
//!
//! A time column without a zone (PostgreSQL `timestamp`, MySQL `DATETIME`)
//! on a server whose own sessions write another zone than UTC: an
//! application's `now()` stores that zone's wall-clock time there, which
//! Sluice's UTC sessions would misread by the offset — five hours behind
//! UTC, `--older-than 1h` would delete every row, a minute old or not.
//! `delete-aged-rows` is refused until the operator names the zone
//! (`--db-time-zone`), and then deletes exactly the rows older than asked;
//! an operator's `--where` reading the clock (`now()`), which Sluice's
//! sessions would read in UTC, is refused likewise.
//!
//! On a PostgreSQL database whose sessions read dates day first
//! (`DateStyle` `ISO, DMY`), an operator's `'01/12/2025'` (the 1st of
//! December in psql) would be the 12th of January to Sluice's sessions
//! (sqlx's `ISO, MDY`): refused, while `'2025-12-01'` is accepted.
//!
//! A MariaDB server writing a statement-based binary log is refused: its
//! replicas would run a `DELETE … LIMIT` again and pick their own rows.
//!
//! Its own test binary: on MariaDB the sessions' default zone is a global
//! setting, which this test changes (and sets back) while no other test
//! runs. On PostgreSQL it is a database's own setting, in a database made
//! for the test.

mod common;

use common::{TestDb, postgres_url, servers_required, succeeded};
use sqlx::postgres::PgPoolOptions;

/// Held by a test while it changes a MariaDB global setting, which the
/// other test's sessions would take up.
static MYSQL_GLOBALS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Five hours behind UTC all year, as each server and chrono-tz name it.
const MYSQL_ZONE: &str = "-05:00";
const IANA_ZONE: &str = "Etc/GMT+5";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_timestamp_written_in_the_database_s_zone_is_read_in_it() {
    let Some(database) = PostgresDatabase::with("timezone", IANA_ZONE).await else {
        return;
    };
    // What an application's `now()` writes in this database: its wall
    // clock (this session's own zone is UTC: sqlx sets it).
    database
        .execute(&format!(
            "CREATE TABLE visits (id BIGINT PRIMARY KEY, at TIMESTAMP NOT NULL, \
             hits BIGINT NOT NULL DEFAULT 0); \
             CREATE INDEX visits_at ON visits (at); \
             INSERT INTO visits (id, at) SELECT g, (now() AT TIME ZONE '{IANA_ZONE}') \
             - (g * 10 + 5) * interval '1 minute' FROM generate_series(0, 19) g"
        ))
        .await;
    refused_then_read_in_the_named_zone(&database.url, Counted::Postgres(&database.pool)).await;
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_date_read_day_first_by_the_database_s_sessions_is_refused() {
    let Some(database) = PostgresDatabase::with("datestyle", "ISO, DMY").await else {
        return;
    };
    database
        .execute(
            "CREATE TABLE visits (id BIGINT PRIMARY KEY, at TIMESTAMP NOT NULL, \
             hits BIGINT NOT NULL DEFAULT 0); \
             INSERT INTO visits (id, at) SELECT g, TIMESTAMP '2025-01-01' + g * interval '1 month' \
             FROM generate_series(0, 23) g",
        )
        .await;
    refused(
        &database.url,
        &increment_where("at < '01/12/2025'"),
        &["'01/12/2025'", "day first", "ISO, DMY", "YYYY-MM-DD"],
    );
    let pool = &database.pool;
    let count = |sql: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sql)
            .fetch_one(pool)
            .await
            .unwrap()
    };
    assert_eq!(count("SELECT COUNT(*) FROM sluice_operations").await, 0);
    succeeded(&sluice_as_told(
        &database.url,
        &increment_where("at < '2025-12-01'"),
    ));
    succeeded(&sluice_as_told(&database.url, &["run", "--until-idle"]));
    assert_eq!(
        count("SELECT COUNT(*) FROM visits WHERE hits = 1").await,
        11,
        "January to November 2025"
    );
    assert_eq!(count("SELECT SUM(hits)::bigint FROM visits").await, 11);
    database.drop().await;
}

/// A MariaDB server writing a statement-based binary log: its replicas run
/// each statement again, where a `DELETE … LIMIT` picks its own rows.
/// Refused at enqueue, nothing written; the global setting is set back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql_a_statement_based_binary_log_is_refused() {
    let _globals = MYSQL_GLOBALS.lock().await;
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    if db.scalar("SELECT @@log_bin").await == 0 {
        println!("skipped: this MySQL server writes no binary log");
        return db.cleanup().await;
    }
    db.execute("CREATE TABLE visits (id BIGINT PRIMARY KEY, at DATETIME NOT NULL, KEY (at))")
        .await;
    db.execute("INSERT INTO visits VALUES (1, '2020-01-01'), (2, '2099-01-01')")
        .await;
    let was = db.text("SELECT CAST(@@global.binlog_format AS CHAR)").await;
    // A run stopped midway left the test's setting: CI's server logs rows.
    let was = if was == "STATEMENT" {
        "ROW".into()
    } else {
        was
    };
    db.execute("SET GLOBAL binlog_format = 'STATEMENT'").await;
    let url = db.url.clone();
    let tried = tokio::task::spawn_blocking(move || {
        refused(
            &url,
            &[
                "enqueue",
                "delete-aged-rows",
                "--table",
                "visits",
                "--column",
                "at",
                "--older-than",
                "1d",
            ],
            &["binlog_format = STATEMENT", "MIXED or ROW"],
        )
    })
    .await;
    db.execute(&format!("SET GLOBAL binlog_format = '{was}'"))
        .await;
    if let Err(failed) = tried {
        std::panic::resume_unwind(failed.into_panic());
    }
    assert_eq!(db.scalar("SELECT COUNT(*) FROM visits").await, 2);
    assert_eq!(db.scalar("SELECT COUNT(*) FROM sluice_operations").await, 0);
    db.cleanup().await;
}

/// A PostgreSQL database of a test's own, whose sessions default to one
/// setting of the test's.
struct PostgresDatabase {
    admin: sqlx::PgPool,
    name: String,
    url: String,
    pool: sqlx::PgPool,
}

impl PostgresDatabase {
    /// A fresh database with `setting` set to `value` for its sessions, or
    /// `None` (after saying so) when the server is unreachable and servers
    /// are not required.
    async fn with(setting: &str, value: &str) -> Option<Self> {
        let base = postgres_url();
        let admin = match PgPoolOptions::new().max_connections(1).connect(&base).await {
            Ok(pool) => pool,
            Err(e) if !servers_required() => {
                println!("skipped: no PostgreSQL at {base}: {e}");
                return None;
            }
            Err(e) => panic!("server required but not reachable at {base}: {e}"),
        };
        let name = format!("sluice_{setting}_{}", std::process::id());
        for sql in [
            format!("DROP DATABASE IF EXISTS {name}"),
            format!("CREATE DATABASE {name}"),
            format!("ALTER DATABASE {name} SET {setting} = '{value}'"),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&admin)
                .await
                .unwrap();
        }
        let url = match base.rsplit_once('/') {
            Some((server, _)) => format!("{server}/{name}"),
            None => unreachable!("a PostgreSQL URL names its database"),
        };
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .unwrap();
        Some(PostgresDatabase {
            admin,
            name,
            url,
            pool,
        })
    }

    /// Runs `sql` in the database.
    async fn execute(&self, sql: &str) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
            .execute(&self.pool)
            .await
            .unwrap();
    }

    /// Drops the database.
    async fn drop(self) {
        self.pool.close().await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .execute(&self.admin)
        .await
        .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_mysql_a_datetime_written_in_the_server_s_zone_is_read_in_it() {
    let _globals = MYSQL_GLOBALS.lock().await;
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
                "CREATE TABLE visits (id BIGINT PRIMARY KEY, at DATETIME NOT NULL, \
                 hits BIGINT NOT NULL DEFAULT 0, KEY (at))",
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
    /// The rows of `visits`, those under an hour old, the operations
    /// stored, the rows changed once and those changed otherwise than the
    /// rows over an hour old.
    async fn counts(&self) -> [i64; 5] {
        let mut counts = [0; 5];
        for (count, sql) in counts.iter_mut().zip([
            "SELECT COUNT(*) FROM visits",
            "SELECT COUNT(*) FROM visits WHERE id < 6",
            "SELECT COUNT(*) FROM sluice_operations",
            "SELECT COUNT(*) FROM visits WHERE hits = 1",
            "SELECT COUNT(*) FROM visits WHERE hits <> CASE WHEN id < 6 THEN 0 ELSE 1 END",
        ]) {
            *count = match self {
                Counted::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(*pool).await.unwrap(),
                Counted::MySql(db) => db.scalar(sql).await,
            };
        }
        counts
    }

    /// A condition on `at` reading the clock: older than an hour.
    fn older_than_an_hour(&self) -> &'static str {
        match self {
            Counted::Postgres(_) => "at < now() - interval '1 hour'",
            Counted::MySql(_) => "at < NOW() - INTERVAL 1 HOUR",
        }
    }
}

/// `visits` holds 20 rows written 5, 15, … 195 minutes ago (ids 0 to 19)
/// in the zone five hours behind UTC.
///
/// `update-in-batches --where` reading the clock (`now()`) is refused,
/// naming the read and the zone; with `--db-time-zone`, PostgreSQL's
/// sessions read the clock in the zone and it changes exactly the 14 rows
/// older than an hour, while MySQL's stay in UTC and it is still refused.
/// `delete-aged-rows --older-than 1h` is refused, naming the zone and its
/// offset; with `--db-time-zone` it deletes exactly those 14 rows. Nothing
/// is written or changed by a refusal.
async fn refused_then_read_in_the_named_zone(url: &str, target: Counted<'_>) {
    fn zoned<'a>(args: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec!["--db-time-zone", IANA_ZONE];
        all.extend(args);
        all
    }

    let update = increment_where(target.older_than_an_hour());
    let clock = ["reads the clock", "UTC-05:00 now", "off by 5h"];
    refused(url, &update, &clock);
    assert_eq!(
        target.counts().await,
        [20, 6, 0, 0, 14],
        "refused: nothing written"
    );
    let updated = match target {
        Counted::Postgres(_) => {
            succeeded(&sluice_as_told(url, &zoned(&update)));
            succeeded(&sluice_as_told(url, &zoned(&["run", "--until-idle"])));
            1
        }
        Counted::MySql(_) => {
            refused(url, &zoned(&update), &["UTC_TIMESTAMP()"]);
            0
        }
    };
    assert_eq!(
        target.counts().await,
        [20, 6, updated, 14 * updated, 14 * (1 - updated)],
        "on PostgreSQL, exactly the rows over an hour old, once"
    );

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
    refused(
        url,
        &delete,
        &[
            "`at` of `visits`",
            "UTC-05:00 now",
            "off by 5h",
            "--db-time-zone",
        ],
    );
    assert_eq!(
        target.counts().await[..3],
        [20, 6, updated],
        "refused: nothing written"
    );
    succeeded(&sluice_as_told(url, &zoned(&delete)));
    succeeded(&sluice_as_told(url, &zoned(&["run", "--until-idle"])));
    assert_eq!(
        target.counts().await[..3],
        [6, 6, updated + 1],
        "exactly the rows older than an hour in the zone they were written in"
    );
}

/// `update-in-batches` of `hits = hits + 1` over `visits` where `condition`.
fn increment_where(condition: &str) -> [&str; 8] {
    [
        "enqueue",
        "update-in-batches",
        "--table",
        "visits",
        "--set",
        "hits = hits + 1",
        "--where",
        condition,
    ]
}

/// Runs `sluice` on `url` with `args` and checks it is refused as bad
/// input, in one line holding each of `parts`.
fn refused(url: &str, args: &[&str], parts: &[&str]) {
    let refused = sluice_as_told(url, args);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert_eq!(said.trim_end().lines().count(), 1, "{said}");
    for part in parts {
        assert!(said.contains(part), "`{part}` in: {said}");
    }
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

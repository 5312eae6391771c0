//! Fixtures shared by every database-level test: a store in a fresh SQLite
//! file, or in a fresh schema of the test PostgreSQL server.
//!
//! PostgreSQL tests are skipped, with a line saying so, when the server is not
//! reachable, unless `SLUICE_REQUIRE_SERVERS=1` (set by CI) makes that a failure.
#![allow(dead_code)]

use std::future::Future;
use std::process::{Child, Command, Output, Stdio};
use std::str::FromStr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sluice_store::{Lease, Store};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

mod aged_rows;
#[allow(unused_imports)] // not every test binary enqueues it
pub use aged_rows::{enqueue_older_than_90_days, older_than_a_day};

/// The PostgreSQL the tests use.
pub fn postgres_url() -> String {
    std::env::var("SLUICE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The MySQL or MariaDB server the tests use (each test makes a database of its own there).
pub fn mysql_url() -> String {
    std::env::var("SLUICE_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306".into())
}

/// True when a missing server must fail the test rather than skip it.
pub fn servers_required() -> bool {
    std::env::var("SLUICE_REQUIRE_SERVERS").is_ok_and(|v| v == "1" || v == "true")
}

/// A database a test owns, with its store; removed when dropped (SQLite) or
/// at the next run (PostgreSQL schemas are dropped by [`TestDb::cleanup`]).
pub struct TestDb {
    /// The store under test.
    pub store: Store,
    /// The URL another process would use to reach the same database.
    pub url: String,
    /// Which backend.
    pub backend: &'static str,
    /// The PostgreSQL schema the test made (first on its search path).
    pub schema: Option<String>,
    /// The MySQL database the test made, dropped by [`TestDb::cleanup`].
    database: Option<String>,
    /// The PostgreSQL server the schema is on.
    server: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    /// A fresh SQLite file in a temporary folder.
    pub async fn sqlite() -> TestDb {
        let dir = tempfile::tempdir().expect("temporary folder");
        let url = format!("sqlite:{}", dir.path().join("sluice.sqlite").display());
        let store = Store::connect(&url).await.expect("open SQLite store");
        TestDb {
            store,
            url,
            backend: "sqlite",
            schema: None,
            database: None,
            server: None,
            _dir: Some(dir),
        }
    }

    /// A fresh schema in the test PostgreSQL, or `None` (after saying so) when
    /// the server is unreachable and servers are not required.
    pub async fn postgres() -> Option<TestDb> {
        TestDb::postgres_on(postgres_url()).await
    }

    /// A fresh schema in the second PostgreSQL cluster
    /// (`SLUICE_TEST_POSTGRES_SECOND_URL`, port 5434), as
    /// [`TestDb::postgres`]: a database of a server apart from the first.
    pub async fn postgres_second() -> Option<TestDb> {
        let base = std::env::var("SLUICE_TEST_POSTGRES_SECOND_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5434/test".into());
        TestDb::postgres_on(base).await
    }

    /// A fresh schema in the PostgreSQL server at `base`.
    async fn postgres_on(base: String) -> Option<TestDb> {
        let admin = reachable(
            &base,
            PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(3))
                .connect(&base)
                .await,
        )?;
        let schema = fresh_name();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        )))
        .execute(&admin)
        .await
        .expect("create test schema");
        admin.close().await;
        let url = format!("{base}?options=-c%20search_path%3D{schema}");
        let options = PgConnectOptions::from_str(&base)
            .unwrap()
            .options([("search_path", schema.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .expect("connect");
        let store = Store::postgres(pool)
            .await
            .expect("migrate PostgreSQL store");
        Some(TestDb {
            store,
            url,
            backend: "postgres",
            schema: Some(schema),
            database: None,
            server: Some(base),
            _dir: None,
        })
    }

    /// A fresh database in the test MySQL or MariaDB server, or `None`
    /// (after saying so) when the server is unreachable and servers are not
    /// required.
    pub async fn mysql() -> Option<TestDb> {
        let base = mysql_url();
        let admin = reachable(
            &base,
            MySqlPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(3))
                .connect(&base)
                .await,
        )?;
        let database = fresh_name();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {database}; CREATE DATABASE {database}"
        )))
        .execute(&admin)
        .await
        .expect("create test database");
        admin.close().await;
        let url = format!("{}/{database}", base.trim_end_matches('/'));
        let store = Store::connect_with(&url, &fixtures_write_utc())
            .await
            .expect("migrate MySQL store");
        Some(TestDb {
            store,
            url,
            backend: "mysql",
            schema: None,
            database: Some(database),
            server: None,
            _dir: None,
        })
    }

    /// `table` qualified with the schema (PostgreSQL), database (MySQL) or
    /// attached database (SQLite's `main`) it is found in.
    pub fn qualified(&self, table: &str) -> String {
        let within = match (&self.schema, &self.database) {
            (Some(schema), _) => schema.as_str(),
            (None, Some(database)) => database.as_str(),
            (None, None) => "main",
        };
        format!("{within}.{table}")
    }

    /// Runs raw SQL against the test database (to corrupt rows, inspect tables).
    pub async fn execute(&self, sql: &str) -> u64 {
        match self.store.backend() {
            sluice_target::Backend::Sqlite(pool) => {
                sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(pool)
                    .await
                    .expect(sql)
                    .rows_affected()
            }
            sluice_target::Backend::Postgres(pool) => {
                sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(pool)
                    .await
                    .expect(sql)
                    .rows_affected()
            }
            sluice_target::Backend::MySql(pool) => sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(pool)
                .await
                .expect(sql)
                .rows_affected(),
        }
    }

    /// Like [`TestDb::execute`] but returns the error instead of panicking.
    pub async fn try_execute(&self, sql: &str) -> Result<u64, sqlx::Error> {
        match self.store.backend() {
            sluice_target::Backend::Sqlite(pool) => {
                sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(pool)
                    .await
                    .map(|r| r.rows_affected())
            }
            sluice_target::Backend::Postgres(pool) => {
                sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                    .execute(pool)
                    .await
                    .map(|r| r.rows_affected())
            }
            sluice_target::Backend::MySql(pool) => sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
                .execute(pool)
                .await
                .map(|r| r.rows_affected()),
        }
    }

    /// `INSERT INTO {into} SELECT {select} FROM <1..=rows> [WHERE {filter}]`
    /// in this backend's dialect, `g` naming each number of the series.
    pub async fn insert_series(&self, into: &str, select: &str, rows: i64, filter: &str) {
        let filter = if filter.is_empty() {
            String::new()
        } else {
            format!(" WHERE {filter}")
        };
        let recursive = format!(
            "WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < {rows}) "
        );
        self.execute(&match self.backend {
            "postgres" => format!(
                "INSERT INTO {into} SELECT {select} FROM generate_series(1, {rows}) g{filter}"
            ),
            // MariaDB's form: the INSERT first, past its default of 1,000
            // recursions.
            "mysql" => format!(
                "SET STATEMENT max_recursive_iterations = {} FOR INSERT INTO {into} {recursive}\
                 SELECT {select} FROM s{filter}",
                rows + 1
            ),
            _ => format!("{recursive}INSERT INTO {into} SELECT {select} FROM s{filter}"),
        })
        .await;
    }

    /// The column type a test table stores a point in time as: a time zone
    /// aware type where there is one, ISO-8601 text on SQLite.
    pub fn time_type(&self) -> &'static str {
        match self.backend {
            "postgres" => "TIMESTAMPTZ",
            "mysql" => "DATETIME(6)",
            _ => "TEXT",
        }
    }

    /// `at` as a literal of [`TestDb::time_type`] (UTC, to the second).
    pub fn time_literal(&self, at: chrono::DateTime<chrono::Utc>) -> String {
        match self.backend {
            "postgres" => format!("TIMESTAMPTZ '{}'", at.format("%Y-%m-%dT%H:%M:%SZ")),
            "mysql" => format!("TIMESTAMP '{}'", at.format("%Y-%m-%d %H:%M:%S")),
            _ => format!("'{}'", at.format("%Y-%m-%dT%H:%M:%SZ")),
        }
    }

    /// The URL of this database on the test server's replica (the same
    /// schema, or database, read where the primary's changes are
    /// replayed), or `None` (after saying so) when no replica is reachable
    /// and servers are not required.
    pub async fn replica_url(&self) -> Option<String> {
        let base = self.replica_server();
        let url = match self.backend {
            "postgres" => {
                let schema = self.schema.as_deref().expect("a test schema");
                format!("{base}?options=-c%20search_path%3D{schema}")
            }
            "mysql" => {
                let database = self.database.as_deref().expect("a test database");
                format!("{}/{database}", base.trim_end_matches('/'))
            }
            other => panic!("no replicas on {other}"),
        };
        let reached = match self.backend {
            "postgres" => PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(3))
                .connect(&base)
                .await
                .map(drop),
            _ => MySqlPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(Duration::from_secs(3))
                .connect(&base)
                .await
                .map(drop),
        };
        reachable(&base, reached)?;
        Some(url)
    }

    /// The test server's replica, without this test's schema or database:
    /// it can be reached before the replica has replayed their creation.
    pub fn replica_server(&self) -> String {
        match self.backend {
            "postgres" => std::env::var("SLUICE_TEST_POSTGRES_REPLICA_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5433/test".into()),
            "mysql" => std::env::var("SLUICE_TEST_MYSQL_REPLICA_URL")
                .unwrap_or_else(|_| "mysql://root@127.0.0.1:3307".into()),
            other => panic!("no replicas on {other}"),
        }
    }

    /// Runs `sql` on the replica at `url` (to pause and resume its replay,
    /// or to read its copy of this test's tables); false when the replica
    /// did not take it (not reachable, or without this database yet).
    pub async fn on_replica(&self, url: &str, sql: &str) -> bool {
        on_server(self.backend, url, sql).await
    }

    /// Whether the replica at `url` has replayed a heartbeat (a beat past
    /// the first row's 0): paused before one, a replica has no heartbeat
    /// at all, which stops an operation for another reason than its lag.
    /// The scalar subquery has two rows, an error on both engines, until
    /// the row holds a beat.
    pub async fn replica_has_a_heartbeat(&self, url: &str) -> bool {
        let beat = "SELECT (SELECT 1 UNION ALL SELECT 2 FROM \
                    (SELECT COUNT(*) AS beats FROM sluice_heartbeat WHERE id = 1 AND beat_ms > 0) \
                    AS applied WHERE beats = 0)";
        self.on_replica(url, beat).await
    }

    /// Pauses the replica's replay at `server` (PostgreSQL's WAL replay,
    /// MySQL's SQL thread) until the guard it returns is dropped, which
    /// resumes it even when the test fails: a pause outlives the test's
    /// connections, and every operation on the primary after it would see
    /// the lag grow.
    pub async fn pause_replica(&self, server: &str) -> ReplicaPaused {
        let (pause, resume) = match self.backend {
            "postgres" => (
                "SELECT pg_wal_replay_pause()",
                "SELECT pg_wal_replay_resume() WHERE pg_is_wal_replay_paused()",
            ),
            _ => ("STOP SLAVE SQL_THREAD", "START SLAVE SQL_THREAD"),
        };
        assert!(
            self.on_replica(server, pause).await,
            "the replica at {server} did not pause"
        );
        ReplicaPaused {
            backend: self.backend,
            server: server.to_owned(),
            resume,
        }
    }

    /// Waits until the replica has replayed everything the primary had
    /// written when called: a replica still behind on earlier tests' writes
    /// (its one SQL thread replays a whole suite's) would otherwise be
    /// taken for one the test paused. Replay is resumed first, in case an
    /// interrupted run left it paused. Panics with the replica's own
    /// account of itself past `within`.
    pub async fn replica_caught_up(&self, within: Duration) {
        let (resume, position, replayed) = match self.backend {
            "postgres" => (
                "SELECT pg_wal_replay_resume()",
                "SELECT pg_current_wal_lsn()::text",
                "SELECT CASE WHEN pg_last_wal_replay_lsn() >= '{}'::pg_lsn THEN 1 ELSE 0 END",
            ),
            _ => (
                "START SLAVE SQL_THREAD",
                "SELECT @@gtid_binlog_pos",
                "SELECT CASE WHEN MASTER_GTID_WAIT('{}', 1) = 0 THEN 1 ELSE 0 END",
            ),
        };
        self.on_replica(&self.replica_server(), resume).await;
        let position = self.text(position).await;
        let replayed = replayed.replace("{}", &position);
        let deadline = std::time::Instant::now() + within;
        while self.replica_answer::<i32>(&replayed).await.ok() != Some(1) {
            if std::time::Instant::now() > deadline {
                let status = self.replica_status().await;
                panic!("the replica did not reach {position} within {within:?}: {status:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// What the replica says of its replay, for a failure's message.
    async fn replica_status(&self) -> String {
        use sqlx::Row as _;
        let url = self.replica_server();
        match self.backend {
            "postgres" => self
                .replica_answer::<String>(
                    "SELECT COALESCE(pg_last_wal_replay_lsn()::text, 'nothing') \
                     || ' replayed, paused: ' || pg_is_wal_replay_paused()::text",
                )
                .await
                .unwrap_or_else(|e| e.to_string()),
            _ => {
                let pool = match MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await
                {
                    Ok(pool) => pool,
                    Err(e) => return e.to_string(),
                };
                let status = match sqlx::raw_sql("SHOW SLAVE STATUS")
                    .fetch_optional(&pool)
                    .await
                {
                    Ok(Some(row)) => [
                        "Slave_IO_Running",
                        "Slave_SQL_Running",
                        "Seconds_Behind_Master",
                        "Last_IO_Error",
                        "Last_SQL_Error",
                    ]
                    .iter()
                    .map(|column| {
                        let value = row
                            .try_get::<Option<String>, _>(*column)
                            .map(Option::unwrap_or_default)
                            .or_else(|_| {
                                row.try_get::<Option<u64>, _>(*column)
                                    .map(|v| v.map_or("NULL".into(), |v| v.to_string()))
                            })
                            .unwrap_or_else(|e| e.to_string());
                        format!("{column}: {value}")
                    })
                    .collect::<Vec<_>>()
                    .join("; "),
                    Ok(None) => "not a replica".into(),
                    Err(e) => e.to_string(),
                };
                pool.close().await;
                status
            }
        }
    }

    /// One value read on the replica's server.
    async fn replica_answer<T>(&self, sql: &str) -> Result<T, sqlx::Error>
    where
        T: Send + Unpin + for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
        T: for<'r> sqlx::Decode<'r, sqlx::MySql> + sqlx::Type<sqlx::MySql>,
    {
        let url = self.replica_server();
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        // One connection of either pool type, closed once `sql` answered.
        macro_rules! read_once {
            ($options:expr) => {{
                let pool = $options.max_connections(1).connect(&url).await?;
                let value = sqlx::query_scalar(sql).fetch_one(&pool).await;
                pool.close().await;
                value
            }};
        }
        match self.backend {
            "postgres" => read_once!(PgPoolOptions::new()),
            _ => read_once!(MySqlPoolOptions::new()),
        }
    }

    /// A single string from a query on the primary.
    pub async fn text(&self, sql: &str) -> String {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self.store.backend() {
            sluice_target::Backend::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            sluice_target::Backend::MySql(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            sluice_target::Backend::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .expect("a string")
    }

    /// Every row's first column, as text, from a query on the primary.
    pub async fn texts(&self, sql: &str) -> Vec<String> {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match self.store.backend() {
            sluice_target::Backend::Postgres(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
            sluice_target::Backend::MySql(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
            sluice_target::Backend::Sqlite(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
        }
        .expect("texts")
    }

    /// A single integer from a query.
    pub async fn scalar(&self, sql: &str) -> i64 {
        match self.store.backend() {
            sluice_target::Backend::Sqlite(pool) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(pool)
                    .await
                    .expect(sql)
            }
            sluice_target::Backend::Postgres(pool) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
                    .fetch_one(pool)
                    .await
                    .expect(sql)
            }
            // Wrapped so that any integer (a SUM is a DECIMAL) reads as one;
            // MySQL spells the other dialects' cast to BIGINT `AS SIGNED`.
            sluice_target::Backend::MySql(pool) => {
                sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT CAST(({}) AS SIGNED)",
                    sql.replace("AS BIGINT)", "AS SIGNED)")
                )))
                .fetch_one(pool)
                .await
                .expect(sql)
            }
        }
    }

    /// Drops the PostgreSQL schema (SQLite files go with their folder).
    pub async fn cleanup(self) {
        self.release().await;
    }

    /// [`TestDb::cleanup`] for a database a test shares as `&'static` (it
    /// cannot give it up by value): closes the store, drops the schema.
    pub async fn release(&self) {
        self.store.close().await;
        if let Some(schema) = &self.schema
            && let Ok(admin) = PgPoolOptions::new()
                .max_connections(1)
                .connect(self.server.as_deref().unwrap_or(&postgres_url()))
                .await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE"
            )))
            .execute(&admin)
            .await;
        }
        if let Some(database) = &self.database
            && let Ok(admin) = MySqlPoolOptions::new()
                .max_connections(1)
                .connect(&mysql_url())
                .await
        {
            let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {database}"
            )))
            .execute(&admin)
            .await;
        }
    }
}

/// The admin pool just connected to the server at `url`, or `None` (after
/// saying so) when the server is unreachable and servers are not required.
fn reachable<P>(url: &str, connected: Result<P, sqlx::Error>) -> Option<P> {
    match connected {
        Ok(pool) => Some(pool),
        Err(e) if !servers_required() => {
            say_skipped_once(url, &e);
            None
        }
        Err(e) => panic!("server required but not reachable at {url}: {e}"),
    }
}

/// A schema or database name no other test of any running binary uses.
fn fresh_name() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "sluice_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// Tells the person running the tests, once per test binary, that the
/// PostgreSQL tests were skipped. Written to the stderr handle directly, not
/// with `eprintln!`, because the test harness hides what passing tests print.
fn say_skipped_once(url: &str, error: &sqlx::Error) {
    use std::io::Write;
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: server tests in this binary ({url} not reachable: {error}); \
             set SLUICE_REQUIRE_SERVERS=1 to make that a failure"
        );
    });
}

/// Claims the next runnable operation for `node` and returns its lease;
/// panics when nothing is claimable (the test set one up).
pub async fn claim_lease(store: &Store, node: &str, ttl: Duration) -> Lease {
    let claimed = store.claim_operations(node, 1, ttl).await.expect("claim");
    let first = claimed.into_iter().next().expect("an operation to claim");
    first.record.lease.expect("a claimed operation has a lease")
}

/// Waits until `check` holds, polling every 10 ms; fails the test with
/// `what` after 300 seconds. The deadline only catches a test that would
/// never end: on a loaded 2-core machine a 20,000-row run with pauses took
/// 105 s, so a tighter one fails tests for the machine's speed.
pub async fn until<F, Fut>(what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_within(what, Duration::from_secs(300), check).await
}

/// Waits ([`until`]) until more than `rows` rows of `items` have been
/// changed once (`counter = 1`): a worker is under way.
pub async fn until_items_changed(db: &TestDb, rows: i64) {
    until("a worker changes rows of items", || async {
        db.scalar("SELECT COUNT(*) FROM items WHERE counter = 1")
            .await
            > rows
    })
    .await;
}

/// [`until`] with its own deadline.
pub async fn until_within<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + deadline;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// True once no node holds operation `id`: it has no lease and none of its
/// batches is running (what a worker leaves behind when it lets go).
pub async fn released(store: &Store, id: i64) -> bool {
    store.operation(id).await.unwrap().lease.is_none()
        && store
            .batches(id)
            .await
            .unwrap()
            .iter()
            .all(|b| b.status != sluice_store::BatchStatus::Running)
}

/// Runs the built `sluice` binary against `db` and waits for it.
pub fn sluice(db: &TestDb, args: &[&str]) -> Output {
    sluice_on(&db.url, args)
}

/// [`sluice`] on a database URL of its own. On MySQL it says the
/// fixtures' zoneless times are UTC ([`fixtures_write_utc`]).
pub fn sluice_on(url: &str, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args(args).env("SLUICE_DATABASE_URL", url);
    if url.starts_with("mysql:") {
        command.env("SLUICE_DB_TIME_ZONE", "UTC");
    }
    command.output().expect("run the sluice binary")
}

/// Connection options saying that the tests' `DATETIME` values are UTC, as
/// the fixtures write them: a server whose own sessions default to another
/// zone would otherwise (rightly) have those columns refused
/// (`tests/session_defaults.rs`).
pub fn fixtures_write_utc() -> sluice_target::ConnectOptions {
    sluice_target::ConnectOptions {
        time_zone: Some("UTC".into()),
        ..sluice_target::ConnectOptions::default()
    }
}

/// Starts a `sluice run` worker process against `db` (output discarded)
/// with `args` after `run`.
pub fn spawn_worker(db: &TestDb, args: &[&str]) -> Worker {
    spawn_worker_on(&db.url, args)
}

/// [`spawn_worker`] on a database URL of its own.
pub fn spawn_worker_on(url: &str, args: &[&str]) -> Worker {
    Worker(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .arg("run")
            .args(args)
            .env("SLUICE_DATABASE_URL", url)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a worker"),
    )
}

/// A worker process that is killed (SIGKILL) and reaped when dropped, so a
/// test that fails half-way leaves no `sluice run` behind to load the
/// machine for the tests after it. Derefs to its [`Child`].
pub struct Worker(Child);

impl From<Child> for Worker {
    fn from(child: Child) -> Self {
        Worker(child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Already gone when the test killed or awaited it: both are no-ops then.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Worker {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Worker {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Fails the test, showing the command's stderr, unless it succeeded.
pub fn succeeded(output: &Output) {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The JSON a successful command printed.
pub fn json(output: &Output) -> serde_json::Value {
    succeeded(output);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// Enqueues `update-in-batches --table items --set "counter = counter + 1"`
/// through the command line with `extra` options; returns the `--json` answer.
pub fn enqueue_increment(db: &TestDb, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "enqueue",
        "update-in-batches",
        "--table",
        "items",
        "--set",
        "counter = counter + 1",
    ];
    args.extend_from_slice(extra);
    args.push("--json");
    json(&sluice(db, &args))
}

/// `items(id, grp, counter)`: ids `1..=rows`, `grp = id % 2`,
/// counters at 0, analysed.
pub async fn create_counted_items(db: &TestDb, rows: i64) {
    db.execute(
        "CREATE TABLE items (id BIGINT PRIMARY KEY, grp INTEGER NOT NULL, counter INTEGER NOT NULL DEFAULT 0)",
    )
    .await;
    db.insert_series("items (id, grp)", "g, g % 2", rows, "")
        .await;
    analyze_items(db).await;
}

/// `ANALYZE` of `items`, in the backend's words.
pub async fn analyze_items(db: &TestDb) {
    db.execute(if db.backend == "mysql" {
        "ANALYZE TABLE items"
    } else {
        "ANALYZE items"
    })
    .await;
}

/// Drops `items_created_at_idx`, in the backend's words.
pub async fn drop_items_created_at_index(db: &TestDb) {
    db.execute(if db.backend == "mysql" {
        "DROP INDEX items_created_at_idx ON items"
    } else {
        "DROP INDEX items_created_at_idx"
    })
    .await;
}

/// Exactly once, from the data: every row of group 1 was incremented once
/// and no row of group 0 was touched.
pub async fn assert_group_one_changed_once(db: &TestDb) {
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 1 AND counter <> 1")
            .await,
        0,
        "a matching row was changed twice or not at all"
    );
    assert_eq!(
        db.scalar("SELECT COUNT(*) FROM items WHERE grp = 0 AND counter <> 0")
            .await,
        0,
        "a row outside the scope was touched"
    );
}

/// Declares each listed async test function once per backend:
/// `sqlite::NAME` on a temporary file and `postgres::NAME` on the test server.
#[macro_export]
macro_rules! for_each_backend {
    ($($name:ident),* $(,)?) => {
        $crate::sqlite_and_postgres!($($name),*);
        $crate::also_on_mysql!($($name),*);
    };
}

/// Declares each listed async test function for MySQL too (skipped like
/// the others when the server is not reachable): beside
/// [`sqlite_and_postgres!`] in a file whose tests do not all run on MySQL yet.
#[macro_export]
macro_rules! also_on_mysql {
    ($($name:ident),* $(,)?) => {
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::mysql().await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// Declares each listed async test function for PostgreSQL and MySQL, for
/// tests that need row locks where SQLite has one database lock.
#[macro_export]
macro_rules! postgres_and_mysql {
    ($($name:ident),* $(,)?) => {
        mod postgres_and_mysql {
            mod postgres {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $name() {
                        let Some(db) = $crate::common::TestDb::postgres().await else { return };
                        super::super::$name(&db).await;
                        db.cleanup().await;
                    }
                )*
            }
            mod mysql {
                $(
                    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                    async fn $name() {
                        let Some(db) = $crate::common::TestDb::mysql().await else { return };
                        super::super::$name(&db).await;
                        db.cleanup().await;
                    }
                )*
            }
        }
    };
}

/// Declares each listed async test function for SQLite and PostgreSQL, for
/// tests whose part of Sluice does not run on MySQL yet.
#[macro_export]
macro_rules! sqlite_and_postgres {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = $crate::common::TestDb::sqlite().await;
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::postgres().await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// Declares each listed async test function for PostgreSQL alone (skipped
/// like the others when the server is not reachable).
#[macro_export]
macro_rules! postgres_only {
    ($($name:ident),* $(,)?) => {
        mod postgres_only {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::postgres().await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// Declares each listed async test function for MySQL alone (skipped like
/// the others when the server is not reachable).
#[macro_export]
macro_rules! mysql_only {
    ($($name:ident),* $(,)?) => {
        mod mysql_only {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = $crate::common::TestDb::mysql().await else { return };
                    super::$name(&db).await;
                    db.cleanup().await;
                }
            )*
        }
    };
}

/// Runs `sql` on the server at `url` over one connection of `backend`'s
/// kind, closed once `sql` ran; false when the server did not take it.
async fn on_server(backend: &str, url: &str, sql: &str) -> bool {
    let sql = sqlx::AssertSqlSafe(sql.to_owned());
    macro_rules! run_once {
        ($options:expr) => {
            match $options.max_connections(1).connect(url).await {
                Ok(pool) => {
                    let done = sqlx::raw_sql(sql).execute(&pool).await.is_ok();
                    pool.close().await;
                    done
                }
                Err(_) => false,
            }
        };
    }
    match backend {
        "postgres" => run_once!(PgPoolOptions::new()),
        _ => run_once!(MySqlPoolOptions::new()),
    }
}

/// A replica paused by [`TestDb::pause_replica`]: [`ReplicaPaused::resume`]
/// resumes it, and so does dropping the guard, a test's failure included.
pub struct ReplicaPaused {
    backend: &'static str,
    server: String,
    resume: &'static str,
}

impl ReplicaPaused {
    /// Resumes the replica's replay (asserting the replica took it).
    pub async fn resume(self) {
        assert!(
            on_server(self.backend, &self.server, self.resume).await,
            "the replica at {} did not resume",
            self.server
        );
    }
}

impl Drop for ReplicaPaused {
    fn drop(&mut self) {
        let (backend, server, resume) = (self.backend, self.server.clone(), self.resume);
        // Its own thread and runtime: a drop cannot await, and may run
        // while the test's runtime unwinds.
        let resumed = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .is_ok_and(|runtime| runtime.block_on(on_server(backend, &server, resume)))
        })
        .join();
        if !matches!(resumed, Ok(true)) {
            eprintln!("could not resume the replica's replay at {}", self.server);
        }
    }
}

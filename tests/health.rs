//! The built-in health indicators against real servers: each reads its
//! database without error, MySQL's read lock waits and long-running
//! transactions as they happen, PostgreSQL's cleanup debt comes and
//! goes with a table's dead rows, and the latency budget reads the
//! application's own statements from `pg_stat_statements` and MariaDB's
//! `performance_schema`.

mod common;

use std::time::Duration;

use common::TestDb;
use sluice_runtime::health::{HealthContext, Scope, Thresholds, Watched};
use sluice_runtime::indicators::{InnodbActivity, TableActivity, default_indicators};
use sluice_runtime::latency::{APPLICATION_WITHIN, LADDER, LatencyCanary, MIN_SAMPLES, PER_POLL};
use sluice_runtime::{HealthIndicator, Signal};
use sluice_store::{LatencyBudget, Store};
use sluice_target::Backend;
use sluice_target::dialect::health::{HealthQueries as _, LatencyQuery};

for_each_backend!(
    every_builtin_indicator_reads_its_database,
    the_latency_canary_holds_a_table_to_its_strictest_budget,
    an_operator_s_latency_query_is_held_to_the_budget,
);

mysql_only!(
    innodb_lock_waits_and_long_transactions_are_read_as_they_happen,
    a_worker_whose_user_lacks_process_refuses_to_start_naming_the_grant,
);

postgres_and_mysql!(
    the_application_s_slow_statements_on_a_table_are_held_to_the_budget,
    the_application_s_sessions_are_told_from_sluice_s,
);

postgres_only!(
    cleanup_debt_throttles_a_table_until_it_is_vacuumed,
    a_worker_whose_role_sees_no_other_session_refuses_to_start_naming_the_grant,
);

/// How long a reading may take to show what the server does.
const LIMIT: Duration = Duration::from_secs(20);

/// Every built-in indicator of the backend reads its system views (a typo
/// in one of their statements, or a view the server lacks, fails here), on
/// an idle database: nothing to throttle or stop for.
async fn every_builtin_indicator_reads_its_database(db: &TestDb) {
    db.execute("CREATE TABLE watched (id BIGINT PRIMARY KEY)")
        .await;
    let context = HealthContext {
        store: db.store.clone(),
        tables: vec!["watched".into()],
        operations: Vec::new(),
    };
    let indicators = default_indicators(&db.store);
    assert!(!indicators.is_empty());
    for indicator in indicators {
        indicator
            .readable(&db.store)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", indicator.name()));
        let readings = indicator
            .check(&context)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", indicator.name()));
        for reading in readings {
            assert!(
                !matches!(reading.signal, Signal::Stop { .. }),
                "{}: {reading:?} on an idle database",
                indicator.name()
            );
        }
    }
}

/// The canary times a point read and its own write on each watched table
/// and reports it to the store; the controller throttles a table held to a
/// budget no round trip can meet. A table whose operations are all `off` is
/// measured and never throttled; the strictest budget of a table's
/// operations is the one it is held to.
async fn the_latency_canary_holds_a_table_to_its_strictest_budget(db: &TestDb) {
    db.execute("CREATE TABLE held (id BIGINT PRIMARY KEY)")
        .await;
    db.execute("CREATE TABLE free (id BIGINT PRIMARY KEY)")
        .await;
    db.execute("INSERT INTO held (id) VALUES (1), (2), (3)")
        .await;
    let store = &db.store;
    let impossible = LatencyBudget::Fixed(Duration::from_micros(1));
    store
        .set_latency_budget("operation:1", impossible)
        .await
        .unwrap();
    store
        .set_latency_budget("operation:2", LatencyBudget::Off)
        .await
        .unwrap();
    store
        .set_latency_budget(
            "kind:lenient",
            LatencyBudget::Fixed(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    let watched = |id: i64, kind: &str, table: &str| Watched {
        id,
        kind: kind.into(),
        table: table.into(),
    };
    let context = HealthContext {
        store: store.clone(),
        tables: vec!["free".into(), "held".into()],
        operations: vec![
            watched(1, "strict", "held"),
            watched(3, "lenient", "held"),
            watched(2, "strict", "free"),
        ],
    };
    let canary = LatencyCanary::new();
    // A session of the application's, there to feel the latency (with none,
    // the budget holds no pace: tested on its own below).
    let app = Application::on(db).await;
    let signal_of = |readings: &[sluice_runtime::health::Reading], table: &str| {
        readings
            .iter()
            .find(|r| r.scope == Scope::Table(table.into()))
            .map(|r| r.signal.clone())
            .unwrap_or_else(|| panic!("no reading for {table}: {readings:?}"))
    };
    // The first poll answers before the work starts, on its PER_POLL round
    // trips; the second takes a burst of MIN_SAMPLES and decides (a slow
    // machine may cut it short: then PER_POLL a poll until MIN_SAMPLES are
    // in), two steps down (the p99 is far over 1.5× 1 µs).
    let polls_to_decide = MIN_SAMPLES.div_ceil(PER_POLL);
    let mut signals = Vec::new();
    for _ in 0..polls_to_decide * 4 {
        app.runs_a_statement().await;
        let readings = canary.check(&context).await.expect("canary reads");
        assert_eq!(
            signal_of(&readings, "free"),
            Signal::Normal,
            "off is never throttled"
        );
        signals.push(signal_of(&readings, "held"));
    }
    assert_eq!(
        signals[0],
        Signal::Normal,
        "no decision on the first poll's {PER_POLL} round trips"
    );
    let first = signals
        .iter()
        .position(|s| *s != Signal::Normal)
        .filter(|at| *at < polls_to_decide)
        .unwrap_or_else(|| panic!("no decision by {MIN_SAMPLES} round trips: {signals:?}"));
    match &signals[first] {
        Signal::Throttle { percent, reason } => {
            assert_eq!(*percent, LADDER[2], "{reason}");
            assert!(reason.starts_with("latency: canary p99 "), "{reason}");
            assert!(reason.ends_with("over a 1 µs budget"), "{reason}");
        }
        other => panic!("not throttled at the first decision: {other:?} ({signals:?})"),
    }
    // Later, slower paces or, once seen not to lower the p99 (which the
    // noise of an idle server may hide), full speed again; never a stop.
    assert!(
        signals.iter().all(|s| !matches!(s, Signal::Stop { .. })),
        "{signals:?}"
    );
    let readings = store.canaries().await.unwrap();
    let reading = |table: &str| {
        readings
            .iter()
            .find(|r| r.table_name == table)
            .unwrap_or_else(|| panic!("no canary reading for {table}: {readings:?}"))
    };
    assert_eq!(reading("held").budget_us, Some(1), "the strictest budget");
    assert!(reading("held").p99_us > 1 && reading("held").samples > 0);
    assert_eq!(reading("free").budget_us, None);
}

/// An operator's latency query (here a metrics table saying 50 ms) binds
/// the budget when it is higher than the canary's own p99: the table is
/// throttled, the reason naming the query. A query that returns no number,
/// or fails, is unreadable: a worker does not start with it (and, later,
/// its failure is an error, never a normal reading).
async fn an_operator_s_latency_query_is_held_to_the_budget(db: &TestDb) {
    let float = match db.store.backend() {
        sluice_target::Backend::Postgres(_) => "DOUBLE PRECISION",
        sluice_target::Backend::MySql(_) => "DOUBLE",
        _ => "REAL",
    };
    db.execute("CREATE TABLE watched (id BIGINT PRIMARY KEY)")
        .await;
    db.execute("INSERT INTO watched (id) VALUES (1), (2)").await;
    db.execute(&format!("CREATE TABLE app_latency (ms {float} NOT NULL)"))
        .await;
    db.execute("INSERT INTO app_latency (ms) VALUES (50)").await;
    let store = &db.store;
    let query = |sql: &str| LatencyQuery::parse(sql).unwrap();
    for (sql, says) in [
        ("SELECT 'fast'", "returned no number"),
        (
            "SELECT ms FROM app_latency WHERE ms < 0",
            "returned no number",
        ),
        ("SELECT nope FROM app_latency", "failed"),
        ("SELECT -ms FROM app_latency", "not a latency"),
    ] {
        let canary = LatencyCanary::new().with_query(Some(query(sql)));
        let error = canary.readable(store).await.unwrap_err();
        assert!(
            error.contains(says) && error.contains(sql),
            "{sql}: {error}"
        );
    }
    let canary = LatencyCanary::new().with_query(Some(query("SELECT ms FROM app_latency;")));
    canary
        .readable(store)
        .await
        .expect("a number of milliseconds");
    // The budget paces only while an application works on the server: one
    // does here (other tests' sessions may come and go).
    let app = Application::on(db).await;
    app.runs_a_statement().await;
    let context = held_to(
        store,
        "watched",
        "purge",
        LatencyBudget::Fixed(Duration::from_millis(5)),
    )
    .await;
    let mut throttled = None;
    for _ in 0..MIN_SAMPLES.div_ceil(PER_POLL) * 2 {
        let readings = canary.check(&context).await.expect("canary reads");
        if let Signal::Throttle { reason, .. } = &readings[0].signal {
            throttled = Some(reason.clone());
            break;
        }
    }
    let reason = throttled.expect("held to 5 ms, a 50 ms latency throttles");
    assert!(
        reason.contains("the latency query's 50.0 ms over a 5.0 ms budget"),
        "{reason}"
    );
    // Right after a change of pace (its round trips cleared), the reading
    // shown still says the last p99, not zero.
    canary.check(&context).await.expect("canary reads");
    let shown = store.canaries().await.unwrap();
    assert!(
        shown
            .iter()
            .any(|r| r.table_name == "watched" && r.p99_us > 0),
        "{shown:?}"
    );
    // A query failing later is an error, not a normal reading.
    db.execute("DROP TABLE app_latency").await;
    assert!(canary.check(&context).await.is_err());
}

/// Where the database counts statements (PostgreSQL with
/// `pg_stat_statements`, MariaDB with `performance_schema`), the statements
/// the application runs on a table are held to the table's budget: slow
/// ones throttle it while the canary's own round trips are fast, and the
/// reason names them. Only statements run since the canary started count,
/// and the worker's own sessions' statements never do, however slow.
async fn the_application_s_slow_statements_on_a_table_are_held_to_the_budget(db: &TestDb) {
    let (counted, setting) = match db.backend {
        "postgres" => (
            "SELECT COUNT(*) FROM pg_extension WHERE extname = 'pg_stat_statements' \
             AND current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%'",
            "pg_stat_statements is not loaded and installed in the test database",
        ),
        _ => (
            "SELECT @@performance_schema",
            "performance_schema is off on the MariaDB server",
        ),
    };
    if db.scalar(counted).await == 0 {
        assert!(!common::servers_required(), "{setting} (.ci/run sets it)");
        eprintln!("{setting}: skipped");
        return;
    }
    db.execute("CREATE TABLE stmt_watched (id BIGINT PRIMARY KEY)")
        .await;
    db.execute(
        "INSERT INTO stmt_watched (id) SELECT n FROM (SELECT 1 AS n UNION ALL SELECT 2 \
         UNION ALL SELECT 3) AS ns",
    )
    .await;
    let (app, slow) = application_sessions(db).await;
    if let Backend::MySql(app) = &app {
        // A session counted in `performance_schema` (an application's pool,
        // or a user who may not leave it) cannot tell its own statements
        // from the application's: it reads none.
        let read = app.statement_totals("stmt_watched").await.unwrap();
        assert_eq!(read, None, "a counted session read the digests");
    }
    // Slow statements before the canary starts are history, not load.
    run_slow(&app, &slow, 30).await;
    let store = &db.store;
    // Far above the canary's own round trips on a loaded machine.
    let context = held_to(
        store,
        "stmt_watched",
        "purge",
        LatencyBudget::Fixed(Duration::from_millis(30)),
    )
    .await;
    let polls = MIN_SAMPLES.div_ceil(PER_POLL) * 2;
    // The worker's own sessions run the slow statements: never counted
    // (nor the canary's point reads, which would pull the mean down).
    let canary = LatencyCanary::new();
    for _ in 0..polls {
        run_slow(store.backend(), &slow, 10).await;
        let readings = canary.check(&context).await.expect("canary reads");
        assert_eq!(
            readings[0].signal,
            Signal::Normal,
            "the worker's own statements or the history were counted"
        );
    }
    // The application runs them: the table is throttled for them.
    let canary = LatencyCanary::new();
    let mut throttled = None;
    for _ in 0..polls {
        run_slow(&app, &slow, 10).await;
        let readings = canary.check(&context).await.expect("canary reads");
        if let Signal::Throttle { reason, .. } = &readings[0].signal {
            throttled = Some(reason.clone());
            break;
        }
    }
    let reason = throttled.expect("50 ms statements held to 30 ms throttle the table");
    assert!(
        reason.contains("the application's statements on stmt_watched, mean 5")
            && reason.contains("over a 30.0 ms budget"),
        "{reason}"
    );
}

/// Sessions of the application's own on the test's database (on
/// PostgreSQL a role of its own; on MariaDB a plain pool, which Sluice did
/// not open) and its slow point read of `stmt_watched`, 50 ms (on MariaDB
/// sent as text, as most MySQL drivers send statements: MariaDB's digests
/// leave out statements prepared on the server).
/// A context watching operation 1 (of `kind`) on `table`, its latency
/// budget set to `budget`.
async fn held_to(store: &Store, table: &str, kind: &str, budget: LatencyBudget) -> HealthContext {
    store
        .set_latency_budget("operation:1", budget)
        .await
        .unwrap();
    HealthContext {
        store: store.clone(),
        tables: vec![table.into()],
        operations: vec![Watched {
            id: 1,
            kind: kind.into(),
            table: table.into(),
        }],
    }
}

/// A session of the application's on the test database: a pool of its
/// own, not Sluice's (on PostgreSQL its sessions are not named `sluice…`,
/// on MySQL they are counted in `performance_schema`); none on SQLite,
/// whose sessions cannot be told apart (the budget always paces there).
struct Application(Option<Backend>);

impl Application {
    async fn on(db: &TestDb) -> Application {
        Application(match db.backend {
            "postgres" => Some(Backend::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&db.url)
                    .await
                    .expect("an application's session"),
            )),
            "mysql" => Some(Backend::MySql(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(&db.url)
                    .await
                    .expect("an application's session"),
            )),
            _ => None,
        })
    }

    /// Runs a statement, and answers the session's id on its server.
    async fn runs_a_statement(&self) -> Option<i64> {
        Some(match self.0.as_ref()? {
            Backend::Postgres(pool) => sqlx::query_scalar("SELECT pg_backend_pid()::int8")
                .fetch_one(pool)
                .await
                .expect("a statement"),
            Backend::MySql(pool) => sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                .fetch_one(pool)
                .await
                .expect("a statement"),
            Backend::Sqlite(_) => unreachable!("no application session on SQLite"),
        })
    }
}

/// The latency budget tells the application's sessions from Sluice's: a
/// plain session that just ran a statement is the application's; one of
/// a store Sluice opened (named `sluice` on PostgreSQL, left out of
/// `performance_schema` on MySQL) is not, however busy; an idle one drops
/// out once its last statement is older than asked.
async fn the_application_s_sessions_are_told_from_sluice_s(db: &TestDb) {
    // On PostgreSQL the test's store is a pool of the test's own (as an
    // application embedding Sluice would pass one): open one as Sluice does.
    let own = match db.backend {
        "postgres" => Store::connect(&db.url).await.expect("a store Sluice opens"),
        _ => db.store.clone(),
    };
    let sluice_session = match own.backend() {
        Backend::Postgres(pool) => {
            let mut held = pool.acquire().await.unwrap();
            let pid: i64 = sqlx::query_scalar("SELECT pg_backend_pid()::int8")
                .fetch_one(&mut *held)
                .await
                .unwrap();
            (pid, Some(held), None)
        }
        Backend::MySql(pool) => {
            let mut held = pool.acquire().await.unwrap();
            let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
                .fetch_one(&mut *held)
                .await
                .unwrap();
            (id, None, Some(held))
        }
        Backend::Sqlite(_) => unreachable!("PostgreSQL and MySQL only"),
    };
    let app = Application::on(db).await;
    let app_id = app.runs_a_statement().await.expect("a session id");
    let sessions = own
        .target()
        .health()
        .application_sessions(Duration::from_secs(30))
        .await
        .expect("the sessions are read")
        .expect("this server tells the application's sessions from Sluice's");
    assert!(
        sessions.contains(&app_id),
        "the application's session {app_id} is not among {sessions:?}"
    );
    assert!(
        !sessions.contains(&sluice_session.0),
        "Sluice's own session {} counted as the application's: {sessions:?}",
        sluice_session.0
    );
    // Idle for longer than asked: no longer counted.
    common::until_within(
        "the application's idle session to drop out",
        LIMIT,
        || async {
            let sessions = own
                .target()
                .health()
                .application_sessions(Duration::from_secs(1))
                .await
                .expect("the sessions are read")
                .expect("told apart");
            !sessions.contains(&app_id)
        },
    )
    .await;
    drop(sluice_session);
    if db.backend == "postgres" {
        own.close().await;
    }
}

/// On a server where no session of the application's ran a statement
/// lately (the second PostgreSQL cluster, which no other test of this
/// binary uses), an impossible budget holds no pace and the reading shows
/// none applied; the first statement of an application's session brings
/// the budget back, judged at once on the round trips timed meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_no_application_session_the_budget_holds_no_pace() {
    let Some(db) = TestDb::postgres_second().await else {
        return;
    };
    // The test's own pool is an application's: gone, and Sluice's instead.
    db.store.close().await;
    let store = Store::connect(&db.url).await.expect("a store Sluice opens");
    store
        .target()
        .execute(&sluice_target::Statement::new(
            "CREATE TABLE quiet (id BIGINT PRIMARY KEY)",
        ))
        .await
        .unwrap();
    store
        .target()
        .execute(&sluice_target::Statement::new(
            "INSERT INTO quiet (id) SELECT generate_series(1, 100)",
        ))
        .await
        .unwrap();
    let context = held_to(
        &store,
        "quiet",
        "delete-aged-rows",
        LatencyBudget::Fixed(Duration::from_micros(1)),
    )
    .await;
    common::until_within(
        "no session of an application's on the second cluster",
        Duration::from_secs(60),
        || async {
            let sessions = store
                .target()
                .health()
                .application_sessions(APPLICATION_WITHIN)
                .await
                .unwrap()
                .expect("PostgreSQL tells them apart");
            sessions.is_empty()
        },
    )
    .await;
    let canary = LatencyCanary::new();
    let polls_to_decide = MIN_SAMPLES.div_ceil(PER_POLL);
    for poll in 0..polls_to_decide * 2 {
        let readings = canary.check(&context).await.expect("canary reads");
        assert_eq!(
            readings[0].signal,
            Signal::Normal,
            "poll {poll}: a pace held with no application session"
        );
    }
    let reading = store.canaries().await.unwrap();
    assert_eq!(
        reading[0].budget_us, None,
        "no budget applied with no one to feel it: {reading:?}"
    );
    // One round trip a poll meanwhile: the reading stays fresh, the
    // database unloaded.
    let polls = (polls_to_decide * 2) as i64;
    assert!(
        (1..polls * PER_POLL as i64 / 2).contains(&reading[0].samples),
        "{reading:?}"
    );
    // An application's session runs a statement: the next poll takes a
    // burst and judges it, far over 1 µs (a poll later at the most, when
    // a slow machine cut the burst short).
    let app = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await
        .expect("an application's session");
    sqlx::query("SELECT 1").execute(&app).await.unwrap();
    let mut signals = Vec::new();
    for _ in 0..3 {
        let readings = canary.check(&context).await.expect("canary reads");
        signals.push(readings[0].signal.clone());
        if signals.last() != Some(&Signal::Normal) {
            break;
        }
    }
    match signals.last() {
        Some(Signal::Throttle { percent, reason }) => {
            assert_eq!(*percent, LADDER[2], "{reason}");
            assert!(reason.ends_with("over a 1 µs budget"), "{reason}");
        }
        _ => panic!("the budget did not come back with the application: {signals:?}"),
    }
    app.close().await;
    store.close().await;
    db.cleanup().await;
}

async fn application_sessions(db: &TestDb) -> (Backend, String) {
    if db.backend == "postgres" {
        let schema = db.schema.clone().expect("a PostgreSQL test schema");
        db.execute(
            "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'sluice_test_app') \
             THEN CREATE ROLE sluice_test_app LOGIN; END IF; END $$",
        )
        .await;
        db.execute(&format!(
            "GRANT USAGE ON SCHEMA {schema} TO sluice_test_app"
        ))
        .await;
        db.execute("GRANT SELECT ON stmt_watched TO sluice_test_app")
            .await;
        let url = common::postgres_url().replacen("://postgres@", "://sluice_test_app@", 1);
        let app = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await
            .expect("connect as the application's role");
        let slow = format!("SELECT pg_sleep(0.05), id FROM {schema}.stmt_watched WHERE id = $1");
        (Backend::Postgres(app), slow)
    } else {
        let app = sqlx::mysql::MySqlPoolOptions::new()
            .max_connections(1)
            .connect(&db.url)
            .await
            .expect("connect as the application");
        let slow = "SELECT SLEEP(0.05), id FROM stmt_watched WHERE id = 2".to_owned();
        (Backend::MySql(app), slow)
    }
}

/// Runs `slow` on `sessions` `n` times (on PostgreSQL for ids 1 to 3).
async fn run_slow(sessions: &Backend, slow: &str, n: i64) {
    for i in 0..n {
        let query = sqlx::AssertSqlSafe(slow.to_owned());
        let done = match sessions {
            Backend::Postgres(pool) => {
                let id = i % 3 + 1;
                sqlx::query(query).bind(id).execute(pool).await.map(drop)
            }
            Backend::MySql(pool) => sqlx::raw_sql(query).execute(pool).await.map(drop),
            Backend::Sqlite(_) => unreachable!("SQLite counts no statements"),
        };
        done.expect("a slow statement");
    }
}

/// One session holds a row lock on `"rp_LockMe"` and another waits for it:
/// the operations on that table stop, those on `rp_free` do not, and the
/// holder's open transaction throttles every operation once a second old.
/// The check runs every 10 ms, far more often than InnoDB refreshes
/// `information_schema.innodb_trx` for frequent readers, and still sees the
/// wait begin and end.
async fn innodb_lock_waits_and_long_transactions_are_read_as_they_happen(db: &TestDb) {
    let sluice_target::Backend::MySql(pool) = db.store.backend() else {
        unreachable!("a MySQL test")
    };
    db.execute("CREATE TABLE \"rp_LockMe\" (id BIGINT PRIMARY KEY, v INT)")
        .await;
    db.execute("CREATE TABLE rp_free (id BIGINT PRIMARY KEY)")
        .await;
    db.execute("INSERT INTO \"rp_LockMe\" VALUES (1, 0)").await;
    let indicator = InnodbActivity::new(Thresholds {
        throttle_at: 1.0,
        stop_at: 3600.0,
        release: 0.5,
    });
    let context = HealthContext {
        store: db.store.clone(),
        tables: vec!["rp_LockMe".into(), "rp_free".into()],
        operations: Vec::new(),
    };
    let read = || async {
        let readings = indicator.check(&context).await.unwrap();
        let stopped: Vec<Scope> = readings
            .iter()
            .filter(|r| matches!(r.signal, Signal::Stop { .. }))
            .map(|r| r.scope.clone())
            .collect();
        let throttled = readings
            .iter()
            .any(|r| r.scope == Scope::Global && matches!(r.signal, Signal::Throttle { .. }));
        (stopped, throttled)
    };
    assert_eq!(read().await, (vec![], false), "an idle database");

    let mut holder = pool.begin().await.unwrap();
    sqlx::query("UPDATE \"rp_LockMe\" SET v = 1 WHERE id = 1")
        .execute(&mut *holder)
        .await
        .unwrap();
    let waiter = {
        let pool = pool.clone();
        tokio::spawn(async move {
            sqlx::query("UPDATE \"rp_LockMe\" SET v = 2 WHERE id = 1")
                .execute(&pool)
                .await
        })
    };
    let wanted = (vec![Scope::Table("rp_LockMe".into())], true);
    common::until_within(
        "the wait and the open transaction to be read",
        LIMIT,
        || async { read().await == wanted },
    )
    .await;

    holder.rollback().await.unwrap();
    assert_eq!(waiter.await.unwrap().unwrap().rows_affected(), 1);
    common::until_within("the end of the wait to be read", LIMIT, || async {
        read().await == (vec![], false)
    })
    .await;
}

/// A table autovacuum leaves alone (as a busy server's can be) loses 8,000
/// of its 10,000 rows: four times what starts autovacuum on it (50 + 20 %
/// of 10,000), so its operations are throttled, naming the table and its
/// dead rows; a second table is not. A `VACUUM` clears the debt. (The
/// floor of dead rows is lowered from 100,000 to 1,000 for a small table.)
async fn cleanup_debt_throttles_a_table_until_it_is_vacuumed(db: &TestDb) {
    // Autovacuum off for a table: nothing will pay its debt, so it never
    // throttles (it would wait forever). With autovacuum on (for the
    // server, and so for the table), the debt throttles until a vacuum.
    let server_autovacuum = db.text("SELECT current_setting('autovacuum')").await == "on";
    for (table, autovacuum) in [("unpaid", false), ("indebted", true), ("clean", true)] {
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY) WITH (autovacuum_enabled = {autovacuum})"
        ))
        .await;
        db.execute(&format!(
            "INSERT INTO {table} SELECT g FROM generate_series(1, 10000) AS g"
        ))
        .await;
        db.execute(&format!("ANALYZE {table}")).await;
    }
    let indicator = TableActivity::with_min_dead_rows(1_000);
    let context = HealthContext {
        store: db.store.clone(),
        tables: vec!["unpaid".into(), "indebted".into(), "clean".into()],
        operations: Vec::new(),
    };
    let read = |table: &'static str| {
        let (indicator, context) = (&indicator, &context);
        async move {
            let readings = indicator.check(context).await.unwrap();
            assert!(
                readings
                    .iter()
                    .all(|r| r.scope != Scope::Table("clean".into())),
                "{readings:?}"
            );
            readings.into_iter().find_map(|r| match r.signal {
                Signal::Throttle { percent, reason } if r.scope == Scope::Table(table.into()) => {
                    Some((percent, reason))
                }
                _ => None,
            })
        }
    };
    assert_eq!(read("indebted").await, None, "no dead rows yet");

    db.execute("DELETE FROM unpaid WHERE id > 2000").await;
    db.execute("DELETE FROM indebted WHERE id > 2000").await;
    // The dead rows are counted once the deletes' statistics are flushed
    // (within a second): read until the indebted table's are, or (without
    // autovacuum on the server) until the unpaid table's are seen.
    let dead_rows_seen = || async {
        db.scalar("SELECT pg_stat_get_dead_tuples('unpaid'::regclass)")
            .await
            >= 8_000
    };
    common::until_within("the dead rows to be counted", LIMIT, dead_rows_seen).await;
    assert_eq!(
        read("unpaid").await,
        None,
        "a table without autovacuum is never throttled for its debt"
    );
    if !server_autovacuum {
        eprintln!(
            "autovacuum is off on this server: the throttle of a table it would clean is not \
             tried here"
        );
        return;
    }
    common::until_within("the dead rows to be read as debt", LIMIT, || async {
        read("indebted").await.is_some()
    })
    .await;
    let (percent, reason) = read("indebted").await.expect("still in debt");
    assert_eq!(percent, 50);
    assert!(
        reason.starts_with("cleanup debt on indebted: 8000 dead rows"),
        "{reason}"
    );

    db.execute("VACUUM indebted").await;
    common::until_within("the vacuum to clear the debt", LIMIT, || async {
        read("indebted").await.is_none()
    })
    .await;
}

/// Runs `sluice run --until-idle` on `url` with `extra` options.
fn run_on(url: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--until-idle"];
    args.extend_from_slice(extra);
    common::sluice_on(url, &args)
}

/// MySQL: a worker whose user lacks `PROCESS` cannot read InnoDB's status,
/// so lock waits and long transactions could never stop it: it refuses to
/// start (exit 1), naming the indicator and the grant; it starts with
/// those indicators turned off by name; an unknown name is bad input.
async fn a_worker_whose_user_lacks_process_refuses_to_start_naming_the_grant(db: &TestDb) {
    let database = db.url.rsplit('/').next().unwrap().to_owned();
    let user = format!("np_{}", &database[database.len().saturating_sub(20)..]);
    db.execute(&format!("DROP USER IF EXISTS '{user}'@'%'"))
        .await;
    db.execute(&format!("CREATE USER '{user}'@'%'")).await;
    db.execute(&format!("GRANT ALL ON `{database}`.* TO '{user}'@'%'"))
        .await;
    let base = common::mysql_url();
    let url = format!(
        "mysql://{user}@{}/{database}",
        base.trim_start_matches("mysql://")
            .rsplit('@')
            .next()
            .unwrap()
            .trim_end_matches('/')
    );
    let refused = run_on(&url, &[]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("health indicator cannot be read"), "{said}");
    assert!(said.contains("GRANT PROCESS ON *.* TO"), "{said}");
    assert!(said.contains("--without-indicator"), "{said}");
    let unknown = run_on(&url, &["--without-indicator", "innodb"]);
    assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
    let started = run_on(
        &url,
        &[
            "--without-indicator",
            "innodb-activity",
            "--without-indicator",
            "history-list",
        ],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    db.execute(&format!("DROP USER '{user}'@'%'")).await;
}

/// PostgreSQL: a role without `pg_read_all_stats` sees other sessions'
/// transactions, replicas' lags and vacuums emptied — an idle database,
/// always — so a worker refuses to start (exit 1) naming the grant, and
/// starts with those indicators turned off by name.
async fn a_worker_whose_role_sees_no_other_session_refuses_to_start_naming_the_grant(db: &TestDb) {
    let schema = db.schema.clone().unwrap();
    let role = format!("{schema}_worker");
    db.execute(&format!("CREATE ROLE {role} LOGIN")).await;
    db.execute(&format!("GRANT ALL ON SCHEMA {schema} TO {role}"))
        .await;
    db.execute(&format!(
        "GRANT ALL ON ALL TABLES IN SCHEMA {schema} TO {role}"
    ))
    .await;
    db.execute(&format!(
        "GRANT ALL ON ALL SEQUENCES IN SCHEMA {schema} TO {role}"
    ))
    .await;
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let refused = run_on(&url, &[]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("GRANT pg_monitor TO {role}")),
        "{said}"
    );
    let started = run_on(
        &url,
        &[
            "--without-indicator",
            "long-transactions",
            "--without-indicator",
            "replication-lag",
            "--without-indicator",
            "table-activity",
        ],
    );
    assert!(
        started.status.success(),
        "{}",
        String::from_utf8_lossy(&started.stderr)
    );
    db.execute(&format!("DROP OWNED BY {role}")).await;
    db.execute(&format!("DROP ROLE {role}")).await;
}

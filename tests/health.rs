//! The built-in health indicators against real servers: each reads its
//! database without error, MySQL's read lock waits and long-running
//! transactions as they happen, and PostgreSQL's cleanup debt comes and
//! goes with a table's dead rows.

mod common;

use std::time::Duration;

use common::TestDb;
use sluice_runtime::health::{HealthContext, Scope, Thresholds};
use sluice_runtime::indicators::{InnodbActivity, TableActivity, default_indicators};
use sluice_runtime::{HealthIndicator, Signal};

for_each_backend!(every_builtin_indicator_reads_its_database);

mysql_only!(innodb_lock_waits_and_long_transactions_are_read_as_they_happen);

postgres_only!(cleanup_debt_throttles_a_table_until_it_is_vacuumed);

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
    };
    let indicators = default_indicators(&db.store);
    assert!(!indicators.is_empty());
    for indicator in indicators {
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

/// One session holds a row lock on `"rp_LockMe"` and another waits for it:
/// the operations on that table stop, those on `rp_free` do not, and the
/// holder's open transaction throttles every operation once a second old.
/// The check runs every 10 ms, far more often than InnoDB refreshes
/// `information_schema.innodb_trx` for frequent readers, and still sees the
/// wait begin and end.
async fn innodb_lock_waits_and_long_transactions_are_read_as_they_happen(db: &TestDb) {
    let sluice_store::Backend::MySql(pool) = db.store.backend() else {
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
    for table in ["indebted", "clean"] {
        db.execute(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY) WITH (autovacuum_enabled = false)"
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
        tables: vec!["indebted".into(), "clean".into()],
    };
    let read = || async {
        let readings = indicator.check(&context).await.unwrap();
        assert!(
            readings
                .iter()
                .all(|r| r.scope != Scope::Table("clean".into())),
            "{readings:?}"
        );
        readings.into_iter().find_map(|r| match r.signal {
            Signal::Throttle { percent, reason } => Some((percent, reason)),
            _ => None,
        })
    };
    assert_eq!(read().await, None, "no dead rows yet");

    db.execute("DELETE FROM indebted WHERE id > 2000").await;
    common::until_within("the dead rows to be read as debt", LIMIT, || async {
        read().await.is_some()
    })
    .await;
    let (percent, reason) = read().await.expect("still in debt");
    assert_eq!(percent, 50);
    assert!(
        reason.starts_with("cleanup debt on indebted: 8000 dead rows"),
        "{reason}"
    );

    db.execute("VACUUM indebted").await;
    common::until_within("the vacuum to clear the debt", LIMIT, || async {
        read().await.is_none()
    })
    .await;
}

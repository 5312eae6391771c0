//! Built-in health indicators.
//!
//! PostgreSQL: long-running transactions, lock waits on target tables,
//! autovacuum on target tables, cleanup debt (dead rows autovacuum has not
//! caught up with) on target tables, replication lag of connected replicas
//! (none connected: silent), connection saturation. SQLite: the write-ahead log's
//! un-checkpointed backlog (a growing WAL means writers outpace checkpoints).
//! MySQL and MariaDB: long-running transactions and lock waits on target
//! tables (from InnoDB's status report), `Threads_running`, and InnoDB's
//! history list length (purge lag).
//! Each reads system views with static SQL; thresholds are plain fields.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use sluice_store::{Backend, Ident, Store};

use crate::health::{HealthContext, HealthIndicator, Reading, Scope, Signal, Thresholds};
use crate::innodb_status::InnodbTransactions;

/// The built-in indicators for the store's backend, with default thresholds.
pub fn default_indicators(store: &Store) -> Vec<Arc<dyn HealthIndicator>> {
    let mut indicators = backend_indicators(store);
    indicators.push(Arc::new(crate::latency::LatencyCanary::new()));
    indicators
}

/// The indicators that read the backend's own system views.
fn backend_indicators(store: &Store) -> Vec<Arc<dyn HealthIndicator>> {
    match store.backend() {
        Backend::Postgres(_) => vec![
            longest_transaction(),
            Arc::new(ValueIndicator::new(
                Measure::ReplicationLagSeconds,
                Thresholds {
                    throttle_at: 5.0,
                    stop_at: 30.0,
                    release: 0.6,
                },
            )),
            Arc::new(ValueIndicator::new(
                Measure::ConnectionsUsedPercent,
                Thresholds {
                    throttle_at: 80.0,
                    stop_at: 95.0,
                    release: 0.9,
                },
            )),
            Arc::new(TableActivity::new()),
        ],
        Backend::MySql(_) => vec![
            Arc::new(InnodbActivity::new(LONGEST_TRANSACTION)),
            Arc::new(ValueIndicator::new(
                Measure::MySqlThreadsRunning,
                Thresholds {
                    throttle_at: 25.0,
                    stop_at: 50.0,
                    release: 0.8,
                },
            )),
            Arc::new(ValueIndicator::new(
                Measure::MySqlHistoryListLength,
                Thresholds {
                    throttle_at: 1_000_000.0,
                    stop_at: 5_000_000.0,
                    release: 0.5,
                },
            )),
        ],
        Backend::Sqlite(_) => vec![Arc::new(ValueIndicator::new(
            Measure::SqliteWalBacklogPages,
            Thresholds {
                throttle_at: 20_000.0,
                stop_at: 80_000.0,
                release: 0.5,
            },
        ))],
    }
}

/// Long-running transactions: throttled past a minute, stopped past five.
const LONGEST_TRANSACTION: Thresholds = Thresholds {
    throttle_at: 60.0,
    stop_at: 300.0,
    release: 0.8,
};

/// PostgreSQL's long-running transactions ([`LONGEST_TRANSACTION`]).
fn longest_transaction() -> Arc<dyn HealthIndicator> {
    Arc::new(ValueIndicator::new(
        Measure::LongestTransactionSeconds,
        LONGEST_TRANSACTION,
    ))
}

/// What a [`ValueIndicator`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// PostgreSQL: age in seconds of the oldest open transaction of another
    /// session (on MySQL, [`InnodbActivity`] reads it).
    LongestTransactionSeconds,
    /// The largest replay lag of a connected replica, in seconds (0 without replicas).
    ReplicationLagSeconds,
    /// Sessions as a percentage of `max_connections`.
    ConnectionsUsedPercent,
    /// SQLite: WAL frames not yet checkpointed (after a passive checkpoint).
    SqliteWalBacklogPages,
    /// MySQL: threads executing a statement now (`Threads_running`, as
    /// gh-ost's `--max-load` reads it).
    MySqlThreadsRunning,
    /// MySQL: InnoDB's history list length, the undo records purge has yet
    /// to clean (a mass delete drives it up).
    MySqlHistoryListLength,
}

/// A global indicator from one measured value and its thresholds.
pub struct ValueIndicator {
    measure: Measure,
    thresholds: Thresholds,
    previous: Mutex<Signal>,
}

impl ValueIndicator {
    /// Measures `measure` against `thresholds`.
    pub fn new(measure: Measure, thresholds: Thresholds) -> Self {
        ValueIndicator {
            measure,
            thresholds,
            previous: Mutex::new(Signal::Normal),
        }
    }

    async fn measure(&self, store: &Store) -> Result<Option<f64>, sqlx::Error> {
        Ok(match (self.measure, store.backend()) {
            (Measure::LongestTransactionSeconds, Backend::Postgres(pool)) => {
                sqlx::query_scalar(
                    "SELECT COALESCE(EXTRACT(EPOCH FROM max(now() - xact_start)), 0)::float8 \
                     FROM pg_stat_activity WHERE xact_start IS NOT NULL AND pid <> pg_backend_pid() \
                     AND state <> 'idle' AND backend_type = 'client backend'",
                )
                .fetch_one(pool)
                .await?
            }
            (Measure::ReplicationLagSeconds, Backend::Postgres(pool)) => {
                sqlx::query_scalar(
                    "SELECT COALESCE(EXTRACT(EPOCH FROM max(replay_lag)), 0)::float8 FROM pg_stat_replication",
                )
                .fetch_one(pool)
                .await?
            }
            (Measure::ConnectionsUsedPercent, Backend::Postgres(pool)) => {
                sqlx::query_scalar(
                    "SELECT (100.0 * count(*) / current_setting('max_connections')::float8)::float8 \
                     FROM pg_stat_activity WHERE backend_type = 'client backend'",
                )
                .fetch_one(pool)
                .await?
            }
            (Measure::MySqlThreadsRunning, Backend::MySql(pool)) => {
                // `SHOW`, not `information_schema.global_status` (gone in
                // MySQL 8), over the text protocol (MySQL 8 prepares no
                // `SHOW STATUS`).
                use sqlx::Row as _;
                let running = sqlx::raw_sql("SHOW GLOBAL STATUS LIKE 'Threads_running'")
                    .fetch_optional(pool)
                    .await?;
                running.and_then(|row| row.try_get::<String, _>(1).ok()?.parse().ok())
            }
            (Measure::MySqlHistoryListLength, Backend::MySql(pool)) => {
                let length: Option<i64> = sqlx::query_scalar(
                    "SELECT CAST(count AS SIGNED) FROM information_schema.innodb_metrics \
                     WHERE name = 'trx_rseg_history_len'",
                )
                .fetch_optional(pool)
                .await?;
                length.map(|n| n as f64)
            }
            (Measure::SqliteWalBacklogPages, Backend::Sqlite(pool)) => {
                let (_busy, log, done): (i64, i64, i64) =
                    sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
                        .fetch_one(pool)
                        .await?;
                Some((log - done).max(0) as f64)
            }
            _ => None,
        })
    }
}

impl Measure {
    /// The indicator's id, as `--without-indicator` takes it.
    pub fn id(self) -> &'static str {
        match self {
            Measure::LongestTransactionSeconds => "long-transactions",
            Measure::ReplicationLagSeconds => "replication-lag",
            Measure::ConnectionsUsedPercent => "connections",
            Measure::SqliteWalBacklogPages => "wal-backlog",
            Measure::MySqlThreadsRunning => "threads-running",
            Measure::MySqlHistoryListLength => "history-list",
        }
    }

    /// Whether reading it needs PostgreSQL's statistics of other sessions,
    /// which a role without `pg_read_all_stats` (or `pg_monitor`) sees
    /// emptied: a silent zero, not an error.
    fn needs_all_stats(self) -> bool {
        matches!(
            self,
            Measure::LongestTransactionSeconds | Measure::ReplicationLagSeconds
        )
    }
}

#[async_trait]
impl HealthIndicator for ValueIndicator {
    fn id(&self) -> &str {
        self.measure.id()
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        if self.measure.needs_all_stats() {
            sees_all_sessions(store).await?;
        }
        match self.measure(store).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("the database answers nothing for it".into()),
            Err(error) => Err(unreadable(store, &error).await),
        }
    }

    fn name(&self) -> &str {
        match self.measure {
            Measure::LongestTransactionSeconds => "long-running transactions",
            Measure::ReplicationLagSeconds => "replication lag",
            Measure::ConnectionsUsedPercent => "connection saturation",
            Measure::SqliteWalBacklogPages => "WAL backlog",
            Measure::MySqlThreadsRunning => "threads running",
            Measure::MySqlHistoryListLength => "InnoDB history list length",
        }
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        let Some(value) = self
            .measure(&context.store)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Err("the database answered nothing".into());
        };
        let mut previous = self.previous.lock().expect("indicator state lock");
        let signal = self.thresholds.classify(value, &previous, self.name());
        *previous = signal.clone();
        Ok(vec![Reading {
            scope: Scope::Global,
            signal,
        }])
    }
}

/// PostgreSQL, per target table: sessions waiting for a lock on it stop its
/// operations (they would only add to the queue); autovacuum working on it
/// throttles them to half speed, and so does cleanup debt: dead rows
/// numbering twice what starts autovacuum on the table (the vacuum
/// threshold plus the scale factor times its rows, the table's own
/// settings first) and at least a floor mean it is dirtied faster than it
/// is cleaned. The debt lasts until the dead rows fall below what starts
/// autovacuum (hysteresis: in at 2×, out at 1×). Where autovacuum is off
/// (for the server or the table) nothing will pay the debt, so it does not
/// throttle: that is logged once, with the remedy.
pub struct TableActivity {
    min_dead_rows: i64,
    in_debt: Mutex<HashSet<String>>,
    /// Tables in debt without autovacuum, already said.
    told: Mutex<HashSet<String>>,
}

impl TableActivity {
    /// The default floor of cleanup debt: fewer dead rows are never worth
    /// slowing down for, whatever a small table's trigger is.
    pub const MIN_DEAD_ROWS: i64 = 100_000;

    /// Lock waits, autovacuum, and cleanup debt of at least
    /// [`TableActivity::MIN_DEAD_ROWS`] dead rows.
    pub fn new() -> Self {
        Self::with_min_dead_rows(Self::MIN_DEAD_ROWS)
    }

    /// The same with cleanup debt from `min_dead_rows` dead rows.
    pub fn with_min_dead_rows(min_dead_rows: i64) -> Self {
        TableActivity {
            min_dead_rows,
            in_debt: Mutex::new(HashSet::new()),
            told: Mutex::new(HashSet::new()),
        }
    }
}

impl Default for TableActivity {
    fn default() -> Self {
        Self::new()
    }
}

/// Per target table (`$1`: a JSON array of `[name as given, quoted name]`):
/// the sessions waiting for a lock on it, whether a vacuum is working on
/// it, its dead rows, and how many dead rows start autovacuum on it. The
/// dead rows come from `pg_stat_get_dead_tuples`, not the
/// `pg_stat_all_tables` view, which the planner builds for every relation
/// of the database before the join (over 100 ms a poll with a few hundred
/// tables, against about 1 ms).
const TABLE_ACTIVITY: &str = "\
    SELECT t.name, \
      (SELECT count(*) FROM pg_locks l WHERE NOT l.granted AND l.relation = c.oid), \
      EXISTS (SELECT 1 FROM pg_stat_progress_vacuum v WHERE v.relid = c.oid), \
      pg_stat_get_dead_tuples(c.oid), \
      (COALESCE(own.threshold, current_setting('autovacuum_vacuum_threshold')::float8) \
       + COALESCE(own.scale, current_setting('autovacuum_vacuum_scale_factor')::float8) \
         * GREATEST(c.reltuples, 0))::float8, \
      current_setting('autovacuum')::bool AND COALESCE(own.enabled, true) \
    FROM jsonb_array_elements($1::jsonb) AS e(pair) \
    CROSS JOIN LATERAL (SELECT e.pair->>0 AS name, e.pair->>1 AS quoted) AS t \
    JOIN pg_class c ON c.oid = to_regclass(t.quoted) \
    CROSS JOIN LATERAL ( \
      SELECT max(CASE WHEN o.option_name = 'autovacuum_vacuum_threshold' \
                      THEN o.option_value::float8 END) AS threshold, \
             max(CASE WHEN o.option_name = 'autovacuum_vacuum_scale_factor' \
                      THEN o.option_value::float8 END) AS scale, \
             bool_and(CASE WHEN o.option_name = 'autovacuum_enabled' \
                      THEN o.option_value::bool END) AS enabled \
      FROM pg_options_to_table(c.reloptions) o) AS own";

#[async_trait]
impl HealthIndicator for TableActivity {
    fn name(&self) -> &str {
        "lock waits, autovacuum and cleanup debt"
    }

    fn id(&self) -> &str {
        "table-activity"
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        let Backend::Postgres(pool) = store.backend() else {
            return Ok(());
        };
        sees_all_sessions(store).await?;
        let read: Result<Vec<(String, i64, bool, i64, f64, bool)>, _> =
            sqlx::query_as(TABLE_ACTIVITY)
                .bind("[]")
                .fetch_all(pool)
                .await;
        match read {
            Ok(_) => Ok(()),
            Err(error) => Err(unreadable(store, &error).await),
        }
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        let Backend::Postgres(pool) = context.store.backend() else {
            return Ok(Vec::new());
        };
        if context.tables.is_empty() {
            return Ok(Vec::new());
        }
        let tables =
            serde_json::to_string(&named_and_quoted(&context.tables)).map_err(|e| e.to_string())?;
        let rows: Vec<(String, i64, bool, i64, f64, bool)> = sqlx::query_as(TABLE_ACTIVITY)
            .bind(tables)
            .fetch_all(pool)
            .await
            .map_err(|e| e.to_string())?;
        let mut in_debt = self.in_debt.lock().expect("indicator state lock");
        let mut told = self.told.lock().expect("indicator state lock");
        Ok(rows
            .into_iter()
            .filter_map(|(table, waiting, vacuuming, dead, trigger, autovacuum)| {
                let owed = in_cleanup_debt(dead, trigger, self.min_dead_rows, in_debt.contains(&table));
                if owed {
                    in_debt.insert(table.clone());
                } else {
                    in_debt.remove(&table);
                    told.remove(&table);
                }
                // Without autovacuum nothing will pay the debt: a throttle
                // would wait forever. Said once, with the remedy.
                let owed = owed && autovacuum;
                if in_debt.contains(&table) && !autovacuum && told.insert(table.clone()) {
                    tracing::warn!(%table, dead, "cleanup debt, but autovacuum is off for this table: not throttling for it; VACUUM the table, or turn autovacuum on");
                }
                let signal = if waiting > 0 {
                    Signal::Stop {
                        reason: format!("{waiting} session(s) waiting for a lock on {table}"),
                    }
                } else if vacuuming {
                    Signal::Throttle {
                        percent: 50,
                        reason: format!("autovacuum is working on {table}"),
                    }
                } else if owed {
                    Signal::Throttle {
                        percent: 50,
                        reason: format!(
                            "cleanup debt on {table}: {dead} dead rows, {:.1}× what starts autovacuum ({trigger:.0})",
                            dead as f64 / trigger.max(1.0)
                        ),
                    }
                } else {
                    return None;
                };
                Some(Reading {
                    scope: Scope::Table(table),
                    signal,
                })
            })
            .collect())
    }
}

/// Whether a table with `dead` dead rows, whose autovacuum starts at
/// `trigger`, is in cleanup debt, given whether it `was` at the last poll.
fn in_cleanup_debt(dead: i64, trigger: f64, min_dead_rows: i64, was: bool) -> bool {
    let dead_f = dead as f64;
    if was {
        dead_f >= trigger
    } else {
        dead >= min_dead_rows && dead_f >= 2.0 * trigger
    }
}

/// Each table name as given (the scope its readings carry) and quoted, so
/// `to_regclass` finds `"rp_LockMe"` and `"app"."events"` as created.
fn named_and_quoted(tables: &[String]) -> Vec<(&str, String)> {
    tables
        .iter()
        .filter_map(|t| Some((t.as_str(), Ident::parse(t).ok()?.quoted())))
        .collect()
}

/// MySQL and MariaDB, from one `SHOW ENGINE INNODB STATUS` per poll (it
/// needs the `PROCESS` privilege): the oldest open transaction, against
/// `thresholds` like PostgreSQL's long-running transactions (a global
/// reading), and per target table the sessions waiting for a lock on it,
/// which stop its operations as on PostgreSQL. The report is read rather
/// than `information_schema.innodb_trx`, a cache that frequent pollers keep
/// from refreshing ([`crate::innodb_status`]).
pub struct InnodbActivity {
    thresholds: Thresholds,
    previous: Mutex<Signal>,
}

impl InnodbActivity {
    /// Long-running transactions measured against `thresholds` (seconds).
    pub fn new(thresholds: Thresholds) -> Self {
        InnodbActivity {
            thresholds,
            previous: Mutex::new(Signal::Normal),
        }
    }
}

#[async_trait]
impl HealthIndicator for InnodbActivity {
    fn name(&self) -> &str {
        "long-running transactions and lock waits"
    }

    fn id(&self) -> &str {
        "innodb-activity"
    }

    async fn readable(&self, store: &Store) -> Result<(), String> {
        let Backend::MySql(pool) = store.backend() else {
            return Ok(());
        };
        match sqlx::raw_sql("SHOW ENGINE INNODB STATUS")
            .fetch_one(pool)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) => Err(unreadable(store, &error).await),
        }
    }

    async fn check(&self, context: &HealthContext) -> Result<Vec<Reading>, String> {
        let Backend::MySql(pool) = context.store.backend() else {
            return Ok(Vec::new());
        };
        let failed = |e: sqlx::Error| e.to_string();
        // Over the text protocol: MySQL 8 prepares no `SHOW ENGINE`.
        let report: String = sqlx::raw_sql("SHOW ENGINE INNODB STATUS")
            .fetch_one(pool)
            .await
            .and_then(|row| sqlx::Row::try_get(&row, 2))
            .map_err(failed)?;
        let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
            .fetch_one(pool)
            .await
            .map_err(failed)?;
        let transactions = InnodbTransactions::parse(&report);
        let global = {
            let mut previous = self.previous.lock().expect("indicator state lock");
            *previous = self.thresholds.classify(
                transactions.longest_seconds as f64,
                &previous,
                "long-running transactions",
            );
            previous.clone()
        };
        let mut readings = vec![Reading {
            scope: Scope::Global,
            signal: global,
        }];
        for table in &context.tables {
            let Ok(ident) = Ident::parse(table) else {
                continue;
            };
            let Some(schema) = ident.schema().or(database.as_deref()) else {
                continue;
            };
            let waiting = transactions.waits_on(schema, ident.name());
            if waiting > 0 {
                readings.push(Reading {
                    scope: Scope::Table(table.clone()),
                    signal: Signal::Stop {
                        reason: format!("{waiting} session(s) waiting for a lock on {table}"),
                    },
                });
            }
        }
        Ok(readings)
    }
}

/// PostgreSQL: refuses a role that sees other sessions' statistics emptied
/// (`pg_stat_activity`'s times, `pg_stat_replication`'s lags, vacuum
/// progress): without `pg_read_all_stats` they read as an idle database.
async fn sees_all_sessions(store: &Store) -> Result<(), String> {
    let Backend::Postgres(pool) = store.backend() else {
        return Ok(());
    };
    let (sees, role): (bool, String) =
        sqlx::query_as("SELECT pg_has_role('pg_read_all_stats', 'USAGE'), current_user::text")
            .fetch_one(pool)
            .await
            .map_err(|e| e.to_string())?;
    if sees {
        return Ok(());
    }
    Err(format!(
        "role {role} sees other sessions' statistics emptied, so this indicator would always \
         read as normal; grant it: GRANT pg_monitor TO {role}"
    ))
}

/// What a failed read of an indicator means, with the grant it needs when
/// the database refused a privilege (MySQL's `PROCESS`, error 1227; a
/// PostgreSQL permission, 42501).
async fn unreadable(store: &Store, error: &sqlx::Error) -> String {
    let code = error
        .as_database_error()
        .and_then(|e| e.code().map(|c| c.into_owned()));
    match (store.backend(), code.as_deref()) {
        (Backend::MySql(pool), _) if error.to_string().contains("PROCESS") => {
            let user: String = sqlx::query_scalar("SELECT CAST(CURRENT_USER() AS CHAR)")
                .fetch_one(pool)
                .await
                .unwrap_or_else(|_| "the worker's user".into());
            let (name, host) = user.split_once('@').unwrap_or((&user, "%"));
            format!(
                "the worker's user lacks the PROCESS privilege ({error}); grant it: GRANT PROCESS \
                 ON *.* TO '{name}'@'{host}'"
            )
        }
        (Backend::Postgres(_), Some("42501")) => format!(
            "the worker's role may not read it ({error}); grant it: GRANT pg_monitor TO <role>"
        ),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::in_cleanup_debt;

    #[test]
    fn cleanup_debt_starts_at_twice_the_trigger_and_ends_below_it() {
        // Not in debt: needs both twice the trigger and the floor.
        assert!(!in_cleanup_debt(150_000, 100_000.0, 100_000, false));
        assert!(in_cleanup_debt(200_000, 100_000.0, 100_000, false));
        assert!(
            !in_cleanup_debt(90_000, 10_000.0, 100_000, false),
            "under the floor"
        );
        // In debt: stays until under the trigger itself.
        assert!(in_cleanup_debt(150_000, 100_000.0, 100_000, true));
        assert!(in_cleanup_debt(100_000, 100_000.0, 100_000, true));
        assert!(!in_cleanup_debt(99_999, 100_000.0, 100_000, true));
    }
}
